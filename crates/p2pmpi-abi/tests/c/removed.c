/* MPI-1's datatype functions that MPI-3 removed (not in MPICH 4's header; its library exports
 * them): a program built against an older header calls them. Prints "removed: ..." lines. */
#include <mpi.h>
#include <stdio.h>

int MPI_Type_extent(MPI_Datatype datatype, MPI_Aint *extent);
int MPI_Type_lb(MPI_Datatype datatype, MPI_Aint *displacement);
int MPI_Type_ub(MPI_Datatype datatype, MPI_Aint *displacement);

int main(int argc, char **argv) {
    MPI_Datatype t;
    MPI_Aint e = -1, lb = -1, ub = -1;
    int cls = -1;
    MPI_Init(&argc, &argv);
    int one = 1;
    MPI_Aint at = 8;
    MPI_Type_create_hindexed(1, &one, &at, MPI_INT, &t);
    MPI_Type_commit(&t);
    MPI_Type_extent(t, &e);
    MPI_Type_lb(t, &lb);
    MPI_Type_ub(t, &ub);
    printf("removed: extent %ld lb %ld ub %ld\n", (long)e, (long)lb, (long)ub);
    MPI_Type_extent(MPI_DOUBLE, &e);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Error_class(MPI_Type_extent(MPI_DATATYPE_NULL, &lb), &cls);
    printf("removed: double %ld null %d\n", (long)e, cls == MPI_ERR_TYPE);
    MPI_Type_free(&t);
    MPI_Finalize();
    return 0;
}
