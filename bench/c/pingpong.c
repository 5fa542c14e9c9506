/*
 * MPI ping-pong between 2 ranks (reference baseline for p2pmpi).
 *
 * Usage: mpirun -np 2 ./pingpong [SIZES]
 *   SIZES: optional comma-separated list of message sizes in bytes
 *          (default: 0,1,8,64,512,4096,32768,65536,131072,524288,1048576,4194304)
 *
 * Rank 0 prints one line per size:
 *   pingpong <bytes> <one_way_latency_us> <bandwidth_MB_per_s>
 * one_way = round_trip / 2, bandwidth = bytes / one_way (MB = 1e6 bytes; 0 for size 0).
 *
 * Per size: an adaptive warm-up (batches doubled until one batch takes >= WARM_S),
 * then ITERS timed round trips with ITERS chosen so that the timed part takes about
 * TARGET_S (clamped to [MIN_ITERS, MAX_ITERS]). The iteration counts are decided by
 * rank 0 and broadcast, so both ranks always agree. The same algorithm is used by the
 * raw-TCP and p2pmpi ping-pongs so that the figures are comparable.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WARM_S 0.02
#define TARGET_S 0.2
#define MIN_ITERS 20L
#define MAX_ITERS 1000000L
#define MAX_SIZES 64

static const long DEFAULT_SIZES[] = {0,      1,      8,       64,      512,     4096,
                                     32768,  65536,  131072,  524288,  1048576, 4194304};

static void round_trips(int rank, char *buf, long size, long n)
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

int main(int argc, char **argv)
{
    int rank, nprocs;
    long sizes[MAX_SIZES];
    int nsizes = 0;
    long maxsize = 0;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nprocs);
    if (nprocs != 2) {
        if (rank == 0) fprintf(stderr, "pingpong: needs exactly 2 ranks (got %d)\n", nprocs);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }

    if (argc > 1 && argv[1][0] != '\0') {
        char *s = strdup(argv[1]);
        for (char *tok = strtok(s, ","); tok && nsizes < MAX_SIZES; tok = strtok(NULL, ",")) {
            char *end;
            long v = strtol(tok, &end, 10);
            if (*end != '\0' || v < 0 || v > 0x7fffffffL) {
                if (rank == 0) fprintf(stderr, "pingpong: bad size '%s'\n", tok);
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

    char *buf = malloc(maxsize > 0 ? (size_t)maxsize : 1);
    memset(buf, 'x', maxsize > 0 ? (size_t)maxsize : 1);

    for (int si = 0; si < nsizes; si++) {
        long size = sizes[si];

        /* Warm-up: batches of n round trips, doubling n until a batch lasts WARM_S. */
        long n = 2, ctl[2];
        double per_rt = 0.0;
        for (;;) {
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = MPI_Wtime();
            round_trips(rank, buf, size, n);
            double dt = MPI_Wtime() - t0;
            if (rank == 0) {
                per_rt = dt / (double)n;
                ctl[0] = dt >= WARM_S || n >= MAX_ITERS;
                long it = per_rt > 0 ? (long)(TARGET_S / per_rt) : MAX_ITERS;
                if (it < MIN_ITERS) it = MIN_ITERS;
                if (it > MAX_ITERS) it = MAX_ITERS;
                ctl[1] = it;
            }
            MPI_Bcast(ctl, 2, MPI_LONG, 0, MPI_COMM_WORLD);
            if (ctl[0]) break;
            n *= 2;
        }
        long iters = ctl[1];

        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        round_trips(rank, buf, size, iters);
        double dt = MPI_Wtime() - t0;

        if (rank == 0) {
            double one_way_us = dt / (double)iters / 2.0 * 1e6;
            double mbps = size > 0 ? (double)size / (one_way_us * 1e-6) / 1e6 : 0.0;
            printf("pingpong %ld %.3f %.2f\n", size, one_way_us, mbps);
            fflush(stdout);
        }
    }

    free(buf);
    MPI_Finalize();
    return 0;
}
