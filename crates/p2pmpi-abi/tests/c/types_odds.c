/* Datatypes on every process: the Fortran 90 parameterized types and MPI_Type_match_size,
   complex types in a reduction, MPI_Type_create_resized with a negative lower bound and a
   negative extent used in communication, MPI_Type_create_darray (block and cyclic, C and
   Fortran orders), names of predefined datatypes. Prints "rank R: WHAT VALUE" lines. */
#include <mpi.h>
#include <stdio.h>
#include <limits.h>
#include <string.h>

int main(int argc, char **argv) {
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);

    /* Fortran 90 types: made once per kind, predefined (combiner F90_*). */
    MPI_Datatype i9, i9b, r15, c6, m;
    int s1, s2, s3, ni, na, nd, comb, ints[2];
    MPI_Type_create_f90_integer(9, &i9);
    MPI_Type_create_f90_integer(9, &i9b);
    MPI_Type_create_f90_real(15, 300, &r15);
    MPI_Type_create_f90_complex(6, MPI_UNDEFINED, &c6);
    MPI_Type_size(i9, &s1);
    MPI_Type_size(r15, &s2);
    MPI_Type_size(c6, &s3);
    MPI_Type_get_envelope(r15, &ni, &na, &nd, &comb);
    MPI_Type_get_contents(r15, 2, 0, 0, ints, NULL, NULL);
    printf("rank %d: f90 sizes %d %d %d same %d envelope %d %d %d %d contents %d %d\n", rank, s1, s2, s3, i9 == i9b,
           ni, na, nd, comb == MPI_COMBINER_F90_REAL, ints[0], ints[1]);
    int rc = MPI_Type_create_f90_integer(40, &m), cls;
    MPI_Error_class(rc, &cls);
    MPI_Type_match_size(MPI_TYPECLASS_REAL, 8, &m);
    int real8 = m == MPI_REAL8;
    MPI_Type_match_size(MPI_TYPECLASS_COMPLEX, 16, &m);
    int complex16 = m == MPI_COMPLEX16;
    int rc2 = MPI_Type_match_size(MPI_TYPECLASS_INTEGER, 3, &m), cls2;
    MPI_Error_class(rc2, &cls2);
    printf("rank %d: f90 too wide refused %d match_size %d %d none %d\n", rank, cls == MPI_ERR_ARG, real8, complex16,
           cls2 == MPI_ERR_ARG);
    /* An f90 integer in communication: the sum of the ranks. */
    int v = rank, sum = -1;
    MPI_Allreduce(&v, &sum, 1, i9, MPI_SUM, MPI_COMM_WORLD);
    /* Complex sums and products: (r + 1i) summed; (1 + 1i) to the power size. */
    double z[2] = {rank, 1}, zs[2], one[2] = {1, 1}, zp[2];
    MPI_Allreduce(z, zs, 1, MPI_C_DOUBLE_COMPLEX, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(one, zp, 1, MPI_C_DOUBLE_COMPLEX, MPI_PROD, MPI_COMM_WORLD);
    printf("rank %d: f90 integer sum %d complex sum %g%+gi product %g%+gi\n", rank, sum, zs[0], zs[1], zp[0], zp[1]);

    /* Resized: lower bound -4, extent 12 (every third int, the first at the address given);
       then extent -4 (backwards). */
    MPI_Datatype every3, back;
    MPI_Type_create_resized(MPI_INT, -4, 12, &every3);
    MPI_Type_commit(&every3);
    MPI_Aint lb, ext;
    MPI_Type_get_extent(every3, &lb, &ext);
    int a[9] = {0, 1, 2, 3, 4, 5, 6, 7, 8}, got[3] = {-1, -1, -1};
    MPI_Sendrecv(a, 3, every3, rank, 1, got, 3, MPI_INT, rank, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    printf("rank %d: resized lb %ld extent %ld sent %d %d %d\n", rank, (long)lb, (long)ext, got[0], got[1], got[2]);
    MPI_Type_create_resized(MPI_INT, 0, -4, &back);
    MPI_Type_commit(&back);
    MPI_Type_get_extent(back, &lb, &ext);
    MPI_Sendrecv(&a[8], 3, back, rank, 2, got, 3, MPI_INT, rank, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    printf("rank %d: resized backwards extent %ld sent %d %d %d\n", rank, (long)ext, got[0], got[1], got[2]);
    MPI_Type_free(&every3);
    MPI_Type_free(&back);

    /* Darray: 10 ints by blocks over the processes; a 4 x 6 array, rows whole, columns
       cyclic over the processes (C order), and the same in Fortran order. */
    int global[24];
    for (int i = 0; i < 24; i++) global[i] = i;
    MPI_Datatype d1, d2, d3;
    int g1 = 10, dist1 = MPI_DISTRIBUTE_BLOCK, darg = MPI_DISTRIBUTE_DFLT_DARG, p1 = size;
    MPI_Type_create_darray(size, rank, 1, &g1, &dist1, &darg, &p1, MPI_ORDER_C, MPI_INT, &d1);
    MPI_Type_commit(&d1);
    int dsize;
    MPI_Type_size(d1, &dsize);
    MPI_Type_get_extent(d1, &lb, &ext);
    int packed[24], pos = 0;
    MPI_Pack(global, 1, d1, packed, sizeof packed, &pos, MPI_COMM_WORLD);
    printf("rank %d: darray block size %d extent %ld first %d last %d\n", rank, dsize, (long)ext, packed[0],
           packed[dsize / 4 - 1]);
    int g2[2] = {4, 6}, dist2[2] = {MPI_DISTRIBUTE_NONE, MPI_DISTRIBUTE_CYCLIC}, dargs2[2] = {darg, darg};
    int p2[2] = {1, size};
    MPI_Type_create_darray(size, rank, 2, g2, dist2, dargs2, p2, MPI_ORDER_C, MPI_INT, &d2);
    MPI_Type_commit(&d2);
    MPI_Type_size(d2, &dsize);
    pos = 0;
    MPI_Pack(global, 1, d2, packed, sizeof packed, &pos, MPI_COMM_WORLD);
    printf("rank %d: darray cyclic C size %d values %d %d %d %d\n", rank, dsize, packed[0], packed[1], packed[2],
           packed[3]);
    /* Fortran order: the first index varies fastest (column-major 6 x 4: element (i, j) at
       i + 6 j); dimension 0 cyclic over the processes. */
    int g3[2] = {6, 4}, dist3[2] = {MPI_DISTRIBUTE_CYCLIC, MPI_DISTRIBUTE_NONE}, p3[2] = {size, 1};
    MPI_Type_create_darray(size, rank, 2, g3, dist3, dargs2, p3, MPI_ORDER_FORTRAN, MPI_INT, &d3);
    MPI_Type_commit(&d3);
    pos = 0;
    MPI_Pack(global, 1, d3, packed, sizeof packed, &pos, MPI_COMM_WORLD);
    MPI_Type_get_envelope(d3, &ni, &na, &nd, &comb);
    printf("rank %d: darray cyclic Fortran values %d %d %d %d envelope %d %d %d %d\n", rank, packed[0], packed[1],
           packed[2], packed[3], ni, na, nd, comb == MPI_COMBINER_DARRAY);
    MPI_Type_free(&d1);
    MPI_Type_free(&d2);
    MPI_Type_free(&d3);

    /* Beyond INT_MAX elements: MPI_Type_contiguous_c of bytes, its size and decoding. */
    MPI_Datatype huge;
    MPI_Count n = (MPI_Count)INT_MAX + 1000, hsize, cni, cna, cnl, cnd, counts[1];
    MPI_Type_contiguous_c(n, MPI_BYTE, &huge);
    MPI_Type_size_c(huge, &hsize);
    int isize;
    MPI_Type_size(huge, &isize);
    MPI_Type_get_envelope_c(huge, &cni, &cna, &cnl, &cnd, &comb);
    MPI_Datatype inner;
    MPI_Type_get_contents_c(huge, 0, 0, 1, 1, NULL, NULL, counts, &inner);
    printf("rank %d: huge size %d int size undefined %d envelope %ld %ld %ld %ld %d contents %d byte %d\n", rank,
           hsize == n, isize == MPI_UNDEFINED, (long)cni, (long)cna, (long)cnl, (long)cnd,
           comb == MPI_COMBINER_CONTIGUOUS, counts[0] == n, inner == MPI_BYTE);
    MPI_Type_free(&huge);

    /* Names. */
    char name[MPI_MAX_OBJECT_NAME];
    int len;
    MPI_Type_get_name(MPI_DATATYPE_NULL, name, &len);
    printf("rank %d: name of null %s\n", rank, name);
    MPI_Type_set_name(MPI_INT, "my int");
    MPI_Type_get_name(MPI_INT, name, &len);
    printf("rank %d: name set on MPI_INT %s\n", rank, name);
    MPI_Type_get_name(MPI_C_FLOAT_COMPLEX, name, &len);
    printf("rank %d: name %s\n", rank, name);

    MPI_Finalize();
    return 0;
}
