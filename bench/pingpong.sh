#!/usr/bin/env bash
# Ping-pong benchmark: p2pmpi (shared memory, its default between ranks of one host, and TCP)
# vs Open MPI (TCP and shared memory), MPICH (TCP) and a raw busy-polling TCP socket, all on
# loopback (127.0.0.1), 2 processes.
#
# Usage: bench/pingpong.sh [SIZES]
#   SIZES   optional comma-separated message sizes in bytes (also env SIZES)
# Env:
#   REPS=5          interleaved repetitions of every implementation (medians are reported)
#   IMPLS="..."     subset/order of: ompi-tcp ompi-shm mpich rawtcp p2pmpi-tcp p2pmpi
#                   p2pmpi-1copy
#                   (p2pmpi: shared memory; p2pmpi-tcp: the same with P2PMPI_SHM=0;
#                   p2pmpi-1copy: shared memory with the single copy of large messages,
#                   process_vm_readv, turned on: P2PMPI_SHM_SINGLE_COPY=1, off by default)
#   NO_INSTALL=1    never run apt-get
#   P2PMPI_CMD=...  run this command (sizes appended) for the p2pmpi column instead of
#                   building target/release/p2pmpirun and examples/pingpong_bench
#   RUN_TIMEOUT=90  seconds allowed for one run of one implementation
#   QUIET_PCT=25    before each run, wait while other processes keep the CPUs busier than this
#   QUIET_BUDGET=60 ...but wait at most this many seconds in total over the whole script
#
# Output: a table on stdout, Markdown in bench/out/pingpong.md, every run's raw lines in
# bench/out/raw/, all samples in bench/out/pingpong.csv, build logs in bench/out/*.log.
set -uo pipefail

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$BENCH_DIR/.." && pwd)
OUT="$BENCH_DIR/out"
REPS=${REPS:-5}
SIZES=${1:-${SIZES:-}}
IMPLS=${IMPLS:-"ompi-tcp ompi-shm mpich rawtcp p2pmpi-tcp p2pmpi"}
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

if want mpich; then
    if command -v mpicc.mpich >/dev/null \
        && mpicc.mpich -O2 -Wall -o "$OUT/pingpong_mpich" "$BENCH_DIR/c/pingpong.c" >"$OUT/build-mpich.log" 2>&1; then
        # Debian's MPICH is ch4:ucx. By default two ranks on one host talk through shared
        # memory (ch4 posix shm, or UCX's own shm). MPIR_CVAR_NOLOCAL=1 makes ch4 use the
        # netmod for local peers and UCX_TLS=tcp + UCX_NET_DEVICES=lo keep UCX on TCP/loopback.
        CMD[mpich]="mpirun.mpich -launcher fork -iface lo -np 2 -genv MPIR_CVAR_NOLOCAL 1 -genv UCX_TLS tcp -genv UCX_NET_DEVICES lo $OUT/pingpong_mpich"
    else
        SKIP[mpich]="mpicc.mpich missing or compile failed (see out/build-mpich.log)"
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
QUIET_LEFT=$QUIET_BUDGET
: >"$OUT/load.txt"
# Interleaved: every repetition runs every implementation once; the starting
# implementation rotates so none is always first (or always right after a build).
{
    for impl in "${ACTIVE[@]}"; do echo "$impl: ${CMD[$impl]}"; done
} >"$OUT/commands.txt"
log "running ${ACTIVE[*]}, REPS=$REPS${SIZES:+, sizes $SIZES}"
n=${#ACTIVE[@]}
for ((rep = 1; rep <= REPS; rep++)); do
    for ((k = 0; k < n; k++)); do
        impl=${ACTIVE[$(((k + rep - 1) % n))]}
        f="$OUT/raw/$impl.$rep.txt"
        busy=$(wait_quiet)
        echo "$impl $rep $busy" >>"$OUT/load.txt"
        run_one "$impl" "$f"
        rc=$?
        [ $rc -eq 0 ] || log "rep $rep: $impl failed (exit $rc, see $f.err)"
    done
    log "rep $rep/$REPS done ($(($(date +%s) - T_START)) s elapsed)"
done

# --------------------------------------------------------------------------- report
SKIPPED=""
for impl in $IMPLS; do
    [ -n "${SKIP[$impl]:-}" ] && SKIPPED+="$impl: ${SKIP[$impl]}"$'\n'
done
export REPS OUT IMPLS SKIPPED QUIET_PCT
export_machine
export VER_MPICH=$(mpirun.mpich --version 2>/dev/null | awk '/Version:/ {print "MPICH " $2; exit}')

python3 - <<'PY'
import glob, os, re, statistics

out = os.environ["OUT"]
reps = int(os.environ["REPS"])
order = ["ompi-tcp", "ompi-shm", "mpich", "rawtcp", "p2pmpi-tcp", "p2pmpi", "p2pmpi-1copy"]
names = {"ompi-tcp": "Open MPI TCP", "ompi-shm": "Open MPI shm", "mpich": "MPICH TCP",
         "rawtcp": "raw TCP", "p2pmpi-tcp": "p2pmpi TCP", "p2pmpi-1copy": "p2pmpi shm 1-copy",
         "p2pmpi": "p2pmpi shm"}

data = {}  # impl -> size -> [(lat, bw)]
for f in sorted(glob.glob(os.path.join(out, "raw", "*.txt"))):
    m = re.match(r"(.+)\.(\d+)\.txt$", os.path.basename(f))
    if not m:
        continue  # smoke-test files
    impl = m.group(1)
    for line in open(f):
        p = line.split()
        if len(p) == 4 and p[0] == "pingpong":
            try:
                data.setdefault(impl, {}).setdefault(int(p[1]), []).append((float(p[2]), float(p[3])))
            except ValueError:
                pass

with open(os.path.join(out, "pingpong.csv"), "w") as c:
    c.write("impl,size,one_way_us,mb_per_s\n")
    for impl in data:
        for size, samples in sorted(data[impl].items()):
            for lat, bw in samples:
                c.write(f"{impl},{size},{lat},{bw}\n")

impls = [i for i in order if i in data] + [i for i in data if i not in order]
sizes = sorted({s for i in data for s in data[i]})
med = {i: {s: (statistics.median(x[0] for x in v), statistics.median(x[1] for x in v), len(v))
           for s, v in data[i].items()} for i in impls}

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

def get(i, s, k):
    v = med.get(i, {}).get(s)
    return None if v is None else v[k]

def ratio(a, b):
    return None if a is None or b is None or b == 0 else a / b

def table(kind):
    k, nd = (0, 2) if kind == "lat" else (1, None)
    hdr = ["size"] + [names.get(i, i) for i in impls]
    # p2pmpi over shared memory against Open MPI's, over TCP against TCP.
    pairs = [(a, b) for a, b in (("p2pmpi", "ompi-shm"), ("p2pmpi-1copy", "ompi-shm"), ("p2pmpi-1copy", "p2pmpi"),
                                 ("p2pmpi-tcp", "ompi-tcp"), ("p2pmpi-tcp", "rawtcp"))
             if a in impls and b in impls]
    hdr += [f"{names[a]} / {names[b]}" for a, b in pairs]
    rows = []
    for s in sizes:
        if kind == "bw" and s == 0:
            continue
        r = [human(s)] + [fmt(get(i, s, k), nd) for i in impls]
        r += [fmt(ratio(get(a, s, k), get(b, s, k)), 2) for a, b in pairs]
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

E = os.environ
machine = (f"{E['MACHINE_NPROC']} CPUs, {E['MACHINE_CPU']}, {E['MACHINE_KERNEL']}; "
           f"{E['MACHINE_DATE']}")
versions = ", ".join(v for v in (E.get("VER_OMPI"), E.get("VER_MPICH"), E.get("VER_RUST")) if v)
counts = sorted({n for i in impls for (_, _, n) in med[i].values()})
nrep = f"{reps} interleaved runs" + ("" if counts == [reps] else f" (samples per cell: {', '.join(map(str, counts))})")
skipped = [l for l in E.get("SKIPPED", "").splitlines() if l.strip()]

loads = [int(l.split()[2]) for l in open(os.path.join(out, "load.txt")) if len(l.split()) == 3]
qp = int(E["QUIET_PCT"])
noisy = sum(1 for x in loads if x > qp)
load_note = (f"{noisy} of {len(loads)} runs started while other processes kept the CPUs "
             f">{qp}% busy (max {max(loads)}%): figures are noisy" if noisy else
             f"background CPU load before each run: max {max(loads) if loads else 0}%")

lat, bw = table("lat"), table("bw")
print()
print(f"Machine: {machine}")
print(f"Versions: {versions}")
print(f"Medians of {nrep}; 2 processes on 127.0.0.1.")
print(("WARNING: " if noisy else "") + load_note)
for l in skipped:
    print(f"Skipped: {l}")
print("\nOne-way latency (µs, median; lower is better)\n")
print(txt(*lat))
print("\nBandwidth (MB/s = 1e6 B/s, median; higher is better)\n")
print(txt(*bw))
print()

with open(os.path.join(out, "pingpong.md"), "w") as m:
    m.write("### Ping-pong, 2 processes on one host (loopback)\n\n")
    m.write(f"Machine: {machine}.  \nVersions: {versions}.  \n")
    m.write(f"Medians of {nrep} (`bench/pingpong.sh`). One-way latency = round trip / 2; "
            "bandwidth = bytes / one-way time, MB = 10^6 bytes.  \n")
    m.write(("**Warning:** " if noisy else "") + load_note + ".\n")
    for l in skipped:
        m.write(f"\nSkipped: {l}\n")
    m.write("\n#### One-way latency (µs, lower is better)\n\n")
    m.write(md(*lat) + "\n")
    m.write("\n#### Bandwidth (MB/s, higher is better)\n\n")
    m.write(md(*bw) + "\n")
print(f"Markdown: {os.path.join(out, 'pingpong.md')}")
PY
log "total $(($(date +%s) - T_START)) s"
