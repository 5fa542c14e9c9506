/* The MPI part of a program in a library of its own (tests/c_and_python.rs): built with an
 * RPATH to Debian's MPICH, it makes the program load that MPI whatever the program's own
 * search paths say. */
#include <mpi.h>
#include <stdio.h>

int in_lib_run(int *argc, char ***argv) {
    int rank, size;
    MPI_Init(argc, argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    printf("rank %d of %d\n", rank, size);
    return MPI_Finalize();
}
