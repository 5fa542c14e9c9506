/* A function not provided yet (MPI-IO's MPI_File_create_errhandler): under MPI_ERRORS_RETURN it
 * answers MPI_ERR_UNSUPPORTED_OPERATION; under the default handler it stops the job. */
#include <mpi.h>
#include <stdio.h>

int main(int argc, char **argv) {
    int rc;
    MPI_Errhandler eh;
    MPI_Init(&argc, &argv);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    rc = MPI_File_create_errhandler(NULL, &eh);
    printf("returned %d\n", rc);
    fflush(stdout);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    MPI_File_create_errhandler(NULL, &eh);
    printf("not stopped\n");
    MPI_Finalize();
    return 0;
}
