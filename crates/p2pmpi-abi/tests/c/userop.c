/* User reduction operations: a commutative one (the largest absolute value) and a
 * non-commutative one (composing affine maps x -> m x + c, the lower rank's first). Run on 3
 * processes. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static int saw_int = 1;

static void max_abs(void *in, void *inout, int *len, MPI_Datatype *dt) {
    int *a = in, *b = inout, i;
    if (*dt != MPI_INT) saw_int = 0;
    for (i = 0; i < *len; i++)
        if (abs(a[i]) > abs(b[i])) b[i] = a[i];
}

/* inout = in then inout: (m, c) pairs. */
static void compose(void *in, void *inout, int *len, MPI_Datatype *dt) {
    long *a = in, *b = inout;
    int i;
    (void)dt;
    for (i = 0; i + 1 < *len; i += 2) {
        long m = a[i] * b[i], c = b[i] * a[i + 1] + b[i + 1];
        b[i] = m;
        b[i + 1] = c;
    }
}

int main(int argc, char **argv) {
    int rank, v, r, commute;
    long mine[2], all[2], scan[2], inplace[2];
    MPI_Op absop, affine;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Op_create(max_abs, 1, &absop);
    MPI_Op_create(compose, 0, &affine);

    v = rank == 1 ? -50 : rank * 7;
    MPI_Allreduce(&v, &r, 1, MPI_INT, absop, MPI_COMM_WORLD);
    printf("rank %d: max abs %d datatype int %d\n", rank, r, saw_int);

    mine[0] = rank + 2;
    mine[1] = rank + 1;
    MPI_Allreduce(mine, all, 2, MPI_LONG, affine, MPI_COMM_WORLD);
    MPI_Scan(mine, scan, 2, MPI_LONG, affine, MPI_COMM_WORLD);
    inplace[0] = mine[0];
    inplace[1] = mine[1];
    MPI_Allreduce(MPI_IN_PLACE, inplace, 2, MPI_LONG, affine, MPI_COMM_WORLD);
    printf("rank %d: affine %ld %ld scan %ld %ld in place %ld %ld\n", rank, all[0], all[1], scan[0], scan[1],
           inplace[0], inplace[1]);
    all[0] = all[1] = -1;
    MPI_Reduce(mine, all, 2, MPI_LONG, affine, 2, MPI_COMM_WORLD);
    if (rank == 2) printf("rank 2: reduce %ld %ld\n", all[0], all[1]);

    {
        long x[2] = {3, 4}, y[2] = {5, 6};
        MPI_Reduce_local(x, y, 2, MPI_LONG, affine);
        printf("rank %d: local %ld %ld\n", rank, y[0], y[1]);
    }
    {
        struct { double v; int i; } in, out;
        struct { short v; int i; } sin, sout;
        int p[2] = {10 - rank, rank}, q[2];
        in.v = rank == 1 ? 100.0 : rank;
        in.i = rank;
        sin.v = (short)(rank * 3);
        sin.i = rank;
        MPI_Allreduce(&in, &out, 1, MPI_DOUBLE_INT, MPI_MAXLOC, MPI_COMM_WORLD);
        MPI_Allreduce(p, q, 1, MPI_2INT, MPI_MINLOC, MPI_COMM_WORLD);
        MPI_Allreduce(&sin, &sout, 1, MPI_SHORT_INT, MPI_MAXLOC, MPI_COMM_WORLD);
        printf("rank %d: maxloc %.1f at %d minloc %d at %d short %d at %d\n", rank, out.v, out.i, q[0], q[1], sout.v,
               sout.i);
    }
    MPI_Op_commutative(affine, &commute);
    printf("rank %d: commutative affine %d", rank, commute);
    MPI_Op_commutative(absop, &commute);
    printf(" abs %d", commute);
    MPI_Op_commutative(MPI_SUM, &commute);
    printf(" sum %d\n", commute);
    MPI_Op_free(&absop);
    MPI_Op_free(&affine);
    printf("rank %d: freed %d\n", rank, absop == MPI_OP_NULL && affine == MPI_OP_NULL);
    MPI_Finalize();
    return 0;
}
