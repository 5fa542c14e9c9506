/* A program whose MPI calls are all in its library (in_lib.c): it needs no MPI library itself. */
int in_lib_run(int *argc, char ***argv);

int main(int argc, char **argv) {
    return in_lib_run(&argc, &argv);
}
