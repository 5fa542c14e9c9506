/*
 * Scale benchmark program (the baseline of p2pmpi's examples/scale_bench.rs, same algorithm
 * and output; run by bench/scale.sh).
 *
 * Usage: mpirun -np N ./scale T0_US [ITERS [SIZES]]
 *   T0_US  the launcher's start, microseconds since the Unix epoch (the script's clock just
 *          before it ran the launcher; 0: unknown, start-up then not reported)
 *   ITERS  timed operations of each kind (default 20)
 *   SIZES  comma-separated all-reduce sizes in bytes per rank (default 8,65536): sum of
 *          SIZE / 8 (at least 1) doubles
 *
 * Every rank notes the time when main starts and when MPI_Init returns; rank 0 gets the
 * latest of each (a reduction, after the fact). Then: one barrier alone (the first: it may
 * open connections), 2 untimed barriers, ITERS timed back-to-back barriers, and per size 2
 * untimed and ITERS timed back-to-back all-reduces. Every rank times each operation; the
 * time of operation i is the largest over ranks; the median over i is reported. Rank 0
 * prints one line:
 *   scale np=N main_ms=M init_ms=I first_barrier_us=F barrier_us=B allreduce_<S>_us=A ... errors=E
 * main_ms: launch to the last rank's main; init_ms: launch to MPI_Init returned everywhere;
 * errors: ranks whose last all-reduce result was wrong (0 expected).
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_SIZES 8
#define WARM 2

static double unix_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median over operations of the slowest rank's time (valid on rank 0). */
static double median_of_max(double *dt, double *mx, int iters, int rank)
{
    MPI_Reduce(dt, mx, iters, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank != 0) return 0;
    qsort(mx, (size_t)iters, sizeof mx[0], cmp_double);
    return iters % 2 ? mx[iters / 2] : (mx[iters / 2 - 1] + mx[iters / 2]) / 2;
}

int main(int argc, char **argv)
{
    double t_main = unix_us();
    MPI_Init(&argc, &argv);
    double t_init = unix_us();
    int rank, np;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &np);

    double t0 = argc > 1 ? atof(argv[1]) : 0;
    int iters = argc > 2 ? atoi(argv[2]) : 20;
    long sizes[MAX_SIZES] = {8, 65536};
    int nsizes = 2;
    if (argc > 3 && argv[3][0]) {
        char *s = strdup(argv[3]);
        nsizes = 0;
        for (char *tok = strtok(s, ","); tok && nsizes < MAX_SIZES; tok = strtok(NULL, ","))
            sizes[nsizes++] = atol(tok);
        free(s);
    }
    if (iters < 1 || iters > 1000000) {
        if (rank == 0) fprintf(stderr, "scale: bad ITERS '%s'\n", argv[2]);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }

    double dt[1], first = 0;
    double *t = malloc(sizeof(double) * (size_t)iters), *mx = malloc(sizeof(double) * (size_t)iters);
    dt[0] = unix_us();
    MPI_Barrier(MPI_COMM_WORLD);
    dt[0] = unix_us() - dt[0];
    MPI_Reduce(dt, &first, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);

    /* Start-up, after the fact: the latest main and the latest return of MPI_Init. */
    double mine[2] = {t_main, t_init}, last[2] = {0, 0};
    MPI_Reduce(mine, last, 2, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);

    for (int i = 0; i < WARM; i++) MPI_Barrier(MPI_COMM_WORLD);
    for (int i = 0; i < iters; i++) {
        double a = unix_us();
        MPI_Barrier(MPI_COMM_WORLD);
        t[i] = unix_us() - a;
    }
    double barrier = median_of_max(t, mx, iters, rank);

    char line[1024];
    int len = snprintf(line, sizeof line, "scale np=%d", np);
    if (t0 > 0)
        len += snprintf(line + len, sizeof line - (size_t)len, " main_ms=%.3f init_ms=%.3f", (last[0] - t0) / 1e3,
                        (last[1] - t0) / 1e3);
    len += snprintf(line + len, sizeof line - (size_t)len, " first_barrier_us=%.1f barrier_us=%.1f", first, barrier);

    int bad = 0;
    for (int k = 0; k < nsizes; k++) {
        long n = sizes[k] / 8 > 0 ? sizes[k] / 8 : 1;
        double *sd = malloc(sizeof(double) * (size_t)n), *rd = malloc(sizeof(double) * (size_t)n);
        for (long j = 0; j < n; j++) sd[j] = rank + 1;
        for (int i = 0; i < WARM; i++) MPI_Allreduce(sd, rd, (int)n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        for (int i = 0; i < iters; i++) {
            double a = unix_us();
            MPI_Allreduce(sd, rd, (int)n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
            t[i] = unix_us() - a;
        }
        double want = (double)np * (np + 1) / 2;
        for (long j = 0; j < n; j++)
            if (rd[j] != want) { bad = 1; break; }
        double ar = median_of_max(t, mx, iters, rank);
        len += snprintf(line + len, sizeof line - (size_t)len, " allreduce_%ld_us=%.1f", n * 8, ar);
        free(sd);
        free(rd);
    }
    int nbad = 0;
    MPI_Reduce(&bad, &nbad, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        printf("%s errors=%d\n", line, nbad);
        fflush(stdout);
    }
    free(t);
    free(mx);
    MPI_Finalize();
    return 0;
}
