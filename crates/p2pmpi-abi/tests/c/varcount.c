/* The v-variants: rank i contributes i + 1 elements; each part prints a checksum of what it
 * got. Run on 3 processes. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    int rank, size, i, j, total, counts[16], displs[16], sc[16], sd[16], mine[16], sum;
    double *d;
    int *all;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    total = 0;
    for (i = 0; i < size; i++) {
        counts[i] = i + 1;
        displs[i] = total + i; /* a gap of i elements before part i */
        total += i + 1;
    }
    total = displs[size - 1] + counts[size - 1];
    all = calloc(total, sizeof(int));
    for (j = 0; j < rank + 1; j++) mine[j] = rank * 100 + j;

    /* Gatherv at the last rank. */
    for (j = 0; j < total; j++) all[j] = -1;
    MPI_Gatherv(mine, rank + 1, MPI_INT, all, counts, displs, MPI_INT, size - 1, MPI_COMM_WORLD);
    if (rank == size - 1) {
        sum = 0;
        for (j = 0; j < total; j++) sum += all[j];
        printf("gatherv: sum %d first %d last %d\n", sum, all[0], all[total - 1]);
    }
    /* In place at root 0. */
    if (rank == 0) {
        for (j = 0; j < total; j++) all[j] = -1;
        all[displs[0]] = 77;
        MPI_Gatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, all, counts, displs, MPI_INT, 0, MPI_COMM_WORLD);
        printf("gatherv in place: %d %d\n", all[0], all[total - 1]);
    } else {
        MPI_Gatherv(mine, rank + 1, MPI_INT, NULL, NULL, NULL, MPI_INT, 0, MPI_COMM_WORLD);
    }

    /* Scatterv of doubles from 0. */
    d = malloc(sizeof(double) * total);
    for (j = 0; j < total; j++) d[j] = j * 0.5;
    {
        double got[16];
        double s = 0;
        MPI_Scatterv(d, counts, displs, MPI_DOUBLE, got, rank + 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
        for (j = 0; j < rank + 1; j++) s += got[j];
        printf("scatterv %d: %.1f\n", rank, s);
        if (rank == 0)
            MPI_Scatterv(d, counts, displs, MPI_DOUBLE, MPI_IN_PLACE, 0, MPI_DOUBLE, 0, MPI_COMM_WORLD);
        else
            MPI_Scatterv(NULL, NULL, NULL, MPI_DOUBLE, got, rank + 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
        printf("scatterv in place %d: %.1f\n", rank, rank == 0 ? d[0] : got[0]);
    }

    /* Allgatherv, then in place. */
    for (j = 0; j < total; j++) all[j] = -1;
    MPI_Allgatherv(mine, rank + 1, MPI_INT, all, counts, displs, MPI_INT, MPI_COMM_WORLD);
    sum = 0;
    for (j = 0; j < total; j++) sum += all[j];
    printf("allgatherv %d: sum %d\n", rank, sum);
    for (j = 0; j < total; j++) all[j] = -1;
    for (j = 0; j < rank + 1; j++) all[displs[rank] + j] = mine[j];
    MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, all, counts, displs, MPI_INT, MPI_COMM_WORLD);
    sum = 0;
    for (j = 0; j < total; j++) sum += all[j];
    printf("allgatherv in place %d: sum %d\n", rank, sum);

    /* Alltoallv: rank r sends j + 1 elements to rank j, all valued r * 10 + j. */
    {
        int sbuf[64], rbuf[64], rc[16], rd[16], off = 0, roff = 0;
        for (j = 0; j < size; j++) {
            sc[j] = j + 1;
            sd[j] = off;
            for (i = 0; i < j + 1; i++) sbuf[off + i] = rank * 10 + j;
            off += j + 1;
            rc[j] = rank + 1;
            rd[j] = roff;
            roff += rank + 1;
        }
        MPI_Alltoallv(sbuf, sc, sd, MPI_INT, rbuf, rc, rd, MPI_INT, MPI_COMM_WORLD);
        sum = 0;
        for (j = 0; j < roff; j++) sum += rbuf[j];
        printf("alltoallv %d: sum %d\n", rank, sum);
        /* In place: each exchanges the same number of elements with each. */
        for (j = 0; j < size; j++) {
            rc[j] = 2;
            rd[j] = 2 * j;
            rbuf[2 * j] = rank * 10 + j;
            rbuf[2 * j + 1] = rank;
        }
        MPI_Alltoallv(MPI_IN_PLACE, NULL, NULL, MPI_DATATYPE_NULL, rbuf, rc, rd, MPI_INT, MPI_COMM_WORLD);
        printf("alltoallv in place %d: %d %d %d\n", rank, rbuf[0], rbuf[1], rbuf[2 * size - 2]);
    }
    free(all);
    free(d);
    MPI_Finalize();
    return 0;
}
