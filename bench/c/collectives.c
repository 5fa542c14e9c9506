/*
 * MPI collectives benchmark (reference baseline for p2pmpi's coll_bench example).
 *
 * Usage: mpirun -np N ./collectives [NAMES [SIZES [TARGET_S]]]
 *   NAMES    comma-separated subset of: barrier,bcast,reduce,allreduce,gather,scatter,
 *            allgather,alltoall,reduce_scatter_block,scan  (default: all, in that order;
 *            empty string = default)
 *   SIZES    comma-separated sizes in bytes (default: 8,65536; empty string = default)
 *   TARGET_S seconds of timed loop per (collective, size) (default 0.2)
 *
 * Rank 0 prints one line per (collective, size):
 *   coll <name> <np> <bytes> <us_per_op>
 * and, only if the last operation left a wrong result on some rank:
 *   error <name> <np> <bytes> <ranks_with_wrong_result>
 *
 * What <bytes> means:
 *   barrier                           0 (one line, whatever SIZES says)
 *   bcast                             the broadcast buffer (MPI_BYTE), root 0
 *   gather, scatter                   the block per process (MPI_BYTE), root 0; the root's
 *                                     full buffer is np * bytes
 *   allgather, alltoall               the block per process (MPI_BYTE); buffers are np * bytes
 *   reduce, allreduce, scan           the vector of doubles per process (MPI_DOUBLE, MPI_SUM;
 *                                     bytes / 8 doubles, at least 1), reduce to root 0
 *   reduce_scatter_block              the block of doubles each process receives (bytes / 8
 *                                     doubles, MPI_SUM); every process contributes np blocks
 *
 * Per (collective, size): warm-up batches of n operations, n = 1, 2, 4, ..., until one
 * batch lasts >= WARM_S on the slowest rank (max over ranks via MPI_Reduce to rank 0).
 * From that batch rank 0 picks the number of timed operations so that they last about
 * TARGET_S, clamped to [MIN_ITERS, MAX_ITERS], and broadcasts it. Then MPI_Barrier, the
 * timed loop (back-to-back operations, same buffers), and the time reported is
 * max over ranks of (t_end - t_start) / iters (MPI_Reduce with MPI_MAX to rank 0).
 * After the timed loop, each rank checks the result of the last operation (not timed).
 * p2pmpi's examples/coll_bench.rs uses the same algorithm.
 */
#define BENCH_COLLECTIVES
#include "bench_util.h"

#define DEFAULT_TARGET_S 0.2
#define MIN_ITERS 5L

static const long DEFAULT_SIZES[] = {8, 65536};
static const int ALL[NCOLL] = {BARRIER, BCAST, REDUCE, ALLREDUCE, GATHER, SCATTER, ALLGATHER, ALLTOALL,
                               REDUCE_SCATTER_BLOCK, SCAN};

static void measure(int c, long bytes, double target_s)
{
    long n_el = elements(c, bytes);
    prepare(c, n_el);
    /* Rank 0 decides when the warm-up is done and broadcasts the timed operations. */
    long iters = warm_up(c, n_el, target_s, MIN_ITERS);

    prepare(c, n_el);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    run(c, n_el, iters);
    double per = (MPI_Wtime() - t0) / (double)iters, permax = 0.0;
    MPI_Reduce(&per, &permax, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);

    int nbad = wrong(c, n_el);
    if (rank == 0) {
        printf("coll %s %d %ld %.3f\n", NAMES[c], np, shown(c, bytes), permax * 1e6);
        if (nbad) printf("error %s %d %ld %d\n", NAMES[c], np, shown(c, bytes), nbad);
        fflush(stdout);
    }
}

int main(int argc, char **argv)
{
    int order[NCOLL], ncoll, nsizes;
    long sizes[MAX_SIZES], maxsize = 8;
    double target_s = DEFAULT_TARGET_S;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &np);

    ncoll = parse_colls("collectives", argc > 1 ? argv[1] : "", ALL, NCOLL, order);
    nsizes = parse_sizes("collectives", argc > 2 ? argv[2] : "", 1L << 28, DEFAULT_SIZES,
                         (int)(sizeof DEFAULT_SIZES / sizeof DEFAULT_SIZES[0]), sizes);
    for (int i = 0; i < nsizes; i++)
        if (sizes[i] > maxsize) maxsize = sizes[i];
    if (argc > 3 && argv[3][0] != '\0') target_s = parse_target("collectives", argv[3]);

    allocate("collectives", maxsize);
    for (int k = 0; k < ncoll; k++) {
        int c = order[k];
        if (c == BARRIER) {
            measure(c, 0, target_s);
            continue;
        }
        for (int i = 0; i < nsizes; i++) measure(c, sizes[i], target_s);
    }

    release();
    MPI_Finalize();
    return 0;
}
