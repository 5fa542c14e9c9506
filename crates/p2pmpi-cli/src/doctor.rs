//! `p2pmpi doctor`: checks what this machine needs to take part in a grid, and says what to
//! do about each problem found.
//!
//! In order: the configuration it would use (and which file), the grid secret, every
//! supernode of `SUPERNODE` (reached with the secret, its round trip, whether it lists this
//! peer), this host's peer daemon (its state, whether it answers, its ports reached from
//! another address of this host), `/dev/shm` (the shared-memory path between ranks of one
//! host) and Landlock (its ABI, from the kernel). Nothing is changed. Exit status 0 when no
//! problem was found, 1 otherwise.

use crate::grid_run::secret_of;
use p2pmpi_peer::config::{p2pmpi_dir, Config, CONF_FILE_NAME};
use p2pmpi_peer::home::{self, Home, MpdState};
use p2pmpi_peer::{mpd, os, supernode};
use p2pmpi_wire::grid::{MpdRequest, MpdResponse, SnRequest, SnResponse};
use p2pmpi_wire::secure::GridSecret;
use std::net::{IpAddr, SocketAddr, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

/// How long a supernode or the peer daemon has to answer.
const WITHIN: Duration = Duration::from_secs(3);

/// One finding: what was checked, what was found, and for a problem what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub what: &'static str,
    pub found: String,
    /// `None`: fine. `Some(fix)`: a problem, and what to do about it.
    pub fix: Option<String>,
}

fn ok(what: &'static str, found: impl Into<String>) -> Finding {
    Finding { what, found: found.into(), fix: None }
}

fn problem(what: &'static str, found: impl Into<String>, fix: impl Into<String>) -> Finding {
    Finding { what, found: found.into(), fix: Some(fix.into()) }
}

/// The findings as the command prints them: one line each, a problem's fix indented below.
pub fn render(findings: &[Finding]) -> String {
    let mut out = String::new();
    for f in findings {
        let mark = if f.fix.is_some() { "PROBLEM" } else { "ok" };
        out.push_str(&format!("{mark:<8}{:<14}{}\n", f.what, f.found));
        if let Some(fix) = &f.fix {
            out.push_str(&format!("{:<22}-> {fix}\n", ""));
        }
    }
    let problems = findings.iter().filter(|f| f.fix.is_some()).count();
    if problems == 0 {
        out.push_str("\nNo problem found.\n");
    } else {
        out.push_str(&format!("\n{problems} problem(s) found; what to do is under each.\n"));
    }
    out
}

/// Runs every check and prints the findings. 0 when no problem was found, else 1.
pub fn run() -> i32 {
    let findings = check_all();
    print!("{}", render(&findings));
    i32::from(findings.iter().any(|f| f.fix.is_some()))
}

/// Every check, in order.
pub fn check_all() -> Vec<Finding> {
    let mut out = Vec::new();
    let cfg = configuration(&mut out);
    let secret = cfg.as_ref().and_then(|c| secret(c, &mut out));
    let home = Home::user();
    let mpd_state = mpd::running(&home);
    match (&cfg, &secret) {
        (Some(cfg), Some(secret)) => {
            out.extend(supernodes(cfg, secret, mpd_state.as_ref()));
            out.extend(peer_daemon(&home, mpd_state.as_ref(), secret));
        }
        _ => out.push(problem(
            "supernode",
            "not checked (no usable configuration and secret)",
            "fix the configuration first, then run p2pmpi doctor again",
        )),
    }
    out.push(dev_shm());
    out.push(landlock());
    out
}

/// Which configuration file is read, and whether it parses.
fn configuration(out: &mut Vec<Finding>) -> Option<Config> {
    let named = std::env::var_os("P2PMPI_CONF_FILE").filter(|v| !v.is_empty());
    let default = p2pmpi_dir().join(CONF_FILE_NAME);
    match Config::load() {
        Ok((cfg, warnings)) => {
            match (&cfg.source, &named) {
                (Some(f), Some(_)) => {
                    out.push(ok("configuration", format!("{} (named by P2PMPI_CONF_FILE)", f.display())))
                }
                (Some(f), None) => out.push(ok("configuration", f.display().to_string())),
                (None, _) => out.push(problem(
                    "configuration",
                    format!("none: {} does not exist (P2PMPI_HOME, else ~/.p2pmpi)", default.display()),
                    "create it with `p2pmpi init` (`--supernode HOST:PORT` to join a grid of several machines), \
                     or copy the grid's P2P-MPI.conf there",
                )),
            }
            for w in warnings {
                out.push(problem("configuration", w.to_string(), "correct or remove that line"));
            }
            Some(cfg)
        }
        Err(e) => {
            out.push(problem("configuration", e.to_string(), "correct that line (p2pmpi init writes every key)"));
            None
        }
    }
}

/// The grid secret.
fn secret(cfg: &Config, out: &mut Vec<Finding>) -> Option<GridSecret> {
    match secret_of(cfg) {
        Ok(s) => {
            let len = cfg.grid_secret.as_deref().map_or(0, str::len);
            if len < 16 {
                out.push(problem(
                    "secret",
                    format!("GRID_SECRET is set but short ({len} characters)"),
                    "use a long random secret (p2pmpi init writes 64 hex digits) and copy it to every machine",
                ));
            } else {
                out.push(ok("secret", format!("GRID_SECRET is set ({len} characters)")));
            }
            Some(s)
        }
        Err(e) => {
            let fix = if cfg.source.is_some() {
                "add the grid's GRID_SECRET line (copied from the supernode's machine), or `p2pmpi init --force`"
            } else {
                "create a configuration with `p2pmpi init`"
            };
            out.push(problem("secret", format!("{e:#}").split(". ").next().unwrap_or_default().to_string(), fix));
            None
        }
    }
}

/// Every configured supernode: reached with the secret, its round trip, whether it lists
/// this host's peer daemon.
fn supernodes(cfg: &Config, secret: &GridSecret, me: Option<&MpdState>) -> Vec<Finding> {
    if cfg.supernodes.is_empty() {
        return vec![problem("supernode", "none configured", "set SUPERNODE=HOST:PORT in the configuration")];
    }
    let mut out = Vec::new();
    for name in &cfg.supernodes {
        let Some(addr) = name.to_socket_addrs().ok().and_then(|mut a| a.next()) else {
            out.push(problem("supernode", format!("{name}: the name does not resolve"), "correct SUPERNODE"));
            continue;
        };
        let t = Instant::now();
        match supernode::call(None, addr, secret, &SnRequest::List, WITHIN) {
            Ok(SnResponse::Hosts(hosts)) => {
                let rtt = t.elapsed().as_secs_f64() * 1000.0;
                let listed = me.is_some_and(|st| {
                    hosts.iter().any(|h| h.info.id.mpd_port == st.mpd_port && h.info.id.ip == st.ip.to_string())
                });
                let found =
                    format!("{name}: answers in {rtt:.1} ms (connection and handshake), knows {} peer(s)", hosts.len());
                match me {
                    Some(_) if !listed => out.push(problem(
                        "supernode",
                        format!("{found}, not this one"),
                        "this peer has not registered (yet): see its log, and that the supernode can reach its MPD \
                         port (firewall, EXTERNAL_IP behind NAT)",
                    )),
                    Some(_) => out.push(ok("supernode", format!("{found}, this one among them"))),
                    None => out.push(ok("supernode", found)),
                }
            }
            Ok(other) => {
                out.push(problem("supernode", format!("{name}: unexpected answer {other:?}"), "check SUPERNODE"))
            }
            Err(e) => out.push(problem("supernode", format!("{name}: {}", crate::error_text(&e)), supernode_fix(&e))),
        }
    }
    out
}

/// What to do when a supernode cannot be reached.
fn supernode_fix(e: &anyhow::Error) -> &'static str {
    let text = format!("{e:#}");
    if text.contains("handshake") {
        "it does not share this GRID_SECRET: copy the grid's P2P-MPI.conf (or its GRID_SECRET line) here"
    } else if text.contains("refused") {
        "nothing listens there: start it (runSupernode on that machine), or correct SUPERNODE"
    } else {
        "check the address, and that TCP to that port is open (firewall)"
    }
}

/// This host's peer daemon: running, answering, its ports reachable from another address.
fn peer_daemon(home: &Home, st: Option<&MpdState>, secret: &GridSecret) -> Vec<Finding> {
    let Some(st) = st else {
        return vec![problem(
            "peer daemon",
            format!("not running (p2pmpi directory {})", home.dir.display()),
            "start it with mpiboot to lend this machine's CPUs (p2pmpirun without one runs every process here)",
        )];
    };
    let mut out = Vec::new();
    let t = Instant::now();
    match mpd::call(Some(st.ip), st.mpd_addr(), secret, &MpdRequest::Ping) {
        Ok(MpdResponse::Pong) => out.push(ok(
            "peer daemon",
            format!(
                "running (pid {}) at {}, answers in {:.1} ms; log {}",
                st.pid,
                st.mpd_addr(),
                t.elapsed().as_secs_f64() * 1000.0,
                home.mpd_log().display()
            ),
        )),
        Ok(other) => {
            out.push(problem("peer daemon", format!("answered {other:?}"), "restart it: mpihalt, then mpiboot"))
        }
        Err(e) => out.push(problem(
            "peer daemon",
            format!("pid {} does not answer at {}: {}", st.pid, st.mpd_addr(), crate::error_text(&e)),
            format!("see its log {}; restart it: mpihalt, then mpiboot", home.mpd_log().display()),
        )),
    }
    let from = other_address(home::connectable(st.ip));
    for (service, port) in [("MPD", st.mpd_port), ("FT", st.ft_port), ("RS", st.rs_port)] {
        let to = SocketAddr::new(home::connectable(st.ip), port);
        let from_text = from.map_or("this host".to_string(), |a| a.to_string());
        match connect_from(from, to) {
            Ok(()) => out.push(ok("ports", format!("{service} port {to} reached from {from_text}"))),
            Err(e) => out.push(problem(
                "ports",
                format!("{service} port {to} not reached from {from_text}: {e}"),
                "the daemon binds EXTERNAL_IP: check that address is this host's, and MIN_PORT..MAX_PORT",
            )),
        }
    }
    out
}

/// An address of this host other than `ip` to connect from (loopback's 127.0.0.1 unless `ip`
/// is it), so that a service bound to one address only is seen as the others see it.
fn other_address(ip: IpAddr) -> Option<IpAddr> {
    let lo = IpAddr::from([127, 0, 0, 1]);
    (ip != lo && ip.is_ipv4()).then_some(lo)
}

fn connect_from(from: Option<IpAddr>, to: SocketAddr) -> std::io::Result<()> {
    match from {
        // A socket bound to `from` first: std has no connect-from, the secure channel does.
        Some(ip) => {
            let secretless = GridSecret::from_phrase("p2pmpi doctor: a TCP connection only");
            match p2pmpi_wire::secure::SecureConn::connect_from(Some(ip), to, &secretless, Duration::from_millis(500)) {
                Ok(_) => Ok(()),
                // The TCP connection was made; the handshake with a wrong secret fails after it.
                Err(p2pmpi_wire::secure::SecureError::Io(e)) => Err(e),
                Err(p2pmpi_wire::secure::SecureError::TimedOut) => {
                    Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "timed out"))
                }
                Err(_) => Ok(()),
            }
        }
        None => TcpStream::connect_timeout(&to, Duration::from_secs(1)).map(|_| ()),
    }
}

/// `/dev/shm`: the shared-memory segments between ranks of one host live there.
fn dev_shm() -> Finding {
    let probe = std::path::Path::new("/dev/shm").join(format!("p2pmpi-doctor-{}", std::process::id()));
    match std::fs::write(&probe, b"p2pmpi") {
        Ok(()) => {
            let _ = std::fs::remove_file(&probe);
            ok("/dev/shm", "writable: ranks on one host exchange through shared memory")
        }
        Err(e) => problem(
            "/dev/shm",
            format!("cannot create a file there: {e}"),
            "ranks on one host then use TCP (slower); mount a tmpfs on /dev/shm, or set P2PMPI_SHM=0 to stop trying",
        ),
    }
}

/// Landlock: whether the kernel offers it, and its ABI.
fn landlock() -> Finding {
    let lsm = std::fs::read_to_string("/sys/kernel/security/lsm").ok();
    let listed = lsm.as_deref().map(|l| l.split(',').any(|m| m.trim() == "landlock"));
    match os::landlock_abi() {
        Ok(abi) => ok("landlock", format!("ABI {abi}")),
        Err(e) => {
            let lsm_text = match listed {
                Some(true) => "listed in /sys/kernel/security/lsm",
                Some(false) => "not in /sys/kernel/security/lsm",
                None => "/sys/kernel/security/lsm unreadable",
            };
            // Jobs do not need it: a note, not a problem.
            ok(
                "landlock",
                format!(
                    "not available: {e} ({lsm_text}); jobs do not need it (a kernel of 5.13 or later with landlock \
                     in its lsm= list offers it)"
                ),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn problems_are_marked_with_what_to_do_and_counted() {
        let text = render(&[ok("secret", "set"), problem("supernode", "a:1: refused", "start it")]);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("ok      secret"), "{text}");
        assert!(lines[1].starts_with("PROBLEM supernode") && lines[2].trim_start() == "-> start it", "{text}");
        assert!(text.ends_with("1 problem(s) found; what to do is under each.\n"), "{text}");
        assert!(render(&[ok("x", "y")]).ends_with("No problem found.\n"));
    }

    #[test]
    fn a_connection_from_another_address_is_one_from_loopback() {
        assert_eq!(other_address(IpAddr::from([127, 0, 0, 2])), Some(IpAddr::from([127, 0, 0, 1])));
        assert_eq!(other_address(IpAddr::from([127, 0, 0, 1])), None);
    }
}
