//! Master-worker on a JEL pool (SPEC §14, crate `p2pmpi-jel`): every process joins the pool
//! and stands in the election `master`; the winner hands out the tasks, the others compute
//! them. A worker that dies (told as `died`) has its tasks handed out again; a master that
//! dies is replaced by the next candidate (told as `elected master ID`), which rebuilds the
//! state from the results the workers report to it again. Every survivor prints the result.
//!
//! ```text
//! jel_master_worker REGISTRY POOL BIND_IP TASKS TASK_MS
//! ```
//!
//! The grid secret is read from `P2PMPI_JEL_SECRET` (the pool's connections are
//! authenticated by it). Task `t` computes `t² + 1`; the result is their sum.
//!
//! The tasks travel in UDP datagrams (`WORKER TASK VALUE` → `ACKED task T` | `ACKED wait` |
//! `ACKED done RESULT`) to the master's pool address — the same port number as its JEL
//! listener, UDP instead of TCP — found in its `joined` event: the pool tells who the master
//! is and where, the application's data plane is its own. A lost datagram is sent again.
//!
//! Output: `me ID`, `master ID` when this process becomes the master, `did T` per task it
//! computed, and `result R` at the end.

use p2pmpi_jel::{central, Event, GridSecret, MemberId, Notice, Options, Pool};
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::io::Write;
use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

fn f(t: u64) -> u64 {
    t * t + 1
}

struct Master {
    results: BTreeMap<u64, u64>,
    queue: VecDeque<u64>,
    assigned: HashMap<u64, MemberId>,
    told_done: HashSet<MemberId>,
    done_since: Option<Instant>,
}

fn out(line: String) {
    let mut o = std::io::stdout().lock();
    let _ = writeln!(o, "{line}");
    let _ = o.flush();
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 6 {
        eprintln!("usage: jel_master_worker REGISTRY POOL BIND_IP TASKS TASK_MS");
        std::process::exit(2);
    }
    let registry: SocketAddr = args[1].parse().expect("REGISTRY is HOST:PORT");
    let pool_name = &args[2];
    let ip: std::net::IpAddr = args[3].parse().expect("BIND_IP");
    let tasks: u64 = args[4].parse().expect("TASKS");
    let task_ms: u64 = args[5].parse().expect("TASK_MS");
    let secret = GridSecret::from_phrase(&std::env::var("P2PMPI_JEL_SECRET").expect("P2PMPI_JEL_SECRET"));

    let mut opts = Options::central(pool_name, secret, registry).with_bind(SocketAddr::new(ip, 0));
    opts.implementation =
        p2pmpi_jel::Implementation::Central { registry, config: central::Config::new(central::Dissemination::Serial) };
    let pool = Pool::join(opts).expect("join the pool");
    let me = pool.id();
    out(format!("me {me:016x}"));
    // The master's data plane: UDP on the port number of its pool listener.
    let udp = UdpSocket::bind(pool.addr()).expect("a UDP socket on the pool's port");
    udp.set_read_timeout(Some(Duration::from_millis(50))).expect("time-out");
    let mut buf = [0u8; 1500];

    let mut addrs: HashMap<MemberId, SocketAddr> = HashMap::new();
    let mut master: Option<MemberId> = None;
    let mut was_master = false;
    let mut m: Option<Master> = None;
    // What this process computed; `unacked`: not acknowledged by the current master yet.
    let mut mine: BTreeMap<u64, u64> = BTreeMap::new();
    let mut unacked: BTreeMap<u64, u64> = BTreeMap::new();
    let w = pool.elect("master", Duration::from_secs(30)).expect("the election");
    master.get_or_insert(w);
    loop {
        // The pool's news.
        while let Ok(n) = pool.events().try_recv() {
            match n {
                Notice::Event(Event::Joined { id, addr }) => {
                    addrs.insert(id, addr);
                }
                Notice::Event(Event::Left { id }) | Notice::Event(Event::Died { id }) => {
                    addrs.remove(&id);
                    if let Some(m) = m.as_mut() {
                        // Its tasks are handed out again.
                        let lost: Vec<u64> = m.assigned.iter().filter(|(_, w)| **w == id).map(|(t, _)| *t).collect();
                        for t in lost {
                            m.assigned.remove(&t);
                            m.queue.push_front(t);
                        }
                    }
                }
                Notice::Event(Event::Elected { name, winner }) if name == "master" => {
                    if master != Some(winner) {
                        // A new master: it learns again what this worker computed.
                        unacked = mine.clone();
                    }
                    master = Some(winner);
                }
                Notice::Event(Event::Elected { .. }) => {}
                Notice::RegistryLost(_) | Notice::Excluded => {
                    eprintln!("jel_master_worker: {n}");
                    std::process::exit(1);
                }
            }
        }
        if master == Some(me) {
            let st = m.get_or_insert_with(|| {
                let results = mine.clone();
                let queue = (0..tasks).filter(|t| !results.contains_key(t)).collect();
                Master { results, queue, assigned: HashMap::new(), told_done: HashSet::new(), done_since: None }
            });
            if !was_master {
                was_master = true;
                out(format!("master {me:016x}"));
            }
            let total: u64 = st.results.values().sum();
            let complete = st.results.len() as u64 == tasks;
            if complete {
                let since = *st.done_since.get_or_insert_with(Instant::now);
                let workers: HashSet<MemberId> = addrs.keys().copied().filter(|&i| i != me).collect();
                if workers.is_subset(&st.told_done) || since.elapsed() > Duration::from_secs(10) {
                    out(format!("result {total}"));
                    pool.leave();
                    return;
                }
            }
            let Ok((n, from)) = udp.recv_from(&mut buf) else { continue };
            let text = String::from_utf8_lossy(&buf[..n]).to_string();
            let w: Vec<&str> = text.split(' ').collect();
            let (Some(worker), Some(t), Some(v)) = (
                w.first().and_then(|s| u64::from_str_radix(s, 16).ok()),
                w.get(1).and_then(|s| s.parse::<i64>().ok()),
                w.get(2).and_then(|s| s.parse::<u64>().ok()),
            ) else {
                continue;
            };
            // A worker computes one task at a time: when it writes, whatever it was given
            // before and did not report was lost on the way (the answer, or its report).
            let stale: Vec<u64> = st.assigned.iter().filter(|(_, x)| **x == worker).map(|(t, _)| *t).collect();
            for s in stale {
                st.assigned.remove(&s);
                st.queue.push_front(s);
            }
            if t >= 0 && (t as u64) < tasks {
                st.results.insert(t as u64, v);
                st.queue.retain(|&q| q != t as u64);
            }
            let answer = if st.results.len() as u64 == tasks {
                st.told_done.insert(worker);
                format!("{t} done {}", st.results.values().sum::<u64>())
            } else if let Some(u) = st.queue.pop_front() {
                st.assigned.insert(u, worker);
                format!("{t} task {u}")
            } else {
                format!("{t} wait")
            };
            let _ = udp.send_to(answer.as_bytes(), from);
            continue;
        }
        // A worker.
        let Some(maddr) = master.and_then(|w| addrs.get(&w)).copied() else {
            std::thread::sleep(Duration::from_millis(20));
            continue;
        };
        let (t, v) = unacked.iter().next().map_or((-1i64, 0), |(t, v)| (*t as i64, *v));
        let _ = udp.send_to(format!("{me:016x} {t} {v}").as_bytes(), maddr);
        let Ok((n, from)) = udp.recv_from(&mut buf) else { continue };
        if from != maddr {
            continue;
        }
        let text = String::from_utf8_lossy(&buf[..n]).to_string();
        let w: Vec<&str> = text.split(' ').collect();
        if w.first().and_then(|s| s.parse::<i64>().ok()) == Some(t) && t >= 0 {
            unacked.remove(&(t as u64));
        }
        match w.get(1..) {
            Some(["task", u]) => {
                let Ok(u) = u.parse::<u64>() else { continue };
                std::thread::sleep(Duration::from_millis(task_ms));
                mine.insert(u, f(u));
                unacked.insert(u, f(u));
                out(format!("did {u}"));
            }
            Some(["done", r]) => {
                out(format!("result {r}"));
                pool.leave();
                return;
            }
            _ => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}
