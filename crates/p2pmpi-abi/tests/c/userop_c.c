/* A user operation with a large count (MPI_Op_create_c): element-wise a * 10 + b, not
 * commutative, in MPI_Allreduce and MPI_Reduce_local; MPI_Op_commutative of MPI_REPLACE and
 * MPI_NO_OP. Run on 2 processes. */
#include <mpi.h>
#include <stdio.h>

static MPI_Count seen = -1;

static void shift_add(void *in, void *inout, MPI_Count *len, MPI_Datatype *dt) {
    int *a = in, *b = inout;
    (void)dt;
    seen = *len;
    for (MPI_Count i = 0; i < *len; i++) b[i] = a[i] * 10 + b[i];
}

int main(int argc, char **argv) {
    int rank, v[3], r[3], x[2] = {1, 2}, y[2] = {3, 4};
    MPI_Op op;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Op_create_c(shift_add, 0, &op);
    for (int i = 0; i < 3; i++) v[i] = rank + 1 + i;
    MPI_Allreduce(v, r, 3, MPI_INT, op, MPI_COMM_WORLD);
    printf("rank %d: allreduce %d %d %d\n", rank, r[0], r[1], r[2]);
    MPI_Reduce_local(x, y, 2, MPI_INT, op);
    printf("rank %d: local %d %d len %d\n", rank, y[0], y[1], (int)seen);
    {
        int c1 = -1, c2 = -1, rc1 = MPI_Op_commutative(MPI_REPLACE, &c1), rc2 = MPI_Op_commutative(MPI_NO_OP, &c2);
        printf("rank %d: replace and no_op commutative %d %d %d %d\n", rank, rc1, c1, rc2, c2);
    }
    MPI_Op_free(&op);
    printf("rank %d: freed %d\n", rank, op == MPI_OP_NULL);
    MPI_Finalize();
    return 0;
}
