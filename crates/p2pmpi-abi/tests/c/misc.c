/* MPI_Alloc_mem, buffered sends, names, MPI_Dims_create, MPI_Reduce_local, MPI_Get_elements.
 * Run on 2 processes. */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
    int rank, len, n, dims[3] = {0, 0, 0}, dims2[2] = {0, 3}, size;
    char name[MPI_MAX_OBJECT_NAME];
    double *mem;
    void *detached;
    MPI_Comm dup;
    MPI_Status st;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);

    MPI_Alloc_mem(4 * sizeof(double), MPI_INFO_NULL, &mem);
    mem[3] = 2.5;
    printf("rank %d: alloc %.1f\n", rank, mem[3]);
    MPI_Free_mem(mem);

    if (rank == 0) {
        static char room[1 << 16];
        int v[4] = {5, 6, 7, 8};
        MPI_Buffer_attach(room, sizeof room);
        MPI_Bsend(v, 4, MPI_INT, 1, 3, MPI_COMM_WORLD);
        MPI_Buffer_detach(&detached, &size);
        printf("rank 0: detached same %d size %d\n", detached == (void *)room, size);
    } else {
        short in[8];
        MPI_Recv(in, 8, MPI_SHORT, 0, 3, MPI_COMM_WORLD, &st);
        MPI_Get_elements(&st, MPI_SHORT, &n);
        printf("rank 1: bsend elements %d first %d\n", n, in[0]);
    }

    MPI_Comm_get_name(MPI_COMM_WORLD, name, &len);
    printf("rank %d: world named %s length %d\n", rank, name, len);
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    MPI_Comm_set_name(dup, "my duplicate");
    MPI_Comm_get_name(dup, name, &len);
    printf("rank %d: dup named %s\n", rank, name);
    MPI_Comm_free(&dup);

    MPI_Dims_create(12, 3, dims);
    MPI_Dims_create(12, 2, dims2);
    printf("rank %d: dims %d %d %d and %d %d\n", rank, dims[0], dims[1], dims[2], dims2[0], dims2[1]);

    {
        long a[3] = {1, 5, 9}, b[3] = {4, 4, 4};
        MPI_Reduce_local(a, b, 3, MPI_LONG, MPI_MAX);
        printf("rank %d: reduce_local %ld %ld %ld\n", rank, b[0], b[1], b[2]);
    }
    /* Packing an int and three doubles, sent as MPI_PACKED, unpacked at rank 1. */
    {
        char buf[64];
        int pos = 0, psize, v = 41, back = 0;
        double d[3] = {0.5, 1.5, 2.5}, e[3] = {0, 0, 0};
        MPI_Pack_size(3, MPI_DOUBLE, MPI_COMM_WORLD, &psize);
        if (rank == 0) {
            MPI_Pack(&v, 1, MPI_INT, buf, sizeof buf, &pos, MPI_COMM_WORLD);
            MPI_Pack(d, 3, MPI_DOUBLE, buf, sizeof buf, &pos, MPI_COMM_WORLD);
            MPI_Send(buf, pos, MPI_PACKED, 1, 6, MPI_COMM_WORLD);
            printf("rank 0: packed %d pack_size %d\n", pos, psize);
        } else {
            MPI_Recv(buf, sizeof buf, MPI_PACKED, 0, 6, MPI_COMM_WORLD, &st);
            MPI_Get_count(&st, MPI_PACKED, &n);
            MPI_Unpack(buf, n, &pos, &back, 1, MPI_INT, MPI_COMM_WORLD);
            MPI_Unpack(buf, n, &pos, e, 3, MPI_DOUBLE, MPI_COMM_WORLD);
            printf("rank 1: unpacked %d %.1f %.1f position %d\n", back, e[0], e[2], pos);
        }
    }
    /* Ranges of ranks: 0..1 step 1, and 1 alone excluded. */
    {
        MPI_Group wg, inc, exc;
        int ranges[1][3] = {{0, 1, 1}}, one[1][3] = {{1, 1, 1}}, a, b;
        MPI_Comm_group(MPI_COMM_WORLD, &wg);
        MPI_Group_range_incl(wg, 1, ranges, &inc);
        MPI_Group_range_excl(wg, 1, one, &exc);
        MPI_Group_size(inc, &a);
        MPI_Group_size(exc, &b);
        printf("rank %d: range incl %d excl %d\n", rank, a, b);
        MPI_Group_free(&inc);
        MPI_Group_free(&exc);
        MPI_Group_free(&wg);
    }
    /* Info objects. */
    {
        MPI_Info info;
        char v[16];
        int flag, nkeys, rc;
        MPI_Info_create(&info);
        MPI_Info_set(info, "host", "a");
        MPI_Info_set(info, "wdir", "/tmp");
        MPI_Info_get(info, "wdir", 15, v, &flag);
        MPI_Info_get_nkeys(info, &nkeys);
        {
            MPI_Info used;
            int k;
            MPI_Comm_set_info(MPI_COMM_WORLD, info);
            MPI_Comm_get_info(MPI_COMM_WORLD, &used);
            MPI_Info_get_nkeys(used, &k);
            MPI_Info_free(&used);
            nkeys += 10 * k;
        }
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
        rc = MPI_Info_delete(info, "none");
        MPI_Info_free(&info);
        printf("rank %d: info %d %s keys %d nokey %d null %d\n", rank, flag, v, nkeys, rc == MPI_ERR_INFO_NOKEY,
               info == MPI_INFO_NULL);
    }
    MPI_Finalize();
    return 0;
}
