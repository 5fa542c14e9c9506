/*
 * Collectives for the MPICH-ABI comparison (bench/abi_speed.sh): one binary, built once by
 * `mpicc.mpich`, run with MPICH's library and with p2pmpi's (only the library path differs).
 *
 * Usage: mpiexec -n N ./abi_coll [NAMES [SIZES [BATCHES [TARGET_S]]]]
 *   NAMES     comma-separated subset of barrier,bcast,allreduce,alltoall (default: all four;
 *             empty string = default)
 *   SIZES     comma-separated sizes in bytes (default 8,1024,65536,1048576)
 *   BATCHES   timed batches per (collective, size) (default 9)
 *   TARGET_S  seconds of timed operations per (collective, size), over all batches (default 0.3)
 *
 * Rank 0 first prints "library <the first line of MPI_Get_library_version>" (which library
 * ran), then prints one line per (collective, size):
 *   abi_coll <name> <np> <bytes> <us_per_op_median> <us_per_op_min> <batches> <ops_per_batch>
 * A batch's time is the slowest rank's (max over ranks, reduced after the batches, outside
 * the timing); the median and minimum are over the batches. If the last operation left a
 * wrong result on some rank it prints instead
 *   error abi_coll <name> <np> <bytes> <ranks_with_wrong_result>
 * and last "done", once everything is measured (before MPI_Finalize).
 *
 * <bytes>: barrier 0 (one line); bcast the buffer (MPI_BYTE, root 0); allreduce the vector
 * of doubles per process (MPI_DOUBLE, MPI_SUM, bytes / 8 of them, at least 1); alltoall the
 * block per process pair (MPI_BYTE; buffers of np * bytes).
 * Warm-up as in bench/c/collectives.c: batches of 1, 2, 4, ... operations until the slowest
 * rank's lasts WARM_S; rank 0 then picks the operations per batch and broadcasts them.
 */
#define BENCH_COLLECTIVES
#include "bench_util.h"

#define DEFAULT_TARGET_S 0.3
#define DEFAULT_BATCHES 9
#define MAX_BATCHES 101
#define MIN_ITERS 2L

static const int ALLOWED[] = {BARRIER, BCAST, ALLREDUCE, ALLTOALL};
static const long DEFAULT_SIZES[] = {8, 1024, 65536, 1048576};

static void measure(int c, long bytes, int batches, double target_s)
{
    long n_el = elements(c, bytes);
    double per[MAX_BATCHES], permax[MAX_BATCHES];
    prepare(c, n_el);
    /* Rank 0 decides when the warm-up is done and broadcasts the operations per batch. */
    long iters = warm_up(c, n_el, target_s / batches, MIN_ITERS);

    prepare(c, n_el);
    for (int b = 0; b < batches; b++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        run(c, n_el, iters);
        per[b] = (MPI_Wtime() - t0) / (double)iters * 1e6;
    }
    MPI_Reduce(per, permax, batches, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);

    int nbad = wrong(c, n_el);
    if (rank == 0) {
        double med = median(permax, batches);
        if (nbad)
            printf("error abi_coll %s %d %ld %d\n", NAMES[c], np, shown(c, bytes), nbad);
        else
            printf("abi_coll %s %d %ld %.3f %.3f %d %ld\n", NAMES[c], np, shown(c, bytes), med, permax[0], batches,
                   iters);
        fflush(stdout);
    }
}

int main(int argc, char **argv)
{
    int order[NCOLL], ncoll, nsizes, batches = DEFAULT_BATCHES;
    long sizes[MAX_SIZES], maxsize = 8;
    double target_s = DEFAULT_TARGET_S;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    print_library();
    MPI_Comm_size(MPI_COMM_WORLD, &np);
    skew = 1;

    ncoll = parse_colls("abi_coll", argc > 1 ? argv[1] : "", ALLOWED, (int)(sizeof ALLOWED / sizeof ALLOWED[0]),
                        order);
    nsizes = parse_sizes("abi_coll", argc > 2 ? argv[2] : "", 1L << 28, DEFAULT_SIZES,
                         (int)(sizeof DEFAULT_SIZES / sizeof DEFAULT_SIZES[0]), sizes);
    if (argc > 3 && argv[3][0] != '\0') batches = (int)parse_long("abi_coll", argv[3], 1, MAX_BATCHES, "BATCHES");
    if (argc > 4 && argv[4][0] != '\0') target_s = parse_target("abi_coll", argv[4]);
    for (int i = 0; i < nsizes; i++)
        if (sizes[i] > maxsize) maxsize = sizes[i];

    allocate("abi_coll", maxsize);
    for (int k = 0; k < ncoll; k++) {
        int c = order[k];
        if (c == BARRIER) {
            measure(c, 0, batches, target_s);
            continue;
        }
        for (int i = 0; i < nsizes; i++) measure(c, sizes[i], batches, target_s);
    }

    release();
    if (rank == 0) {
        printf("done\n"); /* everything measured: what follows is MPI_Finalize */
        fflush(stdout);
    }
    MPI_Finalize();
    return 0;
}
