/* The large-count forms of windows (MPI_Win_create_c, MPI_Win_allocate_c, MPI_Put_c,
 * MPI_Get_c, MPI_Accumulate_c), a window's error handler, name and hints. Run on 2 processes: each puts
 * its rank + 10 into the other's created window, adds 5 into the other's allocated one and
 * reads it back. */
#include <mpi.h>
#include <stdio.h>

int main(int argc, char **argv) {
    int rank, other, cell = -1, *mem, v, five = 5, got = -1;
    MPI_Win w1, w2;
    MPI_Errhandler eh;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    other = 1 - rank;
    MPI_Win_create_c(&cell, sizeof cell, sizeof cell, MPI_INFO_NULL, MPI_COMM_WORLD, &w1);
    MPI_Win_allocate_c(sizeof(int), sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &mem, &w2);
    *mem = 100;
    MPI_Win_set_errhandler(w1, MPI_ERRORS_RETURN);
    MPI_Win_get_errhandler(w1, &eh);
    printf("rank %d: errhandler return %d\n", rank, eh == MPI_ERRORS_RETURN);
    {
        char name[MPI_MAX_OBJECT_NAME];
        int len, nkeys = -1;
        MPI_Info info;
        MPI_Win_get_name(w1, name, &len);
        printf("rank %d: default name length %d", rank, len);
        MPI_Win_set_name(w1, "mywin");
        MPI_Win_get_name(w1, name, &len);
        MPI_Info_create(&info);
        MPI_Win_set_info(w1, info);
        MPI_Info_free(&info);
        MPI_Win_get_info(w1, &info);
        MPI_Info_get_nkeys(info, &nkeys);
        MPI_Info_free(&info);
        printf(" set %s info %s\n", name, nkeys >= 0 ? "ok" : "bad");
    }
    v = rank + 10;
    MPI_Win_fence(0, w1);
    MPI_Put_c(&v, 1, MPI_INT, other, 0, 1, MPI_INT, w1);
    MPI_Win_fence(0, w1);
    MPI_Win_fence(0, w2);
    MPI_Accumulate_c(&five, 1, MPI_INT, other, 0, 1, MPI_INT, MPI_SUM, w2);
    MPI_Win_fence(0, w2);
    MPI_Get_c(&got, 1, MPI_INT, other, 0, 1, MPI_INT, w2);
    MPI_Win_fence(0, w2);
    printf("rank %d: put %d accumulated %d got %d\n", rank, cell, *mem, got);
    MPI_Win_free(&w1);
    MPI_Win_free(&w2);
    MPI_Finalize();
    return 0;
}
