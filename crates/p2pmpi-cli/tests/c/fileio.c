/* Imports a function p2pmpi's library provides only as a stub (MPI-IO), for abi-check. */
#include <mpi.h>

int main(int argc, char **argv) {
    MPI_File f;
    MPI_Init(&argc, &argv);
    MPI_File_open(MPI_COMM_WORLD, "none", MPI_MODE_RDONLY, MPI_INFO_NULL, &f);
    MPI_Finalize();
    return 0;
}
