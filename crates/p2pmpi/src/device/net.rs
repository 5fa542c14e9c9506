//! The transport's connection opening: connecting with retries, and the bounds on the
//! openings a process accepts (how many may wait, for how long). Moves bytes; knows no MPI
//! matching and nothing of the layers above the engine.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

/// Accepted connections that may be waiting to prove the job key at once: beyond, the oldest
/// of those waiting for more than [`PENDING_GRACE`] are dropped to make room (the ones just
/// accepted are not: at start-up a process accepts a connection from every higher slot at
/// once, before it reads any).
pub(crate) const MAX_PENDING: usize = 1024;

/// How long an accepted connection may wait to prove the job key before it can be dropped
/// to make room.
pub(crate) const PENDING_GRACE: Duration = Duration::from_secs(1);

/// Longest an accepted connection may take to prove the job key on a host with at most 8 of
/// the job's processes per core ([`load_factor`] times more beyond).
pub(crate) const HANDSHAKE_LIMIT: Duration = Duration::from_secs(10);

/// How many times longer than on a host with a few processes per core the job's openings may
/// take here: the job's processes on this host (`P2PMPI_LOCAL_PROCS`) per core, by 8, at
/// least 1. At start-up every pair of processes opens a connection and each process polls all
/// of its own, all on this host's cores: 256 processes on 2 cores take some 4 s to connect
/// (25 s when the data port queued 128 openings and dropped the others: see `bootstrap`).
pub(crate) fn load_factor() -> u32 {
    // The launcher's variable (`bootstrap::env::LOCAL_PROCS`, named here by its value: the
    // engine is below bootstrap).
    const LOCAL_PROCS_VAR: &str = "P2PMPI_LOCAL_PROCS";
    static F: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *F.get_or_init(|| {
        let procs = std::env::var(LOCAL_PROCS_VAR).ok().and_then(|v| v.parse::<usize>().ok());
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        (procs.unwrap_or(1) / cores / 8).clamp(1, 1000) as u32
    })
}

/// Universe ids (processes of a job and every process it spawned) accepted in an opening.
pub(crate) const MAX_UNIVERSE: i32 = 1 << 16;

/// Connects to `addr` from `local` (this process's own address, so that the peer, its
/// firewall and HOST_DENY see the host it really comes from — on loopback an unbound socket
/// would leave from 127.0.0.1), retrying until `total` has passed.
pub(crate) fn connect_with_retry(
    local: Option<IpAddr>,
    addr: SocketAddr,
    total: Duration,
) -> io::Result<std::net::TcpStream> {
    let deadline = Instant::now() + total;
    let mut pause = Duration::from_millis(5);
    let connect = || -> io::Result<std::net::TcpStream> {
        // 127.0.0.1 is where an unbound loopback socket leaves from anyway (local runs).
        let own =
            |ip: &IpAddr| !ip.is_unspecified() && *ip != IpAddr::from([127, 0, 0, 1]) && ip.is_ipv4() == addr.is_ipv4();
        let Some(ip) = local.filter(own) else {
            return std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(5));
        };
        let sock = socket2::Socket::new(socket2::Domain::for_address(addr), socket2::Type::STREAM, None)?;
        sock.bind(&SocketAddr::new(ip, 0).into())?;
        sock.connect_timeout(&addr.into(), Duration::from_secs(5))?;
        Ok(sock.into())
    };
    loop {
        match connect() {
            Ok(s) => {
                s.set_nodelay(true)?;
                super::conn::tune_loopback_link(socket2::SockRef::from(&s));
                s.set_nonblocking(true)?;
                return Ok(s);
            }
            Err(e) if Instant::now() >= deadline => return Err(e),
            Err(_) => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(200));
            }
        }
    }
}
