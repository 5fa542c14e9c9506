//! Dynamic processes (`spawn`, `spawn_multiple`): the launcher starts the children a root
//! asks for through the same path as the job's own processes — resolved program, the job's
//! key, a control port of their own, output pumped to this terminal line by line, the same
//! event loop judging their exits — as a job of their own (their own world) whose universe ids
//! follow the parents'. Children may spawn in turn.
//!
//! Where the children run follows the job: on this host for `p2pmpirun --local`
//! ([`Place::Local`]); on the grid otherwise ([`Place::Grid`]), reserved, staged and launched
//! through this host's peer daemon like the job itself (the grid launcher's [`RemoteStart`]).

use crate::options::{resolve_program, FdPlan, RunArgs};
use crate::output::Output;
use crate::supervise::{
    die_with_launcher, event_loop, pump, spawn_control_server, terminate, watch_exits, Event, Job, Relay, Shared,
};
use p2pmpi::bootstrap::env;
use p2pmpi_core::replication::Layout;
use p2pmpi_wire::auth::JobKey;
use p2pmpi_wire::control::SpawnApp;
use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// Where spawned processes run.
#[derive(Clone)]
pub(crate) enum Place {
    /// On this host, started by this process (`p2pmpirun --local`), confined as the job's
    /// own processes with `--confine`.
    Local(Option<Arc<crate::local_confine::LocalConfinement>>),
    /// On grid peers, through this host's peer daemon.
    Grid(Arc<dyn RemoteStart>),
}

/// Starting spawned jobs elsewhere than on this host: the grid launcher's reservation,
/// staging and launch through this host's peer daemon.
pub(crate) trait RemoteStart: Send + Sync {
    /// The address the spawned processes reach this host's control ports at.
    fn address(&self) -> std::net::IpAddr;
    /// Starts the processes of `req` (`name` names the spawned job in reports); on failure
    /// stops what started, gives back every reservation, and says why.
    fn start(&self, name: &str, req: &Request<'_>) -> Result<Started, String>;
}

/// What every spawned job shares with the job that spawned it.
pub(crate) struct Settings {
    pub name: String,
    pub key: JobKey,
    /// The first free universe id (the job's own processes have those below).
    pub first_id: u32,
    /// Replicas of every rank (`-r R`): a spawned job runs as many of each of its ranks.
    pub replicas: usize,
    pub tag_output: bool,
    pub extra: Vec<(String, String)>,
    pub startup_timeout: u64,
    pub timeout: Option<Duration>,
    pub encrypt: bool,
    pub place: Place,
    /// The parents' failure detector, run by every spawned job too: a frozen or cut-off
    /// child is declared failed by its own job's detector (without one, only exits and
    /// broken connections were seen, and a frozen child could keep its job waiting).
    pub fd: Option<FdPlan>,
}

impl Settings {
    /// The settings a job run with `opts` (of `layout`'s processes, started with the
    /// environment `extra`) hands its spawned jobs, which start at `place`.
    pub(crate) fn of_job(
        name: &str,
        key: &JobKey,
        layout: Layout,
        opts: &RunArgs,
        extra: &[(String, String)],
        place: Place,
    ) -> Settings {
        Settings {
            name: name.to_string(),
            key: key.clone(),
            first_id: layout.n as u32,
            replicas: layout.r,
            tag_output: opts.tag_output,
            extra: extra.to_vec(),
            startup_timeout: opts.startup_timeout,
            timeout: opts.timeout.map(Duration::from_secs),
            encrypt: opts.encrypt,
            place,
            fd: None,
        }
    }

    /// The same settings with the parents' failure detector for the spawned jobs.
    pub(crate) fn with_fd(mut self, fd: Option<FdPlan>) -> Settings {
        self.fd = fd;
        self
    }
}

/// What starting a spawned job's processes gives its event loop.
pub(crate) struct Started {
    /// Stops every process of the spawned job.
    pub stop: Arc<dyn Fn() + Send + Sync>,
    /// The process ids, by rank (0 where the process runs on another host).
    pub pids: Vec<u32>,
    /// Threads that carry the processes' output and exits, with the ranks each serves:
    /// joined once the job ended, unless one of those ranks never confirmed its end.
    pub threads: Vec<(Vec<usize>, JoinHandle<()>)>,
    /// Held until the spawned job ended (its reservations on the grid).
    pub keep: Box<dyn Send>,
}

/// The start of one spawned job, wherever it runs.
pub(crate) struct Request<'a> {
    pub apps: &'a [SpawnApp],
    /// Each app's program, resolved on this host.
    pub programs: &'a [PathBuf],
    /// The variables every process gets after its app's own (which cannot override them):
    /// the control port, spawn base, parents, encryption, `-x`.
    pub vars: &'a [(String, String)],
    /// Ranks in the spawned job.
    pub m: usize,
    /// Replicas of each (slot `k·r + j` is replica `j` of rank `k`).
    pub r: usize,
    /// The universe size once the job runs (parents, earlier spawned jobs, this one).
    pub universe: usize,
    pub root: SocketAddr,
    pub key: &'a JobKey,
    pub output: &'a Arc<Output>,
    pub tx: &'a Sender<Event>,
}

struct Inner {
    settings: Settings,
    next_id: Mutex<u32>,
    /// Spawned jobs started so far.
    started: std::sync::atomic::AtomicUsize,
    /// How to stop every spawned job (with the parents).
    jobs: Mutex<Vec<Arc<dyn Fn() + Send + Sync>>>,
    /// Each spawned job's event loop, which returns its exit status.
    loops: Mutex<Vec<JoinHandle<i32>>>,
    /// Replicated universes: every job's event loop (the parents' and each spawned job's),
    /// by its first universe slot and its number of slots, so that a death one declares
    /// reaches the processes of the others, and a suspicion reaches the job that decides.
    worlds: Mutex<Vec<(usize, usize, Sender<Event>)>>,
    /// Universe slots declared dead so far (told to every job registered later).
    dead: Mutex<Vec<u32>>,
}

/// Starts spawned jobs; shared by the job's event loop and the spawned jobs'.
#[derive(Clone)]
pub(crate) struct Spawns(Arc<Inner>);

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Most processes one spawn may ask for.
const MAX_SPAWN: u32 = 4096;

/// Variables the launcher sets for every process, which a spawning program's `Command`
/// cannot override.
pub(crate) fn own_variable(k: &str) -> bool {
    [
        env::RANK,
        env::SIZE,
        env::CONTROL,
        env::JOB_KEY,
        env::BIND,
        env::PORTS,
        env::LOCAL_PROCS,
        env::SPAWN_BASE,
        env::PARENTS,
        env::PARENT_CTX,
        env::APPNUM,
        env::REPLICAS,
        "P2PMPI_JOB",
    ]
    .contains(&k)
}

impl Spawns {
    pub(crate) fn new(settings: Settings) -> Spawns {
        let next_id = Mutex::new(settings.first_id);
        Spawns(Arc::new(Inner {
            settings,
            next_id,
            started: Default::default(),
            jobs: Mutex::default(),
            loops: Mutex::default(),
            worlds: Mutex::default(),
            dead: Mutex::default(),
        }))
    }

    /// The event loop of the job whose universe slots start at `base` (`slots` of them)
    /// hears of other jobs' declarations and of suspicions of its processes.
    pub(crate) fn register_world(&self, base: usize, slots: usize, tx: Sender<Event>) {
        let mut worlds = lock(&self.0.worlds);
        let dead = lock(&self.0.dead).clone();
        if !dead.is_empty() {
            let _ = tx.send(Event::ForeignDead { slots: dead });
        }
        worlds.push((base, slots, tx));
    }

    /// The job at universe slot `base` ended: nothing more is relayed to it (and its loop's
    /// channel is not held open).
    pub(crate) fn unregister_world(&self, base: usize) {
        lock(&self.0.worlds).retain(|w| w.0 != base);
    }

    /// The job at universe slot `from` declared universe slots `dead`: every other job's
    /// processes learn it.
    fn relay_dead_to_others(&self, from: usize, dead: &[u32]) {
        let worlds = lock(&self.0.worlds);
        lock(&self.0.dead).extend_from_slice(dead);
        for (base, _, tx) in worlds.iter() {
            if *base != from {
                let _ = tx.send(Event::ForeignDead { slots: dead.to_vec() });
            }
        }
    }

    /// A process suspects universe slot `slot` of another job: that job's supervisor decides.
    fn relay_suspect_to_owner(&self, slot: usize, why: &str) {
        for (base, n, tx) in lock(&self.0.worlds).iter() {
            if (*base..base + n).contains(&slot) {
                let _ = tx.send(Event::ForeignSuspect { slot: slot - base, why: why.to_string() });
            }
        }
    }

    /// Stops every spawned process.
    pub(crate) fn terminate_all(&self) {
        let jobs: Vec<_> = lock(&self.0.jobs).clone();
        for stop in jobs {
            stop();
        }
    }

    /// Waits for every spawned job (also those spawned meanwhile); the first non-zero exit
    /// status, or 0.
    pub(crate) fn wait(&self) -> i32 {
        let mut code = 0;
        loop {
            let Some(h) = lock(&self.0.loops).pop() else { return code };
            let c = h.join().unwrap_or(1);
            if code == 0 {
                code = c;
            }
        }
    }

    /// Starts `apps` as one job whose processes are the children of `parents`; returns the
    /// universe id of its rank 0.
    pub(crate) fn spawn(&self, apps: &[SpawnApp], parents: &[(u32, String)], ctx: u32) -> Result<u32, String> {
        let s = &self.0.settings;
        let m: u32 = apps.iter().map(|a| a.procs).sum();
        if apps.is_empty() || apps.iter().any(|a| a.procs == 0) || m > MAX_SPAWN {
            return Err(format!("cannot spawn {m} processes (every program needs 1 to {MAX_SPAWN} in all)"));
        }
        if parents.is_empty() || parents.iter().any(|(_, a)| a.is_empty()) {
            return Err("the parents' addresses are missing".into());
        }
        let programs = apps
            .iter()
            .map(|a| resolve_program(&a.program).map_err(|e| format!("{e:#}")))
            .collect::<Result<Vec<_>, _>>()?;
        let parent_list = parents.iter().map(|(id, a)| format!("{id}={a}")).collect::<Vec<_>>().join(";");
        let m = m as usize;
        let r = s.replicas.max(1);
        let layout = Layout::new(m, r);
        let bind = match &s.place {
            Place::Local(_) => std::net::IpAddr::from([127, 0, 0, 1]),
            Place::Grid(g) => g.address(),
        };
        let listener = TcpListener::bind((bind, 0)).map_err(|e| format!("cannot open a control port: {e}"))?;
        let ctrl_addr = listener.local_addr().map_err(|e| e.to_string())?;
        let (tx, rx) = channel::<Event>();
        let sup = Shared::new(layout, None);
        let (base, number) = {
            let mut next = lock(&self.0.next_id);
            let base = *next;
            *next += m as u32;
            (base, self.0.started.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1)
        };
        // Tagged lines of the k-th spawned job read `[spawnk.RANK] `.
        let output = Arc::new(
            Output::create(layout, s.tag_output, None)
                .map_err(|e| format!("{e:#}"))?
                .labelled(format!("spawn{number}.")),
        );
        let mut vars = vec![
            (env::CONTROL.to_string(), ctrl_addr.to_string()),
            (env::SPAWN_BASE.to_string(), base.to_string()),
            (env::PARENTS.to_string(), parent_list),
            (env::PARENT_CTX.to_string(), ctx.to_string()),
        ];
        if s.encrypt {
            vars.push((env::ENCRYPT.to_string(), "1".to_string()));
        }
        vars.extend(s.extra.iter().cloned());
        // The processes are started by the thread that then follows the job to its end: a
        // process dies with the thread that started it (`PR_SET_PDEATHSIG`). (Started from
        // the spawning job's loop, a grandchild was killed when its parents' job ended first.)
        let (started_tx, started_rx) = channel::<Result<(), String>>();
        let apps = apps.to_vec();
        let me = self.clone();
        let name = format!("{} (spawned job)", s.name);
        let handle = std::thread::spawn(move || {
            let st = &me.0.settings;
            let req = Request {
                apps: &apps,
                programs: &programs,
                vars: &vars,
                m,
                r,
                universe: (base as usize + m) * r,
                root: ctrl_addr,
                key: &st.key,
                output: &output,
                tx: &tx,
            };
            let started = match &st.place {
                Place::Local(confine) => start_here(&req, confine.as_deref()),
                Place::Grid(g) => g.start(&format!("{} (spawned job {number})", st.name), &req),
            };
            let started = match started {
                Ok(s) => s,
                Err(e) => {
                    let _ = started_tx.send(Err(e));
                    return 0;
                }
            };
            spawn_control_server(listener, st.key.clone(), layout.slots(), tx.clone(), sup.clone());
            if r > 1 {
                me.register_world(base as usize * r, layout.slots(), tx.clone());
            }
            lock(&me.0.jobs).push(started.stop.clone());
            drop(tx);
            let _ = started_tx.send(Ok(()));
            let Started { stop, threads, keep, pids } = started;
            let stop_all = || stop();
            let nested = |a: &[SpawnApp], p: &[(u32, String)], c: u32| me.spawn(a, p, c);
            let job = Job {
                stop_all: &stop_all,
                output: &output,
                startup_timeout: st.startup_timeout,
                timeout: st.timeout,
                fd: st.fd.as_ref(),
                sup,
                notices: None,
                spawner: Some(&nested),
                slot_base: base as usize * layout.r,
                relay: (layout.r > 1).then_some(&me as &dyn Relay),
                join_notice: None,
            };
            let code = event_loop(&name, &job, &rx, pids);
            let unconfirmed = job.sup.unconfirmed();
            me.unregister_world(base as usize * layout.r);
            for (ranks, t) in threads {
                // A host cut off never confirmed its processes' end: its thread ends with
                // this process.
                if ranks.iter().any(|r| unconfirmed.contains(r)) {
                    continue;
                }
                let _ = t.join();
            }
            drop(keep);
            code
        });
        match started_rx.recv() {
            Ok(Ok(())) => {
                lock(&self.0.loops).push(handle);
                Ok(base)
            }
            Ok(Err(e)) => {
                let _ = handle.join();
                Err(e)
            }
            Err(_) => Err("the spawned job's thread ended before starting its processes".into()),
        }
    }
}

impl Relay for Spawns {
    fn relay_dead(&self, from: usize, dead: &[u32]) {
        self.relay_dead_to_others(from, dead);
    }

    fn relay_suspect(&self, slot: usize, why: &str) {
        self.relay_suspect_to_owner(slot, why);
    }
}

/// Starts a spawned job's processes on this host (confined by `confine`, if given, with the
/// spawned job's control port).
fn start_here(req: &Request<'_>, confine: Option<&crate::local_confine::LocalConfinement>) -> Result<Started, String> {
    let Request { apps, programs, vars, m, r, universe, key, output, tx, .. } = *req;
    let mut children: Vec<Child> = Vec::with_capacity(m * r);
    let mut threads = Vec::new();
    let mut pids = Vec::with_capacity(m * r);
    // Slot `k·r + j` is replica `j` of rank `k` (rank-major, as the layout).
    let slots = (0..apps.len()).flat_map(|a| std::iter::repeat_n(a, apps[a].procs as usize * r));
    for (rank, app) in slots.enumerate() {
        let mut cmd = Command::new(&programs[app]);
        cmd.args(&apps[app].args);
        if let Some(dir) = &apps[app].dir {
            // The spawning `Command`'s working directory (on this host: children started
            // through the grid run in their staged job directory instead).
            if !std::path::Path::new(dir).is_dir() {
                terminate(&Arc::new(Mutex::new(children)));
                return Err(format!(
                    "cannot start '{}': its working directory '{dir}' is not a directory",
                    programs[app].display()
                ));
            }
            cmd.current_dir(dir);
        }
        // What the spawning program's `Command` set or removed, before the job's own
        // variables (which it cannot override).
        for (k, v) in &apps[app].env {
            match v {
                Some(v) => cmd.env(k, v),
                None => cmd.env_remove(k),
            };
        }
        if r > 1 {
            cmd.env(env::REPLICAS, r.to_string());
        }
        cmd.env(env::RANK, rank.to_string())
            .env(env::SIZE, m.to_string())
            .env(env::JOB_KEY, key.to_hex())
            .env(env::LOCAL_PROCS, universe.to_string())
            .env(env::APPNUM, app.to_string())
            .envs(vars.iter().cloned())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        die_with_launcher(&mut cmd);
        if let Some(Err(e)) = confine.map(|c| c.apply(&mut cmd, req.root.port())) {
            terminate(&Arc::new(Mutex::new(children)));
            return Err(format!("{e:#}"));
        }
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                terminate(&Arc::new(Mutex::new(children)));
                return Err(format!("cannot start '{}': {e}", programs[app].display()));
            }
        };
        pids.push(child.id());
        let so = child.stdout.take().expect("piped");
        let se = child.stderr.take().expect("piped");
        threads.push((vec![rank], pump(so, rank, false, output.clone())));
        threads.push((vec![rank], pump(se, rank, true, output.clone())));
        children.push(child);
    }
    let children = Arc::new(Mutex::new(children));
    {
        let children = children.clone();
        let output = output.clone();
        let tx = tx.clone();
        std::thread::spawn(move || watch_exits(children, tx, output));
    }
    Ok(Started { stop: Arc::new(move || terminate(&children)), pids, threads, keep: Box::new(()) })
}
