/* Cartesian topologies, MPI_Comm_split_type, MPI_Waitsome and MPI_Testsome. Run on 4
 * processes. */
#include <mpi.h>
#include <stdio.h>

int main(int argc, char **argv) {
    int rank, size, dims[2] = {2, 2}, periods[2] = {1, 0}, coords[2], r, src, dst, t, nd, keep[2] = {0, 1};
    int gd[2], gp[2], gc[2], s, sum, i, out, idx[8], total = 0, rounds = 0;
    MPI_Comm cart, row, shared;
    MPI_Request rs[8];
    MPI_Status sts[8];
    int vals[8];

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);

    MPI_Cart_create(MPI_COMM_WORLD, 2, dims, periods, 0, &cart);
    MPI_Comm_rank(cart, &r);
    MPI_Cart_coords(cart, r, 2, coords);
    MPI_Cart_shift(cart, 0, 1, &src, &dst);
    MPI_Topo_test(cart, &t);
    MPI_Cartdim_get(cart, &nd);
    MPI_Cart_get(cart, 2, gd, gp, gc);
    {
        int c2[2] = {coords[0], 1 - coords[1]}, other;
        MPI_Cart_rank(cart, c2, &other);
        printf("rank %d: coords %d %d shift %d %d cart %d ndims %d get %d%d %d%d %d%d other %d\n", rank, coords[0],
               coords[1], src, dst, t == MPI_CART, nd, gd[0], gd[1], gp[0], gp[1], gc[0], gc[1], other);
    }
    MPI_Cart_sub(cart, keep, &row);
    MPI_Comm_size(row, &s);
    MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, row);
    MPI_Topo_test(MPI_COMM_WORLD, &t);
    printf("rank %d: row size %d sum %d world undefined %d\n", rank, s, sum, t == MPI_UNDEFINED);
    MPI_Comm_free(&row);
    MPI_Comm_free(&cart);

    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, -rank, MPI_INFO_NULL, &shared);
    MPI_Comm_size(shared, &s);
    MPI_Comm_rank(shared, &r);
    printf("rank %d: shared size %d rank %d\n", rank, s, r);
    MPI_Comm_free(&shared);

    /* Rank 0 receives one int from each other rank, completed some at a time. */
    if (rank == 0) {
        for (i = 1; i < size; i++) MPI_Irecv(&vals[i], 1, MPI_INT, i, 4, MPI_COMM_WORLD, &rs[i - 1]);
        out = 0;
        while (out != MPI_UNDEFINED) {
            MPI_Waitsome(size - 1, rs, &out, idx, sts);
            if (out == MPI_UNDEFINED) break;
            for (i = 0; i < out; i++) total += vals[idx[i] + 1] * (sts[i].MPI_SOURCE == idx[i] + 1);
            rounds++;
        }
        MPI_Testsome(size - 1, rs, &out, idx, sts);
        printf("rank 0: waitsome total %d rounds ok %d testsome undefined %d\n", total, rounds >= 1 && rounds < size,
               out == MPI_UNDEFINED);
    } else {
        int v = rank * 5;
        MPI_Send(&v, 1, MPI_INT, 0, 4, MPI_COMM_WORLD);
    }
    {
        int flag = -1;
        MPI_Status st;
        MPI_Recv(NULL, 0, MPI_INT, MPI_PROC_NULL, 0, MPI_COMM_WORLD, &st);
        MPI_Test_cancelled(&st, &flag);
        printf("rank %d: cancelled %d\n", rank, flag);
    }
    MPI_Finalize();
    return 0;
}
