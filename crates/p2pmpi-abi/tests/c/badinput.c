/* Bad input under MPI_ERRORS_RETURN: each wrong call answers MPI's error class (checked with
 * MPI_Error_class and MPI_Error_string), the job goes on, and the values computed after the
 * errors are right. Run on 2 processes.
 * With an argument, the default handler (MPI_ERRORS_ARE_FATAL) stays and rank 1 makes one
 * wrong call, which stops the job: `truncate` (MPI_Recv of a message too long), `mrecv` (the
 * same by a matched receive), `freed` (a freed communicator), `uncommitted` (a datatype not
 * committed), `root` (MPI_Gatherv with an invalid root). With `lost`, under
 * MPI_ERRORS_RETURN, rank 1 dies and the others' MPI_Allgatherv (on the Rust API) answers
 * the loss's class. */
#include <mpi.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static int failures = 0;

/* Checks that `rc` is of class `want`, and prints `name class text`. */
static void expect(const char *name, int rc, int want) {
    int cls = -1, len = 0;
    char text[MPI_MAX_ERROR_STRING] = "";
    MPI_Error_class(rc, &cls);
    MPI_Error_string(rc, text, &len);
    if (cls != want || len != (int)strlen(text) || len == 0) failures++;
    printf("%s: class %d%s %s\n", name, cls, cls == want ? "" : " WRONG", text);
}

static void fatal_case(const char *what, int rank) {
    int a[4] = {1, 2, 3, 4}, b[2];
    if (strcmp(what, "truncate") == 0) {
        if (rank == 0) MPI_Send(a, 4, MPI_INT, 1, 7, MPI_COMM_WORLD);
        if (rank == 1) MPI_Recv(b, 2, MPI_INT, 0, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else if (strcmp(what, "mrecv") == 0) {
        if (rank == 0) MPI_Send(a, 4, MPI_INT, 1, 7, MPI_COMM_WORLD);
        if (rank == 1) {
            MPI_Message m;
            MPI_Mprobe(0, 7, MPI_COMM_WORLD, &m, MPI_STATUS_IGNORE);
            MPI_Mrecv(b, 2, MPI_INT, &m, MPI_STATUS_IGNORE);
        }
    } else if (strcmp(what, "freed") == 0) {
        MPI_Comm d, copy;
        MPI_Comm_dup(MPI_COMM_WORLD, &d);
        copy = d;
        MPI_Comm_free(&d);
        if (rank == 1) MPI_Barrier(copy);
    } else if (strcmp(what, "uncommitted") == 0) {
        MPI_Datatype t;
        MPI_Type_contiguous(2, MPI_INT, &t);
        if (rank == 1) MPI_Send(a, 1, t, 0, 0, MPI_COMM_WORLD);
    } else if (strcmp(what, "root") == 0) {
        int counts[2] = {1, 1}, displs[2] = {0, 1};
        if (rank == 1) MPI_Gatherv(a, 1, MPI_INT, b, counts, displs, MPI_INT, 5, MPI_COMM_WORLD);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    printf("rank %d: not stopped\n", rank);
}

int main(int argc, char **argv) {
    int rank, size, a[4] = {1, 2, 3, 4}, b[4] = {0, 0, 0, 0}, x = 5, y = 0;
    MPI_Comm d, copy;
    MPI_Datatype t;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc > 1 && strcmp(argv[1], "lost") == 0) {
        int counts[64], displs[64], all[64], cls = -1, rc;
        for (int i = 0; i < size; i++) counts[i] = 1, displs[i] = i;
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
        MPI_Barrier(MPI_COMM_WORLD);
        if (rank == 1) _exit(0);
        rc = MPI_Allgatherv(&x, 1, MPI_INT, all, counts, displs, MPI_INT, MPI_COMM_WORLD);
        MPI_Error_class(rc, &cls);
        /* A survivor that saw the failure frees the others from the collective it left. */
        if (cls == MPIX_ERR_PROC_FAILED) MPIX_Comm_revoke(MPI_COMM_WORLD);
        printf("rank %d: allgatherv after a loss: class %d\n", rank, cls);
        fflush(stdout);
        MPI_Finalize();
        return 0;
    }
    if (argc > 1) {
        fatal_case(argv[1], rank);
        MPI_Finalize();
        return 0;
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);

    /* A wrong handle: never made, or of another kind. */
    if (rank == 0) {
        expect("wrong comm", MPI_Send(&x, 1, MPI_INT, 0, 0, (MPI_Comm)0x84000123), MPI_ERR_COMM);
        expect("comm of another kind", MPI_Barrier((MPI_Comm)MPI_INT), MPI_ERR_COMM);
        expect("wrong group", MPI_Group_size((MPI_Group)0x88000777, &y), MPI_ERR_GROUP);
        expect("wrong op", MPI_Allreduce(&x, &y, 1, MPI_INT, (MPI_Op)0x98000042, MPI_COMM_SELF), MPI_ERR_OP);
        expect("wrong type", MPI_Send(&x, 1, (MPI_Datatype)0x8c000555, 0, 0, MPI_COMM_SELF), MPI_ERR_TYPE);
        {
            MPI_Request r = (MPI_Request)0xac000999;
            expect("wrong request", MPI_Wait(&r, MPI_STATUS_IGNORE), MPI_ERR_REQUEST);
        }
    }

    /* A freed communicator: its old handle names nothing. */
    MPI_Comm_dup(MPI_COMM_WORLD, &d);
    copy = d;
    MPI_Comm_free(&d);
    if (rank == 0) {
        expect("freed comm barrier", MPI_Barrier(copy), MPI_ERR_COMM);
        expect("freed comm rank", MPI_Comm_rank(copy, &y), MPI_ERR_COMM);
        expect("freed comm gatherv", MPI_Allgatherv(&x, 1, MPI_INT, b, a, a, MPI_INT, copy), MPI_ERR_COMM);
        expect("freed comm free", MPI_Comm_free(&copy), MPI_ERR_COMM);
    }

    /* A datatype not committed. */
    MPI_Type_contiguous(2, MPI_INT, &t);
    if (rank == 0) {
        expect("uncommitted send", MPI_Send(a, 1, t, 0, 0, MPI_COMM_SELF), MPI_ERR_TYPE);
        expect("uncommitted bcast", MPI_Bcast(a, 1, t, 0, MPI_COMM_SELF), MPI_ERR_TYPE);
    }
    MPI_Type_free(&t);

    /* Invalid rank, tag, root, count. */
    if (rank == 0) {
        MPI_Request r;
        int counts[2] = {1, 1}, displs[2] = {0, 1};
        expect("rank", MPI_Send(&x, 1, MPI_INT, size, 0, MPI_COMM_WORLD), MPI_ERR_RANK);
        expect("negative rank", MPI_Recv(&x, 1, MPI_INT, -3, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE), MPI_ERR_RANK);
        expect("tag", MPI_Isend(&x, 1, MPI_INT, 0, -2, MPI_COMM_WORLD, &r), MPI_ERR_TAG);
        expect("root", MPI_Bcast(&x, 1, MPI_INT, size, MPI_COMM_WORLD), MPI_ERR_ROOT);
        expect("root gatherv", MPI_Gatherv(&x, 1, MPI_INT, b, counts, displs, MPI_INT, -1, MPI_COMM_WORLD),
               MPI_ERR_ROOT);
        expect("root ireduce", MPI_Ireduce(&x, &y, 1, MPI_INT, MPI_SUM, size, MPI_COMM_WORLD, &r), MPI_ERR_ROOT);
        expect("count", MPI_Send(&x, -1, MPI_INT, 0, 0, MPI_COMM_WORLD), MPI_ERR_COUNT);
    }

    /* A count mismatch: a message longer than the receive buffer. */
    if (rank == 0) {
        MPI_Send(a, 4, MPI_INT, 1, 1, MPI_COMM_WORLD);
        MPI_Send(a, 4, MPI_INT, 1, 2, MPI_COMM_WORLD);
        MPI_Send(a, 4, MPI_INT, 1, 3, MPI_COMM_WORLD);
    } else if (rank == 1) {
        MPI_Status st;
        MPI_Message m;
        MPI_Request r;
        expect("truncate recv", MPI_Recv(b, 2, MPI_INT, 0, 1, MPI_COMM_WORLD, &st), MPI_ERR_TRUNCATE);
        MPI_Mprobe(0, 2, MPI_COMM_WORLD, &m, &st);
        expect("truncate mrecv", MPI_Mrecv(b, 2, MPI_INT, &m, &st), MPI_ERR_TRUNCATE);
        MPI_Irecv(b, 2, MPI_INT, 0, 3, MPI_COMM_WORLD, &r);
        expect("truncate wait", MPI_Wait(&r, &st), MPI_ERR_TRUNCATE);
    }
    /* A count mismatch in a collective on the Rust API: rank 1 sends 2 elements where the
     * root expects 1. */
    {
        int counts[2] = {1, 1}, displs[2] = {0, 1}, rc;
        rc = MPI_Gatherv(a, rank == 1 ? 2 : 1, MPI_INT, b, counts, displs, MPI_INT, 0, MPI_COMM_WORLD);
        if (rank == 0) expect("truncate gatherv", rc, MPI_ERR_TRUNCATE);
    }

    /* The job goes on, and computes right. */
    x = rank + 1;
    MPI_Allreduce(&x, &y, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    printf("rank %d: after errors sum %d failures %d\n", rank, y, failures);
    MPI_Finalize();
    return 0;
}
