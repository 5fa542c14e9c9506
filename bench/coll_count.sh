#!/usr/bin/env bash
# Instructions per collective operation at np 2 (callgrind; the machine's load does not change
# them), for the collectives whose messages all flow one way between two processes, against a
# plain send and receive of the same size.
#
# Usage: bench/coll_count.sh [BIN...]
#   BIN: coll_count executables to compare (default: target/release/examples/coll_count,
#   built by `cargo build --release -p p2pmpi-examples --example coll_count`); to compare with
#   an older library, build examples/coll_count.rs in a checkout of it and pass both.
# Env:
#   BYTES=8          the size (per process, as in coll_bench)
#   N1=500 N2=1500   the two loop lengths; per operation = (I(N2) - I(N1)) / (N2 - N1), so
#                    start-up, the barriers and finalization cancel out
#
# Each run starts the receiving rank a second late (coll_count's COLL_COUNT_LAG): every message
# is waiting when it looks, so no rank spins and the counts are the same from run to run. The
# collectives that exchange (allreduce, allgather, alltoall, reduce_scatter_block, barrier) have
# no such order: count them by hand with `--toggle-collect='*counted*'
# --toggle-collect='*context::wait_req*'` (outside the waits), run several times (the share
# of the matching done inside or outside a wait changes from run to run).
#
# Output: one line per operation: `op (late rank R) <rank 0> <rank 1>` instructions.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
RUN="$TARGET_DIR/release/p2pmpirun"
BYTES=${BYTES:-8}
N1=${N1:-500}
N2=${N2:-1500}
[ $# -gt 0 ] || set -- "$TARGET_DIR/release/examples/coll_count"
command -v valgrind >/dev/null || { echo "valgrind is required" >&2; exit 2; }
[ -x "$RUN" ] || { echo "$RUN missing: cargo build --release -p p2pmpi-cli" >&2; exit 2; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# Instructions of the counted loop per rank (rank order), `op` run `n` times, `late` late.
count() { # bin op n late
    local out="$TMP/$2.$3" rank pid f
    rm -f "$out".*
    COLL_COUNT_LAG=$4 timeout 300 "$RUN" -n 2 valgrind --tool=callgrind --toggle-collect='*counted*' \
        --callgrind-out-file="$out.%p" "$1" "$2" "$BYTES" "$3" >"$out.log" 2>&1
    grep -q "^ok" "$out.log" || { echo "coll_count $2 $3 failed:" >&2; tail -5 "$out.log" >&2; return 1; }
    if grep -q "coll_count rank 0 pid" "$out.log"; then
        for rank in 0 1; do
            pid=$(sed -n "s/.*coll_count rank $rank pid \([0-9]*\).*/\1/p" "$out.log" | head -1)
            grep -h "^totals" "$out.$pid" | awk '{print $2}'
        done
    else
        # An older coll_count, silent about its ranks: process-id order (p2pmpirun starts
        # rank 0 first).
        for f in $(ls "$out".[0-9]* | awk -F. '{print $NF, $0}' | sort -n | cut -d' ' -f2); do
            grep -h "^totals" "$f" | awk '{print $2}'
        done
    fi
}

for bin in "$@"; do
    echo "$bin ($BYTES B, np 2; instructions per operation: rank 0, rank 1)"
    for spec in send:1 bcast:1 scatter:1 scan:1 gather:0 reduce:0; do
        op=${spec%:*}
        late=${spec#*:}
        a=($(count "$bin" "$op" "$N1" "$late")) || continue
        b=($(count "$bin" "$op" "$N2" "$late")) || continue
        line="$op (late rank $late)"
        for i in "${!a[@]}"; do line="$line $(((b[i] - a[i]) / (N2 - N1)))"; done
        echo "  $line"
    done
done
