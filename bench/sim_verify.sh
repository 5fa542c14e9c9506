#!/usr/bin/env bash
# Replicas that check each other (issue 42, item 4): the receiving side's digest verifier
# (p2pmpi_core::replication::verify) in random schedules — n ranks × r replicas, 30 messages
# between random pairs, data and digests arriving in any order, random replica deaths — with a
# bit flipped in one replica's outgoing copy of one message, a replica lying consistently, or a
# lying master, and honest runs in between. Runs until SCHEDULES schedules actually sent a
# corrupted message, checks that no corrupted content completed a receive unnoticed and that no
# honest run raised an alarm, and prints the counts and the run time.
#
#   bench/sim_verify.sh [SCHEDULES] [SEED]     (default 100000, 0)
#
# A violation prints its schedule's number and set-up; the command exits 1.
set -euo pipefail
cd "$(dirname "$0")/.."
SCHEDULES=${1:-100000}
SEED=${2:-0}
cargo build --release -q -p p2pmpi-sim
BIN=${CARGO_TARGET_DIR:-target}/release/p2pmpi-sim
echo "machine: $(nproc) cores, $(uname -sr)"
start=$(date +%s)
"$BIN" verify --schedules "$SCHEDULES" --seed "$SEED"
echo "sim_verify: $(( $(date +%s) - start )) s"
