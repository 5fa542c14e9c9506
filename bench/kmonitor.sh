#!/usr/bin/env bash
# The k-monitor detector on real processes (issue 14, item 5): the issue's bounds measured on
# this host with `p2pmpirun --local --fd kmonitor` and examples/fdwatch.
#
#   crash   N processes, `kill -9` of a random rank other than 0 after a warm-up: every other
#           process must be notified within 100 ms (the connections are reset at once);
#           counts the failure notices flooded (≤ 2kN).
#   freeze  the same with `kill -STOP`: within T_to + 50 ms (silence: T_to without a
#           heartbeat); also with `--confirm` (a second monitor confirms before the notice).
#   cpu     N compute-bound processes (`fdwatch --work`) with `--fd off`, the k-monitor
#           detector and DBRR gossip at the same period: the CPU time of the detector thread
#           (`p2pmpi-kmonitor` / `p2pmpi-fd`, from /proc/PID/task/*/schedstat) ÷ the CPU time
#           of the processes, and the work done per second against `--fd off`.
#   soak    jobs back to back under CPU load (one busy-loop burner per CPU, and the program
#           itself computing) for SOAK_S seconds per T_to in SOAK_TOS, T_hb = T_to/10: any
#           notice, or a job that does not end with 0, is a false detection.
#
# Usage: bench/kmonitor.sh [short|soak|crash|freeze|cpu]
#   short (default)  crash, freeze, cpu, then the soak with SOAK_S=60 per T_to in "250 500 1000"
#   soak             only the soak, SOAK_S=600 at SOAK_TOS=500 (the 10-minute run)
#   crash|freeze|cpu one part
# Env:
#   N=64 K=4 T_HB=100 T_TO=1000   the job and the detector (crash, freeze, cpu)
#   REPS=3                        runs of crash, freeze (each variant), cpu (each variant)
#   WARMUP_MS=2000                wait after the ready lines before the random 0..T_hb wait and the signal
#   CPU_HOLD_MS=20000             length of the compute-bound jobs
#   SOAK_S, SOAK_TOS              as above; SOAK_N=64 processes, SOAK_JOB_S=30 s per job
#   SOAK_EXTRA=                   more p2pmpirun options for the soak's jobs (e.g. --confirm)
#   BURNERS=<nproc>               busy loops during the soak
#   SEED=<time>                   seed of bash's RANDOM (victims, kill times)
#   READY_TIMEOUT=120 QUIET_PCT=25 QUIET_BUDGET=120   as bench/detection.sh
#
# Output: the counts on stderr as it goes, a summary on stdout and in bench/out/kmonitor.md
# (bench/out/kmonitor-soak.md for `soak`), CSVs bench/out/kmonitor-*.csv, every run's output in
# bench/out/kmonitor-raw/, the commands in bench/out/kmonitor-commands.txt.
set -uo pipefail

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$BENCH_DIR/.." && pwd)
OUT="$BENCH_DIR/out"
MODE=${1:-short}
N=${N:-64}
K=${K:-4}
T_HB=${T_HB:-100}
T_TO=${T_TO:-1000}
REPS=${REPS:-3}
WARMUP_MS=${WARMUP_MS:-2000}
CPU_HOLD_MS=${CPU_HOLD_MS:-20000}
SOAK_N=${SOAK_N:-64}
SOAK_JOB_S=${SOAK_JOB_S:-30}
SOAK_EXTRA=${SOAK_EXTRA:-}
BURNERS=${BURNERS:-$(nproc)}
SEED=${SEED:-$(date +%s)}
READY_TIMEOUT=${READY_TIMEOUT:-120}
QUIET_PCT=${QUIET_PCT:-25}
QUIET_BUDGET=${QUIET_BUDGET:-120}
case $MODE in
    short) SOAK_S=${SOAK_S:-60} SOAK_TOS=${SOAK_TOS:-"250 500 1000"}; PARTS="crash freeze cpu soak" ;;
    soak) SOAK_S=${SOAK_S:-600} SOAK_TOS=${SOAK_TOS:-500}; PARTS=soak ;;
    crash | freeze | cpu) SOAK_S=0 SOAK_TOS=''; PARTS=$MODE ;;
    *) echo "usage: $0 [short|soak|crash|freeze|cpu]" >&2; exit 2 ;;
esac
REPORT=kmonitor
[ "$MODE" = short ] || REPORT=kmonitor-$MODE
RAW="$OUT/kmonitor-raw"
STATS="$BENCH_DIR/detection_stats.py"
KSTATS="$BENCH_DIR/kmonitor_stats.py"

mkdir -p "$OUT" "$RAW"
# shellcheck source=bench/lib.sh
source "$BENCH_DIR/lib.sh"
announce_machine
command -v python3 >/dev/null || { log "python3 is required (parsing and statistics)"; exit 1; }
[ "$T_TO" -gt "$T_HB" ] || { log "T_TO must be longer than T_HB"; exit 2; }

# --------------------------------------------------------------------------- build
P2P_RUN="$TARGET_DIR/release/p2pmpirun"
P2P_BIN="$TARGET_DIR/release/examples/fdwatch"
log "building p2pmpirun and examples/fdwatch (release)"
if ! (cd "$ROOT" && cargo build --release -p p2pmpi-cli --bins \
        && cargo build --release -p p2pmpi-examples --example fdwatch) >"$OUT/build-kmonitor.log" 2>&1 \
    || [ ! -x "$P2P_RUN" ] || [ ! -x "$P2P_BIN" ]; then
    log "could not build p2pmpirun + example fdwatch: $(grep -m1 '^error' "$OUT/build-kmonitor.log" | cut -c1-160)"
    log "full log: $OUT/build-kmonitor.log"
    exit 1
fi

sleep_ms() { sleep "$(($1 / 1000)).$(printf '%03d' $(($1 % 1000)))"; }
now_us() { echo "${EPOCHREALTIME/[.,]/}"; }

JOB=
BURNER_PIDS=()
stop_all() {
    if [ -n "$JOB" ]; then
        kill -TERM "$JOB" 2>/dev/null
        wait "$JOB" 2>/dev/null
        JOB=
    fi
    stop_burners
}
start_burners() {
    local i
    for ((i = 0; i < BURNERS; i++)); do
        bash -c 'while :; do :; done' &
        BURNER_PIDS+=($!)
    done
}
stop_burners() {
    local p
    for p in "${BURNER_PIDS[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
    BURNER_PIDS=()
}
trap stop_all EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

QUIET_LEFT=$QUIET_BUDGET
quiet() { # sets BUSY, accounting for the time waited
    local t0=$SECONDS
    BUSY=$(wait_quiet)
    QUIET_LEFT=$((QUIET_LEFT - (SECONDS - t0)))
    [ $QUIET_LEFT -ge 0 ] || QUIET_LEFT=0
}

# start_job outfile limit_s p2pmpirun-args... -- fdwatch-args...: starts the job in the
# background (JOB), waits for every ready line (n from -n). Sets STATUS ("" or "not ready"),
# PIDS (by rank) and T_READY (unix µs: the earliest ready line).
start_job() {
    local outf=$1 limit=$2 n deadline ready
    shift 2
    local -a args=()
    while [ "$1" != -- ]; do args+=("$1"); shift; done
    shift
    n=${args[1]}
    echo "P2PMPI_HOME=/nonexistent p2pmpirun ${args[*]} fdwatch $*" >>"$OUT/kmonitor-commands.txt"
    P2PMPI_HOME=/nonexistent timeout --kill-after=5 "$limit" "$P2P_RUN" "${args[@]}" "$P2P_BIN" "$@" \
        >"$outf" 2>"$outf.err" </dev/null &
    JOB=$!
    STATUS=
    deadline=$((SECONDS + READY_TIMEOUT))
    while :; do
        ready=$(grep -c ' ready pid ' "$outf" 2>/dev/null)
        [ "${ready:-0}" -ge "$n" ] && break
        if ! kill -0 "$JOB" 2>/dev/null || [ $SECONDS -ge $deadline ]; then
            STATUS="not ready"; break
        fi
        sleep 0.02
    done
    # The hold of each rank starts at its ready line: the earliest one ends first.
    T_READY=$(awk '$1 == "rank" && $3 == "ready" { print $NF }' "$outf" | sort -n | head -n 1)
    T_READY=$((${T_READY:-$(($(now_us) / 1000))} * 1000))
    mapfile -t PIDS < <(awk '$1 == "rank" && $3 == "ready" { print $2, $5 }' "$outf" | sort -n | awk '{ print $2 }')
    [ -n "$STATUS" ] && kill -TERM "$JOB" 2>/dev/null
}

# end_job: waits for the job; sets STATUS unless already set.
end_job() {
    local rc
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

# sample_before_end cpufile hold_ms: sleeps until a quarter of the hold (at least 0.7 s)
# before the first rank's hold ends, then samples.
sample_before_end() {
    local margin=$(($2 / 4))
    [ $margin -ge 700 ] || margin=700
    local left=$(((T_READY + ($2 - margin) * 1000 - $(now_us)) / 1000))
    [ $left -gt 0 ] && sleep_ms $left
    detector_cpu_sample "$1" "${PIDS[@]}"
}

km_args() { # t_hb t_to [extra...]
    local hb=$1 to=$2
    shift 2
    echo "--fd kmonitor --k $K --t-hb $hb --t-to $to $*"
}

# --------------------------------------------------------------------------- crash, freeze
# signal_run label sig rep [extra p2pmpirun args]: one job of N, `kill -SIG` of a random
# rank other than 0 after the warm-up, parsed into kmonitor-LABEL.csv by detection_stats.py.
signal_run() {
    local label=$1 sig=$2 rep=$3 extra=${4:-} f victim pid us kill_ms hold summary
    f="$RAW/$label.$rep.txt"
    hold=$((WARMUP_MS + T_HB + T_TO * 2 + 3000))
    quiet
    # shellcheck disable=SC2046 # km_args: words
    start_job "$f" $((hold / 1000 + READY_TIMEOUT + 30)) -n "$N" --local $(km_args "$T_HB" "$T_TO" $extra) \
        -- --notify --hold "$hold"
    victim='' kill_ms=''
    : >"$f.cpu"
    if [ -z "$STATUS" ]; then
        detector_cpu_sample "$f.cpu" "${PIDS[@]}"
        victim=$((1 + RANDOM % (N - 1)))
        pid=${PIDS[$victim]}
        sleep_ms $((WARMUP_MS + RANDOM % (T_HB + 1)))
        us=$(now_us)
        kill_ms=$(printf '%d.%03d' $((us / 1000)) $((us % 1000)))
        kill "-$sig" "$pid" 2>/dev/null || { log "could not signal rank $victim (pid '$pid')"; victim='' kill_ms=''; }
        sample_before_end "$f.cpu" "$hold"
        # A stopped process is killed once its hold is over (it was declared failed).
        [ "$sig" = STOP ] && { sleep 1; kill -9 "$pid" 2>/dev/null; }
    fi
    end_job
    summary=$(KM_K=$K KM_TO_FACTOR=$((T_TO / T_HB)) python3 "$STATS" run "$OUT/kmonitor-$label.csv" "$f" \
        "$N" KMONITOR "$T_HB" "$rep" "$victim" "$kill_ms" "$STATUS" "$BUSY" "$f.cpu")
    log "$label rep $rep: $summary"
    [ "$STATUS" = ok ] || sed 's/^/    /' "$f.err" | tail -n 10 >&2
}

run_crash() {
    python3 "$STATS" header >"$OUT/kmonitor-crash.csv"
    local rep
    for ((rep = 1; rep <= REPS; rep++)); do signal_run crash KILL "$rep"; done
}

run_freeze() {
    python3 "$STATS" header >"$OUT/kmonitor-freeze.csv"
    python3 "$STATS" header >"$OUT/kmonitor-freeze-confirm.csv"
    local rep
    for ((rep = 1; rep <= REPS; rep++)); do
        signal_run freeze STOP "$rep"
        signal_run freeze-confirm STOP "$rep" --confirm
    done
}

# --------------------------------------------------------------------------- cpu
run_cpu() {
    local csv="$OUT/kmonitor-cpu.csv" rep v i f args
    echo "variant,rep,rank,worked_rounds,worked_ms,detector_cpu_ns,process_cpu_ns,cpu_wall_us,run_status,busy_pct" >"$csv"
    local -a variants=(off kmonitor dbrr)
    for ((rep = 1; rep <= REPS; rep++)); do
        for ((i = 0; i < ${#variants[@]}; i++)); do
            v=${variants[$(((i + rep - 1) % ${#variants[@]}))]}
            case $v in
                off) args="--fd off" ;;
                kmonitor) args=$(km_args "$T_HB" "$T_TO") ;;
                dbrr) args="--fd DBRR --t-gossip $T_HB" ;;
            esac
            f="$RAW/cpu.$v.$rep.txt"
            quiet
            # shellcheck disable=SC2086 # args: words
            start_job "$f" $((CPU_HOLD_MS / 1000 + READY_TIMEOUT + 60)) -n "$N" --local $args -- --work --hold "$CPU_HOLD_MS"
            : >"$f.cpu"
            if [ -z "$STATUS" ]; then
                detector_cpu_sample "$f.cpu" "${PIDS[@]}"
                sample_before_end "$f.cpu" "$CPU_HOLD_MS"
            fi
            end_job
            python3 "$KSTATS" cpu-run "$csv" "$f" "$v" "$rep" "$STATUS" "$BUSY" >&2
        done
    done
}

# --------------------------------------------------------------------------- soak
run_soak() {
    local csv="$OUT/kmonitor-soak.csv" to hb end job f n
    echo "t_to_ms,t_hb_ms,job,n,status,notices,ready,seconds,busy_pct" >"$csv"
    for to in $SOAK_TOS; do
        hb=$((to / 10))
        [ $hb -ge 1 ] || hb=1
        quiet
        start_burners
        log "soak: T_to $to ms, T_hb $hb ms $SOAK_EXTRA, $SOAK_N processes computing, $BURNERS burners, $SOAK_S s of jobs of $SOAK_JOB_S s"
        end=$((SECONDS + SOAK_S))
        job=0
        while [ $SECONDS -lt $end ]; do
            job=$((job + 1))
            f="$RAW/soak.to$to.$job.txt"
            local t0=$SECONDS
            # shellcheck disable=SC2046 # km_args: words
            start_job "$f" $((SOAK_JOB_S + READY_TIMEOUT + 60)) -n "$SOAK_N" --local $(km_args "$hb" "$to" $SOAK_EXTRA) \
                -- --notify --work --hold $((SOAK_JOB_S * 1000))
            end_job
            n=$(grep -c ' notified: ' "$f")
            echo "$to,$hb,$job,$SOAK_N,$STATUS,$n,$(grep -c ' ready pid ' "$f"),$((SECONDS - t0)),$BUSY" >>"$csv"
            log "soak T_to $to job $job: $STATUS, $n notices ($((SECONDS - t0)) s)"
            [ "$n" -eq 0 ] || grep ' notified: ' "$f" | head -n 5 | sed 's/^/    /' >&2
            [ "$STATUS" = ok ] || sed 's/^/    /' "$f.err" | tail -n 5 >&2
        done
        stop_burners
    done
}

# --------------------------------------------------------------------------- run
: >"$OUT/kmonitor-commands.txt"
RANDOM=$SEED
log "MODE=$MODE N=$N K=$K T_HB=$T_HB T_TO=$T_TO REPS=$REPS SEED=$SEED SOAK_S=$SOAK_S SOAK_TOS=\"$SOAK_TOS\""
for part in $PARTS; do
    rm -f "$RAW"/"$part"*
    "run_$part"
    log "$part done ($(($(date +%s) - T_START)) s elapsed)"
done

export MODE PARTS N K T_HB T_TO REPS SEED WARMUP_MS CPU_HOLD_MS SOAK_S SOAK_TOS SOAK_N SOAK_JOB_S SOAK_EXTRA BURNERS QUIET_PCT
export_machine
python3 "$KSTATS" report "$OUT" "$OUT/$REPORT.md"
log "total $(($(date +%s) - T_START)) s"
