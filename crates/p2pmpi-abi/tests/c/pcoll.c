/* Persistent collectives: MPI_Barrier_init, MPI_Allreduce_init started twice (new input each
 * time), MPI_Allgatherv_init whose count arrays are overwritten after the call (they are
 * copied), MPI_Bcast_init_c, started together by MPI_Startall. Run on 3 processes. */
#include <mpi.h>
#include <stdio.h>

int main(int argc, char **argv) {
    int rank, size, in, out, send[3], recv[9], counts[3], displs[3], b = -1, ok = 1, i, round;
    MPI_Request q[4];

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    for (i = 0; i < size; i++) {
        counts[i] = i + 1;
        displs[i] = 3 * i;
    }
    MPI_Barrier_init(MPI_COMM_WORLD, MPI_INFO_NULL, &q[0]);
    MPI_Allreduce_init(&in, &out, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, MPI_INFO_NULL, &q[1]);
    MPI_Allgatherv_init(send, rank + 1, MPI_INT, recv, counts, displs, MPI_INT, MPI_COMM_WORLD, MPI_INFO_NULL,
                        &q[2]);
    MPI_Bcast_init_c(&b, 1, MPI_INT, 2, MPI_COMM_WORLD, MPI_INFO_NULL, &q[3]);
    for (i = 0; i < size; i++) counts[i] = displs[i] = -7;
    for (round = 1; round <= 2; round++) {
        in = rank * round;
        for (i = 0; i < 3; i++) send[i] = rank * 10 + round;
        for (i = 0; i < 9; i++) recv[i] = -1;
        if (rank == 2) b = 100 + round;
        MPI_Startall(4, q);
        MPI_Waitall(4, q, MPI_STATUSES_IGNORE);
        ok &= out == 3 * round && b == 100 + round;
        for (i = 0; i < size; i++)
            for (int j = 0; j < 3; j++) ok &= recv[3 * i + j] == (j <= i ? i * 10 + round : -1);
    }
    for (i = 0; i < 4; i++) MPI_Request_free(&q[i]);
    printf("rank %d: persistent collectives %s null %d\n", rank, ok ? "ok" : "bad", q[0] == MPI_REQUEST_NULL);
    MPI_Finalize();
    return 0;
}
