/* Derived datatypes between ranks 0 and 1 (and collectives on them). Run on 2 processes. */
#include <mpi.h>
#include <stddef.h>
#include <stdio.h>

struct rec {
    int a;
    double b;
    char c;
};

int main(int argc, char **argv) {
    int rank, i, j, n, size, rc;
    int m[4][4], got[16];
    MPI_Datatype three, column, col1, idx, rect, dup, unused;
    MPI_Aint lb, ext, tlb, text;
    MPI_Status st;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    for (i = 0; i < 4; i++)
        for (j = 0; j < 4; j++) m[i][j] = rank == 0 ? i * 10 + j : -1;

    MPI_Type_contiguous(3, MPI_INT, &three);
    MPI_Type_commit(&three);
    MPI_Type_vector(4, 1, 4, MPI_INT, &column);
    MPI_Type_commit(&column);
    MPI_Type_create_resized(column, 0, sizeof(int), &col1);
    MPI_Type_commit(&col1);
    {
        int bl[2] = {2, 1}, dp[2] = {0, 5};
        MPI_Type_indexed(2, bl, dp, MPI_INT, &idx);
        MPI_Type_commit(&idx);
    }
    {
        int bl[3] = {1, 1, 1};
        struct rec probe;
        MPI_Aint base, dp[3];
        MPI_Get_address(&probe, &base);
        MPI_Get_address(&probe.a, &dp[0]);
        MPI_Get_address(&probe.b, &dp[1]);
        MPI_Get_address(&probe.c, &dp[2]);
        dp[0] = MPI_Aint_diff(dp[0], base);
        dp[1] = MPI_Aint_diff(dp[1], base);
        dp[2] = MPI_Aint_diff(dp[2], base);
        if (dp[1] != offsetof(struct rec, b) || dp[2] != offsetof(struct rec, c)) printf("bad addresses\n");
        MPI_Datatype ts[3] = {MPI_INT, MPI_DOUBLE, MPI_CHAR};
        MPI_Type_create_struct(3, bl, dp, ts, &rect);
        MPI_Type_commit(&rect);
    }

    if (rank == 0) {
        struct rec rs[2] = {{1, 2.5, 'x'}, {3, 4.5, 'y'}};
        MPI_Send(&m[0][0], 2, three, 1, 1, MPI_COMM_WORLD);
        MPI_Send(&m[0][1], 1, column, 1, 2, MPI_COMM_WORLD);
        MPI_Send(&m[0][0], 2, col1, 1, 3, MPI_COMM_WORLD);
        MPI_Send(&m[0][0], 1, idx, 1, 4, MPI_COMM_WORLD);
        MPI_Send(rs, 2, rect, 1, 5, MPI_COMM_WORLD);
    } else {
        struct rec rs[2];
        MPI_Recv(got, 16, MPI_INT, 0, 1, MPI_COMM_WORLD, &st);
        MPI_Get_count(&st, MPI_INT, &n);
        MPI_Get_count(&st, three, &size);
        printf("contiguous: %d ints %d elements last %d\n", n, size, got[5]);
        MPI_Recv(got, 4, MPI_INT, 0, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        printf("column: %d %d %d %d\n", got[0], got[1], got[2], got[3]);
        MPI_Recv(got, 8, MPI_INT, 0, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        printf("resized: %d %d %d\n", got[0], got[4], got[7]);
        MPI_Recv(got, 3, MPI_INT, 0, 4, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        printf("indexed: %d %d %d\n", got[0], got[1], got[2]);
        MPI_Recv(rs, 2, rect, 0, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        printf("struct: %d %.1f %c %d %.1f %c\n", rs[0].a, rs[0].b, rs[0].c, rs[1].a, rs[1].b, rs[1].c);
    }

    /* Received as a column at rank 1: a broadcast into the second column. */
    MPI_Bcast(&m[0][2], 1, column, 0, MPI_COMM_WORLD);
    printf("rank %d: bcast column %d %d\n", rank, m[0][2], m[3][2]);
    {
        int v[6] = {rank, rank, rank, 1, 2, 3}, s[6];
        MPI_Allreduce(v, s, 2, three, MPI_SUM, MPI_COMM_WORLD);
        printf("rank %d: allreduce %d %d\n", rank, s[0], s[5]);
    }

    MPI_Type_size(column, &size);
    MPI_Type_get_extent(column, &lb, &ext);
    MPI_Type_get_true_extent(col1, &tlb, &text);
    printf("rank %d: column size %d extent %ld true %ld %ld\n", rank, size, (long)ext, (long)tlb, (long)text);
    MPI_Type_get_extent(rect, &lb, &ext);
    {
        MPI_Count sx, lx, ex;
        MPI_Type_size_x(rect, &sx);
        MPI_Type_get_extent_x(rect, &lx, &ex);
        printf("rank %d: struct extent matches %d size_x %ld extent_x %ld\n", rank, ext == (MPI_Aint)sizeof(struct rec),
               (long)sx, (long)ex);
    }
    {
        MPI_Status fake;
        int cnt, cancelled;
        MPI_Status_set_elements(&fake, MPI_DOUBLE, 3);
        MPI_Status_set_cancelled(&fake, 1);
        MPI_Get_count(&fake, MPI_DOUBLE, &cnt);
        MPI_Test_cancelled(&fake, &cancelled);
        MPI_Pcontrol(1);
        printf("rank %d: set elements %d cancelled %d\n", rank, cnt, cancelled);
    }

    /* Subarrays: the 2 x 2 block from (1, 1) in C order; 2 x 1 from (0, 3) in Fortran order. */
    {
        int sizes[2] = {4, 4}, sub[2] = {2, 2}, st2[2] = {1, 1}, fsub[2] = {2, 1}, fst[2] = {0, 3}, out[4], sz;
        MPI_Datatype block, fblock;
        MPI_Aint flb, fext;
        MPI_Type_create_subarray(2, sizes, sub, st2, MPI_ORDER_C, MPI_INT, &block);
        MPI_Type_commit(&block);
        MPI_Type_create_subarray(2, sizes, fsub, fst, MPI_ORDER_FORTRAN, MPI_INT, &fblock);
        MPI_Type_commit(&fblock);
        MPI_Type_get_extent(block, &flb, &fext);
        MPI_Type_size(block, &sz);
        if (rank == 0) {
            MPI_Send(&m[0][0], 1, block, 1, 7, MPI_COMM_WORLD);
            MPI_Send(&m[0][0], 1, fblock, 1, 8, MPI_COMM_WORLD);
        } else {
            MPI_Recv(out, 4, MPI_INT, 0, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            printf("subarray: %d %d %d %d", out[0], out[1], out[2], out[3]);
            MPI_Recv(out, 2, MPI_INT, 0, 8, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            printf(" fortran %d %d extent %ld size %d\n", out[0], out[1], (long)fext, sz);
        }
        MPI_Type_free(&block);
        MPI_Type_free(&fblock);
    }

    /* MPI_BOTTOM: a datatype of the absolute addresses of two unrelated variables. */
    {
        static int alone = 0;
        static double apart = 0;
        int bl[2] = {1, 1};
        MPI_Aint where[2];
        MPI_Datatype ts[2] = {MPI_INT, MPI_DOUBLE}, abs_t;
        if (rank == 0) {
            alone = 77;
            apart = 8.5;
        }
        MPI_Get_address(&alone, &where[0]);
        MPI_Get_address(&apart, &where[1]);
        MPI_Type_create_struct(2, bl, where, ts, &abs_t);
        MPI_Type_commit(&abs_t);
        if (rank == 0) {
            MPI_Send(MPI_BOTTOM, 1, abs_t, 1, 12, MPI_COMM_WORLD);
        } else {
            MPI_Recv(MPI_BOTTOM, 1, abs_t, 0, 12, MPI_COMM_WORLD, &st);
            printf("bottom: %d %.1f from %d\n", alone, apart, st.MPI_SOURCE);
            alone = 5;
            apart = 0.5;
        }
        MPI_Bcast(MPI_BOTTOM, 1, abs_t, 1, MPI_COMM_WORLD);
        printf("rank %d: bottom bcast %d %.1f\n", rank, alone, apart);
        MPI_Type_free(&abs_t);
    }

    /* Decoding: envelopes and contents; names. */
    {
        int ni, na, nd, comb, ints[8], vcomb, len;
        MPI_Aint as[8];
        MPI_Datatype ts[8];
        char nm[MPI_MAX_OBJECT_NAME];
        MPI_Type_get_envelope(column, &ni, &na, &nd, &comb);
        MPI_Type_get_contents(column, 8, 8, 8, ints, as, ts);
        printf("rank %d: vector %d %d %d %d ints %d %d %d int %d\n", rank, ni, na, nd, comb == MPI_COMBINER_VECTOR,
               ints[0], ints[1], ints[2], ts[0] == MPI_INT);
        MPI_Type_get_envelope(rect, &ni, &na, &nd, &comb);
        MPI_Type_get_contents(rect, 8, 8, 8, ints, as, ts);
        printf("rank %d: struct %d %d %d %d types %d\n", rank, ni, na, nd, comb == MPI_COMBINER_STRUCT,
               ts[0] == MPI_INT && ts[1] == MPI_DOUBLE && ts[2] == MPI_CHAR);
        MPI_Type_get_envelope(col1, &ni, &na, &nd, &comb);
        MPI_Type_get_contents(col1, 8, 8, 8, ints, as, ts);
        MPI_Type_get_envelope(ts[0], &ni, &na, &nd, &vcomb);
        MPI_Type_free(&ts[0]);
        printf("rank %d: resized %d extent %ld inner vector %d\n", rank, comb == MPI_COMBINER_RESIZED, (long)as[1],
               vcomb == MPI_COMBINER_VECTOR);
        MPI_Type_get_envelope(MPI_INT, &ni, &na, &nd, &comb);
        MPI_Type_set_name(three, "triple");
        MPI_Type_get_name(three, nm, &len);
        printf("rank %d: named %d %s", rank, comb == MPI_COMBINER_NAMED, nm);
        MPI_Type_get_name(MPI_DOUBLE, nm, &len);
        printf(" %s\n", nm);
    }

    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    {
        /* Too many blocks for the library's layouts: refused, not built; copies of one run
           are one block, however many. */
        MPI_Datatype big;
        int rc_vector = MPI_Type_vector(2147483647, 1, 2, MPI_BYTE, &big);
        int rc_contiguous = MPI_Type_contiguous(2147483647, MPI_BYTE, &big), big_size = 0;
        MPI_Type_size(big, &big_size);
        MPI_Type_free(&big);
        printf("rank %d: huge vector %d contiguous %d size %d\n", rank, rc_vector, rc_contiguous, big_size);
    }
    MPI_Type_contiguous(2, MPI_INT, &unused);
    rc = MPI_Send(&m[0][0], 1, unused, rank, 9, MPI_COMM_WORLD);
    MPI_Type_dup(three, &dup);
    MPI_Type_size(dup, &size);
    MPI_Type_free(&dup);
    MPI_Type_free(&unused);
    printf("rank %d: uncommitted %d dup size %d freed %d\n", rank, rc, size, dup == MPI_DATATYPE_NULL);
    MPI_Type_free(&three);
    MPI_Type_free(&column);
    MPI_Type_free(&col1);
    MPI_Type_free(&idx);
    MPI_Type_free(&rect);
    MPI_Finalize();
    return 0;
}
