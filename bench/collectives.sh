#!/usr/bin/env bash
# Collectives benchmark: p2pmpi vs Open MPI (TCP BTL), on loopback (127.0.0.1), for
# 2, 4 and 8 processes on one host.
#
# Usage: bench/collectives.sh
# Env:
#   REPS=3          interleaved repetitions of every (np, implementation) (medians are reported)
#   NPS="2 4 8"     process counts
#   IMPLS="ompi p2pmpi"  subset/order of: ompi p2pmpi
#   COLLS=...       comma-separated collectives (default: all ten:
#                   barrier,bcast,reduce,allreduce,gather,scatter,allgather,alltoall,
#                   reduce_scatter_block,scan)
#   SIZES=8,65536   comma-separated sizes in bytes (per process; see bench/README.md)
#   TARGET_S=0.2    seconds of timed loop per (collective, size) in each run
#   NO_INSTALL=1    never run apt-get
#   P2PMPI_CMD=...  command prefix for the p2pmpi column instead of building it; "{np}" in
#                   it is replaced by the process count (default: target/release/p2pmpirun
#                   -n {np} target/release/examples/coll_bench)
#   OMPI_BTL=tcp,self  Open MPI's transports (vader,self: its shared memory, to compare with
#                   p2pmpi's same-host shared-memory path)
#   RUN_TIMEOUT=120 seconds allowed for one run of one implementation
#   QUIET_PCT=25    before each run, wait while other processes keep the CPUs busier than this
#   QUIET_BUDGET=60 ...but wait at most this many seconds in total over the whole script
#
# Output: a table on stdout, Markdown in bench/out/collectives.md, every run's output in
# bench/out/coll-raw/, all samples in bench/out/collectives.csv, build logs in bench/out/.
set -uo pipefail

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$BENCH_DIR/.." && pwd)
OUT="$BENCH_DIR/out"
RAW="$OUT/coll-raw"
REPS=${REPS:-3}
NPS=${NPS:-"2 4 8"}
IMPLS=${IMPLS:-"ompi p2pmpi"}
COLLS=${COLLS:-barrier,bcast,reduce,allreduce,gather,scatter,allgather,alltoall,reduce_scatter_block,scan}
SIZES=${SIZES:-8,65536}
TARGET_S=${TARGET_S:-0.2}
RUN_TIMEOUT=${RUN_TIMEOUT:-120}
OMPI_BTL=${OMPI_BTL:-tcp,self}
QUIET_PCT=${QUIET_PCT:-25}
QUIET_BUDGET=${QUIET_BUDGET:-60}


mkdir -p "$OUT"
rm -rf "$RAW"
mkdir -p "$RAW"
source "$(dirname "$0")/lib.sh"
announce_machine

# --------------------------------------------------------------------------- install
install_missing

# --------------------------------------------------------------------------- build
declare -A CMD      # implementation -> command prefix, "{np}" = process count
declare -A SKIP     # implementation -> reason it is skipped

want() { [[ " $IMPLS " == *" $1 "* ]]; }

if want ompi; then
    if command -v mpicc.openmpi >/dev/null \
        && mpicc.openmpi -O2 -Wall -o "$OUT/collectives_ompi" "$BENCH_DIR/c/collectives.c" >"$OUT/build-coll-ompi.log" 2>&1; then
        # Same flags as pingpong.sh: ob1 + TCP BTL (self for a rank to itself), loopback for
        # both MPI traffic and the runtime. With more ranks than cores Open MPI runs in its
        # oversubscribed mode (no binding, yields the CPU when idle).
        CMD[ompi]="mpirun.openmpi --allow-run-as-root --oversubscribe -np {np} --mca pml ob1 --mca btl $OMPI_BTL --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo $OUT/collectives_ompi"
    else
        SKIP[ompi]="mpicc.openmpi missing or compile of c/collectives.c failed (see out/build-coll-ompi.log)"
    fi
fi

if want p2pmpi && [ -n "${P2PMPI_CMD:-}" ]; then
    CMD[p2pmpi]=$P2PMPI_CMD   # explicit command given: no build
elif want p2pmpi; then
    P2P_RUN="$TARGET_DIR/release/p2pmpirun"
    P2P_BIN="$TARGET_DIR/release/examples/coll_bench"
    log "building p2pmpirun and examples/coll_bench (release)"
    if (cd "$ROOT" && cargo build --release -p p2pmpi-cli -p p2pmpi-examples --example coll_bench) \
            >"$OUT/build-coll-p2pmpi.log" 2>&1 \
        && [ -x "$P2P_RUN" ] && [ -x "$P2P_BIN" ]; then
        CMD[p2pmpi]="$P2P_RUN -n {np} $P2P_BIN"
    else
        why=$(grep -m1 '^error' "$OUT/build-coll-p2pmpi.log" 2>/dev/null | cut -c1-160)
        SKIP[p2pmpi]="could not build p2pmpirun + example coll_bench${why:+ ($why)}; full log: out/build-coll-p2pmpi.log"
    fi
fi

# --------------------------------------------------------------------------- smoke test
run_one() { # impl np outfile colls sizes target_s
    local impl=$1 np=$2 outf=$3 colls=$4 sizes=$5 ts=$6
    local cmd=${CMD[$impl]//\{np\}/$np}
    # shellcheck disable=SC2086
    timeout --kill-after=5 "$RUN_TIMEOUT" $cmd "$colls" "$sizes" "$ts" >"$outf" 2>"$outf.err" </dev/null
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
    if run_one "$impl" "$NP_MIN" "$f" "$COLLS" 8 0.005 \
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
QUIET_LEFT=$QUIET_BUDGET
: >"$OUT/coll-load.txt"
{
    for impl in "${ACTIVE[@]}"; do echo "$impl: ${CMD[$impl]} $COLLS $SIZES $TARGET_S"; done
} >"$OUT/coll-commands.txt"
log "running ${ACTIVE[*]}, np $NPS, REPS=$REPS, sizes $SIZES, TARGET_S=$TARGET_S"
# Interleaved: every repetition runs every (np, implementation) once; the implementation
# that starts rotates with the repetition and the process count.
n=${#ACTIVE[@]}
for ((rep = 1; rep <= REPS; rep++)); do
    npi=0
    for np in $NPS; do
        for ((k = 0; k < n; k++)); do
            impl=${ACTIVE[$(((k + rep - 1 + npi) % n))]}
            f="$RAW/$impl.np$np.$rep.txt"
            busy=$(wait_quiet)
            echo "$impl $np $rep $busy" >>"$OUT/coll-load.txt"
            t0=$(date +%s%N)
            run_one "$impl" "$np" "$f" "$COLLS" "$SIZES" "$TARGET_S"
            rc=$?
            [ $rc -eq 0 ] || log "rep $rep: $impl np=$np failed (exit $rc, see $f.err)"
            ms=$((($(date +%s%N) - t0) / 1000000))
            log "rep $rep/$REPS: $impl np=$np took $((ms / 1000)).$(((ms % 1000) / 100)) s"
        done
        npi=$((npi + 1))
    done
    log "rep $rep/$REPS done ($(($(date +%s) - T_START)) s elapsed)"
done

# --------------------------------------------------------------------------- report
SKIPPED=""
for impl in $IMPLS; do
    [ -n "${SKIP[$impl]:-}" ] && SKIPPED+="$impl: ${SKIP[$impl]}"$'\n'
done
export REPS OUT RAW NPS COLLS SKIPPED QUIET_PCT TARGET_S
export_machine

python3 - <<'PY'
import glob, os, re, statistics

E = os.environ
out, raw = E["OUT"], E["RAW"]
reps = int(E["REPS"])
nps = [int(x) for x in E["NPS"].split()]
corder = E["COLLS"].split(",")
names = {"ompi": "Open MPI", "p2pmpi": "p2pmpi"}

data = {}    # (impl, np, coll, bytes) -> [us]
errors = {}  # (impl, np, coll, bytes) -> number of runs with wrong results
for f in sorted(glob.glob(os.path.join(raw, "*.txt"))):
    m = re.match(r"(.+)\.np(\d+)\.(\d+)\.txt$", os.path.basename(f))
    if not m:
        continue  # smoke-test files
    impl = m.group(1)
    for line in open(f):
        p = line.split()
        if len(p) != 5 or p[0] not in ("coll", "error"):
            continue
        try:
            key = (impl, int(p[2]), p[1], int(p[3]))
            if p[0] == "coll":
                data.setdefault(key, []).append(float(p[4]))
            else:
                errors[key] = errors.get(key, 0) + 1
        except ValueError:
            pass

with open(os.path.join(out, "collectives.csv"), "w") as c:
    c.write("impl,np,collective,bytes,us_per_op\n")
    for (impl, np, coll, b), v in sorted(data.items()):
        for x in v:
            c.write(f"{impl},{np},{coll},{b},{x}\n")

impls = [i for i in ("ompi", "p2pmpi") if any(k[0] == i for k in data)]
rowkeys = sorted({(k[2], k[3]) for k in data},
                 key=lambda r: (corder.index(r[0]) if r[0] in corder else 99, r[1]))
nps = [n for n in nps if any(k[1] == n for k in data)]
med = {k: statistics.median(v) for k, v in data.items()}

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

def cell(impl, np, row):
    k = (impl, np) + row
    v = med.get(k)
    s = fmt(v)
    if v is not None and errors.get(k):
        s += " (wrong!)"
    return s

hdr = ["collective", "size"]
for np in nps:
    for i in impls:
        hdr.append(f"{names[i]} np={np}")
    if len(impls) == 2:
        hdr.append(f"ratio np={np}")
rows = []
for row in rowkeys:
    r = [row[0], human(row[1])]
    for np in nps:
        for i in impls:
            r.append(cell(i, np, row))
        if len(impls) == 2:
            a, b = med.get(("p2pmpi", np) + row), med.get(("ompi", np) + row)
            r.append(f"{a / b:.2f}" if a is not None and b else "—")
    rows.append(r)

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
versions = ", ".join(v for v in (E.get("VER_OMPI"), E.get("VER_RUST")) if v)
counts = sorted({len(v) for v in data.values()})
nrep = f"{reps} interleaved runs" + ("" if counts == [reps] else
                                     f" (samples per cell: {', '.join(map(str, counts))})")
skipped = [l for l in E.get("SKIPPED", "").splitlines() if l.strip()]
loads = [int(l.split()[3]) for l in open(os.path.join(out, "coll-load.txt")) if len(l.split()) == 4]
qp = int(E["QUIET_PCT"])
noisy = sum(1 for x in loads if x > qp)
load_note = (f"{noisy} of {len(loads)} runs started while other processes kept the CPUs "
             f">{qp}% busy (max {max(loads)}%): figures are noisy" if noisy else
             f"background CPU load before each run: max {max(loads) if loads else 0}%")
bad = sorted({(k[0], k[1], k[2], k[3]) for k in errors})
over = [n for n in nps if n > int(E["MACHINE_NPROC"])]
how = ("µs per operation, median over runs; each run: max over ranks of (elapsed / iterations), "
       f"back-to-back operations, about {E['TARGET_S']} s per cell; sizes are per process "
       "(bcast: the buffer; reduce, allreduce, scan, reduce_scatter_block: doubles, MPI_SUM)")
ratio_note = "ratio = p2pmpi / Open MPI (< 1: p2pmpi faster)" if len(impls) == 2 else ""
over_note = (f"np={','.join(map(str, over))} oversubscribes the {E['MACHINE_NPROC']} CPUs" if over else "")

print()
print(f"Machine: {machine}")
print(f"Versions: {versions}")
print(f"Medians of {nrep}; all processes on one host, TCP over 127.0.0.1.")
print(how + ".")
for note in (ratio_note, over_note):
    if note:
        print(note + ".")
print(("WARNING: " if noisy else "") + load_note)
for l in skipped:
    print(f"Skipped: {l}")
for k in bad:
    print(f"WRONG RESULTS: {names.get(k[0], k[0])} {k[2]} np={k[1]} {k[3]} B in {errors[k]} run(s)")
print()
print(txt(hdr, rows))
print()

with open(os.path.join(out, "collectives.md"), "w") as m:
    m.write("### Collectives, 2-8 processes on one host (loopback TCP)\n\n")
    m.write(f"Machine: {machine}.  \nVersions: {versions}.  \n")
    m.write(f"Medians of {nrep} (`bench/collectives.sh`); {how}.  \n")
    if ratio_note:
        m.write(ratio_note + ".  \n")
    if over_note:
        m.write(over_note + ".  \n")
    m.write(("**Warning:** " if noisy else "") + load_note + ".\n")
    for l in skipped:
        m.write(f"\nSkipped: {l}\n")
    for k in bad:
        m.write(f"\n**Wrong results:** {names.get(k[0], k[0])} {k[2]} np={k[1]} {k[3]} B "
                f"in {errors[k]} run(s)\n")
    m.write("\n" + md(hdr, rows) + "\n")
print(f"Markdown: {os.path.join(out, 'collectives.md')}")
PY
log "total $(($(date +%s) - T_START)) s"
