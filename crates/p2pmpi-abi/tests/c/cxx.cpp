// A C++ program built by `mpicxx.mpich` (linked against Debian's libmpichcxx.so.12, which
// calls MPII_Op_set_cxx, MPII_Errhandler_set_cxx and MPII_Keyval_set_proxy): the C API from
// C++, then MPICH's C++ bindings (a C++ reduction operation, attribute callbacks, an error
// handler, exceptions). Each line prints values computed here; run on 2 processes or more.
#include <mpi.h>
#include <cstdio>
#include <cstring>

static int copies = 0, deletes = 0, handled = 0, handled_code = -1;

static void cxx_max_abs(const void *in, void *inout, int len, const MPI::Datatype &dt) {
    const int *a = static_cast<const int *>(in);
    int *b = static_cast<int *>(inout);
    if (dt != MPI::INT) return;
    for (int i = 0; i < len; i++) {
        int x = a[i] < 0 ? -a[i] : a[i], y = b[i] < 0 ? -b[i] : b[i];
        b[i] = x > y ? x : y;
    }
}

static int cxx_copy(const MPI::Comm &, int, void *extra, void *in, void *out, bool &flag) {
    copies += *static_cast<int *>(extra);
    *static_cast<void **>(out) = in;
    flag = true;
    return MPI::SUCCESS;
}

static int cxx_delete(MPI::Comm &, int, void *, void *extra) {
    deletes += *static_cast<int *>(extra);
    return MPI::SUCCESS;
}

static void cxx_handler(MPI::Comm &comm, int *code, ...) {
    handled++;
    handled_code = *code;
    (void)comm;
}

int main(int argc, char **argv) {
    // The C API from C++.
    MPI_Init(&argc, &argv);
    int rank, size, x, sum = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    x = rank + 1;
    MPI_Allreduce(&x, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    std::printf("rank %d: c api sum %d\n", rank, sum);

    // The C++ bindings.
    int r = MPI::COMM_WORLD.Get_rank(), n = MPI::COMM_WORLD.Get_size();
    std::printf("rank %d: cxx rank %d size %d\n", rank, r, n);
    int v = r % 2 ? -(r + 10) : r + 1, m = 0;
    MPI::Op op;
    op.Init(cxx_max_abs, true);
    MPI::COMM_WORLD.Allreduce(&v, &m, 1, MPI::INT, op);
    op.Free();
    std::printf("rank %d: cxx op %d\n", rank, m);

    int one = 1;
    int key = MPI::Comm::Create_keyval(cxx_copy, cxx_delete, &one);
    MPI::COMM_WORLD.Set_attr(key, &one);
    MPI::Intracomm d = MPI::COMM_WORLD.Dup();
    void *got = 0;
    bool found = d.Get_attr(key, &got);
    d.Free();
    std::printf("rank %d: cxx attr copies %d deletes %d found %d same %d\n", rank, copies, deletes, found,
                got == &one);
    MPI::COMM_WORLD.Delete_attr(key);
    std::printf("rank %d: cxx attr deletes after delete %d\n", rank, deletes);
    MPI::Comm::Free_keyval(key);

    MPI::Errhandler eh = MPI::Comm::Create_errhandler(cxx_handler);
    MPI::COMM_WORLD.Set_errhandler(eh);
    MPI::COMM_WORLD.Call_errhandler(MPI::ERR_OTHER);
    std::printf("rank %d: cxx handler calls %d code %d\n", rank, handled, handled_code);

    MPI::COMM_WORLD.Set_errhandler(MPI::ERRORS_THROW_EXCEPTIONS);
    int caught = -1;
    try {
        MPI::COMM_WORLD.Send(&x, 1, MPI::INT, size + 3, 0);
    } catch (MPI::Exception &e) {
        caught = e.Get_error_class();
    }
    std::printf("rank %d: cxx exception class %d\n", rank, caught);
    MPI::COMM_WORLD.Set_errhandler(MPI::ERRORS_ARE_FATAL);

    MPI::COMM_WORLD.Barrier();
    MPI::Finalize();
    return 0;
}
