#!/usr/bin/env bash
# JEL pools on real processes (issue 15, item 7): N `p2pmpi pool join` members on this host,
# each on its own loopback address, the registry (and the distributed implementation's
# rendezvous) hosted by a real supernode. For each implementation it measures, from the
# command's own output lines (each member prints and flushes every event as it comes):
#
#   join     first member started → every member printed every member's `joined` line
#   died     `kill -9` of a member that is not the master → every other member printed `died`
#   elect    `kill -9` of the master → every survivor printed the same new `elected master`
#   left     SIGTERM to a member → every other member printed `left`
#
# Usage: bench/jel.sh
# Env:
#   N=200                 members per implementation
#   IMPLS="central distributed"
#   DISSEMINATION=tree    central: serial|bootstrap|tree|gossip|adaptive
#   DETECT_MS_CENTRAL=5000        --detect-ms of the central members (the lease)
#   DETECT_MS_DISTRIBUTED=default --detect-ms of the distributed members (`default`: no flag,
#                                 the core's defaults: 1 s rounds, a member not heard from for
#                                 120 s probed, 5 s probe time-out; deaths of killed members are
#                                 found sooner, by refused connections and probes on suspicion)
#   STEP_TIMEOUT=300      seconds allowed for each step
#   P2PMPI=...            the p2pmpi binary (default: build target/release/p2pmpi)
#
# Output: a table on stdout and in bench/out/jel.md; members' output in bench/out/jel-raw/.
set -uo pipefail

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$BENCH_DIR/.." && pwd)
OUT="$BENCH_DIR/out"
RAW="$OUT/jel-raw"
N=${N:-200}
IMPLS=${IMPLS:-"central distributed"}
DISSEMINATION=${DISSEMINATION:-tree}
DETECT_MS_CENTRAL=${DETECT_MS_CENTRAL:-5000}
DETECT_MS_DISTRIBUTED=${DETECT_MS_DISTRIBUTED:-default}
STEP_TIMEOUT=${STEP_TIMEOUT:-300}

mkdir -p "$OUT"
rm -rf "$RAW"
mkdir -p "$RAW"

if [ -z "${P2PMPI:-}" ]; then
    echo "building target/release/p2pmpi ..." >&2
    (cd "$ROOT" && nice -n 19 cargo build -q --release -p p2pmpi-cli --bin p2pmpi) || exit 1
    P2PMPI="${CARGO_TARGET_DIR:-$ROOT/target}/release/p2pmpi"
fi
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

HOME_DIR=$(mktemp -d /tmp/p2pmpi-jel-bench.XXXXXX)
printf 'GRID_SECRET=jel bench %s\nSUPERNODE=127.0.0.1:9\nSUPERNODE_PORT=0\nEXTERNAL_IP=127.0.0.1\n' "$RANDOM$RANDOM" \
    >"$HOME_DIR/P2P-MPI.conf"
chmod 600 "$HOME_DIR/P2P-MPI.conf"
export P2PMPI_HOME="$HOME_DIR" P2PMPI_CONF_FILE="$HOME_DIR/P2P-MPI.conf"

PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done
    if [ -f "$HOME_DIR/supernode.json" ]; then
        kill -9 "$(sed -n 's/.*"pid": *\([0-9]*\).*/\1/p' "$HOME_DIR/supernode.json")" 2>/dev/null
    fi
    rm -rf "$HOME_DIR"
}
trap cleanup EXIT

"$P2PMPI" supernode start >/dev/null || exit 1

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'; }

# wait_until DESCRIPTION COMMAND...: polls COMMAND (every 50 ms) until it succeeds; prints
# nothing, fails after STEP_TIMEOUT.
wait_until() {
    local what=$1
    shift
    local deadline=$(($(date +%s) + STEP_TIMEOUT))
    until "$@"; do
        if [ "$(date +%s)" -ge "$deadline" ]; then
            echo "timed out: $what" >&2
            return 1
        fi
        sleep 0.05
    done
}

# Members alive now (indexes).
ALIVE=()
member_ip() { echo "127.$((20 + $1 / 62500)).$((($1 / 250) % 250)).$(($1 % 250 + 1))"; }

files() {
    local i
    for i in "${ALIVE[@]}"; do echo "$RAW/$IMPL.$i"; done
}
# Every alive member printed N `joined` lines (one per member: a member prints a join once).
all_joined() {
    files | xargs grep -c '^joined ' | awk -F: -v n="$N" '$NF < n { bad = 1 } END { exit bad }'
}
# Every alive member printed the line $1.
all_have() {
    [ -z "$(files | xargs grep -Lx -- "$1")" ]
}
# Every alive member's last `elected master` line names $1.
all_elected() {
    files | xargs awk -v want="$1" 'FNR == 1 { w[FILENAME] = "" } /^elected master / { w[FILENAME] = $3 }
        END { for (f in w) if (w[f] != want) exit 1 }'
}
id_of() { sed -n 's/^me //p' "$RAW/$IMPL.$1"; }
drop() {
    local keep=() i
    for i in "${ALIVE[@]}"; do [ "$i" != "$1" ] && keep+=("$i"); done
    ALIVE=("${keep[@]}")
}

declare -A RES DETECT
for IMPL in $IMPLS; do
    echo "== $IMPL: $N members" >&2
    PIDS=()
    ALIVE=()
    if [ "$IMPL" = central ]; then DETECT_MS=$DETECT_MS_CENTRAL; else DETECT_MS=$DETECT_MS_DISTRIBUTED; fi
    DETECT[$IMPL]=$DETECT_MS
    extra=(--impl "$IMPL" --elect master)
    if [ "$DETECT_MS" != default ]; then extra+=(--detect-ms "$DETECT_MS"); fi
    [ "$IMPL" = central ] && extra+=(--dissemination "$DISSEMINATION")
    t0=$(now)
    for ((i = 0; i < N; i++)); do
        "$P2PMPI" pool join "bench-$IMPL" --bind "$(member_ip "$i"):0" "${extra[@]}" >"$RAW/$IMPL.$i" 2>"$RAW/$IMPL.$i.err" &
        PIDS[i]=$!
        ALIVE+=("$i")
    done
    ok=1
    wait_until "$IMPL: every join everywhere" all_joined || ok=0
    RES[$IMPL.join]=$([ $ok = 1 ] && since "$t0" || echo timeout)
    echo "   join: ${RES[$IMPL.join]} s" >&2
    if [ $ok = 0 ]; then
        for k in died elect left; do RES[$IMPL.$k]=-; done
        for i in "${ALIVE[@]}"; do kill -TERM "${PIDS[i]}" 2>/dev/null; done
        for i in "${ALIVE[@]}"; do wait "${PIDS[i]}" 2>/dev/null; done
        PIDS=()
        continue
    fi

    # The master: the winner every member agrees on (the lowest id, distributed).
    if [ "$IMPL" = central ]; then
        master=$(grep -m1 '^elected master ' "$RAW/$IMPL.0" | cut -d' ' -f3)
    else
        master=$(for i in "${ALIVE[@]}"; do id_of "$i"; done | sort | head -1)
        wait_until "$IMPL: first election converged" all_elected "$master" || true
    fi
    m_idx=""
    for i in "${ALIVE[@]}"; do [ "$(id_of "$i")" = "$master" ] && m_idx=$i; done

    # kill -9 of a member that is not the master.
    v=$(( (m_idx + N / 2) % N ))
    vid=$(id_of "$v")
    t1=$(now)
    kill -9 "${PIDS[v]}"
    drop "$v"
    ok=1
    wait_until "$IMPL: died everywhere" all_have "died $vid" || ok=0
    RES[$IMPL.died]=$([ $ok = 1 ] && since "$t1" || echo timeout)
    echo "   died: ${RES[$IMPL.died]} s" >&2

    # kill -9 of the master: the next candidate everywhere.
    t2=$(now)
    kill -9 "${PIDS[m_idx]}"
    drop "$m_idx"
    if [ "$IMPL" = central ]; then
        new_master() { [ "$(grep '^elected master ' "$RAW/$IMPL.${ALIVE[0]}" | tail -1)" != "elected master $master" ]; }
        wait_until "$IMPL: a new master" new_master || true
        next=$(grep '^elected master ' "$RAW/$IMPL.${ALIVE[0]}" | tail -1 | cut -d' ' -f3)
    else
        next=$(for i in "${ALIVE[@]}"; do id_of "$i"; done | sort | head -1)
    fi
    ok=1
    [ -n "$next" ] && [ "$next" != "$master" ] || ok=0
    [ $ok = 1 ] && { wait_until "$IMPL: re-election everywhere" all_elected "$next" || ok=0; }
    RES[$IMPL.elect]=$([ $ok = 1 ] && since "$t2" || echo timeout)
    echo "   elect: ${RES[$IMPL.elect]} s" >&2

    # A graceful leave.
    l=${ALIVE[$(( ${#ALIVE[@]} / 2 ))]}
    lid=$(id_of "$l")
    t3=$(now)
    kill -TERM "${PIDS[l]}"
    drop "$l"
    ok=1
    wait_until "$IMPL: left everywhere" all_have "left $lid" || ok=0
    RES[$IMPL.left]=$([ $ok = 1 ] && since "$t3" || echo timeout)
    echo "   left: ${RES[$IMPL.left]} s" >&2

    for i in "${ALIVE[@]}"; do kill -TERM "${PIDS[i]}" 2>/dev/null; done
    for i in "${ALIVE[@]}"; do wait "${PIDS[i]}" 2>/dev/null; done
    PIDS=()
done

{
    echo "JEL pools, $N members on loopback ($(nproc) CPUs), central: --dissemination $DISSEMINATION"
    echo
    echo "| implementation | --detect-ms | every join everywhere (s) | kill -9 → died everywhere (s) | master killed → re-elected everywhere (s) | SIGTERM → left everywhere (s) |"
    echo "|---|---|---|---|---|---|"
    for IMPL in $IMPLS; do
        echo "| $IMPL | ${DETECT[$IMPL]} | ${RES[$IMPL.join]} | ${RES[$IMPL.died]} | ${RES[$IMPL.elect]} | ${RES[$IMPL.left]} |"
    done
} | tee "$OUT/jel.md"
