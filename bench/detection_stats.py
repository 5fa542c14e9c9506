#!/usr/bin/env python3
"""Parsing and statistics of bench/detection.sh (the failure-detection benchmark).

    detection_stats.py run CSV OUTFILE N PROTOCOL TG_MS REP VICTIM KILL_MS STATUS BUSY [CPUFILE]
        parses one run's output (the lines of examples/fdwatch) and appends one CSV row per
        rank to CSV; prints a one-line summary. VICTIM and KILL_MS are empty when the job
        never got ready (nothing was killed). CPUFILE: two samples per process of
        `PID DETECTOR_NS TOTAL_NS WALL_US THREADS` (bench/lib.sh detector_cpu_sample).
    detection_stats.py report CSV MDFILE
        the table per (n, protocol, T_gossip) on stdout and as Markdown in MDFILE (the
        machine, commands and knobs come from the environment set by detection.sh).

fdwatch prints, per rank: `rank R ready pid PID on HOST at UNIX_MS`, on each confirmed
failure `rank R notified: rank K failed at UNIX_MS`, and after its hold
`rank R detector sent D datagrams, B bytes in T ms (KIND)` and, with the k-monitor detector,
`rank R failure notices sent N`.

Protocol KMONITOR is the k-monitor detector (`--fd kmonitor --k KM_K --t-hb TG --t-to
KM_TO_FACTOR·TG`): TG is its heartbeat period; a crash is seen at once through the reset
connections (the target: every process notified within KM_CRASH_BOUND_MS = 100 ms).
"""
import csv
import math
import os
import re
import statistics
import sys

FIELDS = ["n", "protocol", "t_gossip_ms", "rep", "victim", "kill_unix_ms", "rank", "role",
          "notice_unix_ms", "detection_ms", "false_notices", "datagrams", "bytes", "detector_ms",
          "run_status", "busy_pct", "notices_sent", "detector_cpu_ns", "process_cpu_ns", "cpu_wall_us"]

READY = re.compile(r"^rank (\d+) ready pid (\d+) on \S+ at (\d+)")
NOTICE = re.compile(r"^rank (\d+) notified: rank (-?\d+) failed at (\d+)")
TRAFFIC = re.compile(r"^rank (\d+) detector sent (\d+) datagrams, (\d+) bytes in (\d+) ms")
NOTICES_SENT = re.compile(r"^rank (\d+) failure notices sent (\d+)")

# Fixed bytes of a detector datagram: "PFD", version, sender rank (u32) before the message,
# and its 16-byte MAC on the job key after it.
HEADER = 8 + 16
# A k-monitor heartbeat on its TCP connection: 4-byte length, 1-byte message, 16-byte MAC.
KM_FRAME = 4 + 1 + 16
KM_CRASH_BOUND_MS = 100


def is_km(protocol):
    return protocol.upper() == "KMONITOR"


def km_k(n):
    """The monitors of a process: k, or every other process when there are fewer."""
    return min(int(os.environ.get("KM_K", "4")), n - 1)


def km_t_to(tg):
    return int(os.environ.get("KM_TO_FACTOR", "10")) * tg


def bound_ms(protocol, n, tg):
    """The target for the last notice after a kill -9."""
    if is_km(protocol):
        return KM_CRASH_BOUND_MS
    return cleanup_rounds(protocol, n) * tg + tg


def ceil_log2(n):
    return 0 if n <= 1 else (n - 1).bit_length()


def cleanup_rounds(protocol, n):
    """T_cleanup in rounds of T_gossip, as crates/p2pmpi-core/src/fd.rs (cleanup_rounds)."""
    l = max(ceil_log2(n), 1)
    p = protocol.upper()
    if p == "KMONITOR":
        return int(os.environ.get("KM_TO_FACTOR", "10"))
    if p == "BRR":
        return 2 * l
    if p == "DBRR":
        return 3 * l
    if p == "RANDOM":
        return 4 * l
    if p == "RR":
        r = 0
        while r * (r + 1) // 2 < n:
            r += 1
        return 2 * max(r, 1)
    raise SystemExit(f"unknown protocol {protocol}")


def varint_len(x):
    return max(1, math.ceil(x.bit_length() / 7))


def gossip_bytes(n, h):
    """Size of one gossip datagram when every counter is h: the header, postcard's variant
    tag and vector length, then n varint counters."""
    return HEADER + 1 + varint_len(n) + n * varint_len(h)


def theory_bytes_per_s(n, tg_ms, ran_ms, protocol="DBRR"):
    """One gossip datagram per T_gossip, its counters growing by one per round from 1; the
    k-monitor detector: a heartbeat to each of its k monitors per T_hb."""
    if is_km(protocol):
        return km_k(n) * KM_FRAME * 1000.0 / tg_ms
    rounds = max(1, int(ran_ms // tg_ms))
    mean = sum(gossip_bytes(n, r + 1) for r in range(rounds)) / rounds
    return mean * 1000.0 / tg_ms


# ------------------------------------------------------------------------------------ run
def cmd_run(a):
    csv_path, outfile, n, protocol, tg, rep, victim, kill_ms, status, busy = a[:10]
    cpufile = a[10] if len(a) > 10 else ""
    n, tg = int(n), int(tg)
    victim = int(victim) if victim != "" else None
    kill = float(kill_ms) if kill_ms != "" else None
    ready, notices, traffic, sent = {}, {}, {}, {}
    pids = {}
    false = {}  # rank -> notices that are false detections
    try:
        lines = open(outfile, errors="replace").read().splitlines()
    except OSError:
        lines = []
    for line in lines:
        m = READY.match(line)
        if m:
            ready[int(m[1])] = int(m[3])
            pids[int(m[2])] = int(m[1])
            continue
        m = NOTICE.match(line)
        if m:
            r, k, at = int(m[1]), int(m[2]), int(m[3])
            # A notice about a rank that was not killed, or about the victim before it was
            # killed, is a false detection.
            if victim is None or k != victim or at < kill:
                false.setdefault(r, []).append(k)
            elif r not in notices:
                notices[r] = at
            continue
        m = TRAFFIC.match(line)
        if m:
            traffic[int(m[1])] = (int(m[2]), int(m[3]), int(m[4]))
            continue
        m = NOTICES_SENT.match(line)
        if m:
            sent[int(m[1])] = int(m[2])
    # CPU: the difference of the first and last sample of each process.
    cpu = {}
    samples = {}
    try:
        for line in open(cpufile) if cpufile else []:
            f = line.split()
            if len(f) >= 4 and int(f[0]) in pids:
                samples.setdefault(pids[int(f[0])], []).append([int(x) for x in f[1:]] + [-1])
    except OSError:
        pass
    for r, v in samples.items():
        # The same threads in both samples (a process that exits loses its threads first).
        if len(v) >= 2 and v[-1][2] > v[0][2] and v[-1][1] > 0 and v[-1][3] == v[0][3]:
            cpu[r] = (v[-1][0] - v[0][0], v[-1][1] - v[0][1], v[-1][2] - v[0][2])
    rows, dets = [], []
    for r in range(n):
        role = "victim" if r == victim else "survivor"
        at = notices.get(r)
        det = "" if at is None or kill is None else f"{at - kill:.3f}"
        if det:
            dets.append(at - kill)
        d, b, ms = traffic.get(r, ("", "", ""))
        rows.append({
            "n": n, "protocol": protocol, "t_gossip_ms": tg, "rep": rep,
            "victim": "" if victim is None else victim,
            "kill_unix_ms": kill_ms, "rank": r, "role": role,
            "notice_unix_ms": "" if at is None else at, "detection_ms": det,
            "false_notices": len(false.get(r, [])),
            "datagrams": d, "bytes": b, "detector_ms": ms,
            "run_status": status, "busy_pct": busy,
            "notices_sent": sent.get(r, ""),
            "detector_cpu_ns": cpu[r][0] if r in cpu else "",
            "process_cpu_ns": cpu[r][1] if r in cpu else "",
            "cpu_wall_us": cpu[r][2] if r in cpu else "",
        })
    with open(csv_path, "a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        for row in rows:
            w.writerow(row)
    nfalse = sum(len(v) for v in false.values())
    tc = cleanup_rounds(protocol, n) * tg
    bound = (f"target {KM_CRASH_BOUND_MS} ms, T_to {tc} ms" if is_km(protocol)
             else f"T_cleanup {tc} ms, + ping {tc + tg} ms")
    msgs = f"; failure notices sent {sum(sent.values())}" if sent else ""
    if victim is None:
        print(f"{status}: {len(ready)}/{n} ready, nothing killed; false detections {nfalse}")
    elif dets:
        print(f"{status}: killed rank {victim}; {len(dets)}/{n - 1} notified, detection "
              f"{min(dets):.0f}..{max(dets):.0f} ms ({bound}); "
              f"false detections {nfalse}{msgs}")
    else:
        print(f"{status}: killed rank {victim}; nobody notified; false detections {nfalse}")


# --------------------------------------------------------------------------------- report
def median(v):
    return statistics.median(v) if v else None


def fmt(x, nd=0):
    return "—" if x is None else f"{x:.{nd}f}"


def md_table(hdr, rows, align):
    lines = ["| " + " | ".join(hdr) + " |", "|" + "|".join(align) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def txt_table(hdr, rows):
    w = [max([len(h)] + [len(r[j]) for r in rows]) for j, h in enumerate(hdr)]
    fr = lambda r: "  ".join(c.rjust(w[j]) for j, c in enumerate(r))
    return "\n".join([fr(hdr), fr(["-" * x for x in w])] + [fr(r) for r in rows])


def cmd_report(a):
    csv_path, md_path = a
    E = os.environ
    runs = {}  # (n, protocol, tg, rep) -> list of rows
    with open(csv_path) as f:
        for r in csv.DictReader(f):
            runs.setdefault((int(r["n"]), r["protocol"], int(r["t_gossip_ms"]), int(r["rep"])), []).append(r)
    ns = [int(x) for x in E.get("NS", "").split()] or sorted({k[0] for k in runs})
    protos = E.get("PROTOCOLS", "").split() or sorted({k[1] for k in runs})
    tgs = [int(x) for x in E.get("TGS", "").split()] or sorted({k[2] for k in runs})

    hdr = ["n", "protocol", "T_gossip / T_hb ms", "T_cleanup / T_to ms", "bound ms",
           "mean detection ms", "max detection ms", "(max−T_cleanup)/T_gossip", "worst max ms",
           "runs max ≤ bound", "false det.", "missed", "messages per failure",
           "detector B/s per process", "messages per period", "B/s ÷ theory", "detector CPU %"]
    align = ["---:", ":---", "---:"] + ["---:"] * (len(hdr) - 3)
    rows, cells_ok, cells_bad, problems = [], [], [], []
    tot_false = tot_missed = tot_runs = 0
    span = []  # (detection − T_cleanup) / T_gossip of every notified process
    for tg in tgs:
        for n in ns:
            for p in protos:
                keys = sorted(k for k in runs if k[:3] == (n, p, tg))
                if not keys:
                    continue
                tc = cleanup_rounds(p, n) * tg
                bound = bound_ms(p, n, tg)
                means, maxes, rates, ratios, per_tg = [], [], [], [], []
                msgs, cpus = [], []
                nfalse = nmissed = within = killed = 0
                for k in keys:
                    rr = runs[k]
                    status = rr[0]["run_status"]
                    nfalse += sum(int(r["false_notices"]) for r in rr)
                    if rr[0]["victim"] == "":
                        problems.append(f"n={n} {p} T_gossip={tg} rep {k[3]}: {status}, nothing killed")
                        continue
                    killed += 1
                    if status != "ok":
                        problems.append(f"n={n} {p} T_gossip={tg} rep {k[3]}: job {status}")
                    surv = [r for r in rr if r["role"] == "survivor"]
                    d = [float(r["detection_ms"]) for r in surv if r["detection_ms"] != ""]
                    nmissed += sum(1 for r in surv if r["detection_ms"] == "")
                    if not is_km(p):
                        span += [(x - tc) / tg for x in d]
                    if d:
                        means.append(statistics.fmean(d))
                        maxes.append(max(d))
                        if max(d) <= bound and len(d) == len(surv):
                            within += 1
                    ns_sent = [int(r["notices_sent"]) for r in surv if r.get("notices_sent", "") != ""]
                    if ns_sent:
                        msgs.append(sum(ns_sent))
                    c = [int(r["detector_cpu_ns"]) / (int(r["cpu_wall_us"]) * 1000.0) * 100
                         for r in surv if r.get("cpu_wall_us", "") not in ("", "0")]
                    if c:
                        cpus.append(statistics.fmean(c))
                    for r in surv:
                        if r["bytes"] == "" or float(r["detector_ms"]) <= 0:
                            continue  # did not run its full hold
                        ms = float(r["detector_ms"])
                        rate = float(r["bytes"]) * 1000.0 / ms
                        rates.append(rate)
                        ratios.append(rate / theory_bytes_per_s(n, tg, ms, p))
                        per_tg.append(float(r["datagrams"]) * tg / ms)
                tot_false += nfalse
                tot_missed += nmissed
                tot_runs += len(keys)
                mmax = median(maxes)
                excess = None if mmax is None or is_km(p) else (mmax - tc) / tg
                good = killed == len(keys) and within == killed and nfalse == 0 and nmissed == 0
                (cells_ok if good else cells_bad).append(f"n={n} {p} {tg} ms")
                # Gossip floods no notice: each survivor finds the failure itself, at the
                # cost of its pings to the suspect (ping_tries = 3 each; not counted here).
                mpf = fmt(median(msgs)) if is_km(p) else f"({3 * (n - 1)} pings)"
                rows.append([str(n), p, str(tg), str(tc), str(bound), fmt(median(means)), fmt(mmax),
                             fmt(excess, 2), fmt(max(maxes) if maxes else None), f"{within}/{len(keys)}",
                             str(nfalse), str(nmissed), mpf, fmt(median(rates)), fmt(median(per_tg), 3),
                             fmt(median(ratios), 3), fmt(median(cpus), 3)])

    machine = (f"{E.get('MACHINE_NPROC', '?')} CPUs, {E.get('MACHINE_CPU', '?')}, "
               f"{E.get('MACHINE_KERNEL', '?')}; {E.get('MACHINE_DATE', '?')}")
    reps = E.get("REPS", "?")
    qp = int(E.get("QUIET_PCT", "25"))
    loads = [int(r[0]["busy_pct"]) for r in runs.values() if r and r[0]["busy_pct"].isdigit()]
    noisy = sum(1 for x in loads if x > qp)
    load_note = (f"{noisy} of {len(loads)} runs started while other processes kept the CPUs "
                 f">{qp}% busy (max {max(loads)}%)" if noisy else
                 f"background CPU load before each run: max {max(loads) if loads else 0}%")
    target = ("Target (issue 5): every process notified within one T_gossip of T_cleanup "
              "(max detection ≤ T_cleanup + T_gossip), zero false detections; k-monitor "
              f"(issue 14): every process notified within {KM_CRASH_BOUND_MS} ms of a kill -9")
    verdict = (f"target met in {len(cells_ok)} of {len(cells_ok) + len(cells_bad)} cells"
               + (f"; not met in: {', '.join(cells_bad)}" if cells_bad else "")
               + f". False detections: {tot_false}; missed notifications: {tot_missed} "
               f"(over {tot_runs} runs)")
    if span:
        verdict += (f". Every detection fell between T_cleanup {min(span):+.2f}·T_gossip and "
                    f"T_cleanup {max(span):+.2f}·T_gossip (gossip)")
    how = (f"Each run: `p2pmpirun -n N --local --fd PROTOCOL --t-gossip T_gossip --t-max-hang 0 "
           f"examples/fdwatch --notify --hold HOLD_MS` with HOLD_MS = {E.get('WARMUP_MS', '?')} ms "
           f"warm-up + T_cleanup + 2·T_gossip + {E.get('HOLD_EXTRA_MS', '?')} ms; once every rank "
           f"printed its ready line, the warm-up, a random 0–T_gossip wait, then `kill -9` of a "
           f"random rank other than 0. Detection time = "
           f"notice time printed by each other process − kill time (unix ms, same clock). "
           f"mean / max detection: medians over the {reps} runs of each run's mean / max over "
           f"the notified processes; worst max: the largest over the runs; runs max ≤ bound: "
           f"runs where every process was notified within T_cleanup + T_gossip (k-monitor: "
           f"{KM_CRASH_BOUND_MS} ms). False det.: "
           f"notices about a rank that was not killed (or before the kill); missed: surviving "
           f"processes without a notice by the end of their hold. Traffic: UDP payload bytes "
           f"the detector sent ÷ its running time, median over the surviving processes of every "
           f"run; theory = one gossip datagram per T_gossip, of {HEADER} + 2 + n bytes while "
           f"the counters are below 128 (header and MAC, postcard tag and length, one varint "
           f"counter per process); messages per period: datagrams × T_gossip ÷ time ran (theory "
           f"1; the suspects' pings add a little). KMONITOR: `--fd kmonitor --k "
           f"{E.get('KM_K', '4')} --t-hb T_gossip --t-to {E.get('KM_TO_FACTOR', '10')}·T_gossip`; "
           f"messages per failure: the failure notices the surviving processes sent (flooding; "
           f"≤ 2kn), gossip sends none (each process finds the failure itself, pinging the suspect "
           f"up to 3 times); traffic: the TCP frames' bytes (4-byte length, message, 16-byte MAC), "
           f"theory min(k, n−1) heartbeats of {KM_FRAME} bytes per T_hb; messages per period "
           f"(theory min(k, n−1)) count frames. Detector CPU %: CPU time of the detector thread "
           f"(`p2pmpi-kmonitor` / `p2pmpi-fd`, /proc/PID/task/*/schedstat) ÷ wall time between "
           f"the ready lines and 0.7 s before the end of the hold (the kill and the detection "
           f"included), mean over the surviving processes, median over the runs, in % of one "
           f"core per process")

    print()
    print(f"Machine: {machine}")
    print(f"Versions: {E.get('VER_RUST', '?')}")
    print(f"{reps} runs per cell (interleaved), seed {E.get('SEED', '?')}; {load_note}.")
    print()
    print(txt_table(hdr, rows))
    print()
    print(target + ": " + verdict + ".")
    for pr in problems:
        print("Problem: " + pr)

    with open(md_path, "w") as m:
        m.write("### Failure detection on real processes: detection time and detector traffic\n\n")
        m.write(f"Machine: {machine}.  \nVersions: {E.get('VER_RUST', '?')}.  \n")
        m.write(f"{reps} runs per cell, interleaved (`bench/detection.sh`, seed "
                f"{E.get('SEED', '?')}); all processes on this host, loopback.  \n")
        m.write(("**Warning:** " if noisy else "") + load_note + ".\n\n")
        m.write(how + ".\n\n")
        m.write(target + "; here: " + verdict + ".\n\n")
        m.write(md_table(hdr, rows, align) + "\n")
        for pr in problems:
            m.write(f"\nProblem: {pr}\n")
        m.write("\nCommands:\n\n```sh\n" + E.get("CMD_TEMPLATE", "") + "\n```\n")
    print(f"Markdown: {md_path}")


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in ("run", "report", "header"):
        raise SystemExit(__doc__)
    if sys.argv[1] == "header":
        print(",".join(FIELDS))
    elif sys.argv[1] == "run":
        if len(sys.argv) not in (12, 13):
            raise SystemExit(__doc__)
        cmd_run(sys.argv[2:])
    else:
        if len(sys.argv) != 4:
            raise SystemExit(__doc__)
        cmd_report(sys.argv[2:])
