/* Application checkpoints from C (p2pmpi's MPIX_Checkpoint and MPIX_Restored, declared here:
 * MPICH's header has neither). Each rank adds its rank + step to a running sum over STEPS
 * steps, checkpointing every EVERY steps; a checkpoint with a message in flight must fail
 * with MPI_ERR_PENDING. With "die", rank 1 kills itself (SIGKILL) after the checkpoint of
 * step KILL_AT of a fresh start: the launcher (--max-restarts 1) restarts every rank from that
 * checkpoint. Rank 0 prints "checkpoint result S" (the all-reduced sums) and whether it was
 * restored. Prints "checkpoint R: ..." lines.
 * Built against MPICH's libmpich.so.12, which has neither function: they are found at run time
 * in the library loaded (p2pmpi's), with the prototypes below. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int (*checkpoint_fn)(MPI_Count step, const void *state, MPI_Count size);
typedef int (*restored_fn)(MPI_Count *step, void **state, MPI_Count *size, int *flag);
static checkpoint_fn MPIX_Checkpoint;
static restored_fn MPIX_Restored;

#define STEPS 40
#define EVERY 5
#define KILL_AT 20

struct state {
    long sum;
    long steps_done;
};

int main(int argc, char **argv) {
    int die = argc > 1 && strcmp(argv[1], "die") == 0;
    MPI_Init(&argc, &argv);
    MPIX_Checkpoint = (checkpoint_fn)dlsym(RTLD_DEFAULT, "MPIX_Checkpoint");
    MPIX_Restored = (restored_fn)dlsym(RTLD_DEFAULT, "MPIX_Restored");
    if (!MPIX_Checkpoint || !MPIX_Restored) {
        printf("checkpoint: MPIX_Checkpoint or MPIX_Restored is not in the MPI library\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int me, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    struct state st = {0, 0};
    MPI_Count step = 0, got = 0;
    void *saved = NULL;
    int flag = -1;
    if (MPIX_Restored(&step, &saved, &got, &flag) != MPI_SUCCESS) {
        printf("checkpoint %d: MPIX_Restored failed\n", me);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    if (flag) {
        if (got != (MPI_Count)sizeof st) {
            printf("checkpoint %d: restored %lld bytes, want %zu\n", me, (long long)got, sizeof st);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
        memcpy(&st, saved, sizeof st);
        MPI_Free_mem(saved);
        printf("checkpoint %d: restored at step %lld\n", me, (long long)step);
    } else {
        if (saved != NULL || got != 0 || step != 0) {
            printf("checkpoint %d: a fresh start gave a state\n", me);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
        /* A message in flight: the checkpoint refuses, on every rank. */
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
        int v = 7, w = 0;
        MPI_Request rq = MPI_REQUEST_NULL;
        if (me == 0 && size > 1)
            MPI_Isend(&v, 1, MPI_INT, 1, 0, MPI_COMM_WORLD, &rq);
        int rc = MPIX_Checkpoint(0, &st, sizeof st);
        int cls = rc;
        MPI_Error_class(rc, &cls);
        printf("checkpoint %d: in flight class %s\n", me,
               size > 1 ? (cls == MPI_ERR_PENDING ? "pending" : "other") : "pending");
        if (me == 1)
            MPI_Recv(&w, 1, MPI_INT, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Wait(&rq, MPI_STATUS_IGNORE);
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    }
    for (long s = st.steps_done; s < STEPS; s++) {
        long mine = me + s, all = 0;
        MPI_Allreduce(&mine, &all, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
        st.sum += all;
        st.steps_done = s + 1;
        if (st.steps_done % EVERY == 0) {
            MPIX_Checkpoint(st.steps_done, &st, sizeof st);
            if (die && !flag && me == 1 && st.steps_done == KILL_AT) {
                fflush(stdout);
                raise(SIGKILL);
            }
        }
    }
    if (me == 0)
        printf("checkpoint result %ld restored %d\n", st.sum, flag);
    MPI_Finalize();
    return 0;
}
