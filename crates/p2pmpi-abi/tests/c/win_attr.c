/* Attributes of windows: a key with a delete callback that counts, set, read back next to
 * the predefined MPI_WIN_DISP_UNIT, deleted, and deleted by MPI_Win_free. Run on 1 process. */
#include <mpi.h>
#include <stdio.h>

static int deleted = 0;

static int count_delete(MPI_Win w, int key, void *value, void *extra) {
    (void)w;
    (void)key;
    (void)value;
    deleted += *(int *)extra;
    return MPI_SUCCESS;
}

int main(int argc, char **argv) {
    int key, flag, *got, one = 1, v = 7, cell, *unit;
    MPI_Win w;

    MPI_Init(&argc, &argv);
    MPI_Win_create(&cell, sizeof cell, sizeof cell, MPI_INFO_NULL, MPI_COMM_SELF, &w);
    MPI_Win_create_keyval(MPI_WIN_NULL_COPY_FN, count_delete, &key, &one);
    MPI_Win_get_attr(w, key, &got, &flag);
    printf("unset %d\n", flag);
    MPI_Win_set_attr(w, key, &v);
    MPI_Win_get_attr(w, key, &got, &flag);
    MPI_Win_get_attr(w, MPI_WIN_DISP_UNIT, &unit, &one);
    printf("set %d value %d disp unit %d\n", flag, flag ? *got : -1, *unit);
    one = 1;
    MPI_Win_delete_attr(w, key);
    MPI_Win_get_attr(w, key, &got, &flag);
    printf("deleted %d still set %d\n", deleted, flag);
    MPI_Win_set_attr(w, key, &v);
    MPI_Win_free(&w);
    printf("deleted by free %d\n", deleted);
    MPI_Win_free_keyval(&key);
    printf("keyval invalid %d\n", key == MPI_KEYVAL_INVALID);
    MPI_Finalize();
    return 0;
}
