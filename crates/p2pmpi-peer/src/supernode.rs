//! The supernode: the grid's bootstrap service (SPEC §2, thesis §3.1.1).
//!
//! It keeps the *host list*: for every peer its address, service ports, capacity and the time
//! it was last heard from. Peers `Register` when they boot, `Unregister` when they halt, and
//! send `Alive` periodically; a peer not heard from for `PEER_TTL` is dropped. The list itself
//! is the pure [`p2pmpi_core::hosts::HostList`]; this module is its network driver.
//!
//! Several supernodes may serve one grid: peers register with every one they reach, so none
//! is a single point of failure.
//!
//! The supernode also hosts the grid's JEL registry (SPEC §14, [`p2pmpi_jel::registry`]): a
//! connection that opens with [`SnRequest::Jel`] is handed to it and from then on carries a
//! pool's messages. Alone (`SUPERNODE` names one supernode, or not this one), its pools live
//! as long as this process: when it dies, every member's connection ends and each is told
//! so once (`registry-lost`). When `SUPERNODE` names several and this one among them, they
//! replicate the registry with Raft ([`p2pmpi_jel::consensus`]): the leader serves the
//! members, the others answer them with the leader's address, and the pools survive the
//! death of any minority of the supernodes. Their Raft messages come on connections opened
//! with [`SnRequest::Raft`]; its log is kept in `jel-raft.log` and its view of the group
//! published in `jel-raft.json`, both in its p2pmpi directory.

use crate::home::{Home, SupernodeState};
use crate::members;
use crate::server;
use anyhow::{Context, Result};
use p2pmpi_core::hosts::HostList;
use p2pmpi_wire::grid::{HostEntry, PeerId, PeerInfo, SnRequest, SnResponse};
use p2pmpi_wire::identity::{require_role, Certificate, Revocation, Role};
use p2pmpi_wire::secure::{GridSecret, SecureConn, SecureError};
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap};
use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::{info, warn};

/// How a supernode runs.
#[derive(Debug, Clone)]
pub struct SupernodeOpts {
    pub bind: SocketAddr,
    pub secret: GridSecret,
    pub peer_ttl_ms: u64,
    pub home: Home,
    /// The grid's supernodes (`SUPERNODE`, resolved, in order): with several, this one
    /// among them (its address equal to the bound one), the JEL registry is replicated
    /// among them.
    pub supernodes: Vec<SocketAddr>,
}

/// This supernode's view of the replicated JEL registry (`jel-raft.json`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RaftState {
    /// Its Raft id (its place in `SUPERNODE`, from 1).
    pub me: u64,
    /// The leader's id, 0 if none is known.
    pub leader: u64,
    pub leader_addr: Option<SocketAddr>,
    pub term: u64,
    pub commit: u64,
}

struct Shared {
    start: Instant,
    hosts: Mutex<HostList<PeerId, PeerInfo>>,
    ttl_ms: u64,
    /// The JEL pools it serves.
    jel: p2pmpi_jel::registry::Registry,
    /// Member mode: the grid's revoked members and renewals.
    members: Option<Arc<MemberRegistry>>,
}

/// Most renewals waiting in the supernode's mailbox (each way).
const MAX_RENEWALS: usize = 4096;
/// How long `p2pmpi grid revoke` waits for its revocation to be committed.
const COMMIT_WAIT: Duration = Duration::from_secs(5);

/// The grid's members as a supernode sees them (member mode).
///
/// * **Revocations**: the owner's signed revocations ([`members::Revoked`], kept in
///   `revoked-registry` in its directory). With several supernodes they travel in the Raft
///   log of the JEL registry ([`p2pmpi_jel::consensus::Command::Grid`]): the leader proposes
///   a revocation, and every supernode applies it when it is committed. Every daemon polls
///   the list ([`SnRequest::Revoked`]).
/// * **Renewals**: a mailbox. A member's daemon leaves its certificate due for renewal
///   ([`SnRequest::Renew`]); the owner's daemon, the only one holding the owner key, takes
///   the requests ([`SnRequest::RenewalsAsked`]), signs the renewals and leaves them
///   ([`SnRequest::Renewed`]); the member fetches its own at its next request. The supernode
///   signs nothing: it takes only certificates the owner signed.
struct MemberRegistry {
    owner: p2pmpi_wire::identity::PublicKey,
    revoked: members::Revoked,
    /// The member name of each registered host (from its certificate).
    hosts: Mutex<HashMap<PeerId, String>>,
    asked: Mutex<BTreeMap<p2pmpi_wire::identity::PublicKey, Certificate>>,
    renewed: Mutex<BTreeMap<p2pmpi_wire::identity::PublicKey, Certificate>>,
}

impl MemberRegistry {
    fn apply(&self, r: Revocation) {
        let name = r.body.name.clone();
        let (new, bad) = self.revoked.merge(vec![r]);
        if let Some(e) = bad.first() {
            warn!("refused a revocation of {name}: {e}");
        }
        for n in new {
            info!("member {n} is revoked");
        }
    }

    /// `Renew` from the member `who` (its connection's certificate).
    fn renew(&self, who: Option<&Certificate>, cert: Certificate) -> SnResponse {
        if who.is_none_or(|w| w.body.key != cert.body.key) {
            return SnResponse::Error("a member asks for its own certificate's renewal only".into());
        }
        let now = members::unix_now_s();
        if let Some(new) = self.renewed.lock().get(&cert.body.key) {
            if members::acceptable_renewal(&cert, new, &self.owner, now) {
                self.asked.lock().remove(&cert.body.key);
                return SnResponse::Renewal(Some(new.clone()));
            }
        }
        let mut asked = self.asked.lock();
        asked.retain(|_, c| c.body.not_after_s > now);
        if asked.len() < MAX_RENEWALS || asked.contains_key(&cert.body.key) {
            asked.insert(cert.body.key, cert);
        }
        SnResponse::Renewal(None)
    }

    /// The supernode's own certificate: due for renewal, it asks its own mailbox, and takes
    /// the renewal once the owner's daemon signed it.
    fn renew_self(&self, secret: &GridSecret, home: &Home) {
        let Some(m) = secret.member_info() else { return };
        let own = m.cert();
        let now = members::unix_now_s();
        if members::renewal_request(&own, now).is_none() {
            return;
        }
        if let SnResponse::Renewal(Some(new)) = self.renew(Some(&own), own.clone()) {
            let path = members::Keys::of(home).member_cert();
            if let Err(e) = crate::home::write_private(&path, format!("{}\n", new.to_hex()).as_bytes()) {
                warn!("cannot write the renewed certificate: {e:#}");
            }
            info!("this supernode's certificate renewed: valid until {}", new.body.not_after_s);
            m.set_cert(new);
        }
    }

    /// The renewals asked for that the owner has not answered yet.
    fn still_asked(&self) -> Vec<Certificate> {
        let renewed = self.renewed.lock();
        let answered =
            |c: &Certificate| renewed.get(&c.body.key).is_some_and(|n| n.body.not_after_s > c.body.not_after_s);
        self.asked.lock().values().filter(|c| !answered(c)).cloned().collect()
    }

    /// `Renewed` from the owner's daemon: only certificates the owner signed, valid now.
    fn renewed(&self, certs: Vec<Certificate>) -> SnResponse {
        let now = members::unix_now_s();
        let revoked = self.revoked.revocations();
        let mut renewed = self.renewed.lock();
        renewed.retain(|_, c| c.body.not_after_s > now);
        for c in certs {
            if let Err(e) = c.check(&self.owner, now, &revoked) {
                return SnResponse::Error(format!("a renewed certificate was refused: {e}"));
            }
            if renewed.len() < MAX_RENEWALS || renewed.contains_key(&c.body.key) {
                info!("certificate of {} renewed by the owner until {}", c.body.name, c.body.not_after_s);
                renewed.insert(c.body.key, c);
            }
        }
        SnResponse::Ok
    }
}

impl Shared {
    fn now(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }
}

/// The address a supernode bound to `bound` serves at: `bound` itself, or when bound to every
/// address of the host (`0.0.0.0`), the entry of `SUPERNODE` that names this host with its port
/// (the address the peers use), else the loopback address.
pub fn served_address(bound: SocketAddr, supernodes: &[SocketAddr]) -> SocketAddr {
    if !bound.ip().is_unspecified() {
        return bound;
    }
    // An address is this host's when a socket can be bound to it.
    let mine = |a: &SocketAddr| std::net::UdpSocket::bind(SocketAddr::new(a.ip(), 0)).is_ok();
    supernodes
        .iter()
        .find(|a| a.port() == bound.port() && !a.ip().is_loopback() && mine(a))
        .or_else(|| supernodes.iter().find(|a| a.port() == bound.port() && mine(a)))
        .copied()
        .unwrap_or_else(|| SocketAddr::new(crate::home::connectable(bound.ip()), bound.port()))
}

/// Binds, publishes the state file, and serves until a `Stop` request arrives.
/// `ready` is called with the bound address once the service accepts connections.
pub fn run(opts: SupernodeOpts) -> Result<()> {
    let members = member_registry(&opts)?;
    let listener = TcpListener::bind(opts.bind).with_context(|| format!("cannot listen on {}", opts.bind))?;
    let bound = listener.local_addr()?;
    let addr = served_address(bound, &opts.supernodes);
    let jel = match opts.supernodes.iter().position(|a| *a == addr) {
        Some(me) if opts.supernodes.len() > 1 => {
            info!("the JEL registry is replicated among the supernodes {:?}", opts.supernodes);
            if opts.supernodes.len() % 2 == 0 {
                warn!(
                    "{} supernodes: a majority is {}, so they survive no more deaths than {} would",
                    opts.supernodes.len(),
                    opts.supernodes.len() / 2 + 1,
                    opts.supernodes.len() - 1
                );
            }
            let log = Some(opts.home.dir.join("jel-raft.log"));
            let m = members.clone();
            let hook = Box::new(move |record: Vec<u8>| match (&m, Revocation::from_bytes(&record)) {
                (Some(m), Ok(r)) => m.apply(r),
                (None, _) => warn!("a revocation in the registry's log, but this supernode has no member keys"),
                (_, Err(e)) => warn!("a grid record of the registry's log does not decode ({e}): skipped"),
            });
            p2pmpi_jel::registry::Registry::replicated(
                opts.supernodes.clone(),
                me,
                opts.secret.clone(),
                Some(addr.ip()),
                log,
                hook,
            )
            .map_err(|e| anyhow::anyhow!("cannot start the JEL registry's consensus: {e}"))?
        }
        None if opts.supernodes.len() > 1 => {
            warn!(
                "this supernode ({addr}) is not in SUPERNODE {:?}: it serves JEL pools of its own (EXTERNAL_IP and \
                 SUPERNODE_PORT must give its address in the list for it to join the others)",
                opts.supernodes
            );
            Default::default()
        }
        _ => Default::default(),
    };
    let shared = Arc::new(Shared {
        start: Instant::now(),
        hosts: Mutex::new(HostList::new()),
        ttl_ms: opts.peer_ttl_ms,
        jel,
        members,
    });
    let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
    let stop_tx = Mutex::new(stop_tx);
    {
        let shared = shared.clone();
        server::serve("supernode", listener, opts.secret.clone(), move |conn, peer| {
            if serve_conn(&shared, conn, peer, addr) {
                let _ = stop_tx.lock().send(());
            }
        });
    }
    crate::home::write_json(&opts.home.supernode_state(), &SupernodeState { pid: std::process::id(), addr })?;
    if bound == addr {
        info!("supernode listening on {addr}; peers expire after {} ms", opts.peer_ttl_ms);
    } else {
        info!("supernode listening on {bound}, reachable as {addr}; peers expire after {} ms", opts.peer_ttl_ms);
    }
    let raft_state = opts.home.dir.join("jel-raft.json");
    let mut published: Option<(RaftState, Instant)> = None;
    loop {
        if let Some(node) = shared.jel.raft() {
            let st = node.status();
            let now = RaftState {
                me: st.me,
                leader: st.leader,
                leader_addr: node.leader_addr(),
                term: st.term,
                commit: st.commit,
            };
            // At once when the leader changes; the commit index at most once a second.
            let stale = published.as_ref().is_none_or(|(p, at)| {
                (p.leader, p.term) != (now.leader, now.term)
                    || (p.commit != now.commit && at.elapsed() >= Duration::from_secs(1))
            });
            if stale {
                let _ = crate::home::write_json(&raft_state, &now);
                published = Some((now, Instant::now()));
            }
        }
        match stop_rx.recv_timeout(Duration::from_millis(100)) {
            Ok(()) => break,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                if let Some(m) = &shared.members {
                    m.renew_self(&opts.secret, &opts.home);
                }
                let now = shared.now();
                for gone in shared.hosts.lock().expire(now, shared.ttl_ms) {
                    info!("peer {gone} not seen for {} ms: dropped", shared.ttl_ms);
                    if let Some(m) = &shared.members {
                        m.hosts.lock().remove(&gone);
                    }
                }
            }
            Err(_) => break,
        }
    }
    let _ = std::fs::remove_file(opts.home.supernode_state());
    let _ = std::fs::remove_file(&raft_state);
    info!("supernode stopped");
    Ok(())
}

/// Member mode: the supernode's own certificate must have the supernode role; its list of
/// revoked members is read from its directory.
fn member_registry(opts: &SupernodeOpts) -> Result<Option<Arc<MemberRegistry>>> {
    let Some(m) = opts.secret.member_info() else { return Ok(None) };
    let own = m.cert();
    if let Err(e) = require_role(Some(&own), Role::Supernode) {
        anyhow::bail!("this machine may not serve as a supernode: {e} (its certificate's roles: {})", own.body.roles);
    }
    let path = opts.home.dir.join("revoked-registry");
    let revoked = members::Revoked::open(&opts.secret, path)?.context("member mode without a credential")?;
    Ok(Some(Arc::new(MemberRegistry {
        owner: m.owner,
        revoked,
        hosts: Mutex::new(HashMap::new()),
        asked: Mutex::new(BTreeMap::new()),
        renewed: Mutex::new(BTreeMap::new()),
    })))
}

impl Shared {
    /// `Revoke`: recorded (and with several supernodes, committed by a majority) before `Ok`.
    fn revoke(&self, r: Revocation) -> SnResponse {
        let Some(m) = &self.members else {
            return SnResponse::Error("this grid runs on GRID_SECRET: it has no members to revoke".into());
        };
        if let Err(e) = r.check(&m.owner) {
            warn!("refused a revocation of {}: {e}", r.body.name);
            return SnResponse::Error(e.to_string());
        }
        let Some(node) = self.jel.raft() else {
            m.apply(r);
            return SnResponse::Ok;
        };
        if !node.leads() {
            let leader = node.leader_addr().map_or_else(|| "being elected".into(), |a| a.to_string());
            return SnResponse::Error(format!("not the leader of the supernodes' registry (leader: {leader})"));
        }
        node.propose(&p2pmpi_jel::consensus::Command::Grid(r.to_bytes()));
        let deadline = Instant::now() + COMMIT_WAIT;
        while Instant::now() < deadline {
            if m.revoked.entries().contains(&r) {
                return SnResponse::Ok;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        SnResponse::Error("the revocation was not committed within 5 s (no majority of supernodes?)".into())
    }

    /// `Revoked`: the entries, and the registered hosts whose members they revoke.
    fn revoked(&self) -> SnResponse {
        let Some(m) = &self.members else { return SnResponse::Revoked { entries: vec![], hosts: vec![] } };
        let r = m.revoked.revocations();
        let hosts = m.hosts.lock().iter().filter(|(_, n)| r.names.contains(*n)).map(|(h, _)| h.clone()).collect();
        SnResponse::Revoked { entries: m.revoked.entries(), hosts }
    }

    /// `Register` of a member: it must have the host role (it lends its CPUs).
    fn may_register(&self, who: Option<&Certificate>, id: &PeerId) -> Result<(), String> {
        let (Some(m), Some(c)) = (&self.members, who) else { return Ok(()) };
        require_role(Some(c), Role::Host).map_err(|e| e.to_string())?;
        m.hosts.lock().insert(id.clone(), c.body.name.clone());
        Ok(())
    }
}

/// Serves one connection; returns true when a local `Stop` was received.
fn serve_conn(sh: &Shared, mut conn: SecureConn, peer: SocketAddr, me: SocketAddr) -> bool {
    loop {
        let req: SnRequest = match conn.recv() {
            Ok(Some(r)) => r,
            Ok(None) => return false,
            Err(e) => {
                server::log_end("supernode", peer, &e);
                return false;
            }
        };
        let now = sh.now();
        let (answer, stop) = match req {
            SnRequest::Register(info) => match sh.may_register(conn.peer_member(), &info.id) {
                Ok(()) => {
                    info!("peer {} ({}) registered from {peer}", info.id, info.name);
                    sh.hosts.lock().register(now, info.id.clone(), info);
                    (SnResponse::Ok, false)
                }
                Err(why) => {
                    warn!("refused the registration of {} from {peer}: {why}", info.id);
                    (SnResponse::Error(why), false)
                }
            },
            SnRequest::Unregister(id) => {
                if sh.hosts.lock().unregister(&id) {
                    info!("peer {id} unregistered");
                }
                if let Some(m) = &sh.members {
                    m.hosts.lock().remove(&id);
                }
                (SnResponse::Ok, false)
            }
            SnRequest::Alive(id) => {
                if sh.hosts.lock().alive(now, &id) {
                    (SnResponse::Ok, false)
                } else {
                    (SnResponse::UnknownPeer, false)
                }
            }
            SnRequest::List => {
                let list = sh.hosts.lock().list(now);
                (
                    SnResponse::Hosts(
                        list.into_iter().map(|(_, info, age)| HostEntry { info, last_seen_ms: age }).collect(),
                    ),
                    false,
                )
            }
            SnRequest::Jel(hello) => {
                // From now on this connection belongs to the pool (until it ends).
                sh.jel.serve_conn(conn, hello);
                return false;
            }
            SnRequest::JelSeeds { pool, addr } => (SnResponse::JelSeeds(sh.jel.seeds(&pool, addr)), false),
            SnRequest::Raft { from } => {
                // From now on this connection carries a peer supernode's Raft messages.
                if let Err(e) = require_role(conn.peer_member(), Role::Supernode) {
                    warn!("refused Raft messages from {peer}: {e}");
                    return false;
                }
                match sh.jel.raft() {
                    Some(node) => node.serve_peer(conn, from),
                    None => warn!("{peer} sent Raft messages, but this supernode's registry is not replicated"),
                }
                return false;
            }
            SnRequest::Revoke(r) => (sh.revoke(r), false),
            SnRequest::Revoked => (sh.revoked(), false),
            SnRequest::Renew(cert) => match &sh.members {
                Some(m) => (m.renew(conn.peer_member(), cert), false),
                None => (SnResponse::Error("this grid runs on GRID_SECRET".into()), false),
            },
            SnRequest::RenewalsAsked => {
                let asked = sh.members.as_ref().map(|m| m.still_asked()).unwrap_or_default();
                (SnResponse::Renewals(asked), false)
            }
            SnRequest::Renewed(certs) => match &sh.members {
                Some(m) => (m.renewed(certs), false),
                None => (SnResponse::Error("this grid runs on GRID_SECRET".into()), false),
            },
            SnRequest::Stop => {
                if server::is_local(peer.ip(), me.ip()) {
                    info!("stop requested from {peer}");
                    (SnResponse::Ok, true)
                } else {
                    warn!("refused a stop request from remote host {peer}");
                    (SnResponse::Error("stop is accepted from the supernode's own host only".into()), false)
                }
            }
        };
        if let Err(e) = conn.send(&answer) {
            server::log_end("supernode", peer, &e);
            return stop;
        }
        if stop {
            return true;
        }
    }
}

/// One request to a supernode, on a fresh connection.
pub fn call(
    local: Option<std::net::IpAddr>,
    addr: SocketAddr,
    secret: &GridSecret,
    req: &SnRequest,
    timeout: Duration,
) -> Result<SnResponse> {
    let mut c = SecureConn::connect_from(local, addr, secret, timeout)?;
    // Member mode: only a member with the supernode role serves as one.
    require_role(c.peer_member(), Role::Supernode)
        .map_err(|e| anyhow::anyhow!("{addr} may not serve as a supernode: {e}"))?;
    c.set_read_timeout(Some(timeout))?;
    c.set_max_record(64 << 20);
    match c.call(req) {
        Ok(a) => Ok(a),
        Err(SecureError::RefusedBy(why)) => {
            Err(anyhow::anyhow!(crate::members::refused_words(&format!("supernode {addr}"), &why)))
        }
        Err(e) => Err(e.into()),
    }
}

/// The revocations every supernode of `addrs` holds, asked all at once (one that does not
/// answer within `timeout` delays nobody more than that), with the hosts they name. Each
/// entry is still to be checked against the owner's key ([`members::Revoked`]).
pub fn revoked_from(
    local: Option<std::net::IpAddr>,
    addrs: &[SocketAddr],
    secret: &GridSecret,
    timeout: Duration,
) -> (Vec<Revocation>, Vec<PeerId>) {
    let (entries, hosts, _) = revoked_and_refusal(local, addrs, secret, timeout);
    (entries, hosts)
}

/// [`revoked_from`], and the words of a supernode that refused this machine's certificate and
/// said why (revoked, expired: see [`crate::members::refused_words`]), if one did.
pub fn revoked_and_refusal(
    local: Option<std::net::IpAddr>,
    addrs: &[SocketAddr],
    secret: &GridSecret,
    timeout: Duration,
) -> (Vec<Revocation>, Vec<PeerId>, Option<String>) {
    let answers: Vec<Result<SnResponse>> = std::thread::scope(|s| {
        let asks: Vec<_> =
            addrs.iter().map(|a| s.spawn(move || call(local, *a, secret, &SnRequest::Revoked, timeout))).collect();
        asks.into_iter().filter_map(|h| h.join().ok()).collect()
    });
    let (mut entries, mut hosts, mut refusal) = (Vec::new(), Vec::new(), None);
    for a in answers {
        match a {
            Ok(SnResponse::Revoked { entries: e, hosts: h }) => {
                entries.extend(e);
                hosts.extend(h);
            }
            Ok(_) => {}
            Err(e) => {
                let words = e.to_string();
                if words.contains(crate::members::REFUSES) {
                    refusal.get_or_insert(words);
                }
            }
        }
    }
    (entries, hosts, refusal)
}

#[cfg(test)]
mod tests {
    use super::*;
    use p2pmpi_wire::secure::HANDSHAKE_TIMEOUT;

    /// Member mode: a daemon uses as a supernode only a server whose certificate has the
    /// supernode role.
    #[test]
    fn a_server_without_the_supernode_role_is_not_used_as_one() {
        use p2pmpi_wire::identity::{KeyPair, Roles};
        let owner = KeyPair::from_seed(&[1; 32]);
        let now = members::unix_now_s();
        let cred = |seed: u8, name: &str, roles: &str| {
            let k = KeyPair::from_seed(&[seed; 32]);
            let c = owner.issue(name, k.public(), Roles::parse(roles).unwrap(), now, 600).unwrap();
            GridSecret::member(k, c, owner.public())
        };
        let client = cred(2, "peer", "host,submit");
        for (roles, ok) in [("host", false), ("supernode", true)] {
            let server = cred(3, "sn", roles);
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = l.local_addr().unwrap();
            let t = std::thread::spawn(move || {
                let (s, _) = l.accept().unwrap();
                if let Ok(mut c) = SecureConn::accept(s, &server, HANDSHAKE_TIMEOUT) {
                    if let Ok(Some(SnRequest::List)) = c.recv::<SnRequest>() {
                        let _ = c.send(&SnResponse::Hosts(vec![]));
                    }
                }
            });
            let r = call(None, addr, &client, &SnRequest::List, Duration::from_secs(5));
            match (ok, r) {
                (true, Ok(SnResponse::Hosts(h))) => assert!(h.is_empty()),
                (false, Err(e)) => assert!(format!("{e:#}").contains("has no supernode role"), "{e:#}"),
                (_, r) => panic!("roles {roles}: {r:?}"),
            }
            t.join().unwrap();
        }
    }

    /// A connection thread that panics while it holds the host list (a bug) does not take the
    /// supernode down: the list is not poisoned and the next connections are served.
    #[test]
    fn a_panicking_connection_does_not_poison_the_host_list() {
        let sh = Arc::new(Shared {
            start: Instant::now(),
            hosts: Mutex::new(HostList::new()),
            ttl_ms: 60_000,
            jel: Default::default(),
            members: None,
        });
        let held = sh.clone();
        let crashed = std::thread::spawn(move || {
            let _list = held.hosts.lock();
            panic!("a bug while the host list is held");
        });
        assert!(crashed.join().is_err());

        let secret = GridSecret::from_phrase("supernode test grid");
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let server = {
            let (sh, secret) = (sh.clone(), secret.clone());
            std::thread::spawn(move || {
                let (s, peer) = l.accept().unwrap();
                serve_conn(&sh, SecureConn::accept(s, &secret, HANDSHAKE_TIMEOUT).unwrap(), peer, addr)
            })
        };
        let t = Duration::from_secs(10);
        let mut c = SecureConn::connect(addr, &secret, t).unwrap();
        c.set_read_timeout(Some(t)).unwrap();
        let info = PeerInfo {
            id: PeerId { ip: "127.0.0.9".into(), mpd_port: 9897 },
            rs_port: 9900,
            ft_port: 9898,
            fd_port: 0,
            capacity: 1,
            name: "h".into(),
        };
        assert_eq!(c.call::<_, SnResponse>(&SnRequest::Register(info.clone())).unwrap(), SnResponse::Ok);
        match c.call::<_, SnResponse>(&SnRequest::List).unwrap() {
            SnResponse::Hosts(h) => assert_eq!(h.iter().map(|e| &e.info).collect::<Vec<_>>(), [&info]),
            other => panic!("unexpected answer {other:?}"),
        }
        drop(c);
        assert!(!server.join().unwrap(), "served until the client left");
    }
}
