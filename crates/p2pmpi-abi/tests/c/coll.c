/* Collectives: each part prints the values it computed, which the test checks. */
#include <mpi.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    int rank, size, i, ok;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Barrier(MPI_COMM_WORLD);

    /* Bcast from the last rank. */
    {
        double d[3] = {0, 0, 0};
        if (rank == size - 1) { d[0] = 1.25; d[1] = -2.5; d[2] = 1e100; }
        MPI_Bcast(d, 3, MPI_DOUBLE, size - 1, MPI_COMM_WORLD);
        printf("bcast %d: %.2f %.2f %g\n", rank, d[0], d[1], d[2]);
    }

    /* Reduce to rank 1 (or 0) with SUM, MAX, PROD; in place at the root. */
    {
        int root = size > 1 ? 1 : 0, x = rank + 1, sum = -1, inplace = rank + 1;
        long mx = -1, lx = 1000 - rank;
        double p = -1, px = 2.0;
        MPI_Reduce(&x, &sum, 1, MPI_INT, MPI_SUM, root, MPI_COMM_WORLD);
        MPI_Reduce(&lx, &mx, 1, MPI_LONG, MPI_MIN, root, MPI_COMM_WORLD);
        MPI_Reduce(&px, &p, 1, MPI_DOUBLE, MPI_PROD, root, MPI_COMM_WORLD);
        if (rank == root)
            MPI_Reduce(MPI_IN_PLACE, &inplace, 1, MPI_INT, MPI_MAX, root, MPI_COMM_WORLD);
        else
            MPI_Reduce(&inplace, NULL, 1, MPI_INT, MPI_MAX, root, MPI_COMM_WORLD);
        if (rank == root) printf("reduce: sum %d min %ld prod %.0f max in place %d\n", sum, mx, p, inplace);
    }

    /* Allreduce of arrays, and in place. */
    {
        int64_t v[4], s[4];
        float f = (float)rank, fm = -1;
        unsigned u = 1u << rank, bor = 0;
        for (i = 0; i < 4; i++) v[i] = (int64_t)(rank + 1) * (i + 1);
        MPI_Allreduce(v, s, 4, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
        MPI_Allreduce(&f, &fm, 1, MPI_FLOAT, MPI_MAX, MPI_COMM_WORLD);
        MPI_Allreduce(&u, &bor, 1, MPI_UNSIGNED, MPI_BOR, MPI_COMM_WORLD);
        MPI_Allreduce(MPI_IN_PLACE, v, 4, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);
        printf("allreduce %d: sum %lld %lld %lld %lld max %.0f bor %u in place %lld %lld\n", rank, (long long)s[0],
               (long long)s[1], (long long)s[2], (long long)s[3], fm, bor, (long long)v[0], (long long)v[3]);
    }

    /* Scan and Exscan. */
    {
        int x = rank + 1, incl = -1, excl = -1;
        MPI_Scan(&x, &incl, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        MPI_Exscan(&x, &excl, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        printf("scan %d: %d exscan %d\n", rank, incl, rank == 0 ? 0 : excl);
    }

    /* Gather at 0 (in place too), Scatter from 0, Allgather, Alltoall. */
    {
        int *all = malloc(sizeof(int) * size * 2), *back = malloc(sizeof(int) * size * 2);
        int mine[2] = {rank * 10, rank * 10 + 1}, got[2] = {-1, -1};
        MPI_Gather(mine, 2, MPI_INT, all, 2, MPI_INT, 0, MPI_COMM_WORLD);
        if (rank == 0) {
            ok = 1;
            for (i = 0; i < size * 2; i++) ok &= all[i] == (i / 2) * 10 + i % 2;
            printf("gather: ok %d last %d\n", ok, all[size * 2 - 1]);
            for (i = 0; i < size * 2; i++) all[i] = 1000 + i;
            all[0] = -7;
            all[1] = -8;
            MPI_Gather(MPI_IN_PLACE, 2, MPI_INT, all, 2, MPI_INT, 0, MPI_COMM_WORLD);
            printf("gather in place: %d %d %d\n", all[0], all[1], all[size * 2 - 1]);
        } else {
            MPI_Gather(mine, 2, MPI_INT, NULL, 0, MPI_DATATYPE_NULL, 0, MPI_COMM_WORLD);
        }
        if (rank == 0)
            for (i = 0; i < size * 2; i++) all[i] = 500 + i;
        MPI_Scatter(all, 2, MPI_INT, got, 2, MPI_INT, 0, MPI_COMM_WORLD);
        printf("scatter %d: %d %d\n", rank, got[0], got[1]);
        MPI_Allgather(mine, 2, MPI_INT, back, 2, MPI_INT, MPI_COMM_WORLD);
        ok = 1;
        for (i = 0; i < size * 2; i++) ok &= back[i] == (i / 2) * 10 + i % 2;
        printf("allgather %d: ok %d\n", rank, ok);
        for (i = 0; i < size * 2; i++) all[i] = rank * 100 + i;
        MPI_Alltoall(all, 2, MPI_INT, back, 2, MPI_INT, MPI_COMM_WORLD);
        ok = 1;
        for (i = 0; i < size; i++) ok &= back[2 * i] == i * 100 + 2 * rank && back[2 * i + 1] == i * 100 + 2 * rank + 1;
        printf("alltoall %d: ok %d\n", rank, ok);
        free(all);
        free(back);
    }

    /* Reduce_scatter_block (one element each, then in place) and Reduce_scatter (i + 1
     * elements to rank i): rank r contributes r + j at element j. */
    {
        int *v = malloc(sizeof(int) * size * (size + 1)), out = -1, total = size * (size + 1) / 2, got[64], k;
        long sum = 0;
        int *counts = malloc(sizeof(int) * size);
        for (i = 0; i < total; i++) v[i] = rank + i;
        MPI_Reduce_scatter_block(v, &out, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        printf("reduce_scatter_block %d: %d", rank, out);
        for (i = 0; i < size; i++) v[i] = rank + i;
        MPI_Reduce_scatter_block(MPI_IN_PLACE, v, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        printf(" in place %d\n", v[0]);
        for (i = 0; i < total; i++) v[i] = rank + i;
        for (i = 0; i < size; i++) counts[i] = i + 1;
        MPI_Reduce_scatter(v, got, counts, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        for (k = 0; k < rank + 1; k++) sum += got[k];
        printf("reduce_scatter %d: %ld\n", rank, sum);
        free(v);
        free(counts);
    }

    MPI_Finalize();
    return 0;
}
