#!/usr/bin/env python3
"""Parsing and statistics of bench/replication.sh (the replication-overhead benchmark).

    replication_stats.py run CSV PART NP R VARIANT REP BUSY WALL_MS CPU_MS STATUS OUTFILE [SIZES]
        parses one run's output and appends its rows to CSV (writing the header first if CSV
        does not exist); prints a one-line summary. PART is `pingpong` (examples/repl_pingpong:
        one row per size of SIZES, a comma-separated list), `coll` (examples/repl_coll) or
        `iterate` (examples/replcheck iterate). STATUS is the launcher's outcome as the script
        saw it (ok, timeout, exit N); CPU_MS the user + system time of all the job's processes
        (`-` if unknown); a run that exited 0 but printed too little becomes
        `output`, a ping-pong whose echoed buffer came back wrong `corrupt`.
        The run's background load (idle, cpu, mixed: bench/load.sh) is read from BENCH_LOAD
        (default idle) into the `load` column.
    replication_stats.py report CSV MDFILE
        the tables on stdout and as Markdown in MDFILE (the machine, the commands and the
        knobs come from the environment set by replication.sh): a section per load, then the
        medians of the paired ratios (two runs of one repetition and load) side by side.

Output lines parsed:
    replpp <bytes> <iters> <round_trip_us> <one_way_us> <MB_per_s> <ok|CORRUPT>
    replcoll <np> <steps> <bytes> <loop_ms> <us_per_step> <checksum>
    checksum <hex> after <steps> steps on <np> ranks            (replcheck iterate)
"""
import csv
import os
import re
import statistics
import sys

FIELDS = ["part", "np", "r", "variant", "rep", "size", "rtt_us", "loop_ms", "wall_ms", "cpu_ms", "checksum",
          "status", "busy_pct", "load"]

PP = re.compile(r"^replpp (\d+) (\d+) ([0-9.]+) ([0-9.]+) ([0-9.]+) (\S+)")
COLL = re.compile(r"^replcoll (\d+) (\d+) (\d+) ([0-9.]+) ([0-9.]+) ([0-9a-f]+)")
ITER = re.compile(r"^checksum ([0-9a-f]+) after (\d+) steps on (\d+) ranks")

# Thesis §4.8.2 (ping-pong, 1000 round trips, 1 Gb/s, one host per process): time with R
# replicas / time without replication.
THESIS = {65536: {2: 1.0, 3: 1.17, 4: 1.50}, 131072: {3: 1.42, 4: 1.73}}
# Our targets at 64 KiB.
TARGETS = {2: 1.05, 3: 1.15, 4: 1.35}
TARGET_SIZE = 65536


def transport():
    """The transport of every run (bench/replication.sh's SHM)."""
    if os.environ.get("SHM", "0") == "1":
        return "default (shared memory between this host's processes)"
    return "TCP (P2PMPI_SHM=0)"


def cmd_run(args):
    csv_path, part, np_, r, variant, rep, busy, wall_ms, cpu_ms, status, outfile = args[:11]
    sizes = [int(s) for s in args[11].split(",")] if len(args) > 11 and args[11] else []
    cpu_ms = "" if cpu_ms == "-" else cpu_ms
    try:
        lines = open(outfile, errors="replace").read().splitlines()
    except OSError:
        lines = []
    base = {"part": part, "np": np_, "r": r, "variant": variant, "rep": rep, "size": "",
            "rtt_us": "", "loop_ms": "", "wall_ms": wall_ms, "cpu_ms": cpu_ms, "checksum": "", "status": status,
            "busy_pct": busy, "load": os.environ.get("BENCH_LOAD", "idle")}
    rows = []
    if part == "pingpong":
        got = {}
        for l in lines:
            m = PP.match(l)
            if m:
                got[int(m.group(1))] = (m.group(3), m.group(6))
        for s in sizes or sorted(got):
            row = dict(base, size=s)
            if s in got:
                row["rtt_us"] = got[s][0]
                if got[s][1] != "ok" and status == "ok":
                    row["status"] = "corrupt"
            elif status == "ok":
                row["status"] = "output"
            rows.append(row)
        summary = " ".join(f"{s // 1024}K:{got[s][0]}" for s in sorted(got) if s in got and s >= 1024)
    else:
        row = dict(base)
        for l in lines:
            m = COLL.match(l) if part == "coll" else ITER.match(l)
            if m and part == "coll":
                row["loop_ms"], row["checksum"] = m.group(4), m.group(6)
            elif m:
                row["checksum"] = m.group(1)
        if not row["checksum"] and status == "ok":
            row["status"] = "output"
        rows.append(row)
        summary = f"loop {row['loop_ms'] or '-'} ms, checksum {row['checksum'] or '-'}"
    new = not os.path.exists(csv_path)
    with open(csv_path, "a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        if new:
            w.writeheader()
        w.writerows(rows)
    bad = sorted({x["status"] for x in rows if x["status"] != "ok"})
    print(f"{part} np={np_} R={r}{' ' + variant if variant else ''} rep {rep}: wall {wall_ms} ms, "
          f"CPU {cpu_ms or '-'} ms, "
          f"{summary}{' [' + ','.join(bad) + ']' if bad else ''}")


def med(xs):
    return statistics.median(xs) if xs else None


def fmt(x, nd=1):
    return "—" if x is None else f"{x:.{nd}f}"


def ratio(a, b):
    return None if a is None or b is None or b == 0 else a / b


def human(n):
    return f"{n // 1024} KiB" if n >= 1024 and n % 1024 == 0 else f"{n} B"


def md_table(hdr, rows):
    out = ["| " + " | ".join(hdr) + " |", "|" + "|".join(["---"] + ["---:"] * (len(hdr) - 1)) + "|"]
    return "\n".join(out + ["| " + " | ".join(r) + " |" for r in rows])


def txt_table(hdr, rows):
    w = [max([len(h)] + [len(r[j]) for r in rows]) for j, h in enumerate(hdr)]
    line = lambda r: "  ".join(c.rjust(w[j]) for j, c in enumerate(r))
    return "\n".join([line(hdr), line(["-" * x for x in w])] + [line(r) for r in rows])


def report_load(args, kind=None, md_mode="w"):
    """One load's section (every load when `kind` is None): text on stdout, Markdown to MDFILE."""
    csv_path, md_path = args[:2]
    E = os.environ
    rows = list(csv.DictReader(open(csv_path))) if os.path.exists(csv_path) else []
    rows = [r for r in rows if kind is None or (r.get("load") or "idle") == kind]
    nproc = int(E.get("MACHINE_NPROC", "2"))
    ok = [r for r in rows if r["status"] == "ok"]
    failed = [r for r in rows if r["status"] != "ok"]

    def key(r):  # column of a ping-pong sample
        return (int(r["r"]), r["variant"])

    # ------------------------------------------------------------------ ping-pong
    pp = [r for r in ok if r["part"] == "pingpong"]
    pp_all = [r for r in rows if r["part"] == "pingpong"]
    sizes = sorted({int(r["size"]) for r in pp_all if r["size"]})
    cols = sorted({key(r) for r in pp_all}, key=lambda k: (k[1] != "", k[0]))
    rs = sorted({k[0] for k in cols if k[1] == ""})
    samples = {}  # (col, size) -> {rep: rtt}
    for r in pp:
        samples.setdefault((key(r), int(r["size"])), {})[r["rep"]] = float(r["rtt_us"])
    m = {k: med(list(v.values())) for k, v in samples.items()}
    counts = sorted({len(v) for v in samples.values()})
    base = (1, "")

    def per_rep_ratios(col, s):
        a, b = samples.get((col, s), {}), samples.get((base, s), {})
        return sorted(a[k] / b[k] for k in a if k in b and b[k] > 0)

    main = [k for k in cols if k[1] == ""]
    hdr = ["size"] + [f"R={k[0]} µs" for k in main] + [f"R={r}/R=1" for r in rs if r != 1] + ["thesis R=2/3/4"]
    trows = []
    for s in sizes:
        row = [human(s)] + [fmt(m.get((k, s))) for k in main]
        for r in rs:
            if r == 1:
                continue
            x = ratio(m.get(((r, ""), s)), m.get((base, s)))
            cell = fmt(x, 2)
            if s == TARGET_SIZE and r in TARGETS and x is not None:
                cell += " ✓" if x <= TARGETS[r] else " ✗"
            row.append(cell)
        th = THESIS.get(s)
        row.append("/".join(fmt(th.get(r), 2) if r in th else "—" for r in (2, 3, 4)) if th else "")
        trows.append(row)

    # Diagnostics: R = 1 with the oversubscribed waiting policy, and the traffic by hand.
    nospin = [k for k in cols if k[1] == "nospin"]
    fan = [k for k in cols if k[1] == "fanout"]
    dhdr = ["size"] + [f"R=1 nospin µs" for k in nospin] + [f"fan-out {k[0]} µs" for k in fan] + \
        [f"R={k[0]}/fan-out {k[0]}" for k in fan]
    drows = []
    if nospin or fan:
        for s in sizes:
            drows.append([human(s)] + [fmt(m.get((k, s))) for k in nospin + fan] +
                         [fmt(ratio(m.get(((k[0], ""), s)), m.get((k, s))), 2) for k in fan])

    fverdict = []
    for k in fan:
        for s_ in sizes:
            a, b = samples.get(((k[0], ""), s_), {}), samples.get((k, s_), {})
            pr = sorted(a[x] / b[x] for x in a if x in b and b[x] > 0)
            x = ratio(m.get(((k[0], ""), s_)), m.get((k, s_)))
            if x is not None:
                fverdict.append(f"R={k[0]} / fan-out {k[0]} at {human(s_)}: {x:.2f}× — target ≤ 1.05× "
                                f"{'met' if x <= 1.05 else 'NOT met'}"
                                + (f" (back-to-back pairs: median {statistics.median(pr):.2f}, "
                                   f"range {pr[0]:.2f}–{pr[-1]:.2f})" if pr else ""))

    # Whole jobs: wall and CPU time (user + system of every process) per cell.
    jobs = {}  # (part, R, variant) -> {"np", "wall": {rep: ms}, "cpu": {rep: ms}}
    for r in ok:
        k = (r["part"], int(r["r"]), r["variant"])
        j = jobs.setdefault(k, {"np": r["np"], "wall": {}, "cpu": {}})
        j["wall"][r["rep"]] = float(r["wall_ms"])
        if r.get("cpu_ms"):
            j["cpu"][r["rep"]] = float(r["cpu_ms"])
    jhdr = ["job", "R / variant", "processes", "wall ms", "CPU ms", "CPU / wall", "wall ÷ fan-out",
            "CPU ÷ fan-out"]
    jrows = []
    for k in sorted(jobs, key=lambda k: (k[0], k[1], k[2])):
        j = jobs[k]
        w, c = med(list(j["wall"].values())), med(list(j["cpu"].values()))
        f = jobs.get((k[0], k[1], "fanout")) if k[2] == "" and k[1] > 1 else None
        fw = med(list(f["wall"].values())) if f else None
        fc = med(list(f["cpu"].values())) if f and f["cpu"] else None
        jrows.append([k[0], f"R={k[1]}" + (f" {k[2]}" if k[2] and k[2] != "fanout" else "") if k[2] != "fanout"
                      else f"fan-out {k[1]}", j["np"] if k[2] == "fanout" else str(int(j["np"]) * k[1]),
                      fmt(w), fmt(c, 0), fmt(ratio(c, w), 2), fmt(ratio(w, fw), 2) if f else "",
                      fmt(ratio(c, fc), 2) if f else ""])

    verdict = []
    for r in sorted(TARGETS):
        if r not in rs:
            continue
        x = ratio(m.get(((r, ""), TARGET_SIZE)), m.get((base, TARGET_SIZE)))
        pr = per_rep_ratios((r, ""), TARGET_SIZE)
        spread = f" (per-repetition ratios {', '.join(f'{v:.2f}' for v in pr)})" if pr else ""
        if x is None:
            verdict.append(f"R={r} at 64 KiB: no data — target ≤ {TARGETS[r]:.2f}× NOT checked")
        else:
            verdict.append(f"R={r} at 64 KiB: {x:.2f}× — target ≤ {TARGETS[r]:.2f}× "
                           f"{'met' if x <= TARGETS[r] else 'NOT met'}{spread}")

    # ------------------------------------------------------------------ collectives
    cparts = [p for p in ("coll", "iterate") if any(r["part"] == p for r in rows)]
    chdr = ["program", "R", "processes", "wall ms", "wall ×R=1", "loop ms", "loop ×R=1", "runs ok",
            "checksum"]
    crows = []
    cfan = []
    for p in cparts:
        prow = [r for r in rows if r["part"] == p]
        np_ = min(int(r["np"]) for r in prow if r["variant"] != "fanout") if any(
            r["variant"] != "fanout" for r in prow) else int(E.get("COLL_NP", "4"))
        wall, loop, chk, runs = {}, {}, {}, {}
        for r in prow:
            # Key: R, or ("fanout", K) for the same traffic by hand with K copies.
            R = int(r["r"]) if r["variant"] != "fanout" else ("fanout", int(r["np"]) // np_)
            runs.setdefault(R, [0, 0])[1] += 1
            if r["status"] != "ok":
                continue
            runs[R][0] += 1
            wall.setdefault(R, []).append(float(r["wall_ms"]))
            if r["loop_ms"]:
                loop.setdefault(R, []).append(float(r["loop_ms"]))
            chk.setdefault(R, set()).add(r["checksum"])
        ref = chk.get(1, set())
        for R in sorted(runs, key=lambda k: (isinstance(k, tuple), k if not isinstance(k, tuple) else k[1])):
            c = chk.get(R, set())
            if not c:
                cs = "—"
            elif len(c) > 1:
                cs = "DIFFERS between runs"
            elif R != 1 and ref and c != ref:
                cs = "DIFFERS from R=1"
            else:
                cs = ("same as R=1" if R != 1 and ref else next(iter(c))[:16])
            name = (f"repl_coll {E.get('COLL_STEPS', '')}" if p == "coll"
                    else f"replcheck iterate {E.get('ITERATE_STEPS', '')} 0")
            label = f"fan-out {R[1]}" if isinstance(R, tuple) else str(R)
            nprocs = np_ * (R[1] if isinstance(R, tuple) else R)
            crows.append([name, label, str(nprocs),
                          fmt(med(wall.get(R, []))), fmt(ratio(med(wall.get(R, [])), med(wall.get(1, []))), 2),
                          fmt(med(loop.get(R, []))), fmt(ratio(med(loop.get(R, [])), med(loop.get(1, []))), 2),
                          f"{runs[R][0]}/{runs[R][1]}", cs])
            if isinstance(R, tuple) and R[1] in loop:
                x = ratio(med(loop.get(R[1], [])), med(loop.get(R, [])))
                if x is not None:
                    cfan.append(f"{name}: R={R[1]} / fan-out {R[1]} (loop time) = {x:.2f}× — target ≤ 1.05× "
                                f"{'met' if x <= 1.05 else 'NOT met'}")

    # ------------------------------------------------------------------ text
    machine = (f"{E.get('MACHINE_NPROC')} CPUs, {E.get('MACHINE_CPU')}, {E.get('MACHINE_KERNEL')}; "
               f"{E.get('MACHINE_DATE')}")
    reps = E.get("REPS", "?")
    nrep = f"{reps} interleaved runs" + ("" if counts in ([int(reps)], []) else
                                          f" (samples per cell: {', '.join(map(str, counts))})")
    busy = [int(r["busy_pct"]) for r in rows if r["busy_pct"].isdigit()]
    qp = int(E.get("QUIET_PCT", "25"))
    noisy = len({(r["part"], r["r"], r["variant"], r["rep"]) for r in rows
                 if r["busy_pct"].isdigit() and int(r["busy_pct"]) > qp and kind in (None, "idle")})
    nruns = len({(r["part"], r["r"], r["variant"], r["rep"]) for r in rows})
    load = (f"{noisy} of {nruns} runs started while other processes kept the CPUs >{qp}% busy "
            f"(max {max(busy)}%): figures are noisy" if noisy else
            f"background CPU load before each run: max {max(busy) if busy else 0}%")
    pp_np = 2
    over = [r for r in rs if pp_np * r > nproc]
    notes = [
        f"Ping-pong: `-n 2 -r R`, both ranks run as R replicas: 2R "
        f"processes on {nproc} cores. " + (
            f"R = {', '.join(map(str, over))} oversubscribe{'s' if len(over) == 1 else ''} the machine ({2 * over[-1]} processes at "
            f"R = {over[-1]}): the library then stops busy-polling (it yields, then sleeps in the "
            f"kernel), and the replicas compete with the master for the cores. This inflates the "
            f"ratios compared with the thesis' cluster (one host per process, 1 Gb/s)." if over else ""),
        (f"{E.get('ITERS', '1000')} timed round trips per size after {E.get('WARMUP', '50')} untimed; "
         if E.get("PROG", "repl") == "repl" else
         f"plain_pingpong: per size, one untimed batch then {E.get('BATCHES', '6')} batches of "
         f"{E.get('ITERS', '1000')} round trips, the median batch; ") +
        f"round-trip time in µs, median of {nrep}; ratio = median(R) / median(R=1).",
    ]
    dnotes = []
    if nospin:
        dnotes.append("`R=1 nospin`: R = 1 (2 processes) with the waiting policy the library picks when "
                      "oversubscribed (`P2PMPI_SPIN_US=0 P2PMPI_YIELD_US=2000`): what the policy alone costs.")
    if fan:
        dnotes.append("`fan-out K`: no replication, `-n 2K`: K copies of each side; each side's first "
                      "copy sends each message to every copy of the other side and an 8-byte commit "
                      "to its own copies, which receive both — the traffic and the process count of "
                      "R = K done by hand, i.e. what K copies cost this machine without the library's "
                      "protocol. `R=K/fan-out K` > 1 is the protocol's own overhead (MIDs, backup and "
                      "log tables, ordering, leases).")
    out = []
    if kind:
        out.append(f"=== load: {LOAD_DESC.get(kind, kind)}")
    out.append(f"Machine: {machine}")
    out.append(f"Versions: {E.get('VER_RUST', '')}")
    out.append(f"CPU binding: --bind-to {E.get('BIND', 'none')}")
    out.append(f"Ping-pong program: {E.get('PROG', 'repl')}; transport: {transport()}")
    out.append(("WARNING: " if noisy else "") + load)
    for n in notes:
        out.append(n)
    text = "\n".join(out)
    print()
    print(text)
    if sizes:
        print("\nPing-pong round trip (µs, median; ratio to R=1; ✓/✗ = our 64 KiB target)\n")
        print(txt_table(hdr, trows))
        print()
        for v in verdict:
            print(v)
    if drows:
        print("\nDiagnostics (µs, median; not part of the targets)\n")
        for n in dnotes:
            print(n)
        print()
        print(txt_table(dhdr, drows))
        print()
        for v in fverdict:
            print(v)
    if jrows:
        print("\nWhole jobs (median ms over the runs; CPU = user + system time of every process)\n")
        print(txt_table(jhdr, jrows))
    if crows:
        print(f"\nCollective-heavy programs, -n {E.get('COLL_NP', '4')} (median ms; wall = the whole "
              "job from outside, loop = the program's own timing of its loop)\n")
        print(txt_table(chdr, crows))
        for v in cfan:
            print(v)
    if failed:
        print(f"\nFailed runs: {len({(r['part'], r['r'], r['variant'], r['rep']) for r in failed})} "
              "(left out of the medians):")
        seen = set()
        for r in failed:
            k = (r["part"], r["r"], r["variant"], r["rep"], r["status"])
            if k not in seen:
                seen.add(k)
                print(f"  {r['part']} R={r['r']}{' ' + r['variant'] if r['variant'] else ''} rep {r['rep']}: "
                      f"{r['status']}")
    print()

    with open(md_path, md_mode) as f:
        f.write("### Replication overhead (`p2pmpirun -r R`, one host)"
                + (f", load: {kind}" if kind else "") + "\n\n")
        if kind:
            f.write(f"Load: {LOAD_DESC.get(kind, kind)}.  \n")
        f.write(f"Machine: {machine}.  \nVersions: {E.get('VER_RUST', '')}.  \n"
                f"CPU binding: `--bind-to {E.get('BIND', 'none')}`.  \n"
                f"Ping-pong program: `{E.get('PROG', 'repl')}`; transport: {transport()}.  \n")
        f.write(("**Warning:** " if noisy else "") + load + ".\n\n")
        for n in notes:
            f.write(f"- {n}\n")
        if sizes:
            f.write("\n#### Ping-pong round trip (µs, lower is better; ratio to R = 1; "
                    "✓/✗: our target at 64 KiB)\n\n")
            f.write(md_table(hdr, trows) + "\n\n")
            for v in verdict:
                f.write(f"- {v}\n")
        if drows:
            f.write("\n#### Diagnostics (µs, median; not part of the targets)\n\n")
            for n in dnotes:
                f.write(f"- {n}\n")
            f.write("\n" + md_table(dhdr, drows) + "\n")
            if fverdict:
                f.write("\n")
            for v in fverdict:
                f.write(f"- {v}\n")
        if jrows:
            f.write("\n#### Whole jobs (median ms; CPU = user + system time of every process, by "
                    "/usr/bin/time)\n\n")
            f.write(md_table(jhdr, jrows) + "\n")
        if crows:
            f.write(f"\n#### Collective-heavy programs, `-n {E.get('COLL_NP', '4')}` (median ms)\n\n")
            f.write("wall = the whole job timed from outside (launch, start-up, loop, exit); loop = the "
                    "program's own timing of its loop (rank 0).\n\n")
            f.write(md_table(chdr, crows) + "\n")
            if cfan:
                f.write("\n`fan-out K`: `repl_coll STEPS BYTES K` at `-n 4K` without replication — the same "
                        "collective algorithms over logical ranks, each message sent by hand to every copy "
                        "of its destination plus an 8-byte commit to the sender's copies (same checksum).\n\n")
                for v in cfan:
                    f.write(f"- {v}\n")
        if failed:
            f.write("\nFailed runs (left out of the medians):\n\n")
            seen = set()
            for r in failed:
                k = (r["part"], r["r"], r["variant"], r["rep"], r["status"])
                if k not in seen:
                    seen.add(k)
                    f.write(f"- {r['part']} R={r['r']}{' ' + r['variant'] if r['variant'] else ''} "
                            f"rep {r['rep']}: {r['status']}\n")
        cmds = E.get("COMMANDS", "")
        if cmds and md_mode == "w":
            f.write("\nCommands:\n\n```\n" + cmds.rstrip() + "\n```\n")
    print(f"Markdown: {md_path}")


LOAD_DESC = {"idle": "idle (nothing else started by the script)",
             "cpu": "cpu (`bench/load.sh cpu`: one busy loop per core, nice 0)",
             "mixed": "mixed (`bench/load.sh mixed`: a C tree rebuilt by `make -j2`, nice 0)"}


def paired_median(rows, a, b, value):
    """Median over the repetitions of value(a's run) / value(b's run) in the same repetition (rows
    of one load); a and b select the rows."""
    x = {(r["rep"]): value(r) for r in rows if a(r) and value(r)}
    y = {(r["rep"]): value(r) for r in rows if b(r) and value(r)}
    q = [x[k] / y[k] for k in x if k in y and y[k] > 0]
    return (statistics.median(q), len(q)) if q else (None, 0)


def side_by_side(rows, loads):
    """Paired-ratio medians of every load side by side: (title, header, rows, verdict lines)."""
    ok = [r for r in rows if r["status"] == "ok"]
    by_load = {l: [r for r in ok if (r.get("load") or "idle") == l] for l in loads}
    out = []
    rtt = lambda r: float(r["rtt_us"]) if r["rtt_us"] else None
    loop = lambda r: float(r["loop_ms"]) if r["loop_ms"] else None
    wall = lambda r: float(r["wall_ms"]) if r["wall_ms"] else None
    pp = [r for r in ok if r["part"] == "pingpong"]
    sizes = sorted({int(r["size"]) for r in pp if r["size"]})
    ks = sorted({int(r["r"]) for r in pp if r["variant"] == "" and int(r["r"]) > 1})
    met = {}  # (what, load) -> [met, cells]

    def mark(x, target, what, l):
        if x is None or target is None:
            return fmt(x, 2)
        t = met.setdefault((what, l), [0, 0])
        t[0] += x <= target
        t[1] += 1
        return f"{x:.2f} " + ("✓" if x <= target else "✗")

    for k in ks:
        has_fan = any(r["part"] == "pingpong" and r["variant"] == "fanout" and int(r["r"]) == k for r in pp)
        hdr = ["size"] + [f"R={k}/R=1 {l}" for l in loads] + ([f"R={k}/fan-out {k} {l}" for l in loads]
                                                            if has_fan else [])
        trows = []
        for s_ in sizes:
            row = [human(s_)]
            sel = lambda r, kk, v: r["part"] == "pingpong" and r["size"] == str(s_) and int(r["r"]) == kk \
                and r["variant"] == v
            for l in loads:
                x, _ = paired_median(by_load[l], lambda r: sel(r, k, ""), lambda r: sel(r, 1, ""), rtt)
                row.append(mark(x, TARGETS.get(k) if s_ == TARGET_SIZE else None, f"R={k}/R=1 at 64 KiB", l))
            if has_fan:
                for l in loads:
                    x, _ = paired_median(by_load[l], lambda r: sel(r, k, ""), lambda r: sel(r, k, "fanout"), rtt)
                    row.append(mark(x, 1.05, f"R={k}/fan-out {k}", l))
            trows.append(row)
        out.append((f"Ping-pong R={k}: medians of paired ratios (same repetition and load; ✓/✗: R={k}/R=1 "
                    f"against ≤ {TARGETS.get(k, 0):.2f}× at 64 KiB, R={k}/fan-out {k} against ≤ 1.05×)",
                    hdr, trows))
    crows = []
    for part, name in (("coll", "repl_coll"), ("iterate", "replcheck iterate")):
        rs = sorted({int(r["r"]) for r in ok if r["part"] == part and r["variant"] == "" and int(r["r"]) > 1})
        for k in rs:
            row = [name, f"R={k}"]
            sel = lambda r, kk, v: r["part"] == part and int(r["r"]) == kk and r["variant"] == v
            for l in loads:
                x, _ = paired_median(by_load[l], lambda r: sel(r, k, ""), lambda r: sel(r, 1, ""), wall)
                row.append(fmt(x, 2))
            for l in loads:
                x, _ = paired_median(by_load[l], lambda r: sel(r, k, ""), lambda r: sel(r, k, "fanout"), loop)
                row.append(mark(x, 1.05, f"{name} R={k}/fan-out {k}", l) if part == "coll" else "")
            crows.append(row)
    if crows:
        out.append(("Collective-heavy programs: medians of paired ratios (wall: R=K ÷ R=1; loop: R=K ÷ its "
                    "traffic by hand, fan-out K, ✓/✗ against ≤ 1.05×)",
                    ["program", "R"] + [f"wall ×R=1 {l}" for l in loads] + [f"loop ÷ fan-out {l}" for l in loads],
                    crows))
    verdict = [f"{what}: cells met " + ", ".join(f"{l} {met[(what, l)][0]}/{met[(what, l)][1]}"
                                                 for l in loads if (what, l) in met)
               for what in dict.fromkeys(w for w, _ in met)]
    return out, verdict


def cmd_report(args):
    csv_path, md_path = args[:2]
    rows = list(csv.DictReader(open(csv_path))) if os.path.exists(csv_path) else []
    present = {r.get("load") or "idle" for r in rows}
    loads = [l for l in os.environ.get("LOADS", "idle cpu mixed").split() if l in present]
    loads += sorted(present - set(loads))
    if len(loads) <= 1:
        report_load(args)
    else:
        for i, l in enumerate(loads):
            report_load(args, l, "w" if i == 0 else "a")
    tables, verdict = side_by_side(rows, loads)
    if not tables:
        return
    print("\n=== paired ratios, one column per load (a cell is met when the median of its paired "
          "ratios meets the target)")
    for title, hdr, trows in tables:
        print(f"\n{title}\n")
        print(txt_table(hdr, trows))
    print()
    for v in verdict:
        print(v)
    with open(md_path, "a") as f:
        f.write("\n### Replication: paired ratios, idle and loaded side by side\n\n"
                "Each ratio is taken between two runs of the same repetition and load; a cell reports "
                "the median of its ratios and is met when that median meets the target.\n")
        for title, hdr, trows in tables:
            f.write(f"\n{title}:\n\n" + md_table(hdr, trows) + "\n")
        if verdict:
            f.write("\n")
        for v in verdict:
            f.write(f"- {v}\n")
    print(f"Markdown: {md_path}")


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in ("run", "report"):
        sys.exit(__doc__)
    (cmd_run if sys.argv[1] == "run" else cmd_report)(sys.argv[2:])
