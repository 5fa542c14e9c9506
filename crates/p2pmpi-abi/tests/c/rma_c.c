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
    {
        /* Atomics on rank 0's allocated int (105): each rank adds its rank + 1 under an
         * exclusive lock, then rank 1 swaps 108 for 500 and rank 0 tries 7 for 9 (no swap). */
        int add = rank + 1, old = -1, sum = 0, cmp, val, was = -1, fetched = -1;
        MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, w2);
        MPI_Fetch_and_op(&add, &old, MPI_INT, 0, 0, MPI_SUM, w2);
        MPI_Win_unlock(0, w2);
        MPI_Allreduce(&old, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        MPI_Barrier(MPI_COMM_WORLD);
        cmp = rank ? 108 : 7;
        val = rank ? 500 : 9;
        MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, w2);
        MPI_Compare_and_swap(&val, &cmp, &was, MPI_INT, 0, 0, w2);
        MPI_Win_unlock(0, w2);
        MPI_Barrier(MPI_COMM_WORLD);
        MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, w2);
        MPI_Get_accumulate_c(NULL, 0, MPI_INT, &fetched, 1, MPI_INT, 0, 0, 1, MPI_INT, MPI_NO_OP, w2);
        MPI_Win_unlock(0, w2);
        /* The two old values are 105 and 105 + the first adder's rank + 1: they sum to 211 or
         * 212; the swap by rank 1 sees 108 (or 500 if rank 0's failed try came later). */
        printf("rank %d: atomics sum ok %d final %d\n", rank, sum == 211 || sum == 212, fetched);
    }
    MPI_Win_free(&w1);
    MPI_Win_free(&w2);
    MPI_Finalize();
    return 0;
}
