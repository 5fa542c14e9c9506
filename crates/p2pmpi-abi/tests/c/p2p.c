/* Point-to-point: each part prints the values it computed, which the test checks. */
#include <mpi.h>
#include <stdio.h>
#include <stdint.h>

int main(int argc, char **argv) {
    int rank, size, next, prev, i, token, count, flag;
    MPI_Status st;
    MPI_Request reqs[4];

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    next = (rank + 1) % size;
    prev = (rank + size - 1) % size;

    /* A ring: rank 0 starts a token, each rank adds its rank + 1. */
    if (rank == 0) {
        token = 1;
        MPI_Send(&token, 1, MPI_INT, next, 7, MPI_COMM_WORLD);
        MPI_Recv(&token, 1, MPI_INT, prev, 7, MPI_COMM_WORLD, &st);
        printf("ring: token %d source %d tag %d\n", token, st.MPI_SOURCE, st.MPI_TAG);
    } else {
        MPI_Recv(&token, 1, MPI_INT, prev, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        token += rank + 1;
        MPI_Send(&token, 1, MPI_INT, next, 7, MPI_COMM_WORLD);
    }

    /* Nonblocking exchange with both neighbours, doubles and 64-bit integers. */
    {
        double out = rank * 1.5, in_prev = -1, in_next = -1;
        int64_t big = (int64_t)rank << 40, got = 0;
        MPI_Status sts[4];
        MPI_Irecv(&in_prev, 1, MPI_DOUBLE, prev, 1, MPI_COMM_WORLD, &reqs[0]);
        MPI_Irecv(&got, 1, MPI_INT64_T, next, 2, MPI_COMM_WORLD, &reqs[1]);
        MPI_Isend(&out, 1, MPI_DOUBLE, next, 1, MPI_COMM_WORLD, &reqs[2]);
        MPI_Isend(&big, 1, MPI_INT64_T, prev, 2, MPI_COMM_WORLD, &reqs[3]);
        MPI_Waitall(4, reqs, sts);
        (void)in_next;
        printf("nonblocking %d: from prev %.1f from next %lld status %d/%d nulls %d\n", rank, in_prev,
               (long long)(got >> 40), sts[0].MPI_SOURCE, sts[1].MPI_TAG,
               reqs[0] == MPI_REQUEST_NULL && reqs[3] == MPI_REQUEST_NULL);
    }

    /* Sendrecv: shift right by one. */
    {
        long out = 100 + rank, in = -1;
        MPI_Sendrecv(&out, 1, MPI_LONG, next, 3, &in, 1, MPI_LONG, prev, 3, MPI_COMM_WORLD, &st);
        printf("sendrecv %d: got %ld from %d\n", rank, in, st.MPI_SOURCE);
    }

    /* Sendrecv_replace: shift left by one, in place. */
    {
        double v = rank + 0.25;
        MPI_Sendrecv_replace(&v, 1, MPI_DOUBLE, prev, 8, next, 8, MPI_COMM_WORLD, &st);
        printf("replace %d: got %.2f from %d\n", rank, v, st.MPI_SOURCE);
    }

    /* Probe and Get_count: rank 0 receives a message of unknown length from each other rank. */
    if (rank == 0) {
        for (i = 1; i < size; i++) {
            short buf[64];
            int bytes;
            MPI_Probe(MPI_ANY_SOURCE, 4, MPI_COMM_WORLD, &st);
            MPI_Get_count(&st, MPI_SHORT, &count);
            MPI_Get_count(&st, MPI_BYTE, &bytes);
            MPI_Recv(buf, count, MPI_SHORT, st.MPI_SOURCE, 4, MPI_COMM_WORLD, &st);
            printf("probe: from %d count %d bytes %d last %d\n", st.MPI_SOURCE, count, bytes, buf[count - 1]);
        }
    } else {
        short buf[64];
        for (i = 0; i < rank * 3; i++) buf[i] = (short)(rank * 10 + i);
        MPI_Send(buf, rank * 3, MPI_SHORT, 0, 4, MPI_COMM_WORLD);
    }

    /* Iprobe and Test polling, synchronous and ready modes. */
    if (rank == 1) {
        unsigned char c = 200;
        MPI_Ssend(&c, 1, MPI_UNSIGNED_CHAR, 0, 5, MPI_COMM_WORLD);
        MPI_Rsend(&c, 1, MPI_UNSIGNED_CHAR, 0, 6, MPI_COMM_WORLD);
    } else if (rank == 0) {
        unsigned char a = 0, b = 0;
        MPI_Request r;
        int polls = 0;
        do {
            MPI_Iprobe(1, 5, MPI_COMM_WORLD, &flag, &st);
            polls++;
        } while (!flag);
        MPI_Recv(&a, 1, MPI_UNSIGNED_CHAR, 1, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Irecv(&b, 1, MPI_UNSIGNED_CHAR, 1, MPI_ANY_TAG, MPI_COMM_WORLD, &r);
        flag = 0;
        while (!flag) MPI_Test(&r, &flag, &st);
        printf("modes: ssend %d rsend %d tag %d polled %d request null %d\n", a, b, st.MPI_TAG, polls > 0,
               r == MPI_REQUEST_NULL);
    }

    /* The null process and the null request. */
    {
        int x = 5;
        MPI_Request r = MPI_REQUEST_NULL;
        MPI_Recv(&x, 1, MPI_INT, MPI_PROC_NULL, 0, MPI_COMM_WORLD, &st);
        MPI_Get_count(&st, MPI_INT, &count);
        MPI_Wait(&r, MPI_STATUS_IGNORE);
        printf("null %d: source %d tag %d count %d x %d\n", rank, st.MPI_SOURCE, st.MPI_TAG, count, x);
    }

    /* Waitany over requests from every other rank to rank 0. */
    if (rank == 0 && size > 1) {
        int vals[64], idx, sum = 0;
        MPI_Request rs[64];
        for (i = 1; i < size; i++) MPI_Irecv(&vals[i], 1, MPI_INT, i, 9, MPI_COMM_WORLD, &rs[i - 1]);
        for (i = 1; i < size; i++) {
            MPI_Waitany(size - 1, rs, &idx, &st);
            sum += vals[idx + 1];
        }
        MPI_Waitany(size - 1, rs, &idx, &st);
        printf("waitany: sum %d then %d\n", sum, idx == MPI_UNDEFINED);
    } else if (rank > 0) {
        int v = rank * rank;
        MPI_Send(&v, 1, MPI_INT, 0, 9, MPI_COMM_WORLD);
    }

    MPI_Finalize();
    return 0;
}
