# Shared helpers of the benchmark scripts (sourced, not run). Expects `ROOT` and `OUT`.

# The cargo target directory (CARGO_TARGET_DIR honoured, relative to the repository).
TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
case "$TARGET_DIR" in /*) ;; *) TARGET_DIR="$ROOT/$TARGET_DIR" ;; esac

# Progress on standard error, tagged with the script's name.
log() { printf '[%s] %s\n' "${0##*/}" "$*" >&2; }

# Announces the machine at the start of a run.
announce_machine() {
    T_START=$(date +%s)
    log "$(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(uname -srm), $(date -u '+%Y-%m-%d %H:%M UTC')"
}

# install_missing [with-mpich]: installs Open MPI (and MPICH), python3 and gcc from Debian's
# packages when missing, unless NO_INSTALL is set.
install_missing() {
    local need_pkgs=()
    command -v mpicc.openmpi >/dev/null && command -v mpirun.openmpi >/dev/null \
        || need_pkgs+=(openmpi-bin libopenmpi-dev)
    if [ "${1:-}" = with-mpich ]; then
        command -v mpicc.mpich >/dev/null && command -v mpirun.mpich >/dev/null \
            || need_pkgs+=(mpich libmpich-dev)
    fi
    command -v python3 >/dev/null || need_pkgs+=(python3)
    command -v gcc >/dev/null || need_pkgs+=(gcc)
    if [ ${#need_pkgs[@]} -gt 0 ]; then
        if [ -n "${NO_INSTALL:-}" ]; then
            log "missing packages (${need_pkgs[*]}) and NO_INSTALL is set: continuing without them"
        else
            local SUDO=
            [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null && SUDO=sudo
            log "installing: ${need_pkgs[*]}"
            export DEBIAN_FRONTEND=noninteractive
            $SUDO apt-get update -qq >"$OUT/apt.log" 2>&1 \
                && $SUDO apt-get install -y -qq "${need_pkgs[@]}" >>"$OUT/apt.log" 2>&1 \
                || log "apt-get failed (see $OUT/apt.log); continuing with what is there"
        fi
    fi
    command -v python3 >/dev/null || { log "python3 is required"; exit 1; }
}

# The machine may be shared (builds running beside us). Busy-polling benchmarks on few
# cores are very sensitive to that, so before each run sample how busy the CPUs are
# (from /proc/stat over 0.3 s) and wait for a quieter moment, within QUIET_BUDGET seconds.
cpu_busy_pct() {
    local a b
    read -r -a a < <(grep -m1 '^cpu ' /proc/stat)
    sleep 0.3
    read -r -a b < <(grep -m1 '^cpu ' /proc/stat)
    local tot=0 idle i
    for ((i = 1; i < ${#a[@]}; i++)); do tot=$((tot + b[i] - a[i])); done
    idle=$((b[4] - a[4] + b[5] - a[5]))
    [ $tot -gt 0 ] && echo $(((tot - idle) * 100 / tot)) || echo 0
}

# quiet_check sets BUSY (and spends QUIET_LEFT: call it in the script's own shell, not in
# `$(...)`); under a standard load of load_start it only samples, as the CPUs are busy on purpose.
quiet_check() {
    BUSY=$(cpu_busy_pct)
    [ -n "$LOAD_PID" ] && return 0
    while [ "$BUSY" -gt "$QUIET_PCT" ] && [ "$QUIET_LEFT" -gt 0 ]; do
        sleep 1; QUIET_LEFT=$((QUIET_LEFT - 1))
        BUSY=$(cpu_busy_pct)
    done
}
wait_quiet() {
    quiet_check
    echo "$BUSY"
}

# Exports the machine description read by the report writers.
export_machine() {
    export MACHINE_NPROC=$(nproc)
    export MACHINE_CPU=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
    export MACHINE_KERNEL=$(uname -srm)
    export MACHINE_DATE=$(date -u '+%Y-%m-%d %H:%M UTC')
    export VER_OMPI=$(mpirun.openmpi --version 2>/dev/null | head -n1)
    export VER_RUST=$(rustc --version 2>/dev/null)
}

# detector_cpu_sample FILE PID...: appends one line per process to FILE,
# `PID DETECTOR_NS TOTAL_NS WALL_US THREADS`: the CPU time (ns, /proc/PID/task/*/schedstat) of
# its failure-detector thread (named `p2pmpi-kmonitor` or `p2pmpi-fd`), of all its threads, the
# wall clock (unix µs) of the sample and the threads found. Two samples give the detector's
# share of a process (when it has as many threads in both: not exiting meanwhile).
detector_cpu_sample() {
    local f=$1 pid t comm run det tot now nt
    shift
    now=${EPOCHREALTIME/[.,]/}
    for pid in "$@"; do
        det=0 tot=0 nt=0
        for t in /proc/"$pid"/task/*; do
            read -r comm 2>/dev/null <"$t/comm" || continue
            read -r run _ 2>/dev/null <"$t/schedstat" || continue
            tot=$((tot + run)) nt=$((nt + 1))
            case $comm in p2pmpi-kmonitor | p2pmpi-fd) det=$((det + run)) ;; esac
        done
        echo "$pid $det $tot $now $nt"
    done >>"$f"
}

# The standard background loads of bench/load.sh around parts of a run:
# `load_start KIND` (idle, cpu, mixed) starts one in the background, `load_stop` ends it.
LOAD_PID=
load_start() {
    load_stop
    [ "${1:-idle}" = idle ] && return 0
    "$(dirname "${BASH_SOURCE[0]}")/load.sh" "$1" &
    LOAD_PID=$!
}
load_stop() {
    if [ -n "$LOAD_PID" ]; then
        kill -TERM "$LOAD_PID" 2>/dev/null
        wait "$LOAD_PID" 2>/dev/null
        LOAD_PID=
    fi
}
