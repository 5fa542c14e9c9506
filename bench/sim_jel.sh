#!/usr/bin/env bash
# JEL resource tracking in the simulator (issue 15, item 6; Drost et al. figures 5 and 6, table
# II, then a larger pool): the very p2pmpi_core::jel cores (central server and clients with each
# dissemination strategy, the distributed node) driven in virtual time over a bandwidth-limited
# network.
#
#   bench/sim_jel.sh [SCALE] [OUT]     (default SCALE 10: 100 / 200 / 300 nodes, a few seconds)
#
# SCALE divides the numbers of nodes; SCALE 1 is the committed full run (docs/sim/jel_*): 1000
# nodes on DAS-2, 2000 on DAS-3 (with Ibis-sized and with our own identifiers), 3000 on DAS-3,
# the central tree and gossip strategies (every simulated member holds the whole pool: memory
# grows as n², ~45 bytes per pair); every run 10 simulated minutes. 10 000 nodes, the tree:
#   p2pmpi-sim jel large --max-n 10000 --only tree --threads 1 --out docs/sim   (4.6 GB, ~2 min) Without OUT the files go
# to a temporary directory; the tables are printed either way.
set -euo pipefail
cd "$(dirname "$0")/.."
SCALE=${1:-10}
OUT=${2:-}
cargo build --release -q -p p2pmpi-sim
BIN=${CARGO_TARGET_DIR:-target}/release/p2pmpi-sim
echo "machine: $(nproc) cores, $(uname -sr); scale $SCALE"
start=$(date +%s)
if [ -n "$OUT" ]; then
    "$BIN" jel all --scale "$SCALE" --out "$OUT" | tee /tmp/sim_jel.$$.log
else
    "$BIN" jel all --scale "$SCALE" --out "$(mktemp -d)" | tee /tmp/sim_jel.$$.log
fi
# The counts: runs, and how many reached the whole pool (every node seeing every member).
runs=$(grep -cE '^ *(central|distributed)' /tmp/sim_jel.$$.log || true)
echo "sim_jel: $runs runs printed; $(( $(date +%s) - start )) s"
rm -f /tmp/sim_jel.$$.log
