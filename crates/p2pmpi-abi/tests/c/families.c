/* MPI_Cancel, MPI_Request_get_status, MPI_Alltoallw (and in place), MPI_Alltoall in place,
 * the nonblocking v-variants and reduce-scatters. Each line prints values computed here and
 * the expected ones are checked by the test (and counted in `bad`). Any number of processes
 * from 2. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static int bad = 0, type_copies = 0, type_deletes = 0;

static int type_copy(MPI_Datatype t, int key, void *extra, void *in, void *out, int *flag) {
    (void)t, (void)key;
    type_copies += *(int *)extra;
    *(void **)out = in;
    *flag = 1;
    return MPI_SUCCESS;
}

static int type_delete(MPI_Datatype t, int key, void *value, void *extra) {
    (void)t, (void)key, (void)value;
    type_deletes += *(int *)extra;
    return MPI_SUCCESS;
}

static void check(const char *what, int ok) {
    if (!ok) bad++;
    printf("%s %s\n", what, ok ? "ok" : "WRONG");
}

int main(int argc, char **argv) {
    int rank, n, i, j, flag;
    MPI_Status st;
    MPI_Request r;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);

    /* A receive nobody sends to, cancelled. */
    {
        int x = -1, cancelled = 0;
        MPI_Irecv(&x, 1, MPI_INT, (rank + 1) % n, 99, MPI_COMM_WORLD, &r);
        MPI_Cancel(&r);
        MPI_Wait(&r, &st);
        MPI_Test_cancelled(&st, &cancelled);
        check("cancel recv", cancelled == 1 && x == -1 && r == MPI_REQUEST_NULL);
    }
    /* A send cannot be cancelled here: it completes normally and is received. */
    {
        int x = rank * 10, y = -1, cancelled = 1;
        MPI_Request rs;
        MPI_Isend(&x, 1, MPI_INT, (rank + 1) % n, 5, MPI_COMM_WORLD, &rs);
        MPI_Cancel(&rs);
        MPI_Wait(&rs, &st);
        MPI_Test_cancelled(&st, &cancelled);
        MPI_Recv(&y, 1, MPI_INT, (rank + n - 1) % n, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        check("cancel send", cancelled == 0 && y == ((rank + n - 1) % n) * 10);
    }
    /* MPI_Request_get_status leaves the request for the wait. */
    {
        int x = rank + 100, y = -1, polls = 0, cnt = -1;
        MPI_Request rs;
        MPI_Irecv(&y, 1, MPI_INT, (rank + n - 1) % n, 6, MPI_COMM_WORLD, &r);
        MPI_Request_get_status(r, &flag, &st);
        MPI_Barrier(MPI_COMM_WORLD);
        MPI_Isend(&x, 1, MPI_INT, (rank + 1) % n, 6, MPI_COMM_WORLD, &rs);
        do {
            MPI_Request_get_status(r, &flag, &st);
            polls++;
        } while (!flag && polls < 100000000);
        MPI_Get_count(&st, MPI_INT, &cnt);
        check("get_status", flag && r != MPI_REQUEST_NULL && cnt == 1 && st.MPI_SOURCE == (rank + n - 1) % n);
        MPI_Wait(&r, MPI_STATUS_IGNORE);
        MPI_Wait(&rs, MPI_STATUS_IGNORE);
        MPI_Request_get_status(MPI_REQUEST_NULL, &flag, MPI_STATUS_IGNORE);
        check("get_status values", y == (rank + n - 1) % n + 100 && r == MPI_REQUEST_NULL && flag == 1);
    }
    /* MPI_Alltoallw: to process i, i+1 ints of value 100*rank + i; from process j, rank+1
     * ints, received as pairs where rank+1 is even, at int j*(n+1). */
    {
        int *sb = malloc(sizeof(int) * n * (n + 1)), *rb = malloc(sizeof(int) * n * (n + 1));
        int *sc = malloc(sizeof(int) * n), *sd = malloc(sizeof(int) * n), *rc = malloc(sizeof(int) * n),
            *rd = malloc(sizeof(int) * n), ok = 1, at = 0;
        MPI_Datatype *ty = malloc(sizeof(MPI_Datatype) * n), pair;
        MPI_Type_contiguous(2, MPI_INT, &pair);
        MPI_Type_commit(&pair);
        for (i = 0; i < n; i++) {
            sc[i] = i + 1;
            sd[i] = at * (int)sizeof(int);
            for (j = 0; j <= i; j++) sb[at++] = rank * 100 + i;
            ty[i] = MPI_INT;
        }
        for (j = 0; j < n; j++) {
            rc[j] = rank + 1;
            rd[j] = j * (n + 1) * (int)sizeof(int);
        }
        for (i = 0; i < n * (n + 1); i++) rb[i] = -1;
        {
            MPI_Datatype *rty = malloc(sizeof(MPI_Datatype) * n);
            int *rcc = malloc(sizeof(int) * n);
            for (j = 0; j < n; j++) {
                rty[j] = (rank + 1) % 2 == 0 ? pair : MPI_INT;
                rcc[j] = (rank + 1) % 2 == 0 ? (rank + 1) / 2 : rank + 1;
            }
            MPI_Alltoallw(sb, sc, sd, ty, rb, rcc, rd, rty, MPI_COMM_WORLD);
            free(rty);
            free(rcc);
        }
        for (j = 0; j < n; j++)
            for (i = 0; i < n + 1; i++) ok &= rb[j * (n + 1) + i] == (i <= rank ? j * 100 + rank : -1);
        check("alltoallw", ok);
        /* In place: block j of n ints; ints as MPI_INT. */
        for (j = 0; j < n; j++) {
            rb[j] = rank * 10 + j;
            rc[j] = 1;
            rd[j] = j * (int)sizeof(int);
            ty[j] = MPI_INT;
        }
        MPI_Alltoallw(MPI_IN_PLACE, NULL, NULL, NULL, rb, rc, rd, ty, MPI_COMM_WORLD);
        ok = 1;
        for (j = 0; j < n; j++) ok &= rb[j] == j * 10 + rank;
        check("alltoallw in place", ok);
        /* MPI_Alltoall in place, with a datatype of pairs. */
        for (j = 0; j < n; j++) {
            rb[2 * j] = rank * 10 + j;
            rb[2 * j + 1] = -(rank * 10 + j);
        }
        MPI_Alltoall(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, rb, 1, pair, MPI_COMM_WORLD);
        ok = 1;
        for (j = 0; j < n; j++) ok &= rb[2 * j] == j * 10 + rank && rb[2 * j + 1] == -(j * 10 + rank);
        check("alltoall in place", ok);
        MPI_Type_free(&pair);
        free(sb), free(rb), free(sc), free(sd), free(rc), free(rd), free(ty);
    }
    /* Nonblocking v-variants: process i contributes i+1 ints (value 10*i + k). */
    {
        int *counts = malloc(sizeof(int) * n), *displs = malloc(sizeof(int) * n), total = 0, ok;
        int mine[64], all[1024], back[64];
        MPI_Request rq[4];
        for (i = 0; i < n; i++) {
            counts[i] = i + 1;
            displs[i] = total + i; /* a hole of i ints before part i */
            total = displs[i] + counts[i];
        }
        for (i = 0; i <= rank; i++) mine[i] = 10 * rank + i;
        for (i = 0; i < total; i++) all[i] = -1;
        MPI_Igatherv(mine, rank + 1, MPI_INT, all, counts, displs, MPI_INT, n - 1, MPI_COMM_WORLD, &rq[0]);
        MPI_Wait(&rq[0], MPI_STATUS_IGNORE);
        ok = 1;
        if (rank == n - 1)
            for (i = 0; i < n; i++)
                for (j = 0; j < counts[i]; j++) ok &= all[displs[i] + j] == 10 * i + j;
        check("igatherv", ok);
        /* Iscatterv back from the root (n-1), and Iallgatherv, in flight together. */
        for (i = 0; i < 64; i++) back[i] = -1;
        {
            int every[1024];
            for (i = 0; i < total; i++) every[i] = -1;
            MPI_Iscatterv(all, counts, displs, MPI_INT, back, rank + 1, MPI_INT, n - 1, MPI_COMM_WORLD, &rq[0]);
            MPI_Iallgatherv(mine, rank + 1, MPI_INT, every, counts, displs, MPI_INT, MPI_COMM_WORLD, &rq[1]);
            MPI_Waitall(2, rq, MPI_STATUSES_IGNORE);
            ok = 1;
            for (i = 0; i <= rank; i++) ok &= back[i] == 10 * rank + i;
            check("iscatterv", ok);
            ok = 1;
            for (i = 0; i < n; i++)
                for (j = 0; j < counts[i]; j++) ok &= every[displs[i] + j] == 10 * i + j;
            check("iallgatherv", ok);
            /* In place: each puts its part in `every` first. */
            for (i = 0; i < total; i++) every[i] = -1;
            for (j = 0; j <= rank; j++) every[displs[rank] + j] = 10 * rank + j;
            MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, every, counts, displs, MPI_INT, MPI_COMM_WORLD,
                            &rq[0]);
            MPI_Wait(&rq[0], MPI_STATUS_IGNORE);
            ok = 1;
            for (i = 0; i < n; i++)
                for (j = 0; j < counts[i]; j++) ok &= every[displs[i] + j] == 10 * i + j;
            check("iallgatherv in place", ok);
        }
        /* Ialltoallv: to process i, i+1 ints (100*rank + i); from j, rank+1 ints. */
        {
            int sb[1024], rb[1024], sc[64], sd[64], rcn[64], rd[64], at = 0;
            for (i = 0; i < n; i++) {
                sc[i] = i + 1;
                sd[i] = at;
                for (j = 0; j <= i; j++) sb[at++] = 100 * rank + i;
                rcn[i] = rank + 1;
                rd[i] = i * (rank + 1);
            }
            MPI_Ialltoallv(sb, sc, sd, MPI_INT, rb, rcn, rd, MPI_INT, MPI_COMM_WORLD, &r);
            MPI_Wait(&r, MPI_STATUS_IGNORE);
            ok = 1;
            for (i = 0; i < n; i++)
                for (j = 0; j <= rank; j++) ok &= rb[i * (rank + 1) + j] == 100 * i + rank;
            check("ialltoallv", ok);
        }
        /* Ireduce_scatter_block: block i of every process's input is i + rank; the sum at
         * process i is n*i + n(n-1)/2 (two ints per block). */
        {
            int in[128], out[2] = {-1, -1};
            for (i = 0; i < n; i++) in[2 * i] = in[2 * i + 1] = i + rank;
            MPI_Ireduce_scatter_block(in, out, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &r);
            MPI_Wait(&r, MPI_STATUS_IGNORE);
            check("ireduce_scatter_block", out[0] == n * rank + n * (n - 1) / 2 && out[1] == out[0]);
            for (i = 0; i < n; i++) in[2 * i] = in[2 * i + 1] = i + rank;
            MPI_Ireduce_scatter_block(MPI_IN_PLACE, in, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD, &r);
            MPI_Wait(&r, MPI_STATUS_IGNORE);
            check("ireduce_scatter_block in place", in[0] == rank + n - 1 && in[1] == in[0]);
        }
        /* Ireduce_scatter with counts i+1: process i gets ints k of its part, each the sum
         * over processes p of (p + k). */
        {
            int in[1024], out[64], at = 0, want;
            for (i = 0; i < n; i++)
                for (j = 0; j <= i; j++) in[at++] = rank + j;
            MPI_Ireduce_scatter(in, out, counts, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &r);
            MPI_Wait(&r, MPI_STATUS_IGNORE);
            ok = r == MPI_REQUEST_NULL;
            for (j = 0; j <= rank; j++) {
                want = n * (n - 1) / 2 + n * j;
                ok &= out[j] == want;
            }
            check("ireduce_scatter", ok);
        }
        free(counts);
        free(displs);
    }
    /* Attributes of datatypes: copied at MPI_Type_dup, deleted at MPI_Type_free. */
    {
        int key, weight = 1, value = 42, *got = NULL, found = 0, found_dup = 0, found_after = 1;
        MPI_Datatype t, u;
        MPI_Type_create_keyval(type_copy, type_delete, &key, &weight);
        MPI_Type_contiguous(3, MPI_INT, &t);
        MPI_Type_set_attr(t, key, &value);
        MPI_Type_get_attr(t, key, &got, &found);
        MPI_Type_dup(t, &u);
        MPI_Type_get_attr(u, key, &got, &found_dup);
        MPI_Type_free(&u);
        MPI_Type_delete_attr(t, key);
        MPI_Type_get_attr(t, key, &got, &found_after);
        MPI_Type_set_attr(MPI_INT, key, &value);
        MPI_Type_delete_attr(MPI_INT, key);
        MPI_Type_free(&t);
        MPI_Type_free_keyval(&key);
        check("type attributes", found && found_dup && got == &value && !found_after && type_copies == 1 &&
                                     type_deletes == 3 && key == MPI_KEYVAL_INVALID);
    }
    printf("rank %d: families bad %d\n", rank, bad);
    MPI_Finalize();
    return 0;
}
