/* Linked with an RPATH to Debian's MPICH (tests/c_and_python.rs): run by p2pmpirun it loads
 * that library, not p2pmpi's, and sees itself alone; it then waits as a program waiting for
 * peers it cannot see would. */
#include <mpi.h>
#include <stdio.h>
#include <unistd.h>

int main(int argc, char **argv) {
    int size;
    MPI_Init(&argc, &argv);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size == 1)
        sleep(60);
    printf("size %d\n", size);
    MPI_Finalize();
    return 0;
}
