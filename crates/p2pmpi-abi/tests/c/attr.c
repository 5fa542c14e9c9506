/* Attributes of communicators: keys with MPICH's MPI_COMM_DUP_FN and with a delete callback
 * that counts, the predefined attributes, and MPI_COMM_SELF's attributes deleted at
 * MPI_Finalize. Run on 2 processes. */
#include <mpi.h>
#include <stdio.h>

static int deleted = 0, rank;

static int count_delete(MPI_Comm comm, int key, void *value, void *extra) {
    (void)comm;
    (void)key;
    deleted += *(int *)extra;
    if (comm == MPI_COMM_SELF) printf("rank %d: self attribute %d deleted\n", rank, *(int *)value);
    return MPI_SUCCESS;
}

int main(int argc, char **argv) {
    int key_dup, key_null, size, flag, *got, one = 1, v1 = 7, v2 = 9, rc;
    MPI_Comm dup;
    static int self_value = 55;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_create_keyval(MPI_COMM_DUP_FN, count_delete, &key_dup, &one);
    MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, count_delete, &key_null, &one);
    MPI_Comm_set_attr(MPI_COMM_WORLD, key_dup, &v1);
    MPI_Comm_set_attr(MPI_COMM_WORLD, key_null, &v2);
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    MPI_Comm_get_attr(dup, key_dup, &got, &flag);
    printf("rank %d: dup copied %d value %d\n", rank, flag, flag ? *got : -1);
    MPI_Comm_get_attr(dup, key_null, &got, &flag);
    printf("rank %d: null copy %d\n", rank, flag);
    MPI_Comm_free(&dup);
    printf("rank %d: deleted after free %d\n", rank, deleted);
    MPI_Comm_set_attr(MPI_COMM_WORLD, key_null, &v1);
    printf("rank %d: deleted after replace %d\n", rank, deleted);
    MPI_Comm_delete_attr(MPI_COMM_WORLD, key_null);
    MPI_Comm_get_attr(MPI_COMM_WORLD, key_null, &got, &flag);
    printf("rank %d: deleted after delete %d still set %d\n", rank, deleted, flag);
    MPI_Comm_free_keyval(&key_null);
    printf("rank %d: keyval invalid %d\n", rank, key_null == MPI_KEYVAL_INVALID);

    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &got, &flag);
    printf("rank %d: tag_ub %d big %d\n", rank, flag, flag && *got >= 32767);
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_UNIVERSE_SIZE, &got, &flag);
    printf("rank %d: universe %d at least size %d\n", rank, flag, flag && *got >= size);
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_APPNUM, &got, &flag);
    printf("rank %d: appnum %d value %d\n", rank, flag, flag ? *got : -1);
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_WTIME_IS_GLOBAL, &got, &flag);
    printf("rank %d: wtime global %d value %d\n", rank, flag, flag ? *got : -1);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    rc = MPI_Comm_set_attr(MPI_COMM_WORLD, MPI_TAG_UB, &v1);
    printf("rank %d: predefined refused %d\n", rank, rc == MPI_ERR_KEYVAL);

    MPI_Comm_set_attr(MPI_COMM_SELF, key_dup, &self_value);
    fflush(stdout);
    MPI_Finalize();
    printf("rank %d: deleted at the end %d\n", rank, deleted);
    return 0;
}
