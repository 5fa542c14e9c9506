/* One-sided communication on 3 processes, the rest of it: request-based operations
 * (MPI_Rput, MPI_Rget, MPI_Raccumulate, MPI_Rget_accumulate, their _c forms, on
 * MPI_PROC_NULL too), dynamic windows (MPI_Win_create_dynamic, MPI_Win_attach,
 * MPI_Win_detach, addresses as displacements), general active target synchronization
 * (MPI_Win_post, MPI_Win_start, MPI_Win_complete, MPI_Win_wait, MPI_Win_test), and
 * MPIX_Comm_ishrink (looked up by name: Debian's MPICH 4.0 lacks it) and MPI_Comm_idup.
 * Prints "rank R: ..." lines. */
#include <dlfcn.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK(c, ...)                                                                   \
    do {                                                                                \
        if (!(c)) {                                                                     \
            printf("rank %d: FAILED line %d: ", me, __LINE__);                          \
            printf(__VA_ARGS__);                                                        \
            printf("\n");                                                               \
            fflush(stdout);                                                             \
            MPI_Abort(MPI_COMM_WORLD, 2);                                               \
        }                                                                               \
    } while (0)

static int me = -1;

static int error_class(int rc) {
    int c = -1;
    MPI_Error_class(rc, &c);
    return c;
}

/* Request-based operations on an allocated window of 8 ints. */
static void requests(int n) {
    int next = (me + 1) % n, prev = (me + n - 1) % n;
    int *mem = NULL;
    MPI_Win win;
    CHECK(MPI_Win_allocate(8 * sizeof(int), sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &mem, &win) == MPI_SUCCESS,
          "allocate");
    for (int i = 0; i < 8; i++) mem[i] = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Request r[4];
    int v = 100 + me, one = 1, ten = 10, old = -1, got = -1;
    MPI_Win_lock_all(0, win);
    CHECK(MPI_Rput(&v, 1, MPI_INT, next, 0, 1, MPI_INT, win, &r[0]) == MPI_SUCCESS, "rput");
    CHECK(r[0] != MPI_REQUEST_NULL, "rput's request is null");
    MPI_Wait(&r[0], MPI_STATUS_IGNORE);
    CHECK(r[0] == MPI_REQUEST_NULL, "rput's request not freed");
    for (int t = 0; t < n; t++) MPI_Raccumulate(&one, 1, MPI_INT, t, 1, 1, MPI_INT, MPI_SUM, win, &r[t % 2]), MPI_Wait(&r[t % 2], MPI_STATUS_IGNORE);
    MPI_Rget_accumulate(&ten, 1, MPI_INT, &old, 1, MPI_INT, next, 2, 1, MPI_INT, MPI_SUM, win, &r[2]);
    MPI_Wait(&r[2], MPI_STATUS_IGNORE);
    /* On MPI_PROC_NULL: nothing done, the request complete at once. */
    int flag = 0, nothing = 7;
    MPI_Rput(&v, 1, MPI_INT, MPI_PROC_NULL, 0, 1, MPI_INT, win, &r[0]);
    MPI_Rget(&nothing, 1, MPI_INT, MPI_PROC_NULL, 0, 1, MPI_INT, win, &r[1]);
    MPI_Raccumulate(&v, 1, MPI_INT, MPI_PROC_NULL, 0, 1, MPI_INT, MPI_SUM, win, &r[2]);
    MPI_Rget_accumulate(&v, 1, MPI_INT, &nothing, 1, MPI_INT, MPI_PROC_NULL, 0, 1, MPI_INT, MPI_SUM, win, &r[3]);
    MPI_Testall(4, r, &flag, MPI_STATUSES_IGNORE);
    CHECK(flag == 1 && nothing == 7, "proc null flag %d value %d", flag, nothing);
    MPI_Win_unlock_all(win);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Win_lock_all(0, win);
    MPI_Rget(&got, 1, MPI_INT, next, 0, 1, MPI_INT, win, &r[0]);
    flag = 0;
    double until = MPI_Wtime() + 30;
    while (!flag && MPI_Wtime() < until) MPI_Test(&r[0], &flag, MPI_STATUS_IGNORE);
    CHECK(flag, "rget never completed");
    /* The _c forms: slot 3 of next gets 200 + me, read back; slot 4 by accumulate. */
    int w2 = 200 + me, back = -1, five = 5, seen = -1, red = -1;
    MPI_Rput_c(&w2, (MPI_Count)1, MPI_INT, next, 3, (MPI_Count)1, MPI_INT, win, &r[0]);
    MPI_Wait(&r[0], MPI_STATUS_IGNORE);
    MPI_Rget_c(&back, (MPI_Count)1, MPI_INT, next, 3, (MPI_Count)1, MPI_INT, win, &r[0]);
    MPI_Raccumulate_c(&five, (MPI_Count)1, MPI_INT, next, 4, (MPI_Count)1, MPI_INT, MPI_SUM, win, &r[1]);
    MPI_Waitall(2, r, MPI_STATUSES_IGNORE);
    MPI_Rget_accumulate_c(NULL, (MPI_Count)0, MPI_INT, &seen, (MPI_Count)1, MPI_INT, next, 4, (MPI_Count)1, MPI_INT,
                          MPI_NO_OP, win, &r[0]);
    MPI_Wait(&r[0], MPI_STATUS_IGNORE);
    MPI_Win_unlock_all(win);
    MPI_Barrier(MPI_COMM_WORLD);
    red = mem[2];
    printf("rank %d: requests put %d sum %d fetched %d then %d got %d c forms %d %d\n", me, mem[0], mem[1], old, red,
           got, back, seen);
    CHECK(got == 100 + me && mem[0] == 100 + prev, "got %d", got);
    MPI_Win_free(&win);
}

/* A dynamic window: each attaches 4 ints, the others reach them by their address. */
static void dynamic(int n) {
    int next = (me + 1) % n, prev = (me + n - 1) % n;
    MPI_Win win;
    CHECK(MPI_Win_create_dynamic(MPI_INFO_NULL, MPI_COMM_WORLD, &win) == MPI_SUCCESS, "create_dynamic");
    int *flavor = NULL, found = 0;
    MPI_Win_get_attr(win, MPI_WIN_CREATE_FLAVOR, &flavor, &found);
    CHECK(found && *flavor == MPI_WIN_FLAVOR_DYNAMIC, "flavor");
    void *base = (void *)1;
    MPI_Aint *size = NULL;
    MPI_Win_get_attr(win, MPI_WIN_BASE, &base, &found);
    MPI_Win_get_attr(win, MPI_WIN_SIZE, &size, &found);
    CHECK(base == NULL && *size == 0, "base %p size %ld", base, (long)*size);
    int *buf = calloc(4, sizeof(int));
    CHECK(MPI_Win_attach(win, buf, 4 * sizeof(int)) == MPI_SUCCESS, "attach");
    MPI_Aint addr, addrs[16];
    MPI_Get_address(buf, &addr);
    MPI_Allgather(&addr, 1, MPI_AINT, addrs, 1, MPI_AINT, MPI_COMM_WORLD);
    int v = 300 + me, got = -1;
    MPI_Win_fence(0, win);
    MPI_Put(&v, 1, MPI_INT, next, addrs[next] + sizeof(int), 1, MPI_INT, win);
    MPI_Win_fence(0, win);
    MPI_Get(&got, 1, MPI_INT, prev, addrs[prev] + sizeof(int), 1, MPI_INT, win);
    MPI_Win_fence(0, win);
    /* Outside the memory attached at next: the flush reports it. */
    MPI_Win_lock(MPI_LOCK_SHARED, next, 0, win);
    MPI_Put(&v, 1, MPI_INT, next, addrs[next] + 4 * sizeof(int), 1, MPI_INT, win);
    int outside = error_class(MPI_Win_flush(next, win));
    MPI_Win_unlock(next, win);
    MPI_Barrier(MPI_COMM_WORLD);
    CHECK(MPI_Win_detach(win, buf) == MPI_SUCCESS, "detach");
    int again = error_class(MPI_Win_detach(win, buf));
    printf("rank %d: dynamic put %d got %d outside %d detached twice %d\n", me, buf[1], got, outside == MPI_ERR_RMA_RANGE,
           again == MPI_ERR_RMA_ATTACH);
    MPI_Win_free(&win);
    free(buf);
}

/* General active target: a ring of post/start/complete/wait, then rank 0 exposed to all
 * others, tested. */
static void pscw(int n) {
    int next = (me + 1) % n, prev = (me + n - 1) % n;
    int *mem = NULL;
    MPI_Win win;
    MPI_Win_allocate(4 * sizeof(int), sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &mem, &win);
    for (int i = 0; i < 4; i++) mem[i] = 0;
    MPI_Group wg, gnext, gprev, gothers, gzero;
    MPI_Win_get_group(win, &wg);
    MPI_Group_incl(wg, 1, &next, &gnext);
    MPI_Group_incl(wg, 1, &prev, &gprev);
    int zero = 0;
    MPI_Group_excl(wg, 1, &zero, &gothers);
    MPI_Group_incl(wg, 1, &zero, &gzero);
    MPI_Barrier(MPI_COMM_WORLD);
    int v = 400 + me;
    CHECK(MPI_Win_post(gprev, 0, win) == MPI_SUCCESS, "post");
    CHECK(MPI_Win_start(gnext, 0, win) == MPI_SUCCESS, "start");
    MPI_Put(&v, 1, MPI_INT, next, 0, 1, MPI_INT, win);
    CHECK(MPI_Win_complete(win) == MPI_SUCCESS, "complete");
    CHECK(MPI_Win_wait(win) == MPI_SUCCESS, "wait");
    int ring = mem[0];
    /* Rank 0 exposed to the others, which put only after a barrier rank 0's first test
     * precedes: that test answers 0. */
    int first = -1, flag = 0;
    if (me == 0) {
        MPI_Win_post(gothers, 0, win);
        MPI_Win_test(win, &first);
        MPI_Barrier(MPI_COMM_WORLD);
        double until = MPI_Wtime() + 30;
        while (!flag && MPI_Wtime() < until) MPI_Win_test(win, &flag);
        CHECK(flag, "the others never completed");
    } else {
        MPI_Barrier(MPI_COMM_WORLD);
        MPI_Win_start(gzero, 0, win);
        int one = 1;
        MPI_Accumulate(&one, 1, MPI_INT, 0, 1, 1, MPI_INT, MPI_SUM, win);
        MPI_Win_complete(win);
    }
    /* An empty group: nothing to wait for. */
    MPI_Win_post(MPI_GROUP_EMPTY, 0, win);
    MPI_Win_start(MPI_GROUP_EMPTY, 0, win);
    MPI_Win_complete(win);
    MPI_Win_wait(win);
    if (me == 0)
        printf("rank %d: pscw ring %d first test %d all completed %d\n", me, ring, first, mem[1]);
    else
        printf("rank %d: pscw ring %d\n", me, ring);
    MPI_Group_free(&gnext);
    MPI_Group_free(&gprev);
    MPI_Group_free(&gothers);
    MPI_Group_free(&gzero);
    MPI_Group_free(&wg);
    MPI_Win_free(&win);
}

/* MPIX_Comm_ishrink, found by name. */
static void ishrink(int n) {
    typedef int (*ishrink_fn)(MPI_Comm, MPI_Comm *, MPI_Request *);
    ishrink_fn f = (ishrink_fn)dlsym(RTLD_DEFAULT, "MPIX_Comm_ishrink");
    CHECK(f != NULL, "MPIX_Comm_ishrink not found");
    MPI_Comm s = MPI_COMM_NULL;
    MPI_Request r = MPI_REQUEST_NULL;
    CHECK(f(MPI_COMM_WORLD, &s, &r) == MPI_SUCCESS, "ishrink");
    CHECK(r != MPI_REQUEST_NULL, "null request");
    MPI_Wait(&r, MPI_STATUS_IGNORE);
    int size = -1, rank = -1;
    MPI_Comm_size(s, &size);
    MPI_Comm_rank(s, &rank);
    printf("rank %d: ishrink size %d rank %d\n", me, size, rank);
    CHECK(size == n && rank == me, "shrunk %d %d", size, rank);
    MPI_Comm_free(&s);
    /* MPI_Comm_idup (mpi4py's Comm.Ishrink on MPICH 4.0): a duplicate, its request complete. */
    int flag = 0, result = -1;
    MPI_Comm_idup(MPI_COMM_WORLD, &s, &r);
    MPI_Test(&r, &flag, MPI_STATUS_IGNORE);
    MPI_Comm_compare(MPI_COMM_WORLD, s, &result);
    printf("rank %d: idup done %d congruent %d\n", me, flag, result == MPI_CONGRUENT);
    MPI_Comm_free(&s);
}

int main(int argc, char **argv) {
    int n;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    CHECK(n == 3, "size %d", n);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    requests(n);
    dynamic(n);
    pscw(n);
    ishrink(n);
    /* An attach to a window that is not dynamic. */
    int *mem = NULL, x = 0;
    MPI_Win win;
    MPI_Win_allocate(sizeof(int), sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &mem, &win);
    printf("rank %d: attach to an allocated window %d\n", me, error_class(MPI_Win_attach(win, &x, sizeof x)) == MPI_ERR_RMA_FLAVOR);
    MPI_Win_free(&win);
    MPI_Finalize();
    return 0;
}
