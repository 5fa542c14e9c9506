/* Persistent requests: a ring exchange started three times, and the completions' handling
 * of inactive persistent requests. Run on 3 processes. */
#include <mpi.h>
#include <stdio.h>

int main(int argc, char **argv) {
    int rank, size, it, out, in = -1, sum = 0, flag, idx, same;
    MPI_Request rs[2], kept;
    MPI_Status st;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Recv_init(&in, 1, MPI_INT, (rank + size - 1) % size, 3, MPI_COMM_WORLD, &rs[0]);
    MPI_Send_init(&out, 1, MPI_INT, (rank + 1) % size, 3, MPI_COMM_WORLD, &rs[1]);
    kept = rs[0];
    /* Inactive: a test completes at once, with an empty status. */
    MPI_Test(&rs[0], &flag, &st);
    printf("rank %d: inactive test %d source %d\n", rank, flag, st.MPI_SOURCE);
    for (it = 0; it < 3; it++) {
        out = rank * 10 + it;
        MPI_Startall(2, rs);
        MPI_Waitall(2, rs, MPI_STATUSES_IGNORE);
        sum += in;
    }
    same = rs[0] == kept && rs[0] != MPI_REQUEST_NULL;
    printf("rank %d: ring sum %d handles kept %d\n", rank, sum, same);
    /* Start and Wait one at a time; Waitany ignores the inactive one. */
    out = 100 + rank;
    MPI_Start(&rs[1]);
    MPI_Start(&rs[0]);
    MPI_Wait(&rs[0], &st);
    MPI_Waitany(2, rs, &idx, MPI_STATUS_IGNORE);
    printf("rank %d: one more %d from %d waitany %d\n", rank, in, st.MPI_SOURCE, idx);
    MPI_Waitany(2, rs, &idx, MPI_STATUS_IGNORE);
    printf("rank %d: all inactive %d\n", rank, idx == MPI_UNDEFINED);
    MPI_Request_free(&rs[0]);
    MPI_Request_free(&rs[1]);
    printf("rank %d: freed %d\n", rank, rs[0] == MPI_REQUEST_NULL && rs[1] == MPI_REQUEST_NULL);
    MPI_Finalize();
    return 0;
}
