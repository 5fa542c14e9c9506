/* More of point-to-point: Testall, Testany, Request_free, Issend, Irsend, the large-count
 * forms, Get_count_c and the status conversions. Run on 2 processes. */
#include <mpi.h>
#include <stdio.h>

int main(int argc, char **argv) {
    int rank, i, flag, idx, polls;
    MPI_Status st, sts[3];
    MPI_Request rs[3];

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 0) {
        int a = 11, b = 22, c = 33;
        MPI_Request fr;
        MPI_Issend(&a, 1, MPI_INT, 1, 1, MPI_COMM_WORLD, &rs[0]);
        MPI_Irsend(&b, 1, MPI_INT, 1, 2, MPI_COMM_WORLD, &rs[1]);
        MPI_Isend_c(&c, (MPI_Count)1, MPI_INT, 1, 3, MPI_COMM_WORLD, &rs[2]);
        MPI_Waitall(3, rs, MPI_STATUSES_IGNORE);
        MPI_Isend(&c, 1, MPI_INT, 1, 4, MPI_COMM_WORLD, &fr);
        MPI_Request_free(&fr);
        printf("freed null %d\n", fr == MPI_REQUEST_NULL);
        MPI_Send_c(&a, (MPI_Count)1, MPI_INT, 1, 5, MPI_COMM_WORLD);
    } else {
        int v[3] = {0, 0, 0}, w = 0, x = 0;
        MPI_Count n = -1;
        MPI_Fint f[MPI_F_STATUS_SIZE];
        MPI_Status back;
        for (i = 0; i < 3; i++) MPI_Irecv(&v[i], 1, MPI_INT, 0, i + 1, MPI_COMM_WORLD, &rs[i]);
        polls = 0;
        flag = 0;
        while (!flag) {
            MPI_Testall(3, rs, &flag, sts);
            polls++;
        }
        printf("testall: %d %d %d tags %d %d %d nulls %d\n", v[0], v[1], v[2], sts[0].MPI_TAG, sts[1].MPI_TAG,
               sts[2].MPI_TAG, rs[0] == MPI_REQUEST_NULL && rs[2] == MPI_REQUEST_NULL);
        MPI_Irecv(&w, 1, MPI_INT, 0, 4, MPI_COMM_WORLD, &rs[1]);
        rs[0] = MPI_REQUEST_NULL;
        flag = 0;
        while (!flag) MPI_Testany(2, rs, &idx, &flag, &st);
        printf("testany: index %d value %d tag %d\n", idx, w, st.MPI_TAG);
        MPI_Testany(2, rs, &idx, &flag, &st);
        printf("testany none: flag %d undefined %d\n", flag, idx == MPI_UNDEFINED);
        MPI_Recv_c(&x, (MPI_Count)1, MPI_INT, 0, 5, MPI_COMM_WORLD, &st);
        MPI_Get_count_c(&st, MPI_INT, &n);
        MPI_Status_c2f(&st, f);
        MPI_Status_f2c(f, &back);
        printf("large: %d count %ld fortran source %d tag %d back %d\n", x, (long)n, (int)f[MPI_F_SOURCE],
               (int)f[MPI_F_TAG], back.MPI_TAG);
    }
    /* Matched probes: rank 0 sends 3 doubles; rank 1 polls with MPI_Improbe, sizes the
     * message, receives it with MPI_Mrecv; then one with MPI_Mprobe. */
    if (rank == 0) {
        double out[3] = {1.5, 2.5, 3.5};
        MPI_Message m;
        MPI_Send(out, 3, MPI_DOUBLE, 1, 7, MPI_COMM_WORLD);
        MPI_Send(out, 2, MPI_DOUBLE, 1, 8, MPI_COMM_WORLD);
        {
            MPI_Request r;
            double two[2] = {6.5, 7.5};
            MPI_Ibsend(two, 2, MPI_DOUBLE, 1, 11, MPI_COMM_WORLD, &r);
            MPI_Wait(&r, MPI_STATUS_IGNORE);
        }
        MPI_Mprobe(MPI_PROC_NULL, 0, MPI_COMM_WORLD, &m, &st);
        printf("mprobe null: no proc %d source %d\n", m == MPI_MESSAGE_NO_PROC, st.MPI_SOURCE);
        MPI_Mrecv(NULL, 0, MPI_DOUBLE, &m, &st);
        printf("mrecv null: message null %d source %d\n", m == MPI_MESSAGE_NULL, st.MPI_SOURCE);
    } else {
        double in[8];
        int n;
        MPI_Message m;
        flag = 0;
        while (!flag) MPI_Improbe(MPI_ANY_SOURCE, 7, MPI_COMM_WORLD, &flag, &m, &st);
        MPI_Get_count(&st, MPI_DOUBLE, &n);
        MPI_Mrecv(in, n, MPI_DOUBLE, &m, &st);
        printf("improbe: count %d sum %.1f tag %d null %d\n", n, in[0] + in[1] + in[2], st.MPI_TAG, m == MPI_MESSAGE_NULL);
        MPI_Mprobe(0, MPI_ANY_TAG, MPI_COMM_WORLD, &m, &st);
        MPI_Get_count(&st, MPI_DOUBLE, &n);
        MPI_Mrecv(in, n, MPI_DOUBLE, &m, MPI_STATUS_IGNORE);
        printf("mprobe: count %d tag %d last %.1f\n", n, st.MPI_TAG, in[n - 1]);
        {
            MPI_Request r;
            MPI_Mprobe(0, 11, MPI_COMM_WORLD, &m, &st);
            MPI_Imrecv(in, 2, MPI_DOUBLE, &m, &r);
            MPI_Wait(&r, &st);
            MPI_Get_count(&st, MPI_DOUBLE, &n);
            printf("imrecv: count %d sum %.1f null %d\n", n, in[0] + in[1], m == MPI_MESSAGE_NULL);
        }
    }
    /* Zero elements at null addresses, in point-to-point and collectives. */
    {
        int zc = -1, zs[2] = {0, 0}, zd[2] = {0, 0};
        if (rank == 0) {
            MPI_Send(NULL, 0, MPI_INT, 1, 13, MPI_COMM_WORLD);
            zc = 0;
        } else {
            MPI_Recv(NULL, 0, MPI_INT, 0, 13, MPI_COMM_WORLD, &st);
            MPI_Get_count(&st, MPI_INT, &zc);
        }
        MPI_Allreduce(NULL, NULL, 0, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        MPI_Bcast(NULL, 0, MPI_INT, 0, MPI_COMM_WORLD);
        MPI_Reduce_scatter_block(NULL, NULL, 0, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        MPI_Allgatherv(NULL, 0, MPI_INT, NULL, zs, zd, MPI_INT, MPI_COMM_WORLD);
        printf("zero %d: count %d\n", rank, zc);
    }
    MPI_Finalize();
    return 0;
}
