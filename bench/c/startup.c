/*
 * Start-up benchmark program (reference baseline for p2pmpi's whereami example).
 *
 * Usage: mpirun -np N ./startup
 *
 * Does the least a whole job can do, as examples/whereami.rs does without arguments:
 * MPI_Init, every rank prints one line
 *   rank <R> of <N> on <processor name>
 * then MPI_Barrier and MPI_Finalize. bench/startup.sh times the whole mpirun command
 * (launch, wire-up, this, tear-down) from outside.
 */
#include <mpi.h>
#include <stdio.h>

int main(int argc, char **argv)
{
    int rank, size, len;
    char host[MPI_MAX_PROCESSOR_NAME];

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (MPI_Get_processor_name(host, &len) != MPI_SUCCESS)
        snprintf(host, sizeof host, "local");
    printf("rank %d of %d on %s\n", rank, size, host);
    fflush(stdout);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Finalize();
    return 0;
}
