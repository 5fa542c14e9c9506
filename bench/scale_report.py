#!/usr/bin/env python3
"""The report of bench/scale.sh: reads bench/out/scale.csv (and the environment the script
exports), prints the tables and writes bench/out/scale.md.

Per metric and N: the median of each implementation over the repetitions, and the median of
the paired ratios p2pmpi / Open MPI (runs of one repetition paired). Growth: the exponent b of
a least-squares fit metric ~ a * N^b over the N measured (log-log), per implementation, with
the factor per doubling of N (2^b) and a reading: b < 0.35 flat or logarithmic, 0.65-1.35
linear, 1.65-2.35 quadratic, otherwise N^b; and the exponent between each two consecutive N
(log(m2 / m1) / log(n2 / n1)), since the regime may change along the range.
"""
import csv
import math
import os
import statistics

E = os.environ
out = E["OUT"]
ns = [int(x) for x in E["RANKS"].split()]
names = {"p2pmpi": "p2pmpi", "ompi": "Open MPI"}

samples = {}  # (impl, n, rep) -> {metric: value}
failed = {}  # (impl, n) -> [text]
metrics = ["init_ms", "wall_ms", "main_ms", "first_barrier_us", "barrier_us"]
with open(E["CSV"]) as f:
    for r in csv.DictReader(f):
        if r["rep"] == "0":
            continue
        key = (r["impl"], int(r["n"]))
        if r["status"] != "ok":
            failed.setdefault(key, []).append(f"rep {r['rep']}: {r['status']} after {float(r['wall_ms']) / 1e3:.1f} s")
            continue
        vals = {"wall_ms": float(r["wall_ms"])}
        for kv in r["line"].split()[1:]:
            k, _, v = kv.partition("=")
            try:
                vals[k] = float(v)
            except ValueError:
                pass
            if k.startswith("allreduce_") and k not in metrics:
                metrics.append(k)
        samples[(r["impl"], int(r["n"]), r["rep"])] = vals

labels = {
    "init_ms": ("start-up: launch to MPI_Init returned everywhere", "ms"),
    "wall_ms": ("wall time of the whole command", "ms"),
    "main_ms": ("launch to the last rank's main", "ms"),
    "first_barrier_us": ("first barrier (waits for the last rank's start-up)", "ms"),
    "barrier_us": ("barrier, median", "µs"),
}


def label(m):
    if m in labels:
        return labels[m]
    size = m[len("allreduce_"):-len("_us")]
    return (f"all-reduce {size} B, median", "µs")


def values(impl, n, m):
    return [v[m] for (i, k, _), v in samples.items() if i == impl and k == n and m in v]


def scale(m, x):
    # first_barrier is measured in µs, shown in ms
    return x / 1e3 if m == "first_barrier_us" else x


def med(impl, n, m):
    v = values(impl, n, m)
    return scale(m, statistics.median(v)) if v else None


def paired(n, m):
    r = []
    for (i, k, rep), v in samples.items():
        o = samples.get(("ompi", k, rep))
        if i == "p2pmpi" and k == n and o and m in v and o.get(m):
            r.append(v[m] / o[m])
    return statistics.median(r) if r else None


def fmt(x):
    if x is None:
        return "—"
    return f"{x:.0f}" if x >= 100 else f"{x:.1f}" if x >= 10 else f"{x:.2f}"


def growth(impl, m):
    pts = [(math.log(n), math.log(med(impl, n, m))) for n in ns if med(impl, n, m)]
    if len(pts) < 2:
        return None
    mx = sum(p[0] for p in pts) / len(pts)
    my = sum(p[1] for p in pts) / len(pts)
    sxx = sum((p[0] - mx) ** 2 for p in pts)
    return sum((p[0] - mx) * (p[1] - my) for p in pts) / sxx if sxx else None


def steps(impl, m):
    """The exponent between consecutive N: log(m2 / m1) / log(n2 / n1)."""
    out = []
    for a, b in zip(ns, ns[1:]):
        x, y = med(impl, a, m), med(impl, b, m)
        out.append(f"{math.log(y / x) / math.log(b / a):.2f}" if x and y else "—")
    return ", ".join(out)


def reading(b, impl, m):
    if b is None:
        return "—"
    kind = ("flat or logarithmic" if b < 0.35 else "linear" if 0.65 <= b <= 1.35
            else "quadratic" if 1.65 <= b <= 2.35 else f"N^{b:.1f}")
    step = f"; by step {steps(impl, m)}" if len(ns) > 2 else ""
    return f"b = {b:.2f} (×{2 ** b:.2f} per doubling): {kind}{step}"


def table(hdr, rows, md):
    if md:
        lines = ["| " + " | ".join(hdr) + " |", "|---|" + "|".join(["---:"] * (len(hdr) - 1)) + "|"]
        return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])
    w = [max(len(h), *(len(r[j]) for r in rows)) for j, h in enumerate(hdr)]
    fr = lambda r: "  ".join(c.ljust(w[j]) if j == 0 else c.rjust(w[j]) for j, c in enumerate(r))
    return "\n".join([fr(hdr), fr(["-" * x for x in w])] + [fr(r) for r in rows])


def span(impl, n, m):
    v = values(impl, n, m)
    return "—" if not v else f"{fmt(scale(m, min(v)))}–{fmt(scale(m, max(v)))}"


hdr = ["metric", "N", "p2pmpi", "Open MPI", "ratio", "p2pmpi min–max", "Open MPI min–max"]
rows = []
for m in metrics:
    name, unit = label(m)
    for n in ns:
        nf = len(failed.get(("p2pmpi", n), []))
        of = len(failed.get(("ompi", n), []))
        rows.append([f"{name}, {unit}", str(n), fmt(med("p2pmpi", n, m)) + (f" ({nf} failed)" if nf else ""),
                     fmt(med("ompi", n, m)) + (f" ({of} failed)" if of else ""), fmt(paired(n, m)),
                     span("p2pmpi", n, m), span("ompi", n, m)])

grows = [[label(m)[0], reading(growth("p2pmpi", m), "p2pmpi", m), reading(growth("ompi", m), "ompi", m)] for m in metrics]
ghdr = ["metric", "p2pmpi growth", "Open MPI growth"]

loads = [int(x.split()[3]) for x in open(os.path.join(out, "scale-load.txt")) if len(x.split()) == 4]
qp = int(E["QUIET_PCT"])
noisy = sum(1 for x in loads if x > qp)
load_note = (f"{noisy} of {len(loads)} runs started while other processes kept the CPUs >{qp}% busy "
             f"(max {max(loads)}%): noisy figures" if noisy else
             f"CPU load before each run at most {max(loads) if loads else 0}%")
machine = f"{E['MACHINE_NPROC']} CPUs, {E['MACHINE_CPU']}, {E['MACHINE_KERNEL']}; {E['MACHINE_DATE']}"
counts = sorted({len(values(i, n, "wall_ms")) for i in ("p2pmpi", "ompi") for n in ns})
nrep = f"{E['REPS']} interleaved runs" + ("" if counts == [int(E["REPS"])] else
                                           f" (successful runs per cell: {', '.join(map(str, counts))})")
grid = (f"p2pmpi on a local grid of {E['GRID_PEERS']} peers × {E['GRID_PROCS']} processes (peer i on "
        f"127.0.0.(i+1); a job's ranks spread over the peers; ranks of one peer use shared memory, "
        f"others TCP), started once before the runs"
        + (f" ({E['GRID_START_MS']} ms)" if E.get("GRID_START_MS") else ""))
fails = [f"{names.get(i, i)} N={n}: " + "; ".join(v) for (i, n), v in sorted(failed.items(), key=lambda kv: kv[0][1])]

print()
print(f"Machine: {machine}")
print(f"Medians of {nrep}, ITERS={E['ITERS']} timed operations per run; ratio = median of paired "
      "p2pmpi / Open MPI (< 1: p2pmpi faster).")
print(("WARNING: " if noisy else "") + load_note)
print()
print(table(hdr, rows, False))
print()
print(table(ghdr, grows, False))
for x in fails:
    print("Failed: " + x)

with open(os.path.join(out, "scale.md"), "w") as md:
    md.write(f"### Scale of a job on one grid, N = {', '.join(map(str, ns))} ranks on one host\n\n")
    md.write(f"Machine: {machine}.  \nVersions: {E.get('VER_OMPI', '')}, {E.get('VER_RUST', '')}.  \n")
    md.write(f"Medians of {nrep} (`bench/scale.sh`), ITERS={E['ITERS']} timed operations of each kind "
             "per run (the slowest rank's time of each, the median over operations); ratio = median of "
             "the paired ratios p2pmpi / Open MPI.  \n")
    md.write(grid + "; Open MPI: `mpirun --mca btl tcp,self`, `--mca mpi_yield_when_idle 1` beyond "
             f"{E['NPROC']} ranks.  \n")
    md.write(("**Warning:** " if noisy else "") + load_note + ".\n\n")
    md.write(table(hdr, rows, True) + "\n\nGrowth with N (least-squares fit metric ~ a·N^b over every N; by step: "
             "the exponent between consecutive N):\n\n")
    md.write(table(ghdr, grows, True) + "\n")
    for x in fails:
        md.write(f"\nFailed runs, {x}\n")
    md.write("\nCommands ({n} = N, {t0} = the launch time in µs):\n\n```sh\n")
    if E.get("CMD_P2P"):
        md.write(f"{E['GRID_START_CMD']}\n{E['CMD_P2P']}\n")
    if E.get("CMD_OMPI"):
        md.write(f"{E['CMD_OMPI']}\n")
    md.write("```\n")
print(f"Markdown: {os.path.join(out, 'scale.md')}")
