//! How a process learns its place in the job.
//!
//! A process started by `p2pmpirun` finds in its environment its rank, the job size, the
//! address of its launcher's control port and the job's secret token. It binds its own data
//! port, registers with the launcher, and receives the communicator table (rank → address)
//! built once every process registered (the seeds' execution preamble, step 10). The control
//! connection stays open: it carries `Finalized` and `Abort`, and if the launcher goes away the
//! process stops instead of lingering as an orphan.
//!
//! Without those variables the program runs as a one-process world.

use crate::error::{Error, Result};
use p2pmpi_wire::control::{self, Control};
use parking_lot::Mutex;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Environment variables set by the launcher.
pub mod env {
    pub const RANK: &str = "P2PMPI_RANK";
    pub const SIZE: &str = "P2PMPI_SIZE";
    pub const CONTROL: &str = "P2PMPI_CONTROL";
    pub const TOKEN: &str = "P2PMPI_TOKEN";
    pub const BIND: &str = "P2PMPI_BIND";
    pub const LOCAL_PROCS: &str = "P2PMPI_LOCAL_PROCS";
    pub const SPIN_US: &str = "P2PMPI_SPIN_US";
    /// Range of data ports (`MIN_PORT-MAX_PORT` of the peer's configuration; `0-0`: any).
    pub const PORTS: &str = "P2PMPI_PORTS";
}

pub(crate) struct Boot {
    pub rank: i32,
    pub size: i32,
    pub token: u64,
    pub listener: Option<TcpListener>,
    pub addrs: Vec<SocketAddr>,
    pub local_procs: usize,
}

static CONTROL_CONN: Mutex<Option<TcpStream>> = Mutex::new(None);
static FINALIZING: AtomicBool = AtomicBool::new(false);

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|s| !s.is_empty())
}

fn parse<T: std::str::FromStr>(name: &str) -> Result<T> {
    let v = var(name).ok_or_else(|| Error::Bootstrap(format!("{name} is not set")))?;
    v.parse().map_err(|_| Error::Bootstrap(format!("{name}={v:?} is not valid")))
}

/// Reads the environment and, under a launcher, registers and receives the world.
pub(crate) fn boot() -> Result<Boot> {
    let Some(ctrl_addr) = var(env::CONTROL) else {
        return Ok(Boot { rank: 0, size: 1, token: 0, listener: None, addrs: Vec::new(), local_procs: 1 });
    };
    let rank: i32 = parse(env::RANK)?;
    let size: i32 = parse(env::SIZE)?;
    let token = u64::from_str_radix(&var(env::TOKEN).unwrap_or_default(), 16)
        .map_err(|_| Error::Bootstrap(format!("{} is not valid", env::TOKEN)))?;
    let local_procs = parse(env::LOCAL_PROCS).unwrap_or(size as usize);
    if size < 1 || rank < 0 || rank >= size {
        return Err(Error::Bootstrap(format!("rank {rank} of size {size} is not valid")));
    }
    let bind = var(env::BIND).unwrap_or_else(|| "127.0.0.1".into());
    let listener = bind_data_port(&bind, var(env::PORTS).as_deref())?;
    let data_addr = listener.local_addr()?;
    let mut ctrl = TcpStream::connect(&ctrl_addr)
        .map_err(|e| Error::Bootstrap(format!("cannot reach the launcher at {ctrl_addr}: {e}")))?;
    let _ = ctrl.set_nodelay(true);
    let reg = Control::Register { rank: rank as u32, data_addr: data_addr.to_string(), pid: std::process::id(), token };
    control::write_msg(&mut ctrl, &reg).map_err(|e| Error::Bootstrap(e.to_string()))?;
    ctrl.set_read_timeout(Some(Duration::from_secs(600)))?;
    let addrs = match control::read_msg(&mut ctrl) {
        Ok(Some(Control::World { addrs })) => addrs,
        Ok(Some(Control::Stop { reason })) => return Err(Error::Bootstrap(format!("job stopped: {reason}"))),
        Ok(other) => return Err(Error::Bootstrap(format!("unexpected answer from the launcher: {other:?}"))),
        Err(e) => return Err(Error::Bootstrap(format!("launcher: {e}"))),
    };
    if addrs.len() != size as usize {
        return Err(Error::Bootstrap(format!("world table has {} entries for {size} ranks", addrs.len())));
    }
    let addrs = addrs
        .iter()
        .map(|a| a.parse().map_err(|_| Error::Bootstrap(format!("bad address {a:?} in the world table"))))
        .collect::<Result<Vec<SocketAddr>>>()?;
    ctrl.set_read_timeout(None)?;
    let reader = ctrl.try_clone()?;
    *CONTROL_CONN.lock() = Some(ctrl);
    std::thread::Builder::new()
        .name("p2pmpi-control".into())
        .spawn(move || watch_launcher(reader, rank))
        .map_err(|e| Error::Bootstrap(format!("cannot start the control thread: {e}")))?;
    Ok(Boot { rank, size, token, listener: Some(listener), addrs, local_procs })
}

/// Binds the data port: in the configured range when there is one (`MIN_PORT`..`MAX_PORT`,
/// starting at a pid-dependent offset so that processes of one host spread over it), else any.
fn bind_data_port(bind: &str, range: Option<&str>) -> Result<TcpListener> {
    let parsed = range.and_then(|r| {
        let (a, b) = r.split_once('-')?;
        Some((a.trim().parse::<u16>().ok()?, b.trim().parse::<u16>().ok()?))
    });
    match parsed {
        Some((lo, hi)) if lo > 0 && lo <= hi => {
            let span = (hi - lo) as u32 + 1;
            let start = std::process::id() % span;
            for k in 0..span {
                let port = lo as u32 + (start + k) % span;
                if let Ok(l) = TcpListener::bind((bind, port as u16)) {
                    return Ok(l);
                }
            }
            Err(Error::Bootstrap(format!("no free data port on {bind} between MIN_PORT={lo} and MAX_PORT={hi}")))
        }
        _ => TcpListener::bind((bind, 0))
            .map_err(|e| Error::Bootstrap(format!("cannot open a data port on {bind}: {e}"))),
    }
}

/// Follows the control connection: a `Stop` or the launcher's disappearance ends the process.
fn watch_launcher(mut conn: TcpStream, rank: i32) {
    loop {
        match control::read_msg(&mut conn) {
            Ok(Some(Control::Stop { reason })) => {
                if !FINALIZING.load(Ordering::SeqCst) {
                    eprintln!("p2pmpi: rank {rank}: stopped by the launcher: {reason}");
                    std::process::exit(143);
                }
                return;
            }
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => {
                if !FINALIZING.load(Ordering::SeqCst) {
                    eprintln!("p2pmpi: rank {rank}: lost contact with the launcher; stopping");
                    std::process::exit(143);
                }
                return;
            }
        }
    }
}

fn send(msg: &Control) {
    if let Some(c) = CONTROL_CONN.lock().as_mut() {
        let _ = control::write_msg(c, msg);
    }
}

/// Tells the launcher this process finalized.
pub(crate) fn report_finalized(rank: i32) {
    FINALIZING.store(true, Ordering::SeqCst);
    send(&Control::Finalized { rank: rank as u32 });
}

/// Marks the start of finalization (launcher loss is then no longer an error).
pub(crate) fn finalizing() {
    FINALIZING.store(true, Ordering::SeqCst);
}

/// Tells the launcher this process aborts the job.
pub(crate) fn report_abort(rank: i32, code: i32, message: &str, lost: Option<i32>) {
    FINALIZING.store(true, Ordering::SeqCst);
    let lost = lost.filter(|r| *r >= 0).map(|r| r as u32);
    send(&Control::Abort { rank: rank.max(0) as u32, code, message: message.to_string(), lost });
}
