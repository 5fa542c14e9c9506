//! `p2pmpi grid create|invite|join|whoami`: member keys and certificates (issue 38, item 2).
//!
//! * `grid create NAME` makes this p2pmpi directory a grid's **owner**: a new owner key
//!   (`keys/owner.key`, never leaves this machine) and a certificate with every role for this
//!   peer's own key.
//! * `grid invite NAME [--roles host,submit]` (on the owner's machine) prints a **one-time
//!   code** valid 24 h and waits for the new machine to join (keep it running until then): it
//!   answers one join, then exits.
//! * `grid join CODE` (on the new machine, after `p2pmpi init` made its key) connects to the
//!   inviting machine, sends its public key and receives its certificate signed by the owner
//!   and the grid's owner key, which it installs (`keys/member.cert`, `keys/grid.pub`). From
//!   then on its daemons and commands run in member mode.
//! * `grid whoami`: this peer's key, certificate and grid.
//!
//! The code is `p2pmpi1/ADDR/TOKEN/EXPIRY`: where the inviter listens, a 128-bit random token
//! and the code's end (UNIX seconds). The join connection is the grid's Noise handshake keyed
//! by the token ([`GridSecret::one_time`]): only the holder of the code can join, and only the
//! inviter (who made the token) can answer, so the joiner can trust the owner key it receives.

use anyhow::{bail, Context, Result};
use clap::Subcommand;
use p2pmpi_peer::home::Home;
use p2pmpi_peer::members::{unix_now_s, Keys};
use p2pmpi_wire::identity::{from_hex, to_hex, Certificate, PublicKey, Roles};
use p2pmpi_wire::secure::{GridSecret, SecureConn};
use serde::{Deserialize, Serialize};
use std::net::{SocketAddr, TcpListener};
use std::time::{Duration, Instant};

/// How long an invitation's code is valid.
pub const INVITE_VALIDITY: Duration = Duration::from_secs(24 * 3600);
const CODE_PREFIX: &str = "p2pmpi1";

#[derive(Subcommand, Debug, Clone)]
pub enum KeysCmd {
    /// Make this p2pmpi directory the owner of a new grid: an owner key that signs the
    /// members' certificates (it never leaves this machine), and this peer's certificate.
    Create {
        /// This peer's member name.
        name: String,
    },
    /// Invite a machine (owner only): print a one-time code valid 24 h and wait until the
    /// machine has joined with `p2pmpi grid join CODE`.
    Invite {
        /// The new member's name.
        name: String,
        /// Its roles: host (lends CPUs), submit (runs jobs), supernode.
        #[arg(long, default_value = "host,submit")]
        roles: String,
        /// Where to wait for the join (default: this peer's address, any free port).
        #[arg(long, value_name = "IP:PORT")]
        listen: Option<SocketAddr>,
        /// Give up after this many seconds (default: the code's 24 h).
        #[arg(long, value_name = "SECONDS")]
        wait: Option<u64>,
    },
    /// Join a grid with an invitation's code: receive this peer's signed certificate.
    Join { code: String },
    /// Revoke a member (owner only): the supernodes record the revocation, signed by the
    /// owner key, and within 5 s every daemon refuses the member's connections and stops
    /// its jobs. Final: a machine comes back under another name.
    Revoke {
        /// The member's name.
        name: String,
        /// Its public key too (hex, as `grid whoami` on it shows), if known.
        #[arg(long, value_name = "HEX")]
        key: Option<String>,
    },
    /// This peer's member key, certificate and grid.
    Whoami,
}

/// An invitation's code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InviteCode {
    pub addr: SocketAddr,
    pub token: [u8; 16],
    pub expires_s: u64,
}

impl InviteCode {
    pub fn to_text(&self) -> String {
        format!("{CODE_PREFIX}/{}/{}/{}", self.addr, to_hex(&self.token), self.expires_s)
    }

    pub fn parse(s: &str) -> Result<Self> {
        let bad = || anyhow::anyhow!("{s:?} is not an invitation code (p2pmpi1/ADDR/TOKEN/EXPIRY)");
        let parts: Vec<&str> = s.trim().split('/').collect();
        let [CODE_PREFIX, addr, token, expires] = parts[..] else { return Err(bad()) };
        let token: [u8; 16] = from_hex(token).ok().and_then(|t| t.try_into().ok()).ok_or_else(bad)?;
        Ok(InviteCode { addr: addr.parse().map_err(|_| bad())?, token, expires_s: expires.parse().map_err(|_| bad())? })
    }
}

/// The joiner's request.
#[derive(Debug, Serialize, Deserialize)]
struct JoinRequest {
    key: PublicKey,
}

/// The inviter's answer.
#[derive(Debug, Serialize, Deserialize)]
enum JoinAnswer {
    Welcome { cert: Certificate, grid: PublicKey, supernodes: Vec<String> },
    Refused(String),
}

pub fn run(cmd: KeysCmd) -> Result<()> {
    let home = Home::user();
    let keys = Keys::of(&home);
    match cmd {
        KeysCmd::Create { name } => {
            let (grid, cert) = keys.create_grid(&name, unix_now_s())?;
            println!("created the grid {} in {}", grid.fingerprint(), keys.dir.display());
            println!("this peer is member {:?} with roles {}", cert.body.name, cert.body.roles);
            println!("its owner key ({}) signs members: keep it on this machine only.", keys.owner_key().display());
            println!("Invite a machine with `p2pmpi grid invite NAME`.");
            Ok(())
        }
        KeysCmd::Invite { name, roles, listen, wait } => {
            let roles = Roles::parse(&roles)?;
            let wait = wait.map_or(INVITE_VALIDITY, Duration::from_secs).min(INVITE_VALIDITY);
            invite(&home, &name, roles, listen, wait)
        }
        KeysCmd::Join { code } => join(&keys, &InviteCode::parse(&code)?),
        KeysCmd::Revoke { name, key } => revoke(&home, &name, key.as_deref()),
        KeysCmd::Whoami => whoami(&keys),
    }
}

/// Where to wait for the join: `--listen`, else this peer's MPD address, else the address its
/// MPD would take (EXTERNAL_IP, or the one that routes to the first supernode).
fn listen_addr(home: &Home, listen: Option<SocketAddr>) -> Result<SocketAddr> {
    if let Some(a) = listen {
        return Ok(a);
    }
    if let Some(st) = p2pmpi_peer::mpd::running(home) {
        return Ok(SocketAddr::new(st.ip, 0));
    }
    let cfg = crate::grid_run::load_config("p2pmpi grid invite")?;
    let ip = p2pmpi_peer::mpd::advertised_ip(&cfg, &crate::commands::supernode_addrs(&cfg));
    match ip.is_loopback() {
        false => Ok(SocketAddr::new(ip, 0)),
        true => bail!(
            "no peer daemon runs here, EXTERNAL_IP is not set and no SUPERNODE is reached through another \
             address than loopback: say where to wait with --listen IP:PORT"
        ),
    }
}

fn invite(home: &Home, name: &str, roles: Roles, listen: Option<SocketAddr>, wait: Duration) -> Result<()> {
    let keys = Keys::of(home);
    p2pmpi_wire::identity::valid_name(name)?;
    keys.owner_keypair()?;
    let grid = keys.grid()?.context("this directory has no grid.pub")?;
    let mut token = [0u8; 16];
    getrandom::fill(&mut token).map_err(|e| anyhow::anyhow!("no randomness from the operating system: {e}"))?;
    let l = TcpListener::bind(listen_addr(home, listen)?).context("cannot listen for the join")?;
    let code = InviteCode { addr: l.local_addr()?, token, expires_s: unix_now_s() + wait.as_secs() };
    println!(
        "Invitation for {name} (roles {roles}), valid until it is used or for {} s. On the new machine:",
        wait.as_secs()
    );
    println!("  p2pmpi init && p2pmpi grid join {}", code.to_text());
    println!("Waiting for it to join (keep this running) ...");
    use std::io::Write;
    let _ = std::io::stdout().flush();
    let supernodes = crate::grid_run::load_config("p2pmpi grid invite").map(|c| c.supernodes).unwrap_or_default();
    let secret = GridSecret::one_time(&token);
    let deadline = Instant::now() + wait;
    l.set_nonblocking(true)?;
    while Instant::now() < deadline {
        let stream = match l.accept() {
            Ok((s, _)) => s,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
            Err(e) => return Err(e).context("accepting the join"),
        };
        stream.set_nonblocking(false)?;
        let peer = stream.peer_addr().ok();
        match answer_join(&keys, stream, &secret, name, roles, grid, &supernodes) {
            Ok(cert) => {
                println!("{name} joined from {} with key {}.", opt_addr(peer), cert.body.key.fingerprint());
                return Ok(());
            }
            Err(e) => eprintln!("p2pmpi grid invite: a join attempt from {} failed: {e:#}", opt_addr(peer)),
        }
    }
    bail!("nobody joined within {} s; the code is void", wait.as_secs())
}

fn opt_addr(a: Option<SocketAddr>) -> String {
    a.map_or_else(|| "?".into(), |a| a.to_string())
}

/// One join: the handshake proves the token, the request gives the key, the answer the
/// certificate.
fn answer_join(
    keys: &Keys,
    stream: std::net::TcpStream,
    secret: &GridSecret,
    name: &str,
    roles: Roles,
    grid: PublicKey,
    supernodes: &[String],
) -> Result<Certificate> {
    let mut c = SecureConn::accept_proven(stream, secret, Duration::from_secs(5))?;
    c.set_read_timeout(Some(Duration::from_secs(5)))?;
    let req: JoinRequest = c.recv()?.context("closed before its request")?;
    let cert = keys.issue(name, req.key, roles, unix_now_s())?;
    c.send(&JoinAnswer::Welcome { cert: cert.clone(), grid, supernodes: supernodes.to_vec() })?;
    // The joiner closes once it installed the certificate.
    let _ = c.recv::<u8>();
    Ok(cert)
}

fn join(keys: &Keys, code: &InviteCode) -> Result<()> {
    if unix_now_s() >= code.expires_s {
        bail!("this invitation expired: ask for a new one (`p2pmpi grid invite NAME` on the grid owner's machine)");
    }
    let me = keys.member_keypair().context("no member key here: run `p2pmpi init` first")?;
    let secret = GridSecret::one_time(&code.token);
    let mut c = SecureConn::connect(code.addr, &secret, Duration::from_secs(10)).with_context(|| {
        format!("cannot join through {} (is `p2pmpi grid invite` still running there? a code is good once)", code.addr)
    })?;
    c.set_read_timeout(Some(Duration::from_secs(10)))?;
    let answer: JoinAnswer = c.call(&JoinRequest { key: me.public() })?;
    let (cert, grid, supernodes) = match answer {
        JoinAnswer::Welcome { cert, grid, supernodes } => (cert, grid, supernodes),
        JoinAnswer::Refused(why) => bail!("the inviter refused: {why}"),
    };
    keys.install(&cert, grid)?;
    println!(
        "joined the grid {} as {:?} with roles {}, certificate valid {} days",
        grid.fingerprint(),
        cert.body.name,
        cert.body.roles,
        cert.body.not_after_s.saturating_sub(unix_now_s()) / 86400
    );
    if !supernodes.is_empty() {
        println!("the grid's supernodes: SUPERNODE={} (in P2P-MPI.conf)", supernodes.join(","));
    }
    Ok(())
}

/// `grid revoke`: the owner signs the revocation and gives it to the supernodes; done when
/// one recorded it (with several, the leader of their replicated registry, once a majority
/// has it).
fn revoke(home: &Home, name: &str, key: Option<&str>) -> Result<()> {
    let keys = Keys::of(home);
    let owner = keys.owner_keypair()?;
    let key = match key {
        Some(k) => Some(PublicKey(
            from_hex(k).ok().and_then(|b| b.try_into().ok()).context("--key is not a public key (64 hex digits)")?,
        )),
        None => None,
    };
    let r = owner.revoke(name, key, unix_now_s())?;
    let cfg = crate::grid_run::load_config("p2pmpi grid revoke")?;
    let secret = crate::grid_run::secret_of(&cfg)?;
    if secret.member_info().is_none() {
        bail!("this directory has no member certificate: the grid runs on GRID_SECRET, which names nobody");
    }
    // Kept here too: this machine's daemons and commands refuse the member at once.
    if let Some(store) = p2pmpi_peer::members::Revoked::open(&secret, keys.revoked())? {
        store.merge(vec![r.clone()]);
    }
    // Several supernodes: the leader of their replicated registry records it; while one is
    // elected, every one may answer "not the leader": ask again, for up to REVOKE_WAIT.
    let deadline = Instant::now() + REVOKE_WAIT;
    let (recorded, why) = loop {
        let (recorded, why) = ask_to_revoke(&cfg.supernodes, &secret, &r);
        if recorded.is_some() || Instant::now() >= deadline {
            break (recorded, why);
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    match recorded {
        Some(sn) => {
            println!("member {name:?} revoked (recorded by supernode {sn}).");
            println!("Every daemon of the grid refuses its connections and stops its jobs within 5 s.");
            Ok(())
        }
        None => bail!("no supernode recorded the revocation: {}", why.join("; ")),
    }
}

/// How long `grid revoke` keeps asking while the supernodes elect a leader.
const REVOKE_WAIT: Duration = Duration::from_secs(15);

/// One round of `Revoke` to the supernodes, in turn: the one that recorded it, or why none did.
fn ask_to_revoke(
    supernodes: &[String],
    secret: &GridSecret,
    r: &p2pmpi_wire::identity::Revocation,
) -> (Option<String>, Vec<String>) {
    let mut why = Vec::new();
    for sn in supernodes {
        let Some(addr) = std::net::ToSocketAddrs::to_socket_addrs(sn.as_str()).ok().and_then(|mut a| a.next()) else {
            why.push(format!("{sn}: does not resolve"));
            continue;
        };
        let req = p2pmpi_wire::grid::SnRequest::Revoke(r.clone());
        match p2pmpi_peer::supernode::call(None, addr, secret, &req, Duration::from_secs(8)) {
            Ok(p2pmpi_wire::grid::SnResponse::Ok) => return (Some(sn.clone()), why),
            Ok(other) => why.push(format!("{sn}: {other:?}")),
            Err(e) => why.push(format!("{sn}: {e:#}")),
        }
    }
    (None, why)
}

fn whoami(keys: &Keys) -> Result<()> {
    let me = keys.member_keypair().context("no member key here: run `p2pmpi init` first")?;
    println!(
        "member key {} (public key {}: what `grid revoke --key` takes)",
        me.public().fingerprint(),
        to_hex(&me.public().0)
    );
    match (keys.certificate()?, keys.grid()?) {
        (Some(c), Some(g)) => {
            let now = unix_now_s();
            let state = match c.check(&g, now, &Default::default()) {
                Ok(()) => format!("valid {} more days", c.body.not_after_s.saturating_sub(now) / 86400),
                Err(e) => e.to_string(),
            };
            println!("member {:?} of the grid {}, roles {}: {state}", c.body.name, g.fingerprint(), c.body.roles);
            if keys.owner_key().exists() {
                println!("this machine holds the grid's owner key");
            }
        }
        _ => println!("no certificate: not a member of a grid (transition mode: GRID_SECRET)"),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_garbage_is_refused() {
        let c = InviteCode { addr: "127.0.0.2:4000".parse().unwrap(), token: [0xab; 16], expires_s: 1_800_000_000 };
        assert_eq!(InviteCode::parse(&c.to_text()).unwrap(), c);
        let v6 = InviteCode { addr: "[::1]:9".parse().unwrap(), ..c.clone() };
        assert_eq!(InviteCode::parse(&v6.to_text()).unwrap(), v6);
        for bad in [
            "",
            "p2pmpi1/x/y/z",
            "p2pmpi2/127.0.0.1:1/abababababababababababababababab/1",
            "p2pmpi1/127.0.0.1:1/abab/1",
        ] {
            assert!(InviteCode::parse(bad).is_err(), "{bad}");
        }
    }
}
