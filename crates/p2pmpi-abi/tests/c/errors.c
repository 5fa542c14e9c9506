/* Errors: with MPI_ERRORS_RETURN each wrong call answers its class (printed); then, with the
 * default handler (MPI_ERRORS_ARE_FATAL) restored, rank 1 makes a wrong call, which stops
 * the job. `abort` as the argument: rank 0 calls MPI_Abort(MPI_COMM_WORLD, 3) instead. */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

static int calls = 0, last_code = -1, last_world = -1;

static void on_error(MPI_Comm *comm, int *code, ...) {
    calls++;
    last_code = *code;
    last_world = *comm == MPI_COMM_WORLD;
}

int main(int argc, char **argv) {
    int rank, size, x = 1, rc, cls, len, eh;
    char text[MPI_MAX_ERROR_STRING];
    MPI_Request r = 12345;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc > 1 && strcmp(argv[1], "abort") == 0) {
        if (rank == 0) {
            printf("aborting\n");
            MPI_Abort(MPI_COMM_WORLD, 3);
        }
        MPI_Barrier(MPI_COMM_WORLD);
        printf("rank %d: not stopped\n", rank);
        MPI_Finalize();
        return 0;
    }
    MPI_Comm_get_errhandler(MPI_COMM_WORLD, &eh);
    printf("rank %d: default fatal %d\n", rank, eh == MPI_ERRORS_ARE_FATAL);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
    if (rank == 0) {
        printf("rank: %d\n", MPI_Send(&x, 1, MPI_INT, size, 0, MPI_COMM_WORLD));
        printf("type: %d\n", MPI_Send(&x, 1, MPI_DATATYPE_NULL, 0, 0, MPI_COMM_WORLD));
        printf("unknown type: %d\n", MPI_Send(&x, 1, (MPI_Datatype)0x4c001234, 0, 0, MPI_COMM_WORLD));
        printf("count: %d\n", MPI_Send(&x, -1, MPI_INT, 0, 0, MPI_COMM_WORLD));
        printf("tag: %d\n", MPI_Send(&x, 1, MPI_INT, 0, -5, MPI_COMM_WORLD));
        printf("comm: %d\n", MPI_Send(&x, 1, MPI_INT, 0, 0, MPI_COMM_NULL));
        printf("op: %d\n", MPI_Reduce(&x, &rc, 1, MPI_INT, MPI_OP_NULL, 0, MPI_COMM_SELF));
        printf("root: %d\n", MPI_Bcast(&x, 1, MPI_INT, size, MPI_COMM_WORLD));
        printf("request: %d\n", MPI_Wait(&r, MPI_STATUS_IGNORE));
        printf("in place: %d\n", MPI_Send(MPI_IN_PLACE, 1, MPI_INT, 0, 0, MPI_COMM_WORLD));
        {
            /* MPI_IN_PLACE where it does not apply: refused before any communication. */
            int counts[8] = {1, 1, 1, 1, 1, 1, 1, 1}, displs[8] = {0, 1, 2, 3, 4, 5, 6, 7}, all[8];
            MPI_Request r;
            printf("in place gatherv: %d iallgather: %d\n",
                   MPI_Gatherv(MPI_IN_PLACE, 1, MPI_INT, all, counts, displs, MPI_INT, 1, MPI_COMM_WORLD),
                   MPI_Iallgather(&x, 1, MPI_INT, MPI_IN_PLACE, 1, MPI_INT, MPI_COMM_WORLD, &r));
        }
        rc = MPI_Send(&x, 1, MPI_INT, size, 0, MPI_COMM_WORLD);
        MPI_Error_class(rc, &cls);
        MPI_Error_string(rc, text, &len);
        printf("class %d string %s length %d\n", cls, text, len == (int)strlen(text));
        {
            int mine, code, back, flag, *last;
            MPI_Add_error_class(&mine);
            MPI_Add_error_code(mine, &code);
            MPI_Add_error_string(code, "my failure");
            MPI_Error_class(code, &back);
            MPI_Error_string(code, text, &len);
            MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_LASTUSEDCODE, &last, &flag);
            printf("added: class %d code %d text %s last %d\n", back == mine && mine > 0,
                   code != mine, text, flag && *last == code);
        }
    }
    /* A handler of the program's: called with the communicator and the code; the call then
     * returns the code. */
    {
        MPI_Errhandler mine;
        MPI_Comm_create_errhandler(on_error, &mine);
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, mine);
        MPI_Errhandler_free(&mine);
        if (rank == 0) {
            rc = MPI_Send(&x, 1, MPI_INT, size + 1, 0, MPI_COMM_WORLD);
            printf("user handler: calls %d code %d world %d returned %d freed %d\n", calls, last_code, last_world, rc,
                   mine == MPI_ERRHANDLER_NULL);
            MPI_Comm_call_errhandler(MPI_COMM_WORLD, MPI_ERR_OTHER);
            printf("call errhandler: calls %d code %d\n", calls, last_code);
        }
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 1) MPI_Send(&x, 1, MPI_INT, -7, 0, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    printf("rank %d: not stopped\n", rank);
    MPI_Finalize();
    return 0;
}
