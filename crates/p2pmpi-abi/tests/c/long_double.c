/* C's long double (x87's 80-bit floats on x86_64) through the library: the sizes of
 * MPI_LONG_DOUBLE, MPI_LONG_DOUBLE_INT and MPI_C_LONG_DOUBLE_COMPLEX; a send, a pack; every
 * predefined reduction on them, whose results here differ from what doubles would give
 * (1 + 2^-62 is 1 in a double); MPI_Reduce_local. Each check prints 1 when it holds. */
#include <complex.h>
#include <mpi.h>
#include <stdio.h>

struct ldi {
    long double v;
    int i;
};

int main(int argc, char **argv) {
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const long double tiny = 0x1p-62L, one = 1.0L;

    int s1, s2, s3;
    MPI_Aint lb, e1, e2, e3;
    MPI_Type_size(MPI_LONG_DOUBLE, &s1);
    MPI_Type_size(MPI_LONG_DOUBLE_INT, &s2);
    MPI_Type_size(MPI_C_LONG_DOUBLE_COMPLEX, &s3);
    MPI_Type_get_extent(MPI_LONG_DOUBLE, &lb, &e1);
    MPI_Type_get_extent(MPI_LONG_DOUBLE_INT, &lb, &e2);
    MPI_Type_get_extent(MPI_C_LONG_DOUBLE_COMPLEX, &lb, &e3);
    printf("ld %d: sizes %d %d %d extents %ld %ld %ld\n", rank, s1, s2, s3, (long)e1, (long)e2, (long)e3);

    /* A send to the next rank, and a pack. */
    long double out[2] = {one + tiny * rank, -one - tiny}, in[2] = {0, 0};
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    MPI_Sendrecv(out, 2, MPI_LONG_DOUBLE, next, 7, in, 2, MPI_LONG_DOUBLE, prev, 7, MPI_COMM_WORLD,
                 MPI_STATUS_IGNORE);
    char packed[64];
    int pos = 0;
    long double back[2] = {0, 0};
    MPI_Pack(out, 2, MPI_LONG_DOUBLE, packed, sizeof packed, &pos, MPI_COMM_WORLD);
    int packed_size = pos;
    pos = 0;
    MPI_Unpack(packed, sizeof packed, &pos, back, 2, MPI_LONG_DOUBLE, MPI_COMM_WORLD);
    printf("ld %d: sent %d packed %d %d\n", rank, in[0] == one + tiny * prev && in[1] == -one - tiny,
           packed_size, back[0] == out[0] && back[1] == out[1]);

    /* Rank 0 gives 1, the others 2^-62 each: 1 + (n-1) 2^-62, which a double rounds to 1. */
    long double mine = rank == 0 ? one : tiny, sum = 0, prod = 0, max = 0, min = 0;
    MPI_Allreduce(&mine, &sum, 1, MPI_LONG_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    int sum_ok = sum == one + (size - 1) * tiny, not_double = (double)sum == 1.0 && sum != one;
    /* 1 + 2^-60 each: (1 + 2^-60)^n = 1 + n 2^-60 (+ terms below the last bit). */
    long double factor = one + 0x1p-60L, local = 1;
    for (int k = 0; k < size; k++)
        local *= factor;
    MPI_Allreduce(&factor, &prod, 1, MPI_LONG_DOUBLE, MPI_PROD, MPI_COMM_WORLD);
    long double v = one + rank * tiny;
    MPI_Allreduce(&v, &max, 1, MPI_LONG_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(&v, &min, 1, MPI_LONG_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
    printf("ld %d: sum %d below double %d prod %d max %d min %d\n", rank, sum_ok, not_double,
           prod == local && prod != one, max == one + (size - 1) * tiny, min == one);

    /* MAXLOC and MINLOC: 1 + 2^-62 on every rank but 0 (a tie: the lowest index wins). */
    struct ldi p = {rank > 0 ? one + tiny : one, rank}, pmax, pmin;
    MPI_Allreduce(&p, &pmax, 1, MPI_LONG_DOUBLE_INT, MPI_MAXLOC, MPI_COMM_WORLD);
    MPI_Allreduce(&p, &pmin, 1, MPI_LONG_DOUBLE_INT, MPI_MINLOC, MPI_COMM_WORLD);
    printf("ld %d: maxloc %d at %d minloc %d at %d\n", rank, pmax.v == one + tiny, pmax.i, pmin.v == one, pmin.i);

    /* Complex: the sum of (1 or 2^-62) + rank i, the product of (1 + 2^-60) + 2^-30 i. */
    long double _Complex z = (rank == 0 ? one : tiny) + rank * I, zs = 0, zp = 0;
    MPI_Allreduce(&z, &zs, 1, MPI_C_LONG_DOUBLE_COMPLEX, MPI_SUM, MPI_COMM_WORLD);
    long double _Complex w = (one + 0x1p-60L) + 0x1p-30L * I, wl = 1;
    for (int k = 0; k < size; k++)
        wl *= w;
    MPI_Allreduce(&w, &zp, 1, MPI_C_LONG_DOUBLE_COMPLEX, MPI_PROD, MPI_COMM_WORLD);
    printf("ld %d: complex sum %d prod %d\n", rank,
           creall(zs) == one + (size - 1) * tiny && cimagl(zs) == size * (size - 1) / 2,
           creall(zp) == creall(wl) && cimagl(zp) == cimagl(wl));

    /* MPI_Reduce_local: inout = in + inout, then max. */
    long double a[2] = {tiny, one}, b[2] = {one, tiny}, c[2] = {one + tiny, one};
    MPI_Reduce_local(a, b, 2, MPI_LONG_DOUBLE, MPI_SUM);
    MPI_Reduce_local(c, a, 2, MPI_LONG_DOUBLE, MPI_MAX);
    printf("ld %d: reduce_local sum %d max %d\n", rank, b[0] == one + tiny && b[1] == one + tiny,
           a[0] == one + tiny && a[1] == one);

    /* A rooted reduction. */
    long double r = 0;
    MPI_Reduce(&mine, &r, 1, MPI_LONG_DOUBLE, MPI_SUM, size - 1, MPI_COMM_WORLD);
    if (rank == size - 1)
        printf("ld %d: reduce at root %d\n", rank, r == one + (size - 1) * tiny);
    MPI_Finalize();
    return 0;
}
