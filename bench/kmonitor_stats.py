#!/usr/bin/env python3
"""Parsing and statistics of bench/kmonitor.sh (the k-monitor detector on real processes).

    kmonitor_stats.py cpu-run CSV OUTFILE VARIANT REP STATUS BUSY
        parses one compute-bound job (examples/fdwatch --work: `rank R ready pid PID ...`,
        `rank R worked W rounds in T ms`) and its CPU samples (OUTFILE.cpu, two per process:
        `PID DETECTOR_NS TOTAL_NS WALL_US THREADS`), appends one row per rank to CSV, prints a summary.
    kmonitor_stats.py report OUTDIR MDFILE
        the summary of every part that ran (kmonitor-{crash,freeze,freeze-confirm,cpu,soak}.csv
        in OUTDIR) on stdout and as Markdown in MDFILE; the knobs come from the environment
        set by kmonitor.sh.

The crash and freeze CSVs are written by detection_stats.py (`run`, protocol KMONITOR).
"""
import csv
import os
import re
import statistics
import sys

READY = re.compile(r"^rank (\d+) ready pid (\d+) on \S+ at (\d+)")
WORKED = re.compile(r"^rank (\d+) worked (\d+) rounds in (\d+) ms")
CPU_FIELDS = ["variant", "rep", "rank", "worked_rounds", "worked_ms", "detector_cpu_ns",
              "process_cpu_ns", "cpu_wall_us", "run_status", "busy_pct"]
KM_FRAME = 21


def read_cpu(cpufile, pids):
    """rank -> (Δ detector ns, Δ process ns, Δ wall µs) between the first and last sample."""
    samples = {}
    try:
        for line in open(cpufile):
            f = line.split()
            if len(f) >= 4 and int(f[0]) in pids:
                samples.setdefault(pids[int(f[0])], []).append([int(x) for x in f[1:]] + [-1])
    except OSError:
        pass
    return {r: (v[-1][0] - v[0][0], v[-1][1] - v[0][1], v[-1][2] - v[0][2])
            for r, v in samples.items()
            if len(v) >= 2 and v[-1][2] > v[0][2] and v[-1][1] > 0 and v[-1][3] == v[0][3]}


def cpu_run(a):
    csv_path, outfile, variant, rep, status, busy = a
    pids, worked = {}, {}
    try:
        lines = open(outfile, errors="replace").read().splitlines()
    except OSError:
        lines = []
    for line in lines:
        m = READY.match(line)
        if m:
            pids[int(m[2])] = int(m[1])
            continue
        m = WORKED.match(line)
        if m:
            worked[int(m[1])] = (int(m[2]), int(m[3]))
    cpu = read_cpu(outfile + ".cpu", pids)
    with open(csv_path, "a", newline="") as f:
        w = csv.writer(f)
        for r in sorted(pids.values()):
            wr, wm = worked.get(r, ("", ""))
            d, t, wall = cpu.get(r, ("", "", ""))
            w.writerow([variant, rep, r, wr, wm, d, t, wall, status, busy])
    det = sum(v[0] for v in cpu.values())
    tot = sum(v[1] for v in cpu.values())
    rate = sum(x[0] * 1000.0 / x[1] for x in worked.values() if x[1] > 0)
    share = f"{det / tot * 100:.3f} %" if tot else "—"
    print(f"[kmonitor.sh] cpu {variant} rep {rep}: {status}; {len(worked)}/{len(pids)} worked, "
          f"{rate:.1f} rounds/s in all; detector thread {share} of the processes' CPU")


# ------------------------------------------------------------------------------ report
def load(path):
    try:
        with open(path) as f:
            return list(csv.DictReader(f))
    except OSError:
        return []


def fmt(x, nd=0):
    return "—" if x is None else f"{x:.{nd}f}"


def med(v):
    return statistics.median(v) if v else None


def md_table(hdr, rows):
    lines = ["| " + " | ".join(hdr) + " |", "|" + "|".join(["---:"] * len(hdr)) + "|"]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def signal_part(rows, n, bound, t_hb):
    """Per run of a crash or freeze CSV: one table row; and the totals."""
    runs = {}
    for r in rows:
        runs.setdefault(int(r["rep"]), []).append(r)
    out, worst, within, nfalse, nmissed, problems = [], [], 0, 0, 0, []
    for rep in sorted(runs):
        rr = runs[rep]
        status = rr[0]["run_status"]
        nfalse += sum(int(r["false_notices"]) for r in rr)
        if rr[0]["victim"] == "":
            problems.append(f"rep {rep}: {status}, nothing signalled")
            continue
        if status != "ok":
            problems.append(f"rep {rep}: job {status}")
        surv = [r for r in rr if r["role"] == "survivor"]
        d = [float(r["detection_ms"]) for r in surv if r["detection_ms"] != ""]
        missed = sum(1 for r in surv if r["detection_ms"] == "")
        nmissed += missed
        sent = sum(int(r["notices_sent"]) for r in surv if r.get("notices_sent", "") != "")
        rates = [float(r["bytes"]) * 1000.0 / float(r["detector_ms"]) for r in surv
                 if r["bytes"] != "" and float(r["detector_ms"]) > 0]
        frames = [float(r["datagrams"]) * t_hb / float(r["detector_ms"]) for r in surv
                  if r["datagrams"] != "" and float(r["detector_ms"]) > 0]
        cpus = [int(r["detector_cpu_ns"]) / (int(r["cpu_wall_us"]) * 1000.0) * 100 for r in surv
                if r.get("cpu_wall_us", "") not in ("", "0")]
        ok = bool(d) and missed == 0 and max(d) <= bound
        within += ok
        if d:
            worst.append(max(d))
        out.append([str(rep), rr[0]["victim"], f"{len(d)}/{len(surv)}",
                    fmt(min(d) if d else None, 1), fmt(statistics.fmean(d) if d else None, 1),
                    fmt(max(d) if d else None, 1), "yes" if ok else "**no**", str(sent),
                    fmt(med(rates)), fmt(med(frames), 2), fmt(statistics.fmean(cpus) if cpus else None, 3)])
    return out, worst, within, len(runs), nfalse, nmissed, problems


def report(a):
    outdir, md_path = a
    E = os.environ
    n, k = int(E.get("N", "64")), int(E.get("K", "4"))
    t_hb, t_to = int(E.get("T_HB", "100")), int(E.get("T_TO", "1000"))
    machine = (f"{E.get('MACHINE_NPROC', '?')} CPUs, {E.get('MACHINE_CPU', '?')}, "
               f"{E.get('MACHINE_KERNEL', '?')}; {E.get('MACHINE_DATE', '?')}")
    parts = E.get("PARTS", "").split()
    md = [f"### The k-monitor detector on real processes (`bench/kmonitor.sh {E.get('MODE', '')}`)\n",
          f"Machine: {machine}.  \nVersions: {E.get('VER_RUST', '?')}.  \n"
          f"All processes on this host (`p2pmpirun --local`), loopback; seed {E.get('SEED', '?')}.\n"]
    txt = [f"Machine: {machine}"]

    mk = min(k, n - 1)
    hdr = ["run", "victim", "notified", "first ms", "mean ms", "last ms", "within bound",
           "failure notices sent", "detector B/s per process", "frames per T_hb", "detector CPU % of a core"]
    for part, title, bound in (
            ("crash", f"`kill -9`, target: every process notified within 100 ms", 100),
            ("freeze", f"`kill -STOP`, target: within T_to + 50 = {t_to + 50} ms", t_to + 50),
            ("freeze-confirm", f"`kill -STOP` with `--confirm` (a second monitor confirms; the bound "
                               f"is then 2·T_to + T_hb + 50 = {2 * t_to + t_hb + 50} ms)", 2 * t_to + t_hb + 50)):
        if part.split("-")[0] not in parts:
            continue
        rows = load(os.path.join(outdir, f"kmonitor-{part}.csv"))
        if not rows:
            continue
        out, worst, within, runs, nfalse, nmissed, problems = signal_part(rows, n, bound, t_hb)
        verdict = (f"{within}/{runs} runs within {bound} ms (worst last notice "
                   f"{fmt(max(worst) if worst else None, 1)} ms); false detections {nfalse}; missed {nmissed}")
        head = f"{part}: n = {n}, k = {k}, T_hb = {t_hb} ms, T_to = {t_to} ms — {title}"
        txt += ["", head, verdict] + ["  ".join(r) for r in out] + [f"Problem: {p}" for p in problems]
        md += [f"\n#### {part}: {title}\n",
               f"n = {n}, k = {k}, T_hb = {t_hb} ms, T_to = {t_to} ms; after every ready line a "
               f"{E.get('WARMUP_MS', '?')} ms warm-up and a random 0–T_hb wait, then the signal to a "
               f"random rank other than 0; detection = each other process's notice time − signal time "
               f"(unix ms, same clock). **{verdict}.** Failure notices sent: the sum over the surviving "
               f"processes (flooding on every established connection; ≤ 2kn = {2 * k * n}). Traffic: the "
               f"detector's TCP frames (length, message, MAC) ÷ its running time, median over the "
               f"survivors; theory {mk} heartbeats of {KM_FRAME} bytes per T_hb = "
               f"{mk * KM_FRAME * 1000 / t_hb:.0f} B/s. Detector CPU: its thread's CPU time (schedstat) ÷ "
               f"wall time from the ready lines to a quarter of the hold before its end (the detection included), mean "
               f"over the survivors.\n",
               md_table(hdr, out)] + [f"\nProblem: {p}" for p in problems]

    if "cpu" in parts:
        rows = load(os.path.join(outdir, "kmonitor-cpu.csv"))
        by = {}
        for r in rows:
            by.setdefault((r["variant"], int(r["rep"])), []).append(r)
        res = {}
        for (v, rep), rr in by.items():
            st = rr[0]["run_status"]
            rate = sum(int(r["worked_rounds"]) * 1000.0 / int(r["worked_ms"]) for r in rr
                       if r["worked_ms"] not in ("", "0"))
            c = [r for r in rr if r["cpu_wall_us"] not in ("", "0")]
            det = sum(int(r["detector_cpu_ns"]) for r in c)
            tot = sum(int(r["process_cpu_ns"]) for r in c)
            wall = statistics.fmean(int(r["cpu_wall_us"]) for r in c) * 1000.0 if c else 0
            # Rounds per CPU-second: each process's rate ÷ the CPU it got (all its threads).
            cw = sum(int(r["process_cpu_ns"]) / (int(r["cpu_wall_us"]) * 1000.0) for r in c)
            d = res.setdefault(v, {"rate": [], "eff": [], "share": [], "core": [], "status": []})
            d["status"].append(st)
            if st == "ok" and rate > 0:
                d["rate"].append(rate)
                if cw > 0:
                    d["eff"].append(rate / cw)
            if tot > 0:
                d["share"].append(det / tot * 100)
                d["core"].append(det / len(c) / wall * 100)
        base = med(res.get("off", {}).get("rate", []))
        base_eff = med(res.get("off", {}).get("eff", []))
        hdr2 = ["detector", "runs ok", "work rounds/s (job)", "vs --fd off", "rounds per CPU-second",
                "vs --fd off", "detector CPU ÷ processes' CPU %", "detector CPU per process, % of a core"]
        out2 = []
        names = {"off": "--fd off", "kmonitor": f"k-monitor (k = {k}, T_hb = {t_hb} ms, T_to = {t_to} ms)",
                 "dbrr": f"DBRR gossip (T_gossip = {t_hb} ms)"}
        for v in ("off", "kmonitor", "dbrr"):
            if v not in res:
                continue
            d = res[v]
            rate = med(d["rate"])
            rel = None if rate is None or not base else (rate / base - 1) * 100
            eff = med(d["eff"])
            rel_eff = None if eff is None or not base_eff else (eff / base_eff - 1) * 100
            out2.append([names[v], f"{d['status'].count('ok')}/{len(d['status'])}", fmt(rate, 1),
                         "—" if v == "off" else (fmt(rel, 2) + " %" if rel is not None else "—"),
                         fmt(eff, 1),
                         "—" if v == "off" else (fmt(rel_eff, 2) + " %" if rel_eff is not None else "—"),
                         fmt(med(d["share"]), 3) if v != "off" else "—",
                         fmt(med(d["core"]), 4) if v != "off" else "—"])
        head = (f"cpu: n = {n} compute-bound processes (`fdwatch --work --hold {E.get('CPU_HOLD_MS', '?')}`) "
                f"on {E.get('MACHINE_NPROC', '?')} CPUs")
        txt += ["", head] + ["  ".join(r) for r in out2]
        md += [f"\n#### CPU cost on a compute-bound program\n",
               f"{head}, {E.get('REPS', '?')} runs per detector, interleaved; medians over the runs. "
               f"Detector CPU ÷ processes' CPU: the CPU time of every process's detector thread "
               f"(`p2pmpi-kmonitor` / `p2pmpi-fd`, /proc/PID/task/*/schedstat) ÷ the CPU time of all "
               f"their threads, from the ready lines to a quarter of the hold before its end: with every core busy "
               f"computing, this is the share of the machine the detector takes from the program. "
               f"Work rounds/s: the sum over the processes of the rounds of 10⁶ multiply-adds each did "
               f"÷ its hold; vs --fd off: the change in that throughput (it includes the machine's "
               f"noise, other users' load: a difference below a few % is not significant). Rounds per "
               f"CPU-second: each process's rounds per second ÷ the share of a core it got (all its "
               f"threads, schedstat), summed: the work per CPU time, which other users' load "
               f"changes less; its change against --fd off is the detector's cost including its "
               f"indirect effects (caches, context switches). Detector CPU per process: its thread's "
               f"CPU time ÷ wall time, the cost for a process that has a core of its own (the "
               f"seed's setting: one process per CPU); it does not depend on n (k heartbeats out, "
               f"about k in, per T_hb).\n",
               md_table(hdr2, out2)]

    if "soak" in parts:
        rows = load(os.path.join(outdir, "kmonitor-soak.csv"))
        by = {}
        for r in rows:
            by.setdefault(int(r["t_to_ms"]), []).append(r)
        hdr3 = ["T_to ms", "T_hb ms", "jobs", "jobs ok", "notices (false detections)", "seconds of jobs",
                "process-seconds"]
        out3 = []
        for to in sorted(by):
            rr = by[to]
            secs = sum(int(r["seconds"]) for r in rr)
            out3.append([str(to), rr[0]["t_hb_ms"], str(len(rr)), str(sum(r["status"] == "ok" for r in rr)),
                         str(sum(int(r["notices"]) for r in rr)), str(secs),
                         str(sum(int(r["seconds"]) * int(r["n"]) for r in rr))])
        head = (f"soak: jobs of {E.get('SOAK_N', '?')} processes computing (`fdwatch --notify --work --hold "
                f"{int(E.get('SOAK_JOB_S', '30')) * 1000}`) back to back for {E.get('SOAK_S', '?')} s per T_to, "
                f"k = {k}, T_hb = T_to/10{(', ' + E['SOAK_EXTRA']) if E.get('SOAK_EXTRA') else ''}, "
                f"with {E.get('BURNERS', '?')} busy-loop burners")
        txt += ["", head] + ["  ".join(r) for r in out3]
        md += [f"\n#### No false detection under CPU load\n",
               f"{head} (`bash -c 'while :; do :; done'`) on {E.get('MACHINE_NPROC', '?')} CPUs. Nothing "
               f"is killed: every notice is a false detection, and so is a job that does not exit 0.\n",
               md_table(hdr3, out3)]

    print("\n".join(txt))
    with open(md_path, "w") as m:
        m.write("\n".join(md) + "\n")
    print(f"Markdown: {md_path}")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    if sys.argv[1] == "cpu-run" and len(sys.argv) == 8:
        cpu_run(sys.argv[2:])
    elif sys.argv[1] == "report" and len(sys.argv) == 4:
        report(sys.argv[2:])
    else:
        raise SystemExit(__doc__)
