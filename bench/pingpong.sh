#!/usr/bin/env bash
# Ping-pong benchmark: p2pmpi (shared memory, its default between ranks of one host, and TCP)
# vs Open MPI (TCP and shared memory), MPICH (TCP and shared memory) and a raw busy-polling TCP
# socket, all on loopback (127.0.0.1), 2 processes; idle and under the standard background
# loads of bench/load.sh, all at normal priority.
#
# Usage: bench/pingpong.sh [SIZES]
#   SIZES   optional comma-separated message sizes in bytes (also env SIZES)
# Env:
#   REPS=7          interleaved repetitions: each runs, for each load of LOADS, every
#                   implementation once (medians and medians of paired ratios are reported)
#   LOADS="idle cpu mixed"  the background loads (bench/load.sh), each started before and
#                   stopped after its implementations within a repetition
#   LOAD_SETTLE=2   seconds between starting a load and the first run under it
#   IMPLS="..."     subset/order of: ompi-tcp ompi-shm mpich mpich-shm rawtcp p2pmpi-tcp p2pmpi
#                   p2pmpi-1copy (mpich: MPICH forced onto TCP; mpich-shm: its default,
#                   shared memory)
#                   (p2pmpi: shared memory; p2pmpi-tcp: the same with P2PMPI_SHM=0;
#                   p2pmpi-1copy: shared memory with the single copy of large messages,
#                   process_vm_readv, turned on: P2PMPI_SHM_SINGLE_COPY=1, off by default)
#   NO_INSTALL=1    never run apt-get
#   P2PMPI_CMD=...  run this command (sizes appended) for the p2pmpi column instead of
#                   building target/release/p2pmpirun and examples/pingpong_bench
#   RUN_TIMEOUT=90  seconds allowed for one run of one implementation
#   QUIET_PCT=25    before each idle run, wait while other processes keep the CPUs busier than
#   QUIET_BUDGET=60 this, but at most this many seconds in total over the whole script
#
# Output: a table on stdout, Markdown in bench/out/pingpong.md, every run's raw lines in
# bench/out/raw/, all samples in bench/out/pingpong.csv, build logs in bench/out/*.log.
set -uo pipefail

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$BENCH_DIR/.." && pwd)
OUT="$BENCH_DIR/out"
REPS=${REPS:-7}
SIZES=${1:-${SIZES:-}}
IMPLS=${IMPLS:-"ompi-tcp ompi-shm mpich mpich-shm rawtcp p2pmpi-tcp p2pmpi"}
LOADS=${LOADS:-"idle cpu mixed"}
LOAD_SETTLE=${LOAD_SETTLE:-2}
RUN_TIMEOUT=${RUN_TIMEOUT:-90}
QUIET_PCT=${QUIET_PCT:-25}
QUIET_BUDGET=${QUIET_BUDGET:-60}


mkdir -p "$OUT"
rm -rf "$OUT/raw"
mkdir -p "$OUT/raw"
source "$(dirname "$0")/lib.sh"
announce_machine

# --------------------------------------------------------------------------- install
install_missing with-mpich

# --------------------------------------------------------------------------- build
declare -A CMD      # implementation -> command prefix (sizes are appended)
declare -A SKIP     # implementation -> reason it is skipped

want() { [[ " $IMPLS " == *" $1 "* ]]; }

if want ompi-tcp || want ompi-shm; then
    if command -v mpicc.openmpi >/dev/null \
        && mpicc.openmpi -O2 -Wall -o "$OUT/pingpong_ompi" "$BENCH_DIR/c/pingpong.c" >"$OUT/build-ompi.log" 2>&1; then
        OMPI_RUN="mpirun.openmpi --allow-run-as-root --oversubscribe -np 2 --mca pml ob1"
        # TCP BTL: the default btl_tcp_if_exclude drops 127.0.0.1/8 and would use another
        # interface; force loopback for both the MPI traffic and the runtime (OOB).
        CMD[ompi-tcp]="$OMPI_RUN --mca btl tcp,self --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo $OUT/pingpong_ompi"
        # Shared-memory BTL is called vader in Open MPI <= 4, sm in >= 5.
        SHM_BTL=vader
        ompi_info 2>/dev/null | grep -q "MCA btl: vader" || SHM_BTL=sm
        CMD[ompi-shm]="$OMPI_RUN --mca btl $SHM_BTL,self --mca oob_tcp_if_include lo $OUT/pingpong_ompi"
    else
        SKIP[ompi-tcp]="mpicc.openmpi missing or compile failed (see out/build-ompi.log)"
        SKIP[ompi-shm]=${SKIP[ompi-tcp]}
    fi
fi

if want mpich || want mpich-shm; then
    if command -v mpicc.mpich >/dev/null \
        && mpicc.mpich -O2 -Wall -o "$OUT/pingpong_mpich" "$BENCH_DIR/c/pingpong.c" >"$OUT/build-mpich.log" 2>&1; then
        # Debian's MPICH is ch4:ucx. By default two ranks on one host talk through shared
        # memory (ch4 posix shm, or UCX's own shm). MPIR_CVAR_NOLOCAL=1 makes ch4 use the
        # netmod for local peers and UCX_TLS=tcp + UCX_NET_DEVICES=lo keep UCX on TCP/loopback.
        CMD[mpich]="mpirun.mpich -launcher fork -iface lo -np 2 -genv MPIR_CVAR_NOLOCAL 1 -genv UCX_TLS tcp -genv UCX_NET_DEVICES lo $OUT/pingpong_mpich"
        # Its default between ranks of one host: ch4's POSIX shared memory.
        CMD[mpich-shm]="mpirun.mpich -launcher fork -iface lo -np 2 $OUT/pingpong_mpich"
    else
        SKIP[mpich]="mpicc.mpich missing or compile failed (see out/build-mpich.log)"
        SKIP[mpich-shm]=${SKIP[mpich]}
    fi
fi

if want rawtcp; then
    RAW_BIN="$TARGET_DIR/release/rawtcp-pingpong"
    if (cd "$ROOT" && cargo build --release -p p2pmpi-bench-rawtcp) >"$OUT/build-rawtcp.log" 2>&1 \
        && [ -x "$RAW_BIN" ]; then
        CMD[rawtcp]="$RAW_BIN"
    else
        # The workspace may not build as a whole yet (other members in progress): rawtcp is
        # std-only, so compile it directly with rustc, with the release profile's settings.
        log "cargo build of rawtcp failed (see out/build-rawtcp.log); compiling it with rustc"
        RAW_BIN="$OUT/rawtcp-pingpong"
        if rustc --edition 2021 -C opt-level=3 -C debuginfo=1 -o "$RAW_BIN" \
            "$BENCH_DIR/rawtcp/src/main.rs" >>"$OUT/build-rawtcp.log" 2>&1; then
            CMD[rawtcp]="$RAW_BIN"
        else
            SKIP[rawtcp]="build failed (see out/build-rawtcp.log)"
        fi
    fi
fi

if { want p2pmpi || want p2pmpi-tcp || want p2pmpi-1copy; } && [ -n "${P2PMPI_CMD:-}" ]; then
    CMD[p2pmpi]=$P2PMPI_CMD   # explicit command given: no build
    CMD[p2pmpi-tcp]="env P2PMPI_SHM=0 $P2PMPI_CMD"
    CMD[p2pmpi-1copy]="env P2PMPI_SHM_SINGLE_COPY=1 $P2PMPI_CMD"
elif want p2pmpi || want p2pmpi-tcp || want p2pmpi-1copy; then
    P2P_RUN="$TARGET_DIR/release/p2pmpirun"
    P2P_BIN="$TARGET_DIR/release/examples/pingpong_bench"
    if (cd "$ROOT" && cargo build --release -p p2pmpi-cli \
            && cargo build --release -p p2pmpi-examples --example pingpong_bench) >"$OUT/build-p2pmpi.log" 2>&1 \
        && [ -x "$P2P_RUN" ] && [ -x "$P2P_BIN" ]; then
        CMD[p2pmpi]="env P2PMPI_SHM=1 $P2P_RUN -n 2 $P2P_BIN"
        CMD[p2pmpi-tcp]="env P2PMPI_SHM=0 $P2P_RUN -n 2 $P2P_BIN"
        CMD[p2pmpi-1copy]="env P2PMPI_SHM=1 P2PMPI_SHM_SINGLE_COPY=1 $P2P_RUN -n 2 $P2P_BIN"
    else
        why=$(grep -m1 '^error' "$OUT/build-p2pmpi.log" 2>/dev/null | cut -c1-160)
        SKIP[p2pmpi]="could not build p2pmpirun + example pingpong_bench${why:+ ($why)}; full log: out/build-p2pmpi.log"
        SKIP[p2pmpi-tcp]=${SKIP[p2pmpi]}
        SKIP[p2pmpi-1copy]=${SKIP[p2pmpi]}
    fi
fi

# --------------------------------------------------------------------------- smoke test
# One quick run per implementation (size 8 only) to catch a broken command before the reps.
run_one() { # impl outfile [sizes]
    local impl=$1 outf=$2 sz=${3:-$SIZES}
    # shellcheck disable=SC2086
    timeout --kill-after=5 "$RUN_TIMEOUT" ${CMD[$impl]} ${sz:+"$sz"} >"$outf" 2>"$outf.err" </dev/null
}
ACTIVE=()
for impl in $IMPLS; do
    if [ -n "${SKIP[$impl]:-}" ]; then
        log "SKIP $impl: ${SKIP[$impl]}"; continue
    fi
    if [ -z "${CMD[$impl]:-}" ]; then
        log "SKIP $impl: unknown implementation"; SKIP[$impl]="unknown implementation"; continue
    fi
    if run_one "$impl" "$OUT/raw/smoke-$impl.txt" 8 && grep -q '^pingpong 8 ' "$OUT/raw/smoke-$impl.txt"; then
        ACTIVE+=("$impl")
    elif [ "$impl" = ompi-shm ] && CMD[ompi-shm]="${CMD[ompi-shm]/--mca btl /--mca btl_${SHM_BTL}_single_copy_mechanism none --mca btl }" \
        && run_one "$impl" "$OUT/raw/smoke-$impl.txt" 8 && grep -q '^pingpong 8 ' "$OUT/raw/smoke-$impl.txt"; then
        log "ompi-shm: CMA single copy unavailable here, using btl_${SHM_BTL}_single_copy_mechanism none"
        ACTIVE+=("$impl")
    else
        SKIP[$impl]="smoke run failed (see out/raw/smoke-$impl.txt.err)"
        log "SKIP $impl: ${SKIP[$impl]}"
        sed 's/^/    /' "$OUT/raw/smoke-$impl.txt.err" | head -n 15 >&2
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
: >"$OUT/load.txt"
# Interleaved: every repetition runs, under each load in turn, every implementation once; the
# starting load and the starting implementation rotate so none is always first (or always
# right after a build, or right after a given load). All at normal priority.
{
    for impl in "${ACTIVE[@]}"; do echo "$impl: ${CMD[$impl]}"; done
    echo "loads: $LOADS (bench/load.sh KIND around each load's runs, $LOAD_SETTLE s to settle)"
} >"$OUT/commands.txt"
log "running ${ACTIVE[*]}, loads $LOADS, REPS=$REPS${SIZES:+, sizes $SIZES}"
n=${#ACTIVE[@]}
nl=${#LOADV[@]}
for ((rep = 1; rep <= REPS; rep++)); do
    for ((l = 0; l < nl; l++)); do
        load=${LOADV[$(((l + rep - 1) % nl))]}
        load_start "$load"
        [ "$load" = idle ] || sleep "$LOAD_SETTLE"
        for ((k = 0; k < n; k++)); do
            impl=${ACTIVE[$(((k + rep - 1) % n))]}
            f="$OUT/raw/$impl.$load.$rep.txt"
            quiet_check
            echo "$impl $load $rep $BUSY" >>"$OUT/load.txt"
            run_one "$impl" "$f"
            rc=$?
            [ $rc -eq 0 ] || log "rep $rep, $load: $impl failed (exit $rc, see $f.err)"
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
export REPS OUT IMPLS SKIPPED QUIET_PCT LOADS
export_machine
export VER_MPICH=$(mpirun.mpich --version 2>/dev/null | awk '/Version:/ {print "MPICH " $2; exit}')

python3 - <<'PY'
import glob, os, re, statistics

E = os.environ
out = E["OUT"]
reps = int(E["REPS"])
order = ["ompi-tcp", "ompi-shm", "mpich", "mpich-shm", "rawtcp", "p2pmpi-tcp", "p2pmpi", "p2pmpi-1copy"]
names = {"ompi-tcp": "Open MPI TCP", "ompi-shm": "Open MPI shm", "mpich": "MPICH TCP", "mpich-shm": "MPICH shm",
         "rawtcp": "raw TCP", "p2pmpi-tcp": "p2pmpi TCP", "p2pmpi-1copy": "p2pmpi shm 1-copy",
         "p2pmpi": "p2pmpi shm"}
# p2pmpi over shared memory against the others' shared memory, over TCP against their TCP
# (like with like); a ratio is taken within one repetition and one load (a pair of runs a few
# seconds apart), and the median of those paired ratios is what a cell reports.
PAIRS = (("p2pmpi", "ompi-shm"), ("p2pmpi", "mpich-shm"), ("p2pmpi-1copy", "ompi-shm"), ("p2pmpi-1copy", "p2pmpi"),
         ("p2pmpi-tcp", "ompi-tcp"), ("p2pmpi-tcp", "mpich"), ("p2pmpi-tcp", "rawtcp"))
TARGETED = {"ompi-shm", "ompi-tcp", "mpich", "mpich-shm"}  # target: as fast as these, or faster

data = {}  # (impl, load) -> size -> {rep: (lat, bw)}
for f in sorted(glob.glob(os.path.join(out, "raw", "*.txt"))):
    m = re.match(r"(.+)\.(idle|cpu|mixed)\.(\d+)\.txt$", os.path.basename(f))
    if not m:
        continue  # smoke-test files
    impl, load, rep = m.group(1), m.group(2), int(m.group(3))
    for line in open(f):
        p = line.split()
        if len(p) == 4 and p[0] == "pingpong":
            try:
                size, lat = int(p[1]), float(p[2])
                # Bandwidth from the latency (bytes per µs = MB/s), not the printed figure, which
                # has two decimals only: tiny bandwidths would round to 0.
                bw = size / lat if size > 0 and lat > 0 else float(p[3])
                data.setdefault((impl, load), {}).setdefault(size, {})[rep] = (lat, bw)
            except ValueError:
                pass

with open(os.path.join(out, "pingpong.csv"), "w") as c:
    c.write("impl,load,rep,size,one_way_us,mb_per_s\n")
    for (impl, load), by_size in sorted(data.items()):
        for size, samples in sorted(by_size.items()):
            for rep, (lat, bw) in sorted(samples.items()):
                c.write(f"{impl},{load},{rep},{size},{lat},{bw}\n")

present = {i for i, _ in data}
impls = [i for i in order if i in present] + sorted(present - set(order))
loads = [l for l in E["LOADS"].split() if any(k[1] == l for k in data)]
sizes = sorted({s for v in data.values() for s in v})
pairs = [(a, b) for a, b in PAIRS if a in impls and b in impls]


def samples(i, load, s):
    return data.get((i, load), {}).get(s, {})


def median_of(i, load, s, k):
    v = samples(i, load, s)
    return statistics.median(x[k] for x in v.values()) if v else None


def paired(a, b, load, s, k):
    """Median over the repetitions of a's figure / b's figure in the same repetition."""
    x, y = samples(a, load, s), samples(b, load, s)
    r = [x[n][k] / y[n][k] for n in x if n in y and y[n][k] > 0]
    return (statistics.median(r), len(r)) if r else (None, 0)


def human(n):
    for unit, k in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= k and n % k == 0:
            return f"{n // k} {unit}"
    return f"{n} B"


def fmt(x, nd):
    if x is None:
        return "—"
    if nd is None:  # bandwidth: keep ~3 significant digits for small values
        nd = 2 if x < 10 else 1 if x < 100 else 0
    return f"{x:.{nd}f}"


def met(x, k):  # latency: p2pmpi's / theirs <= 1; bandwidth: >= 1
    return x <= 1.0 if k == 0 else x >= 1.0


def load_table(load, kind):
    k, nd = (0, 2) if kind == "lat" else (1, None)
    hdr = ["size"] + [names.get(i, i) for i in impls]
    rows = [[human(s)] + [fmt(median_of(i, load, s, k), nd) for i in impls]
            for s in sizes if not (kind == "bw" and s == 0)]
    return hdr, rows


tally = {}  # (a, b, load, k) -> [met, cells]


def ratio_table(a, b):
    hdr = ["size"] + [f"latency {l}" for l in loads] + [f"bandwidth {l}" for l in loads]
    rows = []
    for s in sizes:
        r = [human(s)]
        for k in (0, 1):
            for l in loads:
                x, _ = paired(a, b, l, s, k)
                if k == 1 and s == 0:
                    x = None
                cell = fmt(x, 2)
                if x is not None and b in TARGETED:
                    ok = met(x, k)
                    cell += " ✓" if ok else " ✗"
                    t = tally.setdefault((a, b, l, k), [0, 0])
                    t[0] += ok
                    t[1] += 1
                r.append(cell)
        rows.append(r)
    return hdr, rows


def md(hdr, rows):
    lines = ["| " + " | ".join(hdr) + " |",
             "|" + "|".join(["---"] + ["---:"] * (len(hdr) - 1)) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def txt(hdr, rows):
    w = [max(len(h), *(len(r[j]) for r in rows)) if rows else len(h) for j, h in enumerate(hdr)]
    fmt_row = lambda r: "  ".join(c.rjust(w[j]) for j, c in enumerate(r))
    return "\n".join([fmt_row(hdr), fmt_row(["-" * x for x in w])] + [fmt_row(r) for r in rows])


machine = (f"{E['MACHINE_NPROC']} CPUs, {E['MACHINE_CPU']}, {E['MACHINE_KERNEL']}; "
           f"{E['MACHINE_DATE']}")
versions = ", ".join(v for v in (E.get("VER_OMPI"), E.get("VER_MPICH"), E.get("VER_RUST")) if v)
counts = sorted({len(v) for by in data.values() for v in by.values()})
nrep = f"{reps} interleaved runs per load" + (
    "" if counts == [reps] else f" (samples per cell: {', '.join(map(str, counts))})")
skipped = [l for l in E.get("SKIPPED", "").splitlines() if l.strip()]
load_desc = {"idle": "idle (nothing else started by the script)",
             "cpu": "cpu (`bench/load.sh cpu`: one busy loop per core, nice 0)",
             "mixed": "mixed (`bench/load.sh mixed`: a C tree rebuilt by `make -j2`, nice 0)"}

busy = {}  # load -> [busy % before each run]
for l in open(os.path.join(out, "load.txt")):
    p = l.split()
    if len(p) == 4 and p[3].isdigit():
        busy.setdefault(p[1], []).append(int(p[3]))
qp = int(E["QUIET_PCT"])
idle_b = busy.get("idle", [])
noisy = sum(1 for x in idle_b if x > qp)
load_note = (f"{noisy} of {len(idle_b)} idle runs started while other processes kept the CPUs "
             f">{qp}% busy (max {max(idle_b)}%): idle figures are noisy" if noisy else
             f"CPU busy before each idle run: max {max(idle_b) if idle_b else 0}%")
loaded_note = "; ".join(f"{l}: median {statistics.median(busy[l]):.0f}% busy before a run"
                        for l in loads if l != "idle" and busy.get(l))
ratio_note = ("Paired ratios: p2pmpi's figure ÷ the other's in the same repetition and load, "
              "median over the repetitions; latency < 1 and bandwidth > 1 mean p2pmpi is faster; "
              "✓ = the cell meets the target (p2pmpi at least as fast as Open MPI / MPICH on the "
              "same transport, under the same load), ✗ = it does not.")

summary = []
tables = {l: (load_table(l, "lat"), load_table(l, "bw")) for l in loads}
rtables = [((a, b), ratio_table(a, b)) for a, b in pairs]
for (a, b) in pairs:
    if b not in TARGETED:
        continue
    parts = []
    for k, what in ((0, "latency"), (1, "bandwidth")):
        parts.append(what + " " + ", ".join(f"{l} {tally[(a, b, l, k)][0]}/{tally[(a, b, l, k)][1]}"
                                             for l in loads if (a, b, l, k) in tally))
    summary.append(f"{names[a]} / {names[b]}: cells met: " + "; ".join(parts))

print()
print(f"Machine: {machine}")
print(f"Versions: {versions}")
print(f"Medians of {nrep}; 2 processes on 127.0.0.1; normal priority.")
print("Loads: " + ", ".join(loads))
print(("WARNING: " if noisy else "") + load_note)
if loaded_note:
    print(loaded_note)
for l in skipped:
    print(f"Skipped: {l}")
for l in loads:
    (lat, bw) = tables[l]
    print(f"\n[{l}] One-way latency (µs, median; lower is better)\n")
    print(txt(*lat))
    print(f"\n[{l}] Bandwidth (MB/s = 1e6 B/s, median; higher is better)\n")
    print(txt(*bw))
print("\n" + ratio_note)
for (a, b), t in rtables:
    print(f"\n{names[a]} / {names[b]}, median of paired ratios, idle and loaded\n")
    print(txt(*t))
print()
for l in summary:
    print(l)
print()

with open(os.path.join(out, "pingpong.md"), "w") as m:
    m.write("### Ping-pong, 2 processes on one host (loopback), idle and under load\n\n")
    m.write(f"Machine: {machine}.  \nVersions: {versions}.  \n")
    m.write(f"Medians of {nrep} (`bench/pingpong.sh`, normal priority, loads interleaved with the "
            "implementations). One-way latency = round trip / 2; "
            "bandwidth = bytes / one-way time, MB = 10^6 bytes.  \n")
    m.write("Loads: " + "; ".join(load_desc.get(l, l) for l in loads) + ".  \n")
    m.write(("**Warning:** " if noisy else "") + load_note + (f"; {loaded_note}" if loaded_note else "") + ".\n")
    for l in skipped:
        m.write(f"\nSkipped: {l}\n")
    for l in loads:
        (lat, bw) = tables[l]
        m.write(f"\n#### {l}: one-way latency (µs, lower is better)\n\n")
        m.write(md(*lat) + "\n")
        m.write(f"\n#### {l}: bandwidth (MB/s, higher is better)\n\n")
        m.write(md(*bw) + "\n")
    m.write("\n#### Paired ratios, idle and loaded side by side\n\n" + ratio_note + "\n")
    for (a, b), t in rtables:
        m.write(f"\n{names[a]} / {names[b]}:\n\n")
        m.write(md(*t) + "\n")
    if summary:
        m.write("\n")
        for l in summary:
            m.write(f"- {l}\n")
print(f"Markdown: {os.path.join(out, 'pingpong.md')}")
PY
log "total $(($(date +%s) - T_START)) s"
