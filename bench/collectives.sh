#!/usr/bin/env bash
# Collectives benchmark: p2pmpi vs Open MPI and MPICH, each on its shared memory and on TCP
# over loopback (127.0.0.1), 2 and 4 processes on one host; idle and under the standard
# background loads of bench/load.sh, all at normal priority.
#
# Usage: bench/collectives.sh
# Env:
#   REPS=7          interleaved repetitions: each runs, for each load of LOADS, every
#                   (np, implementation) once (medians and medians of paired ratios reported)
#   LOADS="idle cpu mixed"  the background loads (bench/load.sh), each started before and
#                   stopped after its runs within a repetition
#   LOAD_SETTLE=2   seconds between starting a load and the first run under it
#   NPS="2 4"       process counts (with more processes than CPUs Open MPI gets
#                   --oversubscribe and --mca mpi_yield_when_idle 1)
#   IMPLS="ompi mpich p2pmpi ompi-tcp mpich-tcp p2pmpi-tcp"  subset/order of these:
#                   ompi: Open MPI on OMPI_BTL (default its shared memory, vader or sm);
#                   mpich: MPICH's default (ch4 shared memory); p2pmpi: its default
#                   (shared memory between ranks of one host); ompi-tcp, mpich-tcp,
#                   p2pmpi-tcp: the same on TCP over loopback
#   COLLS=...       comma-separated collectives (default: all ten:
#                   barrier,bcast,reduce,allreduce,gather,scatter,allgather,alltoall,
#                   reduce_scatter_block,scan)
#   SIZES=8,65536   comma-separated sizes in bytes (per process; see bench/README.md)
#   TARGET_S=0.2    seconds of timed loop per (collective, size) in each run
#   NO_INSTALL=1    never run apt-get
#   P2PMPI_CMD=...  command prefix for the p2pmpi column instead of building it; "{np}" in
#                   it is replaced by the process count (default: target/release/p2pmpirun
#                   -n {np} target/release/examples/coll_bench)
#   OMPI_BTL=vader,self  the transports of the `ompi` column (sm,self on Open MPI >= 5;
#                   tcp,self makes it a second TCP column)
#   RUN_TIMEOUT=120 seconds allowed for one run of one implementation
#   FINALIZE_GRACE=5  MPICH with more ranks than CPUs: seconds allowed after its last cell
#                   (its ranks can spin in MPI_Finalize for minutes; such a run is stopped,
#                   listed, and its cells kept)
#   QUIET_PCT=25    before each idle run, wait while other processes keep the CPUs busier than
#   QUIET_BUDGET=60 this, but at most this many seconds in total over the whole script
#
# Output: a table on stdout, Markdown in bench/out/collectives.md, every run's output in
# bench/out/coll-raw/, all samples in bench/out/collectives.csv, build logs in bench/out/.
set -uo pipefail

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$BENCH_DIR/.." && pwd)
OUT="$BENCH_DIR/out"
RAW="$OUT/coll-raw"
REPS=${REPS:-7}
NPS=${NPS:-"2 4"}
IMPLS=${IMPLS:-"ompi mpich p2pmpi ompi-tcp mpich-tcp p2pmpi-tcp"}
LOADS=${LOADS:-"idle cpu mixed"}
LOAD_SETTLE=${LOAD_SETTLE:-2}
FINALIZE_GRACE=${FINALIZE_GRACE:-5}
COLLS=${COLLS:-barrier,bcast,reduce,allreduce,gather,scatter,allgather,alltoall,reduce_scatter_block,scan}
SIZES=${SIZES:-8,65536}
TARGET_S=${TARGET_S:-0.2}
RUN_TIMEOUT=${RUN_TIMEOUT:-120}
QUIET_PCT=${QUIET_PCT:-25}
QUIET_BUDGET=${QUIET_BUDGET:-60}


mkdir -p "$OUT"
rm -rf "$RAW"
mkdir -p "$RAW"
source "$(dirname "$0")/lib.sh"
announce_machine

# --------------------------------------------------------------------------- install
install_missing with-mpich

# --------------------------------------------------------------------------- build
declare -A CMD      # implementation -> command prefix, "{np}" = process count
declare -A SKIP     # implementation -> reason it is skipped

want() { [[ " $IMPLS " == *" $1 "* ]]; }

# Shared-memory BTL: vader in Open MPI <= 4, sm in >= 5.
SHM_BTL=vader
ompi_info 2>/dev/null | grep -q "MCA btl: vader" || SHM_BTL=sm
OMPI_BTL=${OMPI_BTL:-$SHM_BTL,self}
NPROC=$(nproc)
if want ompi || want ompi-tcp; then
    if command -v mpicc.openmpi >/dev/null \
        && mpicc.openmpi -O2 -Wall -o "$OUT/collectives_ompi" "$BENCH_DIR/c/collectives.c" >"$OUT/build-coll-ompi.log" 2>&1; then
        # Same flags as pingpong.sh: ob1 + the BTL (self for a rank to itself), loopback for
        # both MPI traffic and the runtime. {yield} is `--mca mpi_yield_when_idle 1` when the
        # ranks outnumber the CPUs (run_one): a waiting rank then gives its core away.
        OMPI_RUN="mpirun.openmpi --allow-run-as-root --oversubscribe -np {np} {yield}--mca pml ob1"
        CMD[ompi]="$OMPI_RUN --mca btl $OMPI_BTL --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo $OUT/collectives_ompi"
        CMD[ompi-tcp]="$OMPI_RUN --mca btl tcp,self --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo $OUT/collectives_ompi"
    else
        SKIP[ompi]="mpicc.openmpi missing or compile of c/collectives.c failed (see out/build-coll-ompi.log)"
        SKIP[ompi-tcp]=${SKIP[ompi]}
    fi
fi

if want mpich || want mpich-tcp; then
    if command -v mpicc.mpich >/dev/null \
        && mpicc.mpich -O2 -Wall -o "$OUT/collectives_mpich" "$BENCH_DIR/c/collectives.c" >"$OUT/build-coll-mpich.log" 2>&1; then
        # As pingpong.sh: MPICH's default between ranks of one host (ch4 shared memory), and
        # its netmod (UCX) forced onto TCP over loopback.
        CMD[mpich]="mpiexec.mpich -launcher fork -iface lo -n {np} $OUT/collectives_mpich"
        CMD[mpich-tcp]="mpiexec.mpich -launcher fork -iface lo -n {np} -genv MPIR_CVAR_NOLOCAL 1 -genv UCX_TLS tcp -genv UCX_NET_DEVICES lo $OUT/collectives_mpich"
    else
        SKIP[mpich]="mpicc.mpich missing or compile of c/collectives.c failed (see out/build-coll-mpich.log)"
        SKIP[mpich-tcp]=${SKIP[mpich]}
    fi
fi

if { want p2pmpi || want p2pmpi-tcp; } && [ -n "${P2PMPI_CMD:-}" ]; then
    CMD[p2pmpi]=$P2PMPI_CMD   # explicit command given: no build
    CMD[p2pmpi-tcp]="env P2PMPI_SHM=0 $P2PMPI_CMD"
elif want p2pmpi || want p2pmpi-tcp; then
    P2P_RUN="$TARGET_DIR/release/p2pmpirun"
    P2P_BIN="$TARGET_DIR/release/examples/coll_bench"
    log "building p2pmpirun and examples/coll_bench (release)"
    if (cd "$ROOT" && cargo build --release -p p2pmpi-cli -p p2pmpi-examples --example coll_bench) \
            >"$OUT/build-coll-p2pmpi.log" 2>&1 \
        && [ -x "$P2P_RUN" ] && [ -x "$P2P_BIN" ]; then
        CMD[p2pmpi]="$P2P_RUN -n {np} $P2P_BIN"
        CMD[p2pmpi-tcp]="env P2PMPI_SHM=0 $P2P_RUN -n {np} $P2P_BIN"
    else
        why=$(grep -m1 '^error' "$OUT/build-coll-p2pmpi.log" 2>/dev/null | cut -c1-160)
        SKIP[p2pmpi]="could not build p2pmpirun + example coll_bench${why:+ ($why)}; full log: out/build-coll-p2pmpi.log"
        SKIP[p2pmpi-tcp]=${SKIP[p2pmpi]}
    fi
fi

# --------------------------------------------------------------------------- smoke test
run_one() { # impl np outfile colls sizes target_s
    local impl=$1 np=$2 outf=$3 colls=$4 sizes=$5 ts=$6
    local cmd=${CMD[$impl]//\{np\}/$np} y=
    [ "$np" -gt "$NPROC" ] && y="--mca mpi_yield_when_idle 1 "
    cmd=${cmd//\{yield\}/$y}
    if [[ $impl != mpich* ]] || [ "$np" -le "$NPROC" ]; then
        # shellcheck disable=SC2086
        timeout --kill-after=5 "$RUN_TIMEOUT" $cmd "$colls" "$sizes" "$ts" >"$outf" 2>"$outf.err" </dev/null
        return
    fi
    # MPICH (ch4:ucx) with more ranks than CPUs, under load, can spin in MPI_Finalize for
    # minutes after printing every cell: once the output is complete the run gets
    # FINALIZE_GRACE seconds more, then it is stopped (exit 200) and its cells kept.
    local want nb=0 pid left
    [[ ,$colls, == *,barrier,* ]] && nb=1
    want=$((nb + ($(tr ',' '\n' <<<"$colls" | grep -vc '^barrier$')) * $(tr ',' '\n' <<<"$sizes" | grep -c .)))
    # shellcheck disable=SC2086
    timeout --kill-after=5 "$RUN_TIMEOUT" $cmd "$colls" "$sizes" "$ts" >"$outf" 2>"$outf.err" </dev/null &
    pid=$!
    left=-1
    while kill -0 "$pid" 2>/dev/null; do
        sleep 0.5
        if [ "$left" -lt 0 ] && [ "$(grep -c '^coll ' "$outf")" -ge "$want" ]; then
            left=$((FINALIZE_GRACE * 2))
        elif [ "$left" -eq 0 ]; then
            kill -TERM "$pid" 2>/dev/null
            wait "$pid"
            return 200
        elif [ "$left" -gt 0 ]; then
            left=$((left - 1))
        fi
    done
    wait "$pid"
}
NP_MIN=$(printf '%s\n' $NPS | sort -n | head -n1)
ACTIVE=()
for impl in $IMPLS; do
    if [ -n "${SKIP[$impl]:-}" ]; then
        log "SKIP $impl: ${SKIP[$impl]}"; continue
    fi
    if [ -z "${CMD[$impl]:-}" ]; then
        log "SKIP $impl: unknown implementation"; SKIP[$impl]="unknown implementation"; continue
    fi
    f="$RAW/smoke-$impl.txt"
    run_one "$impl" "$NP_MIN" "$f" "$COLLS" 8 0.005
    rc=$?
    # (200: complete, then stuck in MPI_Finalize; see run_one)
    if { [ $rc -eq 0 ] || [ $rc -eq 200 ]; } \
        && [ "$(grep -c '^coll ' "$f")" -ge "$(tr ',' '\n' <<<"$COLLS" | sort -u | wc -l)" ]; then
        ACTIVE+=("$impl")
        if grep -q '^error ' "$f"; then
            log "WARNING $impl: wrong results in the smoke run: $(grep '^error ' "$f" | cut -d' ' -f2 | tr '\n' ' ')"
        fi
    else
        SKIP[$impl]="smoke run (np=$NP_MIN, size 8) failed (see out/coll-raw/smoke-$impl.txt.err)"
        log "SKIP $impl: ${SKIP[$impl]}"
        sed 's/^/    /' "$f.err" | head -n 15 >&2
    fi
done
[ ${#ACTIVE[@]} -gt 0 ] || { log "nothing to run"; exit 1; }

# --------------------------------------------------------------------------- runs
for load in $LOADS; do
    case $load in idle | cpu | mixed) ;; *) log "LOADS: unknown load '$load' (idle, cpu, mixed)"; exit 1 ;; esac
done
read -ra LOADV <<<"$LOADS"
trap load_stop EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
QUIET_LEFT=$QUIET_BUDGET
: >"$OUT/coll-load.txt"
: >"$OUT/coll-failed.txt"
{
    for impl in "${ACTIVE[@]}"; do echo "$impl: ${CMD[$impl]} $COLLS $SIZES $TARGET_S"; done
    echo "({yield}: --mca mpi_yield_when_idle 1 when np > $NPROC CPUs, else nothing)"
    echo "loads: $LOADS (bench/load.sh KIND around each load's runs, $LOAD_SETTLE s to settle)"
} >"$OUT/coll-commands.txt"
log "running ${ACTIVE[*]}, np $NPS, loads $LOADS, REPS=$REPS, sizes $SIZES, TARGET_S=$TARGET_S"
# Interleaved: every repetition runs, under each load in turn, every (np, implementation)
# once; the starting load and the starting implementation rotate with the repetition (and
# the implementation with the process count). All at normal priority.
n=${#ACTIVE[@]}
nl=${#LOADV[@]}
for ((rep = 1; rep <= REPS; rep++)); do
    for ((l = 0; l < nl; l++)); do
        load=${LOADV[$(((l + rep - 1) % nl))]}
        load_start "$load"
        [ "$load" = idle ] || sleep "$LOAD_SETTLE"
        npi=0
        for np in $NPS; do
            for ((k = 0; k < n; k++)); do
                impl=${ACTIVE[$(((k + rep - 1 + npi) % n))]}
                f="$RAW/$impl.$load.np$np.$rep.txt"
                quiet_check
                echo "$impl $load $np $rep $BUSY" >>"$OUT/coll-load.txt"
                t0=$(date +%s%N)
                run_one "$impl" "$np" "$f" "$COLLS" "$SIZES" "$TARGET_S"
                rc=$?
                if [ $rc -ne 0 ]; then
                    log "rep $rep, $load: $impl np=$np failed (exit $rc, see $f.err)"
                    echo "$impl $load $np $rep $rc" >>"$OUT/coll-failed.txt"
                fi
                ms=$((($(date +%s%N) - t0) / 1000000))
                log "rep $rep/$REPS, $load: $impl np=$np took $((ms / 1000)).$(((ms % 1000) / 100)) s"
            done
            npi=$((npi + 1))
        done
        load_stop
    done
    log "rep $rep/$REPS done ($(($(date +%s) - T_START)) s elapsed)"
done

# --------------------------------------------------------------------------- report
SKIPPED=""
for impl in $IMPLS; do
    [ -n "${SKIP[$impl]:-}" ] && SKIPPED+="$impl: ${SKIP[$impl]}"$'\n'
done
export REPS OUT RAW NPS COLLS SKIPPED QUIET_PCT TARGET_S LOADS OMPI_BTL
export_machine
export VER_MPICH=$(mpirun.mpich --version 2>/dev/null | awk '/Version:/ {print "MPICH " $2; exit}')

python3 - <<'PY'
import glob, os, re, statistics

E = os.environ
out, raw = E["OUT"], E["RAW"]
reps = int(E["REPS"])
nps = [int(x) for x in E["NPS"].split()]
corder = E["COLLS"].split(",")
ompi_tcp = "tcp" in E.get("OMPI_BTL", "")
names = {"ompi": "Open MPI TCP" if ompi_tcp else "Open MPI shm", "mpich": "MPICH shm", "p2pmpi": "p2pmpi shm",
         "ompi-tcp": "Open MPI TCP", "mpich-tcp": "MPICH TCP", "p2pmpi-tcp": "p2pmpi TCP"}
order = ["ompi", "mpich", "p2pmpi", "ompi-tcp", "mpich-tcp", "p2pmpi-tcp"]
# Like with like: p2pmpi's shared memory against the others' shared memory, its TCP against
# their TCP; a ratio is taken within one repetition, load and np (two runs seconds apart), and
# a cell reports the median of those paired ratios.
PAIRS = [("p2pmpi", "mpich"), ("p2pmpi-tcp", "ompi-tcp"), ("p2pmpi-tcp", "mpich-tcp")]
PAIRS.insert(0, ("p2pmpi-tcp", "ompi") if ompi_tcp else ("p2pmpi", "ompi"))

data = {}    # (impl, load, np, coll, bytes) -> {rep: us}
errors = {}  # (impl, load, np, coll, bytes) -> number of runs with wrong results
for f in sorted(glob.glob(os.path.join(raw, "*.txt"))):
    m = re.match(r"(.+)\.(idle|cpu|mixed)\.np(\d+)\.(\d+)\.txt$", os.path.basename(f))
    if not m:
        continue  # smoke-test files
    impl, load, rep = m.group(1), m.group(2), int(m.group(4))
    for line in open(f):
        p = line.split()
        if len(p) != 5 or p[0] not in ("coll", "error"):
            continue
        try:
            key = (impl, load, int(p[2]), p[1], int(p[3]))
            if p[0] == "coll":
                data.setdefault(key, {})[rep] = float(p[4])
            else:
                errors[key] = errors.get(key, 0) + 1
        except ValueError:
            pass

with open(os.path.join(out, "collectives.csv"), "w") as c:
    c.write("impl,load,np,collective,bytes,rep,us_per_op\n")
    for (impl, load, np, coll, b), v in sorted(data.items()):
        for rep, x in sorted(v.items()):
            c.write(f"{impl},{load},{np},{coll},{b},{rep},{x}\n")

present = {k[0] for k in data}
impls = [i for i in order if i in present] + sorted(present - set(order))
loads = [l for l in E["LOADS"].split() if any(k[1] == l for k in data)]
rowkeys = sorted({(k[3], k[4]) for k in data},
                 key=lambda r: (corder.index(r[0]) if r[0] in corder else 99, r[1]))
nps = [n for n in nps if any(k[2] == n for k in data)]
pairs = [(a, b) for a, b in PAIRS if a in impls and b in impls]
med = {k: statistics.median(v.values()) for k, v in data.items()}


def paired(a, b, load, np, row):
    x, y = data.get((a, load, np) + row, {}), data.get((b, load, np) + row, {})
    r = [x[n] / y[n] for n in x if n in y and y[n] > 0]
    return statistics.median(r) if r else None


def human(n):
    if n == 0:
        return "—"  # barrier
    for unit, k in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= k and n % k == 0:
            return f"{n // k} {unit}"
    return f"{n} B"


def fmt(x):
    if x is None:
        return "—"
    return f"{x:.2f}" if x < 10 else f"{x:.1f}" if x < 1000 else f"{x:.0f}"


def cell(k):
    v = med.get(k)
    s = fmt(v)
    if v is not None and errors.get(k):
        s += " (wrong!)"
    return s


def load_table(load):
    hdr = ["collective", "size"] + [f"{names.get(i, i)} np={np}" for np in nps for i in impls]
    rows = [[row[0], human(row[1])] + [cell((i, load, np) + row) for np in nps for i in impls]
            for row in rowkeys]
    return hdr, rows


tally = {}  # (a, b, np, load) -> [met, cells]


def ratio_table(a, b):
    hdr = ["collective", "size"] + [f"np={np} {l}" for np in nps for l in loads]
    rows = []
    for row in rowkeys:
        r = [row[0], human(row[1])]
        for np in nps:
            for l in loads:
                x = paired(a, b, l, np, row)
                if x is None:
                    r.append("—")
                    continue
                t = tally.setdefault((a, b, np, l), [0, 0])
                t[0] += x <= 1.0
                t[1] += 1
                r.append(f"{x:.2f} " + ("✓" if x <= 1.0 else "✗"))
        rows.append(r)
    return hdr, rows


def md(hdr, rows):
    lines = ["| " + " | ".join(hdr) + " |",
             "|" + "|".join(["---", "---:"] + ["---:"] * (len(hdr) - 2)) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def txt(hdr, rows):
    w = [max(len(h), *(len(r[j]) for r in rows)) if rows else len(h) for j, h in enumerate(hdr)]
    fr = lambda r: "  ".join(c.ljust(w[j]) if j == 0 else c.rjust(w[j]) for j, c in enumerate(r))
    return "\n".join([fr(hdr), fr(["-" * x for x in w])] + [fr(r) for r in rows])


machine = (f"{E['MACHINE_NPROC']} CPUs, {E['MACHINE_CPU']}, {E['MACHINE_KERNEL']}; "
           f"{E['MACHINE_DATE']}")
versions = ", ".join(v for v in (E.get("VER_OMPI"), E.get("VER_MPICH"), E.get("VER_RUST")) if v)
counts = sorted({len(v) for v in data.values()})
nrep = f"{reps} interleaved runs per load" + ("" if counts == [reps] else
                                              f" (samples per cell: {', '.join(map(str, counts))})")
skipped = [l for l in E.get("SKIPPED", "").splitlines() if l.strip()]
load_desc = {"idle": "idle (nothing else started by the script)",
             "cpu": "cpu (`bench/load.sh cpu`: one busy loop per core, nice 0)",
             "mixed": "mixed (`bench/load.sh mixed`: a C tree rebuilt by `make -j2`, nice 0)"}
busy = {}
for l in open(os.path.join(out, "coll-load.txt")):
    p = l.split()
    if len(p) == 5 and p[4].isdigit():
        busy.setdefault(p[1], []).append(int(p[4]))
qp = int(E["QUIET_PCT"])
idle_b = busy.get("idle", [])
noisy = sum(1 for x in idle_b if x > qp)
load_note = (f"{noisy} of {len(idle_b)} idle runs started while other processes kept the CPUs "
             f">{qp}% busy (max {max(idle_b)}%): idle figures are noisy" if noisy else
             f"CPU busy before each idle run: max {max(idle_b) if idle_b else 0}%")
loaded_note = "; ".join(f"{l}: median {statistics.median(busy[l]):.0f}% busy before a run"
                        for l in loads if l != "idle" and busy.get(l))
bad = sorted(errors)
# Runs that exited non-zero or were stopped at RUN_TIMEOUT (exit 124): the cells they printed
# before (each timed in full) are kept.
failed = [l.split() for l in open(os.path.join(out, "coll-failed.txt")) if len(l.split()) == 5]
why = {"124": "timed out", "137": "timed out", "200": "stuck in MPI_Finalize after its last cell, stopped"}
fail_note = ("; ".join(f"{names.get(i, i)} {l} np={np} rep {r}: " + why.get(c, f"exit {c}")
                       for i, l, np, r, c in failed) if failed else "")
over = [n for n in nps if n > int(E["MACHINE_NPROC"])]
how = ("µs per operation, median over runs; each run: max over ranks of (elapsed / iterations), "
       f"back-to-back operations, about {E['TARGET_S']} s per cell; sizes are per process "
       "(bcast: the buffer; reduce, allreduce, scan, reduce_scatter_block: doubles, MPI_SUM)")
ratio_note = ("Paired ratios: p2pmpi's µs ÷ the other's in the same repetition, load and np, median over the "
              "repetitions (< 1: p2pmpi faster); ✓ = the cell meets the target (≤ 1.0×), ✗ = it does not")
over_note = (f"np={','.join(map(str, over))} oversubscribes the {E['MACHINE_NPROC']} CPUs (Open MPI: "
             "--oversubscribe --mca mpi_yield_when_idle 1; MPICH's waiting ranks busy-poll)" if over else "")
tables = {l: load_table(l) for l in loads}
rtables = [((a, b), ratio_table(a, b)) for a, b in pairs]
summary = [f"{names[a]} / {names[b]}: cells met: " +
           "; ".join(f"np={np} " + ", ".join(f"{l} {tally[(a, b, np, l)][0]}/{tally[(a, b, np, l)][1]}"
                                             for l in loads if (a, b, np, l) in tally)
                     for np in nps)
           for a, b in pairs]

print()
print(f"Machine: {machine}")
print(f"Versions: {versions}")
print(f"Medians of {nrep}; all processes on one host; normal priority.")
print(how + ".")
if over_note:
    print(over_note + ".")
print("Loads: " + ", ".join(loads))
print(("WARNING: " if noisy else "") + load_note)
if loaded_note:
    print(loaded_note)
for l in skipped:
    print(f"Skipped: {l}")
if failed:
    print(f"FAILED RUNS ({len(failed)}; the cells they printed are kept): {fail_note}")
for k in bad:
    print(f"WRONG RESULTS: {names.get(k[0], k[0])} {k[3]} {k[1]} np={k[2]} {k[4]} B in {errors[k]} run(s)")
for l in loads:
    print(f"\n[{l}] µs per operation (median)\n")
    print(txt(*tables[l]))
print("\n" + ratio_note + ".")
for (a, b), t in rtables:
    print(f"\n{names[a]} / {names[b]}, median of paired ratios, idle and loaded\n")
    print(txt(*t))
print()
for l in summary:
    print(l)
print()

with open(os.path.join(out, "collectives.md"), "w") as m:
    m.write("### Collectives on one host, idle and under load\n\n")
    m.write(f"Machine: {machine}.  \nVersions: {versions}.  \n")
    m.write(f"Medians of {nrep} (`bench/collectives.sh`, normal priority, loads interleaved with the "
            f"implementations); {how}.  \n")
    if over_note:
        m.write(over_note + ".  \n")
    m.write("Loads: " + "; ".join(load_desc.get(l, l) for l in loads) + ".  \n")
    m.write(("**Warning:** " if noisy else "") + load_note + (f"; {loaded_note}" if loaded_note else "") + ".\n")
    for l in skipped:
        m.write(f"\nSkipped: {l}\n")
    if failed:
        m.write(f"\nFailed runs ({len(failed)}; the cells they printed are kept): {fail_note}.\n")
    for k in bad:
        m.write(f"\n**Wrong results:** {names.get(k[0], k[0])} {k[3]} {k[1]} np={k[2]} {k[4]} B "
                f"in {errors[k]} run(s)\n")
    for l in loads:
        m.write(f"\n#### {l}: µs per operation (lower is better)\n\n" + md(*tables[l]) + "\n")
    m.write("\n#### Paired ratios, idle and loaded side by side\n\n" + ratio_note + ".\n")
    for (a, b), t in rtables:
        m.write(f"\n{names[a]} / {names[b]}:\n\n" + md(*t) + "\n")
    if summary:
        m.write("\n")
        for l in summary:
            m.write(f"- {l}\n")
print(f"Markdown: {os.path.join(out, 'collectives.md')}")
PY
log "total $(($(date +%s) - T_START)) s"
