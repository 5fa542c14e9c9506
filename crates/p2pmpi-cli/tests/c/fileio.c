/* Imports a function p2pmpi's library provides only as a stub (MPI-IO's user error handlers),
 * for abi-check. */
#include <mpi.h>

int main(int argc, char **argv) {
    MPI_Errhandler eh;
    MPI_Init(&argc, &argv);
    MPI_File_create_errhandler(0, &eh);
    MPI_Finalize();
    return 0;
}
