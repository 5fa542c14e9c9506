/* Steps of an allreduce, each printed by every rank: the output of a job is known line by
 * line, whatever replica of a rank prints it (tests/c_and_python.rs kills one mid-run).
 *   steps K PAUSE_MS [MARKER] */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

int main(int argc, char **argv) {
    int rank, size, k = argc > 1 ? atoi(argv[1]) : 10, pause = argc > 2 ? atoi(argv[2]) : 0;
    struct timespec ts = {pause / 1000, (long)(pause % 1000) * 1000000L};
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    for (int s = 0; s < k; s++) {
        int mine = rank + s, sum = 0;
        MPI_Allreduce(&mine, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        printf("step %d rank %d of %d: sum %d\n", s, rank, size, sum);
        nanosleep(&ts, NULL);
    }
    MPI_Finalize();
    return 0;
}
