#!/usr/bin/env bash
# Peak memory per process of a replicated job with large messages (issue: "a replica never
# buffers more than a bounded window of unsent payload"): `bigmsg MIB ROUNDS` on 2 ranks,
# -r 1 beside -r 2, locally; every process (replicas too) reports its VmHWM. Prints, for each
# R, the largest and the median peak over the processes and the ratio to R = 1.
#
# Usage: bench/replication_memory.sh [MIB] [ROUNDS] [REPS]   (defaults: 1024 2 3)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT="$ROOT/bench/out"
mkdir -p "$OUT"
# shellcheck source=lib.sh
. "$ROOT/bench/lib.sh"
MIB=${1:-1024}
ROUNDS=${2:-2}
REPS=${3:-3}
announce_machine
log "building (release)"
(cd "$ROOT" && cargo build -q --release -p p2pmpi-cli -p p2pmpi-examples --examples --bins)
RUN="$TARGET_DIR/release/p2pmpirun"
PROG="$TARGET_DIR/release/examples/bigmsg"
declare -A MAXES MEDS
for rep in $(seq 1 "$REPS"); do
    for r in 1 2; do
        dir=$(mktemp -d)
        BIGMSG_OUT=$dir P2PMPI_HOME=/nonexistent "$RUN" --local -n 2 -r "$r" "$PROG" "$MIB" "$ROUNDS" >"$OUT/bigmsg-r$r.txt"
        read -r mx md < <(for f in "$dir"/slot-*.txt; do cat "$f"; echo; done | grep . | sort -n | awk '{a[NR]=$1} END {print a[NR], a[int((NR+1)/2)]}')
        MAXES[$r]+="$mx "
        MEDS[$r]+="$md "
        log "rep $rep, -r $r: peak per process max $((mx / 1024)) MiB, median $((md / 1024)) MiB ($(ls "$dir" | wc -l) processes)"
        rm -rf "$dir"
    done
done
median() { tr ' ' '\n' | grep -v '^$' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
m1=$(echo "${MAXES[1]}" | median)
m2=$(echo "${MAXES[2]}" | median)
printf '%-6s %18s %18s\n' "R" "max peak (MiB)" "ratio to R=1"
printf '%-6s %18d %18s\n' 1 $((m1 / 1024)) "1.00"
printf '%-6s %18d %18s\n' 2 $((m2 / 1024)) "$(awk -v a="$m2" -v b="$m1" 'BEGIN {printf "%.2f", a / b}')"
log "messages of $MIB MiB, $ROUNDS round trip(s), medians of $REPS runs; output of the last run in $OUT/bigmsg-r*.txt"
