//! Message matching: which posted receive gets which arriving message.
//!
//! MPI's rules, as the seeds state them: messages between one pair with the same tag on one
//! communicator are received in the order they were sent (non-overtaking); `ANY_SOURCE` and
//! `ANY_TAG` receives take the earliest arrived message that fits; receives are satisfied in
//! the order they were posted.
//!
//! Order is carried by the **MID** (thesis §4.3.2): the sender stamps each message with the
//! number of messages it sent before with the same (communicator, destination, tag)
//! ([`Matcher::next_send_seq`]). The receiver keeps, per (communicator, source, tag), the next
//! sequence it expects; a message whose sequence is below it was already received and is
//! reported as a duplicate (this is what lets a receiver discard a message re-sent by a new
//! master after a failure, and is the history table in compact form: channels are FIFO, so a
//! high-water mark is equivalent to the set of delivered MIDs).

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};

/// A small, fast hasher for the (communicator, rank, tag) keys of the sequence counters:
/// the keys are not attacker-controlled in a way that matters (a peer can only slow its own
/// messages), and SipHash costs a visible share of a 5 µs message.
#[derive(Default, Clone, Copy)]
pub struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(5) ^ b as u64).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
        }
    }
    fn write_u32(&mut self, n: u32) {
        self.0 = (self.0.rotate_left(5) ^ n as u64).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    fn write_i32(&mut self, n: i32) {
        self.write_u32(n as u32)
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64)
    }
}

/// A hash map with [`KeyHasher`], for the small integer keys of the per-message bookkeeping
/// (sequence counters, transmissions, fan-outs).
pub type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<KeyHasher>>;

/// A hash set with [`KeyHasher`].
pub type FastSet<K> = std::collections::HashSet<K, BuildHasherDefault<KeyHasher>>;

type Key = (u32, i32, i32);

/// Sequence counters per (communicator, peer, tag): a map to places in a table, with the
/// place of the key used last kept aside. A process exchanging with one peer on one tag (a
/// ping-pong, a pipeline) finds its counter with three comparisons instead of a hash
/// lookup, on every message.
#[derive(Debug, Default)]
struct SeqTable {
    places: HashMap<Key, usize, BuildHasherDefault<KeyHasher>>,
    counts: Vec<u64>,
    last: Option<(Key, usize)>,
}

impl SeqTable {
    /// The counter of `key`, created at 0.
    #[inline]
    fn slot(&mut self, key: Key) -> &mut u64 {
        let i = match self.last {
            Some((k, i)) if k == key => i,
            _ => self.place(key),
        };
        &mut self.counts[i]
    }

    fn place(&mut self, key: Key) -> usize {
        let counts = &mut self.counts;
        let i = *self.places.entry(key).or_insert_with(|| {
            counts.push(0);
            counts.len() - 1
        });
        self.last = Some((key, i));
        i
    }

    /// The counter of `key` (0 if it has none yet).
    #[inline]
    fn get(&self, key: Key) -> u64 {
        match self.last {
            Some((k, i)) if k == key => self.counts[i],
            _ => self.places.get(&key).map_or(0, |&i| self.counts[i]),
        }
    }
}

impl SeqTable {
    fn entries(&self) -> Vec<SeqEntry> {
        let mut v: Vec<SeqEntry> = self.places.iter().map(|(&(c, r, t), &i)| (c, r, t, self.counts[i])).collect();
        v.sort_unstable();
        v
    }

    fn from_entries(entries: &[SeqEntry]) -> SeqTable {
        let mut t = SeqTable::default();
        for &(c, r, tag, n) in entries {
            *t.slot((c, r, tag)) = n;
        }
        t.last = None;
        t
    }
}

/// One sequence counter: (communicator, peer rank, tag, count).
pub type SeqEntry = (u32, i32, i32, u64);

/// Unexpected messages of one (communicator, source), with their arrival numbers.
type SourceQueue<P> = VecDeque<(u64, Envelope, Body<P>)>;

/// What identifies an arriving message at the receiver (the MID without the destination,
/// which is this process) plus its size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Envelope {
    /// Communicator context id.
    pub comm: u32,
    /// Source rank.
    pub src: i32,
    /// Tag.
    pub tag: i32,
    /// Sequence count of the MID.
    pub seq: u64,
    /// Message size in bytes.
    pub len: u64,
}

/// What a receive accepts. `None` is the wildcard (`ANY_SOURCE`, `ANY_TAG`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pattern {
    pub comm: u32,
    pub src: Option<i32>,
    pub tag: Option<i32>,
}

impl Pattern {
    /// Does a message with this envelope satisfy the pattern?
    #[inline]
    pub fn accepts(&self, env: &Envelope) -> bool {
        self.comm == env.comm && self.src.is_none_or(|s| s == env.src) && self.tag.is_none_or(|t| t == env.tag)
    }
}

/// The body of an arrived message: the data itself (eager protocol), or only an announcement
/// whose data will follow once the receiver is ready (rendez-vous).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Body<P> {
    /// Complete data.
    Eager(P),
    /// READY_TO_SEND: `Envelope::len` bytes are waiting at the sender.
    Rendezvous,
}

/// Outcome of [`Matcher::arrive`].
#[derive(Debug, PartialEq, Eq)]
pub enum Arrival<R> {
    /// The message matched the earliest fitting posted receive, which is removed.
    Matched(R),
    /// No posted receive fits: the caller must [`Matcher::enqueue`] the message now.
    Unmatched,
    /// The MID was already received (its sequence is below the high-water mark): discard.
    Duplicate,
    /// A later message of the channel than the next one expected: the caller keeps it and
    /// presents it again once the earlier ones arrived ([`Matcher::next_expected`]). Only a
    /// replicated job sees this: after a master's failure its successor's messages may be
    /// read before the last ones the old master wrote on another connection.
    Early,
}

/// The matching engine of one process. `R` identifies a posted receive (a request handle),
/// `P` is the payload of an eager message.
///
/// Unexpected messages are kept in one FIFO per (communicator, source), each entry stamped
/// with its arrival number: a receive that names its source looks at that queue only (its
/// head, in the common case), and an `ANY_SOURCE` receive takes the earliest arrival among
/// the queues' first matching entries. A sender running far ahead of its receiver therefore
/// costs O(1) per receive, not O(backlog).
#[derive(Debug)]
pub struct Matcher<R, P> {
    posted: VecDeque<(Pattern, R)>,
    unexpected: HashMap<(u32, i32), SourceQueue<P>, BuildHasherDefault<KeyHasher>>,
    unexpected_count: usize,
    arrivals: u64,
    next_send: SeqTable,
    next_recv: SeqTable,
}

impl<R, P> Default for Matcher<R, P> {
    fn default() -> Self {
        Matcher {
            posted: VecDeque::new(),
            unexpected: HashMap::default(),
            unexpected_count: 0,
            arrivals: 0,
            next_send: SeqTable::default(),
            next_recv: SeqTable::default(),
        }
    }
}

impl<R: PartialEq, P> Matcher<R, P> {
    pub fn new() -> Self {
        Self::default()
    }

    /// The sequence count to stamp on the next message to `dst` with `tag` on `comm`.
    pub fn next_send_seq(&mut self, comm: u32, dst: i32, tag: i32) -> u64 {
        let c = self.next_send.slot((comm, dst, tag));
        let s = *c;
        *c += 1;
        s
    }

    /// A message with this envelope arrived: discard it as a duplicate, give it to the
    /// earliest fitting posted receive (which is removed), or tell the caller to queue it with
    /// [`Matcher::enqueue`] before anything else happens (the split lets the caller copy the
    /// data straight into a matched receive's buffer without an intermediate allocation).
    pub fn arrive(&mut self, env: &Envelope) -> Arrival<R> {
        let next = self.next_recv.slot((env.comm, env.src, env.tag));
        if env.seq < *next {
            return Arrival::Duplicate;
        }
        if env.seq > *next {
            return Arrival::Early;
        }
        *next = env.seq + 1;
        match self.posted.iter().position(|(p, _)| p.accepts(env)) {
            // The oldest posted receive (the usual case) leaves without moving the others.
            Some(0) => Arrival::Matched(self.posted.pop_front().expect("index from position").1),
            Some(i) => Arrival::Matched(self.posted.remove(i).expect("index from position").1),
            None => Arrival::Unmatched,
        }
    }

    /// The sequence count of the next message expected on (communicator, source, tag).
    pub fn next_expected(&self, comm: u32, src: i32, tag: i32) -> u64 {
        self.next_recv.get((comm, src, tag))
    }

    /// Like [`Matcher::arrive`], but only when the message is next on its channel and a
    /// posted receive takes it; otherwise nothing changes. Returns the receive with its
    /// pattern and place in the posted queue, for [`Matcher::unarrive`].
    pub fn arrive_if_matched(&mut self, env: &Envelope) -> Option<(R, Pattern, usize)> {
        let key = (env.comm, env.src, env.tag);
        if self.next_recv.get(key) != env.seq {
            return None;
        }
        let i = self.posted.iter().position(|(p, _)| p.accepts(env))?;
        let (pat, r) = self.posted.remove(i).expect("index from position");
        *self.next_recv.slot(key) = env.seq + 1;
        Some((r, pat, i))
    }

    /// Undoes [`Matcher::arrive_if_matched`]: the message never came after all (its sender
    /// died half-way through it; a replica will send it again). Returns false, changing
    /// nothing, when a later message of the channel was accepted since.
    pub fn unarrive(&mut self, env: &Envelope, pat: Pattern, pos: usize, req: R) -> bool {
        let key = (env.comm, env.src, env.tag);
        if self.next_recv.get(key) != env.seq + 1 {
            return false;
        }
        *self.next_recv.slot(key) = env.seq;
        let at = pos.min(self.posted.len());
        self.posted.insert(at, (pat, req));
        true
    }

    /// Queues a message that [`Matcher::arrive`] reported unmatched.
    pub fn enqueue(&mut self, env: Envelope, body: Body<P>) {
        let n = self.arrivals;
        self.arrivals += 1;
        self.unexpected_count += 1;
        self.unexpected.entry((env.comm, env.src)).or_default().push_back((n, env, body));
    }

    /// Delivers a message whose [`Matcher::arrive`] reported it unmatched but whose data was
    /// still streaming in: it goes to the earliest fitting receive posted since, or to the
    /// unexpected queue. (Per-source order holds: a source's next message cannot arrive
    /// before this one is complete, they share one FIFO channel.)
    pub fn deliver_late(&mut self, env: Envelope, body: Body<P>) -> Option<(R, Body<P>)> {
        match self.posted.iter().position(|(p, _)| p.accepts(&env)) {
            Some(i) => {
                let (_, r) = self.posted.remove(i).expect("index from position");
                Some((r, body))
            }
            None => {
                self.enqueue(env, body);
                None
            }
        }
    }

    /// Where the earliest unexpected message fitting `pat` is: (queue key, index).
    fn find(&self, pat: Pattern) -> Option<((u32, i32), usize)> {
        if self.unexpected_count == 0 {
            return None;
        }
        let first_fit = |q: &SourceQueue<P>| q.iter().position(|(_, e, _)| pat.accepts(e));
        match pat.src {
            Some(s) => {
                let key = (pat.comm, s);
                let q = self.unexpected.get(&key)?;
                first_fit(q).map(|i| (key, i))
            }
            None => self
                .unexpected
                .iter()
                .filter(|(k, _)| k.0 == pat.comm)
                .filter_map(|(k, q)| first_fit(q).map(|i| (q[i].0, *k, i)))
                .min_by_key(|(arrival, _, _)| *arrival)
                .map(|(_, k, i)| (k, i)),
        }
    }

    /// Posts a receive. If an unexpected message fits, the earliest one is removed and
    /// returned and the receive is not queued; otherwise the receive waits.
    pub fn post(&mut self, pat: Pattern, req: R) -> Option<(Envelope, Body<P>)> {
        if let Some(m) = self.take(pat) {
            return Some(m);
        }
        self.posted.push_back((pat, req));
        None
    }

    /// The earliest unexpected message that fits, left in place (MPI_Probe).
    pub fn probe(&self, pat: Pattern) -> Option<&Envelope> {
        let (k, i) = self.find(pat)?;
        self.unexpected.get(&k).map(|q| &q[i].1)
    }

    /// Removes and returns the earliest unexpected message that fits (MPI_Mprobe, or the
    /// first half of a receive).
    pub fn take(&mut self, pat: Pattern) -> Option<(Envelope, Body<P>)> {
        let (k, i) = self.find(pat)?;
        let q = self.unexpected.get_mut(&k)?;
        let (_, env, body) = if i == 0 { q.pop_front()? } else { q.remove(i)? };
        // An emptied queue is kept (with its allocation) for the source's next unexpected
        // message: a receiver running behind its sender takes every message this way.
        self.unexpected_count -= 1;
        Some((env, body))
    }

    /// Withdraws a posted receive that has not matched yet. Returns whether it was found.
    pub fn cancel(&mut self, req: &R) -> bool {
        match self.posted.iter().position(|(_, r)| r == req) {
            Some(i) => {
                self.posted.remove(i);
                true
            }
            None => false,
        }
    }

    /// Number of receives waiting for a message.
    pub fn posted_len(&self) -> usize {
        self.posted.len()
    }

    /// Number of messages waiting for a receive.
    pub fn unexpected_len(&self) -> usize {
        self.unexpected_count
    }

    /// Posted receives, in posting order.
    pub fn posted(&self) -> impl Iterator<Item = (&Pattern, &R)> {
        self.posted.iter().map(|(p, r)| (p, r))
    }

    /// Every sequence counter, for a checkpoint: (communicator, destination, tag, next
    /// sequence to stamp) for sends and (communicator, source, tag, next sequence expected)
    /// for receives, each list sorted.
    pub fn sequences(&self) -> (Vec<SeqEntry>, Vec<SeqEntry>) {
        (self.next_send.entries(), self.next_recv.entries())
    }

    /// Sets the sequence counters from a checkpoint's (see [`Matcher::sequences`]): what
    /// follows is numbered as if the process had run up to it.
    pub fn restore_sequences(&mut self, send: &[SeqEntry], recv: &[SeqEntry]) {
        self.next_send = SeqTable::from_entries(send);
        self.next_recv = SeqTable::from_entries(recv);
    }

    /// The envelopes of the messages waiting for a receive (no order).
    pub fn unexpected_envelopes(&self) -> impl Iterator<Item = &Envelope> {
        self.unexpected.values().flat_map(|q| q.iter().map(|(_, e, _)| e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// arrive + enqueue, as the device does.
    fn arrive<P>(m: &mut Matcher<u32, P>, e: Envelope, p: P) -> Arrival<u32> {
        let a = m.arrive(&e);
        if a == Arrival::Unmatched {
            m.enqueue(e, Body::Eager(p));
        }
        a
    }

    fn env(src: i32, tag: i32, seq: u64) -> Envelope {
        Envelope { comm: 0, src, tag, seq, len: 0 }
    }
    fn pat(src: Option<i32>, tag: Option<i32>) -> Pattern {
        Pattern { comm: 0, src, tag }
    }

    #[test]
    fn posted_receive_takes_arrival() {
        let mut m: Matcher<u32, &str> = Matcher::new();
        assert!(m.post(pat(Some(1), Some(5)), 7).is_none());
        assert_eq!(arrive(&mut m, env(1, 4, 0), "no"), Arrival::Unmatched);
        assert_eq!(arrive(&mut m, env(1, 5, 0), "yes"), Arrival::Matched(7));
        assert_eq!(m.unexpected_len(), 1);
        assert_eq!(m.posted_len(), 0);
    }

    #[test]
    fn wildcard_takes_earliest_unexpected() {
        let mut m: Matcher<u32, u32> = Matcher::new();
        arrive(&mut m, env(2, 1, 0), 20);
        arrive(&mut m, env(1, 1, 0), 10);
        assert_eq!(m.probe(pat(None, None)).unwrap().src, 2);
        assert_eq!(m.post(pat(None, Some(1)), 0).unwrap().1, Body::Eager(20));
        assert_eq!(m.post(pat(None, None), 0).unwrap().1, Body::Eager(10));
    }

    #[test]
    fn different_communicators_never_match() {
        let mut m: Matcher<u32, u32> = Matcher::new();
        m.post(Pattern { comm: 1, src: None, tag: None }, 1);
        assert_eq!(arrive(&mut m, env(0, 0, 0), 0), Arrival::Unmatched);
    }

    #[test]
    fn duplicates_are_discarded() {
        let mut m: Matcher<u32, u32> = Matcher::new();
        assert_eq!(arrive(&mut m, env(1, 0, 0), 0), Arrival::Unmatched);
        assert_eq!(arrive(&mut m, env(1, 0, 1), 1), Arrival::Unmatched);
        assert_eq!(arrive(&mut m, env(1, 0, 0), 0), Arrival::Duplicate);
        assert_eq!(m.arrive(&env(1, 0, 1)), Arrival::Duplicate);
        // other tag, other source: own counters
        assert_eq!(arrive(&mut m, env(1, 1, 0), 0), Arrival::Unmatched);
        assert_eq!(arrive(&mut m, env(2, 0, 0), 0), Arrival::Unmatched);
        assert_eq!(m.unexpected_len(), 4);
    }

    #[test]
    fn a_match_can_be_undone_when_its_sender_dies_mid_message() {
        let mut m: Matcher<u32, u32> = Matcher::new();
        m.post(pat(Some(1), None), 7);
        m.post(pat(None, None), 8);
        assert_eq!(m.arrive_if_matched(&env(1, 0, 1)), None); // not its turn
        let (r, p, i) = m.arrive_if_matched(&env(1, 0, 0)).unwrap();
        assert_eq!((r, i), (7, 0));
        assert!(m.unarrive(&env(1, 0, 0), p, i, r));
        // The resent copy goes to the same receive.
        assert_eq!(m.arrive(&env(1, 0, 0)), Arrival::Matched(7));
        assert_eq!(m.arrive(&env(2, 0, 0)), Arrival::Matched(8));
        assert!(!m.unarrive(&env(1, 0, 5), p, 0, 9));
    }

    #[test]
    fn a_later_message_waits_for_the_earlier_ones() {
        let mut m: Matcher<u32, u32> = Matcher::new();
        assert_eq!(m.arrive(&env(1, 0, 1)), Arrival::Early);
        assert_eq!(m.next_expected(0, 1, 0), 0);
        assert_eq!(arrive(&mut m, env(1, 0, 0), 0), Arrival::Unmatched);
        assert_eq!(m.next_expected(0, 1, 0), 1);
        assert_eq!(arrive(&mut m, env(1, 0, 1), 1), Arrival::Unmatched);
        assert_eq!(m.arrive(&env(1, 0, 1)), Arrival::Duplicate);
    }

    #[test]
    fn late_delivery_goes_to_a_receive_posted_meanwhile() {
        let mut m: Matcher<u32, u32> = Matcher::new();
        let e = env(1, 3, 0);
        assert_eq!(m.arrive(&e), Arrival::Unmatched); // data still streaming
        m.post(pat(Some(1), None), 9);
        assert_eq!(m.deliver_late(e, Body::Eager(5)), Some((9, Body::Eager(5))));
        let e2 = env(1, 3, 1);
        assert_eq!(m.arrive(&e2), Arrival::Unmatched);
        assert_eq!(m.deliver_late(e2, Body::Eager(6)), None);
        assert_eq!(m.unexpected_len(), 1);
    }

    #[test]
    fn cancel_withdraws() {
        let mut m: Matcher<u32, u32> = Matcher::new();
        m.post(pat(None, None), 3);
        assert!(m.cancel(&3));
        assert!(!m.cancel(&3));
        assert_eq!(arrive(&mut m, env(0, 0, 0), 1), Arrival::Unmatched);
    }

    #[test]
    fn sequences_are_listed_and_restored() {
        let mut m: Matcher<u32, ()> = Matcher::new();
        m.next_send_seq(0, 1, 0);
        m.next_send_seq(0, 1, 0);
        m.next_send_seq(2, 3, 7);
        assert!(matches!(m.arrive(&env(1, 0, 0)), Arrival::Unmatched));
        m.enqueue(env(1, 0, 0), Body::Eager(()));
        let (send, recv) = m.sequences();
        assert_eq!(send, vec![(0, 1, 0, 2), (2, 3, 7, 1)]);
        assert_eq!(recv, vec![(0, 1, 0, 1)]);
        assert_eq!(m.unexpected_envelopes().count(), 1);
        let mut n: Matcher<u32, ()> = Matcher::new();
        n.restore_sequences(&send, &recv);
        assert_eq!(n.next_send_seq(0, 1, 0), 2);
        assert_eq!(n.next_send_seq(2, 3, 7), 1);
        assert_eq!(n.next_expected(0, 1, 0), 1);
        assert!(matches!(n.arrive(&env(1, 0, 0)), Arrival::Duplicate));
    }

    #[test]
    fn send_sequences_per_destination_and_tag() {
        let mut m: Matcher<u32, u32> = Matcher::new();
        assert_eq!(m.next_send_seq(0, 1, 0), 0);
        assert_eq!(m.next_send_seq(0, 1, 0), 1);
        assert_eq!(m.next_send_seq(0, 1, 1), 0);
        assert_eq!(m.next_send_seq(0, 2, 0), 0);
        assert_eq!(m.next_send_seq(1, 1, 0), 0);
    }

    // Reference model: the matching MPI promises, checked on random interleavings of sends
    // (from 3 sources, 2 tags, in per-source order) and receives with wildcards.
    #[derive(Debug, Clone)]
    enum Op {
        Send(i32, i32),
        Recv(Option<i32>, Option<i32>),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0..3i32, 0..2i32).prop_map(|(s, t)| Op::Send(s, t)),
            (proptest::option::of(0..3i32), proptest::option::of(0..2i32)).prop_map(|(s, t)| Op::Recv(s, t)),
        ]
    }

    proptest! {
        #[test]
        fn non_overtaking_and_fifo_receives(ops in proptest::collection::vec(op(), 0..60)) {
            let mut m: Matcher<usize, (i32, i32, u64)> = Matcher::new();
            let mut sent: HashMap<(i32, i32), u64> = HashMap::new();
            let mut delivered: Vec<(usize, (i32, i32, u64))> = Vec::new();
            let mut recvs: Vec<Pattern> = Vec::new();
            for o in ops {
                match o {
                    Op::Send(s, t) => {
                        let c = sent.entry((s, t)).or_insert(0);
                        let seq = *c; *c += 1;
                        let e = env(s, t, seq);
                        match m.arrive(&e) {
                            Arrival::Matched(r) => delivered.push((r, (s, t, seq))),
                            Arrival::Unmatched => m.enqueue(e, Body::Eager((s, t, seq))),
                            Arrival::Duplicate | Arrival::Early => prop_assert!(false, "sent in order, once"),
                        }
                    }
                    Op::Recv(s, t) => {
                        let id = recvs.len();
                        recvs.push(pat(s, t));
                        if let Some((_, Body::Eager(p))) = m.post(pat(s, t), id) {
                            delivered.push((id, p));
                        }
                    }
                }
            }
            // every delivery fits its pattern
            for (r, (s, t, _)) in &delivered {
                prop_assert!(recvs[*r].accepts(&env(*s, *t, 0)));
            }
            // per (source, tag), deliveries come in sequence order, without gaps from 0
            let mut per: HashMap<(i32, i32), Vec<(usize, u64)>> = HashMap::new();
            for (r, (s, t, q)) in &delivered {
                per.entry((*s, *t)).or_default().push((*r, *q));
            }
            for v in per.values_mut() {
                v.sort();
                for (i, (_, q)) in v.iter().enumerate() {
                    prop_assert_eq!(*q, i as u64);
                }
            }
            // a message still unexpected never fits a receive still posted
            for (p, _) in m.posted() {
                prop_assert!(m.probe(*p).is_none());
            }
        }
    }

    proptest! {
        /// The bucketed unexpected queues take exactly what a naive single queue would:
        /// the earliest-arrived message that fits, whatever the mix of sources, tags,
        /// communicators and wildcards.
        #[test]
        fn bucketed_queues_equal_a_single_queue(ops in proptest::collection::vec(
            (any::<bool>(), 0..2u32, 0..4i32, 0..3i32, any::<bool>(), any::<bool>()), 0..80)) {
            let mut m: Matcher<usize, u64> = Matcher::new();
            let mut model: Vec<(Envelope, u64)> = Vec::new();
            let mut seqs: HashMap<(u32, i32, i32), u64> = HashMap::new();
            let mut id = 0u64;
            for (is_send, comm, src, tag, any_src, any_tag) in ops {
                if is_send {
                    let c = seqs.entry((comm, src, tag)).or_insert(0);
                    let e = Envelope { comm, src, tag, seq: *c, len: 0 };
                    *c += 1;
                    id += 1;
                    prop_assert_eq!(m.arrive(&e), Arrival::Unmatched);
                    m.enqueue(e, Body::Eager(id));
                    model.push((e, id));
                } else {
                    let pat = Pattern { comm, src: (!any_src).then_some(src), tag: (!any_tag).then_some(tag) };
                    let want = model.iter().position(|(e, _)| pat.accepts(e)).map(|i| model.remove(i));
                    let got = m.take(pat).map(|(e, b)| match b { Body::Eager(v) => (e, v), _ => unreachable!() });
                    prop_assert_eq!(got, want);
                    prop_assert_eq!(m.unexpected_len(), model.len());
                }
            }
        }
    }
}
