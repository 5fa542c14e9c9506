/* Graph topologies (a ring as a graph, on 4 processes; on 3 nodes the fourth gets
 * MPI_COMM_NULL) and distributed graphs (adjacent with weights; general from rank 0's
 * edges, unweighted): the topology, the neighbours and a message along the ring. Run on 4
 * processes. */
#include <mpi.h>
#include <stdio.h>

int main(int argc, char **argv) {
    int rank, n, t = -1, nn = -1, ne = -1, cnt = -1, nb[8], i, ok, bad = 0;
    int index[4] = {2, 4, 6, 8}, edges[8] = {1, 3, 2, 0, 3, 1, 0, 2}, gi[4], ge[8];
    MPI_Comm g, g3, d, dup;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);

    MPI_Graph_create(MPI_COMM_WORLD, 4, index, edges, 0, &g);
    MPI_Topo_test(g, &t);
    MPI_Graphdims_get(g, &nn, &ne);
    MPI_Graph_neighbors_count(g, rank, &cnt);
    MPI_Graph_neighbors(g, rank, 8, nb);
    MPI_Graph_get(g, 4, 8, gi, ge);
    ok = t == MPI_GRAPH && nn == 4 && ne == 8 && cnt == 2 && nb[0] == (rank + 1) % 4 && nb[1] == (rank + 3) % 4;
    for (i = 0; i < 4; i++) ok &= gi[i] == index[i];
    for (i = 0; i < 8; i++) ok &= ge[i] == edges[i];
    MPI_Comm_dup(g, &dup);
    MPI_Topo_test(dup, &t);
    ok &= t == MPI_GRAPH;
    MPI_Comm_free(&dup);
    {
        int x = rank, y = -1;
        MPI_Sendrecv(&x, 1, MPI_INT, nb[0], 0, &y, 1, MPI_INT, nb[1], 0, g, MPI_STATUS_IGNORE);
        ok &= y == (rank + 3) % 4;
    }
    printf("rank %d: graph %d\n", rank, ok);
    bad += !ok;
    MPI_Comm_free(&g);

    {
        int idx3[3] = {1, 2, 3}, e3[3] = {1, 2, 0}, sz = -1;
        MPI_Graph_create(MPI_COMM_WORLD, 3, idx3, e3, 0, &g3);
        if (g3 != MPI_COMM_NULL) MPI_Comm_size(g3, &sz);
        ok = rank < 3 ? sz == 3 : g3 == MPI_COMM_NULL;
        printf("rank %d: graph of 3 %d\n", rank, ok);
        bad += !ok;
        if (g3 != MPI_COMM_NULL) MPI_Comm_free(&g3);
    }

    /* Adjacent: in from the left, out to the right, weights 10*rank. */
    {
        int src = (rank + n - 1) % n, dst = (rank + 1) % n, sw = 10 * rank, dw = 10 * rank + 1;
        int in = -1, out = -1, weighted = -1, s = -1, sww = -1, dd = -1, dww = -1;
        MPI_Dist_graph_create_adjacent(MPI_COMM_WORLD, 1, &src, &sw, 1, &dst, &dw, MPI_INFO_NULL, 0, &d);
        MPI_Topo_test(d, &t);
        MPI_Dist_graph_neighbors_count(d, &in, &out, &weighted);
        MPI_Dist_graph_neighbors(d, 1, &s, &sww, 1, &dd, &dww);
        ok = t == MPI_DIST_GRAPH && in == 1 && out == 1 && weighted == 1 && s == src && sww == sw && dd == dst &&
             dww == dw;
        {
            int x = rank, y = -1;
            MPI_Sendrecv(&x, 1, MPI_INT, dd, 0, &y, 1, MPI_INT, s, 0, d, MPI_STATUS_IGNORE);
            ok &= y == src;
        }
        printf("rank %d: dist graph adjacent %d\n", rank, ok);
        bad += !ok;
        MPI_Comm_free(&d);
    }

    /* General: rank 0 gives every edge i -> i+1, unweighted. */
    {
        int srcs[64], degs[64], dsts[64], k = 0, in = -1, out = -1, weighted = -1, s = -1, dd = -1;
        if (rank == 0)
            for (i = 0; i < n; i++) {
                srcs[k] = i;
                degs[k] = 1;
                dsts[k] = (i + 1) % n;
                k++;
            }
        MPI_Dist_graph_create(MPI_COMM_WORLD, k, srcs, degs, dsts, MPI_UNWEIGHTED, MPI_INFO_NULL, 0, &d);
        MPI_Dist_graph_neighbors_count(d, &in, &out, &weighted);
        MPI_Dist_graph_neighbors(d, 1, &s, MPI_UNWEIGHTED, 1, &dd, MPI_UNWEIGHTED);
        ok = in == 1 && out == 1 && weighted == 0 && s == (rank + n - 1) % n && dd == (rank + 1) % n;
        printf("rank %d: dist graph %d\n", rank, ok);
        bad += !ok;
        MPI_Comm_free(&d);
    }
    printf("rank %d: graph bad %d\n", rank, bad);
    MPI_Finalize();
    return 0;
}
