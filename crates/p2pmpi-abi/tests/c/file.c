/* Files: opened on 2 processes with MPI_MODE_CREATE | MPI_MODE_RDWR | MPI_MODE_DELETE_ON_CLOSE,
 * the access mode, error handler and Fortran number read back, closed (and so deleted); a missing file is
 * refused with MPI_ERR_NO_SUCH_FILE (files' default handler returns). Run on 2 processes. */
#include <mpi.h>
#include <stdio.h>
#include <unistd.h>

int main(int argc, char **argv) {
    int rank, amode = -1, rc, cls;
    MPI_File f, g = MPI_FILE_NULL;
    MPI_Errhandler eh;
    char name[64];

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    snprintf(name, sizeof name, "/tmp/p2pmpi-file-test-%d", argc > 1 ? 0 : (int)getppid());
    MPI_File_open(MPI_COMM_WORLD, name, MPI_MODE_CREATE | MPI_MODE_RDWR | MPI_MODE_DELETE_ON_CLOSE, MPI_INFO_NULL,
                  &f);
    MPI_File_get_amode(f, &amode);
    MPI_File_get_errhandler(f, &eh);
    printf("rank %d: amode %d errors return %d\n", rank, amode, eh == MPI_ERRORS_RETURN);
    printf("rank %d: fortran %d back %d null %d\n", rank, MPI_File_c2f(f) > 0, MPI_File_f2c(MPI_File_c2f(f)) == f,
           MPI_File_c2f(MPI_FILE_NULL));
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_File_close(&f);
    MPI_Barrier(MPI_COMM_WORLD);
    printf("rank %d: closed null %d deleted %d\n", rank, f == MPI_FILE_NULL, access(name, F_OK) != 0);
    rc = MPI_File_open(MPI_COMM_WORLD, "/nonexistent/p2pmpi", MPI_MODE_RDONLY, MPI_INFO_NULL, &g);
    MPI_Error_class(rc, &cls);
    printf("rank %d: missing %d\n", rank, cls == MPI_ERR_NO_SUCH_FILE);
    MPI_Finalize();
    return 0;
}
