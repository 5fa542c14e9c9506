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
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WARM_S 0.02
#define DEFAULT_TARGET_S 0.3
#define DEFAULT_BATCHES 9
#define MAX_BATCHES 101
#define MIN_ITERS 2L
#define MAX_ITERS 1000000L
#define MAX_SIZES 64

enum coll { BARRIER, BCAST, ALLREDUCE, ALLTOALL, NCOLL };
static const char *NAMES[NCOLL] = {"barrier", "bcast", "allreduce", "alltoall"};
static const long DEFAULT_SIZES[] = {8, 1024, 65536, 1048576};

static int rank, np;
static unsigned char *sb, *rb;
static double *sd, *rd;

static unsigned char pat(long a, long b) { return (unsigned char)((a * 31 + b * 7) % 251 + 1); }

static void prepare(int c, long n)
{
    long i, j;
    switch (c) {
    case BCAST:
        memset(rb, 0, (size_t)n);
        if (rank == 0)
            for (i = 0; i < n; i++) rb[i] = pat(i, 0);
        break;
    case ALLTOALL: /* block j of rank r goes to rank j */
        for (j = 0; j < np; j++)
            for (i = 0; i < n; i++) sb[j * n + i] = pat((long)rank * np + j, i);
        memset(rb, 0, (size_t)(n * np));
        break;
    case ALLREDUCE:
        for (i = 0; i < n; i++) { sd[i] = rank + 1 + (double)(i % 3); rd[i] = 0; }
        break;
    default:
        break;
    }
}

static int check(int c, long n)
{
    long i, j;
    switch (c) {
    case BCAST:
        for (i = 0; i < n; i++) if (rb[i] != pat(i, 0)) return 0;
        break;
    case ALLTOALL:
        for (j = 0; j < np; j++)
            for (i = 0; i < n; i++) if (rb[j * n + i] != pat(j * np + rank, i)) return 0;
        break;
    case ALLREDUCE:
        for (i = 0; i < n; i++)
            if (rd[i] != (double)np * (np + 1) / 2.0 + (double)np * (double)(i % 3)) return 0;
        break;
    default:
        break;
    }
    return 1;
}

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
        case ALLREDUCE:
            MPI_Allreduce(sd, rd, k, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
            break;
        case ALLTOALL:
            MPI_Alltoall(sb, k, MPI_BYTE, rb, k, MPI_BYTE, MPI_COMM_WORLD);
            break;
        }
    }
}

/* Rank 0 names the library it runs on: "library <first line of MPI_Get_library_version>". */
static void print_library(void)
{
    char v[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0, me;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    if (me != 0) return;
    MPI_Get_library_version(v, &len);
    v[len < MPI_MAX_LIBRARY_VERSION_STRING ? len : MPI_MAX_LIBRARY_VERSION_STRING - 1] = '\0';
    v[strcspn(v, "\n")] = '\0';
    printf("library %s\n", v);
    fflush(stdout);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void measure(int c, long bytes, int batches, double target_s)
{
    long n_el = c == ALLREDUCE ? (bytes / 8 > 0 ? bytes / 8 : 1) : bytes;
    long shown = c == BARRIER ? 0 : c == ALLREDUCE ? n_el * 8 : bytes;
    double per[MAX_BATCHES], permax[MAX_BATCHES];
    prepare(c, n_el);

    long n = 1, ctl[2];
    for (;;) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        run(c, n_el, n);
        double dt = MPI_Wtime() - t0, dtmax = 0.0;
        MPI_Reduce(&dt, &dtmax, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
        if (rank == 0) {
            double per_op = dtmax / (double)n;
            long it = per_op > 0 ? (long)(target_s / batches / per_op) : MAX_ITERS;
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
    for (int b = 0; b < batches; b++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        run(c, n_el, iters);
        per[b] = (MPI_Wtime() - t0) / (double)iters * 1e6;
    }
    MPI_Reduce(per, permax, batches, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);

    int bad = !check(c, n_el), nbad = 0;
    MPI_Reduce(&bad, &nbad, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        qsort(permax, (size_t)batches, sizeof permax[0], cmp_double);
        double med = batches % 2 ? permax[batches / 2] : (permax[batches / 2 - 1] + permax[batches / 2]) / 2.0;
        if (nbad)
            printf("error abi_coll %s %d %ld %d\n", NAMES[c], np, shown, nbad);
        else
            printf("abi_coll %s %d %ld %.3f %.3f %d %ld\n", NAMES[c], np, shown, med, permax[0], batches, iters);
        fflush(stdout);
    }
}

static long parse_long(const char *s, long lo, long hi, const char *what)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (*s == '\0' || *end != '\0' || v < lo || v > hi) {
        if (rank == 0) fprintf(stderr, "abi_coll: bad %s '%s'\n", what, s);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    return v;
}

int main(int argc, char **argv)
{
    int order[NCOLL], want[NCOLL] = {0}, ncoll = 0, nsizes = 0, batches = DEFAULT_BATCHES;
    long sizes[MAX_SIZES], maxsize = 8;
    double target_s = DEFAULT_TARGET_S;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    print_library();
    MPI_Comm_size(MPI_COMM_WORLD, &np);

    if (argc > 1 && argv[1][0] != '\0') {
        char *s = strdup(argv[1]);
        for (char *tok = strtok(s, ","); tok; tok = strtok(NULL, ",")) {
            int c;
            for (c = 0; c < NCOLL && strcmp(tok, NAMES[c]) != 0; c++) ;
            if (c == NCOLL) {
                if (rank == 0) fprintf(stderr, "abi_coll: unknown collective '%s'\n", tok);
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
        for (char *tok = strtok(s, ","); tok && nsizes < MAX_SIZES; tok = strtok(NULL, ","))
            sizes[nsizes++] = parse_long(tok, 0, 1L << 28, "size");
        free(s);
    } else {
        nsizes = (int)(sizeof DEFAULT_SIZES / sizeof DEFAULT_SIZES[0]);
        memcpy(sizes, DEFAULT_SIZES, sizeof DEFAULT_SIZES);
    }
    if (argc > 3 && argv[3][0] != '\0') batches = (int)parse_long(argv[3], 1, MAX_BATCHES, "BATCHES");
    if (argc > 4 && argv[4][0] != '\0') {
        target_s = atof(argv[4]);
        if (!(target_s > 0)) {
            if (rank == 0) fprintf(stderr, "abi_coll: bad TARGET_S '%s'\n", argv[4]);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
    }
    for (int i = 0; i < nsizes; i++)
        if (sizes[i] > maxsize) maxsize = sizes[i];

    sb = malloc((size_t)maxsize * np);
    rb = malloc((size_t)maxsize * np);
    sd = malloc(sizeof(double) * (size_t)(maxsize / 8 + 1));
    rd = malloc(sizeof(double) * (size_t)(maxsize / 8 + 1));
    if (!sb || !rb || !sd || !rd) {
        fprintf(stderr, "abi_coll: out of memory\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }

    for (int k = 0; k < ncoll; k++) {
        int c = order[k];
        if (c == BARRIER) {
            measure(c, 0, batches, target_s);
            continue;
        }
        for (int i = 0; i < nsizes; i++) measure(c, sizes[i], batches, target_s);
    }

    free(sb); free(rb); free(sd); free(rd);
    if (rank == 0) {
        printf("done\n"); /* everything measured: what follows is MPI_Finalize */
        fflush(stdout);
    }
    MPI_Finalize();
    return 0;
}
