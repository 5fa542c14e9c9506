/* The array completions (MPI_Testall, MPI_Waitany, MPI_Testany, MPI_Waitsome, MPI_Testsome)
 * and MPI_Cancel on the requests MPI_Isend/MPI_Irecv keep in their handles, with
 * MPI_REQUEST_NULL among them, then mixed with a persistent and a generalized request. A ring:
 * each rank receives from the previous one. Prints one line per family with what it saw. */
#include <mpi.h>
#include <stdio.h>

static int query(void *extra, MPI_Status *st) {
    (void)extra;
    MPI_Status_set_elements(st, MPI_BYTE, 0);
    MPI_Status_set_cancelled(st, 0);
    st->MPI_SOURCE = 77;
    st->MPI_TAG = 78;
    return MPI_SUCCESS;
}
static int nofree(void *extra) {
    (void)extra;
    return MPI_SUCCESS;
}
static int nocancel(void *extra, int complete) {
    (void)extra;
    (void)complete;
    return MPI_SUCCESS;
}

int main(int argc, char **argv) {
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    MPI_Comm w = MPI_COMM_WORLD;
    int flag, index, out, idx[4];
    MPI_Status st, sts[4];

    /* Testall: three receives and a null; nothing sent yet: flag 0, the handles unchanged. */
    int in[3] = {0, 0, 0}, v[3] = {rank * 10 + 1, rank * 10 + 2, rank * 10 + 3};
    MPI_Request r[4], s[3];
    MPI_Irecv(&in[0], 1, MPI_INT, prev, 1, w, &r[0]);
    r[1] = MPI_REQUEST_NULL;
    MPI_Irecv(&in[1], 1, MPI_INT, prev, 2, w, &r[2]);
    MPI_Irecv(&in[2], 1, MPI_INT, MPI_ANY_SOURCE, 3, w, &r[3]);
    MPI_Testall(4, r, &flag, sts);
    int early = flag, unchanged = r[0] != MPI_REQUEST_NULL && r[2] != MPI_REQUEST_NULL && r[3] != MPI_REQUEST_NULL;
    MPI_Barrier(w);
    for (int k = 0; k < 3; k++)
        MPI_Isend(&v[k], 1, MPI_INT, next, k + 1, w, &s[k]);
    do
        MPI_Testall(4, r, &flag, sts);
    while (!flag);
    MPI_Waitall(3, s, MPI_STATUSES_IGNORE);
    printf("arrays %d: testall early %d unchanged %d got %d %d %d tags %d %d sources %d %d null %d nulls %d\n", rank,
           early, unchanged, in[0], in[1], in[2], sts[0].MPI_TAG, sts[3].MPI_TAG, sts[2].MPI_SOURCE,
           sts[3].MPI_SOURCE, sts[1].MPI_SOURCE == MPI_ANY_SOURCE,
           r[0] == MPI_REQUEST_NULL && r[2] == MPI_REQUEST_NULL && r[3] == MPI_REQUEST_NULL);

    /* Waitany: tag 12 is sent first, tag 11 after a barrier. */
    int a = 0, b = 0, x = rank + 100;
    MPI_Irecv(&a, 1, MPI_INT, prev, 11, w, &r[0]);
    r[1] = MPI_REQUEST_NULL;
    MPI_Irecv(&b, 1, MPI_INT, prev, 12, w, &r[2]);
    MPI_Isend(&x, 1, MPI_INT, next, 12, w, &s[0]);
    MPI_Waitany(3, r, &index, &st);
    int first = index, first_tag = st.MPI_TAG;
    MPI_Barrier(w);
    MPI_Isend(&x, 1, MPI_INT, next, 11, w, &s[1]);
    MPI_Waitany(3, r, &index, &st);
    int second = index;
    MPI_Waitall(2, s, MPI_STATUSES_IGNORE);
    MPI_Waitany(3, r, &index, &st);
    printf("arrays %d: waitany %d tag %d then %d got %d %d then undefined %d\n", rank, first, first_tag, second, a, b,
           index == MPI_UNDEFINED);

    /* Testany: nothing sent yet, then the message; then every request null. */
    MPI_Barrier(w);
    r[0] = MPI_REQUEST_NULL;
    MPI_Irecv(&a, 1, MPI_INT, prev, 21, w, &r[1]);
    MPI_Testany(2, r, &index, &flag, &st);
    int early_flag = flag, early_index = index;
    MPI_Barrier(w);
    x = rank + 200;
    MPI_Isend(&x, 1, MPI_INT, next, 21, w, &s[0]);
    do
        MPI_Testany(2, r, &index, &flag, &st);
    while (!flag);
    int got_index = index, got_source = st.MPI_SOURCE;
    MPI_Wait(&s[0], MPI_STATUS_IGNORE);
    MPI_Testany(2, r, &index, &flag, &st);
    printf("arrays %d: testany early %d %d then %d source %d got %d; all null %d %d\n", rank, early_flag,
           early_index == MPI_UNDEFINED, got_index, got_source, a, flag, index == MPI_UNDEFINED);

    /* Waitsome and Testsome: three receives and a null each; all collected. */
    int c[3] = {0, 0, 0}, total = 0, seen = 0, sum = 0;
    MPI_Barrier(w);
    for (int k = 0; k < 3; k++)
        MPI_Irecv(&c[k], 1, MPI_INT, prev, 31 + k, w, &r[k]);
    r[3] = MPI_REQUEST_NULL;
    MPI_Testsome(4, r, &out, idx, sts);
    int early_out = out;
    MPI_Barrier(w);
    for (int k = 0; k < 3; k++)
        MPI_Isend(&v[k], 1, MPI_INT, next, 31 + k, w, &s[k]);
    while (total < 3) {
        MPI_Waitsome(4, r, &out, idx, sts);
        for (int k = 0; k < out; k++) {
            seen |= 1 << idx[k];
            sum += sts[k].MPI_TAG;
        }
        total += out;
    }
    MPI_Waitsome(4, r, &out, idx, sts);
    int ws_undefined = out == MPI_UNDEFINED;
    MPI_Waitall(3, s, MPI_STATUSES_IGNORE);
    printf("arrays %d: waitsome early %d seen %d tags %d got %d %d %d undefined %d\n", rank, early_out, seen, sum,
           c[0], c[1], c[2], ws_undefined);
    total = seen = 0;
    MPI_Barrier(w);
    for (int k = 0; k < 3; k++)
        MPI_Irecv(&c[k], 1, MPI_INT, prev, 41 + k, w, &r[k + 1]);
    r[0] = MPI_REQUEST_NULL;
    for (int k = 0; k < 3; k++)
        MPI_Isend(&v[k], 1, MPI_INT, next, 41 + k, w, &s[k]);
    while (total < 3) {
        MPI_Testsome(4, r, &out, idx, MPI_STATUSES_IGNORE);
        for (int k = 0; k < out; k++)
            seen |= 1 << idx[k];
        total += out;
    }
    MPI_Testsome(4, r, &out, idx, sts);
    MPI_Waitall(3, s, MPI_STATUSES_IGNORE);
    printf("arrays %d: testsome seen %d undefined %d\n", rank, seen, out == MPI_UNDEFINED);

    /* Cancel: a receive nothing matches, cancelled, completed by each array call. */
    int cancelled[4], dummy;
    MPI_Irecv(&dummy, 1, MPI_INT, prev, 99, w, &r[0]);
    MPI_Cancel(&r[0]);
    MPI_Wait(&r[0], &st);
    MPI_Test_cancelled(&st, &cancelled[0]);
    MPI_Irecv(&dummy, 1, MPI_INT, prev, 99, w, &r[0]);
    r[1] = MPI_REQUEST_NULL;
    MPI_Cancel(&r[0]);
    MPI_Waitany(2, r, &index, &st);
    MPI_Test_cancelled(&st, &cancelled[1]);
    MPI_Irecv(&dummy, 1, MPI_INT, prev, 99, w, &r[0]);
    MPI_Cancel(&r[0]);
    do
        MPI_Testall(1, r, &flag, sts);
    while (!flag);
    MPI_Test_cancelled(&sts[0], &cancelled[2]);
    MPI_Irecv(&dummy, 1, MPI_INT, prev, 99, w, &r[1]);
    r[0] = MPI_REQUEST_NULL;
    MPI_Cancel(&r[1]);
    MPI_Waitsome(2, r, &out, idx, sts);
    MPI_Test_cancelled(&sts[0], &cancelled[3]);
    printf("arrays %d: cancelled %d %d %d %d index %d out %d at %d\n", rank, cancelled[0], cancelled[1], cancelled[2],
           cancelled[3], index, out, idx[0]);

    /* Mixed: a direct receive, a persistent one (started), a generalized request (completed)
     * and a null, completed by Testall, then again (the persistent one restarted) by Waitsome
     * and by Waitany. */
    int d = 0, p = 0;
    MPI_Request per, g;
    MPI_Barrier(w);
    MPI_Recv_init(&p, 1, MPI_INT, prev, 52, w, &per);
    MPI_Irecv(&d, 1, MPI_INT, prev, 51, w, &r[0]);
    MPI_Start(&per);
    MPI_Grequest_start(query, nofree, nocancel, NULL, &g);
    MPI_Grequest_complete(g);
    r[1] = per;
    r[2] = g;
    r[3] = MPI_REQUEST_NULL;
    int x1 = rank + 500, x2 = rank + 600;
    MPI_Isend(&x1, 1, MPI_INT, next, 51, w, &s[0]);
    MPI_Isend(&x2, 1, MPI_INT, next, 52, w, &s[1]);
    do
        MPI_Testall(4, r, &flag, sts);
    while (!flag);
    MPI_Waitall(2, s, MPI_STATUSES_IGNORE);
    printf("arrays %d: mixed testall got %d %d greq %d %d direct null %d persistent kept %d greq null %d\n", rank, d,
           p, sts[2].MPI_SOURCE, sts[2].MPI_TAG, r[0] == MPI_REQUEST_NULL, r[1] == per, r[2] == MPI_REQUEST_NULL);
    MPI_Barrier(w);
    MPI_Irecv(&d, 1, MPI_INT, prev, 51, w, &r[0]);
    MPI_Start(&per);
    MPI_Grequest_start(query, nofree, nocancel, NULL, &g);
    MPI_Grequest_complete(g);
    r[2] = g;
    MPI_Isend(&x1, 1, MPI_INT, next, 51, w, &s[0]);
    MPI_Isend(&x2, 1, MPI_INT, next, 52, w, &s[1]);
    total = seen = 0;
    while (total < 3) {
        MPI_Waitsome(4, r, &out, idx, sts);
        for (int k = 0; k < out; k++)
            seen |= 1 << idx[k];
        total += out;
    }
    MPI_Waitall(2, s, MPI_STATUSES_IGNORE);
    MPI_Barrier(w);
    MPI_Irecv(&d, 1, MPI_INT, prev, 51, w, &r[0]);
    MPI_Start(&per);
    MPI_Isend(&x1, 1, MPI_INT, next, 51, w, &s[0]);
    MPI_Isend(&x2, 1, MPI_INT, next, 52, w, &s[1]);
    int anys = 0;
    for (int k = 0; k < 2; k++) {
        MPI_Waitany(4, r, &index, &st);
        anys |= 1 << index;
    }
    MPI_Waitall(2, s, MPI_STATUSES_IGNORE);
    MPI_Request_free(&per);
    printf("arrays %d: mixed waitsome seen %d waitany seen %d got %d %d\n", rank, seen, anys, d, p);
    MPI_Finalize();
    return 0;
}
