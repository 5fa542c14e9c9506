//! Dynamic processes of a local job (`spawn`, `spawn_multiple`): the launcher starts the
//! children a root asks for through the same path as the job's own processes — resolved
//! program, the job's key, a control port of their own, output pumped to this terminal line
//! by line, the same event loop judging their exits — as a job of their own (their own world)
//! whose universe ids follow the parents'. Children may spawn in turn.

use crate::launcher::{
    die_with_launcher, event_loop, pump, resolve_program, spawn_control_server, terminate, watch_exits, Event, Fencing,
    Job, RankState,
};
use crate::output::Output;
use p2pmpi::bootstrap::env;
use p2pmpi_core::replication::Layout;
use p2pmpi_wire::auth::JobKey;
use p2pmpi_wire::control::SpawnApp;
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::channel;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// What every spawned job shares with the job that spawned it.
pub(crate) struct Settings {
    pub name: String,
    pub key: JobKey,
    /// The first free universe id (the job's own processes have those below).
    pub first_id: u32,
    pub tag_output: bool,
    pub extra: Vec<(String, String)>,
    pub startup_timeout: u64,
    pub timeout: Option<Duration>,
    pub encrypt: bool,
}

struct Inner {
    settings: Settings,
    next_id: Mutex<u32>,
    /// Spawned jobs started so far.
    started: std::sync::atomic::AtomicUsize,
    /// The processes of every spawned job (stopped with the parents').
    jobs: Mutex<Vec<Arc<Mutex<Vec<Child>>>>>,
    /// Each spawned job's event loop, which returns its exit status.
    loops: Mutex<Vec<JoinHandle<i32>>>,
}

/// Starts spawned jobs on this host; shared by the job's event loop and the spawned jobs'.
#[derive(Clone)]
pub(crate) struct LocalSpawner(Arc<Inner>);

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Most processes one spawn may ask for.
const MAX_SPAWN: u32 = 4096;

impl LocalSpawner {
    pub(crate) fn new(settings: Settings) -> LocalSpawner {
        let next_id = Mutex::new(settings.first_id);
        LocalSpawner(Arc::new(Inner {
            settings,
            next_id,
            started: Default::default(),
            jobs: Mutex::default(),
            loops: Mutex::default(),
        }))
    }

    /// Stops every spawned process.
    pub(crate) fn terminate_all(&self) {
        let jobs: Vec<_> = lock(&self.0.jobs).clone();
        for j in jobs {
            terminate(&j);
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
        let layout = Layout::new(m, 1);
        let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("cannot open a control port: {e}"))?;
        let ctrl_addr = listener.local_addr().map_err(|e| e.to_string())?;
        let (tx, rx) = channel::<Event>();
        let fencing = Fencing::shared(layout, None);
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
        let mut children: Vec<Child> = Vec::with_capacity(m);
        let mut pumps = Vec::new();
        let mut states: Vec<RankState> = Vec::with_capacity(m);
        let slots = (0..apps.len()).flat_map(|a| std::iter::repeat_n(a, apps[a].procs as usize));
        for (rank, app) in slots.enumerate() {
            let mut cmd = Command::new(&programs[app]);
            cmd.args(&apps[app].args);
            // What the spawning program's `Command` set or removed, before the job's own
            // variables (which it cannot override).
            for (k, v) in &apps[app].env {
                match v {
                    Some(v) => cmd.env(k, v),
                    None => cmd.env_remove(k),
                };
            }
            cmd.env(env::RANK, rank.to_string())
                .env(env::SIZE, m.to_string())
                .env(env::CONTROL, ctrl_addr.to_string())
                .env(env::JOB_KEY, s.key.to_hex())
                .env(env::LOCAL_PROCS, (base as usize + m).to_string())
                .env(env::SPAWN_BASE, base.to_string())
                .env(env::PARENTS, &parent_list)
                .env(env::PARENT_CTX, ctx.to_string())
                .env(env::APPNUM, app.to_string())
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            if s.encrypt {
                cmd.env(env::ENCRYPT, "1");
            }
            cmd.envs(s.extra.iter().cloned());
            die_with_launcher(&mut cmd);
            let mut child = match cmd.spawn() {
                Ok(c) => c,
                Err(e) => {
                    terminate(&Arc::new(Mutex::new(children)));
                    return Err(format!("cannot start '{}': {e}", programs[app].display()));
                }
            };
            let mut st = RankState::default();
            st.pid = child.id();
            states.push(st);
            let so = child.stdout.take().expect("piped");
            let se = child.stderr.take().expect("piped");
            pumps.push(pump(so, rank, false, output.clone()));
            pumps.push(pump(se, rank, true, output.clone()));
            children.push(child);
        }
        spawn_control_server(listener, s.key.clone(), m, tx.clone(), fencing.clone());
        let children = Arc::new(Mutex::new(children));
        lock(&self.0.jobs).push(children.clone());
        {
            let children = children.clone();
            let output = output.clone();
            std::thread::spawn(move || watch_exits(children, tx, output));
        }
        let me = self.clone();
        let name = format!("{} (spawned job)", s.name);
        let handle = std::thread::spawn(move || {
            let st = &me.0.settings;
            let stop = || terminate(&children);
            let nested = |a: &[SpawnApp], p: &[(u32, String)], c: u32| me.spawn(a, p, c);
            let job = Job {
                layout,
                stop_all: &stop,
                output: &output,
                startup_timeout: st.startup_timeout,
                timeout: st.timeout,
                fd: None,
                fencing,
                notices: None,
                spawner: Some(&nested),
            };
            let code = event_loop(&name, &job, &rx, &mut states);
            for p in pumps {
                let _ = p.join();
            }
            code
        });
        lock(&self.0.loops).push(handle);
        Ok(base)
    }
}
