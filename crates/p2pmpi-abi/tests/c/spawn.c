/* Dynamic processes: 2 parents spawn 2 children of this program ("child" argument) with
 * MPI_Comm_spawn, and 1 + 2 more with MPI_Comm_spawn_multiple; values go both ways over the
 * intercommunicators. Prints "spawn ..." lines. */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

#define CHECK(c, ...)                                                                   \
    do {                                                                                \
        if (!(c)) {                                                                     \
            printf("spawn %s %d: FAILED line %d: ", who, me, __LINE__);                 \
            printf(__VA_ARGS__);                                                        \
            printf("\n");                                                               \
            MPI_Abort(MPI_COMM_WORLD, 2);                                               \
        }                                                                               \
    } while (0)

int main(int argc, char **argv) {
    int me = -1, n;
    const char *who = argc > 1 ? argv[1] : "parent";
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    MPI_Comm parent, again;
    MPI_Comm_get_parent(&parent);
    if (strcmp(who, "missing") == 0) {
        /* A program that does not exist: MPI_ERR_SPAWN everywhere, no intercommunicator. */
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
        int codes[2] = {-1, -1}, cls = -1;
        MPI_Comm inter = MPI_COMM_WORLD;
        int rc = MPI_Comm_spawn("/nonexistent/p2pmpi-program", MPI_ARGV_NULL, 2, MPI_INFO_NULL, 0, MPI_COMM_WORLD, &inter,
                                codes);
        MPI_Error_class(rc, &cls);
        CHECK(cls == MPI_ERR_SPAWN && inter == MPI_COMM_NULL, "rc %d", rc);
        CHECK(codes[0] == MPI_ERR_SPAWN && codes[1] == MPI_ERR_SPAWN, "codes %d %d", codes[0], codes[1]);
        printf("spawn missing %d: refused\n", me);
    } else if (strcmp(who, "parent") == 0) {
        CHECK(parent == MPI_COMM_NULL, "a parent has no parent");
        char *args[] = {"child", NULL};
        int codes[2] = {-1, -1};
        MPI_Comm inter;
        CHECK(MPI_Comm_spawn(argv[0], args, 2, MPI_INFO_NULL, 0, MPI_COMM_WORLD, &inter, codes) == MPI_SUCCESS, "spawn");
        CHECK(codes[0] == MPI_SUCCESS && codes[1] == MPI_SUCCESS, "codes %d %d", codes[0], codes[1]);
        int flag = 0;
        MPI_Comm_test_inter(inter, &flag);
        CHECK(flag, "an intercommunicator");
        /* Parent r sends to child r; child r answers with its value times 3. */
        int v = 10 * (me + 1), back = -1;
        MPI_Send(&v, 1, MPI_INT, me, 1, inter);
        MPI_Recv(&back, 1, MPI_INT, me, 2, inter, MPI_STATUS_IGNORE);
        printf("spawn parent %d: child %d answered %d\n", me, me, back);
        MPI_Comm_free(&inter);

        char *cmds[] = {argv[0], argv[0]};
        char *a1[] = {"first", NULL}, *a2[] = {"second", NULL};
        char **argvs[] = {a1, a2};
        int procs[] = {1, 2};
        MPI_Info infos[] = {MPI_INFO_NULL, MPI_INFO_NULL};
        int codes3[3] = {-1, -1, -1};
        CHECK(MPI_Comm_spawn_multiple(2, cmds, argvs, procs, infos, 1, MPI_COMM_WORLD, &inter, codes3) == MPI_SUCCESS,
              "spawn_multiple");
        CHECK(codes3[0] == 0 && codes3[1] == 0 && codes3[2] == 0, "codes");
        if (me == 0) {
            int sum = 0;
            for (int c = 0; c < 3; c++) {
                int x = -1;
                MPI_Recv(&x, 1, MPI_INT, c, 3, inter, MPI_STATUS_IGNORE);
                sum += x;
            }
            printf("spawn parent 0: multiple sum %d\n", sum);
        }
        MPI_Comm_free(&inter);
    } else if (strcmp(who, "child") == 0) {
        CHECK(parent != MPI_COMM_NULL, "a child has a parent");
        MPI_Comm_get_parent(&again);
        CHECK(again == parent, "the same handle");
        int v = -1;
        MPI_Recv(&v, 1, MPI_INT, me, 1, parent, MPI_STATUS_IGNORE);
        v *= 3;
        MPI_Send(&v, 1, MPI_INT, me, 2, parent);
        printf("spawn child %d of %d: got %d\n", me, n, v / 3);
    } else {
        /* spawn_multiple's children: one world of 3, "first" is rank 0. */
        CHECK(parent != MPI_COMM_NULL, "a child has a parent");
        int *appnum, flag;
        MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_APPNUM, &appnum, &flag);
        int x = 100 * (me + 1) + *appnum;
        MPI_Send(&x, 1, MPI_INT, 0, 3, parent);
        printf("spawn %s %d of %d appnum %d\n", who, me, n, *appnum);
    }
    MPI_Finalize();
    return 0;
}
