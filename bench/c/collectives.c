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
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WARM_S 0.02
#define DEFAULT_TARGET_S 0.2
#define MIN_ITERS 5L
#define MAX_ITERS 1000000L
#define MAX_SIZES 64

enum coll {
    BARRIER, BCAST, REDUCE, ALLREDUCE, GATHER, SCATTER, ALLGATHER, ALLTOALL,
    REDUCE_SCATTER_BLOCK, SCAN, NCOLL
};
static const char *NAMES[NCOLL] = {"barrier", "bcast", "reduce", "allreduce", "gather",
                                   "scatter", "allgather", "alltoall",
                                   "reduce_scatter_block", "scan"};
static const long DEFAULT_SIZES[] = {8, 65536};

static int rank, np;
/* Byte buffers (np * maximum size) and double buffers (np * maximum count). */
static unsigned char *sb, *rb;
static double *sd, *rd;

static int is_double(int c)
{
    return c == REDUCE || c == ALLREDUCE || c == REDUCE_SCATTER_BLOCK || c == SCAN;
}

/* The byte pattern: a value that depends on (a, b), never 0. */
static unsigned char pat(long a, long b) { return (unsigned char)((a * 31 + b * 7) % 251 + 1); }

/* Fill the send buffers (and clear the receive buffers) for collective c, n elements. */
static void prepare(int c, long n)
{
    long i, j;
    switch (c) {
    case BCAST:
        memset(rb, 0, (size_t)n);
        if (rank == 0)
            for (i = 0; i < n; i++) rb[i] = pat(i, 0);
        break;
    case GATHER: case ALLGATHER:
        for (i = 0; i < n; i++) sb[i] = pat(rank, i);
        memset(rb, 0, (size_t)(n * np));
        break;
    case SCATTER:
        if (rank == 0)
            for (j = 0; j < np; j++)
                for (i = 0; i < n; i++) sb[j * n + i] = pat(j, i);
        memset(rb, 0, (size_t)n);
        break;
    case ALLTOALL: /* block j of rank r goes to rank j: pat(r * np + j, i) */
        for (j = 0; j < np; j++)
            for (i = 0; i < n; i++) sb[j * n + i] = pat((long)rank * np + j, i);
        memset(rb, 0, (size_t)(n * np));
        break;
    case REDUCE: case ALLREDUCE: case SCAN:
        for (i = 0; i < n; i++) { sd[i] = rank + 1; rd[i] = 0; }
        break;
    case REDUCE_SCATTER_BLOCK: /* element of block j on rank r: (r + 1) * (j + 1) */
        for (j = 0; j < np; j++)
            for (i = 0; i < n; i++) sd[j * n + i] = (double)(rank + 1) * (double)(j + 1);
        for (i = 0; i < n; i++) rd[i] = 0;
        break;
    default:
        break;
    }
}

/* 1 if the last operation of collective c (n elements) left the right result here. */
static int check(int c, long n)
{
    long i, j;
    double tri = (double)np * (np + 1) / 2.0;
    switch (c) {
    case BCAST:
        for (i = 0; i < n; i++) if (rb[i] != pat(i, 0)) return 0;
        break;
    case GATHER:
        if (rank != 0) break;
        /* fall through */
    case ALLGATHER:
        for (j = 0; j < np; j++)
            for (i = 0; i < n; i++) if (rb[j * n + i] != pat(j, i)) return 0;
        break;
    case SCATTER:
        for (i = 0; i < n; i++) if (rb[i] != pat(rank, i)) return 0;
        break;
    case ALLTOALL: /* block j received from rank j */
        for (j = 0; j < np; j++)
            for (i = 0; i < n; i++) if (rb[j * n + i] != pat(j * np + rank, i)) return 0;
        break;
    case REDUCE:
        if (rank != 0) break;
        /* fall through */
    case ALLREDUCE:
        for (i = 0; i < n; i++) if (rd[i] != tri) return 0;
        break;
    case SCAN:
        for (i = 0; i < n; i++) if (rd[i] != (double)(rank + 1) * (rank + 2) / 2.0) return 0;
        break;
    case REDUCE_SCATTER_BLOCK:
        for (i = 0; i < n; i++) if (rd[i] != (double)(rank + 1) * tri) return 0;
        break;
    default:
        break;
    }
    return 1;
}

/* n back-to-back operations of collective c with n_el elements. */
static void run(int c, long n_el, long n)
{
    int k = (int)n_el;
    for (long it = 0; it < n; it++) {
        switch (c) {
        case BARRIER:
            MPI_Barrier(MPI_COMM_WORLD);
            break;
        case BCAST:
            MPI_Bcast(rb, k, MPI_BYTE, 0, MPI_COMM_WORLD);
            break;
        case REDUCE:
            MPI_Reduce(sd, rd, k, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
            break;
        case ALLREDUCE:
            MPI_Allreduce(sd, rd, k, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
            break;
        case GATHER:
            MPI_Gather(sb, k, MPI_BYTE, rb, k, MPI_BYTE, 0, MPI_COMM_WORLD);
            break;
        case SCATTER:
            MPI_Scatter(sb, k, MPI_BYTE, rb, k, MPI_BYTE, 0, MPI_COMM_WORLD);
            break;
        case ALLGATHER:
            MPI_Allgather(sb, k, MPI_BYTE, rb, k, MPI_BYTE, MPI_COMM_WORLD);
            break;
        case ALLTOALL:
            MPI_Alltoall(sb, k, MPI_BYTE, rb, k, MPI_BYTE, MPI_COMM_WORLD);
            break;
        case REDUCE_SCATTER_BLOCK:
            MPI_Reduce_scatter_block(sd, rd, k, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
            break;
        case SCAN:
            MPI_Scan(sd, rd, k, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
            break;
        }
    }
}

static void measure(int c, long bytes, double target_s)
{
    long n_el = is_double(c) ? (bytes / 8 > 0 ? bytes / 8 : 1) : bytes;
    long shown = c == BARRIER ? 0 : is_double(c) ? n_el * 8 : bytes;
    prepare(c, n_el);

    /* Warm-up: batches of 1, 2, 4, ... operations until the slowest rank's batch lasts
     * WARM_S; rank 0 decides and broadcasts [done, iters]. */
    long n = 1, ctl[2];
    for (;;) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        run(c, n_el, n);
        double dt = MPI_Wtime() - t0, dtmax = 0.0;
        MPI_Reduce(&dt, &dtmax, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
        if (rank == 0) {
            double per_op = dtmax / (double)n;
            long it = per_op > 0 ? (long)(target_s / per_op) : MAX_ITERS;
            if (it < MIN_ITERS) it = MIN_ITERS;
            if (it > MAX_ITERS) it = MAX_ITERS;
            ctl[0] = dtmax >= WARM_S || n >= MAX_ITERS;
            ctl[1] = it;
        }
        MPI_Bcast(ctl, 2, MPI_LONG, 0, MPI_COMM_WORLD);
        if (ctl[0]) break;
        n *= 2;
    }
    long iters = ctl[1];

    prepare(c, n_el);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    run(c, n_el, iters);
    double per = (MPI_Wtime() - t0) / (double)iters, permax = 0.0;
    MPI_Reduce(&per, &permax, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);

    int bad = !check(c, n_el), nbad = 0;
    MPI_Reduce(&bad, &nbad, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        printf("coll %s %d %ld %.3f\n", NAMES[c], np, shown, permax * 1e6);
        if (nbad) printf("error %s %d %ld %d\n", NAMES[c], np, shown, nbad);
        fflush(stdout);
    }
}

int main(int argc, char **argv)
{
    int want[NCOLL], order[NCOLL], ncoll = 0;
    long sizes[MAX_SIZES], maxsize = 8;
    int nsizes = 0;
    double target_s = DEFAULT_TARGET_S;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &np);

    memset(want, 0, sizeof want);
    if (argc > 1 && argv[1][0] != '\0') {
        char *s = strdup(argv[1]);
        for (char *tok = strtok(s, ","); tok; tok = strtok(NULL, ",")) {
            int c;
            for (c = 0; c < NCOLL && strcmp(tok, NAMES[c]) != 0; c++) ;
            if (c == NCOLL) {
                if (rank == 0) fprintf(stderr, "collectives: unknown collective '%s'\n", tok);
                MPI_Abort(MPI_COMM_WORLD, 1);
            }
            if (!want[c]) { want[c] = 1; order[ncoll++] = c; }
        }
        free(s);
    } else {
        for (int c = 0; c < NCOLL; c++) order[ncoll++] = c;
    }

    if (argc > 2 && argv[2][0] != '\0') {
        char *s = strdup(argv[2]);
        for (char *tok = strtok(s, ","); tok && nsizes < MAX_SIZES; tok = strtok(NULL, ",")) {
            char *end;
            long v = strtol(tok, &end, 10);
            if (*end != '\0' || v < 0 || v > (1L << 28)) {
                if (rank == 0) fprintf(stderr, "collectives: bad size '%s'\n", tok);
                MPI_Abort(MPI_COMM_WORLD, 1);
            }
            sizes[nsizes++] = v;
        }
        free(s);
    } else {
        nsizes = (int)(sizeof DEFAULT_SIZES / sizeof DEFAULT_SIZES[0]);
        memcpy(sizes, DEFAULT_SIZES, sizeof DEFAULT_SIZES);
    }
    for (int i = 0; i < nsizes; i++)
        if (sizes[i] > maxsize) maxsize = sizes[i];

    if (argc > 3 && argv[3][0] != '\0') {
        target_s = atof(argv[3]);
        if (!(target_s > 0)) {
            if (rank == 0) fprintf(stderr, "collectives: bad TARGET_S '%s'\n", argv[3]);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
    }

    sb = malloc((size_t)maxsize * np);
    rb = malloc((size_t)maxsize * np);
    sd = malloc(sizeof(double) * (size_t)(maxsize / 8 + 1) * np);
    rd = malloc(sizeof(double) * (size_t)(maxsize / 8 + 1) * np);
    if (!sb || !rb || !sd || !rd) {
        fprintf(stderr, "collectives: out of memory\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }

    for (int k = 0; k < ncoll; k++) {
        int c = order[k];
        if (c == BARRIER) {
            measure(c, 0, target_s);
            continue;
        }
        for (int i = 0; i < nsizes; i++) measure(c, sizes[i], target_s);
    }

    free(sb); free(rb); free(sd); free(rd);
    MPI_Finalize();
    return 0;
}
