/*
 * What the C benchmarks share (one program per file includes this header once): argument
 * parsing, the name of the library that runs, the median of batches, and for the two
 * collectives benchmarks (collectives.c, abi_coll.c) the collectives themselves: their
 * buffers, data, check of the result and the adaptive warm-up.
 */
#ifndef BENCH_UTIL_H
#define BENCH_UTIL_H

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WARM_S 0.02
#define MAX_ITERS 1000000L
#define MAX_SIZES 64

static int rank, np;

/* A whole number in [lo, hi], or a message "<prog>: bad <what> '<s>'" and the job stops. */
static inline long parse_long(const char *prog, const char *s, long lo, long hi, const char *what)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (*s == '\0' || *end != '\0' || v < lo || v > hi) {
        if (rank == 0) fprintf(stderr, "%s: bad %s '%s'\n", prog, what, s);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    return v;
}

/* The comma-separated sizes of `arg` (each in [0, max]) into `sizes`, or the defaults when
 * `arg` is empty; answers how many. */
static inline int parse_sizes(const char *prog, const char *arg, long max, const long *defaults, int ndefaults,
                       long *sizes)
{
    int n = 0;
    if (arg[0] == '\0') {
        memcpy(sizes, defaults, sizeof defaults[0] * (size_t)ndefaults);
        return ndefaults;
    }
    char *s = strdup(arg);
    for (char *tok = strtok(s, ","); tok && n < MAX_SIZES; tok = strtok(NULL, ","))
        sizes[n++] = parse_long(prog, tok, 0, max, "size");
    free(s);
    return n;
}

/* The seconds of TARGET_S (positive), or a message and the job stops. */
static inline double parse_target(const char *prog, const char *s)
{
    double v = atof(s);
    if (!(v > 0)) {
        if (rank == 0) fprintf(stderr, "%s: bad TARGET_S '%s'\n", prog, s);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    return v;
}

/* Rank 0 names the library it runs on: "library <first line of MPI_Get_library_version>". */
static inline void print_library(void)
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

static inline int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Sorts the n values and answers their median. */
static inline double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof v[0], cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2.0;
}

/* Rank 0 picks the operations per batch for a batch of n that lasted dt (the slowest rank's)
 * and broadcasts [done, iters]: done once a batch lasts WARM_S; iters so that a batch lasts
 * target_s, clamped to [min_iters, MAX_ITERS]. Answers iters when done, 0 to go on. */
static inline long warm_up_step(double dt, long n, double target_s, long min_iters)
{
    long ctl[2];
    if (rank == 0) {
        double per_op = dt / (double)n;
        long it = per_op > 0 ? (long)(target_s / per_op) : MAX_ITERS;
        if (it < min_iters) it = min_iters;
        if (it > MAX_ITERS) it = MAX_ITERS;
        ctl[0] = dt >= WARM_S || n >= MAX_ITERS;
        ctl[1] = it;
    }
    MPI_Bcast(ctl, 2, MPI_LONG, 0, MPI_COMM_WORLD);
    return ctl[0] ? ctl[1] : 0;
}

#ifdef BENCH_COLLECTIVES

enum coll {
    BARRIER, BCAST, REDUCE, ALLREDUCE, GATHER, SCATTER, ALLGATHER, ALLTOALL,
    REDUCE_SCATTER_BLOCK, SCAN, NCOLL
};
static const char *NAMES[NCOLL] = {"barrier", "bcast", "reduce", "allreduce", "gather",
                                   "scatter", "allgather", "alltoall",
                                   "reduce_scatter_block", "scan"};

/* Byte buffers (np * maximum size) and double buffers (np * maximum count). */
static unsigned char *sb, *rb;
static double *sd, *rd;
/* Whether the reductions' input varies along the vector (element i of rank r: r + 1 + i % 3)
 * or not (r + 1). */
static int skew;

static inline int is_double(int c)
{
    return c == REDUCE || c == ALLREDUCE || c == REDUCE_SCATTER_BLOCK || c == SCAN;
}

/* The elements of an operation of `bytes` bytes (doubles: bytes / 8, at least 1). */
static inline long elements(int c, long bytes)
{
    return is_double(c) ? (bytes / 8 > 0 ? bytes / 8 : 1) : bytes;
}

/* The bytes a result line shows. */
static inline long shown(int c, long bytes)
{
    return c == BARRIER ? 0 : is_double(c) ? elements(c, bytes) * 8 : bytes;
}

/* The collectives of the comma-separated `arg` (among the `nallowed` of `allowed`, each once,
 * in the order given), or all of `allowed` when `arg` is empty; answers how many. */
static inline int parse_colls(const char *prog, const char *arg, const int *allowed, int nallowed, int *order)
{
    int want[NCOLL] = {0}, n = 0;
    if (arg[0] == '\0') {
        memcpy(order, allowed, sizeof allowed[0] * (size_t)nallowed);
        return nallowed;
    }
    char *s = strdup(arg);
    for (char *tok = strtok(s, ","); tok; tok = strtok(NULL, ",")) {
        int k;
        for (k = 0; k < nallowed && strcmp(tok, NAMES[allowed[k]]) != 0; k++) ;
        if (k == nallowed) {
            if (rank == 0) fprintf(stderr, "%s: unknown collective '%s'\n", prog, tok);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        if (!want[allowed[k]]) { want[allowed[k]] = 1; order[n++] = allowed[k]; }
    }
    free(s);
    return n;
}

/* The buffers for sizes up to maxsize bytes. */
static inline void allocate(const char *prog, long maxsize)
{
    sb = malloc((size_t)maxsize * np);
    rb = malloc((size_t)maxsize * np);
    sd = malloc(sizeof(double) * (size_t)(maxsize / 8 + 1) * np);
    rd = malloc(sizeof(double) * (size_t)(maxsize / 8 + 1) * np);
    if (!sb || !rb || !sd || !rd) {
        fprintf(stderr, "%s: out of memory\n", prog);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
}

static inline void release(void)
{
    free(sb); free(rb); free(sd); free(rd);
}

/* The byte pattern: a value that depends on (a, b), never 0. */
static inline unsigned char pat(long a, long b) { return (unsigned char)((a * 31 + b * 7) % 251 + 1); }

/* Fill the send buffers (and clear the receive buffers) for collective c, n elements. */
static inline void prepare(int c, long n)
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
        for (i = 0; i < n; i++) { sd[i] = skew ? rank + 1 + (double)(i % 3) : rank + 1; rd[i] = 0; }
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
static inline int check(int c, long n)
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
        for (i = 0; i < n; i++)
            if (rd[i] != (skew ? tri + (double)np * (double)(i % 3) : tri)) return 0;
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

/* The ranks where the last operation left a wrong result (at rank 0). */
static inline int wrong(int c, long n)
{
    int bad = !check(c, n), nbad = 0;
    MPI_Reduce(&bad, &nbad, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    return nbad;
}

/* n back-to-back operations of collective c with n_el elements. */
static inline void run(int c, long n_el, long n)
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

/* Warm-up: batches of 1, 2, 4, ... operations until the slowest rank's batch lasts WARM_S;
 * answers the operations per batch that last about target_s (at least min_iters). */
static inline long warm_up(int c, long n_el, double target_s, long min_iters)
{
    for (long n = 1;; n *= 2) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        run(c, n_el, n);
        double dt = MPI_Wtime() - t0, dtmax = 0.0;
        MPI_Reduce(&dt, &dtmax, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
        long iters = warm_up_step(dtmax, n, target_s, min_iters);
        if (iters) return iters;
    }
}

#endif /* BENCH_COLLECTIVES */
#endif /* BENCH_UTIL_H */
