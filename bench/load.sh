#!/usr/bin/env bash
# Background load for the benchmarks: the machines of a grid are used by their owners, so the
# figures are taken idle and under the two standard loads below, at normal priority.
#
#   bench/load.sh KIND                 runs the load until interrupted (Ctrl-C, SIGTERM)
#   bench/load.sh KIND -- CMD [ARG...] runs CMD under the load, then stops it; exits with CMD's status
#
# KIND:
#   idle   no load (so that scripts can loop over "idle cpu mixed")
#   cpu    one busy loop per core (`nproc`), nice 0
#   mixed  a fixed C source tree (generated here, the same every time: LOAD_FILES files of
#          LOAD_FUNCS functions) rebuilt with `make -j2` (LOAD_JOBS), again and again, nice 0:
#          compilers starting and ending, the disk cache, memory traffic, as a developer's
#          machine does
#
# Scripts that want the load around parts of a run source bench/lib.sh and use
# `load_start KIND` / `load_stop` (which call this script).
set -uo pipefail

usage() {
    sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

[ $# -ge 1 ] || usage
KIND=$1
shift
case $KIND in idle | cpu | mixed) ;; -h | --help) usage ;; *) echo "load.sh: unknown load '$KIND' (idle, cpu, mixed)" >&2; exit 2 ;; esac
if [ $# -gt 0 ]; then
    [ "$1" = "--" ] || usage
    shift
    [ $# -gt 0 ] || usage
fi

LOAD_FILES=${LOAD_FILES:-96}
LOAD_FUNCS=${LOAD_FUNCS:-40}
LOAD_JOBS=${LOAD_JOBS:-2}
WORKERS=()
TREE=

stop_workers() {
    local p
    for p in "${WORKERS[@]}"; do
        # Each worker leads its own process group (setsid): its compilers go with it.
        kill -TERM -- "-$p" 2>/dev/null || kill -TERM "$p" 2>/dev/null
    done
    for p in "${WORKERS[@]}"; do wait "$p" 2>/dev/null; done
    WORKERS=()
    [ -n "$TREE" ] && rm -rf "$TREE"
    TREE=
}
trap stop_workers EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# The source tree of the mixed load: deterministic (no randomness, no download), each file a
# few dozen small functions with loops the optimizer works on.
make_tree() {
    local dir=$1 f g
    mkdir -p "$dir"
    for ((f = 0; f < LOAD_FILES; f++)); do
        {
            echo "#include <stddef.h>"
            for ((g = 0; g < LOAD_FUNCS; g++)); do
                # (printf, a builtin: no process per function.)
                printf '%s\n' \
                    "static unsigned long f${f}_${g}_step(unsigned long x) { return x * 6364136223846793005UL + ${g}UL + 1442695040888963407UL; }" \
                    "unsigned long f${f}_${g}(const unsigned long *v, size_t n) {" \
                    "    unsigned long s = ${f}UL;" \
                    "    for (size_t i = 0; i < n; i++) {" \
                    "        s ^= f${f}_${g}_step(v[i] + s);" \
                    "        if ((s & 7) == $((g % 8))) s = (s << 3) | (s >> 61);" \
                    "        for (int k = 0; k < (int)(v[i] & 3); k++) s += (unsigned long)k * v[(i + k) % n];" \
                    "    }" \
                    "    return s;" \
                    "}"
            done
        } >"$dir/unit$f.c"
    done
    {
        echo "OBJS := \$(patsubst %.c,%.o,\$(wildcard unit*.c))"
        echo "all: libload.a"
        echo "libload.a: \$(OBJS)"
        printf '\tar rcs $@ $^\n'
        echo "%.o: %.c"
        printf '\t$(CC) -O2 -c -o $@ $<\n'
        echo "clean:"
        printf '\trm -f *.o libload.a\n'
    } >"$dir/Makefile"
}

start_workers() {
    local i n
    case $KIND in
        idle) ;;
        cpu)
            n=$(nproc)
            for ((i = 0; i < n; i++)); do
                setsid bash -c 'while :; do :; done' &
                WORKERS+=($!)
            done
            ;;
        mixed)
            command -v make >/dev/null && command -v cc >/dev/null \
                || { echo "load.sh: the mixed load needs make and cc (apt-get install build-essential)" >&2; exit 1; }
            TREE=$(mktemp -d "${TMPDIR:-/tmp}/p2pmpi-load-mixed.XXXXXX")
            make_tree "$TREE"
            setsid bash -c 'cd "$1" && while :; do make -s clean && make -s -j"$2" >/dev/null 2>&1; done' _ "$TREE" "$LOAD_JOBS" &
            WORKERS+=($!)
            ;;
    esac
}

start_workers
if [ $# -gt 0 ]; then
    "$@"
    rc=$?
    stop_workers
    exit $rc
fi
if [ ${#WORKERS[@]} -eq 0 ]; then
    exit 0
fi
# Until interrupted.
wait
