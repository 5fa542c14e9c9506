//! The launcher's watch on revoked hosts (member mode; issue 38): while a grid job runs, a
//! thread asks the supernodes every [`POLL`] for the grid's revocations (the same poll as
//! every daemon's, see `p2pmpi_peer::mpd`), takes those the owner signed, and when the
//! member of a host running some of the job's processes is revoked, tells the supervisor
//! ([`Event::HostRevoked`]): those processes count as failed (their replicas take over).
//! A host is known by the certificate its MPD presented when it took the launch.

use crate::supervise::Event;
use p2pmpi_peer::config::Config;
use p2pmpi_wire::identity::{Certificate, RevocationList};
use p2pmpi_wire::secure::GridSecret;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

/// How often the launcher asks the supernodes.
pub const POLL: Duration = Duration::from_secs(1);

/// Watches the hosts `hosts` (each host's certificate and the slots it runs) until `alive`
/// has no strong reference left (every host's follower ended).
pub(crate) fn watch(
    cfg: &Config,
    secret: &GridSecret,
    hosts: Vec<(Certificate, Vec<u32>)>,
    tx: Sender<Event>,
    alive: Weak<()>,
) {
    let Some(owner) = secret.member_info().map(|m| m.owner) else { return };
    if hosts.is_empty() {
        return;
    }
    let supernodes: Vec<SocketAddr> =
        cfg.supernodes.iter().filter_map(|s| s.to_socket_addrs().ok().and_then(|mut a| a.next())).collect();
    let secret = secret.clone();
    let spawned = std::thread::Builder::new().name("revoked-hosts".into()).spawn(move || {
        let mut list = RevocationList::new(owner);
        let mut left = hosts;
        while alive.upgrade().is_some() && !left.is_empty() {
            let t = Instant::now();
            let (entries, _) =
                p2pmpi_peer::supernode::revoked_from(None, &supernodes, &secret, Duration::from_millis(900));
            list.merge(entries);
            let revoked = list.revocations();
            // The launcher's own new connections (spawns) refuse them too.
            p2pmpi_peer::members::add_revoked(&secret, &revoked);
            let (gone, kept): (Vec<_>, Vec<_>) = left.into_iter().partition(|(c, _)| revoked.is_revoked(&c.body));
            left = kept;
            for (cert, slots) in gone {
                let ranks = slots.into_iter().map(|s| s as usize).collect();
                if tx.send(Event::HostRevoked { ranks, member: cert.body.name.clone() }).is_err() {
                    return;
                }
            }
            std::thread::sleep(POLL.saturating_sub(t.elapsed()));
        }
    });
    if let Err(e) = spawned {
        eprintln!("warning: cannot watch the hosts for revocations: {e}");
    }
}

/// A token each host's follower holds: the watch ends once none is left.
pub(crate) fn token() -> Arc<()> {
    Arc::new(())
}
