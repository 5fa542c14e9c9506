#!/usr/bin/env bash
# Two builds of the replication protocol side by side (before/after a change): interleaved
# triples of `-n 2 -r R repl_pingpong` with build A, the same with build B, and the same
# traffic sent by hand (`-n 2R -r 1`, repl_pingpong's fan-out mode) with build B, in an order
# that rotates. Prints, per size, the median round trip of each, the ratios of those medians,
# and the medians of the ratios within each triple (B/A, A/hand, B/hand): the runs of a triple
# share the machine's state of the moment, so the paired ratios stay right when this VM's
# speed drifts during the script, and the ratios of the medians do not.
# `bench/replication.sh` measures one build; on this shared VM its medians move by several
# percent with the machine's state, so a change is judged here, A beside B.
#
# Usage: bench/replication_ab.sh A_DIR B_DIR [TRIPLES]
#   A_DIR, B_DIR: directories holding `p2pmpirun` and `examples/repl_pingpong` (release
#   builds, e.g. copies of target/release made with `cargo build --release -p p2pmpi-cli
#   --bins` then `cargo build --release -p p2pmpi-examples --examples`)
# Env:
#   TRIPLES=30 (or the third argument), SIZES=1024,8192,65536,131072, ITERS=1000, WARMUP=50
#   CHRT=""             command prefix of every run; none by default: every run at normal
#                       priority (no published figure uses real-time priority)
#   BIND=core           p2pmpirun --bind-to
#   R=2                 the replication degree (the traffic by hand runs 2R processes)
# Output: the table on stdout; every sample in bench/out/replication_ab.txt.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT="$ROOT/bench/out"
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"

[ $# -ge 2 ] || { echo "usage: $0 A_DIR B_DIR [TRIPLES]" >&2; exit 2; }
A=$(cd "$1" && pwd) || exit 2
B=$(cd "$2" && pwd) || exit 2
TRIPLES=${3:-${TRIPLES:-30}}
SIZES=${SIZES:-1024,8192,65536,131072}
ITERS=${ITERS:-1000}
WARMUP=${WARMUP:-50}
CHRT=${CHRT-}
BIND=${BIND:-core}
R=${R:-2}
[[ $R =~ ^[0-9]+$ ]] && [ "$R" -ge 2 ] || { echo "R=$R: want a replication degree of 2 or more" >&2; exit 2; }
for d in "$A" "$B"; do
    [ -x "$d/p2pmpirun" ] && [ -x "$d/examples/repl_pingpong" ] \
        || { echo "$d: no p2pmpirun or examples/repl_pingpong" >&2; exit 2; }
done
command -v python3 >/dev/null || { echo "python3 is required" >&2; exit 2; }
mkdir -p "$OUT"
SAMPLES="$OUT/replication_ab.txt"
: >"$SAMPLES"
announce_machine
log "A=$A B=$B, R=$R, $TRIPLES triples, sizes $SIZES, $ITERS round trips after $WARMUP, prefix '${CHRT:-none}', --bind-to $BIND"

# run TAG TRIPLE DIR p2pmpirun-args...: one job; appends "TAG TRIPLE size round_trip_us"
# per size.
run() {
    local tag=$1 triple=$2 dir=$3
    shift 3
    # shellcheck disable=SC2086  # $CHRT is a command prefix
    $CHRT env P2PMPI_SHM=0 P2PMPI_HOME=/nonexistent timeout --kill-after=5 60 \
        "$dir/p2pmpirun" --local --bind-to "$BIND" "$@" "$dir/examples/repl_pingpong" "$SIZES" "$ITERS" "$WARMUP" \
        2>>"$OUT/replication_ab.err" </dev/null | awk -v t="$tag" -v i="$triple" '/^replpp/ { print t, i, $2, $4 }' >>"$SAMPLES"
}
for ((i = 0; i < TRIPLES; i++)); do
    case $((i % 3)) in
        0) run A "$i" "$A" -n 2 -r "$R"; run B "$i" "$B" -n 2 -r "$R"; run hand "$i" "$B" -n $((2 * R)) -r 1 ;;
        1) run B "$i" "$B" -n 2 -r "$R"; run hand "$i" "$B" -n $((2 * R)) -r 1; run A "$i" "$A" -n 2 -r "$R" ;;
        2) run hand "$i" "$B" -n $((2 * R)) -r 1; run A "$i" "$A" -n 2 -r "$R"; run B "$i" "$B" -n 2 -r "$R" ;;
    esac
done
python3 - "$SAMPLES" <<'PY'
import collections, statistics, sys
d = collections.defaultdict(list)
runs = collections.defaultdict(dict)
for line in open(sys.argv[1]):
    tag, triple, size, rt = line.split()
    d[(tag, int(size))].append(float(rt))
    runs[(int(triple), int(size))][tag] = float(rt)
def paired(size, num, den):
    r = [t[num] / t[den] for (_, s), t in runs.items() if s == size and num in t and den in t]
    return statistics.median(r) if r else float("nan")
print(f"{'size':>8} {'by hand µs':>11} {'A µs':>8} {'A/hand':>7} {'B µs':>8} {'B/hand':>7}"
      f"  {'paired: B/A':>11} {'A/hand':>7} {'B/hand':>7}  runs")
for size in sorted({s for _, s in d}):
    h, a, b = (statistics.median(d[(t, size)]) if d[(t, size)] else float("nan") for t in ("hand", "A", "B"))
    n = min(len(d[(t, size)]) for t in ("hand", "A", "B"))
    print(f"{size:>8} {h:>11.1f} {a:>8.1f} {a / h:>7.3f} {b:>8.1f} {b / h:>7.3f}"
          f"  {paired(size, 'B', 'A'):>11.3f} {paired(size, 'A', 'hand'):>7.3f} {paired(size, 'B', 'hand'):>7.3f}  {n}")
PY
