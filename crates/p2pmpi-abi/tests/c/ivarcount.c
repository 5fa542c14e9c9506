/* Nonblocking collectives with a count per process: rank i gives i + 1 ints; MPI_Igatherv,
 * MPI_Iscatterv, MPI_Iallgatherv (also in place), MPI_Ialltoallv, MPI_Igatherv_c,
 * MPI_Ireduce_scatter_block and MPI_Ireduce_scatter, each
 * completed by MPI_Wait and checked. Prints "rank R: NAME ok|bad". Run on 3 processes. */
#include <mpi.h>
#include <stdio.h>

#define N 3

int main(int argc, char **argv) {
    int rank, size, counts[N], displs[N], send[N], recv[16], all[16], i, j, k, ok;
    MPI_Count ccounts[N];
    MPI_Aint cdispls[N];
    MPI_Request req;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size != N) MPI_Abort(MPI_COMM_WORLD, 1);
    /* Part i: i + 1 elements i * 100 + j, after a gap of one element. */
    for (i = 0, k = 0; i < N; i++) {
        counts[i] = i + 1;
        displs[i] = k + 1;
        ccounts[i] = counts[i];
        cdispls[i] = displs[i];
        k += i + 2;
    }
    for (j = 0; j <= rank; j++) send[j] = rank * 100 + j;
    for (i = 0; i < 16; i++) all[i] = -1;
    for (i = 0; i < N; i++)
        for (j = 0; j < counts[i]; j++) all[displs[i] + j] = i * 100 + j;

    for (i = 0; i < 16; i++) recv[i] = -1;
    MPI_Igatherv(send, rank + 1, MPI_INT, recv, counts, displs, MPI_INT, 1, MPI_COMM_WORLD, &req);
    MPI_Wait(&req, MPI_STATUS_IGNORE);
    for (i = 0, ok = 1; rank == 1 && i < 9; i++) ok &= recv[i] == all[i];
    printf("rank %d: igatherv %s\n", rank, ok ? "ok" : "bad");

    for (i = 0; i < 16; i++) recv[i] = -1;
    MPI_Iscatterv(all, counts, displs, MPI_INT, recv, rank + 1, MPI_INT, 2, MPI_COMM_WORLD, &req);
    MPI_Wait(&req, MPI_STATUS_IGNORE);
    for (j = 0, ok = recv[rank + 1] == -1; j <= rank; j++) ok &= recv[j] == rank * 100 + j;
    printf("rank %d: iscatterv %s\n", rank, ok ? "ok" : "bad");

    for (i = 0; i < 16; i++) recv[i] = -1;
    MPI_Iallgatherv(send, rank + 1, MPI_INT, recv, counts, displs, MPI_INT, MPI_COMM_WORLD, &req);
    MPI_Wait(&req, MPI_STATUS_IGNORE);
    for (i = 0, ok = 1; i < 9; i++) ok &= recv[i] == all[i];
    printf("rank %d: iallgatherv %s\n", rank, ok ? "ok" : "bad");

    for (i = 0; i < 16; i++) recv[i] = -1;
    for (j = 0; j <= rank; j++) recv[displs[rank] + j] = send[j];
    MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, recv, counts, displs, MPI_INT, MPI_COMM_WORLD, &req);
    MPI_Wait(&req, MPI_STATUS_IGNORE);
    for (i = 0, ok = 1; i < 9; i++) ok &= recv[i] == all[i];
    printf("rank %d: iallgatherv in place %s\n", rank, ok ? "ok" : "bad");

    /* Alltoallv: rank r sends part i (counts[i] elements of `all` at displs[i]) to rank i and
     * receives from each rank its part r. */
    {
        int rc[N], rd[N], out[16];
        for (i = 0; i < N; i++) {
            rc[i] = rank + 1;
            rd[i] = i * (rank + 1);
        }
        for (i = 0; i < 16; i++) out[i] = -1;
        MPI_Ialltoallv(all, counts, displs, MPI_INT, out, rc, rd, MPI_INT, MPI_COMM_WORLD, &req);
        MPI_Wait(&req, MPI_STATUS_IGNORE);
        for (i = 0, ok = 1; i < N; i++)
            for (j = 0; j <= rank; j++) ok &= out[rd[i] + j] == rank * 100 + j;
        printf("rank %d: ialltoallv %s\n", rank, ok ? "ok" : "bad");
    }

    for (i = 0; i < 16; i++) recv[i] = -1;
    MPI_Igatherv_c(send, rank + 1, MPI_INT, recv, ccounts, cdispls, MPI_INT, 0, MPI_COMM_WORLD, &req);
    MPI_Wait(&req, MPI_STATUS_IGNORE);
    for (i = 0, ok = 1; rank == 0 && i < 9; i++) ok &= recv[i] == all[i];
    printf("rank %d: igatherv_c %s\n", rank, ok ? "ok" : "bad");
    /* Ireduce_scatter_block and Ireduce_scatter (equal counts): 2 elements each, element j of
     * every rank's input is j + rank; the sum over 3 ranks is 3j + 3. */
    {
        int in[6], out[2] = {-1, -1}, rc2[N] = {2, 2, 2};
        for (j = 0; j < 6; j++) in[j] = j + rank;
        MPI_Ireduce_scatter_block(in, out, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &req);
        MPI_Wait(&req, MPI_STATUS_IGNORE);
        ok = out[0] == 6 * rank + 3 && out[1] == 6 * rank + 6;
        printf("rank %d: ireduce_scatter_block %s\n", rank, ok ? "ok" : "bad");
        out[0] = out[1] = -1;
        MPI_Ireduce_scatter(in, out, rc2, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &req);
        MPI_Wait(&req, MPI_STATUS_IGNORE);
        ok = out[0] == 6 * rank + 3 && out[1] == 6 * rank + 6;
        printf("rank %d: ireduce_scatter %s\n", rank, ok ? "ok" : "bad");
    }
    MPI_Finalize();
    return 0;
}
