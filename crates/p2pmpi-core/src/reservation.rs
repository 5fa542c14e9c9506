//! Discovery and reservation (thesis §3.3.2, SPEC §4), both sides, without I/O.
//!
//! * [`Gatekeeper`] is the remote side: the RS of one host, which answers reservation requests
//!   OK(P) or NOK according to its owner's [`Policy`] (`MAX_JOBS` = J, `MAX_PROCESSES_PER_JOB` =
//!   P, `HOST_DENY` / `HOST_ALLOW`), holds the reservation *ticket* until the launch claims it,
//!   and lets unclaimed reservations lapse so no ticket leaks when a submitter crashes. It is a
//!   [`Machine`]: [`Request`]s in, [`Reply`]s out, lapses at [`Machine::poll_timeout`].
//! * [`Booking`] is the submitter side: which hosts of the cached list to ask (in increasing
//!   latency, with the overbooking of [`booking_count`]), the answers collected, the *rlist*
//!   of hosts that said OK, and the final decision — *slist*, placements, cancellations — made
//!   by [`allocate`]. A plain value, not a machine (see its documentation).

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::hash::Hash;
use std::time::Duration;

use crate::allocation::{allocate, booking_count, Infeasible, Strategy};
use crate::machine::{Machine, Time};

/// HOST_DENY / HOST_ALLOW matching. An entry is an exact IP ("10.0.0.7"), or a prefix ending in
/// '.' ("192.168.0.") meaning every address starting with it. Entries are trimmed; empty entries
/// ignored.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostFilter {
    deny: Vec<String>,
    allow: Vec<String>,
}

fn clean(list: Vec<String>) -> Vec<String> {
    list.into_iter().map(|e| e.trim().to_string()).filter(|e| !e.is_empty()).collect()
}

fn matches(entry: &str, ip: &str) -> bool {
    if entry.ends_with('.') {
        ip.starts_with(entry)
    } else {
        ip == entry
    }
}

impl HostFilter {
    pub fn new(deny: Vec<String>, allow: Vec<String>) -> Self {
        HostFilter { deny: clean(deny), allow: clean(allow) }
    }

    /// False if the ip matches a deny entry; if the allow list is non-empty, true only if the ip
    /// matches an allow entry.
    pub fn permits(&self, ip: &str) -> bool {
        let ip = ip.trim();
        if self.deny.iter().any(|e| matches(e, ip)) {
            return false;
        }
        self.allow.is_empty() || self.allow.iter().any(|e| matches(e, ip))
    }
}

/// An RS's owner preferences.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// J: applications accepted at once (reserved or running); 0 = unlimited.
    pub max_jobs: u32,
    /// P: processes of one application on this host (the RS answers OK(P)).
    pub max_procs: u32,
    /// Requesters whose reservation requests are refused.
    pub filter: HostFilter,
    /// A reservation not claimed by a launch within this lapses.
    pub hold: Duration,
}

/// The RS's answer to a reservation request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Reserved: this host runs up to `p` processes of the application; the reservation lapses
    /// at `expires_at` unless claimed by a launch first.
    Ok { p: u32, expires_at: Time },
    /// Refused, with a human reason.
    Nok(String),
}

/// Why a launch could not claim its reservation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimError {
    /// No reservation holds this ticket (never made, cancelled, finished or already expired).
    Unknown,
    /// The reservation lapsed before the launch came.
    Expired,
}

impl fmt::Display for ClaimError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ClaimError::Unknown => "no reservation holds this ticket",
            ClaimError::Expired => "the reservation expired",
        })
    }
}

impl std::error::Error for ClaimError {}

#[derive(Debug, Clone)]
struct Held {
    app: String,
    expires_at: Time,
    running: bool,
}

impl Held {
    fn live(&self, now: Time) -> bool {
        self.running || now < self.expires_at
    }
}

/// What is asked of the RS (the [`Gatekeeper`]'s input). Every request but
/// [`Request::Finish`] is answered by one [`Reply`], at once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// A reservation request from `requester_ip` for application `app` (answered
    /// [`Reply::Reserved`]). Lapsed reservations are dropped first. NOK with a human reason
    /// when the requester is not permitted or J is reached. A ticket already held gets the
    /// same OK again (idempotent, refreshes nothing). Otherwise the host is reserved for the
    /// policy's `hold`.
    Reserve { ticket: u128, requester_ip: String, app: String },
    /// The submitter is using the reservation (staging files for it): a live reservation's
    /// hold starts again from now, so a long staging does not outlive it (answered
    /// [`Reply::Touched`]: whether the ticket holds a live reservation, like
    /// [`Gatekeeper::holds`]).
    Touch(u128),
    /// The launch (answered [`Reply::Claimed`]): the ticket must match a live reservation; it
    /// becomes running (never lapses until finished or cancelled). Claiming an already-running
    /// ticket is OK. A lapsed reservation is dropped and answered [`ClaimError::Expired`] (then
    /// `Unknown`).
    Claim(u128),
    /// Release an unused reservation (answered [`Reply::Cancelled`]: whether it existed).
    Cancel(u128),
    /// The job ended: forget the ticket (no answer).
    Finish(u128),
}

/// What the RS answers (the [`Gatekeeper`]'s output).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// The answer to [`Request::Reserve`].
    Reserved { ticket: u128, decision: Decision },
    /// The answer to [`Request::Touch`]: whether the ticket holds a live reservation.
    Touched { ticket: u128, live: bool },
    /// The answer to [`Request::Claim`]: P, or why not.
    Claimed { ticket: u128, result: Result<u32, ClaimError> },
    /// The answer to [`Request::Cancel`]: whether the reservation existed.
    Cancelled { ticket: u128, existed: bool },
    /// A reservation never claimed lapsed and was dropped (at a time-out; in ticket order).
    Lapsed(u128),
}

/// The remote side of reservation: the gatekeeper of one host (SPEC §4). Each reservation is
/// keyed by the submitter's ticket; it is *reserved* until a launch claims it (then *running*
/// until the job finishes), and a reservation never claimed lapses after the policy's `hold`.
///
/// A [`Machine`]: the driver (the MPD) feeds [`Request`]s and takes each one's [`Reply`]
/// from [`Machine::poll_output`]; [`Machine::handle_timeout`] drops the reservations that
/// lapsed ([`Reply::Lapsed`]), due at [`Machine::poll_timeout`].
pub struct Gatekeeper {
    policy: Policy,
    held: HashMap<u128, Held>,
    out: VecDeque<Reply>,
}

impl Gatekeeper {
    pub fn new(policy: Policy) -> Self {
        Gatekeeper { policy, held: HashMap::new(), out: VecDeque::new() }
    }

    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    fn reserve(&mut self, now: Time, ticket: u128, requester_ip: &str, app: &str) -> Decision {
        self.expire(now);
        if !self.policy.filter.permits(requester_ip) {
            return Decision::Nok(format!("host {} is denied here", requester_ip.trim()));
        }
        let p = self.policy.max_procs;
        if let Some(h) = self.held.get(&ticket) {
            return Decision::Ok { p, expires_at: h.expires_at };
        }
        let j = self.policy.max_jobs;
        if j != 0 && self.active() >= j as usize {
            return Decision::Nok(format!("MAX_JOBS ({j}) reached"));
        }
        let expires_at = now.saturating_add(self.policy.hold);
        self.held.insert(ticket, Held { app: app.to_string(), expires_at, running: false });
        Decision::Ok { p, expires_at }
    }

    /// True if the ticket holds a live reservation (reserved and not lapsed, or running) at
    /// `now`. Used by FT before staging.
    pub fn holds(&self, now: Time, ticket: u128) -> bool {
        self.held.get(&ticket).is_some_and(|h| h.live(now))
    }

    fn touch(&mut self, now: Time, ticket: u128) -> bool {
        let hold = self.policy.hold;
        match self.held.get_mut(&ticket) {
            Some(h) if h.live(now) => {
                if !h.running {
                    h.expires_at = now.saturating_add(hold);
                }
                true
            }
            _ => false,
        }
    }

    fn claim(&mut self, now: Time, ticket: u128) -> Result<u32, ClaimError> {
        let h = self.held.get_mut(&ticket).ok_or(ClaimError::Unknown)?;
        if !h.live(now) {
            self.held.remove(&ticket);
            return Err(ClaimError::Expired);
        }
        h.running = true;
        Ok(self.policy.max_procs)
    }

    /// Drops reservations whose hold lapsed; returns their tickets (sorted).
    fn expire(&mut self, now: Time) -> Vec<u128> {
        let mut gone: Vec<u128> = self.held.iter().filter(|(_, h)| !h.live(now)).map(|(&t, _)| t).collect();
        gone.sort_unstable();
        for t in &gone {
            self.held.remove(t);
        }
        gone
    }

    /// Number of applications holding this host (reserved + running), as counted against J.
    /// Lapsed reservations count until a time-out (or a reservation request) drops them.
    pub fn active(&self) -> usize {
        self.held.len()
    }

    /// The tickets held, with app name and whether running (for logs/mpistat), sorted by ticket.
    pub fn entries(&self) -> Vec<(u128, String, bool)> {
        let mut v: Vec<_> = self.held.iter().map(|(&t, h)| (t, h.app.clone(), h.running)).collect();
        v.sort_unstable();
        v
    }
}

impl Machine for Gatekeeper {
    type Input = Request;
    type Output = Reply;
    type Rejected = std::convert::Infallible;

    fn handle_input(&mut self, now: Time, request: Request) -> Result<(), Self::Rejected> {
        let reply = match request {
            Request::Reserve { ticket, requester_ip, app } => {
                Reply::Reserved { ticket, decision: self.reserve(now, ticket, &requester_ip, &app) }
            }
            Request::Touch(ticket) => Reply::Touched { ticket, live: self.touch(now, ticket) },
            Request::Claim(ticket) => Reply::Claimed { ticket, result: self.claim(now, ticket) },
            Request::Cancel(ticket) => Reply::Cancelled { ticket, existed: self.held.remove(&ticket).is_some() },
            Request::Finish(ticket) => {
                self.held.remove(&ticket);
                return Ok(());
            }
        };
        self.out.push_back(reply);
        Ok(())
    }

    /// Drops the reservations whose hold lapsed ([`Reply::Lapsed`]).
    fn handle_timeout(&mut self, now: Time) {
        let gone = self.expire(now);
        self.out.extend(gone.into_iter().map(Reply::Lapsed));
    }

    fn poll_output(&mut self) -> Option<Reply> {
        self.out.pop_front()
    }

    /// When the first reservation not claimed lapses.
    fn poll_timeout(&self) -> Option<Time> {
        self.held.values().filter(|h| !h.running).map(|h| h.expires_at).min()
    }
}

/// What a remote RS answered (or did not).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    Ok {
        p: u32,
    },
    Nok,
    /// No answer before the time-out: the host is to be marked dead in the cached list.
    NoAnswer,
}

/// Why the booking cannot give a placement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BookingError {
    /// The submitter's own RS did not accept (or accepted with P = 0): rank 0 cannot run here.
    SubmitterRefused,
    /// The hosts that accepted fail the feasibility test.
    Infeasible(Infeasible),
}

impl fmt::Display for BookingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BookingError::SubmitterRefused => {
                f.write_str("the submitter's own RS refused the reservation (rank 0 runs there)")
            }
            BookingError::Infeasible(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for BookingError {}

/// The decision of a booking.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan<K> {
    /// Hosts kept, in latency order (the submitter first), with the MPI ranks each runs (never empty).
    pub placements: Vec<(K, Vec<usize>)>,
    /// Hosts that accepted but get no process: their reservations must be cancelled.
    pub cancel: Vec<K>,
}

/// The submitter side of reservation (thesis §3.3.2): which hosts to ask, in increasing
/// latency, with overbooking of [`booking_count`]; collect answers; decide *slist* and
/// placements. Hosts are asked at most once per booking.
///
/// A plain value, not a [`Machine`]: it has no clock and no timer of its own (the time-out
/// of the answers is the driver's, which reports a host that did not answer as
/// [`Answer::NoAnswer`]), and every call returns its result at once — the hosts to ask, the
/// decision — so an input queue and an output to poll would only add ceremony to what are
/// function calls.
#[derive(Debug, Clone)]
pub struct Booking<K> {
    n: usize,
    r: usize,
    strategy: Strategy,
    submitter: K,
    /// Hosts in the order they were asked (this order ranks the rlist).
    asked: Vec<K>,
    /// None while pending.
    answers: HashMap<K, Option<Answer>>,
}

impl<K: Clone + Eq + Hash + fmt::Debug> Booking<K> {
    /// n ranks × r replicas, `submitter` is this host (it must be in the candidates, and will run rank 0).
    pub fn new(n: usize, r: usize, strategy: Strategy, submitter: K) -> Self {
        Booking { n, r, strategy, submitter, asked: Vec::new(), answers: HashMap::new() }
    }

    /// Given every known candidate in increasing latency order (may include hosts asked before
    /// and the submitter), returns the hosts to ask now: those never asked, from the front, as
    /// many as needed so that accepted + pending reaches `booking_count(n, r)`. The submitter is
    /// always asked first if it was not asked yet. Records them as pending.
    pub fn next_requests(&mut self, candidates: &[K]) -> Vec<K> {
        let target = booking_count(self.n, self.r);
        let mut out = Vec::new();
        let mut open = self.accepted() + self.pending().len();
        let submitter = self.submitter.clone();
        for k in std::iter::once(&submitter).chain(candidates) {
            let forced = *k == submitter;
            if (!forced && open >= target) || self.answers.contains_key(k) {
                continue;
            }
            self.answers.insert(k.clone(), None);
            self.asked.push(k.clone());
            out.push(k.clone());
            open += 1;
        }
        out
    }

    /// Records an answer for a pending host (answers for hosts not pending are ignored).
    pub fn on_answer(&mut self, host: &K, answer: Answer) {
        if let Some(slot @ None) = self.answers.get_mut(host) {
            *slot = Some(answer);
        }
    }

    fn with(&self, f: impl Fn(Option<Answer>) -> bool) -> Vec<K> {
        self.asked.iter().filter(|k| f(self.answers[*k])).cloned().collect()
    }

    /// Hosts still pending, in the order asked.
    pub fn pending(&self) -> Vec<K> {
        self.with(|a| a.is_none())
    }

    /// Number of hosts that said OK.
    pub fn accepted(&self) -> usize {
        self.answers.values().filter(|a| matches!(a, Some(Answer::Ok { .. }))).count()
    }

    /// Processes the hosts that accepted can run together: the sum of their P.
    pub fn capacity(&self) -> usize {
        self.answers
            .values()
            .map(|a| match a {
                Some(Answer::Ok { p }) => *p as usize,
                _ => 0,
            })
            .sum()
    }

    /// Whether `host` was asked by this booking.
    pub fn was_asked(&self, host: &K) -> bool {
        self.answers.contains_key(host)
    }

    /// Hosts that refused (busy: `MAX_JOBS` reached, or the requester is denied).
    pub fn refused(&self) -> Vec<K> {
        self.with(|a| a == Some(Answer::Nok))
    }

    /// Hosts that did not answer in time (to be marked dead in the cache).
    pub fn dead(&self) -> Vec<K> {
        self.with(|a| a == Some(Answer::NoAnswer))
    }

    /// Hosts that accepted, in the order they were ranked when asked (submitter first): rlist.
    pub fn rlist(&self) -> Vec<K> {
        let mut v = self.with(|a| matches!(a, Some(Answer::Ok { .. })));
        if let Some(i) = v.iter().position(|k| *k == self.submitter) {
            let s = v.remove(i);
            v.insert(0, s);
        }
        v
    }

    /// Every host that accepted (to cancel all when giving up).
    pub fn all_accepted(&self) -> Vec<K> {
        self.rlist()
    }

    /// The feasibility test and placement over rlist's P values (via [`allocate`]): hosts with
    /// ranks go to `placements`, hosts of rlist with no rank (including those beyond *slist*)
    /// to `cancel`. [`BookingError::SubmitterRefused`] if the submitter has not accepted with P ≥ 1.
    pub fn decide(&self) -> Result<Plan<K>, BookingError> {
        match self.answers.get(&self.submitter) {
            Some(Some(Answer::Ok { p })) if *p > 0 => {}
            _ => return Err(BookingError::SubmitterRefused),
        }
        let rlist = self.rlist();
        let p: Vec<usize> = rlist
            .iter()
            .map(|k| match self.answers[k] {
                Some(Answer::Ok { p }) => p as usize,
                _ => 0,
            })
            .collect();
        let ranks = allocate(self.strategy, &p, self.n, self.r).map_err(BookingError::Infeasible)?;
        let mut plan = Plan { placements: Vec::new(), cancel: Vec::new() };
        for (k, ranks) in rlist.into_iter().zip(ranks) {
            if ranks.is_empty() {
                plan.cancel.push(k);
            } else {
                plan.placements.push((k, ranks));
            }
        }
        Ok(plan)
    }
}

#[cfg(test)]
pub(crate) mod touch_tests {
    use super::*;

    pub(crate) fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    /// The reply to `request` at `now_ms` (none for `Finish`).
    pub(crate) fn ask(g: &mut Gatekeeper, now_ms: u64, request: Request) -> Option<Reply> {
        assert!(g.poll_output().is_none(), "no reply left over");
        g.handle_input(ms(now_ms), request).unwrap();
        let reply = g.poll_output();
        assert!(g.poll_output().is_none(), "one reply per request");
        reply
    }

    pub(crate) fn reserve(g: &mut Gatekeeper, now_ms: u64, ticket: u128, ip: &str, app: &str) -> Decision {
        match ask(g, now_ms, Request::Reserve { ticket, requester_ip: ip.into(), app: app.into() }) {
            Some(Reply::Reserved { ticket: t, decision }) if t == ticket => decision,
            r => panic!("{r:?}"),
        }
    }

    pub(crate) fn touch(g: &mut Gatekeeper, now_ms: u64, ticket: u128) -> bool {
        match ask(g, now_ms, Request::Touch(ticket)) {
            Some(Reply::Touched { ticket: t, live }) if t == ticket => live,
            r => panic!("{r:?}"),
        }
    }

    pub(crate) fn claim(g: &mut Gatekeeper, now_ms: u64, ticket: u128) -> Result<u32, ClaimError> {
        match ask(g, now_ms, Request::Claim(ticket)) {
            Some(Reply::Claimed { ticket: t, result }) if t == ticket => result,
            r => panic!("{r:?}"),
        }
    }

    pub(crate) fn cancel(g: &mut Gatekeeper, ticket: u128) -> bool {
        match ask(g, 0, Request::Cancel(ticket)) {
            Some(Reply::Cancelled { ticket: t, existed }) if t == ticket => existed,
            r => panic!("{r:?}"),
        }
    }

    /// The tickets that lapsed by `now_ms` (a time-out).
    pub(crate) fn expire(g: &mut Gatekeeper, now_ms: u64) -> Vec<u128> {
        g.handle_timeout(ms(now_ms));
        g.drain_outputs()
            .into_iter()
            .map(|r| match r {
                Reply::Lapsed(t) => t,
                r => panic!("{r:?}"),
            })
            .collect()
    }

    #[test]
    fn touching_a_live_reservation_restarts_its_hold() {
        let mut g = Gatekeeper::new(Policy { max_jobs: 0, max_procs: 1, filter: HostFilter::default(), hold: ms(100) });
        assert!(matches!(reserve(&mut g, 0, 7, "1.2.3.4", "a"), Decision::Ok { .. }));
        assert!(touch(&mut g, 90, 7));
        assert!(g.holds(ms(150), 7), "the hold restarted at 90");
        assert!(!g.holds(ms(191), 7));
        assert!(!touch(&mut g, 191, 7), "a lapsed reservation cannot be revived");
        assert!(!touch(&mut g, 0, 8), "unknown ticket");
    }
}

#[cfg(test)]
mod tests {
    use super::touch_tests::{ask, cancel, claim, expire, ms, reserve};
    use super::Strategy;
    use super::*;
    use proptest::prelude::*;

    fn strs(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    fn gk(j: u32, p: u32, hold_ms: u64) -> Gatekeeper {
        Gatekeeper::new(Policy { max_jobs: j, max_procs: p, filter: HostFilter::default(), hold: ms(hold_ms) })
    }

    #[test]
    fn host_filter_deny_prefix_and_allow() {
        let f = HostFilter::new(strs(&["10.0.0.7", " 192.168.0. ", "", "  "]), vec![]);
        assert!(!f.permits("10.0.0.7"));
        assert!(f.permits("10.0.0.70"), "exact entries are not prefixes");
        assert!(!f.permits("192.168.0.5"));
        assert!(f.permits("192.168.1.5"));
        assert!(HostFilter::default().permits("1.2.3.4"));
        let f = HostFilter::new(strs(&["10.0.9.9"]), strs(&["10.0.", "172.16.0.1"]));
        assert!(f.permits("10.0.3.4") && f.permits("172.16.0.1"));
        assert!(!f.permits("11.0.0.1") && !f.permits("172.16.0.10"));
        assert!(!f.permits("10.0.9.9"), "deny wins over allow");
    }

    #[test]
    fn gatekeeper_answers_p_and_refuses_denied_hosts() {
        let mut g = gk(0, 3, 1000);
        assert_eq!(reserve(&mut g, 50, 1, "10.0.0.1", "app"), Decision::Ok { p: 3, expires_at: ms(1050) });
        assert_eq!(g.policy().max_procs, 3);
        let filter = HostFilter::new(strs(&["1.2.3.4", "192.168.0."]), vec![]);
        let mut g = Gatekeeper::new(Policy { max_jobs: 0, max_procs: 1, filter, hold: ms(10) });
        assert_eq!(reserve(&mut g, 0, 1, "1.2.3.4", "a"), Decision::Nok("host 1.2.3.4 is denied here".into()));
        assert!(matches!(reserve(&mut g, 0, 2, "192.168.0.9", "a"), Decision::Nok(_)));
        assert!(matches!(reserve(&mut g, 0, 3, "192.168.1.9", "a"), Decision::Ok { .. }));
        assert_eq!(g.active(), 1);
    }

    #[test]
    fn max_jobs_limit_and_cancel_frees_a_slot() {
        let mut g = gk(2, 1, 1000);
        assert!(matches!(reserve(&mut g, 0, 1, "h", "a"), Decision::Ok { .. }));
        assert!(matches!(reserve(&mut g, 0, 2, "h", "b"), Decision::Ok { .. }));
        assert_eq!(reserve(&mut g, 0, 3, "h", "c"), Decision::Nok("MAX_JOBS (2) reached".into()));
        // a ticket already held is answered again, even at the limit, without refreshing the hold
        assert_eq!(reserve(&mut g, 500, 1, "h", "a"), Decision::Ok { p: 1, expires_at: ms(1000) });
        assert_eq!(g.active(), 2);
        assert!(cancel(&mut g, 1));
        assert!(!cancel(&mut g, 1));
        assert!(matches!(reserve(&mut g, 0, 3, "h", "c"), Decision::Ok { .. }));
        assert_eq!(g.entries(), vec![(2, "b".into(), false), (3, "c".into(), false)]);
        let mut unlimited = gk(0, 1, 1000);
        for t in 0..100 {
            assert!(matches!(reserve(&mut unlimited, 0, t, "h", "a"), Decision::Ok { .. }));
        }
        assert_eq!(unlimited.active(), 100);
    }

    #[test]
    fn unclaimed_reservations_expire() {
        let mut g = gk(1, 2, 1000);
        reserve(&mut g, 0, 7, "h", "a");
        assert!(g.holds(ms(999), 7));
        assert!(!g.holds(ms(1000), 7) && !g.holds(ms(0), 8));
        assert_eq!(claim(&mut g, 1500, 7), Err(ClaimError::Expired));
        assert_eq!(claim(&mut g, 1500, 7), Err(ClaimError::Unknown));
        assert_eq!(g.active(), 0);
        // expiry frees the J slot, through reserve's own expire
        reserve(&mut g, 0, 1, "h", "a");
        assert!(matches!(reserve(&mut g, 999, 2, "h", "b"), Decision::Nok(_)));
        assert_eq!(reserve(&mut g, 1000, 2, "h", "b"), Decision::Ok { p: 2, expires_at: ms(2000) });
        assert_eq!(claim(&mut g, 1001, 1), Err(ClaimError::Unknown));
        assert_eq!(g.poll_timeout(), Some(ms(2000)), "the next lapse");
        assert_eq!(expire(&mut g, 1999), Vec::<u128>::new());
        assert_eq!(expire(&mut g, 2000), vec![2]);
        assert_eq!(ClaimError::Unknown.to_string(), "no reservation holds this ticket");
        assert_eq!(ClaimError::Expired.to_string(), "the reservation expired");
    }

    #[test]
    fn running_jobs_never_expire_until_finish() {
        let mut g = gk(0, 4, 1000);
        reserve(&mut g, 0, 1, "h", "a");
        reserve(&mut g, 0, 2, "h", "b");
        assert_eq!(claim(&mut g, 500, 1), Ok(4));
        assert_eq!(claim(&mut g, 600, 1), Ok(4), "claiming twice is harmless");
        assert_eq!(g.poll_timeout(), Some(ms(1000)), "only the reservation not claimed lapses");
        assert_eq!(expire(&mut g, 1_000_000), vec![2]);
        assert_eq!(g.poll_timeout(), None, "a running job never lapses");
        assert!(g.holds(ms(1_000_000), 1));
        assert_eq!(g.entries(), vec![(1, "a".into(), true)]);
        assert_eq!(ask(&mut g, 0, Request::Finish(1)), None);
        assert!(!g.holds(ms(0), 1));
        assert_eq!(g.active(), 0);
        assert_eq!(claim(&mut g, 0, 1), Err(ClaimError::Unknown));
    }

    fn answer_all(b: &mut Booking<u32>, hosts: &[u32], a: Answer) {
        for h in hosts {
            b.on_answer(h, a);
        }
    }

    #[test]
    fn overbooking_and_submitter_first() {
        let cands: Vec<u32> = (0..12).collect();
        let mut b = Booking::new(4, 1, Strategy::Spread, 0u32);
        assert_eq!(b.next_requests(&cands), (0..10).collect::<Vec<_>>());
        assert_eq!(b.pending().len(), 10);
        assert_eq!(b.next_requests(&cands), Vec::<u32>::new(), "enough requests in flight");
        // the submitter is asked first even when it is not the closest host
        let mut b = Booking::new(2, 1, Strategy::Spread, 0u32);
        assert_eq!(b.next_requests(&[5, 3, 0, 7]), vec![0, 5, 3, 7]);
        assert_eq!(b.next_requests(&[5, 3, 0, 7]), Vec::<u32>::new());
    }

    #[test]
    fn refusals_and_timeouts_lead_to_further_candidates() {
        let cands: Vec<u32> = (0..8).collect();
        let mut b = Booking::new(2, 1, Strategy::Spread, 0u32); // books 2 + 3 = 5
        assert_eq!(b.next_requests(&cands), vec![0, 1, 2, 3, 4]);
        b.on_answer(&0, Answer::Ok { p: 1 });
        b.on_answer(&1, Answer::Nok);
        b.on_answer(&2, Answer::NoAnswer);
        b.on_answer(&3, Answer::Ok { p: 1 });
        assert_eq!(b.pending(), vec![4]);
        assert_eq!(b.accepted(), 2);
        // 2 accepted + 1 pending: two more requests, never to hosts already asked
        assert_eq!(b.next_requests(&cands), vec![5, 6]);
        b.on_answer(&4, Answer::NoAnswer);
        b.on_answer(&2, Answer::Ok { p: 1 }); // late: 2 is no longer pending, ignored
        b.on_answer(&99, Answer::Ok { p: 1 }); // never asked, ignored
        assert_eq!(b.dead(), vec![2, 4]);
        assert_eq!(b.next_requests(&cands), vec![7]);
        assert_eq!(b.next_requests(&cands), Vec::<u32>::new(), "the candidates are exhausted");
        assert_eq!(b.rlist(), vec![0, 3]);
    }

    #[test]
    fn rlist_follows_the_ranking_at_ask_time() {
        let mut b = Booking::new(3, 1, Strategy::Spread, 2u32); // books 3 + 5 = 8
        assert_eq!(b.next_requests(&[0, 1, 2]), vec![2, 0, 1]);
        answer_all(&mut b, &[1, 2, 0], Answer::Ok { p: 1 });
        // after a refresh the ranking changed; new hosts come after the ones asked before
        assert_eq!(b.next_requests(&[9, 8, 1, 0, 2]), vec![9, 8]);
        b.on_answer(&8, Answer::Ok { p: 1 });
        b.on_answer(&9, Answer::Ok { p: 1 });
        assert_eq!(b.rlist(), vec![2, 0, 1, 9, 8]);
        assert_eq!(b.all_accepted(), b.rlist());
        assert_eq!(b.accepted(), 5);
    }

    fn booked(strategy: Strategy, n: usize, r: usize, p: &[u32]) -> Booking<u32> {
        let hosts: Vec<u32> = (0..p.len() as u32).collect();
        let mut b = Booking::new(n, r, strategy, 0u32);
        assert_eq!(b.next_requests(&hosts), hosts);
        for (h, &p) in hosts.iter().zip(p) {
            b.on_answer(h, Answer::Ok { p });
        }
        b
    }

    #[test]
    fn decide_places_as_allocate_spread_and_concentrate() {
        let b = booked(Strategy::Spread, 4, 1, &[4, 4, 4, 4, 4]);
        let plan = b.decide().unwrap();
        assert_eq!(plan.placements, vec![(0, vec![0]), (1, vec![1]), (2, vec![2]), (3, vec![3])]);
        assert_eq!(plan.cancel, vec![4], "beyond slist");
        let b = booked(Strategy::Concentrate, 4, 1, &[4, 4, 4, 4, 4]);
        let plan = b.decide().unwrap();
        assert_eq!(plan.placements, vec![(0, vec![0, 1, 2, 3])]);
        assert_eq!(plan.cancel, vec![1, 2, 3, 4], "hosts with no ranks");
        let expected = allocate(Strategy::Concentrate, &[2, 1, 3], 3, 2).unwrap();
        let plan = booked(Strategy::Concentrate, 3, 2, &[2, 1, 3]).decide().unwrap();
        let got: Vec<Vec<usize>> = plan.placements.into_iter().map(|(_, r)| r).collect();
        assert_eq!(got, expected);
    }

    #[test]
    fn decide_errors() {
        let b = booked(Strategy::Spread, 3, 1, &[1, 1]);
        let e = b.decide().unwrap_err();
        assert_eq!(e, BookingError::Infeasible(Infeasible::TooLittleCapacity { capacity: 2, needed: 3 }));
        assert!(e.to_string().contains("3 are needed"));
        assert_eq!(booked(Strategy::Spread, 1, 1, &[0]).decide(), Err(BookingError::SubmitterRefused));
        let mut b = Booking::new(1, 1, Strategy::Spread, 0u32);
        assert_eq!(b.decide(), Err(BookingError::SubmitterRefused), "never asked");
        b.next_requests(&[1, 0]);
        assert_eq!(b.decide(), Err(BookingError::SubmitterRefused), "still pending");
        b.on_answer(&0, Answer::Nok);
        assert_eq!(b.next_requests(&[1, 0]), vec![1]);
        b.on_answer(&1, Answer::Ok { p: 8 });
        assert_eq!(b.decide(), Err(BookingError::SubmitterRefused));
        assert!(BookingError::SubmitterRefused.to_string().contains("submitter"));
        // What the MPD needs to tell busy hosts from missing ones.
        assert_eq!(b.refused(), vec![0]);
        assert!(b.was_asked(&0) && b.was_asked(&1) && !b.was_asked(&2));
        assert!(b.dead().is_empty());
    }

    proptest! {
        #[test]
        fn decide_keeps_copies_apart(
            answers in proptest::collection::vec((0u8..4, 0u32..5), 1..20),
            sub in 0usize..20,
            n in 1usize..6,
            r in 1usize..4,
            concentrate in any::<bool>(),
        ) {
            let m = answers.len() as u32;
            let sub = sub as u32 % m;
            let strategy = if concentrate { Strategy::Concentrate } else { Strategy::Spread };
            let answer = |h: u32| match answers[h as usize] {
                (0 | 1, p) => Answer::Ok { p },
                (2, _) => Answer::Nok,
                _ => Answer::NoAnswer,
            };
            let cands: Vec<u32> = (0..m).collect();
            let mut b = Booking::new(n, r, strategy, sub);
            let mut first = true;
            loop {
                let asked = b.next_requests(&cands);
                prop_assert!(b.accepted() + b.pending().len() <= booking_count(n, r));
                if asked.is_empty() {
                    break;
                }
                prop_assert!(!first || asked[0] == sub, "the submitter is asked first");
                first = false;
                for h in asked {
                    b.on_answer(&h, answer(h));
                }
            }
            let rlist = b.rlist();
            prop_assert!(rlist.iter().all(|h| matches!(answer(*h), Answer::Ok { .. })), "rlist holds only OK hosts");
            prop_assert!(b.dead().iter().all(|h| answer(*h) == Answer::NoAnswer));
            match b.decide() {
                Ok(plan) => {
                    prop_assert_eq!(plan.placements[0].0, sub);
                    prop_assert_eq!(plan.placements[0].1[0], 0, "rank 0 on the submitter");
                    let mut all: Vec<u32> = plan.placements.iter().map(|(h, _)| *h).chain(plan.cancel.clone()).collect();
                    all.sort_unstable();
                    let mut sorted = rlist.clone();
                    sorted.sort_unstable();
                    prop_assert_eq!(all, sorted, "every accepted host is placed or cancelled, once");
                    for (h, ranks) in &plan.placements {
                        prop_assert!(!ranks.is_empty());
                        prop_assert!(ranks.len() <= answers[*h as usize].1 as usize);
                        let mut seen = ranks.clone();
                        seen.sort_unstable();
                        seen.dedup();
                        prop_assert_eq!(seen.len(), ranks.len(), "two copies of a rank on host {}", h);
                    }
                    for rank in 0..n {
                        let copies = plan.placements.iter().filter(|(_, rs)| rs.contains(&rank)).count();
                        prop_assert_eq!(copies, r);
                    }
                }
                Err(BookingError::SubmitterRefused) => {
                    prop_assert!(!matches!(answer(sub), Answer::Ok { p } if p > 0), "the submitter accepted");
                }
                Err(BookingError::Infeasible(_)) => {}
            }
        }
    }
}
