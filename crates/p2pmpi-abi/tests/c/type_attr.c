/* Attributes of datatypes: a key with MPI_TYPE_DUP_FN and a delete callback that counts,
 * copied by MPI_Type_dup, deleted by MPI_Type_free, replaced and deleted. Run on 1 process. */
#include <mpi.h>
#include <stdio.h>

static int deleted = 0;

static int count_delete(MPI_Datatype t, int key, void *value, void *extra) {
    (void)t;
    (void)key;
    (void)value;
    deleted += *(int *)extra;
    return MPI_SUCCESS;
}

int main(int argc, char **argv) {
    int key, key_null, flag, *got, one = 1, v1 = 7, v2 = 9;
    MPI_Datatype t, dup;

    MPI_Init(&argc, &argv);
    MPI_Type_contiguous(2, MPI_INT, &t);
    MPI_Type_create_keyval(MPI_TYPE_DUP_FN, count_delete, &key, &one);
    MPI_Type_create_keyval(MPI_TYPE_NULL_COPY_FN, count_delete, &key_null, &one);
    MPI_Type_get_attr(t, key, &got, &flag);
    printf("unset %d\n", flag);
    MPI_Type_set_attr(t, key, &v1);
    MPI_Type_set_attr(t, key_null, &v2);
    MPI_Type_get_attr(t, key, &got, &flag);
    printf("set %d value %d\n", flag, flag ? *got : -1);
    MPI_Type_dup(t, &dup);
    MPI_Type_get_attr(dup, key, &got, &flag);
    printf("dup copied %d value %d\n", flag, flag ? *got : -1);
    MPI_Type_get_attr(dup, key_null, &got, &flag);
    printf("null copy %d\n", flag);
    MPI_Type_free(&dup);
    printf("deleted after free %d\n", deleted);
    MPI_Type_set_attr(MPI_INT, key, &v2);
    MPI_Type_get_attr(MPI_INT, key, &got, &flag);
    printf("predefined %d value %d\n", flag, flag ? *got : -1);
    MPI_Type_delete_attr(MPI_INT, key);
    MPI_Type_get_attr(MPI_INT, key, &got, &flag);
    printf("deleted after delete %d still set %d\n", deleted, flag);
    MPI_Type_free(&t);
    printf("deleted after freeing both %d\n", deleted);
    MPI_Type_free_keyval(&key);
    printf("keyval invalid %d\n", key == MPI_KEYVAL_INVALID);
    MPI_Type_free_keyval(&key_null);
    MPI_Finalize();
    return 0;
}
