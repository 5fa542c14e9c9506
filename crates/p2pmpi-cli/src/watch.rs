//! Start-up steps run on several hosts at once, each host watched (issue 13, item 3).
//!
//! A frozen peer (its daemon stopped, its host hung) is the worst case for a submitter: its
//! kernel still accepts connections and buffers what is sent, so nothing fails — every read
//! waits out its time-out, minutes for a staging. Time-outs alone cannot tell such a peer from
//! one that is merely slow (hashing a large cached input, fetching an `http://` file). So a
//! step that lasts gets its host **pinged**: every [`PING_EVERY`] its peer daemon is asked for
//! a `Pong` on a fresh connection (MPD, RS and FT are one process); a host that does not
//! answer within [`PING_TIMEOUT`] is given up — its step's connection is closed through its
//! [`Canceller`] and the step ends [`Outcome::Unresponsive`], within
//! `PING_EVERY + PING_TIMEOUT` (8 s) of the freeze. A slow host that answers its pings is
//! waited for as long as its step's own time-outs allow.
//!
//! The decision of when to ping and when to give up is [`Liveness`] (pure); [`run`] drives
//! it with threads and a clock, and reports on every turn which hosts the step still waits
//! for, so the terminal can say it.

use anyhow::Result;
use p2pmpi_wire::grid::PeerInfo;
use p2pmpi_wire::secure::Canceller;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::channel;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A step lasting this long gets its host pinged, and again this long after each answer.
pub const PING_EVERY: Duration = Duration::from_secs(3);
/// A host that does not answer a ping within this is given up.
pub const PING_TIMEOUT: Duration = Duration::from_secs(5);

/// How one host's step ended.
#[derive(Debug)]
pub enum Outcome<T> {
    Done(T),
    Failed(anyhow::Error),
    /// The host stopped answering (why, for the user); its step was abandoned.
    Unresponsive(String),
}

/// One host's watch during a step: when it is due a ping, and the verdict on each.
#[derive(Debug, Clone)]
pub struct Liveness {
    /// The step's start, then the last answer to a ping.
    heard: Instant,
    /// A ping is under way since then.
    pinging: Option<Instant>,
}

impl Liveness {
    pub fn new(start: Instant) -> Self {
        Liveness { heard: start, pinging: None }
    }

    /// Is a ping due at `now`? (Then it counts as sent.)
    pub fn ping_due(&mut self, now: Instant) -> bool {
        if self.pinging.is_none() && now.saturating_duration_since(self.heard) >= PING_EVERY {
            self.pinging = Some(now);
            return true;
        }
        false
    }

    /// The answer to the ping (Ok), or why there was none: `Some(why)` gives the host up.
    pub fn on_ping(&mut self, now: Instant, answer: Result<(), String>) -> Option<String> {
        let sent = self.pinging.take().unwrap_or(now);
        match answer {
            Ok(()) => {
                self.heard = now;
                None
            }
            Err(why) => Some(format!(
                "no answer to a ping in {:.0} s ({why}): its peer daemon is frozen or the host is unreachable",
                now.saturating_duration_since(sent).as_secs_f64()
            )),
        }
    }

    pub fn pinging(&self) -> bool {
        self.pinging.is_some()
    }
}

/// What [`run`] reports on each turn: the hosts still waited for, with how long and whether
/// a ping is under way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiting {
    pub host: usize,
    pub for_s: u64,
    pub pinging: bool,
}

/// Pings one host (the caller's `Pong` request); `Err(why)` when it did not answer within
/// [`PING_TIMEOUT`].
pub type Ping = Arc<dyn Fn(&PeerInfo) -> Result<(), String> + Send + Sync>;

/// Runs `step(i, cancel)` for every host `hosts[i]`, at most `fanout` at once, each watched
/// (see the module doc); `on_turn` is told several times a second which hosts are still
/// waited for. Results in the order of `hosts`.
pub fn run<T: Send>(
    hosts: &[PeerInfo],
    fanout: usize,
    ping: Ping,
    on_turn: &mut dyn FnMut(&[Waiting]),
    step: &(dyn Fn(usize, &Canceller) -> Result<T> + Sync),
) -> Vec<Outcome<T>> {
    let n = hosts.len();
    let mut outcomes: Vec<Option<Outcome<T>>> = (0..n).map(|_| None).collect();
    // Steps under way: when they started, and their canceller.
    let running: Mutex<Vec<Option<(Instant, Canceller)>>> = Mutex::new(vec![None; n]);
    let next = AtomicUsize::new(0);
    let (tx, rx) = channel::<(usize, Result<T>)>();
    // Pings run in threads of their own, not waited for once every step ended.
    let (ptx, prx) = channel::<(usize, Result<(), String>)>();
    let mut watch: Vec<Option<Liveness>> = vec![None; n];
    let lock = |m: &Mutex<Vec<Option<(Instant, Canceller)>>>| m.lock().unwrap_or_else(|p| p.into_inner()).clone();
    std::thread::scope(|s| {
        for _ in 0..fanout.clamp(1, n.max(1)) {
            let (tx, next, running) = (tx.clone(), &next, &running);
            s.spawn(move || loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                if i >= n {
                    return;
                }
                let cancel = Canceller::new();
                running.lock().unwrap_or_else(|p| p.into_inner())[i] = Some((Instant::now(), cancel.clone()));
                let r = step(i, &cancel);
                if tx.send((i, r)).is_err() {
                    return;
                }
            });
        }
        drop(tx);
        let mut left = n;
        while left > 0 {
            match rx.recv_timeout(Duration::from_millis(200)) {
                Ok((i, r)) => {
                    if outcomes[i].is_none() {
                        outcomes[i] = Some(match r {
                            Ok(v) => Outcome::Done(v),
                            Err(e) => Outcome::Failed(e),
                        });
                        left -= 1;
                    }
                }
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
            }
            let now = Instant::now();
            let started = lock(&running);
            // Answers to pings.
            while let Ok((i, answer)) = prx.try_recv() {
                let Some(w) = watch[i].as_mut() else { continue };
                if let Some(why) = w.on_ping(now, answer) {
                    if outcomes[i].is_none() {
                        if let Some((_, cancel)) = &started[i] {
                            cancel.cancel();
                        }
                        outcomes[i] = Some(Outcome::Unresponsive(why));
                        left -= 1;
                    }
                }
            }
            // Pings due, and what is waited for.
            let mut waiting = Vec::new();
            for i in 0..n {
                let Some((since, _)) = &started[i] else { continue };
                if outcomes[i].is_some() {
                    continue;
                }
                let w = watch[i].get_or_insert_with(|| Liveness::new(*since));
                if w.ping_due(now) {
                    let (ping, ptx, host) = (ping.clone(), ptx.clone(), hosts[i].clone());
                    std::thread::spawn(move || {
                        let _ = ptx.send((i, ping(&host)));
                    });
                }
                waiting.push(Waiting {
                    host: i,
                    for_s: now.saturating_duration_since(*since).as_secs(),
                    pinging: w.pinging(),
                });
            }
            on_turn(&waiting);
        }
        // Steps given up on end once their connection is closed; the scope waits for them.
    });
    outcomes
        .into_iter()
        .zip(hosts)
        .map(|(o, h)| o.unwrap_or_else(|| Outcome::Failed(anyhow::anyhow!("no result for host {}", h.id))))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use p2pmpi_wire::grid::PeerId;
    use std::net::{SocketAddr, TcpListener, TcpStream};

    fn host(port: u16) -> PeerInfo {
        PeerInfo {
            id: PeerId { ip: "127.0.0.1".into(), mpd_port: port },
            rs_port: 0,
            ft_port: 0,
            fd_port: 0,
            capacity: 1,
            name: "h".into(),
        }
    }

    #[test]
    fn pings_are_due_every_period_and_a_silence_gives_up() {
        let t0 = Instant::now();
        let mut w = Liveness::new(t0);
        assert!(!w.ping_due(t0 + Duration::from_secs(1)));
        assert!(w.ping_due(t0 + PING_EVERY));
        assert!(!w.ping_due(t0 + PING_EVERY + Duration::from_secs(1)), "one ping at a time");
        assert_eq!(w.on_ping(t0 + Duration::from_secs(4), Ok(())), None);
        assert!(!w.ping_due(t0 + Duration::from_secs(6)), "the period restarts at the answer");
        assert!(w.ping_due(t0 + Duration::from_secs(7)));
        let why = w.on_ping(t0 + Duration::from_secs(11), Err("timed out".into())).expect("given up");
        assert!(why.contains("no answer to a ping in 4 s") && why.contains("frozen"), "{why}");
    }

    /// A host whose kernel accepts but whose daemon never answers (a frozen peer): its step
    /// and its pings wait on silent connections. It is given up within PING_EVERY +
    /// PING_TIMEOUT and its step's connection is closed; a slow host that answers its pings is
    /// waited for; every turn names the hosts waited for.
    #[test]
    fn a_frozen_host_is_given_up_and_a_slow_one_waited_for() {
        let frozen = TcpListener::bind("127.0.0.1:0").unwrap();
        let frozen_port = frozen.local_addr().unwrap().port();
        let hosts = vec![host(frozen_port), host(1)];
        // Pings: the frozen host's time out (nothing answers), the slow one's answer.
        let ping: Ping = Arc::new(move |h: &PeerInfo| {
            if h.id.mpd_port == frozen_port {
                std::thread::sleep(PING_TIMEOUT);
                Err("timed out".into())
            } else {
                Ok(())
            }
        });
        let mut turns: Vec<Vec<Waiting>> = Vec::new();
        let start = Instant::now();
        let out = run(&hosts, 8, ping, &mut |w| turns.push(w.to_vec()), &|i, cancel| {
            if i == 0 {
                // Waits on a connection nothing answers, until cancelled.
                let s = TcpStream::connect(SocketAddr::from(([127, 0, 0, 1], frozen_port)))?;
                cancel.attach(&s)?;
                let mut b = [0u8; 1];
                let n = std::io::Read::read(&mut &s, &mut b)?;
                anyhow::bail!("read {n} bytes")
            } else {
                std::thread::sleep(Duration::from_secs(9));
                Ok(7)
            }
        });
        let took = start.elapsed();
        match &out[0] {
            Outcome::Unresponsive(why) => assert!(why.contains("frozen"), "{why}"),
            other => panic!("the frozen host was not given up: {other:?}"),
        }
        assert!(matches!(out[1], Outcome::Done(7)), "{:?}", out[1]);
        assert!(took < Duration::from_secs(11), "{took:?}");
        // It was waited for, by name, with a ping under way at some point.
        assert!(turns.iter().any(|t| t.iter().any(|w| w.host == 0 && w.pinging)));
        assert!(turns.iter().any(|t| t.iter().any(|w| w.host == 1 && w.for_s >= 8)));
        drop(frozen);
    }
}
