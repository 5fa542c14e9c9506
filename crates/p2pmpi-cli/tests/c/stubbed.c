/* Imports a function p2pmpi's library provides only as a stub (the name service's
 * MPI_Lookup_name), for abi-check. */
#include <mpi.h>

int main(int argc, char **argv) {
    char port[MPI_MAX_PORT_NAME];
    MPI_Init(&argc, &argv);
    MPI_Lookup_name("p2pmpi", MPI_INFO_NULL, port);
    MPI_Finalize();
    return 0;
}
