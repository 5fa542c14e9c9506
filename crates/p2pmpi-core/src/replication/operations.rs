//! Operation numbering of a fault-aware replicated rank (`Policy::Notify` with `-r R`): the
//! program's operations (sends, receives, immediate collectives) get numbers in program order,
//! the same on every replica of the rank, so that a master's failure of an operation (a lost
//! rank, a revocation) names the operation every replica fails alike. A replica follows its
//! master's failures; one whose success the program already took cannot be followed, and the
//! replica leaves ([`Follow::Diverged`]).
//!
//! `R` is the driver's request handle.

use crate::matching::FastMap;
use std::collections::{BTreeMap, BTreeSet};
use std::hash::Hash;

/// How many taken operations a replica remembers (to notice a failure it cannot follow).
pub const TAKEN_WINDOW: usize = 1 << 16;

/// What a master's failure of an operation means for this replica.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Follow<R> {
    /// This replica has not posted it yet: the failure applies at its post.
    NotReached,
    /// The program took its success here already: this replica cannot follow its master.
    Diverged,
    /// It fails here too: its request, if the program has not taken it yet.
    Fail(Option<R>),
}

/// The numbered operations of one replica.
#[derive(Debug, Clone)]
pub struct Operations<R> {
    /// Operations posted so far.
    posted: u64,
    op_req: BTreeMap<u64, R>,
    req_op: FastMap<R, u64>,
    /// Operations whose success the program took, the latest [`TAKEN_WINDOW`].
    taken_ok: BTreeSet<u64>,
}

impl<R> Default for Operations<R> {
    fn default() -> Self {
        Operations { posted: 0, op_req: BTreeMap::new(), req_op: FastMap::default(), taken_ok: BTreeSet::new() }
    }
}

impl<R: Copy + Eq + Hash> Operations<R> {
    /// No operation posted yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// The number of the operation being posted, when operations are numbered (`numbered`: a
    /// fault-aware job, and not a step of an immediate collective, posted when the progress
    /// engine runs, which differs between replicas).
    pub fn next(&mut self, numbered: bool) -> Option<u64> {
        if !numbered {
            return None;
        }
        let op = self.posted;
        self.posted += 1;
        Some(op)
    }

    /// Request `req` stands for operation `op`.
    pub fn number(&mut self, req: R, op: u64) {
        self.op_req.insert(op, req);
        self.req_op.insert(req, op);
    }

    /// The operation request `req` stands for.
    pub fn op_of(&self, req: &R) -> Option<u64> {
        self.req_op.get(req).copied()
    }

    /// Whether no request stands for an operation.
    pub fn is_empty(&self) -> bool {
        self.req_op.is_empty()
    }

    /// The program took request `req`'s outcome (`ok`: a success; `follows`: this replica
    /// follows its master, and must remember the success).
    pub fn taken(&mut self, req: R, ok: bool, follows: bool) {
        let Some(op) = self.req_op.remove(&req) else { return };
        self.op_req.remove(&op);
        if ok && follows {
            self.taken_ok.insert(op);
            if self.taken_ok.len() > TAKEN_WINDOW {
                self.taken_ok.pop_first();
            }
        }
    }

    /// Its master failed operation `op`: what it means here (`follows`: this replica follows
    /// its master).
    pub fn master_failed(&self, op: u64, follows: bool) -> Follow<R> {
        if op >= self.posted {
            Follow::NotReached
        } else if follows && self.taken_ok.contains(&op) {
            Follow::Diverged
        } else {
            Follow::Fail(self.op_req.get(&op).copied())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operations_are_numbered_in_order_and_a_taken_success_cannot_fail() {
        let mut ops: Operations<u32> = Operations::new();
        assert_eq!(ops.next(false), None, "not numbered: nothing counted");
        assert_eq!(ops.next(true), Some(0));
        ops.number(10, 0);
        assert_eq!(ops.next(true), Some(1));
        ops.number(11, 1);
        assert_eq!(ops.op_of(&11), Some(1));
        assert_eq!(ops.master_failed(2, true), Follow::NotReached);
        assert_eq!(ops.master_failed(1, true), Follow::Fail(Some(11)));
        ops.taken(10, true, true);
        assert_eq!(ops.master_failed(0, true), Follow::Diverged);
        // A master (it does not follow) remembers no success.
        ops.taken(11, true, false);
        assert_eq!(ops.master_failed(1, false), Follow::Fail(None));
        assert!(ops.is_empty());
    }
}
