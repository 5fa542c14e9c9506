/* Shared-memory windows on 3 processes of one host: MPI_Win_allocate_shared over the
 * communicator of MPI_Comm_split_type(MPI_COMM_TYPE_SHARED), MPI_Win_shared_query (and the
 * _c forms), stores by one process seen by the others through their own mapping, puts
 * through the window's server, the flavor and memory model; with the argument "hosts", a
 * shared window over processes of two hosts refused.
 * Prints "rank R: ..." lines. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

/* With the argument "hosts": the last rank's data address is 127.0.0.2, which the library
 * counts as another host; a shared window over MPI_COMM_WORLD is refused on every rank. */
static int two_hosts(int n) {
    int *mine = NULL, cls = -1;
    MPI_Win win = MPI_WIN_NULL;
    MPI_Comm node;
    int nn;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    MPI_Comm_size(node, &nn);
    MPI_Error_class(MPI_Win_allocate_shared(sizeof(int), sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &mine, &win), &cls);
    printf("rank %d: node of %d, over two hosts refused %d null %d\n", me, nn, cls == MPI_ERR_RMA_SHARED,
           win == MPI_WIN_NULL);
    /* Each host's own communicator still shares. */
    MPI_Comm_set_errhandler(node, MPI_ERRORS_RETURN);
    CHECK(MPI_Win_allocate_shared(sizeof(int), sizeof(int), MPI_INFO_NULL, node, &mine, &win) == MPI_SUCCESS, "node");
    MPI_Win_free(&win);
    MPI_Comm_free(&node);
    MPI_Finalize();
    return 0;
}

int main(int argc, char **argv) {
    int n;
    const char *rank = getenv("P2PMPI_RANK");
    int hosts = argc > 1 && strcmp(argv[1], "hosts") == 0;
    if (hosts && rank && atoi(rank) == 2) setenv("P2PMPI_BIND", "127.0.0.2", 1);
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    CHECK(n == 3, "size %d", n);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    if (hosts) return two_hosts(n);
    MPI_Comm node;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    MPI_Comm_set_errhandler(node, MPI_ERRORS_RETURN);
    int nn, nr;
    MPI_Comm_size(node, &nn);
    MPI_Comm_rank(node, &nr);
    CHECK(nn == 3 && nr == me, "node %d %d", nn, nr);
    /* Rank q's part: q + 1 ints. */
    int *mine = NULL;
    MPI_Win win;
    CHECK(MPI_Win_allocate_shared((nr + 1) * sizeof(int), sizeof(int), MPI_INFO_NULL, node, &mine, &win) == MPI_SUCCESS,
          "allocate_shared");
    int *flavor = NULL, *model = NULL, found = 0;
    MPI_Win_get_attr(win, MPI_WIN_CREATE_FLAVOR, &flavor, &found);
    CHECK(found && *flavor == MPI_WIN_FLAVOR_SHARED, "flavor");
    MPI_Win_get_attr(win, MPI_WIN_MODEL, &model, &found);
    CHECK(found && *model == MPI_WIN_UNIFIED, "model");
    int *part[3];
    int contiguous = 1;
    for (int q = 0; q < nn; q++) {
        MPI_Aint size = -1;
        int du = -1;
        CHECK(MPI_Win_shared_query(win, q, &size, &du, &part[q]) == MPI_SUCCESS, "query %d", q);
        CHECK(size == (MPI_Aint)((q + 1) * sizeof(int)) && du == sizeof(int), "part %d: %ld %d", q, (long)size, du);
        if (q > 0 && part[q] != part[q - 1] + q) contiguous = 0;
    }
    CHECK(part[nr] == mine, "my part %p at %p", (void *)part[nr], (void *)mine);
    MPI_Aint size = -1, du_c = -1;
    int *lowest = NULL;
    MPI_Win_shared_query_c(win, MPI_PROC_NULL, &size, &du_c, &lowest);
    CHECK(lowest == part[0] && size == sizeof(int) && du_c == sizeof(int), "proc null");
    /* Stores here, loads there. */
    MPI_Win_lock_all(0, win);
    for (int i = 0; i <= nr; i++) mine[i] = 10 * (nr + 1) + i;
    MPI_Win_sync(win);
    MPI_Barrier(node);
    MPI_Win_sync(win);
    int next = (nr + 1) % nn;
    int seen = 0;
    for (int i = 0; i <= next; i++) seen += part[next][i];
    MPI_Win_unlock_all(win);
    MPI_Barrier(node);
    /* A put through the server lands in the shared memory. */
    int v = 500 + nr;
    MPI_Win_fence(0, win);
    MPI_Put(&v, 1, MPI_INT, next, 0, 1, MPI_INT, win);
    MPI_Win_fence(0, win);
    if (nr == 0) printf("rank 0: segment made by %ld\n", (long)getpid());
    printf("rank %d: shared contiguous %d seen %d put %d\n", me, contiguous, seen, mine[0]);
    MPI_Win_free(&win);
    /* The _c form on one process; a window that is not shared is not queried. */
    double *one = NULL;
    CHECK(MPI_Win_allocate_shared_c(2 * sizeof(double), (MPI_Aint)sizeof(double), MPI_INFO_NULL, MPI_COMM_SELF, &one,
                                    &win) == MPI_SUCCESS,
          "allocate_shared_c");
    one[1] = 2.5;
    double *q = NULL;
    MPI_Win_shared_query(win, 0, &size, &found, &q);
    CHECK(q == one && q[1] == 2.5 && size == 2 * sizeof(double), "self");
    MPI_Win_free(&win);
    int *mem = NULL, cls = -1;
    MPI_Win_allocate(sizeof(int), sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &mem, &win);
    MPI_Error_class(MPI_Win_shared_query(win, 0, &size, &found, &q), &cls);
    printf("rank %d: query of an allocated window %d\n", me, cls == MPI_ERR_RMA_FLAVOR);
    MPI_Win_free(&win);
    /* One member's negative size: every member refuses, none waits for the others. */
    MPI_Error_class(MPI_Win_allocate_shared(nr == 1 ? -1 : 4, 1, MPI_INFO_NULL, node, &q, &win), &cls);
    printf("rank %d: a negative size refused everywhere %d\n", me, cls == MPI_ERR_SIZE);
    MPI_Comm_free(&node);
    MPI_Finalize();
    return 0;
}
