/* Point-to-point odds on every process: MPI_Isendrecv(_replace) around a ring, partitioned
   communication (MPI_Psend_init ... MPI_Parrived), generalized requests and their callbacks,
   a synchronous send to oneself that completes only once received, MPI_Comm_idup,
   MPI_Comm_create_group, MPI_Pack_external ("external32"). Prints "rank R: WHAT VALUE" lines. */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

static int queried, freed, cancelled, cancel_complete;

static int query_fn(void *extra, MPI_Status *st) {
    queried++;
    st->MPI_SOURCE = *(int *)extra;
    st->MPI_TAG = 42;
    MPI_Status_set_elements(st, MPI_INT, 3);
    MPI_Status_set_cancelled(st, 0);
    return MPI_SUCCESS;
}
static int free_fn(void *extra) {
    (void)extra;
    freed++;
    return MPI_SUCCESS;
}
static int cancel_fn(void *extra, int complete) {
    (void)extra;
    cancelled++;
    cancel_complete = complete;
    return MPI_SUCCESS;
}
static int failing_query(void *extra, MPI_Status *st) {
    (void)extra;
    (void)st;
    return MPI_ERR_BUFFER;
}

int main(int argc, char **argv) {
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;

    /* Isendrecv: a ring of 3 ints, and 100000 doubles (a rendez-vous). */
    int out[3] = {rank, rank * 10, rank * 100}, in[4] = {-1, -1, -1, -1};
    MPI_Request req;
    MPI_Status st;
    MPI_Isendrecv(out, 3, MPI_INT, next, 5, in, 4, MPI_INT, prev, 5, MPI_COMM_WORLD, &req);
    out[0] = -7; /* the send is a copy: changing the buffer now does not change what is sent */
    MPI_Wait(&req, &st);
    int n;
    MPI_Get_count(&st, MPI_INT, &n);
    printf("rank %d: isendrecv %d %d %d %d count %d source %d\n", rank, in[0], in[1], in[2], in[3], n,
           st.MPI_SOURCE);
    static double big[100000], bigin[100000];
    for (int i = 0; i < 100000; i++) big[i] = rank + i;
    MPI_Isendrecv(big, 100000, MPI_DOUBLE, next, 6, bigin, 100000, MPI_DOUBLE, prev, 6, MPI_COMM_WORLD, &req);
    MPI_Wait(&req, MPI_STATUS_IGNORE);
    int good = 1;
    for (int i = 0; i < 100000; i++) good &= bigin[i] == prev + i;
    printf("rank %d: isendrecv large %d\n", rank, good);
    int rep[2] = {rank, rank + 1};
    MPI_Isendrecv_replace(rep, 2, MPI_INT, next, 7, prev, 7, MPI_COMM_WORLD, &req);
    MPI_Wait(&req, &st);
    printf("rank %d: isendrecv_replace %d %d\n", rank, rep[0], rep[1]);
    /* Nothing to send (a null buffer): with MPI_PROC_NULL, and to oneself. */
    int rc1 = MPI_Isendrecv(NULL, 0, MPI_INT, MPI_PROC_NULL, 0, NULL, 0, MPI_INT, MPI_PROC_NULL, 0, MPI_COMM_WORLD, &req);
    int rc2 = MPI_Wait(&req, &st);
    int rc3 = MPI_Isendrecv_replace(NULL, 0, MPI_INT, rank, 8, rank, 8, MPI_COMM_WORLD, &req);
    int rc4 = MPI_Wait(&req, &st);
    MPI_Get_count(&st, MPI_INT, &n);
    printf("rank %d: isendrecv empty %d count %d source %d\n", rank, rc1 == 0 && rc2 == 0 && rc3 == 0 && rc4 == 0, n,
           st.MPI_SOURCE == rank);

    /* Partitioned: 4 partitions of 2 ints around the ring, started twice. */
    int pout[8], pin[8];
    MPI_Request sreq, rreq;
    MPI_Psend_init(pout, 4, 2, MPI_INT, next, 9, MPI_COMM_WORLD, MPI_INFO_NULL, &sreq);
    MPI_Precv_init(pin, 4, 2, MPI_INT, prev, 9, MPI_COMM_WORLD, MPI_INFO_NULL, &rreq);
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < 8; i++) pout[i] = rank * 100 + round * 10 + i, pin[i] = -1;
        MPI_Start(&rreq);
        int arrived;
        MPI_Parrived(rreq, 0, &arrived);
        int before = arrived;
        MPI_Barrier(MPI_COMM_WORLD);
        MPI_Start(&sreq);
        int flag;
        MPI_Pready(0, sreq);
        MPI_Pready_range(1, 2, sreq);
        MPI_Test(&sreq, &flag, MPI_STATUS_IGNORE);
        int sent_early = flag;
        int last = 3;
        MPI_Pready_list(1, &last, sreq);
        do {
            MPI_Parrived(rreq, 3, &arrived);
        } while (!arrived);
        MPI_Wait(&rreq, MPI_STATUS_IGNORE);
        MPI_Wait(&sreq, MPI_STATUS_IGNORE);
        int ok = 1;
        for (int i = 0; i < 8; i++) ok &= pin[i] == prev * 100 + round * 10 + i;
        printf("rank %d: partitioned round %d arrived before %d sent early %d data %d\n", rank, round, before,
               sent_early, ok);
    }
    MPI_Request_free(&sreq);
    MPI_Request_free(&rreq);
    printf("rank %d: partitioned freed %d\n", rank, sreq == MPI_REQUEST_NULL && rreq == MPI_REQUEST_NULL);

    /* Generalized requests. */
    int source = 33, flag;
    MPI_Request g;
    MPI_Grequest_start(query_fn, free_fn, cancel_fn, &source, &g);
    MPI_Test(&g, &flag, &st);
    int early = flag;
    MPI_Cancel(&g);
    int c1 = cancel_complete;
    MPI_Grequest_complete(g);
    MPI_Cancel(&g);
    int c2 = cancel_complete;
    MPI_Wait(&g, &st);
    MPI_Get_count(&st, MPI_INT, &n);
    printf("rank %d: grequest early %d cancels %d (%d %d) queried %d freed %d source %d tag %d count %d null %d\n", rank,
           early, cancelled, c1, c2, queried, freed, st.MPI_SOURCE, st.MPI_TAG, n, g == MPI_REQUEST_NULL);
    MPI_Request two[2];
    MPI_Grequest_start(query_fn, free_fn, NULL, &source, &two[0]);
    MPI_Grequest_start(NULL, NULL, NULL, NULL, &two[1]);
    MPI_Status sts[2];
    MPI_Testall(2, two, &flag, sts);
    int none = !flag;
    MPI_Grequest_complete(two[1]);
    MPI_Grequest_complete(two[0]);
    MPI_Waitall(2, two, sts);
    printf("rank %d: grequest waitall before %d sources %d %d tags %d %d freed %d\n", rank, none, sts[0].MPI_SOURCE,
           sts[1].MPI_SOURCE == MPI_ANY_SOURCE, sts[0].MPI_TAG, sts[1].MPI_TAG == MPI_ANY_TAG, freed);
    MPI_Grequest_start(failing_query, NULL, NULL, NULL, &g);
    MPI_Grequest_complete(g);
    int rc = MPI_Wait(&g, MPI_STATUS_IGNORE), cls;
    MPI_Error_class(rc, &cls);
    printf("rank %d: grequest failing query %d\n", rank, cls == MPI_ERR_BUFFER);

    /* A synchronous send to oneself completes once received, not before. */
    int token = 77, got = 0;
    MPI_Issend(&token, 1, MPI_INT, rank, 11, MPI_COMM_WORLD, &req);
    MPI_Test(&req, &flag, MPI_STATUS_IGNORE);
    int before_recv = flag;
    MPI_Recv(&got, 1, MPI_INT, rank, 11, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Test(&req, &flag, MPI_STATUS_IGNORE);
    printf("rank %d: issend to itself before %d after %d got %d\n", rank, before_recv, flag, got);

    /* MPI_Comm_idup and MPI_Comm_create_group (the even ranks). */
    MPI_Comm dup, sub;
    MPI_Comm_idup(MPI_COMM_WORLD, &dup, &req);
    MPI_Wait(&req, MPI_STATUS_IGNORE);
    int cmp;
    MPI_Comm_compare(MPI_COMM_WORLD, dup, &cmp);
    printf("rank %d: idup congruent %d\n", rank, cmp == MPI_CONGRUENT);
    MPI_Group world, evens;
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    int range[1][3] = {{0, size - 1, 2}};
    MPI_Group_range_incl(world, 1, range, &evens);
    if (rank % 2 == 0) {
        MPI_Comm_create_group(dup, evens, 3, &sub);
        int subsize, sum, mine = rank;
        MPI_Comm_size(sub, &subsize);
        MPI_Allreduce(&mine, &sum, 1, MPI_INT, MPI_SUM, sub);
        printf("rank %d: create_group size %d sum %d\n", rank, subsize, sum);
        MPI_Comm_free(&sub);
    }
    MPI_Group_free(&evens);
    MPI_Group_free(&world);
    MPI_Comm_free(&dup);

    /* external32: big-endian. */
    int vals[2] = {0x01020304, -2};
    double d = 1.5;
    unsigned char buf[64];
    MPI_Aint pos = 0, sz;
    MPI_Pack_external_size("external32", 2, MPI_INT, &sz);
    MPI_Pack_external("external32", vals, 2, MPI_INT, buf, sizeof buf, &pos);
    MPI_Pack_external("external32", &d, 1, MPI_DOUBLE, buf, sizeof buf, &pos);
    int back[2];
    double dback;
    MPI_Aint upos = 0;
    MPI_Unpack_external("external32", buf, pos, &upos, back, 2, MPI_INT);
    MPI_Unpack_external("external32", buf, pos, &upos, &dback, 1, MPI_DOUBLE);
    printf("rank %d: external32 size %ld bytes %02x%02x%02x%02x %02x%02x position %ld back %d %d %d\n", rank, (long)sz,
           buf[0], buf[1], buf[2], buf[3], buf[8], buf[9], (long)pos, back[0] == vals[0] && back[1] == -2, dback == 1.5,
           (long)upos == (long)pos);
    rc = MPI_Pack_external_size("native", 2, MPI_INT, &sz);
    MPI_Error_class(rc, &cls);
    printf("rank %d: external other representation refused %d\n", rank, cls == MPI_ERR_ARG);

    MPI_Finalize();
    return 0;
}
