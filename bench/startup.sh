#!/usr/bin/env bash
# Start-up benchmark: wall-clock time of a whole tiny job (launch, MPI_Init, one line per
# rank, barrier, finalize, exit), p2pmpi on a local grid vs Open MPI, N = 1..16 processes
# on one host.
#
# Usage: bench/startup.sh
# Env:
#   REPS=5            interleaved timed repetitions of every (N, implementation); medians reported
#   NS="1 2 4 8 16"   process counts
#   IMPLS="p2pmpi ompi"  subset/order of: p2pmpi ompi
#   GRID_PEERS=8      peers of the local grid started for p2pmpi...
#   GRID_PROCS=2      ...and processes each peer accepts per job (8 x 2 = 16 processes)
#   NO_INSTALL=1      never run apt-get
#   RUN_TIMEOUT=60    seconds allowed for one run; a slower run is recorded as failed
#   QUIET_PCT=25      before each run, wait while other processes keep the CPUs busier than this
#   QUIET_BUDGET=60   ...but wait at most this many seconds in total over the whole script
#
# Output: a table on stdout, Markdown in bench/out/startup.md, all samples (warm-ups as
# rep 0) in bench/out/startup.csv, every run's output in bench/out/startup-raw/, build logs
# in bench/out/build-startup-*.log, the grid's state and logs in bench/out/startup-grid/.
set -uo pipefail

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$BENCH_DIR/.." && pwd)
OUT="$BENCH_DIR/out"
RAW="$OUT/startup-raw"
GRID="$OUT/startup-grid"
REPS=${REPS:-5}
NS=${NS:-"1 2 4 8 16"}
IMPLS=${IMPLS:-"p2pmpi ompi"}
GRID_PEERS=${GRID_PEERS:-8}
GRID_PROCS=${GRID_PROCS:-2}
RUN_TIMEOUT=${RUN_TIMEOUT:-60}
QUIET_PCT=${QUIET_PCT:-25}
QUIET_BUDGET=${QUIET_BUDGET:-60}


mkdir -p "$OUT"
rm -rf "$RAW"
mkdir -p "$RAW"
# shellcheck source=bench/lib.sh
source "$BENCH_DIR/lib.sh"
announce_machine

# --------------------------------------------------------------------------- install
# shellcheck disable=SC2119  # no argument: Open MPI only, not MPICH
install_missing

# --------------------------------------------------------------------------- build
declare -A CMD      # implementation -> command, "{n}" = process count
declare -A SKIP     # implementation -> reason it is skipped

want() { [[ " $IMPLS " == *" $1 "* ]]; }

if want ompi; then
    if command -v mpicc.openmpi >/dev/null \
        && mpicc.openmpi -O2 -Wall -o "$OUT/startup_ompi" "$BENCH_DIR/c/startup.c" >"$OUT/build-startup-ompi.log" 2>&1; then
        # The flags of pingpong.sh and collectives.sh: ob1 + TCP BTL on loopback, runtime
        # (OOB) on loopback too; --oversubscribe as N goes beyond the cores.
        CMD[ompi]="mpirun.openmpi --allow-run-as-root --oversubscribe -np {n} --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo $OUT/startup_ompi"
    else
        SKIP[ompi]="mpicc.openmpi missing or compile of c/startup.c failed (see out/build-startup-ompi.log)"
    fi
fi

P2P_CLI="$TARGET_DIR/release/p2pmpi"
GRID_STARTED=
if want p2pmpi; then
    P2P_RUN="$TARGET_DIR/release/p2pmpirun"
    P2P_BIN="$TARGET_DIR/release/examples/whereami"
    log "building p2pmpi's binaries and examples/whereami (release)"
    if (cd "$ROOT" && cargo build --release -p p2pmpi-cli --bins \
            && cargo build --release -p p2pmpi-examples --example whereami) >"$OUT/build-startup-p2pmpi.log" 2>&1 \
        && [ -x "$P2P_CLI" ] && [ -x "$P2P_RUN" ] && [ -x "$P2P_BIN" ]; then
        CMD[p2pmpi]="env P2PMPI_HOME=$GRID/peer1 $P2P_RUN -n {n} $P2P_BIN"
    else
        why=$(grep -m1 '^error' "$OUT/build-startup-p2pmpi.log" 2>/dev/null | cut -c1-160)
        SKIP[p2pmpi]="could not build p2pmpi, p2pmpirun + example whereami${why:+ ($why)}; full log: out/build-startup-p2pmpi.log"
    fi
fi

# --------------------------------------------------------------------------- local grid
GRID_START_CMD="$P2P_CLI local-grid start --peers $GRID_PEERS --procs $GRID_PROCS --dir $GRID"
GRID_STOP_CMD="$P2P_CLI local-grid stop --dir $GRID"
stop_grid() {
    [ -n "$GRID_STARTED" ] || return 0
    GRID_STARTED=
    log "stopping the local grid"
    timeout --kill-after=5 60 "$P2P_CLI" local-grid stop --dir "$GRID" >"$OUT/startup-grid-stop.log" 2>&1 \
        || log "local-grid stop failed (see out/startup-grid-stop.log)"
}
trap stop_grid EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

GRID_START_MS=
if want p2pmpi && [ -z "${SKIP[p2pmpi]:-}" ]; then
    # A grid left behind by an interrupted run would make `start` refuse: stop it first.
    if [ -e "$GRID/grid.json" ]; then
        log "stopping a local grid left in $GRID"
        timeout --kill-after=5 60 "$P2P_CLI" local-grid stop --dir "$GRID" >"$OUT/startup-grid-stop.log" 2>&1
    fi
    log "starting a local grid: $GRID_PEERS peers x $GRID_PROCS processes in $GRID"
    g0=${EPOCHREALTIME/[.,]/}
    if timeout --kill-after=5 120 "$P2P_CLI" local-grid start --peers "$GRID_PEERS" --procs "$GRID_PROCS" \
            --dir "$GRID" >"$OUT/startup-grid-start.log" 2>&1 </dev/null; then
        GRID_STARTED=1
        GRID_START_MS=$(((${EPOCHREALTIME/[.,]/} - g0) / 1000))
        log "local grid up in $GRID_START_MS ms"
    else
        # It may have started part of the grid before failing (or timing out).
        [ -e "$GRID/grid.json" ] && GRID_STARTED=1 && stop_grid
        SKIP[p2pmpi]="local-grid start failed (see out/startup-grid-start.log)"
        sed 's/^/    /' "$OUT/startup-grid-start.log" | tail -n 15 >&2
    fi
fi
for n in $NS; do
    if want p2pmpi && [ "$n" -gt $((GRID_PEERS * GRID_PROCS)) ]; then
        log "WARNING: N=$n is more than the grid's $((GRID_PEERS * GRID_PROCS)) processes"
    fi
done

# --------------------------------------------------------------------------- runs
# run_one impl n outfile: runs one job, sets MS (wall-clock ms, 3 decimals) and STATUS
# (ok, exit <rc>, timeout, or output: exit 0 but not the N lines "rank R of N").
run_one() {
    local impl=$1 n=$2 outf=$3
    local cmd=${CMD[$impl]//\{n\}/$n}
    local t0 t1 rc lines
    t0=${EPOCHREALTIME/[.,]/}
    # shellcheck disable=SC2086
    timeout --kill-after=5 "$RUN_TIMEOUT" $cmd >"$outf" 2>"$outf.err" </dev/null
    rc=$?
    t1=${EPOCHREALTIME/[.,]/}
    MS=$(printf '%d.%03d' $(((t1 - t0) / 1000)) $(((t1 - t0) % 1000)))
    if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
        STATUS=timeout
    elif [ $rc -ne 0 ]; then
        STATUS="exit $rc"
    else
        lines=$(grep -Eo "^rank [0-9]+ of $n( |\$)" "$outf" | awk '{print $2}' | sort -u | wc -l)
        if [ "$lines" -eq "$n" ]; then STATUS=ok; else STATUS="output"; fi
    fi
}

ACTIVE=()
for impl in $IMPLS; do
    if [ -n "${SKIP[$impl]:-}" ]; then
        log "SKIP $impl: ${SKIP[$impl]}"; continue
    fi
    if [ -z "${CMD[$impl]:-}" ]; then
        log "SKIP $impl: unknown implementation"; SKIP[$impl]="unknown implementation"; continue
    fi
    ACTIVE+=("$impl")
done
[ ${#ACTIVE[@]} -gt 0 ] || { log "nothing to run"; exit 1; }

CSV="$OUT/startup.csv"
echo "impl,n,rep,ms,status" >"$CSV"
{
    for impl in "${ACTIVE[@]}"; do echo "$impl: ${CMD[$impl]}"; done
    want p2pmpi && [ -z "${SKIP[p2pmpi]:-}" ] && echo "grid: $GRID_START_CMD   (stopped with: $GRID_STOP_CMD)"
} >"$OUT/startup-commands.txt"

# Warm-up: one untimed run per (N, implementation); it fills the peers' file caches (and
# the page cache). A cell whose warm-up fails twice is not timed (reported as such).
declare -A NOCELL   # "impl n" -> why the cell is not timed
for n in $NS; do
    for impl in "${ACTIVE[@]}"; do
        f="$RAW/$impl.n$n.warmup.txt"
        run_one "$impl" "$n" "$f"
        if [ "$STATUS" != ok ]; then
            log "warm-up $impl N=$n: $STATUS after $MS ms (see $f.err); retrying once"
            sed 's/^/    /' "$f.err" | tail -n 10 >&2
            run_one "$impl" "$n" "$f"
        fi
        echo "$impl,$n,0,$MS,warmup $STATUS" >>"$CSV"
        log "warm-up $impl N=$n: $STATUS, $MS ms"
        if [ "$STATUS" != ok ]; then
            NOCELL["$impl $n"]="warm-up failed twice ($STATUS; see out/startup-raw/$impl.n$n.warmup.txt.err)"
            log "$impl N=$n will not be timed: ${NOCELL["$impl $n"]}"
        fi
    done
done

QUIET_LEFT=$QUIET_BUDGET
: >"$OUT/startup-load.txt"
log "running ${ACTIVE[*]}, N $NS, REPS=$REPS"
# Interleaved: every repetition runs every (N, implementation) once; the implementation
# that goes first rotates with the repetition and with N.
na=${#ACTIVE[@]}
for ((rep = 1; rep <= REPS; rep++)); do
    ni=0
    for n in $NS; do
        for ((k = 0; k < na; k++)); do
            impl=${ACTIVE[$(((k + rep - 1 + ni) % na))]}
            [ -z "${NOCELL["$impl $n"]:-}" ] || continue
            f="$RAW/$impl.n$n.$rep.txt"
            busy=$(wait_quiet)
            echo "$impl $n $rep $busy" >>"$OUT/startup-load.txt"
            run_one "$impl" "$n" "$f"
            echo "$impl,$n,$rep,$MS,$STATUS" >>"$CSV"
            [ "$STATUS" = ok ] || log "rep $rep: $impl N=$n failed ($STATUS after $MS ms, see $f.err)"
        done
        ni=$((ni + 1))
    done
    log "rep $rep/$REPS done ($(($(date +%s) - T_START)) s elapsed)"
done

stop_grid

# --------------------------------------------------------------------------- report
SKIPPED=""
for impl in $IMPLS; do
    [ -n "${SKIP[$impl]:-}" ] && SKIPPED+="$impl: ${SKIP[$impl]}"$'\n'
done
NOTTIMED=""
for key in "${!NOCELL[@]}"; do
    NOTTIMED+="$key: ${NOCELL[$key]}"$'\n'
done
CMD_P2P=${CMD[p2pmpi]:-}
CMD_OMPI=${CMD[ompi]:-}
export REPS OUT CSV NS IMPLS SKIPPED NOTTIMED QUIET_PCT RUN_TIMEOUT GRID_PEERS GRID_PROCS \
    GRID_START_MS GRID_START_CMD GRID_STOP_CMD CMD_P2P CMD_OMPI
export_machine

python3 - <<'PY'
import csv, os, statistics

E = os.environ
out = E["OUT"]
reps = int(E["REPS"])
ns = [int(x) for x in E["NS"].split()]
names = {"p2pmpi": "p2pmpi", "ompi": "Open MPI"}
issue_ompi = {1: 120, 2: 130, 4: 201, 8: 273, 16: 425}

ok, failed = {}, {}   # (impl, n) -> [ms] / [status]
with open(E["CSV"]) as f:
    for r in csv.DictReader(f):
        if r["rep"] == "0":
            continue  # warm-up
        key = (r["impl"], int(r["n"]))
        if r["status"] == "ok":
            ok.setdefault(key, []).append(float(r["ms"]))
        else:
            failed.setdefault(key, []).append(f"rep {r['rep']}: {r['status']} after {float(r['ms']):.0f} ms")

def med(impl, n):
    v = ok.get((impl, n))
    return statistics.median(v) if v else None

def fmt(x):
    return "—" if x is None else f"{x:.0f}" if x >= 100 else f"{x:.1f}"

def cell(impl, n):
    s = fmt(med(impl, n))
    nf = len(failed.get((impl, n), []))
    if nf:
        s += f" ({nf} failed)"
    return s

def span(impl, n):
    v = ok.get((impl, n))
    return "—" if not v else f"{fmt(min(v))}–{fmt(max(v))}"

hdr = ["N", "p2pmpi median ms", "Open MPI median ms", "ratio (p2pmpi/Open MPI)",
       "p2pmpi min–max", "Open MPI min–max"]
rows, ratios = [], {}
for n in ns:
    a, b = med("p2pmpi", n), med("ompi", n)
    if a is not None and b:
        ratios[n] = a / b
    rows.append([str(n), cell("p2pmpi", n), cell("ompi", n),
                 f"{ratios[n]:.2f}" if n in ratios else "—", span("p2pmpi", n), span("ompi", n)])

def md(hdr, rows):
    lines = ["| " + " | ".join(hdr) + " |", "|" + "|".join(["---:"] * len(hdr)) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)

def txt(hdr, rows):
    w = [max(len(h), *(len(r[j]) for r in rows)) if rows else len(h) for j, h in enumerate(hdr)]
    fr = lambda r: "  ".join(c.rjust(w[j]) for j, c in enumerate(r))
    return "\n".join([fr(hdr), fr(["-" * x for x in w])] + [fr(r) for r in rows])

machine = (f"{E['MACHINE_NPROC']} CPUs, {E['MACHINE_CPU']}, {E['MACHINE_KERNEL']}; "
           f"{E['MACHINE_DATE']}")
versions = ", ".join(v for v in (E.get("VER_OMPI"), E.get("VER_RUST")) if v)
counts = sorted({len(v) for v in ok.values()})
nrep = f"{reps} interleaved runs" + ("" if counts == [reps] else
                                     f" (successful samples per cell: {', '.join(map(str, counts))})")
skipped = [l for l in E.get("SKIPPED", "").splitlines() if l.strip()]
nottimed = sorted(l for l in E.get("NOTTIMED", "").splitlines() if l.strip())
loads = [int(l.split()[3]) for l in open(os.path.join(out, "startup-load.txt")) if len(l.split()) == 4]
qp = int(E["QUIET_PCT"])
noisy = sum(1 for x in loads if x > qp)
load_note = (f"{noisy} of {len(loads)} runs started while other processes kept the CPUs "
             f">{qp}% busy (max {max(loads)}%): figures are noisy" if noisy else
             f"background CPU load before each run: max {max(loads) if loads else 0}%")
how = ("wall-clock time of the whole command (launcher start to launcher exit: launch, "
       "MPI init, one line printed per rank, barrier, finalize), measured by the script around "
       f"the command; one untimed warm-up run per (N, implementation) first; a run that exits "
       f"non-zero, lasts over {E['RUN_TIMEOUT']} s or does not print the N lines `rank R of N` "
       "counts as failed and is left out of the median")
if len(ratios) == len(ns) and ratios:
    verdict = ("target met: ratio ≤ 1.0 at every N" if all(r <= 1.0 for r in ratios.values()) else
               "target NOT met at N = " + ", ".join(str(n) for n, r in ratios.items() if r > 1.0))
elif ratios:
    verdict = "target not assessable at every N (missing medians)"
else:
    verdict = ""
grid_note = (f"p2pmpi runs on a local grid of {E['GRID_PEERS']} peers × {E['GRID_PROCS']} processes "
             f"({int(E['GRID_PEERS']) * int(E['GRID_PROCS'])} in all, peer *i* on 127.0.0.(i+1)), "
             "started once before the runs and stopped after them (not timed"
             + (f"; it took {E['GRID_START_MS']} ms to come up" if E.get("GRID_START_MS") else "") + ")")
target_note = ("The seeds' target is ratio ≤ 1.0 at every N (p2pmpi starts a job at least as fast "
               "as Open MPI). The issue quotes Open MPI at 120 / 130 / 201 / 273 / 425 ms for "
               "N = 1 / 2 / 4 / 8 / 16 on this kind of machine")

print()
print(f"Machine: {machine}")
print(f"Versions: {versions}")
print(f"Medians of {nrep}; all processes on one host, loopback.")
print(("WARNING: " if noisy else "") + load_note)
for l in skipped:
    print(f"Skipped: {l}")
for l in nottimed:
    print(f"Not timed: {l}")
print()
print(txt(hdr, rows))
print()
if verdict:
    print(verdict + ".")
for key, v in sorted(failed.items(), key=lambda kv: (kv[0][1], kv[0][0])):
    print(f"Failed: {names.get(key[0], key[0])} N={key[1]}: " + "; ".join(v))

with open(os.path.join(out, "startup.md"), "w") as m:
    m.write("### Start-up time of a tiny job, 1-16 processes on one host\n\n")
    m.write(f"Machine: {machine}.  \nVersions: {versions}.  \n")
    m.write(f"Medians of {nrep} (`bench/startup.sh`), in ms; {how}.  \n")
    m.write("ratio = p2pmpi / Open MPI (< 1: p2pmpi starts faster).  \n")
    if E.get("CMD_P2P"):
        m.write(grid_note + ".  \n")
    m.write(("**Warning:** " if noisy else "") + load_note + ".\n")
    m.write(f"\n{target_note}" + (f"; here: {verdict}" if verdict else "") + ".\n")
    for l in skipped:
        m.write(f"\nSkipped: {l}\n")
    for l in nottimed:
        m.write(f"\nNot timed: {l}\n")
    m.write("\n" + md(hdr, rows) + "\n")
    if any(n in issue_ompi for n in ns):
        m.write("\nOpen MPI as quoted in the issue, ms: "
                + ", ".join(f"N={n}: {issue_ompi[n]}" for n in ns if n in issue_ompi) + ".\n")
    for key, v in sorted(failed.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        m.write(f"\nFailed runs, {names.get(key[0], key[0])} N={key[1]}: " + "; ".join(v) + "\n")
    m.write("\nCommands (`{n}` = N; the p2pmpi grid is started once, before the runs):\n\n```sh\n")
    if E.get("CMD_P2P"):
        m.write(f"{E['GRID_START_CMD']}\n{E['CMD_P2P']}\n{E['GRID_STOP_CMD']}\n")
    if E.get("CMD_OMPI"):
        m.write(f"{E['CMD_OMPI']}\n")
    m.write("```\n")
print(f"Markdown: {os.path.join(out, 'startup.md')}")
PY
log "total $(($(date +%s) - T_START)) s"
