#!/usr/bin/env bash
# Soak test of every fault kind: many chaos trials on a local grid of real daemons. Each
# trial harms replicas (masters included) at random moments, one at a time or several at
# once, every rank keeping a replica:
#   kill       kill -9
#   freeze     SIGSTOP for good (stopped by the launcher at the end)
#   resume     SIGSTOP, then SIGCONT 1.2-2 s later (past detection): the replica was
#              excluded and must leave quietly (fencing)
#   partition  (as root, with nftables) a host cut off by the network for 1.2-2.5 s, then
#              healed: its replicas are excluded and leave
# Each trial's output must equal the fault-free run. Prints the pass count. Later issues add
# their fault kinds here.
#
# Usage: bench/soak_replication.sh [ROUNDS]
#   ROUNDS  rounds of 6 trials (-r 2 and -r 3: one at a time, together, partition; 4 without
#           root/nftables); default 25
# Env: P2PMPI_CHAOS_SEED=N fixes the base seed (a failing trial prints its seed).
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ROUNDS=${1:-25}
LOG="$ROOT/bench/out/soak_replication.log"
mkdir -p "$ROOT/bench/out"
cd "$ROOT"
start=$(date +%s)
P2PMPI_CHAOS_TRIALS=$ROUNDS cargo nextest run -p p2pmpi-cli --test replication chaos_on_a_local_grid \
    --no-capture >"$LOG" 2>&1
rc=$?
summary=$(grep -E "^chaos: [0-9]+ of [0-9]+ trials passed" "$LOG" | tail -1)
echo "${summary:-chaos: no summary (see $LOG)} in $(( $(date +%s) - start )) s"
grep "chaos trial failed" "$LOG" | head -5
exit $rc
