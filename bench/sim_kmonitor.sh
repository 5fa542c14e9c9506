#!/usr/bin/env bash
# The k-monitor detector's simulations (issue 14, item 4; Horita et al. figures 3, 7, 10 and the
# traffic vs n): the very p2pmpi_core::kmonitor::Node driven with virtual time.
#
#   bench/sim_kmonitor.sh [SCALE] [OUT]     (default SCALE 20: a quick run, about 1 min on 2 cores)
#
# SCALE divides the Monte-Carlo draws and protocol runs; SCALE 1 is the committed full run
# (docs/sim/kmonitor_*), a few minutes on 2 cores. Without OUT nothing is written: the tables
# are printed. Figures 10 and traffic do not depend on SCALE (they are cheap).
set -euo pipefail
cd "$(dirname "$0")/.."
SCALE=${1:-20}
OUT=${2:-}
cargo build --release -q -p p2pmpi-sim
BIN=${CARGO_TARGET_DIR:-target}/release/p2pmpi-sim
echo "machine: $(nproc) cores, $(uname -sr); scale $SCALE"
start=$(date +%s)
if [ -n "$OUT" ]; then
    "$BIN" kmonitor all --scale "$SCALE" --out "$OUT"
else
    for exp in disconnect tolerance latency traffic; do
        "$BIN" kmonitor "$exp" --scale "$SCALE"
    done
    "$BIN" kmonitor latency --reset --runs 10
fi
echo "sim_kmonitor: $(( $(date +%s) - start )) s"
