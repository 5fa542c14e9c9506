/* One-sided communication on 3 processes: fence epochs with put, get and accumulate (an
 * origin datatype with holes too), window attributes, a put outside the window; then
 * passive target: ranks 1 and 2 increment a counter at rank 0 under exclusive locks while
 * rank 0 waits in a blocking MPI_Recv, and every rank accumulates into all with lock_all.
 * Prints "rma R: ..." lines. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK(c, ...)                                                                   \
    do {                                                                                \
        if (!(c)) {                                                                     \
            printf("rma %d: FAILED line %d: ", me, __LINE__);                           \
            printf(__VA_ARGS__);                                                        \
            printf("\n");                                                               \
            MPI_Abort(MPI_COMM_WORLD, 2);                                               \
        }                                                                               \
    } while (0)

#define SLOTS 16

static int prev_of(int r, int n) { return (r + n - 1) % n; }
#define ROUNDS 20

int main(int argc, char **argv) {
    int me = -1, n;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    CHECK(n == 3, "size %d", n);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int next = (me + 1) % n;

    /* ---- fence epochs on an allocated window of 16 ints */
    int *mem = NULL;
    MPI_Win win;
    CHECK(MPI_Win_allocate(SLOTS * sizeof(int), sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &mem, &win) == MPI_SUCCESS,
          "allocate");
    for (int i = 0; i < SLOTS; i++) mem[i] = 0;
    mem[7] = 1000 + me;
    void *base;
    MPI_Aint *size;
    int *unit, *flavor, flag;
    MPI_Win_get_attr(win, MPI_WIN_BASE, &base, &flag);
    CHECK(flag && base == mem, "base");
    MPI_Win_get_attr(win, MPI_WIN_SIZE, &size, &flag);
    CHECK(flag && *size == SLOTS * (MPI_Aint)sizeof(int), "size");
    MPI_Win_get_attr(win, MPI_WIN_DISP_UNIT, &unit, &flag);
    CHECK(flag && *unit == sizeof(int), "disp unit");
    MPI_Win_get_attr(win, MPI_WIN_CREATE_FLAVOR, &flavor, &flag);
    CHECK(flag && *flavor == MPI_WIN_FLAVOR_ALLOCATE, "flavor");
    printf("rma %d: attributes ok\n", me);

    MPI_Win_fence(0, win);
    int mine = (me + 1) * 100, got = -1;
    for (int t = 0; t < n; t++) MPI_Put(&mine, 1, MPI_INT, t, me, 1, MPI_INT, win);
    int one = me + 1, seven = me * 7;
    MPI_Accumulate(&one, 1, MPI_INT, 0, 5, 1, MPI_INT, MPI_SUM, win);
    for (int t = 0; t < n; t++) MPI_Accumulate(&seven, 1, MPI_INT, t, 6, 1, MPI_INT, MPI_MAX, win);
    MPI_Get(&got, 1, MPI_INT, next, 7, 1, MPI_INT, win);
    /* Every second int of the origin, into 3 consecutive ints at the next rank. */
    int strided[6] = {me + 1, -1, 2 * (me + 1), -1, 3 * (me + 1), -1};
    MPI_Datatype every2;
    MPI_Type_vector(3, 1, 2, MPI_INT, &every2);
    MPI_Type_commit(&every2);
    MPI_Put(strided, 1, every2, next, 10, 3, MPI_INT, win);
    int ninety_nine = 99;
    MPI_Accumulate(&mine, 1, MPI_INT, next, 13, 1, MPI_INT, MPI_REPLACE, win);
    MPI_Accumulate(&ninety_nine, 1, MPI_INT, next, 14, 1, MPI_INT, MPI_NO_OP, win);
    MPI_Win_fence(0, win);
    /* A second epoch: the next rank's strided values back, into every second int. */
    int back[6] = {-1, -1, -1, -1, -1, -1};
    MPI_Get(back, 1, every2, next, 10, 3, MPI_INT, win);
    MPI_Win_fence(0, win);
    MPI_Type_free(&every2);
    CHECK(back[0] == me + 1 && back[2] == 2 * (me + 1) && back[4] == 3 * (me + 1) && back[1] == -1, "strided get");
    CHECK(mem[13] == (prev_of(me, n) + 1) * 100 && mem[14] == 0, "replace %d no_op %d", mem[13], mem[14]);
    printf("rma %d: replace %d no_op %d strided get %d %d %d\n", me, mem[13], mem[14], back[0], back[2], back[4]);
    int prev = (me + n - 1) % n;
    CHECK(mem[0] == 100 && mem[1] == 200 && mem[2] == 300, "puts: %d %d %d", mem[0], mem[1], mem[2]);
    CHECK(me != 0 || mem[5] == 6, "sum %d", mem[5]);
    CHECK(mem[6] == 14, "max %d", mem[6]);
    CHECK(got == 1000 + next, "get %d", got);
    CHECK(mem[10] == prev + 1 && mem[11] == 2 * (prev + 1) && mem[12] == 3 * (prev + 1), "strided %d %d %d", mem[10],
          mem[11], mem[12]);
    printf("rma %d: fence puts %d %d %d sum %d max %d get %d strided %d %d %d\n", me, mem[0], mem[1], mem[2],
           me == 0 ? mem[5] : 6, mem[6], got, mem[10], mem[11], mem[12]);

    /* Outside the window: the error class, nothing sent. */
    int rc = MPI_Put(&mine, 2, MPI_INT, next, SLOTS - 1, 2, MPI_INT, win);
    int cls;
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_RMA_RANGE, "range: rc %d", rc);
    printf("rma %d: outside the window refused %d\n", me, cls == MPI_ERR_RMA_RANGE);

    /* ---- a window of the program's doubles (MPI_Win_create) */
    double d[4] = {0, 0, 0, 0};
    MPI_Win dw;
    MPI_Win_create(d, sizeof d, sizeof(double), MPI_INFO_NULL, MPI_COMM_WORLD, &dw);
    MPI_Win_get_attr(dw, MPI_WIN_CREATE_FLAVOR, &flavor, &flag);
    CHECK(flag && *flavor == MPI_WIN_FLAVOR_CREATE, "flavor create");
    MPI_Win_fence(0, dw);
    double half[2] = {0.5 * (me + 1), 2.0};
    MPI_Accumulate(half, 2, MPI_DOUBLE, 1, 2, 2, MPI_DOUBLE, MPI_SUM, dw);
    MPI_Win_fence(0, dw);
    CHECK(me != 1 || (d[2] == 3.0 && d[3] == 6.0), "double sums %g %g", d[2], d[3]);
    if (me == 1) printf("rma 1: doubles %.1f %.1f\n", d[2], d[3]);
    MPI_Win_free(&dw);
    CHECK(dw == MPI_WIN_NULL, "freed");

    /* ---- passive target: rank 0 waits in MPI_Recv while 1 and 2 work on its window */
    MPI_Barrier(MPI_COMM_WORLD);
    for (int i = 0; i < SLOTS; i++) mem[i] = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    if (me == 0) {
        int seen = -1;
        MPI_Recv(&seen, 1, MPI_INT, 2, 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Win_sync(win);
        printf("rma 0: counter told %d local %d\n", seen, mem[0]);
    } else {
        for (int k = 0; k < ROUNDS; k++) {
            int c = -1;
            MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, win);
            MPI_Get(&c, 1, MPI_INT, 0, 0, 1, MPI_INT, win);
            MPI_Win_flush(0, win);
            c += 1;
            MPI_Put(&c, 1, MPI_INT, 0, 0, 1, MPI_INT, win);
            MPI_Win_unlock(0, win);
        }
        if (me == 1) {
            MPI_Send(&me, 1, MPI_INT, 2, 8, MPI_COMM_WORLD);
        } else {
            int other;
            MPI_Recv(&other, 1, MPI_INT, 1, 8, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            int c = -1;
            MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win);
            MPI_Get(&c, 1, MPI_INT, 0, 0, 1, MPI_INT, win);
            MPI_Win_unlock(0, win);
            printf("rma 2: counter read %d\n", c);
            MPI_Send(&c, 1, MPI_INT, 0, 9, MPI_COMM_WORLD);
        }
    }

    /* lock_all: everyone adds to everyone's slot 1. */
    MPI_Win_lock_all(0, win);
    for (int t = 0; t < n; t++) MPI_Accumulate(&one, 1, MPI_INT, t, 1, 1, MPI_INT, MPI_SUM, win);
    MPI_Win_flush_all(win);
    MPI_Win_unlock_all(win);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Win_sync(win);
    CHECK(mem[1] == 6, "lock_all sum %d", mem[1]);
    MPI_Group g;
    int gs;
    MPI_Win_get_group(win, &g);
    MPI_Group_size(g, &gs);
    MPI_Group_free(&g);
    printf("rma %d: lock_all sum %d group %d\n", me, mem[1], gs);
    MPI_Win_free(&win);
    MPI_Finalize();
    return 0;
}
