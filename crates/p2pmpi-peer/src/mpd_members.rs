//! The MPD's part in revocation and renewal (member mode; issue 38).
//!
//! A thread of the MPD **polls** the supernodes every [`MEMBER_POLL`] (1 s):
//!
//! * it fetches the revocations they hold ([`SnRequest::Revoked`]), takes those the owner
//!   signed ([`members::Revoked`]: a forged one is refused and logged), keeps them in
//!   `keys/revoked` and applies them to the daemon's credential, so that the MPD, its RS and
//!   its FT refuse the revoked members' new connections; and it stops (`SIGKILL`) the
//!   processes of every job here that a revoked member submitted.
//! * when two thirds of its certificate's life have passed, it leaves its certificate at
//!   the supernodes for renewal ([`SnRequest::Renew`]) and installs the renewed one once the
//!   owner signed it (`keys/member.cert`, and the credential of every service).
//! * on the owner's machine (`keys/owner.key`), it signs the renewals the members asked for
//!   ([`SnRequest::RenewalsAsked`], [`SnRequest::Renewed`]), and renews its own certificate
//!   itself. The owner key never leaves this machine: the supernodes only pass certificates.
//!
//! Why polling rather than a push: the supernodes keep no connection to the peers (a peer
//! calls them, every `ALIVE_PERIOD`), they do not know the launchers and monitors, and a
//! peer behind a firewall cannot be called; a poll of one small request a second bounds the
//! delay (1 s, plus the call) for every daemon alike, with no state on the supernodes.

use super::{Mpd, SUPERNODE_TIMEOUT};
use crate::members;
use p2pmpi_wire::grid::{SnRequest, SnResponse};
use p2pmpi_wire::identity::{Certificate, KeyPair};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::{info, warn};

/// How often the MPD asks the supernodes for revocations (and renewals).
pub const MEMBER_POLL: Duration = Duration::from_secs(1);
/// How long a supernode has to answer the poll.
const POLL_TIMEOUT: Duration = Duration::from_millis(900);

/// What the member thread remembers between polls.
#[derive(Default)]
pub(super) struct PollState {
    /// Forged entries seen at the last poll (logged when the count changes).
    bad: usize,
    /// When the renewal was last asked for.
    asked: Option<Instant>,
}

/// Member mode: the revocations kept in `keys/revoked` (applied to `secret`), and on the
/// owner's machine its owner key (to sign renewals).
pub(super) fn member_state(
    secret: &p2pmpi_wire::secure::GridSecret,
    home: &crate::home::Home,
) -> anyhow::Result<(Option<members::Revoked>, Option<KeyPair>)> {
    let keys = members::Keys::of(home);
    let revoked = members::Revoked::open(secret, keys.revoked())?;
    let owner = if revoked.is_some() && keys.owner_key().exists() { Some(keys.owner_keypair()?) } else { None };
    Ok((revoked, owner))
}

impl Mpd {
    /// Starts the member thread (member mode only).
    pub(super) fn start_member_poll(self: &Arc<Self>, owner: Option<KeyPair>) {
        if self.revoked.is_none() {
            return;
        }
        let me = self.clone();
        let spawned = std::thread::Builder::new().name("mpd-members".into()).spawn(move || {
            let mut st = PollState::default();
            while !me.halting.load(Ordering::SeqCst) {
                let t = Instant::now();
                me.poll_members(&mut st, owner.as_ref());
                std::thread::sleep(MEMBER_POLL.saturating_sub(t.elapsed()));
            }
        });
        if let Err(e) = spawned {
            warn!("cannot start the thread that learns revocations: {e}");
        }
    }

    fn poll_members(&self, st: &mut PollState, owner: Option<&KeyPair>) {
        let Some(revoked) = &self.revoked else { return };
        // Every supernode at once: one that does not answer delays the poll by at most
        // POLL_TIMEOUT.
        let addrs: Vec<_> = self.supernodes.iter().filter_map(|(_, a)| *a).collect();
        let (entries, _, refusal) =
            super::supernode::revoked_and_refusal(Some(self.ip), &addrs, &self.secret, POLL_TIMEOUT);
        let mut refused_by = self.refused_by.lock();
        if *refused_by != refusal {
            match &refusal {
                Some(why) => warn!("{why}; jobs submitted here are refused"),
                None => info!("no supernode refuses this machine any more"),
            }
            *refused_by = refusal;
        }
        drop(refused_by);
        let (new, refused) = revoked.merge(entries);
        let bad = refused.len();
        for n in new {
            info!("member {n} is revoked: its connections are refused, its jobs here stopped");
        }
        if bad != st.bad {
            warn!("{bad} revocation(s) from the supernodes refused (not signed by the grid's owner)");
            st.bad = bad;
        }
        self.stop_revoked_jobs();
        self.renew_own(st, owner);
        if let Some(owner) = owner {
            self.sign_renewals(owner);
        }
    }

    /// Kills the processes of the jobs here submitted by revoked members.
    fn stop_revoked_jobs(&self) {
        let Some(revoked) = &self.revoked else { return };
        let r = revoked.revocations();
        if r.names.is_empty() && r.keys.is_empty() {
            return;
        }
        let doomed: Vec<(String, String)> = self
            .submitters
            .lock()
            .iter()
            .filter(|(_, c)| r.is_revoked(&c.body))
            .map(|(job, c)| (job.clone(), c.body.name.clone()))
            .collect();
        for (job, name) in doomed {
            let pids = self.jobs.lock().get(&job).cloned().unwrap_or_default();
            let mut killed = 0;
            for pid in pids {
                if crate::os::signal(pid, libc::SIGKILL).is_ok() {
                    killed += 1;
                }
            }
            if killed > 0 {
                warn!("job {job} of revoked member {name}: {killed} process(es) stopped");
            }
        }
    }

    /// Asks for this peer's certificate's renewal when due, and installs the renewed one.
    fn renew_own(&self, st: &mut PollState, owner: Option<&KeyPair>) {
        let Some(m) = self.secret.member_info() else { return };
        let own = m.cert();
        let now = members::unix_now_s();
        let Some(asked) = members::renewal_request(&own, now) else { return };
        if let Some(owner) = owner {
            // The owner's machine renews its own certificate itself.
            match members::renew_for(owner, &asked, now, &m.revoked.read().unwrap_or_else(|p| p.into_inner())) {
                Ok(new) => self.install_cert(&own, new),
                Err(e) => warn!("cannot renew this peer's certificate: {e:#}"),
            }
            return;
        }
        let life = own.body.not_after_s.saturating_sub(own.body.not_before_s);
        let retry = Duration::from_secs((life / 100).clamp(1, 60));
        if st.asked.is_some_and(|t| t.elapsed() < retry) {
            return;
        }
        st.asked = Some(Instant::now());
        for (_, sn) in &self.supernodes {
            let Some(sn) = *sn else { continue };
            let req = SnRequest::Renew(asked.clone());
            if let Ok(SnResponse::Renewal(Some(new))) =
                super::supernode::call(Some(self.ip), sn, &self.secret, &req, SUPERNODE_TIMEOUT)
            {
                if members::acceptable_renewal(&own, &new, &m.owner, now) {
                    self.install_cert(&own, new);
                    return;
                }
                warn!("supernode {sn} gave a renewed certificate that does not fit this peer's: ignored");
            }
        }
    }

    fn install_cert(&self, old: &Certificate, new: Certificate) {
        let Some(m) = self.secret.member_info() else { return };
        let keys = members::Keys::of(&self.home);
        let text = format!("{}\n", new.to_hex());
        if let Err(e) = crate::home::write_private(&keys.member_cert(), text.as_bytes()) {
            warn!("cannot write the renewed certificate: {e:#}");
        }
        info!(
            "certificate of {} renewed: valid until {} (was {})",
            new.body.name, new.body.not_after_s, old.body.not_after_s
        );
        m.set_cert(new);
    }

    /// The owner's machine: signs the renewals asked at every supernode.
    fn sign_renewals(&self, owner: &KeyPair) {
        let Some(m) = self.secret.member_info() else { return };
        for (name, sn) in &self.supernodes {
            let Some(sn) = *sn else { continue };
            let call =
                |req: &SnRequest| super::supernode::call(Some(self.ip), sn, &self.secret, req, SUPERNODE_TIMEOUT);
            let Ok(SnResponse::Renewals(asked)) = call(&SnRequest::RenewalsAsked) else { continue };
            if asked.is_empty() {
                continue;
            }
            let now = members::unix_now_s();
            let revoked = m.revoked.read().unwrap_or_else(|p| p.into_inner()).clone();
            let mut renewed = Vec::new();
            for c in asked {
                match members::renew_for(owner, &c, now, &revoked) {
                    Ok(new) => renewed.push(new),
                    Err(e) => info!("renewal of {} refused: {e:#}", c.body.name),
                }
            }
            if !renewed.is_empty() {
                let n = renewed.len();
                match call(&SnRequest::Renewed(renewed)) {
                    Ok(SnResponse::Ok) => info!("signed {n} certificate renewal(s) for supernode {name}"),
                    other => warn!("supernode {name} did not take the renewals: {other:?}"),
                }
            }
        }
    }
}
