#!/usr/bin/env bash
# Replication overhead (thesis "P2P-MPI" §4.8.2): the cost of running every rank as R
# replicas (`p2pmpirun -r R`, rank 0 included), all processes on this host (`--local`).
#
#   1. ping-pong, -n 2, R = 1 2 3 4: exactly ITERS (1000) timed round trips per message size
#      (1 KiB ... 128 KiB); median round trip per (size, R) and its ratio to R = 1;
#   2. collective-heavy programs, -n 4, R = 1 2 3: examples/repl_coll (allreduce + rotating
#      bcast + barrier per step) and `replcheck iterate` (ring exchange per step, allreduce
#      every 10); median wall time of the job (and of the program's loop) and ratio to R = 1.
#
# Usage: bench/replication.sh
# Env:
#   REPS=7            interleaved repetitions (medians are reported)
#   LOADS="idle cpu mixed"  each repetition runs every cell under each of these loads in turn
#                     (bench/load.sh; the report has a section per load and the paired ratios
#                     side by side); LOAD_SETTLE=2 seconds after a load starts
#   SIZES=1024,2048,4096,8192,16384,32768,65536,131072   ping-pong sizes in bytes
#   ITERS=1000        timed round trips per size (the thesis' 1000)
#   WARMUP=50         untimed round trips before them, per size
#   PP_RS="1 2 3 4"   replication degrees of the ping-pong
#   PROG=plain        the ping-pong program: `plain` (examples/plain_pingpong: a plain
#                     blocking ping-pong as a user writes it, no barrier, one untimed batch
#                     then BATCHES batches of ITERS, the median batch reported) or `repl`
#                     (examples/repl_pingpong: a barrier and WARMUP round trips, then ITERS
#                     timed as one batch, whose mean takes in every stall of a loaded machine;
#                     the same fan-out mode)
#   BATCHES=6         timed batches of the `plain` program
#   SHM=1             1: the default transports (shared memory between the processes of this
#                     host, replicated jobs included); 0: every run on TCP (P2PMPI_SHM=0)
#   NOSPIN=1          also run the ping-pong at R = 1 with the waiting policy of an
#                     oversubscribed host (P2PMPI_SPIN_US=0 P2PMPI_YIELD_US=2000); 0 disables
#   FANOUT=1          also run the ping-pong's traffic by hand, without replication, for each
#                     R > 1 of PP_RS (`-n 2R`: each side's first copy sends every message to
#                     every copy of the other side and an 8-byte commit to its own copies);
#                     0 disables; also `repl_coll`'s traffic by hand for each R > 1 of
#                     COLL_RS (`-n 4R`, examples/repl_coll's fan-out mode)
#   COLL_NP=4         processes (ranks) of the collective-heavy programs
#   COLL_RS="1 2 3"   their replication degrees
#   COLL_STEPS=2000   steps of examples/repl_coll (0 skips it)
#   COLL_BYTES=1024   its broadcast size
#   ITERATE_STEPS=2000  steps of `replcheck iterate STEPS 0` (0 skips it)
#   BIND=none         `p2pmpirun --bind-to BIND`: `none` (what a user gets) leaves placement
#                     to the scheduler; `core` pins process K of each job (slot K: rank K / R,
#                     replica K % R; in the fan-out variants copy K % R of logical rank K / R,
#                     the same role) to CPU K mod #CPUs, so that the replicated job and its
#                     traffic by hand place the same roles on the same cores. Pinned figures
#                     are reported beside unpinned ones, never instead: pinning hides the
#                     cost of the replicated job's extra processes contending for the cores
#   RUN_TIMEOUT=60    seconds allowed for one run; a slower run is recorded as failed (timeout)
#   QUIET_PCT=25      before each run, wait while other processes keep the CPUs busier than this
#   QUIET_BUDGET=60   ...but wait at most this many seconds in total over the whole script
#
# Output: a table on stdout, Markdown in bench/out/replication.md, every sample in
# bench/out/replication.csv, each run's output in bench/out/raw/replication/ (`.err`: its
# stderr; `.time`: its wall, user and system seconds by /usr/bin/time, children included), the commands in bench/out/replication-commands.txt, the CPU load before each run in
# bench/out/replication-load.txt, the build log in bench/out/build-replication.log.
set -uo pipefail

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$BENCH_DIR/.." && pwd)
OUT="$BENCH_DIR/out"
RAW="$OUT/raw/replication"
STATS="$BENCH_DIR/replication_stats.py"
CSV="$OUT/replication.csv"
REPS=${REPS:-7}
LOADS=${LOADS:-"idle cpu mixed"}
LOAD_SETTLE=${LOAD_SETTLE:-2}
SIZES=${SIZES:-1024,2048,4096,8192,16384,32768,65536,131072}
ITERS=${ITERS:-1000}
WARMUP=${WARMUP:-50}
PP_RS=${PP_RS:-"1 2 3 4"}
NOSPIN=${NOSPIN:-1}
FANOUT=${FANOUT:-1}
COLL_NP=${COLL_NP:-4}
COLL_RS=${COLL_RS:-"1 2 3"}
COLL_STEPS=${COLL_STEPS:-2000}
COLL_BYTES=${COLL_BYTES:-1024}
ITERATE_STEPS=${ITERATE_STEPS:-2000}
BIND=${BIND:-none}
PROG=${PROG:-plain}
BATCHES=${BATCHES:-6}
SHM=${SHM:-1}
RUN_TIMEOUT=${RUN_TIMEOUT:-60}
QUIET_PCT=${QUIET_PCT:-25}
QUIET_BUDGET=${QUIET_BUDGET:-60}

mkdir -p "$OUT"
rm -rf "$RAW"
mkdir -p "$RAW"
rm -f "$CSV"
# shellcheck source=bench/lib.sh
source "$BENCH_DIR/lib.sh"
announce_machine
command -v python3 >/dev/null || { log "python3 is required"; exit 1; }
[ -x /usr/bin/time ] || { log "/usr/bin/time (GNU time) is required: it measures each run's CPU time"; exit 1; }
case $BIND in core | none) ;; *) log "BIND=$BIND: want core or none"; exit 1 ;; esac
case $PROG in repl | plain) ;; *) log "PROG=$PROG: want repl or plain"; exit 1 ;; esac
case $SHM in 0 | 1) ;; *) log "SHM=$SHM: want 0 or 1"; exit 1 ;; esac

# --------------------------------------------------------------------------- build
# Release binaries, without the test-only `failpoints` feature.
P2P_RUN="$TARGET_DIR/release/p2pmpirun"
EX="$TARGET_DIR/release/examples"
log "building p2pmpi's binaries and examples (release)"
B0=$(date +%s)
if ! (cd "$ROOT" && cargo build --release -p p2pmpi-cli --bins \
        && cargo build --release -p p2pmpi-examples --examples) >"$OUT/build-replication.log" 2>&1 \
    || ! [ -x "$P2P_RUN" ] || ! [ -x "$EX/repl_pingpong" ] || ! [ -x "$EX/plain_pingpong" ] || ! [ -x "$EX/repl_coll" ] || ! [ -x "$EX/replcheck" ]; then
    log "build failed (see out/build-replication.log):"
    grep -m5 '^error' "$OUT/build-replication.log" >&2
    exit 1
fi
log "build done in $(($(date +%s) - B0)) s"

# --------------------------------------------------------------------------- runs
# No grid configuration (P2PMPI_HOME=/nonexistent) and every process on this host.
LAUNCH="$P2P_RUN --local --bind-to $BIND"
NOSPIN_ENV="P2PMPI_SPIN_US=0 P2PMPI_YIELD_US=2000"
# The ping-pong program and its arguments.
PP_CMD="$EX/repl_pingpong $SIZES $ITERS $WARMUP"
[ "$PROG" = plain ] && PP_CMD="$EX/plain_pingpong $SIZES $ITERS $BATCHES"
# One transport for every variant (SHM=0: TCP everywhere; SHM=1: the default, shared memory
# between this host's processes, replicated jobs' included), or the ratios would compare
# transports, not the protocol.
SHM_ENV="P2PMPI_SHM=0"
[ "$SHM" = 1 ] && SHM_ENV="P2PMPI_SHM=1"

# The command of a run: part (pingpong, coll, iterate), R, variant ("", nospin or fanout).
command_of() {
    local part=$1 r=$2 variant=$3 pre="env $SHM_ENV P2PMPI_HOME=/nonexistent "
    [ "$variant" = nospin ] && pre="env $NOSPIN_ENV $SHM_ENV P2PMPI_HOME=/nonexistent "
    case $part/$variant in
        pingpong/fanout) echo "$pre$LAUNCH -n $((2 * r)) -r 1 $PP_CMD" ;;
        pingpong/*) echo "$pre$LAUNCH -n 2 -r $r $PP_CMD" ;;
        coll/fanout) echo "$pre$LAUNCH -n $((COLL_NP * r)) -r 1 $EX/repl_coll $COLL_STEPS $COLL_BYTES $r" ;;
        coll/*) echo "$pre$LAUNCH -n $COLL_NP -r $r $EX/repl_coll $COLL_STEPS $COLL_BYTES" ;;
        iterate/*) echo "$pre$LAUNCH -n $COLL_NP -r $r $EX/replcheck iterate $ITERATE_STEPS 0" ;;
    esac
}

# run_one part r variant rep: one job, timed from outside; appends its rows to the CSV.
run_one() {
    local part=$1 r=$2 variant=$3 rep=$4
    local f="$RAW/$part.r$r${variant:+.$variant}.$rep.txt"
    local cmd busy t0 t1 rc status ms cpu
    cmd=$(command_of "$part" "$r" "$variant")
    busy=$(wait_quiet)
    echo "$part r$r${variant:+ $variant} rep $rep: $busy" >>"$OUT/replication-load.txt"
    t0=${EPOCHREALTIME/[.,]/}
    # shellcheck disable=SC2086
    # /usr/bin/time reports the user and system time of timeout(1) and what it waited for:
    # the launcher and, through it, every process of the job.
    /usr/bin/time -f '%e %U %S' -o "$f.time" timeout --kill-after=5 "$RUN_TIMEOUT" $cmd >"$f" 2>"$f.err" </dev/null
    rc=$?
    t1=${EPOCHREALTIME/[.,]/}
    ms=$(printf '%d.%03d' $(((t1 - t0) / 1000)) $(((t1 - t0) % 1000)))
    # CPU ms = (user + system) s; the last line (GNU time writes "Command exited with ..."
    # first when the status is not 0).
    cpu=$(tail -n 1 "$f.time" 2>/dev/null | awk 'NF == 3 { printf "%.0f", ($2 + $3) * 1000 }')
    case $rc in
        0) status=ok ;;
        124 | 137) status=timeout ;;
        *) status="exit $rc" ;;
    esac
    local np=$COLL_NP
    [ "$part" = pingpong ] && np=2
    [ "$variant" = fanout ] && np=$((np * r))
    python3 "$STATS" run "$CSV" "$part" "$np" \
        "$r" "$variant" "$rep" "$busy" "$ms" "${cpu:--}" "$status" "$f" "$([ "$part" = pingpong ] && echo "$SIZES")" \
        | sed "s/^/[${0##*\/}]   /" >&2
    if [ "$status" != ok ]; then
        log "FAILED: $cmd ($status after $ms ms); stderr (out/raw/replication/${f##*/}.err):"
        sed 's/^/    /' "$f.err" | tail -n 20 >&2
    fi
}

# The cells: "part r variant" ("-" = no variant), in groups ("cell;cell"): a replicated
# job and its traffic by hand form one group, run back to back, so that the pair whose
# ratio is the target shares the machine's conditions of the moment (on this kind of VM,
# periods of a few seconds where everything runs slower come and go).
GROUPS_PP=()
[ "$NOSPIN" = 1 ] && GROUPS_PP+=("pingpong 1 -;pingpong 1 nospin")
for r in $PP_RS; do
    if [ "$r" -gt 1 ] && [ "$FANOUT" = 1 ]; then
        GROUPS_PP+=("pingpong $r -;pingpong $r fanout")
    elif [ "$r" -gt 1 ] || [ "$NOSPIN" != 1 ]; then
        GROUPS_PP+=("pingpong $r -")
    fi
done
GROUPS_COLL=()
for r in $COLL_RS; do
    g=""
    [ "$COLL_STEPS" -gt 0 ] && g="coll $r -"
    [ "$COLL_STEPS" -gt 0 ] && [ "$FANOUT" = 1 ] && [ "$r" -gt 1 ] && g="$g;coll $r fanout"
    [ "$ITERATE_STEPS" -gt 0 ] && g="${g:+$g;}iterate $r -"
    [ -n "$g" ] && GROUPS_COLL+=("$g")
done
CELLS_PP=()
for g in "${GROUPS_PP[@]}"; do IFS=';' read -ra cs <<<"$g"; CELLS_PP+=("${cs[@]}"); done
CELLS_COLL=()
for g in "${GROUPS_COLL[@]}"; do IFS=';' read -ra cs <<<"$g"; CELLS_COLL+=("${cs[@]}"); done

{
    for c in "${CELLS_PP[@]}" "${CELLS_COLL[@]}"; do
        read -r part r variant <<<"$c"
        [ "$variant" = - ] && variant=
        command_of "$part" "$r" "$variant"
    done
} >"$OUT/replication-commands.txt"
: >"$OUT/replication-load.txt"

# A quick smoke run (R = 2, 10 round trips of 1 KiB) to catch a broken command early.
log "smoke test: -n 2 -r 2, 10 round trips"
# shellcheck disable=SC2086  # $LAUNCH is a command prefix
if ! timeout --kill-after=5 "$RUN_TIMEOUT" env P2PMPI_HOME=/nonexistent $LAUNCH -n 2 -r 2 "$EX/repl_pingpong" 1024 10 0 \
        >"$RAW/smoke.txt" 2>"$RAW/smoke.txt.err" </dev/null \
    || ! grep -q '^replpp 1024 10 .* ok$' "$RAW/smoke.txt"; then
    log "smoke test failed (out/raw/replication/smoke.txt.err):"
    sed 's/^/    /' "$RAW/smoke.txt.err" | tail -n 20 >&2
    exit 1
fi

log "REPS=$REPS; ping-pong R in {$PP_RS}$([ "$NOSPIN" = 1 ] && echo " + R=1 nospin")$([ "$FANOUT" = 1 ] && echo " + fan-out"), sizes $SIZES, $ITERS round trips;" \
    "collectives -n $COLL_NP R in {$COLL_RS}"
# shellcheck disable=SC2034  # read by wait_quiet (lib.sh)
QUIET_LEFT=$QUIET_BUDGET
# Interleaved: each repetition runs every cell once, group by group; the starting group
# rotates so that none is always first, and within a pair the order alternates (replicated
# job first on odd repetitions, its traffic by hand first on even ones).
# Each repetition runs all of that under each load of LOADS in turn (the first load rotating),
# the load started before and stopped after its runs; every run at normal priority.
read -ra LOADV <<<"$LOADS"
RAW0=$RAW
trap load_stop EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
for ((rep = 1; rep <= REPS; rep++)); do
  for ((l = 0; l < ${#LOADV[@]}; l++)); do
    load=${LOADV[$(((l + rep - 1) % ${#LOADV[@]}))]}
    case $load in idle | cpu | mixed) ;; *) log "LOADS: unknown load '$load' (idle, cpu, mixed)"; exit 1 ;; esac
    export BENCH_LOAD=$load   # the CSV's load column (replication_stats.py run)
    RAW="$RAW0/$load"
    mkdir -p "$RAW"
    load_start "$load"
    [ "$load" = idle ] || sleep "$LOAD_SETTLE"
    for groups in GROUPS_PP GROUPS_COLL; do
        declare -n list=$groups
        n=${#list[@]}
        for ((k = 0; k < n; k++)); do
            IFS=';' read -ra cs <<<"${list[$(((k + rep - 1) % n))]}"
            # (A group of one, e.g. R = 1 alone with NOSPIN=0, has no second cell.)
            if [ $((rep % 2)) = 0 ] && [ "${#cs[@]}" -gt 1 ] && [[ ${cs[1]} == *fanout ]]; then
                cs=("${cs[1]}" "${cs[0]}" "${cs[@]:2}")
            fi
            for c in "${cs[@]}"; do
                read -r part r variant <<<"$c"
                [ "$variant" = - ] && variant=
                run_one "$part" "$r" "$variant" "$rep"
            done
        done
        unset -n list
    done
    load_stop
  done
    log "rep $rep/$REPS done ($(($(date +%s) - T_START)) s elapsed)"
done

# --------------------------------------------------------------------------- report
export_machine
COMMANDS=$(sed "s|$ROOT/||g" "$OUT/replication-commands.txt")   # paths relative to the repository
export REPS ITERS WARMUP COLL_NP COLL_STEPS ITERATE_STEPS QUIET_PCT COMMANDS BIND LOADS PROG SHM BATCHES
python3 "$STATS" report "$CSV" "$OUT/replication.md"
log "total $(($(date +%s) - T_START)) s"
