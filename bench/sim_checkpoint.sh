#!/usr/bin/env bash
# Jobs with checkpoints under Weibull host failures (issue 41, item 5): the probability that a
# job finishes and its mean run time with replication only, with replicas reborn at each
# checkpoint, and with rebirth and restarts, for P = 64 and 1024 ranks at r = 1, 2, 3 — the
# simulator driving the launcher's checkpoint coordinator (p2pmpi_core::checkpoint) in virtual
# time, beside the advisor's model (p2pmpi advise --mtbf). Then the advisor's interval against
# the simulator's optimum (a sweep).
#
#   bench/sim_checkpoint.sh [TRIALS] [SHAPE]     (default 200 trials, shapes 1 and 0.7)
#
# The parameters: a day of work; hosts failing on average every 107.55 h, i.e. with
# probability 0.2 over the day (exponential: `p2pmpi advise -n 64 -f 0.2`); checkpoints and
# restarts of 60 s; 2 copies of each piece; at most 100 restarts; the interval the advisor
# recommends for each P and r.
set -euo pipefail
cd "$(dirname "$0")/.."
TRIALS=${1:-200}
SHAPES=${2:-"1 0.7"}
cargo build --release -q -p p2pmpi-sim
BIN=${CARGO_TARGET_DIR:-target}/release/p2pmpi-sim
echo "machine: $(nproc) cores, $(uname -sr)"
start=$(date +%s)
for shape in $SHAPES; do
    "$BIN" checkpoint --ranks 64,1024 --degrees 1,2,3 --shape "$shape" --mtbf 107.55h --work 24h \
        --cost 60s --trials "$TRIALS"
    echo
done
"$BIN" checkpoint --ranks 64 --degrees 1,2 --shape 1 --mtbf 107.55h --work 24h --cost 60s \
    --trials "$TRIALS" --sweep 9 | sed -n '/advisor.s interval/,$p'
echo "sim_checkpoint: $(( $(date +%s) - start )) s"
