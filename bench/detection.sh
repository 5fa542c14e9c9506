#!/usr/bin/env bash
# Failure-detection benchmark on real processes (issue 5, item 6; issue 14, item 6): N
# processes of one job on this host, each with its in-process failure detector (BRR or DBRR
# gossip every T_gossip, or the k-monitor detector); one random rank other than 0 is killed
# with `kill -9`, and every other rank reports when its detector confirmed the failure.
# Measures the detection time beside the theory (gossip: T_cleanup = 2⌈log2 N⌉·T_gossip for
# BRR, 3⌈log2 N⌉·T_gossip for DBRR, then a ping of one T_gossip; k-monitor: at once, through
# the reset TCP connections, then the notices' flooding), false detections, missed
# notifications, the failure notices sent, the detector's traffic and its thread's CPU time.
#
# KMONITOR runs `--fd kmonitor --k KM_K --t-hb T_gossip --t-to KM_TO_FACTOR·T_gossip`: the
# T_gossip of the cell is its heartbeat period T_hb (T_gossip 100 ms = the defaults k = 4,
# T_hb = 100 ms, T_to = 1 s).
#
# Usage: bench/detection.sh
# Env:
#   REPS=3                   runs of every (N, protocol, T_gossip); medians reported
#   NS="4 8 16 32 64"        process counts
#   PROTOCOLS="BRR DBRR KMONITOR"  gossip protocols (also RR, RANDOM) and the k-monitor detector
#   TGS="100 500"            T_gossip values, ms (KMONITOR: T_hb)
#   KM_K=4 KM_TO_FACTOR=10   KMONITOR: k, and T_to = KM_TO_FACTOR·T_hb
#   WARMUP_MS=2000           wait this long after every rank is ready before the random 0..T_gossip wait
#                            and the kill (0: kill within the first round; see bench/README.md)
#   HOLD_EXTRA_MS=2000       each job lives WARMUP_MS + T_cleanup + 2·T_gossip + this after it is ready
#   SEED=<time>              seed of bash's RANDOM (which rank is killed, and when)
#   READY_TIMEOUT=60         seconds allowed for every rank to print its ready line
#   QUIET_PCT=25             before each run, wait while other processes keep the CPUs busier than this
#   QUIET_BUDGET=60          ...but wait at most this many seconds in total over the whole script
#
# Output: a table on stdout, Markdown in bench/out/detection.md, one CSV row per process and
# run in bench/out/detection.csv, every run's output in bench/out/detection-raw/, the
# commands in bench/out/detection-commands.txt, the CPU load before each run in
# bench/out/detection-load.txt, the build log in bench/out/build-detection.log.
set -uo pipefail

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$BENCH_DIR/.." && pwd)
OUT="$BENCH_DIR/out"
RAW="$OUT/detection-raw"
REPS=${REPS:-3}
NS=${NS:-"4 8 16 32 64"}
PROTOCOLS=${PROTOCOLS:-"BRR DBRR KMONITOR"}
KM_K=${KM_K:-4}
KM_TO_FACTOR=${KM_TO_FACTOR:-10}
TGS=${TGS:-"100 500"}
WARMUP_MS=${WARMUP_MS:-2000}
HOLD_EXTRA_MS=${HOLD_EXTRA_MS:-2000}
SEED=${SEED:-$(date +%s)}
READY_TIMEOUT=${READY_TIMEOUT:-60}
QUIET_PCT=${QUIET_PCT:-25}
QUIET_BUDGET=${QUIET_BUDGET:-60}
STATS="$BENCH_DIR/detection_stats.py"


mkdir -p "$OUT"
rm -rf "$RAW"
mkdir -p "$RAW"
# shellcheck source=bench/lib.sh
source "$BENCH_DIR/lib.sh"
announce_machine
command -v python3 >/dev/null || { log "python3 is required (parsing and statistics)"; exit 1; }

# --------------------------------------------------------------------------- build
P2P_RUN="$TARGET_DIR/release/p2pmpirun"
P2P_BIN="$TARGET_DIR/release/examples/fdwatch"
log "building p2pmpirun and examples/fdwatch (release)"
if ! (cd "$ROOT" && cargo build --release -p p2pmpi-cli --bins \
        && cargo build --release -p p2pmpi-examples --example fdwatch) >"$OUT/build-detection.log" 2>&1 \
    || [ ! -x "$P2P_RUN" ] || [ ! -x "$P2P_BIN" ]; then
    log "could not build p2pmpirun + example fdwatch: $(grep -m1 '^error' "$OUT/build-detection.log" | cut -c1-160)"
    log "full log: $OUT/build-detection.log"
    exit 1
fi

# T_cleanup in rounds, as crates/p2pmpi-core/src/fd.rs (cleanup_rounds); KMONITOR: T_to in
# periods T_hb (a freeze's bound; the jobs hold as long as that).
cleanup_rounds() { # protocol n
    local l=0 m=1 r=0
    while [ $m -lt "$2" ]; do m=$((m * 2)); l=$((l + 1)); done
    [ $l -ge 1 ] || l=1
    case $1 in
        BRR) echo $((2 * l)) ;;
        DBRR) echo $((3 * l)) ;;
        RANDOM) echo $((4 * l)) ;;
        KMONITOR) echo "$KM_TO_FACTOR" ;;
        RR) while [ $((r * (r + 1) / 2)) -lt "$2" ]; do r=$((r + 1)); done; echo $((2 * (r > 1 ? r : 1))) ;;
        *) log "unknown protocol $1"; exit 1 ;;
    esac
}
for p in $PROTOCOLS; do cleanup_rounds "$p" 4 >/dev/null || exit 1; done

sleep_ms() { sleep "$(($1 / 1000)).$(printf '%03d' $(($1 % 1000)))"; }

# --------------------------------------------------------------------------- one run
JOB=
stop_job() {
    [ -n "$JOB" ] || return 0
    kill -TERM "$JOB" 2>/dev/null
    wait "$JOB" 2>/dev/null
    JOB=
}
trap stop_job EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

CMD_TEMPLATE="P2PMPI_HOME=/nonexistent $P2P_RUN -n N --local --fd PROTOCOL --t-gossip T_GOSSIP --t-max-hang 0 $P2P_BIN --notify --hold HOLD_MS
P2PMPI_HOME=/nonexistent $P2P_RUN -n N --local --fd kmonitor --k $KM_K --t-hb T_GOSSIP --t-to $KM_TO_FACTOR·T_GOSSIP $P2P_BIN --notify --hold HOLD_MS"

# The detector's options for a protocol and period.
fd_args() { # protocol tg
    case $1 in
        KMONITOR) echo "--fd kmonitor --k $KM_K --t-hb $2 --t-to $(($2 * KM_TO_FACTOR))" ;;
        *) echo "--fd $1 --t-gossip $2 --t-max-hang 0" ;;
    esac
}

# run_one n protocol tg rep outfile: starts the job, waits for every ready line, waits
# WARMUP_MS + a random 0..T_gossip ms, kills a random rank other than 0, waits for the job
# to end. Samples the CPU time of every process's detector thread once all are ready and
# again 0.7 s before their hold ends (into outfile.cpu). Sets
# VICTIM and KILL_MS (empty when nothing was killed) and STATUS (ok, exit <rc>, timeout,
# not ready).
run_one() {
    local n=$1 proto=$2 tg=$3 outf=$5
    local tc hold limit deadline ready pid rc us t_ready left
    local -a pids
    tc=$(($(cleanup_rounds "$proto" "$n") * tg))
    hold=$((WARMUP_MS + tc + 2 * tg + HOLD_EXTRA_MS))
    limit=$((hold / 1000 + READY_TIMEOUT + 30))
    VICTIM='' KILL_MS='' STATUS=''
    # Outside any grid (no daemon configuration): --local runs the N processes here.
    # shellcheck disable=SC2046 # fd_args: words
    P2PMPI_HOME=/nonexistent timeout --kill-after=5 "$limit" "$P2P_RUN" -n "$n" --local \
        $(fd_args "$proto" "$tg") "$P2P_BIN" --notify --hold "$hold" \
        >"$outf" 2>"$outf.err" </dev/null &
    JOB=$!
    deadline=$((SECONDS + READY_TIMEOUT))
    while :; do
        ready=$(grep -c ' ready pid ' "$outf" 2>/dev/null)
        [ "${ready:-0}" -ge "$n" ] && break
        if ! kill -0 "$JOB" 2>/dev/null || [ $SECONDS -ge $deadline ]; then
            STATUS="not ready"; break
        fi
        sleep 0.02
    done
    : >"$outf.cpu"
    if [ -z "$STATUS" ]; then
        # Each rank's hold starts at its ready line (unix ms): the earliest one ends first.
        t_ready=$(awk '$1 == "rank" && $3 == "ready" { print $NF }' "$outf" | sort -n | head -n 1)
        t_ready=$((${t_ready:-$((${EPOCHREALTIME/[.,]/} / 1000))} * 1000))
        mapfile -t pids < <(awk '$1 == "rank" && $3 == "ready" { print $5 }' "$outf")
        detector_cpu_sample "$outf.cpu" "${pids[@]}"
        # A random victim (not rank 0, which hosts the launcher's connection and runs here
        # in every configuration), killed after the warm-up and a random phase within the
        # gossip round. The time is read just before the kill, without a subshell.
        VICTIM=$((1 + RANDOM % (n - 1)))
        pid=$(awk -v r="$VICTIM" '$1 == "rank" && $2 == r && $3 == "ready" { print $5; exit }' "$outf")
        sleep_ms $((WARMUP_MS + RANDOM % (tg + 1)))
        us=${EPOCHREALTIME/[.,]/}
        KILL_MS=$(printf '%d.%03d' $((us / 1000)) $((us % 1000)))
        if ! kill -9 "$pid" 2>/dev/null; then
            log "could not kill rank $VICTIM (pid '$pid')"
            VICTIM='' KILL_MS=''
        fi
        us=${EPOCHREALTIME/[.,]/}
        left=$(((t_ready + hold * 1000 - 700000 - us) / 1000))
        [ $left -gt 0 ] && sleep_ms $left
        detector_cpu_sample "$outf.cpu" "${pids[@]}"
    else
        kill -TERM "$JOB" 2>/dev/null
    fi
    wait "$JOB"
    rc=$?
    JOB=
    if [ -n "$STATUS" ]; then
        :
    elif [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
        STATUS=timeout
    elif [ $rc -ne 0 ]; then
        STATUS="exit $rc"
    else
        STATUS=ok
    fi
}

# --------------------------------------------------------------------------- runs
CSV="$OUT/detection.csv"
python3 "$STATS" header >"$CSV"
echo "$CMD_TEMPLATE" >"$OUT/detection-commands.txt"
: >"$OUT/detection-load.txt"
QUIET_LEFT=$QUIET_BUDGET
RANDOM=$SEED
read -r -a PA <<<"$PROTOCOLS"
np=${#PA[@]}
total=0
for tg in $TGS; do for n in $NS; do for p in "${PA[@]}"; do
    total=$((total + (WARMUP_MS + $(cleanup_rounds "$p" "$n") * tg + 2 * tg + HOLD_EXTRA_MS) * REPS))
done; done; done
log "NS=\"$NS\" PROTOCOLS=\"$PROTOCOLS\" TGS=\"$TGS\" REPS=$REPS WARMUP_MS=$WARMUP_MS SEED=$SEED; jobs hold $((total / 1000)) s in all (plus start-up)"

# Interleaved: every repetition runs every cell once; the protocol that goes first rotates
# with the repetition and with N.
for ((rep = 1; rep <= REPS; rep++)); do
    ci=0
    for tg in $TGS; do
        for n in $NS; do
            for ((k = 0; k < np; k++)); do
                p=${PA[$(((k + rep - 1 + ci) % np))]}
                f="$RAW/n$n.$p.tg$tg.$rep.txt"
                # wait_quiet runs in a subshell: account here for the time it waited.
                t0=$SECONDS
                busy=$(wait_quiet)
                QUIET_LEFT=$((QUIET_LEFT - (SECONDS - t0)))
                [ $QUIET_LEFT -ge 0 ] || QUIET_LEFT=0
                echo "$n $p $tg $rep $busy" >>"$OUT/detection-load.txt"
                run_one "$n" "$p" "$tg" "$rep" "$f"
                summary=$(python3 "$STATS" run "$CSV" "$f" "$n" "$p" "$tg" "$rep" "$VICTIM" "$KILL_MS" "$STATUS" "$busy" "$f.cpu")
                log "rep $rep n=$n $p T_gossip=$tg: $summary"
                [ "$STATUS" = ok ] || sed 's/^/    /' "$f.err" | tail -n 10 >&2
            done
            ci=$((ci + 1))
        done
    done
    log "rep $rep/$REPS done ($(($(date +%s) - T_START)) s elapsed)"
done

# --------------------------------------------------------------------------- report
export REPS NS PROTOCOLS TGS SEED QUIET_PCT WARMUP_MS HOLD_EXTRA_MS CMD_TEMPLATE KM_K KM_TO_FACTOR
export_machine
python3 "$STATS" report "$CSV" "$OUT/detection.md"
log "total $(($(date +%s) - T_START)) s"
