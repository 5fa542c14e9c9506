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
#include "bench_util.h"

#define DEFAULT_TARGET_S 0.3
#define DEFAULT_BATCHES 9
#define MAX_BATCHES 101
#define MIN_ITERS 4L

static const long DEFAULT_SIZES[] = {8, 64, 512, 4096, 16384, 65536, 262144, 1048576, 4194304};

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

int main(int argc, char **argv)
{
    int nsizes, batches = DEFAULT_BATCHES;
    long sizes[MAX_SIZES], maxsize = 1;
    double target_s = DEFAULT_TARGET_S, lat[MAX_BATCHES];

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    print_library();
    MPI_Comm_size(MPI_COMM_WORLD, &np);
    if (np != 2) {
        if (rank == 0) fprintf(stderr, "abi_pingpong: needs exactly 2 ranks (got %d)\n", np);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    nsizes = parse_sizes("abi_pingpong", argc > 1 ? argv[1] : "", 0x7fffffffL, DEFAULT_SIZES,
                         (int)(sizeof DEFAULT_SIZES / sizeof DEFAULT_SIZES[0]), sizes);
    if (argc > 2 && argv[2][0] != '\0') batches = (int)parse_long("abi_pingpong", argv[2], 1, MAX_BATCHES, "BATCHES");
    if (argc > 3 && argv[3][0] != '\0') target_s = parse_target("abi_pingpong", argv[3]);
    for (int i = 0; i < nsizes; i++)
        if (sizes[i] > maxsize) maxsize = sizes[i];
    char *buf = malloc((size_t)maxsize);
    if (!buf) {
        fprintf(stderr, "abi_pingpong: out of memory\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    memset(buf, 'x', (size_t)maxsize);

    for (int si = 0; si < nsizes; si++) {
        long size = sizes[si], iters = 0;
        int ok = checked_round_trip(buf, size, si);

        /* Rank 0's batches decide (see warm_up_step). */
        for (long n = 2; !iters; n *= 2) {
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = MPI_Wtime();
            round_trips(buf, size, n);
            iters = warm_up_step(MPI_Wtime() - t0, n, target_s / batches, MIN_ITERS);
        }

        for (int b = 0; b < batches; b++) {
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = MPI_Wtime();
            round_trips(buf, size, iters);
            lat[b] = (MPI_Wtime() - t0) / (double)iters / 2.0 * 1e6;
        }
        ok = checked_round_trip(buf, size, si + 100) && ok;

        if (rank == 0) {
            double med = median(lat, batches);
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
