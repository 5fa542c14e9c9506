/* Fault-aware MPI under MPICH's names, on 4 processes: rank 3 dies abruptly (SIGKILL) after
 * a first round; the survivors see the failure (MPIX_ERR_PROC_FAILED, or MPIX_ERR_REVOKED
 * once another revoked), revoke, agree, acknowledge, shrink, and finish the work on 3.
 * Run with MPIR_CVAR_ENABLE_FT=1. Prints "ulfm R: ..." lines. */
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define CHECK(c, ...)                                                                   \
    do {                                                                                \
        if (!(c)) {                                                                     \
            printf("ulfm %d: FAILED line %d: ", me, __LINE__);                          \
            printf(__VA_ARGS__);                                                        \
            printf("\n");                                                               \
            MPI_Abort(MPI_COMM_WORLD, 2);                                               \
        }                                                                               \
    } while (0)

static int class_of(int rc) {
    int c = rc;
    MPI_Error_class(rc, &c);
    return c;
}

/* The work of a round: items 0..N-1, item i worth i*i, dealt by i mod size. */
#define N 1000
static long part(int rank, int size) {
    long s = 0;
    for (long i = rank; i < N; i += size) s += i * i;
    return s;
}

int main(int argc, char **argv) {
    int me = -1, n, rc;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    CHECK(n == 4, "size %d", n);
    MPI_Comm comm;
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    long want = 0;
    for (long i = 0; i < N; i++) want += i * i;

    /* Round 1 on 4. */
    long p = part(me, n), sum = 0;
    rc = MPI_Allreduce(&p, &sum, 1, MPI_LONG, MPI_SUM, comm);
    CHECK(rc == MPI_SUCCESS && sum == want, "round 1: rc %d sum %ld", rc, sum);
    int flag = 1;
    rc = MPIX_Comm_agree(comm, &flag);
    CHECK(rc == MPI_SUCCESS && flag == 1, "agree before the failure: rc %d flag %d", rc, flag);
    MPI_Group acked;
    MPIX_Comm_failure_get_acked(comm, &acked);
    CHECK(acked == MPI_GROUP_EMPTY, "nothing acknowledged yet");
    printf("ulfm %d: round 1 on 4 sum %ld\n", me, sum);

    if (me == 3) {
        fflush(stdout);
        kill(getpid(), SIGKILL); /* dies without a word */
        pause();
    }

    /* Round 2: rank 3's part never comes. */
    rc = MPI_Allreduce(&p, &sum, 1, MPI_LONG, MPI_SUM, comm);
    int cls = class_of(rc);
    CHECK(cls == MPIX_ERR_PROC_FAILED || cls == MPIX_ERR_REVOKED, "round 2: rc %d class %d", rc, cls);
    printf("ulfm %d: round 2 failed %s\n", me, cls == MPIX_ERR_PROC_FAILED ? "proc_failed" : "revoked");
    rc = MPIX_Comm_revoke(comm);
    CHECK(rc == MPI_SUCCESS, "revoke: rc %d", rc);
    rc = MPI_Barrier(comm);
    CHECK(class_of(rc) == MPIX_ERR_REVOKED, "barrier on a revoked communicator: rc %d", rc);
    printf("ulfm %d: revoked barrier %d\n", me, class_of(rc) == MPIX_ERR_REVOKED);

    /* An agreement before acknowledging reports the failure, with the agreed value. */
    flag = me == 0 ? 0x6 : 0x7;
    rc = MPIX_Comm_agree(comm, &flag);
    CHECK(class_of(rc) == MPIX_ERR_PROC_FAILED && flag == 0x6, "agree unacknowledged: rc %d flag %#x", rc, flag);
    /* Acknowledge until the failure is known here (the launcher's word may take a moment). */
    int gsize = 0;
    double t0 = MPI_Wtime();
    while (gsize == 0 && MPI_Wtime() - t0 < 60) {
        MPIX_Comm_failure_ack(comm);
        MPIX_Comm_failure_get_acked(comm, &acked);
        if (acked != MPI_GROUP_EMPTY) {
            MPI_Group_size(acked, &gsize);
        } else {
            usleep(10000);
        }
    }
    CHECK(gsize == 1, "acknowledged %d", gsize);
    MPI_Group wg;
    int r0 = 0, wr = -1;
    MPI_Comm_group(comm, &wg);
    MPI_Group_translate_ranks(acked, 1, &r0, wg, &wr);
    CHECK(wr == 3, "the failed one is %d", wr);
    MPI_Group_free(&acked);
    MPI_Group_free(&wg);
    flag = me == 1 ? 0x5 : 0x7;
    rc = MPIX_Comm_agree(comm, &flag);
    CHECK(rc == MPI_SUCCESS && flag == 0x5, "agree acknowledged: rc %d flag %#x", rc, flag);
    printf("ulfm %d: acked rank %d agreed %#x\n", me, wr, flag);

    /* Shrink and redo the round on the survivors. */
    MPI_Comm small;
    rc = MPIX_Comm_shrink(comm, &small);
    CHECK(rc == MPI_SUCCESS, "shrink: rc %d", rc);
    int sr, ss;
    MPI_Comm_rank(small, &sr);
    MPI_Comm_size(small, &ss);
    CHECK(ss == 3 && sr == me, "shrunk: rank %d of %d", sr, ss);
    MPI_Errhandler eh;
    MPI_Comm_get_errhandler(small, &eh);
    CHECK(eh == MPI_ERRORS_RETURN, "the handler is inherited");
    p = part(sr, ss);
    rc = MPI_Allreduce(&p, &sum, 1, MPI_LONG, MPI_SUM, small);
    CHECK(rc == MPI_SUCCESS && sum == want, "round 2 on 3: rc %d sum %ld", rc, sum);
    flag = 1;
    rc = MPIX_Comm_agree(small, &flag);
    CHECK(rc == MPI_SUCCESS && flag == 1, "agree on the survivors: rc %d", rc);
    printf("ulfm %d: shrunk rank %d of %d sum %ld %s\n", me, sr, ss, sum, sum == want ? "correct" : "WRONG");
    MPI_Comm_free(&small);
    MPI_Comm_free(&comm);
    MPI_Finalize();
    return 0;
}
