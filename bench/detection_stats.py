#!/usr/bin/env python3
"""Parsing and statistics of bench/detection.sh (the failure-detection benchmark).

    detection_stats.py run CSV OUTFILE N PROTOCOL TG_MS REP VICTIM KILL_MS STATUS BUSY
        parses one run's output (the lines of examples/fdwatch) and appends one CSV row per
        rank to CSV; prints a one-line summary. VICTIM and KILL_MS are empty when the job
        never got ready (nothing was killed).
    detection_stats.py report CSV MDFILE
        the table per (n, protocol, T_gossip) on stdout and as Markdown in MDFILE (the
        machine, commands and knobs come from the environment set by detection.sh).

fdwatch prints, per rank: `rank R ready pid PID on HOST at UNIX_MS`, on each confirmed
failure `rank R notified: rank K failed at UNIX_MS`, and after its hold
`rank R detector sent D datagrams, B bytes in T ms`.
"""
import csv
import math
import os
import re
import statistics
import sys

FIELDS = ["n", "protocol", "t_gossip_ms", "rep", "victim", "kill_unix_ms", "rank", "role",
          "notice_unix_ms", "detection_ms", "false_notices", "datagrams", "bytes", "detector_ms",
          "run_status", "busy_pct"]

READY = re.compile(r"^rank (\d+) ready pid (\d+) on \S+ at (\d+)")
NOTICE = re.compile(r"^rank (\d+) notified: rank (-?\d+) failed at (\d+)")
TRAFFIC = re.compile(r"^rank (\d+) detector sent (\d+) datagrams, (\d+) bytes in (\d+) ms")

# Fixed bytes of a detector datagram: "PFD", version, sender rank (u32) before the message,
# and its 16-byte MAC on the job key after it.
HEADER = 8 + 16


def ceil_log2(n):
    return 0 if n <= 1 else (n - 1).bit_length()


def cleanup_rounds(protocol, n):
    """T_cleanup in rounds of T_gossip, as crates/p2pmpi-core/src/fd.rs (cleanup_rounds)."""
    l = max(ceil_log2(n), 1)
    p = protocol.upper()
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


def theory_bytes_per_s(n, tg_ms, ran_ms):
    """One gossip datagram per T_gossip, its counters growing by one per round from 1."""
    rounds = max(1, int(ran_ms // tg_ms))
    mean = sum(gossip_bytes(n, r + 1) for r in range(rounds)) / rounds
    return mean * 1000.0 / tg_ms


# ------------------------------------------------------------------------------------ run
def cmd_run(a):
    csv_path, outfile, n, protocol, tg, rep, victim, kill_ms, status, busy = a
    n, tg = int(n), int(tg)
    victim = int(victim) if victim != "" else None
    kill = float(kill_ms) if kill_ms != "" else None
    ready, notices, traffic = {}, {}, {}
    false = {}  # rank -> notices that are false detections
    try:
        lines = open(outfile, errors="replace").read().splitlines()
    except OSError:
        lines = []
    for line in lines:
        m = READY.match(line)
        if m:
            ready[int(m[1])] = int(m[3])
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
        })
    with open(csv_path, "a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        for row in rows:
            w.writerow(row)
    nfalse = sum(len(v) for v in false.values())
    tc = cleanup_rounds(protocol, n) * tg
    if victim is None:
        print(f"{status}: {len(ready)}/{n} ready, nothing killed; false detections {nfalse}")
    elif dets:
        print(f"{status}: killed rank {victim}; {len(dets)}/{n - 1} notified, detection "
              f"{min(dets):.0f}..{max(dets):.0f} ms (T_cleanup {tc} ms, + ping {tc + tg} ms); "
              f"false detections {nfalse}")
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

    hdr = ["n", "protocol", "T_gossip ms", "T_cleanup ms", "T_cleanup+ping ms",
           "mean detection ms", "max detection ms", "(max−T_cleanup)/T_gossip", "worst max ms",
           "runs max ≤ T_cl+T_g", "false det.", "missed", "detector B/s per process",
           "datagrams per T_gossip", "B/s ÷ theory"]
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
                means, maxes, rates, ratios, per_tg = [], [], [], [], []
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
                    span += [(x - tc) / tg for x in d]
                    if d:
                        means.append(statistics.fmean(d))
                        maxes.append(max(d))
                        if max(d) <= tc + tg and len(d) == len(surv):
                            within += 1
                    for r in surv:
                        if r["bytes"] == "" or float(r["detector_ms"]) <= 0:
                            continue  # did not run its full hold
                        ms = float(r["detector_ms"])
                        rate = float(r["bytes"]) * 1000.0 / ms
                        rates.append(rate)
                        ratios.append(rate / theory_bytes_per_s(n, tg, ms))
                        per_tg.append(float(r["datagrams"]) * tg / ms)
                tot_false += nfalse
                tot_missed += nmissed
                tot_runs += len(keys)
                mmax = median(maxes)
                excess = None if mmax is None else (mmax - tc) / tg
                good = killed == len(keys) and within == killed and nfalse == 0 and nmissed == 0
                (cells_ok if good else cells_bad).append(f"n={n} {p} {tg} ms")
                rows.append([str(n), p, str(tg), str(tc), str(tc + tg), fmt(median(means)), fmt(mmax),
                             fmt(excess, 2), fmt(max(maxes) if maxes else None), f"{within}/{len(keys)}",
                             str(nfalse), str(nmissed), fmt(median(rates)), fmt(median(per_tg), 3),
                             fmt(median(ratios), 3)])

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
              "(max detection ≤ T_cleanup + T_gossip), zero false detections")
    verdict = (f"target met in {len(cells_ok)} of {len(cells_ok) + len(cells_bad)} cells"
               + (f"; not met in: {', '.join(cells_bad)}" if cells_bad else "")
               + f". False detections: {tot_false}; missed notifications: {tot_missed} "
               f"(over {tot_runs} runs)")
    if span:
        verdict += (f". Every detection fell between T_cleanup {min(span):+.2f}·T_gossip and "
                    f"T_cleanup {max(span):+.2f}·T_gossip")
    how = (f"Each run: `p2pmpirun -n N --local --fd PROTOCOL --t-gossip T_gossip --t-max-hang 0 "
           f"examples/fdwatch --notify --hold HOLD_MS` with HOLD_MS = {E.get('WARMUP_MS', '?')} ms "
           f"warm-up + T_cleanup + 2·T_gossip + {E.get('HOLD_EXTRA_MS', '?')} ms; once every rank "
           f"printed its ready line, the warm-up, a random 0–T_gossip wait, then `kill -9` of a "
           f"random rank other than 0. Detection time = "
           f"notice time printed by each other process − kill time (unix ms, same clock). "
           f"mean / max detection: medians over the {reps} runs of each run's mean / max over "
           f"the notified processes; worst max: the largest over the runs; runs max ≤ T_cl+T_g: "
           f"runs where every process was notified within T_cleanup + T_gossip. False det.: "
           f"notices about a rank that was not killed (or before the kill); missed: surviving "
           f"processes without a notice by the end of their hold. Traffic: UDP payload bytes "
           f"the detector sent ÷ its running time, median over the surviving processes of every "
           f"run; theory = one gossip datagram per T_gossip, of {HEADER} + 2 + n bytes while "
           f"the counters are below 128 (header and MAC, postcard tag and length, one varint "
           f"counter per process); datagrams per T_gossip (theory 1) include the suspects' pings")

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
        if len(sys.argv) != 12:
            raise SystemExit(__doc__)
        cmd_run(sys.argv[2:])
    else:
        if len(sys.argv) != 4:
            raise SystemExit(__doc__)
        cmd_report(sys.argv[2:])
