/* Error handlers of windows, files and sessions made by the program (created, set, called with
 * their object), classes added above MPI_ERR_LASTCODE, a class number MPICH 4.0's header does
 * not name (MPI 4.1's MPI_ERR_ERRHANDLER, 80) answered as itself, MPI_Comm_disconnect.
 * Prints "objerr R: ok" or the first check that failed. */
#include <mpi.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static int win_calls = 0, file_calls = 0, session_calls = 0, last = -1;
static MPI_Win seen_win = MPI_WIN_NULL;
static MPI_File seen_file = MPI_FILE_NULL;
static MPI_Session seen_session = MPI_SESSION_NULL;

static void on_win(MPI_Win *w, int *code, ...) { win_calls++, last = *code, seen_win = *w; }
static void on_file(MPI_File *f, int *code, ...) { file_calls++, last = *code, seen_file = *f; }
static void on_session(MPI_Session *s, int *code, ...) { session_calls++, last = *code, seen_session = *s; }

#define CHECK(c)                                                     \
    do {                                                             \
        if (!(c)) {                                                  \
            printf("objerr %d: FAILED line %d: %s\n", me, __LINE__, #c); \
            MPI_Abort(MPI_COMM_WORLD, 2);                            \
        }                                                            \
    } while (0)

int main(int argc, char **argv) {
    int me, cls = -1, buf[4];
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);

    MPI_Errhandler eh;
    MPI_Win win;
    CHECK(MPI_Win_create(buf, sizeof buf, sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &win) == MPI_SUCCESS);
    CHECK(MPI_Win_create_errhandler(on_win, &eh) == MPI_SUCCESS);
    CHECK(MPI_Win_set_errhandler(win, eh) == MPI_SUCCESS);
    CHECK(MPI_Win_call_errhandler(win, MPI_ERR_OTHER) == MPI_SUCCESS);
    CHECK(win_calls == 1 && last == MPI_ERR_OTHER && seen_win == win);
    MPI_Errhandler_free(&eh);
    MPI_Win_free(&win);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Error_class(MPI_Win_call_errhandler(MPI_WIN_NULL, MPI_ERR_OTHER), &cls);
    CHECK(cls == MPI_ERR_WIN);

    char name[64];
    snprintf(name, sizeof name, "/tmp/p2pmpi-objerr-%d-%d", (int)getpid(), me);
    MPI_File f;
    CHECK(MPI_File_open(MPI_COMM_SELF, name, MPI_MODE_WRONLY | MPI_MODE_CREATE | MPI_MODE_DELETE_ON_CLOSE,
                        MPI_INFO_NULL, &f) == MPI_SUCCESS);
    CHECK(MPI_File_create_errhandler(on_file, &eh) == MPI_SUCCESS);
    CHECK(MPI_File_set_errhandler(f, eh) == MPI_SUCCESS);
    CHECK(MPI_File_call_errhandler(f, MPI_ERR_IO) == MPI_SUCCESS);
    CHECK(file_calls == 1 && last == MPI_ERR_IO && seen_file == f);
    MPI_File_set_errhandler(f, MPI_ERRORS_RETURN);
    MPI_Errhandler_free(&eh);
    MPI_File_close(&f);

    MPI_Session s;
    CHECK(MPI_Session_init(MPI_INFO_NULL, MPI_ERRORS_RETURN, &s) == MPI_SUCCESS);
    CHECK(MPI_Session_create_errhandler(on_session, &eh) == MPI_SUCCESS);
    CHECK(MPI_Session_set_errhandler(s, eh) == MPI_SUCCESS);
    CHECK(MPI_Session_call_errhandler(s, MPI_ERR_ARG) == MPI_SUCCESS);
    CHECK(session_calls == 1 && last == MPI_ERR_ARG && seen_session == s);
    MPI_Errhandler_free(&eh);
    MPI_Session_finalize(&s);

    int added = -1, code = -1;
    CHECK(MPI_Add_error_class(&added) == MPI_SUCCESS && added > MPI_ERR_LASTCODE);
    CHECK(MPI_Add_error_code(added, &code) == MPI_SUCCESS && code > MPI_ERR_LASTCODE);
    MPI_Error_class(code, &cls);
    CHECK(cls == added);
    MPI_Error_class(80, &cls);
    CHECK(cls == 80);
    /* MPICH's removals (MPI 4.1's MPI_Remove_error_*): a class goes once its codes went. */
    CHECK(MPIX_Delete_error_class(added) != MPI_SUCCESS);
    CHECK(MPIX_Delete_error_code(code) == MPI_SUCCESS && MPIX_Delete_error_class(added) == MPI_SUCCESS);
    CHECK(MPI_Add_error_class(&cls) == MPI_SUCCESS && cls > code);
    /* No GPU: device buffers are the program's to stage. */
    int gpu = -1;
    CHECK(MPIX_Query_cuda_support() == 0 && MPIX_GPU_query_support(MPIX_GPU_SUPPORT_CUDA, &gpu) == MPI_SUCCESS && gpu == 0);

    MPI_Comm dup;
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    CHECK(MPI_Comm_disconnect(&dup) == MPI_SUCCESS && dup == MPI_COMM_NULL);
    MPI_Error_class(MPI_Comm_disconnect(&dup), &cls);
    CHECK(cls == MPI_ERR_COMM);
    printf("objerr %d: ok\n", me);
    MPI_Finalize();
    return 0;
}
