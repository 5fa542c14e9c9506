#!/usr/bin/env python3
"""The report of bench/abi_speed.sh: reads $OUT/raw/CONFIG.ROUND.{pp,coll}.txt and $OUT/load.txt,
prints the tables (medians over the rounds, and per cell the median over the rounds of the
ratio p2pmpi / MPICH of the same round) and writes them as Markdown to $OUT/abi_speed.md.

Usage: OUT=bench/out/abi_speed python3 bench/abi_speed_report.py
(bench/abi_speed.sh sets OUT, REPS, QUIET_PCT and the MACHINE_* / VER_* descriptions.)
"""
import collections
import glob
import os
import re
import statistics

OUT = os.environ["OUT"]
E = os.environ

# (impl, transport, load) -> cell -> round -> value
data = collections.defaultdict(lambda: collections.defaultdict(dict))
errors = []
libraries = {}
for f in sorted(glob.glob(os.path.join(OUT, "raw", "*.txt"))):
    m = re.match(r"(mpich|p2pmpi)-(shm|tcp)-(idle|load)\.(\d+)\.(pp|coll)\.txt$", os.path.basename(f))
    if not m:
        continue
    key, rnd = (m.group(1), m.group(2), m.group(3)), int(m.group(4))
    for line in open(f, errors="replace"):
        p = line.split()
        if not p:
            continue
        if p[0] == "library":
            libraries[m.group(1)] = " ".join(p[1:])
        elif p[0] == "error":
            errors.append(f"{os.path.basename(f)}: {line.strip()}")
        elif p[0] == "abi_pingpong" and len(p) >= 4:
            size = int(p[1])
            data[key][("lat", size)][rnd] = float(p[2])
            data[key][("bw", size)][rnd] = float(p[3])
        elif p[0] == "abi_coll" and len(p) >= 5:
            data[key][("coll", p[1], int(p[3]))][rnd] = float(p[4])


def human(n):
    for unit, k in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= k and n % k == 0:
            return f"{n // k} {unit}"
    return f"{n} B"


def med(xs):
    return statistics.median(xs) if xs else None


def fmt(x, nd=2):
    if x is None:
        return "—"
    if nd is None:
        nd = 2 if x < 10 else 1 if x < 100 else 0
    return f"{x:.{nd}f}"


def cell(tr, load, c):
    """Medians of MPICH and p2pmpi, the median paired ratio p2pmpi/MPICH, and the samples."""
    a = data.get(("mpich", tr, load), {}).get(c, {})
    b = data.get(("p2pmpi", tr, load), {}).get(c, {})
    pairs = [b[r] / a[r] for r in a if r in b and a[r] > 0]
    return med(list(a.values())), med(list(b.values())), med(pairs), len(pairs)


def md(hdr, rows):
    lines = ["| " + " | ".join(hdr) + " |", "|" + "|".join(["---"] + ["---:"] * (len(hdr) - 1)) + "|"]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def txt(hdr, rows):
    w = [max([len(h)] + [len(r[j]) for r in rows]) for j, h in enumerate(hdr)]
    line = lambda r: "  ".join(c.rjust(w[j]) for j, c in enumerate(r))
    return "\n".join([line(hdr), line(["-" * x for x in w])] + [line(r) for r in rows])


sections = []  # (title, hdr, rows)
verdicts = []
for tr in ("shm", "tcp"):
    for load in ("idle", "load"):
        if ("mpich", tr, load) not in data and ("p2pmpi", tr, load) not in data:
            continue
        where = ("shared memory" if tr == "shm" else "TCP (loopback)") + (
            ", idle" if load == "idle" else f", under load (bench/load.sh {os.environ.get('LOAD', 'cpu')})")
        sizes = sorted({c[1] for k in data if k[1:] == (tr, load) for c in data[k] if c[0] == "lat"})
        rows = []
        for s in sizes:
            la, lb, lr, n = cell(tr, load, ("lat", s))
            ba, bb, br, _ = cell(tr, load, ("bw", s))
            rows.append([human(s), fmt(la), fmt(lb), fmt(lr), fmt(ba, None), fmt(bb, None), fmt(br), str(n)])
            if s == 8 and lr is not None:
                verdicts.append(f"{where}: latency 8 B {lr:.2f}× MPICH "
                                f"({'meets' if lr <= 1.0 else 'misses'} ≤ 1.0)")
            if s >= 65536 and br is not None and br < 1.0:
                verdicts.append(f"{where}: bandwidth {human(s)} {br:.2f}× MPICH (misses ≥ 1.0)")
        big = [cell(tr, load, ("bw", s))[2] for s in sizes if s >= 65536]
        big = [x for x in big if x is not None]
        if big and min(big) >= 1.0:
            verdicts.append(f"{where}: bandwidth from 64 KiB ≥ 1.0× MPICH (lowest {min(big):.2f}×)")
        sections.append((f"Ping-pong, {where}",
                         ["size", "MPICH µs", "p2pmpi µs", "p2pmpi/MPICH", "MPICH MB/s", "p2pmpi MB/s",
                          "p2pmpi/MPICH", "rounds"], rows))
        colls = sorted({c[1:] for k in data if k[1:] == (tr, load) for c in data[k] if c[0] == "coll"},
                       key=lambda x: (["barrier", "bcast", "allreduce", "alltoall"].index(x[0])
                                      if x[0] in ("barrier", "bcast", "allreduce", "alltoall") else 9, x[1]))
        rows = []
        for name, s in colls:
            a, b, r, n = cell(tr, load, ("coll", name, s))
            rows.append([name, human(s) if name != "barrier" else "—", fmt(a), fmt(b), fmt(r), str(n)])
        sections.append((f"Collectives (2 processes), {where}",
                         ["collective", "size", "MPICH µs/op", "p2pmpi µs/op", "p2pmpi/MPICH", "rounds"], rows))

loads = []
for line in open(os.path.join(OUT, "load.txt")):
    p = line.split()
    if len(p) >= 4:
        loads.append((int(p[2]), float(p[3])))
qp = int(E.get("QUIET_PCT", "25"))
busy = [b for b, _ in loads]
la = [x for _, x in loads]
load_note = (f"CPU busy before each run (other processes, 0.3 s sample): median {med(busy)}%, max {max(busy)}%, "
             f"{sum(1 for b in busy if b > qp)} of {len(busy)} runs above {qp}%; "
             f"1-minute load average at the runs: median {med(la):.2f}, max {max(la):.2f}") if loads else ""
machine = (f"{E.get('MACHINE_NPROC', '?')} CPUs, {E.get('MACHINE_CPU', '?')}, {E.get('MACHINE_KERNEL', '?')}; "
           f"{E.get('MACHINE_DATE', '?')}")
versions = ", ".join(v for v in (E.get("VER_MPICH"), E.get("VER_RUST")) if v)
head = [f"Machine: {machine}", f"Versions: {versions}"]
head += [f"Library of the {k} runs: {v}" for k, v in sorted(libraries.items())]
head += [f"Medians of {E.get('REPS', '?')} interleaved rounds; ratios are the median over the rounds of "
         "p2pmpi / MPICH within a round (latency and µs/op: below 1 is faster; MB/s: above 1 is faster).",
         load_note]
head += [f"ERROR (wrong result): {e}" for e in errors]

print()
print("\n".join(h for h in head if h))
for title, hdr, rows in sections:
    print(f"\n{title}\n")
    print(txt(hdr, rows))
print("\nTargets:")
print("\n".join("  " + v for v in verdicts))

with open(os.path.join(OUT, "abi_speed.md"), "w") as m:
    m.write("  \n".join(h for h in head if h) + "\n")
    for title, hdr, rows in sections:
        m.write(f"\n#### {title}\n\n{md(hdr, rows)}\n")
    m.write("\nTargets:\n\n" + "\n".join(f"- {v}" for v in verdicts) + "\n")
print(f"\nMarkdown: {os.path.join(OUT, 'abi_speed.md')}")
