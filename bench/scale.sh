#!/usr/bin/env bash
# Scale of a job on one grid: start-up, a barrier and an all-reduce for N = 16 .. 256 ranks,
# p2pmpi on a local grid of 16 peers (a supernode and 16 MPDs, peer i on 127.0.0.(i+1)) against
# Open MPI's `mpirun --mca btl tcp,self` with the same ranks, all on this host (oversubscribed:
# 256 ranks on a few cores), interleaved, at normal priority.
#
# The programs: bench/c/scale.c (Open MPI, compiled by mpicc.openmpi) and its twin
# crates/p2pmpi-examples/examples/scale_bench.rs (p2pmpi's Rust API; same algorithm, same
# output line). Each rank notes when its main starts and when MPI_Init returns; the script
# passes its clock just before running the launcher (T0), so that rank 0 reports
#   init_ms  launch to MPI_Init returned on every rank (main_ms: to the last rank's main);
# then the first barrier (it may open connections), ITERS timed back-to-back barriers and
# all-reduces (sum of doubles) per size, each timed on every rank: the slowest rank's time of
# each operation, the median over operations. The script also times the whole command (wall).
#
# Usage: bench/scale.sh            (smoke, seconds: RANKS=16 REPS=1 ITERS=5 bench/scale.sh)
# Env:
#   RANKS="16 64 128 256"  job sizes (N)
#   REPS=3          interleaved repetitions: each runs every (N, implementation) once, the
#                   implementation going first rotating; medians and medians of paired ratios
#   IMPLS="p2pmpi ompi"  subset/order of: p2pmpi ompi
#   GRID_PEERS=16   peers of the local grid...
#   GRID_PROCS=16   ...and processes each accepts per job (16 x 16 = 256)
#   ITERS=20        timed operations of each kind per run
#   SIZES=8,65536   all-reduce sizes, bytes per rank
#   OMPI_YIELD=1    give Open MPI `--mca mpi_yield_when_idle 1` when N exceeds the cores
#   RUN_TIMEOUT=600 seconds allowed for one run; a slower one is recorded as failed
#   WARMUP=1        one untimed run per implementation at the smallest N first (file caches)
#   NO_INSTALL=1    never run apt-get
#   QUIET_PCT=25, QUIET_BUDGET=60  before each run, wait (at most QUIET_BUDGET s over the
#                   script) while other processes keep the CPUs busier than QUIET_PCT
#
# Output: a table on stdout, Markdown in bench/out/scale.md, every sample in
# bench/out/scale.csv, every run's output in bench/out/scale-raw/, the grid's state and logs
# in bench/out/scale-grid/.
set -uo pipefail

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$BENCH_DIR/.." && pwd)
OUT="$BENCH_DIR/out"
RAW="$OUT/scale-raw"
GRID="$OUT/scale-grid"
RANKS=${RANKS:-"16 64 128 256"}
REPS=${REPS:-3}
IMPLS=${IMPLS:-"p2pmpi ompi"}
GRID_PEERS=${GRID_PEERS:-16}
GRID_PROCS=${GRID_PROCS:-16}
ITERS=${ITERS:-20}
SIZES=${SIZES:-8,65536}
OMPI_YIELD=${OMPI_YIELD:-1}
RUN_TIMEOUT=${RUN_TIMEOUT:-600}
WARMUP=${WARMUP:-1}
QUIET_PCT=${QUIET_PCT:-25}
QUIET_BUDGET=${QUIET_BUDGET:-60}

mkdir -p "$OUT"
rm -rf "$RAW"
mkdir -p "$RAW"
# shellcheck source=bench/lib.sh
source "$BENCH_DIR/lib.sh"
announce_machine
# shellcheck disable=SC2119  # no argument: Open MPI only
install_missing

# --------------------------------------------------------------------------- build
declare -A CMD      # implementation -> command; {n} = ranks, {t0} = launch time (unix µs)
declare -A SKIP     # implementation -> why it is skipped
want() { [[ " $IMPLS " == *" $1 "* ]]; }
NPROC=$(nproc)

if want ompi; then
    if command -v mpicc.openmpi >/dev/null \
        && mpicc.openmpi -O2 -Wall -o "$OUT/scale_ompi" "$BENCH_DIR/c/scale.c" >"$OUT/build-scale-ompi.log" 2>&1; then
        # ob1 + the TCP BTL (self for a rank to itself), runtime and MPI traffic on loopback.
        CMD[ompi]="mpirun.openmpi --allow-run-as-root --oversubscribe -np {n} {yield}--mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo $OUT/scale_ompi {t0} $ITERS $SIZES"
    else
        SKIP[ompi]="mpicc.openmpi missing or compile of c/scale.c failed (see out/build-scale-ompi.log)"
    fi
fi

P2P_CLI="$TARGET_DIR/release/p2pmpi"
if want p2pmpi; then
    P2P_RUN="$TARGET_DIR/release/p2pmpirun"
    P2P_BIN="$TARGET_DIR/release/examples/scale_bench"
    log "building p2pmpi's binaries and examples/scale_bench (release)"
    if (cd "$ROOT" && cargo build --release -p p2pmpi-cli --bins -p p2pmpi-examples --example scale_bench) \
            >"$OUT/build-scale-p2pmpi.log" 2>&1 && [ -x "$P2P_CLI" ] && [ -x "$P2P_RUN" ] && [ -x "$P2P_BIN" ]; then
        CMD[p2pmpi]="env P2PMPI_HOME=$GRID/peer1 $P2P_RUN -n {n} $P2P_BIN {t0} $ITERS $SIZES"
    else
        why=$(grep -m1 '^error' "$OUT/build-scale-p2pmpi.log" 2>/dev/null | cut -c1-160)
        SKIP[p2pmpi]="could not build p2pmpi's binaries + example scale_bench${why:+ ($why)}; see out/build-scale-p2pmpi.log"
    fi
fi

# --------------------------------------------------------------------------- local grid
GRID_START_CMD="$P2P_CLI local-grid start --peers $GRID_PEERS --procs $GRID_PROCS --dir $GRID"
GRID_STOP_CMD="$P2P_CLI local-grid stop --dir $GRID"
GRID_STARTED=
stop_grid() {
    [ -n "$GRID_STARTED" ] || return 0
    GRID_STARTED=
    log "stopping the local grid"
    timeout --kill-after=5 60 "$P2P_CLI" local-grid stop --dir "$GRID" >"$OUT/scale-grid-stop.log" 2>&1 \
        || log "local-grid stop failed (see out/scale-grid-stop.log)"
}
trap stop_grid EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

GRID_START_MS=
if want p2pmpi && [ -z "${SKIP[p2pmpi]:-}" ]; then
    if [ -e "$GRID/grid.json" ]; then
        log "stopping a local grid left in $GRID"
        timeout --kill-after=5 60 "$P2P_CLI" local-grid stop --dir "$GRID" >"$OUT/scale-grid-stop.log" 2>&1
    fi
    log "starting a local grid: $GRID_PEERS peers x $GRID_PROCS processes in $GRID"
    g0=${EPOCHREALTIME/[.,]/}
    if timeout --kill-after=5 120 "$P2P_CLI" local-grid start --peers "$GRID_PEERS" --procs "$GRID_PROCS" \
            --dir "$GRID" >"$OUT/scale-grid-start.log" 2>&1 </dev/null; then
        GRID_STARTED=1
        GRID_START_MS=$(((${EPOCHREALTIME/[.,]/} - g0) / 1000))
        log "local grid up in $GRID_START_MS ms"
    else
        [ -e "$GRID/grid.json" ] && GRID_STARTED=1 && stop_grid
        SKIP[p2pmpi]="local-grid start failed (see out/scale-grid-start.log)"
        tail -n 15 "$OUT/scale-grid-start.log" | sed 's/^/    /' >&2
    fi
    for n in $RANKS; do
        [ "$n" -le $((GRID_PEERS * GRID_PROCS)) ] \
            || log "WARNING: N=$n is more than the grid's $((GRID_PEERS * GRID_PROCS)) processes"
    done
fi

# --------------------------------------------------------------------------- runs
# run_one impl n outfile: one job; sets LINE (the program's `scale ...` line, or empty), WALL
# (ms of the whole command) and STATUS (ok, exit <rc>, timeout, no line, or wrong result).
run_one() {
    local impl=$1 n=$2 outf=$3 y= t0 t1 rc cmd
    [ "$OMPI_YIELD" = 1 ] && [ "$n" -gt "$NPROC" ] && y="--mca mpi_yield_when_idle 1 "
    t0=${EPOCHREALTIME/[.,]/}
    cmd=${CMD[$impl]//\{n\}/$n}
    cmd=${cmd//\{yield\}/$y}
    cmd=${cmd//\{t0\}/$t0}
    echo "$cmd" >"$outf.cmd"
    # shellcheck disable=SC2086
    timeout --kill-after=5 "$RUN_TIMEOUT" $cmd >"$outf" 2>"$outf.err" </dev/null
    rc=$?
    t1=${EPOCHREALTIME/[.,]/}
    WALL=$(printf '%d.%03d' $(((t1 - t0) / 1000)) $(((t1 - t0) % 1000)))
    LINE=$(grep -m1 "^scale np=$n " "$outf")
    if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then STATUS=timeout
    elif [ $rc -ne 0 ]; then STATUS="exit $rc"
    elif [ -z "$LINE" ]; then STATUS="no line"
    elif [[ $LINE != *" errors=0" ]]; then STATUS="wrong result"
    else STATUS=ok
    fi
}

ACTIVE=()
for impl in $IMPLS; do
    if [ -n "${SKIP[$impl]:-}" ]; then
        # Under CI a missing tool is a failure, never a skip.
        [ "${CI:-}" != true ] || { log "$impl cannot run: ${SKIP[$impl]} (CI=true: failing)"; exit 1; }
        log "SKIP $impl: ${SKIP[$impl]}"
        continue
    fi
    [ -n "${CMD[$impl]:-}" ] || { log "SKIP $impl: unknown implementation"; SKIP[$impl]="unknown"; continue; }
    ACTIVE+=("$impl")
done
[ ${#ACTIVE[@]} -gt 0 ] || { log "nothing to run"; exit 1; }

CSV="$OUT/scale.csv"
echo "impl,n,rep,wall_ms,status,line" >"$CSV"
N_MIN=$(printf '%s\n' $RANKS | sort -n | head -n1)
if [ "$WARMUP" = 1 ]; then
    for impl in "${ACTIVE[@]}"; do
        run_one "$impl" "$N_MIN" "$RAW/$impl.warmup.txt"
        echo "$impl,$N_MIN,0,$WALL,warmup $STATUS,$LINE" >>"$CSV"
        log "warm-up $impl N=$N_MIN: $STATUS, $WALL ms"
    done
fi

QUIET_LEFT=$QUIET_BUDGET
: >"$OUT/scale-load.txt"
log "running ${ACTIVE[*]}, N $RANKS, REPS=$REPS, ITERS=$ITERS"
na=${#ACTIVE[@]}
for ((rep = 1; rep <= REPS; rep++)); do
    ni=0
    for n in $RANKS; do
        for ((k = 0; k < na; k++)); do
            impl=${ACTIVE[$(((k + rep - 1 + ni) % na))]}
            quiet_check
            echo "$impl $n $rep $BUSY" >>"$OUT/scale-load.txt"
            f="$RAW/$impl.n$n.$rep.txt"
            run_one "$impl" "$n" "$f"
            echo "$impl,$n,$rep,$WALL,$STATUS,$LINE" >>"$CSV"
            if [ "$STATUS" = ok ]; then
                log "rep $rep $impl N=$n: wall $WALL ms; ${LINE#scale }"
            else
                log "rep $rep $impl N=$n: FAILED ($STATUS after $WALL ms, see $f.err)"
                tail -n 5 "$f.err" | sed 's/^/    /' >&2
            fi
        done
        ni=$((ni + 1))
    done
    log "rep $rep/$REPS done ($(($(date +%s) - T_START)) s elapsed)"
done
stop_grid

# --------------------------------------------------------------------------- report
CMD_P2P=${CMD[p2pmpi]:-}
CMD_OMPI=${CMD[ompi]:-}
export OUT CSV RANKS REPS ITERS QUIET_PCT GRID_PEERS GRID_PROCS GRID_START_MS GRID_START_CMD CMD_P2P CMD_OMPI NPROC
export_machine
python3 "$BENCH_DIR/scale_report.py"
log "total $(($(date +%s) - T_START)) s"
