/* Names of the predefined communicators: their defaults, a name set and read back, and the
 * default restored. Run on 1 process. */
#include <mpi.h>
#include <stdio.h>

int main(int argc, char **argv) {
    char name[MPI_MAX_OBJECT_NAME];
    int len;
    MPI_Comm cs[2] = {MPI_COMM_SELF, MPI_COMM_WORLD};

    MPI_Init(&argc, &argv);
    for (int i = 0; i < 2; i++) {
        MPI_Comm_get_name(cs[i], name, &len);
        printf("default %s", name);
        MPI_Comm_set_name(cs[i], "mycomm");
        MPI_Comm_get_name(cs[i], name, &len);
        printf(" set %s", name);
        MPI_Comm_set_name(cs[i], i ? "MPI_COMM_WORLD" : "MPI_COMM_SELF");
        MPI_Comm_get_name(cs[i], name, &len);
        printf(" restored %s %d\n", name, len);
    }
    MPI_Finalize();
    return 0;
}
