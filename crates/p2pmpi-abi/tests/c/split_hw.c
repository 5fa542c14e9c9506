/* MPI_Comm_split_type with MPI 4's hardware types: MPI_COMM_TYPE_HW_GUIDED with the hint
 * mpi_hw_resource_type = mpi_shared_memory splits as MPI_COMM_TYPE_SHARED; without it, and
 * MPI_COMM_TYPE_HW_UNGUIDED, give MPI_COMM_NULL. Run on 2 processes (one host). */
#include <mpi.h>
#include <stdio.h>

int main(int argc, char **argv) {
    int rank, size = -1;
    MPI_Comm c;
    MPI_Info info;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_HW_GUIDED, rank, MPI_INFO_NULL, &c);
    printf("rank %d: guided without hint null %d\n", rank, c == MPI_COMM_NULL);
    MPI_Info_create(&info);
    MPI_Info_set(info, "mpi_hw_resource_type", "mpi_shared_memory");
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_HW_GUIDED, rank, info, &c);
    if (c != MPI_COMM_NULL) {
        MPI_Comm_size(c, &size);
        MPI_Comm_free(&c);
    }
    printf("rank %d: guided shared memory size %d\n", rank, size);
    MPI_Info_free(&info);
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_HW_UNGUIDED, rank, MPI_INFO_NULL, &c);
    printf("rank %d: unguided null %d\n", rank, c == MPI_COMM_NULL);
    MPI_Finalize();
    return 0;
}
