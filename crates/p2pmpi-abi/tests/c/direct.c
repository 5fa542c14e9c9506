/* Requests of MPI_Isend, MPI_Issend and MPI_Irecv in the common case (MPI_COMM_WORLD, a
 * predefined datatype), which the MPICH handles hold directly: completed by MPI_Test,
 * MPI_Wait and MPI_Waitall, and by every other function of requests (MPI_Testany,
 * MPI_Waitsome, MPI_Cancel, MPI_Request_get_status, MPI_Request_free, MPI_Waitall with a
 * nonblocking collective), with statuses and errors. A ring:
 * each rank sends to the next and receives from the previous. Run on 3 processes, also
 * replicated (every test a choice point). */
#include <mpi.h>
#include <stdio.h>

#define ROUNDS 200

int main(int argc, char **argv) {
    int rank, size, next, prev, i, flag, polls = 0, sum = 0, idx, outcount, done, cancelled, rc, cls, tries;
    int x, y, freed, big[4], small[2], many[8], got[8], idxs[8];
    MPI_Request r, s, rs[8];
    MPI_Status st, sts[8];

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    next = (rank + 1) % size;
    prev = (rank + size - 1) % size;

    /* Rounds of a receive from any source and a send, polled by MPI_Test. */
    for (i = 0; i < ROUNDS; i++) {
        x = rank * 1000 + i;
        y = -1;
        MPI_Irecv(&y, 1, MPI_INT, MPI_ANY_SOURCE, 7, MPI_COMM_WORLD, &r);
        MPI_Isend(&x, 1, MPI_INT, next, 7, MPI_COMM_WORLD, &s);
        for (flag = 0; !flag;) {
            MPI_Test(&r, &flag, &st);
            polls++;
        }
        if (st.MPI_SOURCE != prev || st.MPI_TAG != 7 || y != prev * 1000 + i || r != MPI_REQUEST_NULL) break;
        MPI_Get_count(&st, MPI_INT, &flag);
        if (flag != 1) break;
        MPI_Wait(&s, MPI_STATUS_IGNORE);
        if (s != MPI_REQUEST_NULL) break;
        sum += y - prev * 1000;
    }
    printf("direct %d: rounds %d sum %d polled %d\n", rank, i, sum, polls >= i);

    /* A synchronous send, polled until the receiver matched it. */
    x = 40 + rank;
    MPI_Issend(&x, 1, MPI_INT, next, 8, MPI_COMM_WORLD, &s);
    MPI_Recv(&y, 1, MPI_INT, prev, 8, MPI_COMM_WORLD, &st);
    for (flag = 0; !flag;) MPI_Test(&s, &flag, MPI_STATUS_IGNORE);
    printf("direct %d: issend got %d\n", rank, y);

    /* Eight direct requests (sends finished on the spot among them) completed by
     * MPI_Waitall, then by MPI_Testany and MPI_Waitsome. */
    for (i = 0; i < 4; i++) {
        many[i] = rank * 10 + i;
        MPI_Isend(&many[i], 1, MPI_INT, next, 20 + i, MPI_COMM_WORLD, &rs[i]);
        MPI_Irecv(&got[i], 1, MPI_INT, prev, 20 + i, MPI_COMM_WORLD, &rs[4 + i]);
    }
    MPI_Waitall(8, rs, sts);
    for (i = 0, done = 1; i < 8; i++) done &= rs[i] == MPI_REQUEST_NULL;
    printf("direct %d: waitall %d %d %d %d source %d tag %d nulls %d\n", rank, got[0], got[1], got[2], got[3],
           sts[7].MPI_SOURCE, sts[7].MPI_TAG, done);
    for (i = 0; i < 4; i++) {
        MPI_Irecv(&got[i], 1, MPI_INT, prev, 30 + i, MPI_COMM_WORLD, &rs[i]);
        MPI_Isend(&many[i], 1, MPI_INT, next, 30 + i, MPI_COMM_WORLD, &rs[4 + i]);
    }
    for (done = 0, tries = 0; done < 4;) {
        MPI_Testany(4, rs, &idx, &flag, &st);
        if (flag && idx != MPI_UNDEFINED) done++;
        if (++tries > 100000000) break;
    }
    for (done = 0; done < 4;) {
        MPI_Waitsome(4, rs + 4, &outcount, idxs, sts);
        if (outcount == MPI_UNDEFINED) break;
        done += outcount;
    }
    printf("direct %d: testany waitsome %d %d %d %d\n", rank, got[0], got[1], got[2], got[3]);

    /* The status of a direct request without completing it, then its wait. */
    x = 50 + rank;
    MPI_Irecv(&y, 1, MPI_INT, prev, 9, MPI_COMM_WORLD, &r);
    MPI_Send(&x, 1, MPI_INT, next, 9, MPI_COMM_WORLD);
    for (flag = 0; !flag;) MPI_Request_get_status(r, &flag, &st);
    MPI_Wait(&r, &st);
    printf("direct %d: get_status source %d then wait %d\n", rank, st.MPI_SOURCE, y);

    /* A receive cancelled, a send freed before it completes. */
    MPI_Irecv(&y, 1, MPI_INT, prev, 99, MPI_COMM_WORLD, &r);
    MPI_Cancel(&r);
    MPI_Wait(&r, &st);
    MPI_Test_cancelled(&st, &cancelled);
    /* (Its buffer is never written again: a freed send may read it at any later time.) */
    freed = 60 + rank;
    MPI_Isend(&freed, 1, MPI_INT, next, 10, MPI_COMM_WORLD, &s);
    MPI_Request_free(&s);
    MPI_Recv(&y, 1, MPI_INT, prev, 10, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    printf("direct %d: cancelled %d freed %d got %d\n", rank, cancelled, s == MPI_REQUEST_NULL, y);

    /* A direct request and a nonblocking collective in one MPI_Waitall (the general way). */
    x = 80 + rank;
    MPI_Irecv(&y, 1, MPI_INT, prev, 15, MPI_COMM_WORLD, &rs[0]);
    MPI_Ibarrier(MPI_COMM_WORLD, &rs[1]);
    MPI_Isend(&x, 1, MPI_INT, next, 15, MPI_COMM_WORLD, &rs[2]);
    MPI_Waitall(3, rs, sts);
    printf("direct %d: mixed waitall got %d source %d\n", rank, y, sts[0].MPI_SOURCE);

    /* Truncation answered by MPI_Test and by MPI_Wait (errors returned): the request is
     * freed. */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    for (i = 0; i < 4; i++) big[i] = rank + i;
    MPI_Irecv(small, 2, MPI_INT, prev, 11, MPI_COMM_WORLD, &r);
    MPI_Send(big, 4, MPI_INT, next, 11, MPI_COMM_WORLD);
    for (flag = 0, rc = MPI_SUCCESS; !flag && rc == MPI_SUCCESS;) rc = MPI_Test(&r, &flag, &st);
    MPI_Error_class(rc, &cls);
    printf("direct %d: test truncated %d null %d\n", rank, cls == MPI_ERR_TRUNCATE, r == MPI_REQUEST_NULL);
    MPI_Irecv(small, 2, MPI_INT, prev, 12, MPI_COMM_WORLD, &r);
    MPI_Send(big, 4, MPI_INT, next, 12, MPI_COMM_WORLD);
    rc = MPI_Wait(&r, &st);
    MPI_Error_class(rc, &cls);
    printf("direct %d: wait truncated %d null %d\n", rank, cls == MPI_ERR_TRUNCATE, r == MPI_REQUEST_NULL);

    /* And by MPI_Waitall: MPI_ERR_IN_STATUS, the failed request's status holding its class,
     * the others' MPI_SUCCESS, every request waited for and freed. */
    MPI_Irecv(small, 2, MPI_INT, prev, 13, MPI_COMM_WORLD, &rs[0]);
    MPI_Irecv(&y, 1, MPI_INT, prev, 14, MPI_COMM_WORLD, &rs[1]);
    rs[2] = MPI_REQUEST_NULL;
    MPI_Send(big, 4, MPI_INT, next, 13, MPI_COMM_WORLD);
    x = 70 + rank;
    MPI_Send(&x, 1, MPI_INT, next, 14, MPI_COMM_WORLD);
    rc = MPI_Waitall(3, rs, sts);
    printf("direct %d: waitall in status %d truncated %d ok %d got %d nulls %d\n", rank, rc == MPI_ERR_IN_STATUS,
           sts[0].MPI_ERROR == MPI_ERR_TRUNCATE, sts[1].MPI_ERROR == MPI_SUCCESS && sts[1].MPI_SOURCE == prev, y,
           rs[0] == MPI_REQUEST_NULL && rs[1] == MPI_REQUEST_NULL);

    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Finalize();
    return 0;
}
