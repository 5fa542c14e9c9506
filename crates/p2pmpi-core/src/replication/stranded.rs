//! A replica stranded by a rank lost whole (a fault-aware replicated job): a non-master waits
//! for a message of a rank whose replicas all died, a message its master received before they
//! did. The message will never come. Once the master went past the receive (it committed a
//! send this replica has not reached: a failure of the receive would have been told first),
//! or finished the program, the replica cannot follow its master: the verdict says how it ends.

/// How a stranded replica ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stranded {
    /// Its master finished the program: nothing is left for this replica to do; it ends as a
    /// replica that finished (its peers no longer wait for it).
    Finished { op: u64 },
    /// Its master went past operation `op`, a receive from rank `src`: this replica leaves
    /// as a replica that failed (its rank goes on with its master).
    Diverged { op: u64, src: i32 },
}

impl Stranded {
    /// Why the replica leaves, in words.
    pub fn why(&self) -> String {
        match *self {
            Stranded::Finished { op } => format!("stranded at operation {op} after its master finished"),
            Stranded::Diverged { op, src } => format!(
                "its master went past operation {op}, a receive from rank {src}, whose message never reached this \
                 replica (every replica of rank {src} died)"
            ),
        }
    }
}

/// The verdict on a non-master replica. `master_done`: its master finished the program;
/// `master_ahead`: its master is ahead of it. `receive` finds a posted receive (its operation
/// and source) from a rank lost whole, asked only when the master is ahead or done;
/// `schedule` finds an immediate collective its master completed that still waits here for a
/// lost rank's message. `None`: not stranded.
pub fn verdict(
    master_done: bool,
    master_ahead: bool,
    receive: impl FnOnce() -> Option<(u64, i32)>,
    schedule: impl FnOnce() -> Option<(u64, i32)>,
) -> Option<Stranded> {
    let ahead = master_ahead || master_done;
    let (op, src) = ahead.then(receive).flatten().or_else(schedule)?;
    Some(if master_done { Stranded::Finished { op } } else { Stranded::Diverged { op, src } })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replica_is_stranded_only_once_its_master_is_past_the_receive() {
        let recv = || Some((4, 2));
        let none = || None;
        assert_eq!(verdict(false, false, recv, none), None, "the master may still fail the receive");
        assert_eq!(verdict(false, true, recv, none), Some(Stranded::Diverged { op: 4, src: 2 }));
        assert_eq!(verdict(true, false, recv, none), Some(Stranded::Finished { op: 4 }));
        // A completed immediate collective strands it whether or not the master is ahead.
        assert_eq!(verdict(false, false, none, || Some((9, 1))), Some(Stranded::Diverged { op: 9, src: 1 }));
        assert_eq!(verdict(false, true, none, none), None);
        assert!(Stranded::Diverged { op: 4, src: 2 }.why().contains("every replica of rank 2 died"));
    }
}
