#!/usr/bin/env bash
# The soak: every fault kind, many times, against real daemons on this machine. Each part is
# a test of the suite run with more repetitions; the script prints one pass count per part.
#
#   chaos      replicated jobs (-r 2, -r 3) on a local grid whose replicas, masters included,
#              are harmed at random moments, one at a time or together: kill -9, SIGSTOP for
#              good, SIGSTOP then SIGCONT past detection, and (as root, with nftables) a host
#              cut off by the network then healed. Each output must equal the fault-free run.
#   links      (as root, with ip netns) peers in network namespaces, a peer's link taken down
#              mid-job: the replicated job goes on, the unreplicated one stops naming the rank;
#              and the k-monitor detector alone across a NAT: crashes, links taken down, a cut
#              that heals (tests/kmonitor_wide_area.rs).
#   storms     1000 reservation requests at once against one peer (J = 3), then 1000 that
#              reserve and cancel at once; and jobs submitted at once from every peer onto
#              hosts with J = 1, P = 2. J and P are never exceeded; every request is answered;
#              no ticket, process, job directory, descriptor or thread is left behind.
#   checkpoints a job (-n 4, a checkpoint every second) on a local grid of 8 peers under a
#              random failure process: kill -9 of a rank, SIGSTOP for good, SIGSTOP then SIGCONT,
#              a peer daemon killed (exponential gaps, a third of the job on average); with
#              --max-restarts it must end with the fault-free checksum and no line twice; the
#              same job without checkpoints, dealt the same faults, is the control (counted
#              failures). SOAK_CKPT_JOB_SECONDS sets the job's length (default 20; 1200 for the
#              20-minute job), SOAK_CKPT_FAULT_SECONDS the mean gap between faults.
#
# Usage: bench/soak.sh [ROUNDS]       ROUNDS rounds of every part (default 5)
#        bench/soak.sh --hour         rounds until an hour has passed (then the round ends)
#        bench/soak.sh --for SECONDS  likewise, for SECONDS
# Env:   P2PMPI_CHAOS_SEED=N fixes the chaos trials' base seed (a failing trial prints its
#        seed; the checkpoint trials' too); SOAK_PARTS="chaos links storms checkpoints" picks
#        parts.
# Output: the pass counts on stdout; every part's log in bench/out/soak/.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT="$ROOT/bench/out/soak"
mkdir -p "$OUT"
cd "$ROOT"

ROUNDS=5
UNTIL=0
case "${1:-}" in
    --hour) UNTIL=$(( $(date +%s) + 3600 )); ROUNDS=0 ;;
    --for) UNTIL=$(( $(date +%s) + ${2:?--for SECONDS} )); ROUNDS=0 ;;
    "") ;;
    *[!0-9]*) echo "usage: bench/soak.sh [ROUNDS | --hour | --for SECONDS]" >&2; exit 2 ;;
    *) ROUNDS=$1 ;;
esac
PARTS=${SOAK_PARTS:-"chaos links storms checkpoints"}
CKPT_SEED=${P2PMPI_CHAOS_SEED:-$(date +%s)}
# Shared-memory segments (docs/shm.md) present before the soak: any other found at the end
# was left behind.
SHM_BEFORE=$(ls -1 /dev/shm 2>/dev/null | grep '^p2pmpi-' | sort || true)

echo "building the tests" >&2
cargo build --workspace --all-targets >"$OUT/build.log" 2>&1 || { tail -20 "$OUT/build.log" >&2; exit 1; }

declare -A PASSED TOTAL
status=0
start=$(date +%s)

# One round of PART: runs its tests with one repetition each, adds to the counts.
round() {
    local part=$1 k=$2 log="$OUT/$1.$2.log" rc
    case $part in
        chaos)
            P2PMPI_CHAOS_TRIALS=1 cargo nextest run -p p2pmpi-cli --test replication chaos_on_a_local_grid \
                --no-capture >"$log" 2>&1
            rc=$?
            local line
            line=$(grep -E "^chaos: [0-9]+ of [0-9]+ trials passed" "$log" | tail -1)
            if [ -n "$line" ]; then
                read -r _ p _ t _ <<<"$line"
                PASSED[chaos]=$(( ${PASSED[chaos]:-0} + p )); TOTAL[chaos]=$(( ${TOTAL[chaos]:-0} + t ))
            else
                TOTAL[chaos]=$(( ${TOTAL[chaos]:-0} + 1 ))
            fi
            grep "chaos trial failed" "$log" | head -3 >&2
            ;;
        links)
            cargo nextest run -p p2pmpi-cli --test netns --test kmonitor_wide_area --no-capture >"$log" 2>&1
            rc=$?
            if grep -q "SKIPPED" "$log"; then
                [ "$k" = 1 ] && grep -m1 "SKIPPED" "$log" >&2
            fi
            local n
            n=$(grep -cE "^\s+PASS \[" "$log")
            PASSED[links]=$(( ${PASSED[links]:-0} + n ))
            TOTAL[links]=$(( ${TOTAL[links]:-0} + n + $(grep -cE "^\s+FAIL \[" "$log") ))
            ;;
        storms)
            cargo nextest run -p p2pmpi-cli --test soak --no-capture >"$log" 2>&1
            rc=$?
            local p
            p=$(grep -cE "^storm [0-9]+: wave 1|^job storm [0-9]+:" "$log")
            PASSED[storms]=$(( ${PASSED[storms]:-0} + p )); TOTAL[storms]=$(( ${TOTAL[storms]:-0} + 2 ))
            grep -E "^storm [0-9]+: wave 1|^job storm [0-9]+:" "$log" | sed 's/^/    /' >&2
            ;;
        checkpoints)
            P2PMPI_CKPT_TRIALS=1 P2PMPI_CKPT_CONTROL=1 P2PMPI_CKPT_SEED=$((CKPT_SEED + k)) \
                P2PMPI_CKPT_JOB_SECONDS=${SOAK_CKPT_JOB_SECONDS:-20} \
                ${SOAK_CKPT_FAULT_SECONDS:+P2PMPI_CKPT_FAULT_SECONDS=$SOAK_CKPT_FAULT_SECONDS} \
                cargo nextest run -p p2pmpi-cli --test grid_checkpoints checkpoint_soak --no-capture >"$log" 2>&1
            rc=$?
            local p c
            p=$(grep -cE "^checkpoints trial [0-9]+: finished with the right checksum" "$log")
            c=$(grep -cE "^control trial [0-9]+: failed" "$log")
            PASSED[checkpoints]=$(( ${PASSED[checkpoints]:-0} + p )); TOTAL[checkpoints]=$(( ${TOTAL[checkpoints]:-0} + 1 ))
            CONTROL_FAILED=$(( ${CONTROL_FAILED:-0} + c ))
            grep -E "^(checkpoints|control) trial" "$log" | cut -c1-200 | sed 's/^/    /' >&2
            ;;
    esac
    if [ "$rc" != 0 ]; then
        status=1
        echo "round $k of $part FAILED (log: ${log#"$ROOT"/})" >&2
        grep -E "panicked|assertion" "$log" | head -5 >&2
    fi
}

k=0
while :; do
    k=$((k + 1))
    if [ "$UNTIL" -gt 0 ]; then
        [ "$(date +%s)" -ge "$UNTIL" ] && break
    elif [ "$k" -gt "$ROUNDS" ]; then
        break
    fi
    for part in $PARTS; do
        round "$part" "$k"
    done
    echo "round $k done ($(( $(date +%s) - start )) s)" >&2
done

for part in $PARTS; do
    case $part in
        chaos) what="chaos trials" ;;
        links) what="link-fault tests" ;;
        storms) what="storms (1000 reservations; concurrent jobs)" ;;
        checkpoints) what="checkpointed jobs under faults (right checksum, no line twice)" ;;
    esac
    echo "$part: ${PASSED[$part]:-0} of ${TOTAL[$part]:-0} $what passed"
    if [ "$part" = checkpoints ]; then
        echo "checkpoints control: ${CONTROL_FAILED:-0} of ${TOTAL[$part]:-0} jobs without checkpoints failed under the same faults"
    fi
done
echo "soak: $((k - 1)) round(s) in $(( $(date +%s) - start )) s"
# Nothing left behind by the whole soak: no daemon, no example process of ours.
left=$(pgrep -f "p2pmpi-grid-|examples/(replcheck|whereami|fdwatch|ckpt_iter)" | grep -v "^$$\$" || true)
if [ -n "$left" ]; then
    echo "processes left behind:" >&2
    ps -o pid,args -p $left >&2
    status=1
fi
# ... and no shared-memory segment (they are unlinked once both ends mapped them).
shm_left=$(comm -13 <(echo "$SHM_BEFORE") <(ls -1 /dev/shm 2>/dev/null | grep '^p2pmpi-' | sort || true))
if [ -n "$shm_left" ]; then
    echo "shared-memory segments left behind in /dev/shm:" >&2
    echo "$shm_left" >&2
    status=1
fi
exit $status
