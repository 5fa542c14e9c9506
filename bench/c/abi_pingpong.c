/*
 * Ping-pong between 2 ranks for the MPICH-ABI comparison (bench/abi_speed.sh): one binary,
 * built once by `mpicc.mpich`, run with MPICH's library and with p2pmpi's (only the library
 * path differs).
 *
 * Usage: mpiexec -n 2 ./abi_pingpong [SIZES [BATCHES [TARGET_S]]]
 *   SIZES     comma-separated message sizes in bytes (default:
 *             8,64,512,4096,16384,65536,262144,1048576,4194304; empty string = default)
 *   BATCHES   timed batches per size (default 9)
 *   TARGET_S  seconds of timed round trips per size, over all its batches (default 0.3)
 *
 * Rank 0 first prints "library <the first line of MPI_Get_library_version>" (which library
 * ran), then prints one line per size:
 *   abi_pingpong <bytes> <one_way_us_median> <MB_per_s> <one_way_us_min> <batches> <iters_per_batch>
 * where one_way = round trip / 2 of a batch (its mean), the median and minimum are over the
 * batches, and MB_per_s = bytes / median one-way time (MB = 1e6 bytes). If a message arrived
 * wrong (checked outside the timed part, before and after it) it prints instead
 *   error abi_pingpong <bytes> <what>
 * and last "done", once everything is measured (before MPI_Finalize).
 *
 * Per size: an adaptive warm-up (batches doubled until one lasts WARM_S; rank 0 decides and
 * broadcasts, as bench/c/pingpong.c does), then BATCHES batches of ITERS round trips each,
 * ITERS chosen so that they last TARGET_S in all (clamped to [MIN_ITERS, MAX_ITERS]).
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WARM_S 0.02
#define DEFAULT_TARGET_S 0.3
#define DEFAULT_BATCHES 9
#define MAX_BATCHES 101
#define MIN_ITERS 4L
#define MAX_ITERS 1000000L
#define MAX_SIZES 64

static const long DEFAULT_SIZES[] = {8, 64, 512, 4096, 16384, 65536, 262144, 1048576, 4194304};

static int rank;

static void round_trips(char *buf, long size, long n)
{
    for (long i = 0; i < n; i++) {
        if (rank == 0) {
            MPI_Send(buf, (int)size, MPI_BYTE, 1, 0, MPI_COMM_WORLD);
            MPI_Recv(buf, (int)size, MPI_BYTE, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(buf, (int)size, MPI_BYTE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(buf, (int)size, MPI_BYTE, 0, 0, MPI_COMM_WORLD);
        }
    }
}

static unsigned char pat(long i, long salt) { return (unsigned char)((i * 131 + salt * 17) % 251 + 1); }

/* One checked round trip: rank 0 sends a pattern, rank 1 checks it and answers another (with
 * MPI_Get_count and the status's source and tag checked), rank 0 checks that. Returns 1 when
 * everything arrived right (on rank 0: both ways). */
static int checked_round_trip(char *buf, long size, long salt)
{
    int ok = 1, count = -1, peer_ok = 1;
    MPI_Status st;
    if (rank == 0) {
        for (long i = 0; i < size; i++) buf[i] = (char)pat(i, salt);
        MPI_Send(buf, (int)size, MPI_BYTE, 1, 7, MPI_COMM_WORLD);
        memset(buf, 0, (size_t)size);
        MPI_Recv(buf, (int)size, MPI_BYTE, 1, 8, MPI_COMM_WORLD, &st);
        MPI_Get_count(&st, MPI_BYTE, &count);
        ok = count == size && st.MPI_SOURCE == 1 && st.MPI_TAG == 8;
        for (long i = 0; ok && i < size; i++) ok = (unsigned char)buf[i] == pat(i, salt + 1);
        MPI_Recv(&peer_ok, 1, MPI_INT, 1, 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else {
        memset(buf, 0, (size_t)size);
        MPI_Recv(buf, (int)size, MPI_BYTE, 0, 7, MPI_COMM_WORLD, &st);
        MPI_Get_count(&st, MPI_BYTE, &count);
        ok = count == size && st.MPI_SOURCE == 0 && st.MPI_TAG == 7;
        for (long i = 0; ok && i < size; i++) ok = (unsigned char)buf[i] == pat(i, salt);
        for (long i = 0; i < size; i++) buf[i] = (char)pat(i, salt + 1);
        MPI_Send(buf, (int)size, MPI_BYTE, 0, 8, MPI_COMM_WORLD);
        MPI_Send(&ok, 1, MPI_INT, 0, 9, MPI_COMM_WORLD);
    }
    return ok && peer_ok;
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

static long parse_long(const char *s, long lo, long hi, const char *what)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (*s == '\0' || *end != '\0' || v < lo || v > hi) {
        if (rank == 0) fprintf(stderr, "abi_pingpong: bad %s '%s'\n", what, s);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    return v;
}

int main(int argc, char **argv)
{
    int nprocs, nsizes = 0, batches = DEFAULT_BATCHES;
    long sizes[MAX_SIZES], maxsize = 1;
    double target_s = DEFAULT_TARGET_S, lat[MAX_BATCHES];

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    print_library();
    MPI_Comm_size(MPI_COMM_WORLD, &nprocs);
    if (nprocs != 2) {
        if (rank == 0) fprintf(stderr, "abi_pingpong: needs exactly 2 ranks (got %d)\n", nprocs);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    if (argc > 1 && argv[1][0] != '\0') {
        char *s = strdup(argv[1]);
        for (char *tok = strtok(s, ","); tok && nsizes < MAX_SIZES; tok = strtok(NULL, ","))
            sizes[nsizes++] = parse_long(tok, 0, 0x7fffffffL, "size");
        free(s);
    } else {
        nsizes = (int)(sizeof DEFAULT_SIZES / sizeof DEFAULT_SIZES[0]);
        memcpy(sizes, DEFAULT_SIZES, sizeof DEFAULT_SIZES);
    }
    if (argc > 2 && argv[2][0] != '\0') batches = (int)parse_long(argv[2], 1, MAX_BATCHES, "BATCHES");
    if (argc > 3 && argv[3][0] != '\0') {
        target_s = atof(argv[3]);
        if (!(target_s > 0)) {
            if (rank == 0) fprintf(stderr, "abi_pingpong: bad TARGET_S '%s'\n", argv[3]);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
    }
    for (int i = 0; i < nsizes; i++)
        if (sizes[i] > maxsize) maxsize = sizes[i];
    char *buf = malloc((size_t)maxsize);
    if (!buf) {
        fprintf(stderr, "abi_pingpong: out of memory\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    memset(buf, 'x', (size_t)maxsize);

    for (int si = 0; si < nsizes; si++) {
        long size = sizes[si], n = 2, ctl[2];
        int ok = checked_round_trip(buf, size, si);

        for (;;) {
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = MPI_Wtime();
            round_trips(buf, size, n);
            double dt = MPI_Wtime() - t0;
            if (rank == 0) {
                double per_rt = dt / (double)n;
                long it = per_rt > 0 ? (long)(target_s / batches / per_rt) : MAX_ITERS;
                if (it < MIN_ITERS) it = MIN_ITERS;
                if (it > MAX_ITERS) it = MAX_ITERS;
                ctl[0] = dt >= WARM_S || n >= MAX_ITERS;
                ctl[1] = it;
            }
            MPI_Bcast(ctl, 2, MPI_LONG, 0, MPI_COMM_WORLD);
            if (ctl[0]) break;
            n *= 2;
        }
        long iters = ctl[1];

        for (int b = 0; b < batches; b++) {
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = MPI_Wtime();
            round_trips(buf, size, iters);
            lat[b] = (MPI_Wtime() - t0) / (double)iters / 2.0 * 1e6;
        }
        ok = checked_round_trip(buf, size, si + 100) && ok;

        if (rank == 0) {
            qsort(lat, (size_t)batches, sizeof lat[0], cmp_double);
            double med = batches % 2 ? lat[batches / 2] : (lat[batches / 2 - 1] + lat[batches / 2]) / 2.0;
            double mbps = size > 0 && med > 0 ? (double)size / med : 0.0; /* bytes per µs = MB/s */
            if (ok)
                printf("abi_pingpong %ld %.3f %.2f %.3f %d %ld\n", size, med, mbps, lat[0], batches, iters);
            else
                printf("error abi_pingpong %ld wrong-data-or-status\n", size);
            fflush(stdout);
        }
    }

    free(buf);
    if (rank == 0) {
        printf("done\n"); /* everything measured: what follows is MPI_Finalize */
        fflush(stdout);
    }
    MPI_Finalize();
    return 0;
}
