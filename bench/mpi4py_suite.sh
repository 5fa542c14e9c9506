#!/bin/bash
# mpi4py's own test suite (pinned mpi4py==4.1.2) on p2pmpi's MPICH-ABI library and on Debian's
# MPICH 4.0.2, the same command lines, at -n 1, 2 and 3 (issue 37, item 4).
#
#   bench/mpi4py_suite.sh [N...]          (default: 1 2 3)
#
# Environment: LIB (our cdylib; default ${CARGO_TARGET_DIR:-target}/debug/libp2pmpi_abi.so),
# P2PMPIRUN (default ${CARGO_TARGET_DIR:-target}/debug/p2pmpirun), TIMEOUT (seconds per run of one
# test module, default 60), OUT (default bench/out/mpi4py), MODULES (test modules, default all),
# REUSE_MPICH=1 (keep MPICH's outcomes of the modules an earlier run at the same N finished),
# SKIP_MPICH=1 (run only ours, against MPICH's outcomes kept: the modules MPICH did not finish
# are left out of the comparison), IMPLS (default "mpich p2pmpi": which to run).
#
# Made once under OUT and reused: a venv with mpi4py's wheel from PyPI, the source distribution
# (for its test/ directory). Nothing fetched is committed (bench/out/ is ignored).
# Each test module runs on its own (bench/mpi4py_driver.py writes every rank's outcome per test
# as it ends); a run that times out is rerun without the test it hung in (at most 3 times).
# A test passes if it passes on every rank; a skip is not a pass. Prints per N the tests passing on
# MPICH, how many of them pass on ours, the percentage; OUT/missing-N.txt lists the others.
set -u
cd "$(dirname "$0")/.."
root=$PWD
target=${CARGO_TARGET_DIR:-$root/target}
LIB=${LIB:-$target/debug/libp2pmpi_abi.so}
P2PMPIRUN=${P2PMPIRUN:-$target/debug/p2pmpirun}
TIMEOUT=${TIMEOUT:-60}
OUT=${OUT:-$root/bench/out/mpi4py}
VERSION=4.1.2
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
for tool in python3 mpiexec.mpich timeout; do
    command -v $tool >/dev/null || { echo "$0: $tool not found (apt-get install mpich python3-venv)" >&2; exit 1; }
done
[ -f "$LIB" ] || { echo "$0: $LIB not found (cargo build -p p2pmpi-abi)" >&2; exit 1; }
[ -x "$P2PMPIRUN" ] || { echo "$0: $P2PMPIRUN not found (cargo build -p p2pmpi-cli)" >&2; exit 1; }
libmpich=$(ls /usr/lib/*/libmpich.so.12 2>/dev/null | head -1)
[ -n "$libmpich" ] || { echo "$0: Debian's libmpich.so.12 not found (apt-get install libmpich-dev)" >&2; exit 1; }

py=$OUT/venv/bin/python3
scripts/mpi4py-venv.sh "$OUT/venv" || exit 1
tests=$(PYTHON=$py scripts/mpi4py-tests.sh "$OUT") || exit 1
# The two libraries, each found by mpi4py's loader under the name libmpi.so.
scripts/abi-lib.sh "$OUT/lib-p2pmpi" "$LIB" || exit 1
mkdir -p "$OUT/lib-mpich"
ln -sfn "$libmpich" "$OUT/lib-mpich/libmpi.so"
ln -sfn "$libmpich" "$OUT/lib-mpich/libmpi.so.12"

modules=${MODULES:-$(cd "$tests" && ls test_*.py | sed 's/\.py$//')}

# run IMPL N MODULE: runs one module, rerunning without a hanging test; merges outcomes into
# $OUT/res/IMPL-N/MODULE.txt (lines "outcome test rank").
run_module() {
    local impl=$1 n=$2 module=$3 excluded=() try dir res hung
    res=$OUT/res/$impl-$n/$module.txt
    : >"$res"
    for try in 0 1 2 3; do
        dir=$OUT/res/$impl-$n/$module.$try
        rm -rf "$dir"; mkdir -p "$dir"
        if [ "$impl" = mpich ]; then
            LD_LIBRARY_PATH=$OUT/lib-mpich timeout -k 5 "$TIMEOUT" mpiexec.mpich -n "$n" \
                "$py" "$root/bench/mpi4py_driver.py" "$tests" "$dir" "$module" "${excluded[@]}" \
                >"$dir/log" 2>&1
        else
            LD_LIBRARY_PATH=$OUT/lib-p2pmpi timeout -k 5 "$TIMEOUT" "$P2PMPIRUN" --local -n "$n" \
                "$py" "$root/bench/mpi4py_driver.py" "$tests" "$dir" "$module" "${excluded[@]}" \
                >"$dir/log" 2>&1
        fi
        local rc=$?
        for f in "$dir"/rank*.txt; do
            [ -f "$f" ] || continue
            local r=${f##*/rank}; r=${r%.txt}
            grep -v '^START ' "$f" | sed "s/\$/ $r/" >>"$res"
        done
        [ $rc -eq 124 ] || [ $rc -eq 137 ] || break
        # The test a rank started and did not end.
        hung=$(cat "$dir"/rank*.txt 2>/dev/null | "$py" -c '
import sys
started, ended = [], set()
for line in sys.stdin:
    what, test = line.rstrip("\n").split(" ", 1)
    (started.append(test) if what == "START" else ended.add(test))
left = [t for t in started if t not in ended]
print(left[-1] if left else "")')
        [ -n "$hung" ] || break
        echo "  $impl -n $n: $hung timed out" >&2
        echo "timeout $hung all" >>"$res"
        excluded+=("$hung")
    done
}

summary() {
    local n=$1
    "$py" - "$OUT/res/mpich-$n" "$OUT/res/p2pmpi-$n" "$n" "$OUT/missing-$n.txt" <<'PY'
import sys, pathlib
def load(d, n):
    out = {}
    for f in pathlib.Path(d).glob("*.txt"):
        for line in f.read_text().splitlines():
            what, rest = line.split(" ", 1)
            test, rank = rest.rsplit(" ", 1)
            out.setdefault(test, {})[rank] = what
    ok = set()
    for test, ranks in out.items():
        if "all" not in ranks and all(ranks.get(str(r)) == "ok" for r in range(n)):
            ok.add(test)
    return ok, out
n = int(sys.argv[3])
theirs, _ = load(sys.argv[1], n)
ours, raw = load(sys.argv[2], n)
both = theirs & ours
pct = 100.0 * len(both) / len(theirs) if theirs else 0.0
print(f"-n {n}: MPICH passes {len(theirs)}, p2pmpi passes {len(both)} of them ({pct:.1f} %); "
      f"p2pmpi passes {len(ours)} in all")
with open(sys.argv[4], "w") as f:
    for t in sorted(theirs - ours):
        ranks = raw.get(t, {})
        why = ",".join(sorted(set(ranks.values()))) or "not run"
        f.write(f"{t} {why}\n")
PY
}

for n in ${@:-1 2 3}; do
    for impl in ${IMPLS:-mpich p2pmpi}; do
        if [ "$impl" = mpich ] && [ "${SKIP_MPICH:-0}" = 1 ]; then
            echo "  mpich -n $n: not run; $(ls "$OUT/res/mpich-$n"/*.done 2>/dev/null | wc -l) modules kept" >&2
            continue
        fi
        reuse=0
        if [ "$impl" = mpich ] && [ "${REUSE_MPICH:-0}" = 1 ]; then
            reuse=1
        else
            rm -rf "$OUT/res/$impl-$n"
        fi
        mkdir -p "$OUT/res/$impl-$n"
        start=$(date +%s)
        for module in $modules; do
            [ $reuse = 1 ] && [ -f "$OUT/res/$impl-$n/$module.done" ] && continue
            run_module "$impl" "$n" "$module"
            touch "$OUT/res/$impl-$n/$module.done"
        done
        echo "  $impl -n $n: $(( $(date +%s) - start )) s" >&2
    done
    summary "$n"
done
