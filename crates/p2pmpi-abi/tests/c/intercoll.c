/* Collectives over an intercommunicator (the world split in two groups of unequal size): the
 * rooted ones with MPI_ROOT/MPI_PROC_NULL (MPI_Bcast, MPI_Reduce with a predefined and a user
 * operation, MPI_Gather, MPI_Scatter, MPI_Gatherv, MPI_Scatterv), MPI_Allgatherv,
 * MPI_Alltoallv, MPI_Alltoallw, and nonblocking ones (MPI_Ibarrier, MPI_Ibcast,
 * MPI_Iallreduce, MPI_Igather), a persistent MPI_Allgatherv_init; the intercommunicator freed
 * and made again. Run on 3 processes; prints one line per check. */
#include <mpi.h>
#include <stdio.h>

static int wrank;

static void say(const char *what, int ok) { printf("rank %d: %s %s\n", wrank, what, ok ? "ok" : "bad"); }

/* A non-commutative operation: keeps the left operand (so the result is rank 0's). */
static void first(void *in, void *inout, int *len, MPI_Datatype *dt) {
    (void)dt;
    for (int i = 0; i < *len; i++) ((int *)inout)[i] = ((int *)in)[i];
}

int main(int argc, char **argv) {
    int wsize, i, r, ok, round;
    MPI_Comm local, inter;
    MPI_Op op;
    MPI_Request q;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &wrank);
    MPI_Comm_size(MPI_COMM_WORLD, &wsize);
    MPI_Op_create(first, 0, &op);
    int color = wrank < wsize / 2 ? 0 : 1;
    for (round = 0; round < 2; round++) {
        MPI_Comm_split(MPI_COMM_WORLD, color, 0, &local);
        MPI_Intercomm_create(local, 0, MPI_COMM_WORLD, color == 0 ? wsize / 2 : 0, 5, &inter);
        int rank, size, rsize;
        MPI_Comm_rank(inter, &rank);
        MPI_Comm_size(inter, &size);
        MPI_Comm_remote_size(inter, &rsize);

        /* Each group's rank 0 is the root in turn. */
        int v[4] = {-1, -1, -1, -1}, all[8], cnt[8], dsp[8];
        for (int g = 0; g < 2; g++) {
            int root = g == color ? (rank == 0 ? MPI_ROOT : MPI_PROC_NULL) : 0;
            v[0] = root == MPI_ROOT ? 42 + g : -1;
            MPI_Bcast(v, 1, MPI_INT, root, inter);
            ok = root == MPI_ROOT ? v[0] == 42 + g : root == MPI_PROC_NULL ? v[0] == -1 : v[0] == 42 + g;
            say(g == 0 ? "bcast 0" : "bcast 1", ok);

            int mine = 10 * (rank + 1), sum = -1, kept = -1;
            MPI_Reduce(&mine, &sum, 1, MPI_INT, MPI_SUM, root, inter);
            MPI_Reduce(&mine, &kept, 1, MPI_INT, op, root, inter);
            /* The remote group's sum: 10 * (1 + ... + rsize). */
            ok = root == MPI_ROOT ? sum == 5 * rsize * (rsize + 1) && kept == 10 : sum == -1 && kept == -1;
            say(g == 0 ? "reduce 0" : "reduce 1", ok);

            for (i = 0; i < 8; i++) all[i] = -1;
            MPI_Gather(&mine, 1, MPI_INT, all, 1, MPI_INT, root, inter);
            ok = 1;
            if (root == MPI_ROOT)
                for (r = 0; r < rsize; r++) ok &= all[r] == 10 * (r + 1);
            else
                ok = all[0] == -1;
            say(g == 0 ? "gather 0" : "gather 1", ok);

            for (r = 0; r < 8; r++) all[r] = root == MPI_ROOT ? 7 * r : -1;
            int got = -1;
            MPI_Scatter(all, 1, MPI_INT, &got, 1, MPI_INT, root, inter);
            ok = root == MPI_ROOT || root == MPI_PROC_NULL ? got == -1 : got == 7 * rank;
            say(g == 0 ? "scatter 0" : "scatter 1", ok);

            /* Gatherv: remote rank r sends r+1 ints, placed from 2 * r * r. */
            int many[4];
            for (i = 0; i < 4; i++) many[i] = 100 * rank + i;
            int big[32];
            for (i = 0; i < 32; i++) big[i] = -1;
            for (r = 0; r < rsize; r++) {
                cnt[r] = r + 1;
                dsp[r] = 2 * r * r;
            }
            MPI_Gatherv(many, rank + 1, MPI_INT, big, cnt, dsp, MPI_INT, root, inter);
            ok = 1;
            if (root == MPI_ROOT)
                for (r = 0; r < rsize; r++)
                    for (i = 0; i < r + 1; i++) ok &= big[2 * r * r + i] == 100 * r + i;
            say(g == 0 ? "gatherv 0" : "gatherv 1", ok);
            int few[4] = {-1, -1, -1, -1};
            MPI_Scatterv(big, cnt, dsp, MPI_INT, few, rank + 1, MPI_INT, root, inter);
            ok = 1;
            if (root != MPI_ROOT && root != MPI_PROC_NULL)
                for (i = 0; i < rank + 1; i++) ok &= few[i] == 100 * rank + i;
            say(g == 0 ? "scatterv 0" : "scatterv 1", ok);
        }

        /* Allgatherv: remote rank r contributes r+1 ints. */
        int many[4], big[32];
        for (i = 0; i < 4; i++) many[i] = 100 * rank + i;
        for (i = 0; i < 32; i++) big[i] = -1;
        for (r = 0; r < rsize; r++) {
            cnt[r] = r + 1;
            dsp[r] = 4 * r;
        }
        MPI_Allgatherv(many, rank + 1, MPI_INT, big, cnt, dsp, MPI_INT, inter);
        ok = 1;
        for (r = 0; r < rsize; r++)
            for (i = 0; i < 4; i++) ok &= big[4 * r + i] == (i < r + 1 ? 100 * r + i : -1);
        say("allgatherv", ok);

        /* Alltoallv: to remote rank r one int, 1000 * rank + r. */
        int to[8], from[8], one[8], at[8];
        for (r = 0; r < rsize; r++) {
            to[r] = 1000 * rank + r;
            from[r] = -1;
            one[r] = 1;
            at[r] = r;
        }
        MPI_Alltoallv(to, one, at, MPI_INT, from, one, at, MPI_INT, inter);
        ok = 1;
        for (r = 0; r < rsize; r++) ok &= from[r] == 1000 * r + rank;
        say("alltoallv", ok);
        int types[8], bytes[8];
        for (r = 0; r < rsize; r++) {
            types[r] = MPI_INT;
            bytes[r] = r * (int)sizeof(int);
            from[r] = -1;
        }
        MPI_Alltoallw(to, one, bytes, types, from, one, bytes, types, inter);
        ok = 1;
        for (r = 0; r < rsize; r++) ok &= from[r] == 1000 * r + rank;
        say("alltoallw", ok);

        /* Nonblocking. */
        MPI_Ibarrier(inter, &q);
        MPI_Wait(&q, MPI_STATUS_IGNORE);
        say("ibarrier", q == MPI_REQUEST_NULL);
        int root = color == 0 ? (rank == 0 ? MPI_ROOT : MPI_PROC_NULL) : 0;
        v[0] = root == MPI_ROOT ? 77 : -1;
        MPI_Ibcast(v, 1, MPI_INT, root, inter, &q);
        MPI_Wait(&q, MPI_STATUS_IGNORE);
        say("ibcast", color == 0 ? v[0] == (rank == 0 ? 77 : -1) : v[0] == 77);
        int mine = rank + 1, sum = -1;
        MPI_Iallreduce(&mine, &sum, 1, MPI_INT, MPI_SUM, inter, &q);
        MPI_Wait(&q, MPI_STATUS_IGNORE);
        say("iallreduce", sum == rsize * (rsize + 1) / 2);
        int all8[8];
        for (i = 0; i < 8; i++) all8[i] = -1;
        MPI_Igather(&mine, 1, MPI_INT, all8, 1, MPI_INT, root, inter, &q);
        MPI_Wait(&q, MPI_STATUS_IGNORE);
        ok = 1;
        if (root == MPI_ROOT)
            for (r = 0; r < rsize; r++) ok &= all8[r] == r + 1;
        say("igather", ok);

        /* Persistent: an allgatherv whose arrays (one per remote process) change after the call. */
        int pc[8], pd[8], pin = 10 * rank + round, pout[8];
        for (r = 0; r < rsize; r++) {
            pc[r] = 1;
            pd[r] = rsize - 1 - r;
            pout[r] = -1;
        }
        MPI_Allgatherv_init(&pin, 1, MPI_INT, pout, pc, pd, MPI_INT, inter, MPI_INFO_NULL, &q);
        for (r = 0; r < rsize; r++) pc[r] = pd[r] = -3;
        MPI_Start(&q);
        MPI_Wait(&q, MPI_STATUS_IGNORE);
        MPI_Request_free(&q);
        ok = 1;
        for (r = 0; r < rsize; r++) ok &= pout[rsize - 1 - r] == 10 * r + round;
        say("allgatherv persistent", ok);

        MPI_Comm_free(&inter);
        MPI_Comm_free(&local);
    }
    MPI_Op_free(&op);
    MPI_Finalize();
    return 0;
}
