#!/usr/bin/env bash
# Two builds side by side (before/after a change that must cost nothing, such as the library's
# layering): interleaved pairs of runs of build A and build B, in an order that alternates
# (A then B, B then A), at normal priority. Per pair and cell it measures
#   - 8 B one-way latency and 4 MiB bandwidth on shared memory and on TCP (pingpong_bench);
#   - the -n 2 collectives at 8 B and 64 KiB (coll_bench: barrier, bcast, reduce, allreduce,
#     allgather, alltoall);
#   - `-n 2 -r 2` ping-pong round trips, and the same traffic by hand (`-n 4 -r 1`) of each
#     (both `--bind-to core`: without it the placement moves them by ±30 %);
#   - job start-up: the wall time of `p2pmpirun --local -n 2 whereami`.
# and prints, per cell, the medians of A and B and the median of the paired ratios B/A (the
# runs of a pair share the machine's state of the moment; on this shared VM only paired
# ratios are worth reading). For times (latency, µs per operation, start-up) a ratio above 1
# means B is slower; for bandwidth the script inverts it, so above 1 is slower there too.
#
# Usage: bench/layers_ab.sh A_DIR B_DIR [PAIRS]
#   A_DIR, B_DIR: directories holding `p2pmpirun` and `examples/{pingpong_bench,coll_bench,
#   repl_pingpong,whereami}` (release builds: `cargo build --release -p p2pmpi-cli --bins &&
#   cargo build --release -p p2pmpi-examples --examples`, then target/release).
# Env: PAIRS=7 (or the third argument).
# Output: the table on stdout; every sample in bench/out/layers_ab.txt.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT="$ROOT/bench/out"
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"

[ $# -ge 2 ] || { echo "usage: $0 A_DIR B_DIR [PAIRS]" >&2; exit 2; }
A=$(cd "$1" && pwd) || exit 2
B=$(cd "$2" && pwd) || exit 2
PAIRS=${3:-${PAIRS:-7}}
[[ $PAIRS =~ ^[0-9]+$ ]] && [ "$PAIRS" -ge 1 ] || { echo "PAIRS=$PAIRS: want a positive number" >&2; exit 2; }
for d in "$A" "$B"; do
    for f in p2pmpirun examples/pingpong_bench examples/coll_bench examples/repl_pingpong examples/whereami; do
        [ -x "$d/$f" ] || { echo "$d: no $f" >&2; exit 2; }
    done
done
command -v python3 >/dev/null || { echo "python3 is required" >&2; exit 2; }
mkdir -p "$OUT"
SAMPLES="$OUT/layers_ab.txt"
ERR="$OUT/layers_ab.err"
: >"$SAMPLES"
: >"$ERR"
announce_machine
log "A=$A B=$B, $PAIRS pairs, normal priority, load $(cut -d' ' -f1-3 /proc/loadavg)"

# job [VAR=VALUE...] COMMAND...: one run, without a p2pmpi home (no grid), output on stdout.
job() {
    env P2PMPI_HOME=/nonexistent "$@" </dev/null 2>>"$ERR"
}

# measure BUILD PAIR DIR: appends "BUILD PAIR cell value" lines for every cell.
measure() {
    local b=$1 i=$2 d=$3 t0 t1
    for mode in shm tcp; do
        local shm=1
        [ $mode = tcp ] && shm=0
        job P2PMPI_SHM=$shm timeout 120 "$d/p2pmpirun" --local -n 2 "$d/examples/pingpong_bench" 8,4194304 \
            | awk -v b="$b" -v i="$i" -v m="$mode" '
                $1 == "pingpong" && $2 == 8 { print b, i, m "_lat_8B_us", $3 }
                $1 == "pingpong" && $2 == 4194304 { print b, i, m "_bw_4MiB_MBps", $4 }' >>"$SAMPLES"
    done
    job timeout 300 "$d/p2pmpirun" --local -n 2 "$d/examples/coll_bench" \
        barrier,bcast,reduce,allreduce,allgather,alltoall 8,65536 0.1 \
        | awk -v b="$b" -v i="$i" '$1 == "coll" { print b, i, "coll_" $2 "_" $4 "B_us", $5 }' >>"$SAMPLES"
    job P2PMPI_SHM=0 timeout 120 "$d/p2pmpirun" --local --bind-to core -n 2 -r 2 "$d/examples/repl_pingpong" 1024,65536 1000 50 \
        | awk -v b="$b" -v i="$i" '/^replpp/ { print b, i, "r2_rt_" $2 "B_us", $4 }' >>"$SAMPLES"
    job P2PMPI_SHM=0 timeout 120 "$d/p2pmpirun" --local --bind-to core -n 4 -r 1 "$d/examples/repl_pingpong" 1024,65536 1000 50 \
        | awk -v b="$b" -v i="$i" '/^replpp/ { print "hand" b, i, "r2_rt_" $2 "B_us", $4 }' >>"$SAMPLES"
    for _ in 1 2 3 4 5; do
        t0=$(date +%s%N)
        job timeout 60 "$d/p2pmpirun" --local -n 2 "$d/examples/whereami" >/dev/null
        t1=$(date +%s%N)
        awk -v b="$b" -v i="$i" -v t0="$t0" -v t1="$t1" 'BEGIN { printf "%s %s startup_n2_ms %.3f\n", b, i, (t1 - t0) / 1e6 }' >>"$SAMPLES"
    done
}

for ((i = 0; i < PAIRS; i++)); do
    log "pair $((i + 1))/$PAIRS"
    if ((i % 2 == 0)); then
        measure A "$i" "$A"
        measure B "$i" "$B"
    else
        measure B "$i" "$B"
        measure A "$i" "$A"
    fi
done

python3 - "$SAMPLES" <<'PY'
import collections, statistics, sys
vals = collections.defaultdict(lambda: collections.defaultdict(list))  # cell -> build -> values
pairs = collections.defaultdict(lambda: collections.defaultdict(list))  # (cell, pair) -> build -> values
for line in open(sys.argv[1]):
    b, i, cell, v = line.split()
    vals[cell][b].append(float(v))
    pairs[(cell, int(i))][b].append(float(v))
print(f"{'cell':<26} {'A median':>10} {'B median':>10} {'paired B/A':>10} {'A/hand':>8} {'B/hand':>8}  pairs")
worst = 0.0
for cell in sorted(vals):
    higher_better = "_bw_" in cell
    ratios, hand_a, hand_b = [], [], []
    for (c, i), by in pairs.items():
        if c != cell or not by["A"] or not by["B"]:
            continue
        a, b = statistics.median(by["A"]), statistics.median(by["B"])
        if a > 0 and b > 0:
            ratios.append(a / b if higher_better else b / a)
        if by["handA"]:
            hand_a.append(a / statistics.median(by["handA"]))
        if by["handB"]:
            hand_b.append(b / statistics.median(by["handB"]))
    med = lambda xs: statistics.median(xs) if xs else float("nan")
    r = med(ratios)
    worst = max(worst, r) if ratios else worst
    h = (f"{med(hand_a):8.3f} {med(hand_b):8.3f}") if hand_b else f"{'':>8} {'':>8}"
    print(f"{cell:<26} {med(vals[cell]['A']):10.2f} {med(vals[cell]['B']):10.2f} {r:10.3f} {h}  {len(ratios)}")
print(f"worst paired ratio (B slower when > 1): {worst:.3f}")
PY
log "done in $(($(date +%s) - T_START)) s; samples in $SAMPLES, errors in $ERR"
