/* A rank that opens another MPI library at run time (tests/c_and_python.rs): every rank but 0
 * dlopens the library named by its first argument (Debian's libmpich.so.12, by its path) and
 * then waits, as a rank of that library running as a world of its own would. */
#include <dlfcn.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv) {
    const char *rank = getenv("P2PMPI_RANK");
    if (argc > 1 && rank && strcmp(rank, "0") != 0) {
        if (!dlopen(argv[1], RTLD_NOW | RTLD_LOCAL)) {
            fprintf(stderr, "dlopen %s: %s\n", argv[1], dlerror());
            return 3;
        }
        sleep(120);
    }
    MPI_Init(&argc, &argv);
    printf("joined\n");
    MPI_Finalize();
    return 0;
}
