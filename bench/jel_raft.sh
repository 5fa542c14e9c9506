#!/usr/bin/env bash
# The JEL registry replicated among three supernodes (Raft, issue 15 item 3), on real
# processes: N `p2pmpi pool join` members of a central reliable pool on this host, each on its
# own loopback address, the three supernodes on 127.0.19.1-3. It measures, from the
# supernodes' `jel-raft.json` and the members' own output lines:
#
#   join      first member started → every member printed every member's `joined` line
#   leader    `kill -9` of the leading supernode → the two others name the same new leader
#   rejoin    that kill → a member started right after it printed `me` (its join went
#             through the new leader) and every member printed its `joined` line
#   left      then SIGTERM to a member → every other member printed `left`
#
# and checks that no member printed `registry-lost` or `excluded`, and that every member
# printed the same joins in the same order.
#
# Usage: bench/jel_raft.sh
# Env:
#   N=200                 members
#   PORT=19700            the supernodes' port (on 127.0.19.1, .2 and .3)
#   DETECT_MS=5000        --detect-ms of the members (the lease)
#   DISSEMINATION=tree
#   STEP_TIMEOUT=300      seconds allowed for each step
#   P2PMPI=...            the p2pmpi binary (default: build target/release/p2pmpi)
#
# Output: a table on stdout and in bench/out/jel_raft.md; members' output in
# bench/out/jel-raft-raw/.
set -uo pipefail

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$BENCH_DIR/.." && pwd)
OUT="$BENCH_DIR/out"
RAW="$OUT/jel-raft-raw"
N=${N:-200}
PORT=${PORT:-19700}
DETECT_MS=${DETECT_MS:-5000}
DISSEMINATION=${DISSEMINATION:-tree}
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

DIR=$(mktemp -d /tmp/p2pmpi-jel-raft-bench.XXXXXX)
SECRET="jel raft bench $RANDOM$RANDOM"
LIST="127.0.19.1:$PORT,127.0.19.2:$PORT,127.0.19.3:$PORT"
for i in 1 2 3; do
    mkdir -p "$DIR/sn$i"
    printf 'GRID_SECRET=%s\nSUPERNODE=%s\nSUPERNODE_PORT=%s\nEXTERNAL_IP=127.0.19.%s\n' "$SECRET" "$LIST" "$PORT" "$i" \
        >"$DIR/sn$i/P2P-MPI.conf"
done
mkdir -p "$DIR/members"
printf 'GRID_SECRET=%s\nSUPERNODE=%s\n' "$SECRET" "$LIST" >"$DIR/members/P2P-MPI.conf"
chmod 600 "$DIR"/*/P2P-MPI.conf

PIDS=()
sn_pid() { sed -n 's/.*"pid": *\([0-9]*\).*/\1/p' "$DIR/sn$1/supernode.json" 2>/dev/null; }
cleanup() {
    for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done
    for i in 1 2 3; do
        p=$(sn_pid "$i")
        [ -n "$p" ] && kill -9 "$p" 2>/dev/null
    done
    rm -rf "$DIR"
}
trap cleanup EXIT

for i in 1 2 3; do
    P2PMPI_HOME="$DIR/sn$i" P2PMPI_CONF_FILE="$DIR/sn$i/P2P-MPI.conf" "$P2PMPI" supernode start >/dev/null || exit 1
done
export P2PMPI_HOME="$DIR/members" P2PMPI_CONF_FILE="$DIR/members/P2P-MPI.conf"

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'; }
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

# The leader the supernodes $@ agree on (1-3), else nothing.
leader_of() {
    local l="" i x
    for i in "$@"; do
        x=$(sed -n 's/.*"leader": *\([0-9]*\).*/\1/p' "$DIR/sn$i/jel-raft.json" 2>/dev/null)
        [ -z "$x" ] || [ "$x" = 0 ] && return 1
        [ -n "$l" ] && [ "$l" != "$x" ] && return 1
        l=$x
    done
    echo "$l"
}
agreed() { leader_of "$@" >/dev/null; }
# The supernodes $2... agree on a leader other than $1.
moved() {
    local old=$1 l
    shift
    l=$(leader_of "$@") && [ "$l" != "$old" ]
}

ALIVE=()
member_ip() { echo "127.$((20 + $1 / 62500)).$((($1 / 250) % 250)).$(($1 % 250 + 1))"; }
files() {
    local i
    for i in "${ALIVE[@]}"; do echo "$RAW/m.$i"; done
}
all_joined() {
    files | xargs grep -c '^joined ' | awk -F: -v n="$1" '$NF < n { bad = 1 } END { exit bad }'
}
all_have() {
    [ -z "$(files | xargs grep -Lx -- "$1")" ]
}
id_of() { sed -n 's/^me //p' "$RAW/m.$1"; }
start_member() {
    : >"$RAW/m.$1"
    "$P2PMPI" pool join bench --bind "$(member_ip "$1"):0" --detect-ms "$DETECT_MS" --elect master \
        --dissemination "$DISSEMINATION" >"$RAW/m.$1" 2>"$RAW/m.$1.err" &
    PIDS[$1]=$!
    ALIVE+=("$1")
}

wait_until "a first leader" agreed 1 2 3 || exit 1
first=$(leader_of 1 2 3)
echo "== $N members, supernode $first leads" >&2

t0=$(now)
for ((i = 0; i < N; i++)); do start_member "$i"; done
wait_until "every join everywhere" all_joined "$N" || exit 1
JOIN=$(since "$t0")
echo "   join: $JOIN s" >&2

# kill -9 of the leading supernode, a member joining right after.
t1=$(now)
kill -9 "$(sn_pid "$first")"
start_member "$N"
others=()
for i in 1 2 3; do [ "$i" != "$first" ] && others+=("$i"); done
wait_until "a new leader" moved "$first" "${others[@]}" || exit 1
LEADER=$(since "$t1")
second=$(leader_of "${others[@]}")
has_me() { grep -q '^me ' "$RAW/m.$N"; }
wait_until "the new member's join" has_me || exit 1
nid=$(id_of "$N")
wait_until "the new member's join everywhere" all_joined $((N + 1)) || exit 1
REJOIN=$(since "$t1")
echo "   leader: $LEADER s (supernode $second), the join after the kill everywhere: $REJOIN s" >&2

# A graceful leave through the new leader.
l=$((N / 2))
lid=$(id_of "$l")
t2=$(now)
kill -TERM "${PIDS[l]}"
keep=()
for i in "${ALIVE[@]}"; do [ "$i" != "$l" ] && keep+=("$i"); done
ALIVE=("${keep[@]}")
wait_until "left everywhere" all_have "left $lid" || exit 1
LEFT=$(since "$t2")
echo "   left: $LEFT s" >&2

# Nothing lost, nothing reordered: every member's joins are the first member's, in order
# (the member that joined last is told the others in join order too).
BAD=$(files | xargs grep -l -E '^(registry-lost|excluded)' | wc -l)
REF=$(grep '^joined ' "$RAW/m.0" | cut -d' ' -f2 | md5sum)
DIFF=0
for f in $(files); do
    [ "$(grep '^joined ' "$f" | cut -d' ' -f2 | md5sum)" = "$REF" ] || DIFF=$((DIFF + 1))
done
echo "   members with registry-lost/excluded: $BAD, with other joins or another order: $DIFF" >&2
[ "$nid" != "" ] || DIFF=$((DIFF + 1))

for i in "${ALIVE[@]}"; do kill -TERM "${PIDS[i]}" 2>/dev/null; done
for i in "${ALIVE[@]}"; do wait "${PIDS[i]}" 2>/dev/null; done
PIDS=()

{
    echo "JEL registry on three supernodes (Raft), $N members on loopback ($(nproc) CPUs), --dissemination $DISSEMINATION, --detect-ms $DETECT_MS"
    echo
    echo "| every join everywhere (s) | leader killed → new leader (s) | → a join after it everywhere (s) | SIGTERM → left everywhere (s) | members lost/excluded | members with other joins or order |"
    echo "|---|---|---|---|---|---|"
    echo "| $JOIN | $LEADER | $REJOIN | $LEFT | $BAD | $DIFF |"
} | tee "$OUT/jel_raft.md"
[ "$BAD" = 0 ] && [ "$DIFF" = 0 ]
