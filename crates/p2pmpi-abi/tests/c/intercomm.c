/* Intercommunicators: the even and the odd ranks of the world (split), joined by
 * MPI_Intercomm_create (leaders: world ranks 0 and 1); sizes, remote group, point-to-point
 * across, MPI_Barrier, MPI_Allreduce, MPI_Allgather, MPI_Alltoall and
 * MPI_Reduce_scatter_block across (each group gets the other's data), MPI_Intercomm_merge
 * (the odd group first). Run on 4 processes (or any even number). */
#include <mpi.h>
#include <stdio.h>

int main(int argc, char **argv) {
    int wrank, wsize, color, flag = -1, lsize, lrank, rsize, i, ok, bad = 0;
    MPI_Comm local, ic, merged;
    MPI_Group remote, world;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &wrank);
    MPI_Comm_size(MPI_COMM_WORLD, &wsize);
    color = wrank % 2;
    MPI_Comm_split(MPI_COMM_WORLD, color, wrank, &local);
    MPI_Intercomm_create(local, 0, MPI_COMM_WORLD, 1 - color, 7, &ic);
    MPI_Comm_test_inter(ic, &flag);
    MPI_Comm_size(ic, &lsize);
    MPI_Comm_rank(ic, &lrank);
    MPI_Comm_remote_size(ic, &rsize);
    printf("rank %d: inter %d size %d rank %d remote size %d\n", wrank, flag, lsize, lrank, rsize);

    /* The remote group, in world ranks: the other parity, in order. */
    MPI_Comm_remote_group(ic, &remote);
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    ok = 1;
    for (i = 0; i < rsize; i++) {
        int w;
        MPI_Group_translate_ranks(remote, 1, &i, world, &w);
        ok &= w == 2 * i + (1 - color);
    }
    MPI_Group_free(&remote);
    MPI_Group_free(&world);
    printf("rank %d: remote group %d\n", wrank, ok);

    /* Point-to-point across: local rank i and remote rank i swap their world ranks. */
    {
        int mine = wrank, theirs = -1;
        MPI_Status st;
        MPI_Sendrecv(&mine, 1, MPI_INT, lrank, 3, &theirs, 1, MPI_INT, lrank, 3, ic, &st);
        printf("rank %d: across got %d from %d\n", wrank, theirs, st.MPI_SOURCE);
        bad += theirs != 2 * lrank + (1 - color) || st.MPI_SOURCE != lrank;
    }

    /* Collectives across: each group gets the other's data. */
    MPI_Barrier(ic);
    {
        int x = wrank + 1, sum = -1, all[64];
        MPI_Allreduce(&x, &sum, 1, MPI_INT, MPI_SUM, ic);
        /* The sum over the other group of (world rank + 1). */
        {
            int want = 0;
            for (i = 1 - color; i < wsize; i += 2) want += i + 1;
            printf("rank %d: allreduce across %d\n", wrank, sum == want);
            bad += sum != want;
        }
        MPI_Allgather(&x, 1, MPI_INT, all, 1, MPI_INT, ic);
        ok = 1;
        for (i = 0; i < rsize; i++) ok &= all[i] == 2 * i + (1 - color) + 1;
        printf("rank %d: allgather across %d\n", wrank, ok);
        bad += !ok;
        /* Alltoall across: to remote rank i, 100*wrank + i. */
        {
            int out[64], in[64];
            for (i = 0; i < rsize; i++) out[i] = 100 * wrank + i;
            MPI_Alltoall(out, 1, MPI_INT, in, 1, MPI_INT, ic);
            ok = 1;
            for (i = 0; i < rsize; i++) ok &= in[i] == 100 * (2 * i + (1 - color)) + lrank;
            printf("rank %d: alltoall across %d\n", wrank, ok);
            bad += !ok;
        }
        /* Reduce_scatter_block across: block i of each process's input is its world rank;
         * local rank i gets the sum over the other group. */
        {
            int in[64], out = -1, want = 0;
            for (i = 0; i < rsize; i++) in[i] = wrank;
            MPI_Reduce_scatter_block(in, &out, 1, MPI_INT, MPI_SUM, ic);
            for (i = 1 - color; i < wsize; i += 2) want += i;
            printf("rank %d: reduce_scatter_block across %d\n", wrank, out == want);
            bad += out != want;
        }
    }

    /* Merged: the odd group (high = 0) first. */
    MPI_Intercomm_merge(ic, color == 0, &merged);
    {
        int mrank, msize, want;
        MPI_Comm_rank(merged, &mrank);
        MPI_Comm_size(merged, &msize);
        want = color == 1 ? lrank : rsize + lrank;
        printf("rank %d: merged rank %d size %d\n", wrank, mrank == want, msize);
        bad += mrank != want || msize != wsize;
        {
            int x = mrank, sum = -1;
            MPI_Allreduce(&x, &sum, 1, MPI_INT, MPI_SUM, merged);
            bad += sum != msize * (msize - 1) / 2;
        }
    }
    MPI_Comm_free(&merged);
    MPI_Comm_free(&ic);
    MPI_Comm_free(&local);
    printf("rank %d: intercomm bad %d\n", wrank, bad);
    MPI_Finalize();
    return 0;
}
