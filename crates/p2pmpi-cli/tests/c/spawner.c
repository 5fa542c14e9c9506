/* Dynamic processes of a C program: the parents spawn as many children of this program
 * ("child" argument) with MPI_Comm_spawn; parent r sends r + 1 to child r, which answers with
 * ten times it. Prints "parent R: child answered X" and "child R of N: got X". */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
    int me, n;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    MPI_Comm parent, inter;
    MPI_Comm_get_parent(&parent);
    if (argc > 1 && strcmp(argv[1], "child") == 0) {
        int v = -1;
        MPI_Recv(&v, 1, MPI_INT, me, 1, parent, MPI_STATUS_IGNORE);
        printf("child %d of %d: got %d\n", me, n, v);
        v *= 10;
        MPI_Send(&v, 1, MPI_INT, me, 2, parent);
        MPI_Comm_free(&parent);
    } else {
        char *args[] = {"child", NULL};
        if (MPI_Comm_spawn(argv[0], args, n, MPI_INFO_NULL, 0, MPI_COMM_WORLD, &inter, MPI_ERRCODES_IGNORE) !=
            MPI_SUCCESS) {
            printf("parent %d: spawn failed\n", me);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
        int v = me + 1, back = -1;
        MPI_Send(&v, 1, MPI_INT, me, 1, inter);
        MPI_Recv(&back, 1, MPI_INT, me, 2, inter, MPI_STATUS_IGNORE);
        printf("parent %d: child answered %d\n", me, back);
        MPI_Comm_free(&inter);
    }
    MPI_Finalize();
    return 0;
}
