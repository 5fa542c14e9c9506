#!/usr/bin/env bash
# Peers in their own network namespaces, for benchmarks and trying things by hand: the same
# topology as the tests' harness (crates/p2pmpi-cli/tests/common/netns.rs). Needs root,
# iproute2 (`ip`) and nftables (`nft`).
#
#   router namespace: bridge br1 10.0.1.254/24 (site a), br2 10.0.2.254/24 (site b), forwarding
#   site a: sn 10.0.1.1 (the supernode), a1 10.0.1.2, a2 10.0.1.3, …   (open)
#   site b: b1 10.0.2.1, b2 10.0.2.2, …                                 (behind NAT: masqueraded
#           when it connects out; new connections into it are dropped)
#
# Usage:
#   bench/netns.sh up              build the topology (A=4 peers in site a, B=2 in site b)
#   bench/netns.sh grid            start the supernode on sn and a peer daemon on every peer
#                                  (P=2 processes each); waits until a1 sees site a's peers
#   bench/netns.sh run HOST ARGS…  p2pmpirun ARGS submitted from HOST (e.g. a1)
#   bench/netns.sh exec HOST CMD…  any command in HOST's namespace, with its P2PMPI_HOME
#   bench/netns.sh cut HOST        take HOST's link down (its router-side veth: silence, no error)
#   bench/netns.sh heal HOST       bring it back up
#   bench/netns.sh status          namespaces, addresses, links, daemons
#   bench/netns.sh down            kill every process in the namespaces and delete them
# Env: NAME=bench (namespaces are p2pns-NAME-<host>), A=4, B=2, P=2,
#      BIN=<target>/release (where p2pmpi's binaries are; built with cargo if missing).
# State: bench/out/netns-NAME/<host>/ (configuration, daemon state and logs of each host).
#
# Example:
#   sudo bench/netns.sh up && sudo bench/netns.sh grid
#   sudo bench/netns.sh run a1 -n 8 target/release/examples/pi
#   sudo bench/netns.sh run a1 -n 8 --fd DBRR --t-gossip 100 target/release/examples/fdwatch --hold 20000 &
#   sleep 3; sudo bench/netns.sh cut a3      # the job stops within the detector's bound
#   sudo bench/netns.sh heal a3; sudo bench/netns.sh down
set -euo pipefail

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$BENCH_DIR/.." && pwd)
OUT="$BENCH_DIR/out"
source "$BENCH_DIR/lib.sh"

NAME=${NAME:-bench}
A=${A:-4}
B=${B:-2}
P=${P:-2}
BIN=${BIN:-$TARGET_DIR/release}
PREFIX="p2pns-$NAME-"
ROUTER="${PREFIX}router"
STATE="$OUT/netns-$NAME"

die() { log "$*"; exit 1; }

# Hosts as "name site index", site a first (the supernode is a's first host).
hosts() {
    echo "sn 1 1"
    for i in $(seq 1 "$A"); do echo "a$i 1 $((i + 1))"; done
    for i in $(seq 1 "$B"); do echo "b$i 2 $i"; done
}
peers() { hosts | awk '$1 != "sn" { print $1 }'; }
ns_of() { echo "$PREFIX$1"; }
ip_of() { hosts | awk -v h="$1" '$1 == h { print "10.0." $2 "." $3 }'; }
known() { [ -n "$(ip_of "$1")" ] || die "no host $1 (hosts: $(hosts | awk '{ printf "%s ", $1 }'))"; }

check() {
    [ "$(id -u)" = 0 ] || die "needs root (network namespaces)"
    command -v ip >/dev/null || die "needs ip (iproute2)"
    command -v nft >/dev/null || die "needs nft (nftables)"
}

up() {
    check
    ip netns list | grep -q "^$ROUTER\b" && die "already up (bench/netns.sh down first)"
    ip netns add "$ROUTER"
    ip -n "$ROUTER" link set lo up
    for s in 1 2; do
        ip -n "$ROUTER" link add "br$s" type bridge
        ip -n "$ROUTER" addr add "10.0.$s.254/24" dev "br$s"
        ip -n "$ROUTER" link set "br$s" up
    done
    ip netns exec "$ROUTER" sysctl -qw net.ipv4.ip_forward=1
    hosts | while read -r h s i; do
        local ns; ns=$(ns_of "$h")
        ip netns add "$ns"
        ip -n "$ROUTER" link add "v$h" type veth peer name eth0 netns "$ns"
        ip -n "$ROUTER" link set "v$h" master "br$s"
        ip -n "$ROUTER" link set "v$h" up
        ip -n "$ns" link set lo up
        ip -n "$ns" addr add "10.0.$s.$i/24" dev eth0
        ip -n "$ns" link set eth0 up
        ip -n "$ns" route add default via "10.0.$s.254"
    done
    ip netns exec "$ROUTER" nft -f - <<'EOF'
table ip p2pns {
  chain postrouting {
    type nat hook postrouting priority srcnat; policy accept;
    ip saddr 10.0.2.0/24 ip daddr != 10.0.2.0/24 masquerade
  }
  chain forward {
    type filter hook forward priority filter; policy accept;
    ct state established,related accept
    ip daddr 10.0.2.0/24 ip saddr != 10.0.2.0/24 drop
  }
}
EOF
    log "up: $(hosts | wc -l) hosts in namespaces $PREFIX*, router $ROUTER"
    status
}

down() {
    check
    for ns in $(ip netns list | awk '{ print $1 }' | grep "^$PREFIX" || true); do
        local pids; pids=$(ip netns pids "$ns" || true)
        [ -n "$pids" ] && kill -9 $pids 2>/dev/null || true
        ip netns del "$ns"
    done
    rm -f "$STATE"/*/mpd.json "$STATE"/*/supernode.json
    log "down"
}

binaries() {
    if [ ! -x "$BIN/p2pmpirun" ] || [ ! -x "$BIN/mpiboot" ] || [ ! -x "$BIN/runSupernode" ]; then
        log "building p2pmpi's commands into $TARGET_DIR/release"
        (cd "$ROOT" && cargo build --release -q -p p2pmpi-cli --bins) || die "cargo build failed"
        BIN=$TARGET_DIR/release
    fi
}

# on HOST CMD…: CMD in HOST's namespace, with HOST's p2pmpi directory.
on() {
    local h=$1; shift
    known "$h"
    ip netns exec "$(ns_of "$h")" env -u P2PMPI_CONF_FILE P2PMPI_HOME="$STATE/$h" "$@"
}

grid() {
    check
    binaries
    ip netns list | grep -q "^$ROUTER\b" || die "not up (bench/netns.sh up first)"
    mkdir -p "$STATE"
    local secret; secret=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
    mkdir -p "$STATE/sn"
    printf 'SUPERNODE_PORT=9700\nEXTERNAL_IP=%s\nGRID_SECRET=%s\nPEER_TTL=5000\n' "$(ip_of sn)" "$secret" \
        >"$STATE/sn/P2P-MPI.conf"
    chmod 600 "$STATE/sn/P2P-MPI.conf"
    on sn "$BIN/runSupernode" >/dev/null
    for h in $(peers); do
        mkdir -p "$STATE/$h"
        cat >"$STATE/$h/P2P-MPI.conf" <<EOF
SUPERNODE=$(ip_of sn):9700
EXTERNAL_IP=$(ip_of "$h")
MAX_PROCESSES_PER_JOB=$P
GRID_SECRET=$secret
ALIVE_PERIOD=1000
CACHE_REFRESH=1000
PING_PERIOD=2000
RESERVE_TIMEOUT=1500
PEER_CACHE=$STATE/$h/peer-cache.json
EOF
        chmod 600 "$STATE/$h/P2P-MPI.conf"
        rm -f "$STATE/$h/peer-cache.json"
        on "$h" "$BIN/mpiboot" >/dev/null
    done
    # Until a1 (the usual submitter) sees every other peer of site a alive, at most 30 s.
    local want=$((A - 1)) seen=0 t=0
    while [ "$A" -gt 0 ]; do
        seen=$(on a1 "$BIN/mpihost" 2>/dev/null | awk '$1 ~ /^10\.0\.1\./ && $3 != "-" && $4 == "true"' | wc -l)
        [ "$seen" -ge "$want" ] && break
        [ "$t" -ge 300 ] && die "a1 sees $seen of the $want other peers of site a after 30 s"
        sleep 0.1; t=$((t + 1))
    done
    log "grid up: supernode $(ip_of sn):9700, peers $(peers | tr '\n' ' ')(P=$P); submit with: bench/netns.sh run a1 -n N PROGRAM"
}

status() {
    for h in $(hosts | awk '{ print $1 }'); do
        local ns link daemon=""
        ns=$(ns_of "$h")
        ip netns list | grep -q "^$ns\b" || { echo "$h: no namespace"; continue; }
        link=$(ip -n "$ROUTER" -br link show "v$h" 2>/dev/null | awk '{ print $2 }')
        for f in mpd.json supernode.json; do
            [ -f "$STATE/$h/$f" ] && daemon="$daemon ${f%.json} pid $(sed -n 's/.*"pid": *\([0-9]*\).*/\1/p' "$STATE/$h/$f")"
        done
        printf '%-4s %-10s link %-5s %s%s\n' "$h" "$(ip_of "$h")" "$link" "$ns" "$daemon"
    done
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case "$cmd" in
    up) up ;;
    down) down ;;
    grid) grid ;;
    status) status ;;
    run) [ $# -ge 1 ] || die "usage: run HOST ARGS…"; check; binaries; h=$1; shift; on "$h" "$BIN/p2pmpirun" "$@" ;;
    exec) [ $# -ge 2 ] || die "usage: exec HOST CMD…"; check; h=$1; shift; on "$h" "$@" ;;
    cut) [ $# -eq 1 ] || die "usage: cut HOST"; check; known "$1"; ip -n "$ROUTER" link set "v$1" down; log "$1 cut off" ;;
    heal) [ $# -eq 1 ] || die "usage: heal HOST"; check; known "$1"; ip -n "$ROUTER" link set "v$1" up; log "$1 back" ;;
    *) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
