/* Sessions: the process sets, their sizes, a communicator made from mpi://WORLD's group.
 * Run on 2 processes. */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
    MPI_Session s;
    MPI_Info info;
    MPI_Group g;
    MPI_Comm c;
    int rank, n, len = 0, flag, gsize, csize, sum = 0, one = 1, rc;
    char name[64], value[16];

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Session_init(MPI_INFO_NULL, MPI_ERRORS_RETURN, &s);
    MPI_Session_get_num_psets(s, MPI_INFO_NULL, &n);
    MPI_Session_get_nth_pset(s, MPI_INFO_NULL, 0, &len, NULL);
    MPI_Session_get_nth_pset(s, MPI_INFO_NULL, 0, &len, name);
    printf("rank %d: psets %d first %s len %d\n", rank, n, name, len);
    MPI_Session_get_pset_info(s, "mpi://WORLD", &info);
    MPI_Info_get(info, "mpi_size", sizeof value, value, &flag);
    printf("rank %d: world size %s\n", rank, flag ? value : "-");
    MPI_Info_free(&info);
    MPI_Group_from_session_pset(s, "mpi://WORLD", &g);
    MPI_Group_size(g, &gsize);
    MPI_Comm_create_from_group(g, "tag", MPI_INFO_NULL, MPI_ERRORS_RETURN, &c);
    MPI_Comm_size(c, &csize);
    MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, c);
    printf("rank %d: group %d comm %d sum %d\n", rank, gsize, csize, sum);
    MPI_Comm_free(&c);
    MPI_Group_free(&g);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    rc = MPI_Session_get_pset_info(s, "nowhere", &info);
    MPI_Error_class(rc, &rc);
    printf("rank %d: unknown pset class %d\n", rank, rc);
    MPI_Session_finalize(&s);
    printf("rank %d: finalized %d\n", rank, s == MPI_SESSION_NULL);
    MPI_Finalize();
    return 0;
}
