#!/usr/bin/env bash
# The MPICH ABI against MPICH, the same binary: a C ping-pong (bench/c/abi_pingpong.c) and a C
# collectives benchmark (bench/c/abi_coll.c), each compiled ONCE by Debian's `mpicc.mpich`, run
# with MPICH's library (mpiexec.mpich, Debian's libmpich.so.12) and with p2pmpi's (p2pmpirun
# --local, our release libmpi.so.12 first on LD_LIBRARY_PATH): only the library path and the
# launcher differ. 2 processes, on shared memory and on TCP (loopback), at normal priority,
# on an idle machine and under load (bench/load.sh: LOAD=cpu, one busy loop per core, the
# default; or LOAD=mixed, a C tree rebuilt by make -j2).
#
# Transports:
#   MPICH 4.0.2 of Debian is ch4:ucx (`mpichversion`). Shared memory is its default between
#   ranks of one host (ch4's POSIX shm module). TCP: MPIR_CVAR_NOLOCAL=1 makes ch4 send to local
#   ranks through the netmod (UCX), and UCX_TLS=tcp, UCX_NET_DEVICES=lo keep UCX on TCP over
#   loopback (otherwise UCX would pick its own shared-memory transports). MPIR_CVAR_CH3_NOLOCAL
#   is ch3's name: this library does not know it (ch3 is not built).
#   p2pmpi: P2PMPI_SHM=1 (shared memory, its default between ranks of one host) or P2PMPI_SHM=0
#   (TCP over loopback).
#
# Usage: bench/abi_speed.sh
# Env:
#   REPS=7            interleaved rounds; every round runs every configuration once, in a
#                     rotating order (medians over the rounds are reported)
#   CONFIGS="..."     subset of {mpich,p2pmpi}-{shm,tcp}-{idle,load} (default: all eight)
#   PP_SIZES=...      ping-pong sizes (default the program's: 8 B ... 4 MiB)
#   COLL_SIZES=...    collective sizes (default the program's: 8,1024,65536,1048576)
#   TARGET_S=0.3      timed seconds per cell (over its batches; 9 batches)
#   NO_BUILD=1        use the existing target/release build (p2pmpirun, libp2pmpi_abi.so)
#   RUN_TIMEOUT=60    seconds allowed for one run (a run that printed "done", everything
#                     measured, gets 5 s more to finish: MPICH over UCX's TCP sometimes
#                     hangs in MPI_Finalize)
#   QUIET_PCT=25, QUIET_BUDGET=120   before each run wait (at most QUIET_BUDGET seconds over the
#                     whole script) while other processes keep the CPUs busier than QUIET_PCT
# Output: the tables on stdout and in bench/out/abi_speed/abi_speed.md, every run's raw lines
# in bench/out/abi_speed/raw/, the machine's load before each run in .../load.txt.
set -uo pipefail

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$BENCH_DIR/.." && pwd)
OUT="$BENCH_DIR/out/abi_speed"
REPS=${REPS:-7}
ALL_CONFIGS="mpich-shm-idle p2pmpi-shm-idle mpich-tcp-idle p2pmpi-tcp-idle mpich-shm-load p2pmpi-shm-load mpich-tcp-load p2pmpi-tcp-load"
CONFIGS=${CONFIGS:-$ALL_CONFIGS}
PP_SIZES=${PP_SIZES:-}
COLL_SIZES=${COLL_SIZES:-}
TARGET_S=${TARGET_S:-0.3}
RUN_TIMEOUT=${RUN_TIMEOUT:-60}
QUIET_PCT=${QUIET_PCT:-25}
QUIET_BUDGET=${QUIET_BUDGET:-120}
MPICH_LIBDIR=/usr/lib/x86_64-linux-gnu

mkdir -p "$OUT"
rm -rf "$OUT/raw"
mkdir -p "$OUT/raw"
# shellcheck source=bench/lib.sh
source "$BENCH_DIR/lib.sh"
announce_machine
for t in mpicc.mpich mpiexec.mpich python3; do
    command -v $t >/dev/null || { log "$t is required (apt-get install mpich libmpich-dev python3)"; exit 1; }
done

# --------------------------------------------------------------------------- build
if [ -z "${NO_BUILD:-}" ]; then
    log "building p2pmpi (release): cargo build --release -p p2pmpi-abi -p p2pmpi-cli"
    (cd "$ROOT" && cargo build --release -p p2pmpi-abi -p p2pmpi-cli) >"$OUT/build.log" 2>&1 \
        || { log "build failed, see $OUT/build.log"; exit 1; }
fi
P2P_RUN="$TARGET_DIR/release/p2pmpirun"
P2P_LIB="$TARGET_DIR/release/libp2pmpi_abi.so"
[ -x "$P2P_RUN" ] && [ -f "$P2P_LIB" ] || { log "no $P2P_RUN or $P2P_LIB (build them, or unset NO_BUILD)"; exit 1; }
OUR_LIBDIR="$OUT/lib"
"$ROOT/scripts/abi-lib.sh" "$OUR_LIBDIR" "$P2P_LIB" || exit 1

# One binary per program, compiled once, run by both libraries.
for p in abi_pingpong abi_coll; do
    mpicc.mpich -O2 -Wall -o "$OUT/$p" "$BENCH_DIR/c/$p.c" >"$OUT/build-$p.log" 2>&1 \
        || { log "mpicc.mpich failed for $p (see $OUT/build-$p.log)"; exit 1; }
done
{
    echo "MPICH's:  $(LD_LIBRARY_PATH=$MPICH_LIBDIR ldd "$OUT/abi_pingpong" | grep -m1 libmpi)"
    echo "p2pmpi's: $(LD_LIBRARY_PATH=$OUR_LIBDIR ldd "$OUT/abi_pingpong" | grep -m1 libmpi)"
} >"$OUT/ldd.txt"
sed 's/^/    /' "$OUT/ldd.txt" >&2

# --------------------------------------------------------------------------- commands
MPICH_TCP_ENV="-genv MPIR_CVAR_NOLOCAL 1 -genv UCX_TLS tcp -genv UCX_NET_DEVICES lo"
# command CONFIG PROGRAM: the command line of one run (arguments appended by the caller).
command_of() {
    local impl=${1%%-*} rest=${1#*-} bin=$OUT/$2
    local tr=${rest%%-*}
    case $impl-$tr in
        mpich-shm) echo "env LD_LIBRARY_PATH=$MPICH_LIBDIR mpiexec.mpich -launcher fork -n 2 $bin" ;;
        mpich-tcp) echo "env LD_LIBRARY_PATH=$MPICH_LIBDIR mpiexec.mpich -launcher fork -iface lo -n 2 $MPICH_TCP_ENV $bin" ;;
        p2pmpi-shm) echo "env LD_LIBRARY_PATH=$OUR_LIBDIR P2PMPI_HOME=/nonexistent P2PMPI_SHM=1 $P2P_RUN --local -n 2 $bin" ;;
        p2pmpi-tcp) echo "env LD_LIBRARY_PATH=$OUR_LIBDIR P2PMPI_HOME=/nonexistent P2PMPI_SHM=0 $P2P_RUN --local -n 2 $bin" ;;
        *) return 1 ;;
    esac
}

LOAD=${LOAD:-cpu}
start_load() { load_start "$LOAD"; }
stop_load() { load_stop; }
trap stop_load EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# job OUTFILE COMMAND...: runs one job (at most RUN_TIMEOUT seconds). Once it printed "done"
# (everything measured) it has 5 s to finish: MPICH over UCX's TCP sometimes hangs in
# MPI_Finalize, which is not measured; such a job is stopped and noted in OUTFILE.err.
job() {
    local f=$1 pid i rc
    shift
    timeout --kill-after=5 "$RUN_TIMEOUT" "$@" >"$f" 2>"$f.err" </dev/null &
    pid=$!
    while kill -0 "$pid" 2>/dev/null; do
        if grep -q '^done$' "$f" 2>/dev/null; then
            for ((i = 0; i < 50; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
            if kill -0 "$pid" 2>/dev/null; then
                echo "abi_speed.sh: stopped 5 s after \"done\" (hung in MPI_Finalize)" >>"$f.err"
                kill -TERM "$pid" 2>/dev/null
            fi
            break
        fi
        sleep 0.2
    done
    wait "$pid"
    rc=$?
    grep -q '^done$' "$f" && return 0
    return $rc
}

# run CONFIG ROUND: both programs once; raw output in raw/CONFIG.ROUND.{pp,coll}.txt.
run() {
    local cfg=$1 rep=$2 f
    [[ $cfg == *-load ]] && start_load
    f="$OUT/raw/$cfg.$rep.pp.txt"
    # shellcheck disable=SC2046
    job "$f" $(command_of "$cfg" abi_pingpong) "$PP_SIZES" 9 "$TARGET_S" \
        || log "round $rep: $cfg ping-pong failed (see $f.err)"
    f="$OUT/raw/$cfg.$rep.coll.txt"
    # shellcheck disable=SC2046
    job "$f" $(command_of "$cfg" abi_coll) "" "$COLL_SIZES" 9 "$TARGET_S" \
        || log "round $rep: $cfg collectives failed (see $f.err)"
    stop_load
}

# --------------------------------------------------------------------------- smoke test
ACTIVE=()
for cfg in $CONFIGS; do
    command_of "$cfg" abi_pingpong >/dev/null || { log "unknown configuration $cfg"; exit 2; }
    [[ $cfg == *-idle ]] || continue
    f="$OUT/raw/smoke-$cfg.txt"
    # shellcheck disable=SC2046
    if timeout 60 $(command_of "$cfg" abi_pingpong) 8 1 0.01 >"$f" 2>"$f.err" </dev/null \
        && grep -q '^abi_pingpong 8 ' "$f"; then
        log "$cfg runs on: $(sed -n 's/^library //p' "$f")"
    else
        log "smoke run of $cfg failed (see $f.err)"; sed 's/^/    /' "$f.err" | head -n 15 >&2; exit 1
    fi
done
for cfg in $CONFIGS; do ACTIVE+=("$cfg"); done
{
    for cfg in "${ACTIVE[@]}"; do echo "$cfg: $(command_of "$cfg" abi_pingpong) \"$PP_SIZES\" 9 $TARGET_S"; done
    echo "collectives: the same with abi_coll \"\" \"$COLL_SIZES\" 9 $TARGET_S"
    echo "load: bench/load.sh $LOAD during the *-load runs"
} >"$OUT/commands.txt"

# --------------------------------------------------------------------------- rounds
# (lib.sh's wait_quiet runs in a subshell, where its budget would not be spent: the same here.)
QUIET_LEFT=$QUIET_BUDGET
wait_quiet_here() {
    busy=$(cpu_busy_pct)
    while [ "$busy" -gt "$QUIET_PCT" ] && [ "$QUIET_LEFT" -gt 0 ]; do
        sleep 1
        QUIET_LEFT=$((QUIET_LEFT - 1))
        busy=$(cpu_busy_pct)
    done
}
: >"$OUT/load.txt"
n=${#ACTIVE[@]}
log "running ${ACTIVE[*]}; $REPS rounds; load average $(cut -d' ' -f1-3 /proc/loadavg)"
for ((rep = 1; rep <= REPS; rep++)); do
    for ((k = 0; k < n; k++)); do
        cfg=${ACTIVE[$(((k + rep - 1) % n))]}
        wait_quiet_here
        echo "$cfg $rep $busy $(cut -d' ' -f1 /proc/loadavg)" >>"$OUT/load.txt"
        run "$cfg" "$rep"
    done
    log "round $rep/$REPS done ($(($(date +%s) - T_START)) s elapsed, load average $(cut -d' ' -f1-3 /proc/loadavg))"
done

# --------------------------------------------------------------------------- report
export OUT REPS QUIET_PCT LOAD
export_machine
export VER_MPICH="MPICH $(mpichversion 2>/dev/null | awk '/Version:/ {print $3; exit}') ($(mpichversion 2>/dev/null | awk '/Device:/ {print $3; exit}'))"
python3 "$BENCH_DIR/abi_speed_report.py"
log "total $(($(date +%s) - T_START)) s"
