/* A rank that does not join (tests/c_and_python.rs): every rank but 0 waits before MPI_Init, as
 * a process that loaded another MPI library and runs as a world of its own would ("exit": it
 * exits without initializing MPI instead). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv) {
    const char *rank = getenv("P2PMPI_RANK");
    if (rank && strcmp(rank, "0") != 0) {
        if (argc > 1 && strcmp(argv[1], "exit") == 0)
            return 0;
        sleep(120);
    }
    MPI_Init(&argc, &argv);
    printf("joined\n");
    MPI_Finalize();
    return 0;
}
