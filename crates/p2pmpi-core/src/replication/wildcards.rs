//! Wildcard receives of a replicated rank (thesis §4.3.3): a receive from `ANY_SOURCE` is a
//! choice point, and every replica must match the message its master matched. The master
//! (or a replica that may decide, after a takeover) posts the receive as it is and records
//! its choice when it matches; a replica that follows posts it exact (the master's source and
//! tag) once the master's choice arrived, and keeps it deferred until then. Deferred receives
//! are taken in the order of their choice points: a later one waits for an earlier one.
//!
//! [`Wildcards`] holds the deferred receives and says, for each, how to post it; the driver
//! (the library's engine, the simulator) posts it. `R` is the driver's request handle.

use super::endpoint::Payload;
use super::failures;
use super::{Endpoint, Outcome};
use crate::matching::Pattern;
use std::collections::BTreeMap;

/// How to post a wildcard receive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Post<R> {
    /// The master's choice is known: post `pat`, the exact pattern of its match.
    Exact { req: R, pat: Pattern },
    /// This process decides: post `pat` as it is, and record that choice point `point` is
    /// decided by what it matches.
    Decide { req: R, pat: Pattern, point: u64 },
    /// The master withdrew this receive with an error (a fault-aware job): so does this
    /// replica, with the master's `outcome`.
    Fail { req: R, outcome: Outcome },
}

/// The pattern of a match whose outcome is `o`: its source and tag, exact.
pub fn exact(pat: Pattern, o: Outcome) -> Pattern {
    match o {
        Some((src, tag, _)) => Pattern { comm: pat.comm, src: Some(src), tag: Some(tag) },
        None => pat,
    }
}

/// The deferred wildcard receives of one replica, by choice point.
#[derive(Debug, Clone)]
pub struct Wildcards<R> {
    deferred: BTreeMap<u64, (R, Pattern)>,
}

impl<R> Default for Wildcards<R> {
    fn default() -> Self {
        Wildcards { deferred: BTreeMap::new() }
    }
}

impl<R: Copy + PartialEq> Wildcards<R> {
    /// No deferred receive.
    pub fn new() -> Self {
        Self::default()
    }

    /// A wildcard receive `req` of `pat` is posted by the program: how to post it now, or
    /// `None` when it waits for its master's choice (it comes back from [`Self::next`]).
    pub fn receive<P: Payload, U: Copy + PartialEq>(
        &mut self,
        ep: &mut Endpoint<P, U>,
        req: R,
        pat: Pattern,
    ) -> Option<Post<R>> {
        let point = ep.choice_point();
        match ep.take_choice(point) {
            // Decided already (by this replica's master, or by the master it took over
            // from): followed, and relayed to this process's own replicas.
            Some(o) => {
                ep.decided(pat.comm, point, o);
                Some(classify(req, pat, o))
            }
            None if ep.may_decide() => Some(Post::Decide { req, pat, point }),
            None => {
                self.deferred.insert(point, (req, pat));
                None
            }
        }
    }

    /// The next deferred receive that can be posted now (its master's choice arrived, or
    /// this process decides after a takeover), in the order of the choice points.
    pub fn next<P: Payload, U: Copy + PartialEq>(&mut self, ep: &mut Endpoint<P, U>) -> Option<Post<R>> {
        let (&point, &(req, pat)) = self.deferred.first_key_value()?;
        let post = match ep.take_choice(point) {
            Some(o) => {
                ep.decided(pat.comm, point, o);
                classify(req, pat, o)
            }
            None if ep.may_decide() => Post::Decide { req, pat, point },
            // Points are followed in order: a later one waits for this one.
            None => return None,
        };
        self.deferred.remove(&point);
        Some(post)
    }

    /// Receive `req` is withdrawn (cancelled, or failed): it is no longer deferred.
    pub fn withdraw(&mut self, req: R) {
        self.deferred.retain(|_, (q, _)| *q != req);
    }

    /// Whether no receive is deferred.
    pub fn is_empty(&self) -> bool {
        self.deferred.is_empty()
    }

    /// How many receives are deferred.
    pub fn len(&self) -> usize {
        self.deferred.len()
    }
}

fn classify<R>(req: R, pat: Pattern, o: Outcome) -> Post<R> {
    if failures::outcome_failure(o).is_some() {
        Post::Fail { req, outcome: o }
    } else {
        Post::Exact { req, pat: exact(pat, o) }
    }
}

#[cfg(test)]
mod tests {
    use super::super::endpoint::{Config, Input};
    use super::super::Layout;
    use super::*;
    use crate::machine::Machine;

    const T: std::time::Duration = std::time::Duration::ZERO;

    /// No data: the test sends nothing.
    #[derive(Debug, Clone)]
    struct NoData;

    impl Payload for NoData {
        fn len(&self) -> usize {
            0
        }
        fn is_lent(&self) -> bool {
            false
        }
        fn share(&self) -> NoData {
            NoData
        }
        fn to_owned_copy(&self) -> NoData {
            NoData
        }
    }

    fn pat() -> Pattern {
        Pattern { comm: 4, src: None, tag: Some(7) }
    }

    #[test]
    fn a_master_decides_and_a_follower_waits_for_the_choice_in_order() {
        let layout = Layout::new(2, 2);
        // Slot 0 is rank 0's master: it decides its wildcard receives itself.
        let mut master: Endpoint<NoData, u32> = Endpoint::new(layout, 0, Config::default());
        let mut w: Wildcards<u32> = Wildcards::new();
        assert_eq!(w.receive(&mut master, 1, pat()), Some(Post::Decide { req: 1, pat: pat(), point: 0 }));
        assert!(w.is_empty());
        // Slot 1 follows it: two receives wait, in order.
        let mut follower: Endpoint<NoData, u32> = Endpoint::new(layout, 1, Config::default());
        assert_eq!(w.receive(&mut follower, 1, pat()), None);
        assert_eq!(w.receive(&mut follower, 2, pat()), None);
        assert_eq!(w.len(), 2);
        assert_eq!(w.next(&mut follower), None, "no choice arrived yet");
        // The master's choice of the second point alone does not release the first.
        assert!(follower.handle_input(T, Input::Choice { from: 0, point: 1, outcome: Some((1, 7, 8)) }).is_ok());
        assert_eq!(w.next(&mut follower), None);
        assert!(follower.handle_input(T, Input::Choice { from: 0, point: 0, outcome: Some((1, 7, 16)) }).is_ok());
        let exact = Pattern { comm: 4, src: Some(1), tag: Some(7) };
        assert_eq!(w.next(&mut follower), Some(Post::Exact { req: 1, pat: exact }));
        assert_eq!(w.next(&mut follower), Some(Post::Exact { req: 2, pat: exact }));
        assert_eq!(w.next(&mut follower), None);
        assert!(w.is_empty());
        // A withdrawn receive is forgotten.
        assert_eq!(w.receive(&mut follower, 3, pat()), None);
        w.withdraw(3);
        assert!(w.is_empty());
    }

    #[test]
    fn a_choice_told_after_many_tests_still_posts_the_deferred_receive() {
        // The follower's wildcard receive waits for its master's choice while the program
        // polls it with tests, each a choice point the master decides at once ("not yet");
        // the receive's own choice comes when the master's receive completes, after all of
        // them — here more than the replicas keep of the outcomes they followed.
        let layout = Layout::new(2, 2);
        let mut follower: Endpoint<NoData, u32> = Endpoint::new(layout, 1, Config::default());
        let mut w: Wildcards<u32> = Wildcards::new();
        assert_eq!(w.receive(&mut follower, 1, pat()), None);
        let tests = super::super::FOLLOWED_WINDOW as u64 + 100;
        for _ in 0..tests {
            let c = follower.choice_point();
            assert!(follower.handle_input(T, Input::Choice { from: 0, point: c, outcome: None }).is_ok());
            assert_eq!(follower.take_choice(c), Some(None));
        }
        assert!(follower.handle_input(T, Input::Choice { from: 0, point: 0, outcome: Some((1, 7, 0)) }).is_ok());
        let exact = Pattern { comm: 4, src: Some(1), tag: Some(7) };
        assert_eq!(w.next(&mut follower), Some(Post::Exact { req: 1, pat: exact }));
        assert!(w.is_empty());
    }
}
