use super::*;
use proptest::prelude::*;

const T0: Time = Duration::ZERO;

/// A coordinator with `peers` peers (peer i on host i) and `ranks × degree` processes: slot
/// `rank·degree + j` on host `rank·degree + j`.
fn job(cfg: Config, peers: u32) -> Coordinator {
    let mut c = Coordinator::new(cfg.clone()).unwrap();
    for p in 0..peers {
        c.handle_input(T0, Input::PeerUp { peer: p, host: p }).unwrap();
    }
    for rank in 0..cfg.ranks {
        for j in 0..cfg.degree {
            let slot = (rank * cfg.degree + j) as usize;
            c.handle_input(T0, Input::Joined { slot, rank, host: slot as u32 }).unwrap();
        }
    }
    assert!(c.drain_outputs().is_empty());
    c
}

/// Every rank saves its piece of `step`; returns the stores asked.
fn save(c: &mut Coordinator, step: u64, bytes: u64) -> Vec<Output> {
    for rank in 0..c.config().ranks {
        c.handle_input(T0, Input::Piece { step, rank, bytes }).unwrap();
    }
    c.drain_outputs()
}

/// Confirms every store of `outs`; returns what followed.
fn confirm(c: &mut Coordinator, outs: &[Output]) -> Vec<Output> {
    let mut after = Vec::new();
    for o in outs {
        if let Output::Store { step, rank, to, .. } = *o {
            c.handle_input(T0, Input::Stored { step, rank, peer: to }).unwrap();
            after.extend(c.drain_outputs());
        }
    }
    after
}

fn stores(outs: &[Output]) -> Vec<(u64, u32, Peer)> {
    outs.iter()
        .filter_map(|o| match *o {
            Output::Store { step, rank, to, .. } => Some((step, rank, to)),
            _ => None,
        })
        .collect()
}

#[test]
fn copies_avoid_the_ranks_hosts_and_spread_then_old_generations_go() {
    let mut c = job(Config { store_timeout: None, ..Config::new(2, 2) }, 8);
    let outs = save(&mut c, 10, 100);
    let s = stores(&outs);
    assert_eq!(s.len(), 4, "{outs:?}");
    for rank in 0..2u32 {
        let mine: Vec<Peer> = s.iter().filter(|x| x.1 == rank).map(|x| x.2).collect();
        assert_eq!(mine.len(), 2);
        assert_ne!(mine[0], mine[1]);
        // Hosts 0..4 run the processes (rank 0 on 0 and 1, rank 1 on 2 and 3).
        assert!(mine.iter().all(|p| !(rank * 2..rank * 2 + 2).contains(p)), "rank {rank}: {mine:?}");
    }
    // The least loaded peers first (ties by number), not two on the hosts of one rank: rank 0
    // takes peer 2, then 4 (3 runs rank 1 like 2); rank 1 takes 0, then 5.
    let mut all: Vec<Peer> = s.iter().map(|x| x.2).collect();
    all.sort_unstable();
    assert_eq!(all, vec![0, 2, 4, 5]);
    let outs2 = save(&mut c.clone(), 11, 100);
    let mut next: Vec<Peer> = stores(&outs2).iter().map(|x| x.2).collect();
    next.sort_unstable();
    assert_eq!(next, vec![1, 3, 6, 7], "the next copies go to the peers holding nothing");
    assert_eq!(c.used_bytes(), 400);
    // Not complete until the last copy is stored.
    let (last, first) = outs.split_last().unwrap();
    assert!(confirm(&mut c, first).is_empty());
    assert_eq!(c.complete(), None);
    assert_eq!(confirm(&mut c, std::slice::from_ref(last)), vec![Output::Complete { step: 10 }]);
    assert_eq!(c.complete(), Some(10));
    // The next generation completes: the old one's copies are deleted, nothing else.
    let outs = save(&mut c, 20, 100);
    let after = confirm(&mut c, &outs);
    let deletes: Vec<&Output> = after.iter().filter(|o| matches!(o, Output::Delete { step: 10, .. })).collect();
    assert_eq!(deletes.len(), 4, "{after:?}");
    assert!(after.contains(&Output::Complete { step: 20 }));
    assert_eq!(c.generations(), vec![20]);
    assert_eq!(c.used_bytes(), 400);
    // A late piece of an older step is refused as stale.
    assert_eq!(c.handle_input(T0, Input::Piece { step: 15, rank: 0, bytes: 1 }), Err(Rejected::Stale { step: 15 }));
}

#[test]
fn the_copies_of_a_piece_are_not_on_the_hosts_of_one_rank() {
    // Four ranks × 2 on hosts 0..8, two spare peers 8 and 9. Least loaded first would put
    // rank 3's copies on peers 0 and 1, the hosts of rank 0: losing rank 0 (both hosts) would
    // lose rank 3's piece of the checkpoint it must restart from.
    let mut c = job(Config { store_timeout: None, ..Config::new(4, 2) }, 10);
    let outs = save(&mut c, 1, 10);
    confirm(&mut c, &outs);
    for rank in 0..4u32 {
        let hosts: Vec<Host> = c.copies(1, rank).iter().map(|x| x.0).collect();
        assert_eq!(hosts.len(), 2);
        // Host h runs rank h / 2.
        let ranks: Vec<u32> = hosts.iter().filter(|h| **h < 8).map(|h| h / 2).collect();
        assert!(ranks.len() < 2 || ranks[0] != ranks[1], "rank {rank}'s copies on {hosts:?}");
    }
}

#[test]
fn a_generation_over_the_quota_is_refused_and_the_complete_one_kept() {
    let cfg = Config { quota: Some(1000), store_timeout: None, ..Config::new(2, 1) };
    let mut c = job(cfg, 6);
    let outs = save(&mut c, 1, 200);
    assert_eq!(confirm(&mut c, &outs), vec![Output::Complete { step: 1 }]);
    assert_eq!(c.used_bytes(), 800);
    // Rank 0's piece of step 2 would need 800 + 2·200 bytes: refused, step 1 stays.
    c.handle_input(T0, Input::Piece { step: 2, rank: 0, bytes: 200 }).unwrap();
    let outs = c.drain_outputs();
    assert!(matches!(&outs[..], [Output::Refused { step: 2, reason }] if reason.contains("quota")), "{outs:?}");
    // The other rank's piece of the refused step is ignored.
    c.handle_input(T0, Input::Piece { step: 2, rank: 1, bytes: 200 }).unwrap();
    assert!(c.drain_outputs().is_empty());
    assert_eq!(c.complete(), Some(1));
    assert_eq!(c.generations(), vec![1]);
    assert_eq!(c.used_bytes(), 800);
    // A smaller state fits once the old generation is the only one.
    let cfg = Config { quota: Some(1000), store_timeout: None, ..Config::new(2, 1) };
    let mut c = job(cfg, 6);
    let outs = save(&mut c, 1, 100);
    confirm(&mut c, &outs);
    let outs = save(&mut c, 2, 100);
    assert_eq!(stores(&outs).len(), 4);
    assert!(confirm(&mut c, &outs).contains(&Output::Complete { step: 2 }));
}

#[test]
fn without_enough_hosts_a_generation_is_refused() {
    // Two ranks × two replicas on hosts 0..4, two copies each: only peers 4 and 5 are free of
    // rank 0's hosts... and peers 0..4 host the other rank: with 4 peers nothing fits at K = 3.
    let cfg = Config { copies: 3, store_timeout: None, ..Config::new(2, 2) };
    let mut c = job(cfg, 4);
    let outs = save(&mut c, 1, 10);
    assert!(
        outs.iter().any(|o| matches!(o, Output::Refused { step: 1, reason } if reason.contains("no peer"))),
        "{outs:?}"
    );
    assert!(c.generations().is_empty());
    assert_eq!(c.used_bytes(), 0);
    // Every store asked before the refusal is deleted again.
    let asked = stores(&outs).len();
    let deleted = outs.iter().filter(|o| matches!(o, Output::Delete { .. })).count();
    assert_eq!(asked, deleted, "{outs:?}");
}

#[test]
fn a_corrupt_copy_is_replaced_and_another_named() {
    let mut c = job(Config { store_timeout: None, ..Config::new(1, 1) }, 5);
    let outs = save(&mut c, 7, 50);
    confirm(&mut c, &outs);
    let copies = c.copies(7, 0);
    assert_eq!(copies.len(), 2);
    let (bad, good) = (copies[0].0, copies[1].0);
    c.handle_input(T0, Input::Corrupt { step: 7, rank: 0, peer: bad }).unwrap();
    let outs = c.drain_outputs();
    assert_eq!(outs[0], Output::Delete { step: 7, rank: 0, peer: bad });
    let store = outs.iter().find_map(|o| match *o {
        Output::Store { to, from, .. } => Some((to, from)),
        _ => None,
    });
    let (to, from) = store.expect("a new copy");
    assert_eq!(from, Some(good));
    assert!(to != bad && to != good && to != 0, "{to}");
    assert!(outs.contains(&Output::Fetch { step: 7, rank: 0, from: good }), "{outs:?}");
    // The bad peer is not asked again for this piece; the generation stays complete.
    assert_eq!(c.complete(), Some(7));
    c.handle_input(T0, Input::Stored { step: 7, rank: 0, peer: to }).unwrap();
    assert_eq!(c.copies(7, 0), vec![(good.min(to), true), (good.max(to), true)]);
    // A report on a copy never asked for is refused.
    assert!(c.handle_input(T0, Input::Corrupt { step: 7, rank: 0, peer: bad }).is_err());
}

#[test]
fn lost_peers_are_replaced_and_a_piece_with_no_copy_left_is_lost() {
    let mut c = job(Config { store_timeout: None, ..Config::new(1, 1) }, 4);
    let outs = save(&mut c, 1, 10);
    confirm(&mut c, &outs);
    let peers: Vec<Peer> = c.copies(1, 0).iter().map(|x| x.0).collect();
    c.handle_input(T0, Input::PeerDown { peer: peers[0] }).unwrap();
    let outs = c.drain_outputs();
    let s = stores(&outs);
    assert_eq!(s.len(), 1, "{outs:?}");
    // The only peer left that is not the rank's host nor a holder.
    let spare = (1..4).find(|p| !peers.contains(p)).unwrap();
    assert_eq!(s[0], (1, 0, spare));
    // Both holders gone: the copy being made cannot finish, the generation is lost.
    c.handle_input(T0, Input::PeerDown { peer: peers[1] }).unwrap();
    let outs = c.drain_outputs();
    assert!(outs.contains(&Output::Lost { step: 1, rank: 0 }), "{outs:?}");
    assert_eq!(c.complete(), None);
    // Then the rank losing its process is a failure, not a restart.
    c.handle_input(T0, Input::Died { slot: 0 }).unwrap();
    let outs = c.drain_outputs();
    assert!(
        matches!(&outs[..], [Output::Failed { reason }] if reason.contains("no checkpoint is complete")),
        "{outs:?}"
    );
    assert!(c.failed());
    assert_eq!(c.handle_input(T0, Input::PeerUp { peer: 9, host: 9 }), Err(Rejected::Failed));
}

#[test]
fn rebirth_at_a_complete_generation_and_master_only_once_caught_up() {
    let mut c = job(Config { store_timeout: None, ..Config::new(2, 2) }, 10);
    // Rank 1 loses its replica (slot 3): nothing until a generation completes.
    c.handle_input(T0, Input::Died { slot: 3 }).unwrap();
    assert!(c.drain_outputs().is_empty());
    let outs = save(&mut c, 5, 10);
    let after = confirm(&mut c, &outs);
    let births: Vec<&Output> = after.iter().filter(|o| matches!(o, Output::Rebirth { .. })).collect();
    assert_eq!(births.len(), 1, "{after:?}");
    let Output::Rebirth { rank: 1, step: 5, from, avoid } = births[0].clone() else { panic!("{births:?}") };
    assert_eq!(avoid, vec![2]);
    assert!(c.copies(5, 1).contains(&(from, true)));
    assert_eq!(c.pending_rebirths(1), 1);
    // No second rebirth while one is pending.
    let outs = save(&mut c, 6, 10);
    assert!(!confirm(&mut c, &outs).iter().any(|o| matches!(o, Output::Rebirth { .. })));
    c.handle_input(T0, Input::Reborn { slot: 9, rank: 1, host: 9 }).unwrap();
    assert_eq!(c.pending_rebirths(1), 0);
    assert_eq!(c.live(1), vec![2, 9]);
    // The master dies before the reborn replica caught up: the rank is lost, the job restarts.
    c.handle_input(T0, Input::Died { slot: 2 }).unwrap();
    let outs = c.drain_outputs();
    assert!(
        matches!(&outs[..], [Output::Restart { step: 6, attempt: 1, sources, reason }]
            if sources.len() == 2 && reason.contains("not caught up")),
        "{outs:?}"
    );
    // After the restart the old slots are unknown.
    assert_eq!(c.handle_input(T0, Input::Died { slot: 0 }), Err(Rejected::Slot(0)));
    for (slot, rank) in [(20, 0), (21, 0), (22, 1)] {
        c.handle_input(T0, Input::Joined { slot, rank, host: slot as u32 }).unwrap();
    }
    let outs = save(&mut c, 7, 10);
    let after = confirm(&mut c, &outs);
    assert!(after.iter().any(|o| matches!(o, Output::Rebirth { rank: 1, step: 7, .. })), "{after:?}");
    c.handle_input(T0, Input::Reborn { slot: 23, rank: 1, host: 8 }).unwrap();
    c.handle_input(T0, Input::CaughtUp { slot: 23 }).unwrap();
    c.handle_input(T0, Input::Died { slot: 22 }).unwrap();
    assert_eq!(c.drain_outputs(), vec![Output::Master { rank: 1, slot: 23 }]);
    assert_eq!(c.master(1), Some(23));
}

#[test]
fn a_rank_losing_every_replica_restarts_within_the_budget() {
    let cfg = Config { max_restarts: 1, store_timeout: None, ..Config::new(2, 1) };
    let mut c = job(cfg.clone(), 6);
    // r = 1 without a checkpoint: the first death fails the job, with the reason.
    let mut d = c.clone();
    d.handle_input(T0, Input::Died { slot: 1 }).unwrap();
    let outs = d.drain_outputs();
    assert!(
        matches!(&outs[..], [Output::Failed { reason }]
        if reason.contains("rank 1 lost every replica") && reason.contains("no checkpoint")),
        "{outs:?}"
    );
    // With a complete generation, a restart from it; an open newer one is dropped.
    let outs = save(&mut c, 1, 10);
    confirm(&mut c, &outs);
    let outs = save(&mut c, 2, 10);
    let pending = stores(&outs);
    c.handle_input(T0, Input::Died { slot: 1 }).unwrap();
    let outs = c.drain_outputs();
    assert_eq!(outs.iter().filter(|o| matches!(o, Output::Delete { step: 2, .. })).count(), pending.len());
    let Some(Output::Restart { step: 1, attempt: 1, sources, .. }) = outs.last() else { panic!("{outs:?}") };
    for (rank, src) in sources.iter().enumerate() {
        assert!(c.copies(1, rank as u32).contains(&(*src, true)));
    }
    assert_eq!(c.generations(), vec![1]);
    // A store of the dropped generation reported late is refused.
    let (s, r, p) = pending[0];
    assert!(c.handle_input(T0, Input::Stored { step: s, rank: r, peer: p }).is_err());
    c.handle_input(T0, Input::Joined { slot: 10, rank: 0, host: 0 }).unwrap();
    c.handle_input(T0, Input::Joined { slot: 11, rank: 1, host: 1 }).unwrap();
    // The budget (one restart) is spent: the next loss fails the job.
    c.handle_input(T0, Input::Died { slot: 10 }).unwrap();
    let outs = c.drain_outputs();
    assert!(matches!(&outs[..], [Output::Failed { reason }] if reason.contains("--max-restarts 1")), "{outs:?}");
}

#[test]
fn a_store_not_confirmed_in_time_goes_elsewhere() {
    let cfg = Config { store_timeout: Some(Duration::from_secs(5)), ..Config::new(1, 1) };
    let mut c = job(cfg, 5);
    let outs = save(&mut c, 1, 10);
    assert_eq!(c.poll_timeout(), Some(Duration::from_secs(5)));
    let s = stores(&outs);
    c.handle_input(Duration::from_secs(1), Input::Stored { step: 1, rank: 0, peer: s[0].2 }).unwrap();
    c.handle_timeout(Duration::from_secs(4));
    assert!(c.drain_outputs().is_empty());
    c.handle_timeout(Duration::from_secs(5));
    let outs = c.drain_outputs();
    let again = stores(&outs);
    assert_eq!(again.len(), 1, "{outs:?}");
    assert!(again[0].2 != s[0].2 && again[0].2 != s[1].2);
    assert_eq!(c.poll_timeout(), Some(Duration::from_secs(10)));
    c.handle_input(Duration::from_secs(6), Input::Stored { step: 1, rank: 0, peer: again[0].2 }).unwrap();
    assert_eq!(c.drain_outputs(), vec![Output::Complete { step: 1 }]);
    assert_eq!(c.poll_timeout(), None);
}

#[test]
fn bad_configurations_and_inputs_are_named() {
    assert_eq!(Coordinator::new(Config::new(0, 1)).unwrap_err(), ConfigError::Ranks);
    assert_eq!(Coordinator::new(Config::new(1, 0)).unwrap_err(), ConfigError::Degree);
    assert_eq!(Coordinator::new(Config { copies: 0, ..Config::new(1, 1) }).unwrap_err(), ConfigError::Copies);
    assert!(ConfigError::Copies.to_string().contains("--checkpoint-copies"));
    let mut c = job(Config::new(1, 1), 3);
    assert_eq!(c.handle_input(T0, Input::Piece { step: 1, rank: 5, bytes: 1 }), Err(Rejected::Rank(5)));
    assert_eq!(c.handle_input(T0, Input::Joined { slot: 0, rank: 0, host: 0 }), Err(Rejected::Duplicate(0)));
    assert_eq!(c.handle_input(T0, Input::PeerDown { peer: 77 }), Err(Rejected::Peer(77)));
    assert_eq!(c.handle_input(T0, Input::CaughtUp { slot: 4 }), Err(Rejected::Slot(4)));
    assert!(Rejected::Stale { step: 3 }.to_string().contains("step 3"));
}

// ---- property test: random event sequences ----

/// One random event, its targets chosen among what exists when it is applied.
#[derive(Debug, Clone)]
enum Ev {
    Piece { step: u64, rank: u32, bytes: u64 },
    Stored(usize),
    StoreFailed(usize),
    Corrupt(usize),
    PeerDown(usize),
    PeerUp,
    Died(usize),
    Reborn(u32),
    CaughtUp(usize),
    Tick(u64),
}

fn ev() -> impl Strategy<Value = Ev> {
    prop_oneof![
        4 => (1u64..8, 0u32..4, 1u64..60).prop_map(|(step, rank, bytes)| Ev::Piece { step, rank, bytes }),
        6 => any::<usize>().prop_map(Ev::Stored),
        1 => any::<usize>().prop_map(Ev::StoreFailed),
        1 => any::<usize>().prop_map(Ev::Corrupt),
        1 => any::<usize>().prop_map(Ev::PeerDown),
        1 => Just(Ev::PeerUp),
        1 => any::<usize>().prop_map(Ev::Died),
        1 => (0u32..4).prop_map(Ev::Reborn),
        1 => any::<usize>().prop_map(Ev::CaughtUp),
        1 => (0u64..20).prop_map(Ev::Tick),
    ]
}

/// The copies tracked: (step, rank, peer, stored).
fn all_copies(c: &Coordinator) -> Vec<(u64, u32, Peer, bool)> {
    let mut v = Vec::new();
    for step in c.generations() {
        for rank in 0..c.config().ranks {
            v.extend(c.copies(step, rank).into_iter().map(|(p, s)| (step, rank, p, s)));
        }
    }
    v
}

/// Runs `evs` on a fresh job, checking the invariants after each; returns every output.
fn run(cfg: &Config, peers: u32, evs: &[Ev]) -> Result<Vec<Output>, TestCaseError> {
    let mut c = job(cfg.clone(), peers);
    let mut now = T0;
    let mut next_peer = peers;
    let mut next_slot = 1000usize;
    let mut log = Vec::new();
    for e in evs {
        let copies = all_copies(&c);
        let pick = |i: usize, stored: Option<bool>| {
            let v: Vec<_> = copies.iter().filter(|x| stored.is_none_or(|s| x.3 == s)).collect();
            (!v.is_empty()).then(|| *v[i % v.len()])
        };
        let slots: Vec<Slot> = (0..cfg.ranks).flat_map(|r| c.live(r)).collect();
        let before_complete = c.complete();
        let input = match *e {
            Ev::Piece { step, rank, bytes } => Some(Input::Piece { step, rank: rank % cfg.ranks, bytes }),
            Ev::Stored(i) => pick(i, Some(false)).map(|(step, rank, peer, _)| Input::Stored { step, rank, peer }),
            Ev::StoreFailed(i) => {
                pick(i, Some(false)).map(|(step, rank, peer, _)| Input::StoreFailed { step, rank, peer })
            }
            Ev::Corrupt(i) => pick(i, None).map(|(step, rank, peer, _)| Input::Corrupt { step, rank, peer }),
            Ev::PeerDown(i) => pick(i, None).map(|(_, _, peer, _)| Input::PeerDown { peer }),
            Ev::PeerUp => {
                next_peer += 1;
                Some(Input::PeerUp { peer: next_peer, host: next_peer })
            }
            Ev::Died(i) => (!slots.is_empty()).then(|| Input::Died { slot: slots[i % slots.len()] }),
            Ev::Reborn(rank) => {
                let rank = rank % cfg.ranks;
                next_slot += 1;
                (c.pending_rebirths(rank) > 0).then_some(Input::Reborn { slot: next_slot, rank, host: 500 })
            }
            Ev::CaughtUp(i) => (!slots.is_empty()).then(|| Input::CaughtUp { slot: slots[i % slots.len()] }),
            Ev::Tick(s) => {
                now += Duration::from_secs(s);
                c.handle_timeout(now);
                None
            }
        };
        let corrupt = match &input {
            Some(Input::Corrupt { step, rank, peer }) => Some((*step, *rank, *peer)),
            _ => None,
        };
        let down = match &input {
            Some(Input::PeerDown { peer }) => Some(*peer),
            _ => None,
        };
        if let Some(i) = input {
            let _ = c.handle_input(now, i);
        }
        let outs = c.drain_outputs();
        for o in &outs {
            match o {
                Output::Complete { step } => {
                    for rank in 0..cfg.ranks {
                        let cs = c.copies(*step, rank);
                        let stored: Vec<Peer> = cs.iter().filter(|x| x.1).map(|x| x.0).collect();
                        prop_assert!(
                            stored.len() >= cfg.copies as usize,
                            "complete {step} with {cs:?} for rank {rank}"
                        );
                        let mut hosts: Vec<Host> = stored.iter().map(|p| c.host_of(*p).unwrap()).collect();
                        hosts.sort_unstable();
                        hosts.dedup();
                        prop_assert_eq!(hosts.len(), stored.len(), "copies on one host");
                    }
                }
                Output::Delete { step, rank, peer } if before_complete == Some(*step) => {
                    // A copy of the last complete generation goes only when it was found bad,
                    // or when the generation is superseded or lost.
                    let superseded = c.complete() != before_complete;
                    let lost = outs.iter().any(|o| matches!(o, Output::Lost { step: s, .. } if s == step));
                    let bad = corrupt == Some((*step, *rank, *peer));
                    let unfinished = !copies.contains(&(*step, *rank, *peer, true));
                    prop_assert!(superseded || lost || bad || unfinished, "deleted {o:?} of the complete generation");
                }
                Output::Restart { step, .. } => {
                    prop_assert_eq!(Some(*step), before_complete, "restart from an incomplete generation");
                }
                Output::Lost { step, rank } => {
                    // Only when its last stored copy's peer went down, or was found bad.
                    let held: Vec<Peer> =
                        copies.iter().filter(|x| x.0 == *step && x.1 == *rank && x.3).map(|x| x.2).collect();
                    prop_assert!(
                        held.len() == 1 && (down == Some(held[0]) || corrupt.map(|x| x.2) == Some(held[0])),
                        "lost {step}/{rank} while {held:?} held it"
                    );
                }
                _ => {}
            }
        }
        // The last complete generation stays restorable: a stored copy of every piece.
        if let Some(step) = c.complete() {
            for rank in 0..cfg.ranks {
                prop_assert!(c.copies(step, rank).iter().any(|x| x.1), "complete {step} without rank {rank}");
            }
            prop_assert!(c.generations().first() == Some(&step), "a generation older than the complete one");
        }
        // A master is always a caught-up process of its rank.
        for rank in 0..cfg.ranks {
            if let Some(m) = c.master(rank) {
                prop_assert!(c.caught_up(m) && c.live(rank).contains(&m));
            }
        }
        // The quota holds, and counts every copy tracked.
        prop_assert!(cfg.quota.is_none_or(|q| c.used_bytes() <= q), "{} bytes over {:?}", c.used_bytes(), cfg.quota);
        prop_assert_eq!(all_copies(&c).is_empty(), c.used_bytes() == 0);
        log.extend(outs);
        if c.failed() {
            break;
        }
    }
    Ok(log)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn random_events_keep_the_invariants(
        ranks in 1u32..4, degree in 1u32..4, copies in 1u32..4, peers in 3u32..12,
        quota in prop::option::of(100u64..2000), rebirth in any::<bool>(), max_restarts in 0u32..3,
        timeout in prop::option::of(1u64..10),
        evs in prop::collection::vec(ev(), 1..120),
    ) {
        let cfg = Config {
            ranks, degree, copies, quota, rebirth, max_restarts,
            store_timeout: timeout.map(Duration::from_secs),
        };
        let a = run(&cfg, peers, &evs)?;
        // Deterministic: the same events give the same decisions.
        let b = run(&cfg, peers, &evs)?;
        prop_assert_eq!(a, b);
    }
}

#[test]
fn random_events_reach_every_decision() {
    // The property test means something only if its sequences complete, refuse, lose and
    // restart generations, rebirth replicas and fail jobs: count them over fixed seeds.
    use proptest::strategy::ValueTree;
    use proptest::test_runner::{Config as RunnerConfig, RngAlgorithm, TestRng, TestRunner};
    let strategy = (1u32..4, 1u32..4, 1u32..4, 3u32..12, prop::option::of(100u64..2000), 0u32..3)
        .prop_flat_map(|t| (Just(t), prop::collection::vec(ev(), 1..120)));
    let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &[7; 32]);
    let mut runner = TestRunner::new_with_rng(RunnerConfig::default(), rng);
    let mut seen = std::collections::BTreeMap::<&str, u32>::new();
    for _ in 0..300 {
        let ((ranks, degree, copies, peers, quota, max_restarts), evs) =
            strategy.new_tree(&mut runner).unwrap().current();
        let cfg = Config { ranks, degree, copies, quota, rebirth: true, max_restarts, store_timeout: None };
        for o in run(&cfg, peers, &evs).unwrap() {
            let kind = match o {
                Output::Store { from: None, .. } => "store",
                Output::Store { from: Some(_), .. } => "re-replicate",
                Output::Delete { .. } => "delete",
                Output::Complete { .. } => "complete",
                Output::Refused { .. } => "refused",
                Output::Rebirth { .. } => "rebirth",
                Output::Fetch { .. } => "fetch",
                Output::Master { .. } => "master",
                Output::Restart { .. } => "restart",
                Output::Lost { .. } => "lost",
                Output::Failed { .. } => "failed",
            };
            *seen.entry(kind).or_default() += 1;
        }
    }
    for kind in [
        "store",
        "re-replicate",
        "delete",
        "complete",
        "refused",
        "rebirth",
        "fetch",
        "master",
        "restart",
        "lost",
        "failed",
    ] {
        assert!(seen.get(kind).copied().unwrap_or(0) >= 3, "{kind} seldom reached: {seen:?}");
    }
}
