/* Neighbourhood collectives on Cartesian (periodic and not), graph and distributed-graph
 * communicators: MPI_Neighbor_allgather(v), MPI_Neighbor_alltoall(v,w) (MPI_BOTTOM too), their
 * nonblocking and persistent forms, a _c form; and MPI_Ialltoallw, MPI_Alltoallw_init (in
 * place too), MPI_Ialltoall in place, MPI_Cart_map. Run on 4 processes; prints one line per check. */
#include <mpi.h>
#include <stdio.h>

static int rank, size;

static void say(const char *what, int ok) { printf("rank %d: %s %s\n", rank, what, ok ? "ok" : "bad"); }

int main(int argc, char **argv) {
    MPI_Comm ring, line, graph, dist;
    MPI_Request q;
    int i, k, ok, dims[1], periods[1], send[8], recv[8], counts[4], displs[4];

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int left = (rank + size - 1) % size, right = (rank + 1) % size;

    /* A periodic ring: the neighbours are left (-1) then right (+1). */
    dims[0] = size;
    periods[0] = 1;
    MPI_Cart_create(MPI_COMM_WORLD, 1, dims, periods, 0, &ring);
    send[0] = rank;
    for (i = 0; i < 8; i++) recv[i] = -1;
    MPI_Neighbor_allgather(send, 1, MPI_INT, recv, 1, MPI_INT, ring);
    say("cart allgather", recv[0] == left && recv[1] == right && recv[2] == -1);
    /* Block k goes to neighbour k: from the left comes its block for +1, from the right its
     * block for -1. */
    send[0] = 10 * rank;
    send[1] = 10 * rank + 1;
    MPI_Neighbor_alltoall(send, 1, MPI_INT, recv, 1, MPI_INT, ring);
    say("cart alltoall", recv[0] == 10 * left + 1 && recv[1] == 10 * right);
    for (i = 0; i < 8; i++) recv[i] = -1;
    MPI_Ineighbor_alltoall(send, 1, MPI_INT, recv, 1, MPI_INT, ring, &q);
    MPI_Wait(&q, MPI_STATUS_IGNORE);
    say("cart ialltoall", recv[0] == 10 * left + 1 && recv[1] == 10 * right && q == MPI_REQUEST_NULL);

    /* Not periodic: the ends have MPI_PROC_NULL, whose blocks stay as they were. */
    periods[0] = 0;
    MPI_Cart_create(MPI_COMM_WORLD, 1, dims, periods, 0, &line);
    for (i = 0; i < 8; i++) recv[i] = -1;
    send[0] = rank;
    MPI_Neighbor_allgather_c(send, 1, MPI_INT, recv, 1, MPI_INT, line);
    say("line allgather", recv[0] == (rank == 0 ? -1 : rank - 1) && recv[1] == (rank == size - 1 ? -1 : rank + 1));

    /* A graph: every node linked to its two ring neighbours; allgatherv with gaps. */
    int index[16], edges[32];
    for (i = 0; i < size; i++) {
        index[i] = 2 * (i + 1);
        edges[2 * i] = (i + size - 1) % size;
        edges[2 * i + 1] = (i + 1) % size;
    }
    MPI_Graph_create(MPI_COMM_WORLD, size, index, edges, 0, &graph);
    for (i = 0; i < 8; i++) recv[i] = -1;
    send[0] = rank;
    send[1] = rank + 100;
    displs[0] = 4;
    displs[1] = 0;
    counts[0] = 2;
    counts[1] = 2;
    for (i = 0; i < 8; i++) recv[i] = -1;
    MPI_Neighbor_allgatherv(send, 2, MPI_INT, recv, counts, displs, MPI_INT, graph);
    say("graph allgatherv gaps", recv[4] == left && recv[5] == left + 100 && recv[0] == right &&
                                     recv[1] == right + 100 && recv[2] == -1 && recv[6] == -1);

    /* A distributed graph: from rank-1 and rank-2, to rank+1 and rank+2. */
    int srcs[2] = {(rank + size - 1) % size, (rank + size - 2) % size};
    int dsts[2] = {(rank + 1) % size, (rank + 2) % size};
    MPI_Dist_graph_create_adjacent(MPI_COMM_WORLD, 2, srcs, MPI_UNWEIGHTED, 2, dsts, MPI_UNWEIGHTED, MPI_INFO_NULL, 0,
                                   &dist);
    /* alltoallv: to rank+1 one int (100r+1), to rank+2 two ints (100r+2, 100r+3). */
    int sc[2] = {1, 2}, sd[2] = {0, 1}, rc[2] = {1, 2}, rd[2] = {3, 0};
    send[0] = 100 * rank + 1;
    send[1] = 100 * rank + 2;
    send[2] = 100 * rank + 3;
    for (i = 0; i < 8; i++) recv[i] = -1;
    MPI_Neighbor_alltoallv(send, sc, sd, MPI_INT, recv, rc, rd, MPI_INT, dist);
    int s1 = srcs[0], s2 = srcs[1];
    say("dist alltoallv", recv[3] == 100 * s1 + 1 && recv[0] == 100 * s2 + 2 && recv[1] == 100 * s2 + 3 &&
                              recv[2] == -1);
    /* alltoallw: an int to rank+1, a double to rank+2, at byte displacements. */
    struct {
        int i;
        double d;
    } out, in;
    out.i = rank;
    out.d = rank + 0.5;
    in.i = -1;
    in.d = -1;
    int wc[2] = {1, 1}, wt[2] = {MPI_INT, MPI_DOUBLE};
    MPI_Aint wd[2] = {(char *)&out.i - (char *)&out, (char *)&out.d - (char *)&out};
    MPI_Neighbor_alltoallw(&out, wc, wd, wt, &in, wc, wd, wt, dist);
    say("dist alltoallw", in.i == s1 && in.d == s2 + 0.5);
    /* The same with MPI_BOTTOM and absolute addresses, nonblocking. */
    MPI_Aint sa[2], ra[2];
    MPI_Get_address(&out.i, &sa[0]);
    MPI_Get_address(&out.d, &sa[1]);
    MPI_Get_address(&in.i, &ra[0]);
    MPI_Get_address(&in.d, &ra[1]);
    out.i = rank + 7;
    in.i = -1;
    in.d = -1;
    MPI_Ineighbor_alltoallw(MPI_BOTTOM, wc, sa, wt, MPI_BOTTOM, wc, ra, wt, dist, &q);
    MPI_Wait(&q, MPI_STATUS_IGNORE);
    say("dist ialltoallw bottom", in.i == s1 + 7 && in.d == s2 + 0.5);

    /* Persistent: started twice with new data; the count arrays may change after the call. */
    int pc[2] = {1, 1}, pd[2] = {1, 0};
    MPI_Neighbor_allgatherv_init(send, 1, MPI_INT, recv, pc, pd, MPI_INT, dist, MPI_INFO_NULL, &q);
    pc[0] = pc[1] = pd[0] = pd[1] = -5;
    ok = 1;
    for (k = 1; k <= 2; k++) {
        send[0] = 1000 * k + rank;
        recv[0] = recv[1] = -1;
        MPI_Start(&q);
        MPI_Wait(&q, MPI_STATUS_IGNORE);
        ok &= recv[1] == 1000 * k + s1 && recv[0] == 1000 * k + s2;
    }
    MPI_Request_free(&q);
    say("dist allgatherv persistent", ok);

    /* MPI_Ialltoallw and MPI_Alltoallw_init over the world, in place too. */
    int wcounts[16], wdispls[16], wtypes[16], a[16], b[16];
    for (i = 0; i < size; i++) {
        wcounts[i] = 1;
        wdispls[i] = i * (int)sizeof(int);
        wtypes[i] = MPI_INT;
        a[i] = 100 * rank + i;
        b[i] = -1;
    }
    MPI_Ialltoallw(a, wcounts, wdispls, wtypes, b, wcounts, wdispls, wtypes, MPI_COMM_WORLD, &q);
    MPI_Wait(&q, MPI_STATUS_IGNORE);
    ok = 1;
    for (i = 0; i < size; i++) ok &= b[i] == 100 * i + rank;
    say("ialltoallw", ok);
    MPI_Ialltoallw(MPI_IN_PLACE, NULL, NULL, NULL, a, wcounts, wdispls, wtypes, MPI_COMM_WORLD, &q);
    MPI_Wait(&q, MPI_STATUS_IGNORE);
    ok = 1;
    for (i = 0; i < size; i++) ok &= a[i] == 100 * i + rank;
    say("ialltoallw in place", ok);
    MPI_Alltoallw_init(a, wcounts, wdispls, wtypes, b, wcounts, wdispls, wtypes, MPI_COMM_WORLD, MPI_INFO_NULL, &q);
    ok = 1;
    for (k = 1; k <= 2; k++) {
        for (i = 0; i < size; i++) {
            a[i] = 1000 * k + 10 * rank + i;
            b[i] = -1;
        }
        MPI_Start(&q);
        MPI_Wait(&q, MPI_STATUS_IGNORE);
        for (i = 0; i < size; i++) ok &= b[i] == 1000 * k + 10 * i + rank;
    }
    MPI_Request_free(&q);
    say("alltoallw persistent", ok);
    for (i = 0; i < size; i++) a[i] = 100 * rank + i;
    MPI_Ialltoall(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, a, 1, MPI_INT, MPI_COMM_WORLD, &q);
    MPI_Wait(&q, MPI_STATUS_IGNORE);
    ok = 1;
    for (i = 0; i < size; i++) ok &= a[i] == 100 * i + rank;
    say("ialltoall in place", ok);

    /* MPI_Cart_map: ranks kept, the last left out of a grid one smaller. */
    int mapped;
    dims[0] = size - 1;
    MPI_Cart_map(MPI_COMM_WORLD, 1, dims, periods, &mapped);
    say("cart map", mapped == (rank < size - 1 ? rank : MPI_UNDEFINED));

    /* Without a topology: MPI_ERR_TOPOLOGY. */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int err = MPI_Neighbor_allgather(send, 1, MPI_INT, recv, 1, MPI_INT, MPI_COMM_WORLD), cls;
    MPI_Error_class(err, &cls);
    say("no topology refused", cls == MPI_ERR_TOPOLOGY);

    MPI_Comm_free(&ring);
    MPI_Comm_free(&line);
    MPI_Comm_free(&graph);
    MPI_Comm_free(&dist);
    MPI_Finalize();
    return 0;
}
