/* A function not provided yet (the name service's MPI_Lookup_name): under MPI_ERRORS_RETURN it
 * answers MPI_ERR_UNSUPPORTED_OPERATION; under the default handler it stops the job. */
#include <mpi.h>
#include <stdio.h>

int main(int argc, char **argv) {
    int rc;
    char port[MPI_MAX_PORT_NAME];
    MPI_Init(&argc, &argv);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    rc = MPI_Lookup_name("p2pmpi", MPI_INFO_NULL, port);
    printf("returned %d\n", rc);
    fflush(stdout);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    MPI_Lookup_name("p2pmpi", MPI_INFO_NULL, port);
    printf("not stopped\n");
    MPI_Finalize();
    return 0;
}
