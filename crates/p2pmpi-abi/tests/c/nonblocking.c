/* Nonblocking collectives, several in flight at once, completed by MPI_Waitall, MPI_Wait
 * and MPI_Test. Run on 3 processes. */
#include <mpi.h>
#include <stdio.h>

static void sum3(void *in, void *inout, int *len, MPI_Datatype *dt) {
    int *a = in, *b = inout, i;
    (void)dt;
    for (i = 0; i < *len; i++) b[i] += a[i];
}

int main(int argc, char **argv) {
    int rank, size, i, flag, x, sum = -1, inplace, scan = -1, exscan = -1, red = -1, user = -1, bc[2];
    int mine[2], all[16], gat[16], part[2], sendall[16], swapped[16], scattered[2];
    MPI_Request rs[12];
    MPI_Op op;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Op_create(sum3, 1, &op);
    x = rank + 1;
    inplace = rank + 1;
    bc[0] = bc[1] = rank == 1 ? 99 : 0;
    mine[0] = rank * 10;
    mine[1] = rank * 10 + 1;
    for (i = 0; i < 2 * size; i++) {
        sendall[i] = rank * 100 + i;
        all[i] = -1;
    }

    MPI_Ibarrier(MPI_COMM_WORLD, &rs[0]);
    MPI_Iallreduce(&x, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &rs[1]);
    MPI_Iallreduce(MPI_IN_PLACE, &inplace, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD, &rs[2]);
    MPI_Iscan(&x, &scan, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &rs[3]);
    MPI_Iexscan(&x, &exscan, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &rs[4]);
    MPI_Ireduce(&x, &red, 1, MPI_INT, MPI_PROD, 0, MPI_COMM_WORLD, &rs[5]);
    MPI_Iallreduce(&x, &user, 1, MPI_INT, op, MPI_COMM_WORLD, &rs[6]);
    MPI_Ibcast(bc, 2, MPI_INT, 1, MPI_COMM_WORLD, &rs[7]);
    MPI_Iallgather(mine, 2, MPI_INT, all, 2, MPI_INT, MPI_COMM_WORLD, &rs[8]);
    MPI_Ialltoall(sendall, 2, MPI_INT, swapped, 2, MPI_INT, MPI_COMM_WORLD, &rs[9]);
    MPI_Iscatter(sendall, 2, MPI_INT, scattered, 2, MPI_INT, 2, MPI_COMM_WORLD, &rs[10]);
    MPI_Igather(mine, 2, MPI_INT, rank == 0 ? gat : NULL, 2, MPI_INT, 0, MPI_COMM_WORLD, &rs[11]);
    MPI_Wait(&rs[8], MPI_STATUS_IGNORE);
    flag = 0;
    while (!flag) MPI_Test(&rs[0], &flag, MPI_STATUS_IGNORE);
    MPI_Waitall(12, rs, MPI_STATUSES_IGNORE);
    printf("rank %d: sum %d max %d scan %d exscan %d user %d bcast %d %d\n", rank, sum, inplace, scan,
           rank == 0 ? 0 : exscan, user, bc[0], bc[1]);
    if (rank == 0) {
        part[1] = 0;
        for (i = 0; i < 2 * size; i++) part[1] += gat[i];
        printf("rank 0: prod %d gather sum %d\n", red, part[1]);
    }
    part[0] = 0;
    for (i = 0; i < 2 * size; i++) part[0] += all[i];
    printf("rank %d: allgather sum %d alltoall %d %d scatter %d %d\n", rank, part[0], swapped[0],
           swapped[2 * size - 1], scattered[0], scattered[1]);
    MPI_Op_free(&op);
    MPI_Finalize();
    return 0;
}
