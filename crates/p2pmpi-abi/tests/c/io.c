/* MPI-IO's reading and writing on 2 or 3 processes, in a file of a directory rank 0 makes:
 * explicit offsets, a view with a vector filetype (interleaved ranks), the byte offset of a
 * view's position, the shared file pointer, ordered accesses, seeking, a read past the end
 * of the file, nonblocking and split collective forms, errors (a read-only file, a handler
 * of the program called, a data representation registered twice), and the closing deleting the file and leaving the
 * directory empty. Each line "rank R: WHAT 1" is a check passed. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int rank, size;

static void line(const char *what, int ok) {
    printf("rank %d: %s %d\n", rank, what, ok);
}

/* Explicit offsets: each rank writes 4 ints at its place; every rank reads them all. */
static int at(MPI_File f) {
    int mine[4], all[64], ok = 1;
    for (int i = 0; i < 4; i++)
        mine[i] = rank * 10 + i;
    MPI_File_write_at(f, rank * 4, mine, 4, MPI_INT, MPI_STATUS_IGNORE);
    MPI_File_sync(f);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_File_read_at(f, 0, all, 4 * size, MPI_INT, MPI_STATUS_IGNORE);
    for (int r = 0; r < size; r++)
        for (int i = 0; i < 4; i++)
            ok &= all[r * 4 + i] == r * 10 + i;
    return ok;
}

/* A view of every size-th int from the rank's own: 6 ints written through it land
 * interleaved; read back through the view and through a plain one. */
static int view(MPI_File f) {
    MPI_Datatype vec, ftype, et, ft;
    MPI_Offset byte, disp;
    MPI_Aint lb, ext;
    char rep[MPI_MAX_DATAREP_STRING];
    int mine[6], back[6], all[64], ok = 1, n;
    MPI_Status st;
    MPI_Type_vector(2, 1, size, MPI_INT, &vec);
    MPI_Type_create_resized(vec, 0, 2 * size * sizeof(int), &ftype);
    MPI_Type_commit(&ftype);
    MPI_File_set_size(f, 0);
    MPI_File_set_view(f, 64 + rank * sizeof(int), MPI_INT, ftype, "native", MPI_INFO_NULL);
    MPI_File_get_view(f, &disp, &et, &ft, rep);
    MPI_Type_get_extent(ft, &lb, &ext);
    ok &= disp == 64 + rank * (int)sizeof(int) && et == MPI_INT && ext == 2 * size * (int)sizeof(int);
    ok &= strcmp(rep, "native") == 0;
    MPI_Type_free(&ft);
    MPI_File_get_byte_offset(f, 3, &byte);
    ok &= byte == 64 + (rank + 3 * size) * (int)sizeof(int);
    for (int i = 0; i < 6; i++)
        mine[i] = rank * 100 + i;
    MPI_File_write_all(f, mine, 6, MPI_INT, MPI_STATUS_IGNORE);
    MPI_File_sync(f);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_File_seek(f, 0, MPI_SEEK_SET);
    MPI_File_read(f, back, 6, MPI_INT, &st);
    MPI_Get_count(&st, MPI_INT, &n);
    ok &= n == 6 && memcmp(back, mine, sizeof mine) == 0;
    MPI_File_set_view(f, 64, MPI_INT, MPI_INT, "native", MPI_INFO_NULL);
    MPI_File_read_at(f, 0, all, 6 * size, MPI_INT, MPI_STATUS_IGNORE);
    for (int k = 0; k < 6; k++)
        for (int r = 0; r < size; r++)
            ok &= all[k * size + r] == r * 100 + k;
    MPI_Type_free(&ftype);
    MPI_Type_free(&vec);
    return ok;
}

/* The shared file pointer, in atomic mode: each rank writes 8 bytes of its letter; every
 * letter once, in whole runs. */
static int shared(MPI_File f) {
    char all[64], mine[8];
    int seen = 0, ok = 1;
    MPI_Offset pos;
    int atomic = 0;
    MPI_File_set_view(f, 0, MPI_BYTE, MPI_BYTE, "native", MPI_INFO_NULL);
    MPI_File_set_size(f, 0);
    MPI_File_set_atomicity(f, 1);
    MPI_File_get_atomicity(f, &atomic);
    ok &= atomic == 1;
    memset(mine, 'a' + rank, 8);
    MPI_File_write_shared(f, mine, 8, MPI_BYTE, MPI_STATUS_IGNORE);
    MPI_File_sync(f);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_File_get_position_shared(f, &pos);
    ok &= pos == 8 * size;
    MPI_File_read_at(f, 0, all, 8 * size, MPI_BYTE, MPI_STATUS_IGNORE);
    for (int r = 0; r < size; r++) {
        for (int i = 1; i < 8; i++)
            ok &= all[r * 8 + i] == all[r * 8];
        seen |= 1 << (all[r * 8] - 'a');
    }
    MPI_File_set_atomicity(f, 0);
    MPI_Barrier(MPI_COMM_WORLD);
    return ok && seen == (1 << size) - 1;
}

/* Ordered: rank r writes r + 1 ints of value r after the lower ranks'; read back in order. */
static int ordered(MPI_File f) {
    int mine[8], back[8], all[64], ok = 1, k = 0;
    MPI_File_set_view(f, 0, MPI_INT, MPI_INT, "native", MPI_INFO_NULL);
    MPI_File_set_size(f, 0);
    for (int i = 0; i <= rank; i++)
        mine[i] = rank;
    MPI_File_write_ordered(f, mine, rank + 1, MPI_INT, MPI_STATUS_IGNORE);
    MPI_File_sync(f);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_File_read_at(f, 0, all, size * (size + 1) / 2, MPI_INT, MPI_STATUS_IGNORE);
    for (int r = 0; r < size; r++)
        for (int i = 0; i <= r; i++)
            ok &= all[k++] == r;
    MPI_File_seek_shared(f, 0, MPI_SEEK_SET);
    MPI_File_read_ordered(f, back, rank + 1, MPI_INT, MPI_STATUS_IGNORE);
    ok &= memcmp(back, mine, (rank + 1) * sizeof(int)) == 0;
    return ok;
}

/* Seeking from the end and from the current position; a read past the end stops there. */
static int seek(MPI_File f) {
    MPI_Offset pos, total = size * (size + 1) / 2;
    MPI_Status st;
    int buf[4] = {-1, -1, -1, -1}, n, ok = 1;
    MPI_File_seek(f, 0, MPI_SEEK_END);
    MPI_File_get_position(f, &pos);
    ok &= pos == total;
    MPI_File_seek(f, -1, MPI_SEEK_CUR);
    MPI_File_get_position(f, &pos);
    ok &= pos == total - 1;
    MPI_File_read(f, buf, 4, MPI_INT, &st);
    MPI_Get_count(&st, MPI_INT, &n);
    ok &= n == 1 && buf[0] == size - 1 && buf[1] == -1;
    MPI_File_get_position(f, &pos);
    ok &= pos == total;
    MPI_Barrier(MPI_COMM_WORLD);
    return ok;
}

/* Nonblocking and split collective forms. */
static int split(MPI_File f) {
    int v = 1000 + rank, back = -1, ok = 1, n;
    MPI_Request req;
    MPI_Status st;
    MPI_File_iwrite_at(f, 100 + rank, &v, 1, MPI_INT, &req);
    MPI_Wait(&req, MPI_STATUS_IGNORE);
    MPI_File_sync(f);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_File_read_at_all_begin(f, 100 + (rank + 1) % size, &back, 1, MPI_INT);
    MPI_File_read_at_all_end(f, &back, &st);
    ok &= back == 1000 + (rank + 1) % size;
    MPI_File_iread_at(f, 100 + rank, &back, 1, MPI_INT, &req);
    MPI_Wait(&req, &st);
    MPI_Get_count(&st, MPI_INT, &n);
    ok &= back == v && n == 1;
    /* Nothing to read: complete at once, a count of 0 (mpi4py reads 0 elements so). */
    MPI_File_seek(f, 100 + rank, MPI_SEEK_SET);
    ok &= MPI_File_iread(f, &back, 0, MPI_INT, &req) == MPI_SUCCESS;
    ok &= MPI_Wait(&req, &st) == MPI_SUCCESS;
    MPI_Get_count(&st, MPI_INT, &n);
    ok &= n == 0 && back == v;
    return ok;
}

static MPI_File seen_file = MPI_FILE_NULL;
static int seen_code = -1;

static void on_error(MPI_File *file, int *code, ...) {
    seen_file = *file;
    seen_code = *code;
}

/* A read-only file refuses writes (returned, then given to a handler of the program); a data
 * representation is registered once. */
static int errors(const char *name) {
    MPI_File g;
    MPI_Errhandler eh;
    int rc, cls, ok = 1, v = 0;
    char rep[32];
    MPI_File_open(MPI_COMM_WORLD, name, MPI_MODE_RDONLY, MPI_INFO_NULL, &g);
    rc = MPI_File_write_at(g, 0, &v, 1, MPI_INT, MPI_STATUS_IGNORE);
    MPI_Error_class(rc, &cls);
    ok &= cls == MPI_ERR_READ_ONLY;
    ok &= MPI_File_call_errhandler(g, MPI_ERR_IO) == MPI_SUCCESS;
    MPI_File_create_errhandler(on_error, &eh);
    MPI_File_set_errhandler(g, eh);
    MPI_Errhandler_free(&eh);
    MPI_File_write_at(g, 0, &v, 1, MPI_INT, MPI_STATUS_IGNORE);
    MPI_Error_class(seen_code, &cls);
    ok &= seen_file == g && cls == MPI_ERR_READ_ONLY;
    MPI_File_call_errhandler(g, MPI_ERR_IO);
    ok &= seen_code == MPI_ERR_IO;
    MPI_File_close(&g);
    snprintf(rep, sizeof rep, "p2pmpi-rep-%d", rank);
    ok &= MPI_Register_datarep(rep, MPI_CONVERSION_FN_NULL, MPI_CONVERSION_FN_NULL, NULL, NULL) == MPI_SUCCESS;
    rc = MPI_Register_datarep(rep, MPI_CONVERSION_FN_NULL, MPI_CONVERSION_FN_NULL, NULL, NULL);
    MPI_Error_class(rc, &cls);
    ok &= cls == MPI_ERR_DUP_DATAREP;
    return ok;
}

int main(int argc, char **argv) {
    char dir[256] = "", name[300];
    MPI_File f;
    int gone;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (rank == 0) {
        snprintf(dir, sizeof dir, "/tmp/p2pmpi-io-XXXXXX");
        if (!mkdtemp(dir))
            MPI_Abort(MPI_COMM_WORLD, 2);
    }
    MPI_Bcast(dir, sizeof dir, MPI_CHAR, 0, MPI_COMM_WORLD);
    snprintf(name, sizeof name, "%s/data", dir);
    MPI_File_open(MPI_COMM_WORLD, name, MPI_MODE_CREATE | MPI_MODE_RDWR, MPI_INFO_NULL, &f);
    MPI_File_set_view(f, 0, MPI_INT, MPI_INT, "native", MPI_INFO_NULL);
    line("at", at(f));
    {
        MPI_Offset sz;
        MPI_File_get_size(f, &sz);
        line("size", sz == 16 * size);
    }
    line("view", view(f));
    line("shared", shared(f));
    line("ordered", ordered(f));
    line("seek", seek(f));
    line("split", split(f));
    MPI_File_close(&f);
    line("errors", errors(name));
    MPI_File_open(MPI_COMM_WORLD, name, MPI_MODE_RDWR | MPI_MODE_DELETE_ON_CLOSE, MPI_INFO_NULL, &f);
    MPI_File_close(&f);
    gone = rank == 0 ? rmdir(dir) == 0 : 0;
    MPI_Bcast(&gone, 1, MPI_INT, 0, MPI_COMM_WORLD);
    line("clean", gone);
    MPI_Finalize();
    return 0;
}
