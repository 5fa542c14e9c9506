/* Communicators and groups: each rank prints what it computed. Run on 4 processes. */
#include <mpi.h>
#include <stdio.h>

int main(int argc, char **argv) {
    int rank, size, r, s, res, sum, eh, rc;
    MPI_Comm dup, old, half, none, pair, world = MPI_COMM_WORLD;
    MPI_Group wg, pg, u, in, diff;
    int pick[2] = {3, 1}, back[2];

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);

    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    MPI_Comm_compare(MPI_COMM_WORLD, dup, &res);
    MPI_Comm_rank(dup, &r);
    MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, dup);
    MPI_Comm_get_errhandler(dup, &eh);
    printf("dup %d: congruent %d rank %d sum %d inherits %d\n", rank, res == MPI_CONGRUENT, r, sum,
           eh == MPI_ERRORS_RETURN);

    /* By parity, in reverse order of rank. */
    MPI_Comm_split(MPI_COMM_WORLD, rank % 2, -rank, &half);
    MPI_Comm_rank(half, &r);
    MPI_Comm_size(half, &s);
    MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, half);
    MPI_Comm_compare(MPI_COMM_WORLD, half, &res);
    printf("split %d: rank %d size %d sum %d unequal %d\n", rank, r, s, sum, res == MPI_UNEQUAL);

    MPI_Comm_split(MPI_COMM_WORLD, rank == 0 ? MPI_UNDEFINED : 1, 0, &none);
    printf("undefined %d: null %d\n", rank, none == MPI_COMM_NULL);

    /* Groups: ranks 3 and 1 of the world, in that order. */
    MPI_Comm_group(MPI_COMM_WORLD, &wg);
    MPI_Group_incl(wg, 2, pick, &pg);
    MPI_Group_rank(pg, &r);
    MPI_Group_size(pg, &s);
    MPI_Group_translate_ranks(pg, 2, (int[]){0, 1}, wg, back);
    MPI_Group_excl(wg, 2, pick, &diff);
    MPI_Group_union(pg, diff, &u);
    MPI_Group_intersection(pg, diff, &in);
    MPI_Group_compare(wg, u, &res);
    {
        int us, is, ds;
        MPI_Group_size(u, &us);
        MPI_Group_size(in, &is);
        MPI_Group_size(diff, &ds);
        printf("group %d: rank %d size %d translated %d %d union %d similar %d inter empty %d diff %d\n", rank,
               r == MPI_UNDEFINED ? -1 : r, s, back[0], back[1], us, res == MPI_SIMILAR, in == MPI_GROUP_EMPTY || is == 0,
               ds);
    }
    MPI_Comm_create(MPI_COMM_WORLD, pg, &pair);
    if (pair != MPI_COMM_NULL) {
        int v = rank == 3 ? 42 : 0;
        MPI_Comm_rank(pair, &r);
        MPI_Bcast(&v, 1, MPI_INT, 0, pair);
        printf("create %d: rank %d got %d\n", rank, r, v);
        MPI_Comm_free(&pair);
    } else {
        printf("create %d: not a member\n", rank);
    }

    MPI_Group_free(&pg);
    MPI_Group_free(&u);
    MPI_Group_free(&in);
    MPI_Group_free(&diff);
    MPI_Group_free(&wg);
    old = dup;
    MPI_Comm_free(&dup);
    MPI_Comm_free(&half);
    if (none != MPI_COMM_NULL) MPI_Comm_free(&none);
    rc = MPI_Comm_free(&world);
    printf("free %d: null %d world refused %d group null %d\n", rank, dup == MPI_COMM_NULL, rc == MPI_ERR_COMM,
           wg == MPI_GROUP_NULL);
    rc = MPI_Send(&rank, 1, MPI_INT, 0, 0, old);
    printf("freed %d: %d\n", rank, rc);
    MPI_Finalize();
    return 0;
}
