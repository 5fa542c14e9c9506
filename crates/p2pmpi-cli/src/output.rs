//! The processes' output, as the user sees it: with replication (`-r R`), one copy per rank.
//!
//! Every replica of a rank runs the same deterministic program, so they print the same lines.
//! Only the rank's **master** — its alive replica of lowest index — is shown. When the master
//! dies, its successor takes over exactly where the shown output stopped: no line is printed
//! twice, none is skipped.
//!
//! The [`Router`] keeps, for every rank and stream (stdout, stderr), `shown`: how many lines
//! of it were printed; and for every slot and stream, how many lines the slot produced and the
//! lines it produced *ahead* of `shown` that were not printed (a queue). A line is
//!
//! * printed when it comes from the master and is at index `shown` or beyond (`shown` moves
//!   past it, and the other replicas' queues drop what is now shown);
//! * queued when it comes from another replica and is at index `shown` or beyond;
//! * dropped when it is below `shown` (a replica behind the master) or its slot is dead.
//!
//! When a slot is declared dead, the master is recomputed and the new master's queued lines
//! (those still at or beyond `shown`) are printed. A queue holds at most how far its replica
//! ran ahead of the master.
//!
//! Without replication (`R = 1`, or a single rank) lines go straight through.

use p2pmpi_core::replication::{DeadSet, Layout};
use std::collections::{BTreeMap, VecDeque};
use std::io::Write;
use std::sync::Mutex;

/// Lines of one slot and stream held back: (index, line).
type Queue = VecDeque<(u64, Vec<u8>)>;

const STDOUT: usize = 0;
const STDERR: usize = 1;

/// Which lines of which slot reach the user (no I/O: lines to print are handed to `emit`
/// with their logical rank and stream, 0 = stdout, 1 = stderr).
#[derive(Debug)]
pub struct Router {
    layout: Layout,
    /// No replication: every line goes through, nothing is counted.
    passthrough: bool,
    /// The dead slots, and with them the masters (the rule of [`DeadSet`]).
    dead: DeadSet,
    /// Per rank and stream: lines printed.
    shown: Vec<[u64; 2]>,
    /// Per slot and stream: lines produced.
    produced: Vec<[u64; 2]>,
    /// Per slot and stream: lines produced at index `shown` or beyond, not printed yet.
    queued: Vec<[Queue; 2]>,
}

impl Router {
    pub fn new(layout: Layout) -> Router {
        let passthrough = layout.slots() == layout.n;
        let (ranks, slots) = if passthrough { (0, 0) } else { (layout.n, layout.slots()) };
        Router {
            layout,
            passthrough,
            dead: DeadSet::new(layout),
            shown: vec![[0; 2]; ranks],
            produced: vec![[0; 2]; slots],
            queued: (0..slots).map(|_| [VecDeque::new(), VecDeque::new()]).collect(),
        }
    }

    fn master_of(&self, rank: usize) -> Option<usize> {
        self.dead.master_of(rank)
    }

    /// Drops from the queues of `rank`'s replicas what is now shown.
    fn trim(&mut self, rank: usize, stream: usize) {
        let shown = self.shown[rank][stream];
        for s in self.layout.slots_of(rank) {
            let q = &mut self.queued[s][stream];
            while q.front().is_some_and(|(i, _)| *i < shown) {
                q.pop_front();
            }
        }
    }

    /// One line (with its newline, if it had one) produced by `slot` on `stream`.
    pub fn line(&mut self, slot: usize, stream: usize, line: &[u8], emit: &mut dyn FnMut(usize, usize, &[u8])) {
        if self.passthrough {
            return emit(self.layout.rank_of(slot), stream, line);
        }
        if self.dead.is_dead(slot) {
            return;
        }
        let idx = self.produced[slot][stream];
        self.produced[slot][stream] += 1;
        let rank = self.layout.rank_of(slot);
        if idx < self.shown[rank][stream] {
            return;
        }
        if self.master_of(rank) == Some(slot) {
            emit(rank, stream, line);
            self.shown[rank][stream] = idx + 1;
            self.trim(rank, stream);
        } else {
            self.queued[slot][stream].push_back((idx, line.to_vec()));
        }
    }

    /// `slot` is dead: its lines are no longer shown, and if it was its rank's master the
    /// next replica's lines ahead of what was shown are printed now.
    pub fn slot_dead(&mut self, slot: usize, emit: &mut dyn FnMut(usize, usize, &[u8])) {
        if self.passthrough || self.dead.is_dead(slot) {
            return;
        }
        self.dead.mark(slot);
        self.queued[slot] = [VecDeque::new(), VecDeque::new()];
        let rank = self.layout.rank_of(slot);
        let Some(master) = self.master_of(rank) else { return };
        for stream in [STDOUT, STDERR] {
            let q = std::mem::take(&mut self.queued[master][stream]);
            for (idx, line) in q {
                if idx >= self.shown[rank][stream] {
                    emit(rank, stream, &line);
                    self.shown[rank][stream] = idx + 1;
                }
            }
            self.trim(rank, stream);
        }
    }

    /// Lines held back, all slots together (for tests and diagnostics).
    pub fn queued_lines(&self) -> usize {
        self.queued.iter().map(|q| q[0].len() + q[1].len()).sum()
    }
}

/// What the output of a job restarted from checkpoints (`--max-restarts`) carries from one
/// run of its processes to the next: per rank, how many stdout lines were shown (all runs
/// together) and, per checkpoint generation, where in those lines the rank's checkpoint mark
/// came. A run restarted from generation `g` resumes each rank at its mark of `g`, and the
/// lines it prints again up to what was shown are not shown twice. Standard error is not
/// deduplicated.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Replay {
    /// Per rank: stdout lines shown so far.
    pub shown: Vec<u64>,
    /// Per rank: generation -> the rank's stdout line position at its mark.
    pub marks: Vec<BTreeMap<u64, u64>>,
}

impl Replay {
    pub fn new(ranks: usize) -> Replay {
        Replay { shown: vec![0; ranks], marks: vec![BTreeMap::new(); ranks] }
    }
}

/// A [`Replay`] kept on disk as it changes, for `p2pmpirun --resume` after the launcher
/// itself died: in the job's checkpoint directory, `output-shown` holds per rank the stdout
/// lines shown (one little-endian u64 per rank, written in place after each line), and
/// `output-marks` the checkpoint marks (lines `RANK GENERATION POSITION`, appended). A launcher
/// killed between a line and its count shows that line once more on resume, no more.
#[derive(Debug)]
pub struct Journal {
    shown: std::fs::File,
    marks: std::fs::File,
}

impl Journal {
    const SHOWN: &'static str = "output-shown";
    const MARKS: &'static str = "output-marks";

    /// The journal in `dir`, starting from `replay` (written out).
    pub fn open(dir: &std::path::Path, replay: &Replay) -> std::io::Result<Journal> {
        use std::fmt::Write as _;
        use std::os::unix::fs::FileExt;
        std::fs::create_dir_all(dir)?;
        let open =
            std::fs::OpenOptions::new().create(true).read(true).write(true).truncate(false).open(dir.join(Self::SHOWN));
        let shown = open?;
        let bytes: Vec<u8> = replay.shown.iter().flat_map(|c| c.to_le_bytes()).collect();
        shown.write_all_at(&bytes, 0)?;
        shown.set_len(bytes.len() as u64)?;
        let mut text = String::new();
        for (rank, m) in replay.marks.iter().enumerate() {
            for (g, at) in m {
                let _ = writeln!(text, "{rank} {g} {at}");
            }
        }
        let tmp = dir.join(format!("{}.tmp", Self::MARKS));
        std::fs::write(&tmp, text)?;
        std::fs::rename(&tmp, dir.join(Self::MARKS))?;
        let marks = std::fs::OpenOptions::new().append(true).open(dir.join(Self::MARKS))?;
        Ok(Journal { shown, marks })
    }

    /// The replay a journal in `dir` kept for a job of `ranks` ranks (nothing shown without one).
    pub fn read(dir: &std::path::Path, ranks: usize) -> std::io::Result<Replay> {
        let mut r = Replay::new(ranks);
        match std::fs::read(dir.join(Self::SHOWN)) {
            Ok(b) => {
                for (c, v) in b.chunks_exact(8).zip(r.shown.iter_mut()) {
                    *v = u64::from_le_bytes(c.try_into().expect("8 bytes"));
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        let text = match std::fs::read_to_string(dir.join(Self::MARKS)) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(e),
        };
        for line in text.lines() {
            let v: Vec<u64> = line.split(' ').filter_map(|w| w.parse().ok()).collect();
            if let [rank, g, at] = v[..] {
                if let Some(m) = r.marks.get_mut(rank as usize) {
                    m.insert(g, at);
                }
            }
        }
        Ok(r)
    }

    fn shown(&self, rank: usize, count: u64) {
        use std::os::unix::fs::FileExt;
        let _ = self.shown.write_all_at(&count.to_le_bytes(), 8 * rank as u64);
    }

    fn mark(&self, rank: usize, generation: u64, at: u64) {
        use std::io::Write;
        // One write, appended whole.
        let _ = (&self.marks).write_all(format!("{rank} {generation} {at}\n").as_bytes());
    }
}

/// The line positions of a run that replays ([`Replay`]).
#[derive(Debug)]
struct Positions {
    layout: Layout,
    /// Per slot: the position of its next stdout line.
    next: Vec<u64>,
    /// Per rank: lines below this position were shown by an earlier run.
    skip_below: Vec<u64>,
    /// Per rank: the marks.
    marks: Vec<BTreeMap<u64, u64>>,
    /// Per rank: stdout lines shown by this run.
    shown: Vec<u64>,
    /// Where the replay is kept on disk, if it is.
    journal: Option<std::sync::Arc<Journal>>,
}

/// The job's output: a [`Router`] writing to this process's stdout and stderr, one line at a
/// time, optionally prefixed by the logical rank (`[k] `).
pub struct Output {
    /// With checkpoints: the positions of the lines, and the marks (`None`: lines go straight
    /// to the router).
    replay: Option<Mutex<Positions>>,
    router: Mutex<Router>,
    tag: bool,
    /// Put before the rank in tags (a spawned job's: `spawn1.`).
    label: String,
    /// `--output-filename DIR`: per rank, its stdout and stderr files (instead of ours).
    files: Option<Vec<[Mutex<std::fs::File>; 2]>>,
    /// Per slot: how many of its local pipes (stdout, stderr) reached their end.
    closed: Vec<std::sync::atomic::AtomicU8>,
}

impl Output {
    pub fn new(layout: Layout, tag: bool) -> Output {
        let closed = (0..layout.slots()).map(|_| Default::default()).collect();
        Output { replay: None, router: Mutex::new(Router::new(layout)), tag, label: String::new(), files: None, closed }
    }

    /// Reads checkpoint marks on stdout, and resumes from `replay` at the marks of
    /// `generation` (at the start without one): the lines shown by earlier runs are not shown
    /// again.
    pub fn replaying(mut self, layout: Layout, replay: &Replay, generation: Option<u64>) -> Output {
        let at = |rank: usize| generation.and_then(|g| replay.marks[rank].get(&g).copied()).unwrap_or(0);
        self.replay = Some(Mutex::new(Positions {
            layout,
            next: (0..layout.slots()).map(|s| at(layout.rank_of(s))).collect(),
            skip_below: replay.shown.clone(),
            marks: replay.marks.clone(),
            shown: vec![0; layout.n],
            journal: None,
        }));
        self
    }

    /// Keeps the replay in `journal` as it changes (after [`Output::replaying`]).
    pub fn journaled(self, journal: Option<std::sync::Arc<Journal>>) -> Output {
        if let Some(p) = &self.replay {
            p.lock().unwrap_or_else(|p| p.into_inner()).journal = journal;
        }
        self
    }

    /// What a restart carries over (see [`Replay`]); `None` without [`Output::replaying`].
    pub fn replay(&self) -> Option<Replay> {
        let p = self.replay.as_ref()?.lock().unwrap_or_else(|p| p.into_inner());
        let shown = p.skip_below.iter().zip(&p.shown).map(|(a, b)| a + b).collect();
        Some(Replay { shown, marks: p.marks.clone() })
    }

    /// Whether `line` of `slot` (stdout) is shown: a checkpoint mark is recorded and never
    /// shown, a line an earlier run showed is not shown again.
    fn replayed(&self, slot: usize, line: &[u8]) -> bool {
        let Some(p) = &self.replay else { return true };
        let mut p = p.lock().unwrap_or_else(|p| p.into_inner());
        let rank = p.layout.rank_of(slot);
        if let Some(rest) = line.strip_prefix(p2pmpi::checkpoint::MARK_PREFIX.as_bytes()) {
            if let Some(g) = std::str::from_utf8(rest).ok().and_then(|t| t.trim().parse::<u64>().ok()) {
                let at = p.next[slot];
                p.marks[rank].insert(g, at);
                if let Some(j) = &p.journal {
                    j.mark(rank, g, at);
                }
                return false;
            }
        }
        let at = p.next[slot];
        p.next[slot] += 1;
        at >= p.skip_below[rank]
    }

    /// A stdout line of `rank` was shown.
    fn count_shown(&self, rank: usize, stream: usize) {
        if let (Some(p), STDOUT) = (&self.replay, stream) {
            let mut p = p.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(c) = p.shown.get_mut(rank) {
                *c += 1;
                let total = *c + p.skip_below[rank];
                if let Some(j) = &p.journal {
                    j.shown(rank, total);
                }
            }
        }
    }

    /// Tags read `[LABELk] ` (a spawned job's output, told apart from its parents').
    pub fn labelled(mut self, label: String) -> Output {
        self.label = label;
        self
    }

    /// The job's output; with `dir` (`--output-filename`), rank k's goes to `dir/rank.k/stdout`
    /// and `dir/rank.k/stderr` (created, or emptied) instead of the terminal.
    pub fn create(layout: Layout, tag: bool, dir: Option<&std::path::Path>) -> anyhow::Result<Output> {
        Output::open(layout, tag, dir, false)
    }

    /// [`Output::create`] for a job's processes started again (`--max-restarts`): the files
    /// of `dir` are appended to.
    pub fn reopen(layout: Layout, tag: bool, dir: Option<&std::path::Path>) -> anyhow::Result<Output> {
        Output::open(layout, tag, dir, true)
    }

    fn open(layout: Layout, tag: bool, dir: Option<&std::path::Path>, append: bool) -> anyhow::Result<Output> {
        use anyhow::Context;
        let mut out = Output::new(layout, tag);
        let Some(dir) = dir else { return Ok(out) };
        let mut files = Vec::with_capacity(layout.n);
        for k in 0..layout.n {
            let d = dir.join(format!("rank.{k}"));
            std::fs::create_dir_all(&d).with_context(|| format!("--output-filename: cannot create {}", d.display()))?;
            let open = |name: &str| {
                let p = d.join(name);
                std::fs::OpenOptions::new()
                    .create(true)
                    .write(true)
                    .append(append)
                    .truncate(!append)
                    .open(&p)
                    .map(Mutex::new)
                    .with_context(|| format!("--output-filename: cannot create {}", p.display()))
            };
            files.push([open("stdout")?, open("stderr")?]);
        }
        out.files = Some(files);
        Ok(out)
    }

    /// One of `slot`'s local pipes reached its end.
    pub fn pipe_closed(&self, slot: usize) {
        if let Some(c) = self.closed.get(slot) {
            c.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }

    /// Whether both of `slot`'s local pipes were read to their end: everything it printed
    /// went through the router (its death must not hide lines written while it lived).
    pub fn drained(&self, slot: usize) -> bool {
        self.closed.get(slot).is_none_or(|c| c.load(std::sync::atomic::Ordering::SeqCst) >= 2)
    }

    fn emit(&self) -> impl FnMut(usize, usize, &[u8]) + '_ {
        let tag = self.tag;
        let label = &self.label;
        move |rank, stream, line| {
            // Counted once written (a launcher killed in between shows it again on --resume).
            if let Some(f) = self.files.as_ref().and_then(|f| f.get(rank)) {
                let mut f = f[stream].lock().unwrap_or_else(|p| p.into_inner());
                let _ = write_line(&mut *f, None, line);
                drop(f);
                self.count_shown(rank, stream);
                return;
            }
            let prefix = tag.then(|| format!("[{label}{rank}] "));
            // Our own output may be gone (closed pipe): the children are drained anyway.
            let _ = if stream == STDERR {
                write_line(&mut std::io::stderr().lock(), prefix.as_deref(), line)
            } else {
                write_line(&mut std::io::stdout().lock(), prefix.as_deref(), line)
            };
            self.count_shown(rank, stream);
        }
    }

    /// Output of `slot`: one or more lines, the last one possibly without its newline.
    pub fn write(&self, slot: usize, stderr: bool, data: &[u8]) {
        let stream = if stderr { STDERR } else { STDOUT };
        for line in data.split_inclusive(|&c| c == b'\n') {
            if stream == STDOUT && !self.replayed(slot, line) {
                continue;
            }
            let mut router = self.router.lock().unwrap_or_else(|p| p.into_inner());
            router.line(slot, stream, line, &mut self.emit());
        }
    }

    /// `slot` was declared dead (see [`Router::slot_dead`]).
    pub fn slot_dead(&self, slot: usize) {
        let mut router = self.router.lock().unwrap_or_else(|p| p.into_inner());
        router.slot_dead(slot, &mut self.emit());
    }
}

/// Writes one line, prefixed, with a newline if it had none, and flushes.
pub(crate) fn write_line(o: &mut impl Write, prefix: Option<&str>, line: &[u8]) -> std::io::Result<()> {
    if let Some(p) = prefix {
        o.write_all(p.as_bytes())?;
    }
    o.write_all(line)?;
    if !line.ends_with(b"\n") {
        o.write_all(b"\n")?;
    }
    o.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A router and what it printed: (rank, stream, text).
    struct T {
        r: Router,
        out: Vec<(usize, usize, String)>,
    }

    impl T {
        fn new(n: usize, r: usize) -> T {
            T { r: Router::new(Layout::new(n, r)), out: Vec::new() }
        }
        fn line(&mut self, slot: usize, stream: usize, text: &str) {
            let out = &mut self.out;
            self.r.line(slot, stream, text.as_bytes(), &mut |k, s, l| {
                out.push((k, s, String::from_utf8(l.to_vec()).unwrap()))
            });
        }
        /// `count` lines `prefix0\n`, `prefix1\n`… from index `from`.
        fn lines(&mut self, slot: usize, stream: usize, prefix: &str, from: usize, count: usize) {
            for i in from..from + count {
                self.line(slot, stream, &format!("{prefix}{i}\n"));
            }
        }
        fn dead(&mut self, slot: usize) {
            let out = &mut self.out;
            self.r.slot_dead(slot, &mut |k, s, l| out.push((k, s, String::from_utf8(l.to_vec()).unwrap())));
        }
        fn text(&self, rank: usize, stream: usize) -> Vec<String> {
            self.out.iter().filter(|(k, s, _)| *k == rank && *s == stream).map(|x| x.2.clone()).collect()
        }
    }

    fn seq(prefix: &str, count: usize) -> Vec<String> {
        (0..count).map(|i| format!("{prefix}{i}\n")).collect()
    }

    #[test]
    fn the_journal_keeps_the_replay_of_a_launcher_that_dies() {
        let dir = std::env::temp_dir().join(format!("p2pmpi-journal-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut start = Replay::new(2);
        start.shown[1] = 4;
        start.marks[1].insert(1, 2);
        let j = std::sync::Arc::new(Journal::open(&dir, &start).unwrap());
        let out =
            Output::new(Layout::new(2, 1), false).replaying(Layout::new(2, 1), &start, Some(1)).journaled(Some(j));
        // Rank 1 resumes at its mark (line 2): lines 2 and 3 were shown, 4 is new.
        let mark = format!("{}2\n", p2pmpi::checkpoint::MARK_PREFIX);
        out.write(1, false, b"l2\nl3\nl4\n");
        out.write(1, false, mark.as_bytes());
        out.write(0, false, b"a\n");
        // Read back as `--resume` does, without the launcher's memory.
        let r = Journal::read(&dir, 2).unwrap();
        assert_eq!(r.shown, [1, 5]);
        assert_eq!(r.marks[1].get(&1), Some(&2));
        assert_eq!(r.marks[1].get(&2), Some(&5));
        assert!(r.marks[0].is_empty());
        // Opening it again starts from a replay (a fresh start: nothing shown).
        drop(out);
        Journal::open(&dir, &Replay::new(2)).unwrap();
        assert_eq!(Journal::read(&dir, 2).unwrap(), Replay::new(2));
        assert_eq!(Journal::read(&dir.join("none"), 2).unwrap(), Replay::new(2));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_restart_resumes_at_the_checkpoint_mark_without_showing_lines_twice() {
        let dir = std::env::temp_dir().join(format!("p2pmpi-replay-test-{}", std::process::id()));
        let layout = Layout::new(2, 1);
        let mark = |g: u64| format!("{}{g}\n", p2pmpi::checkpoint::MARK_PREFIX);
        let first = Output::create(layout, false, Some(&dir)).unwrap().replaying(layout, &Replay::new(2), None);
        first.write(0, false, b"a\n");
        first.write(0, false, mark(1).as_bytes());
        first.write(0, false, b"b\nc\n");
        first.write(1, false, b"x\n");
        let r = first.replay().unwrap();
        assert_eq!(r.shown, vec![3, 1]);
        assert_eq!(r.marks[0].get(&1), Some(&1));
        // Restarted from generation 1: rank 0 prints b and c again (not shown), then d.
        let second = Output::create(layout, false, Some(&dir)).unwrap().replaying(layout, &r, Some(1));
        second.write(0, false, b"b\nc\nd\n");
        second.write(0, true, b"err\n");
        assert_eq!(second.replay().unwrap().shown, vec![4, 1]);
        let out = std::fs::read_to_string(dir.join("rank.0/stdout")).unwrap();
        assert_eq!(out, "d\n", "the second run's file holds only the new line");
        assert_eq!(std::fs::read_to_string(dir.join("rank.0/stderr")).unwrap(), "err\n");
        // Restarted from the beginning (no checkpoint): everything shown is skipped.
        let third =
            Output::create(layout, false, Some(&dir)).unwrap().replaying(layout, &second.replay().unwrap(), None);
        third.write(0, false, b"a\nb\nc\nd\ne\n");
        assert_eq!(std::fs::read_to_string(dir.join("rank.0/stdout")).unwrap(), "e\n");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn without_replication_lines_go_straight_through() {
        let mut t = T::new(3, 1);
        t.line(2, STDOUT, "a\n");
        t.line(0, STDERR, "b");
        t.line(2, STDOUT, "a\n");
        t.dead(2);
        t.line(2, STDOUT, "c\n");
        assert_eq!(t.out, vec![(2, 0, "a\n".into()), (0, 1, "b".into()), (2, 0, "a\n".into()), (2, 0, "c\n".into())]);
        assert_eq!(t.r.queued_lines(), 0);
        // One rank, replicas asked: nothing to replicate, straight through too.
        let mut t = T::new(1, 3);
        t.line(0, STDOUT, "x\n");
        assert_eq!(t.out.len(), 1);
    }

    #[test]
    fn only_the_master_is_shown_and_replicas_behind_are_dropped() {
        // n = 3, r = 2: rank 0 = slots 0, 1; rank 1 = slots 2, 3; rank 2 = slots 4, 5.
        let mut t = T::new(3, 2);
        t.lines(2, STDOUT, "r1-", 0, 5);
        t.lines(3, STDOUT, "r1-", 0, 5);
        t.lines(0, STDOUT, "r0-", 0, 2);
        assert_eq!(t.text(1, STDOUT), seq("r1-", 5));
        assert_eq!(t.text(0, STDOUT), seq("r0-", 2));
        assert_eq!(t.r.queued_lines(), 0, "a replica behind the master keeps nothing");
    }

    #[test]
    fn master_dies_with_the_replica_ahead() {
        let mut t = T::new(2, 3);
        t.lines(3, STDOUT, "l", 0, 3);
        // Replica 1 is ahead (7 lines), replica 2 behind (2 lines).
        t.lines(4, STDOUT, "l", 0, 7);
        t.lines(5, STDOUT, "l", 0, 2);
        assert_eq!(t.r.queued_lines(), 4, "lines 3..7 of replica 1 wait");
        t.dead(3);
        assert_eq!(t.text(1, STDOUT), seq("l", 7), "the new master's lines ahead are printed at once");
        assert_eq!(t.r.queued_lines(), 0);
        t.lines(4, STDOUT, "l", 7, 3);
        t.lines(5, STDOUT, "l", 2, 8);
        assert_eq!(t.text(1, STDOUT), seq("l", 10));
        // Replica 2 is ahead now and takes over when replica 1 dies too.
        t.lines(5, STDOUT, "l", 10, 2);
        t.dead(4);
        t.lines(5, STDOUT, "l", 12, 1);
        assert_eq!(t.text(1, STDOUT), seq("l", 13));
    }

    #[test]
    fn master_dies_with_the_replica_behind() {
        let mut t = T::new(2, 2);
        t.lines(2, STDOUT, "l", 0, 6);
        t.lines(3, STDOUT, "l", 0, 2);
        t.dead(2);
        assert_eq!(t.text(1, STDOUT), seq("l", 6));
        // The new master catches up: what was shown is not shown again.
        t.lines(3, STDOUT, "l", 2, 4);
        assert_eq!(t.text(1, STDOUT), seq("l", 6));
        t.lines(3, STDOUT, "l", 6, 3);
        assert_eq!(t.text(1, STDOUT), seq("l", 9));
        // Lines of the dead master still in its pipe are dropped.
        t.lines(2, STDOUT, "l", 6, 5);
        assert_eq!(t.text(1, STDOUT), seq("l", 9));
        assert_eq!(t.r.queued_lines(), 0);
    }

    #[test]
    fn master_dies_with_the_replica_level() {
        let mut t = T::new(2, 2);
        t.lines(2, STDOUT, "l", 0, 4);
        t.lines(3, STDOUT, "l", 0, 4);
        t.dead(2);
        assert_eq!(t.text(1, STDOUT), seq("l", 4));
        t.lines(3, STDOUT, "l", 4, 2);
        assert_eq!(t.text(1, STDOUT), seq("l", 6));
    }

    #[test]
    fn a_dead_replica_that_was_not_master_changes_nothing_shown() {
        let mut t = T::new(2, 2);
        t.lines(3, STDOUT, "l", 0, 3);
        t.dead(3);
        assert!(t.out.is_empty());
        assert_eq!(t.r.queued_lines(), 0, "a dead replica's queue is dropped");
        t.lines(2, STDOUT, "l", 0, 3);
        assert_eq!(t.text(1, STDOUT), seq("l", 3));
    }

    #[test]
    fn stdout_and_stderr_are_counted_apart() {
        let mut t = T::new(2, 2);
        t.lines(2, STDOUT, "o", 0, 2);
        t.lines(2, STDERR, "e", 0, 1);
        t.lines(3, STDERR, "e", 0, 3);
        t.lines(3, STDOUT, "o", 0, 1);
        t.dead(2);
        assert_eq!(t.text(1, STDOUT), seq("o", 2));
        assert_eq!(t.text(1, STDERR), seq("e", 3));
        t.lines(3, STDOUT, "o", 1, 2);
        t.lines(3, STDERR, "e", 3, 1);
        assert_eq!(t.text(1, STDOUT), seq("o", 3));
        assert_eq!(t.text(1, STDERR), seq("e", 4));
    }

    #[test]
    fn every_replica_dead_shows_nothing_more() {
        let mut t = T::new(2, 2);
        t.lines(2, STDOUT, "l", 0, 1);
        t.lines(3, STDOUT, "l", 0, 2);
        t.dead(3);
        t.dead(2);
        t.lines(2, STDOUT, "l", 1, 1);
        assert_eq!(t.text(1, STDOUT), seq("l", 1));
        assert_eq!(t.r.queued_lines(), 0);
    }

    #[test]
    fn queues_are_bounded_by_how_far_a_replica_is_ahead() {
        let mut t = T::new(2, 2);
        for i in 0..1000 {
            t.line(3, STDOUT, &format!("l{i}\n"));
            t.line(2, STDOUT, &format!("l{i}\n"));
            assert!(t.r.queued_lines() <= 1);
        }
        assert_eq!(t.text(1, STDOUT), seq("l", 1000));
    }

    #[test]
    fn prefixed_lines_get_their_newline() {
        let mut buf = Vec::new();
        write_line(&mut buf, Some("[2] "), b"partial").unwrap();
        write_line(&mut buf, None, b"whole\n").unwrap();
        assert_eq!(buf, b"[2] partial\nwhole\n");
    }
}
