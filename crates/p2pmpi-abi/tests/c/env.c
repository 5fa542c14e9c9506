/* The environment family: each rank prints what the library told it, and whether the
 * library it runs on is p2pmpi's (where MPI_Init lives, and that Debian's libmpich is not
 * mapped). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <mpi.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static int mapped(const char *needle) {
    char line[4096];
    int found = 0;
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f) return -1;
    while (fgets(line, sizeof line, f))
        if (strstr(line, needle)) found = 1;
    fclose(f);
    return found;
}

int main(int argc, char **argv) {
    int flag = -1, provided = -1, level = -1, main_thread = -1, rank, size, len, v, sv;
    char name[MPI_MAX_PROCESSOR_NAME], host[256], lib[MPI_MAX_LIBRARY_VERSION_STRING];
    Dl_info info;
    double t0, t1;

    MPI_Initialized(&flag);
    printf("before: initialized %d\n", flag);
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Initialized(&flag);
    MPI_Query_thread(&level);
    MPI_Is_thread_main(&main_thread);
    printf("rank %d: size %d initialized %d provided %d query %d main %d\n", rank, size, flag,
           provided == MPI_THREAD_MULTIPLE, level == provided, main_thread);

    MPI_Get_processor_name(name, &len);
    gethostname(host, sizeof host);
    printf("rank %d: processor name matches %d length %d\n", rank, strcmp(name, host) == 0,
           len == (int)strlen(host));
    MPI_Get_version(&v, &sv);
    MPI_Get_library_version(lib, &len);
    printf("rank %d: version %d.%d library p2pmpi %d length %d\n", rank, v, sv, strstr(lib, "p2pmpi") != NULL,
           len == (int)strlen(lib));

    t0 = MPI_Wtime();
    usleep(20000);
    t1 = MPI_Wtime();
    printf("rank %d: wtime advances %d tick %d\n", rank, t1 - t0 >= 0.019 && t1 - t0 < 5.0,
           MPI_Wtick() > 0.0 && MPI_Wtick() <= 1e-3);

    if (dladdr((void *)&MPI_Init, &info) && info.dli_fname)
        printf("rank %d: MPI_Init from %s\n", rank, info.dli_fname);
    printf("rank %d: debian libmpich mapped %d\n", rank, mapped("x86_64-linux-gnu/libmpich"));

    MPI_Finalized(&flag);
    printf("rank %d: finalized before %d\n", rank, flag);
    MPI_Finalize();
    MPI_Finalized(&flag);
    printf("rank %d: finalized after %d\n", rank, flag);
    return 0;
}
