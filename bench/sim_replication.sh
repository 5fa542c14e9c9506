#!/usr/bin/env bash
# Deterministic simulation of whole replicated jobs (issue 12, item 6): random programs with
# ANY_SOURCE receives, probes and wait_any, under random crashes, freezes with resumes,
# partitions with heals, false suspicions and delay spikes, driving the very endpoint, matcher,
# leases and supervisor the library and the launcher run. Prints how many schedules passed.
#
#   bench/sim_replication.sh [SCHEDULES] [FIRST_SEED]     (default 100000, 0)
#
# A violation prints its seed and the command that replays it with every process's state.
set -euo pipefail
cd "$(dirname "$0")/.."
SCHEDULES=${1:-100000}
SEED=${2:-0}
cargo build --release -q -p p2pmpi-sim
echo "machine: $(nproc) cores, $(uname -sr)"
./target/release/p2pmpi-sim replicated --schedules "$SCHEDULES" --seed "$SEED"
