//! The FT (file transfer) service and its client: staging a job's program and input files into
//! a job directory on every peer that runs some of its processes (SPEC §6, thesis §3.1.2).
//!
//! The thesis' FT has two modes: the submitter sends the program and input files to each node
//! in turn (mode 1), or sends only URLs and lets each node download for itself (mode 2). Both
//! are here — a file's [`FileSource`] is `Inline` (mode 1) or `Url` (mode 2), mixed freely in
//! one offer — and so is what SPEC §6 asks "beyond" them:
//!
//! * **content hashes and a per-peer cache.** The offer names every inline file by its BLAKE3
//!   hash and size; the peer keeps what it received in `<cache_dir>/<hex hash>`. Content the
//!   cache holds is not sent again, so re-running an unchanged program on the same peers costs
//!   one round trip, not one upload per peer.
//! * **parallel staging with a bounded fan-out** ([`stage_many`]): the submitter's uplink is
//!   shared by at most `fanout` transfers instead of sending to nodes one after the other.
//! * **refusal of paths that escape the job's directory**: a staged name comes from the network
//!   and must never write anywhere but below `<jobs_dir>/<job>/`.
//!
//! ## Protocol
//!
//! Over a [`SecureConn`] (so only grid members talk to an FT at all):
//!
//! ```text
//! client                                   FT service
//! Offer { ticket, job, files } ─────────▶  checks job id, names, URL schemes, ticket
//!                              ◀─────────  Need([indices]) | Error(reason)
//! Chunk { index, data } …      ─────────▶  (each needed file in order, ≤ 1 MiB per record)
//! Done                         ─────────▶  verifies size + hash of every received file,
//!                                          fetches URL files, installs cached files
//!                              ◀─────────  Staged { cached, received, fetched } | Error(reason)
//! ```
//!
//! `Need` lists the inline files whose content the cache lacks (a hash offered twice is asked
//! once). Received content goes to a temporary file in the cache dir and is renamed to its hash
//! only after its size and hash were checked, so the cache only ever holds verified content; a
//! cache hit is hashed again before it is trusted (a job writing through its hard link, or a
//! torn write, must not poison later jobs). Files are installed as hard links to the cache when
//! the cache file already has the wanted mode (`0o755` executable, else `0o644`), else copied:
//! a hard link shares the mode, so linking across modes would flip other jobs' files. URL
//! files (`http://` only — the peer has no TLS) are fetched by the peer itself with a time-out
//! and at most [`FtContext::fetch_max`] bytes (`FT_FETCH_MAX`, checked against the announced
//! length and again while the body streams in). Nothing is installed unless every inline file
//! was verified.
//!
//! ## Cache quota
//!
//! The cache keeps at most [`FtContext::cache_max`] bytes (`FT_CACHE_MAX`). The quota is
//! checked **before** a transfer, against the sizes the offer announces: an offer is refused,
//! before any byte is written, when its inline files together exceed [`FtContext::job_max`]
//! (`FT_JOB_MAX`), or when the content it would have to receive, with what other running
//! stagings are receiving, exceeds the quota (a file is never received beyond its announced
//! size either). So one staging can neither fill the disk nor evict every other entry to make
//! room for content that will not fit anyway. An entry's last use
//! is its modification time, set whenever a staging receives it or finds it in the cache (so it
//! survives a daemon restart). After every staging, and when the service starts, least recently
//! used entries are removed until the cache fits — never one that a running staging uses: an
//! offer marks every inline hash it names as in use before it looks into the cache, until it
//! ends. A removed entry does not disturb a running job (its files are hard links or copies).
//! Temporary files left by a daemon that died are removed when the service starts. A job's
//! directory goes at the job's end, or with its reservation if that is cancelled or lapses
//! before any launch (the MPD's side, told of each staged job by `check_ticket`).
//!
//! The service never panics on input. A malformed, oversized or unexpected record, a bad
//! ticket, or a peer silent for [`STALL_TIMEOUT`] between records ends that connection with a
//! log line naming the peer; the listener keeps serving. One thread serves each connection and
//! at most [`MAX_CONNECTIONS`] authenticated ones are served at once; connections still in their
//! handshake are admitted apart, so that nobody without the secret can lock the service
//! ([`crate::server`]).
//!
//! ## Safe names
//!
//! [`safe_join`] refuses a name that is empty, longer than 255 bytes, absolute, contains a NUL or
//! a backslash, or has an empty, `.` or `..` component; the joined path is checked component by
//! component to stay below the job dir (no `canonicalize`: the file does not exist yet). When
//! installing, parent directories are created one by one and must be real directories (a
//! symlink there is refused), and an existing entry at the final path is removed first (a
//! symlink is removed, never written through) before the file is created with `create_new`.

pub mod checkpoint;

use anyhow::{anyhow, bail, Context, Result};
use p2pmpi_wire::grid::{FileMeta, FileSource, FtRequest, FtResponse, Ticket};
use p2pmpi_wire::secure::{Canceller, GridSecret, SecureConn, SecureError, HANDSHAKE_TIMEOUT};
use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tracing::{info, warn};

use crate::server::{self, Limits, DAEMON_LIMITS};

/// Largest content carried by one `Chunk` record.
pub const CHUNK_SIZE: usize = 1 << 20;
/// Largest record the service accepts (a chunk plus its framing; an offer must fit too).
pub const MAX_RECORD: usize = CHUNK_SIZE + (64 << 10);
/// Time allowed between two records before a connection is considered stalled.
pub const STALL_TIMEOUT: Duration = Duration::from_secs(10);
/// Time allowed to fetch one URL file.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(300);
/// Authenticated connections served at once; more are closed with a log line (connections
/// still in their handshake do not count: see [`crate::server`]).
pub const MAX_CONNECTIONS: usize = 64;
/// Longest staged name, in bytes.
pub const MAX_NAME: usize = 255;

/// Does a ticket hold a live reservation for staging a job? (ticket, job id)
pub type TicketCheck = dyn Fn(Ticket, &str) -> bool + Send + Sync;

/// What the FT service needs from its peer daemon.
pub struct FtContext {
    /// Content-addressed cache: `<cache_dir>/<hex blake3>`.
    pub cache_dir: PathBuf,
    /// Per-job dirs: `<jobs_dir>/<job>/`.
    pub jobs_dir: PathBuf,
    pub secret: GridSecret,
    /// Does this ticket hold a live reservation here, for staging this job? (the RS answers;
    /// the MPD records the job with the reservation, so that its directory goes with a
    /// reservation that lapses or is cancelled unused)
    pub check_ticket: Box<TicketCheck>,
    /// `FT_CACHE_MAX`: bytes the cache keeps (see the module doc).
    pub cache_max: u64,
    /// `FT_FETCH_MAX`: largest `http://` input fetched, bytes.
    pub fetch_max: u64,
    /// `FT_JOB_MAX`: most bytes of inline files staged for one job.
    pub job_max: u64,
    /// Jobs' checkpoints kept here: `<ckpt_dir>/<job>/` ([`checkpoint`]).
    pub ckpt_dir: PathBuf,
    /// `CHECKPOINT_MAX`: most bytes of checkpoints kept for one job.
    pub ckpt_max: u64,
    /// Bytes the running stagings are receiving (booked before their transfers).
    receiving: AtomicU64,
    /// Cache entries (hex hashes) used by running stagings, with how many use each.
    in_use: parking_lot::Mutex<HashMap<String, usize>>,
}

impl FtContext {
    /// A context with the default `FT_CACHE_MAX` and `FT_FETCH_MAX`.
    pub fn new(
        cache_dir: PathBuf,
        jobs_dir: PathBuf,
        secret: GridSecret,
        check_ticket: impl Fn(Ticket, &str) -> bool + Send + Sync + 'static,
    ) -> Self {
        FtContext {
            cache_dir,
            ckpt_dir: jobs_dir.with_file_name("checkpoints"),
            jobs_dir,
            secret,
            check_ticket: Box::new(check_ticket),
            cache_max: crate::config::DEFAULT_FT_CACHE_MAX,
            fetch_max: crate::config::DEFAULT_FT_FETCH_MAX,
            job_max: crate::config::DEFAULT_FT_JOB_MAX,
            ckpt_max: crate::config::DEFAULT_CHECKPOINT_MAX,
            receiving: AtomicU64::new(0),
            in_use: Default::default(),
        }
    }

    /// Books `bytes` of the cache quota for a transfer, unless they do not fit beside what
    /// the running stagings receive: `Err(bytes booked by others)` then.
    fn book(&self, bytes: u64) -> Result<Booked<'_>, u64> {
        let cap = self.cache_max;
        self.receiving
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |r| r.checked_add(bytes).filter(|&t| t <= cap))
            .map(|_| Booked { ctx: self, bytes })
    }

    /// Marks cache entries as used by a running staging until the guard is dropped.
    fn use_entries<'a>(&'a self, hashes: impl Iterator<Item = &'a [u8; 32]>) -> InUse<'a> {
        let mut in_use = self.in_use.lock();
        let names: Vec<String> = hashes.map(hex).collect();
        for n in &names {
            *in_use.entry(n.clone()).or_default() += 1;
        }
        InUse { ctx: self, names }
    }
}

/// Bytes of the quota a running transfer booked (see [`FtContext::book`]).
struct Booked<'a> {
    ctx: &'a FtContext,
    bytes: u64,
}

impl Drop for Booked<'_> {
    fn drop(&mut self) {
        self.ctx.receiving.fetch_sub(self.bytes, Ordering::SeqCst);
    }
}

/// Cache entries a running staging uses (see [`FtContext::use_entries`]).
struct InUse<'a> {
    ctx: &'a FtContext,
    names: Vec<String>,
}

impl Drop for InUse<'_> {
    fn drop(&mut self) {
        let mut in_use = self.ctx.in_use.lock();
        for n in &self.names {
            if let Some(k) = in_use.get_mut(n) {
                *k -= 1;
                if *k == 0 {
                    in_use.remove(n);
                }
            }
        }
    }
}

/// Is this a cache entry's name (64 lowercase hex digits)?
fn is_entry_name(name: &str) -> bool {
    name.len() == 64 && name.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Keeps the cache within `cache_max` bytes: removes entries by least recent use, skipping
/// those a running staging uses. Returns the names removed, oldest first.
pub fn enforce_cache_quota(ctx: &FtContext) -> Vec<String> {
    // Held throughout, so no staging starts using an entry while it is being removed.
    let in_use = ctx.in_use.lock();
    let Ok(dir) = fs::read_dir(&ctx.cache_dir) else { return Vec::new() };
    let mut entries: Vec<(std::time::SystemTime, String, u64)> = dir
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok().filter(|n| is_entry_name(n))?;
            let m = fs::symlink_metadata(e.path()).ok().filter(|m| m.is_file())?;
            Some((m.modified().unwrap_or(std::time::UNIX_EPOCH), name, m.len()))
        })
        .collect();
    let mut total: u64 = entries.iter().map(|e| e.2).sum();
    if total <= ctx.cache_max {
        return Vec::new();
    }
    entries.sort();
    let mut removed = Vec::new();
    for (_, name, len) in entries {
        if total <= ctx.cache_max {
            break;
        }
        if in_use.contains_key(&name) {
            continue;
        }
        match fs::remove_file(ctx.cache_dir.join(&name)) {
            Ok(()) => {
                total -= len;
                removed.push(name);
            }
            Err(e) => warn!("ft: cannot evict cache entry {name}: {e}"),
        }
    }
    if !removed.is_empty() {
        info!(
            "ft: cache above FT_CACHE_MAX ({} bytes): evicted {} least recently used entr{}, {total} bytes kept",
            ctx.cache_max,
            removed.len(),
            if removed.len() == 1 { "y" } else { "ies" }
        );
    }
    removed
}

/// Removes temporary files that daemons no longer running left in the cache.
fn remove_stale_temp_files(cache: &Path) {
    let Ok(dir) = fs::read_dir(cache) else { return };
    for e in dir.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name.strip_prefix(".tmp-").and_then(|r| r.split('-').next()).and_then(|p| p.parse().ok())
        else {
            continue;
        };
        if pid != std::process::id() && !crate::home::pid_alive(pid) {
            let _ = fs::remove_file(e.path());
        }
    }
}

/// Records a use of a cache entry (its last-use time is its modification time).
fn touch(path: &Path) {
    // Opened for reading: the entry may be a running job's program (no write access then).
    if let Err(e) = File::open(path).and_then(|f| f.set_modified(std::time::SystemTime::now())) {
        warn!("ft: cannot record the use of {}: {e}", path.display());
    }
}

/// Serves FT connections on `listener` until the process ends (spawns its accept thread and
/// returns immediately), with the admission of [`crate::server`]: at most [`MAX_CONNECTIONS`]
/// authenticated connections, those still in their handshake counted apart.
pub fn serve(listener: TcpListener, ctx: Arc<FtContext>) {
    remove_stale_temp_files(&ctx.cache_dir);
    enforce_cache_quota(&ctx);
    let limits = Limits { authenticated: MAX_CONNECTIONS, ..DAEMON_LIMITS };
    let c = ctx.clone();
    let keys = Arc::new(move |job: &str| checkpoint::access(&c.ckpt_dir, job));
    server::serve_keyed(
        "ft",
        listener,
        ctx.secret.clone(),
        keys,
        limits,
        MAX_RECORD,
        move |conn, peer, job| match job {
            Some(job) => checkpoint::serve_conn(conn, peer, &ctx, &job, STALL_TIMEOUT),
            None => serve_conn(conn, peer, &ctx, STALL_TIMEOUT),
        },
    );
}

/// Serves one accepted connection, handshake included (public for tests).
pub fn handle(stream: TcpStream, ctx: &FtContext) {
    handle_with_timeout(stream, ctx, STALL_TIMEOUT)
}

/// [`handle`] with another stall time-out (tests use a short one).
pub fn handle_with_timeout(stream: TcpStream, ctx: &FtContext, stall: Duration) {
    let peer = peer_of(&stream);
    let timeout = stall.min(HANDSHAKE_TIMEOUT);
    let deadline = std::time::Instant::now() + timeout;
    let proven = SecureConn::accept(stream, &ctx.secret, timeout).and_then(|mut c| {
        c.set_max_record(MAX_RECORD);
        c.await_proof(deadline).map(|()| c)
    });
    match proven {
        Ok(c) => serve_conn(c, peer, ctx, stall),
        Err(e) => warn!("ft: refused a connection from {peer}: {e}"),
    }
}

/// Serves one authenticated connection: stagings until the client closes it.
fn serve_conn(mut conn: SecureConn, peer: SocketAddr, ctx: &FtContext, stall: Duration) {
    conn.set_max_record(MAX_RECORD);
    if let Err(e) = conn.set_read_timeout(Some(stall)) {
        return warn!("ft: {peer}: cannot set a time-out: {e}");
    }
    if let Err(reason) = session(&mut conn, ctx, peer) {
        warn!("ft: {peer}: {reason}; connection closed");
    }
    conn.writer.close();
}

fn peer_of(s: &TcpStream) -> SocketAddr {
    s.peer_addr().unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)))
}

/// The job directory for a job id, validated (no creation).
pub fn job_dir(jobs_dir: &Path, job: &str) -> Result<PathBuf> {
    if job.is_empty() || job.len() > 64 || !job.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        bail!("invalid job id {job:?} (want 1 to 64 lowercase hex digits)");
    }
    Ok(jobs_dir.join(job))
}

/// Joins a staged file name to a job dir, refusing escapes (see the module doc).
pub fn safe_join(dir: &Path, name: &str) -> Result<PathBuf> {
    let bad = |why: &str| Err(anyhow!("refused file name {name:?}: {why}"));
    if name.is_empty() {
        return bad("empty");
    }
    if name.len() > MAX_NAME {
        return bad("longer than 255 bytes");
    }
    if name.starts_with('/') {
        return bad("absolute");
    }
    if name.contains('\0') || name.contains('\\') {
        return bad("contains a NUL or a backslash");
    }
    let mut path = dir.to_path_buf();
    for part in name.split('/') {
        if part.is_empty() || part == "." || part == ".." {
            return bad("empty, `.` or `..` component");
        }
        path.push(part);
    }
    let rest = path.strip_prefix(dir).map_err(|_| anyhow!("refused file name {name:?}: escapes"))?;
    if !rest.components().all(|c| matches!(c, Component::Normal(_))) {
        return bad("escapes the job directory");
    }
    Ok(path)
}

/// Removes a job's directory (after the job ended). Errors ignored/logged.
pub fn remove_job(jobs_dir: &Path, job: &str) {
    match job_dir(jobs_dir, job) {
        Ok(dir) => match fs::remove_dir_all(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => warn!("ft: cannot remove {}: {e}", dir.display()),
        },
        Err(e) => warn!("ft: not removing a job dir: {e:#}"),
    }
}

// ---------------------------------------------------------------------------------------
// Service

/// How a staging ends badly: `Refuse` answers an `Error` first, `Drop` just closes.
enum Fail {
    Refuse(String),
    Drop(String),
}

fn drop_err(e: SecureError) -> Fail {
    if e.is_timeout() {
        Fail::Drop("stalled".into())
    } else {
        Fail::Drop(e.to_string())
    }
}

fn session(conn: &mut SecureConn, ctx: &FtContext, peer: SocketAddr) -> Result<(), String> {
    loop {
        let (ticket, job, files) = match conn.recv::<FtRequest>() {
            Ok(Some(FtRequest::Offer { ticket, job, files })) => (ticket, job, files),
            Ok(Some(FtRequest::CheckpointGrant { ticket, job, key })) => {
                let answer = checkpoint::grant(ctx, ticket, &job, &key);
                if let Err(e) = &answer {
                    warn!("ft: {peer}: checkpoint grant for job {job} refused: {e}");
                }
                conn.send(&answer.map_or_else(FtResponse::Error, |()| FtResponse::Granted))
                    .map_err(|e| e.to_string())?;
                continue;
            }
            Ok(Some(_)) => {
                let _ = conn.send(&FtResponse::Error("expected an offer".into()));
                return Err("record other than an offer".into());
            }
            Ok(None) => return Ok(()),
            Err(e) if e.is_timeout() => return Err("stalled".into()),
            Err(e) => return Err(e.to_string()),
        };
        let staged = staging(conn, ctx, ticket, &job, &files);
        enforce_cache_quota(ctx);
        match staged {
            Ok((cached, received, fetched)) => {
                info!("ft: staged job {job} for {peer}: {cached} cached, {received} received, {fetched} fetched");
                conn.send(&FtResponse::Staged { cached, received, fetched }).map_err(|e| e.to_string())?;
            }
            Err(Fail::Refuse(msg)) => {
                let _ = conn.send(&FtResponse::Error(msg.clone()));
                return Err(format!("refused staging of job {job}: {msg}"));
            }
            Err(Fail::Drop(msg)) => return Err(format!("during staging of job {job}: {msg}")),
        }
    }
}

fn hex(hash: &[u8; 32]) -> String {
    blake3::Hash::from_bytes(*hash).to_hex().to_string()
}

fn mode_of(executable: bool) -> u32 {
    if executable {
        0o755
    } else {
        0o644
    }
}

/// One offer, from its checks to the installed files: (cached, received, fetched).
fn staging(
    conn: &mut SecureConn,
    ctx: &FtContext,
    ticket: Ticket,
    job: &str,
    files: &[FileMeta],
) -> Result<(u32, u32, u32), Fail> {
    let refuse = |m: String| Fail::Refuse(m);
    let dir = job_dir(&ctx.jobs_dir, job).map_err(|e| refuse(format!("{e:#}")))?;
    let mut names = std::collections::HashSet::new();
    for f in files {
        safe_join(&dir, &f.name).map_err(|e| refuse(format!("{e:#}")))?;
        if !names.insert(f.name.as_str()) {
            return Err(refuse(format!("file name {:?} offered twice", f.name)));
        }
        if let FileSource::Url(url) = &f.source {
            let scheme_ok = url.len() <= 4096 && url.get(..7).is_some_and(|s| s.eq_ignore_ascii_case("http://"));
            if !scheme_ok {
                return Err(refuse(format!("file {:?}: only http:// URLs can be fetched, not {url:?}", f.name)));
            }
        }
    }
    if files.len() > u32::MAX as usize {
        return Err(refuse("too many files".into()));
    }
    let inline_bytes = files.iter().fold(0u64, |t, f| match f.source {
        FileSource::Inline { size, .. } => t.saturating_add(size),
        FileSource::Url(_) => t,
    });
    if inline_bytes > ctx.job_max {
        let max = ctx.job_max;
        return Err(refuse(format!("the job's files are {inline_bytes} bytes, more than FT_JOB_MAX ({max} bytes)")));
    }
    if !(ctx.check_ticket)(ticket, job) {
        return Err(refuse("unknown reservation ticket".into()));
    }
    fs::create_dir_all(&ctx.cache_dir).map_err(|e| refuse(format!("cannot create the cache dir: {e}")))?;

    // Every entry this offer names stays in the cache until it ends.
    let _in_use = ctx.use_entries(files.iter().filter_map(|f| match &f.source {
        FileSource::Inline { hash, .. } => Some(hash),
        FileSource::Url(_) => None,
    }));

    // What the cache lacks (each hash asked once).
    let mut need: Vec<u32> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for (i, f) in files.iter().enumerate() {
        if let FileSource::Inline { hash, size } = &f.source {
            if seen.insert(*hash) && !cache_holds(&ctx.cache_dir, hash, *size) {
                need.push(i as u32);
            }
        }
    }
    // The quota, before any byte is received (the sizes are announced and enforced).
    let to_receive = need.iter().fold(0u64, |t, &i| match files[i as usize].source {
        FileSource::Inline { size, .. } => t.saturating_add(size),
        FileSource::Url(_) => t,
    });
    let _booked = ctx.book(to_receive).map_err(|others| {
        let max = ctx.cache_max;
        refuse(format!(
            "{to_receive} bytes to receive do not fit the cache: FT_CACHE_MAX is {max} bytes, \
             {others} of them booked by running stagings"
        ))
    })?;
    conn.send(&FtResponse::Need(need.clone())).map_err(drop_err)?;

    // Content, in order, then Done. The reservation is renewed with every chunk: a staging
    // longer than RESERVATION_HOLD does not lose it.
    let lapsed = || refuse("the reservation lapsed during the staging".into());
    let mut cur = 0usize;
    let mut incoming: Option<Incoming> = None;
    loop {
        match conn.recv::<FtRequest>().map_err(drop_err)? {
            Some(FtRequest::Chunk { index, data }) => {
                if !(ctx.check_ticket)(ticket, job) {
                    return Err(lapsed());
                }
                while need.get(cur) != Some(&index) {
                    if cur >= need.len() {
                        return Err(refuse(format!("content for file index {index} was not asked for")));
                    }
                    finish(ctx, &files[need[cur] as usize], incoming.take())?;
                    cur += 1;
                }
                let f = &files[index as usize];
                let FileSource::Inline { size, .. } = f.source else { return Err(refuse("not an inline file".into())) };
                if incoming.is_none() {
                    incoming = Some(Incoming::create(&ctx.cache_dir).map_err(|e| refuse(format!("cache: {e}")))?);
                }
                if let Some(inc) = incoming.as_mut() {
                    if inc.written + data.len() as u64 > size {
                        return Err(refuse(format!("file {:?}: more than its {size} bytes were sent", f.name)));
                    }
                    inc.write(&data).map_err(|e| refuse(format!("cache: cannot write: {e}")))?;
                }
            }
            Some(FtRequest::Done) => break,
            Some(FtRequest::Offer { .. } | FtRequest::CheckpointGrant { .. }) => {
                return Err(refuse("unexpected offer during a transfer".into()))
            }
            None => return Err(Fail::Drop("closed in the middle of a transfer".into())),
        }
    }
    while cur < need.len() {
        finish(ctx, &files[need[cur] as usize], incoming.take())?;
        cur += 1;
    }
    if !(ctx.check_ticket)(ticket, job) {
        return Err(lapsed());
    }

    // Everything verified: fetch, then install.
    fs::create_dir_all(&ctx.jobs_dir).map_err(|e| refuse(format!("cannot create the jobs dir: {e}")))?;
    match fs::create_dir(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(refuse(format!("cannot create the job dir: {e}"))),
    }
    if !fs::symlink_metadata(&dir).is_ok_and(|m| m.is_dir()) {
        return Err(refuse("the job dir is not a directory".into()));
    }
    let mut fetched = 0;
    for f in files {
        if let FileSource::Url(url) = &f.source {
            fetch(&dir, f, url, ctx.fetch_max).map_err(|e| refuse(format!("file {:?}: {e:#}", f.name)))?;
            fetched += 1;
        }
    }
    let mut inline = 0;
    for f in files {
        if let FileSource::Inline { hash, .. } = &f.source {
            install(&ctx.cache_dir, &dir, f, hash).map_err(|e| refuse(format!("file {:?}: {e:#}", f.name)))?;
            inline += 1;
        }
    }
    Ok((inline - need.len() as u32, need.len() as u32, fetched))
}

/// Is this content in the cache, intact? (A damaged entry is removed.)
fn cache_holds(cache: &Path, hash: &[u8; 32], size: u64) -> bool {
    let path = cache.join(hex(hash));
    match fs::symlink_metadata(&path) {
        Ok(m) if m.is_file() && m.len() == size => {}
        Ok(_) => {
            let _ = fs::remove_file(&path);
            return false;
        }
        Err(_) => return false,
    }
    let ok = File::open(&path).and_then(|f| blake3::Hasher::new().update_reader(f).map(|h| h.finalize())).ok()
        == Some(blake3::Hash::from_bytes(*hash));
    if ok {
        touch(&path);
    } else {
        warn!("ft: cache entry {} is damaged; removed", path.display());
        let _ = fs::remove_file(&path);
    }
    ok
}

/// Content being received into a temporary file of the cache dir (removed unless kept).
struct Incoming {
    file: File,
    path: PathBuf,
    hasher: blake3::Hasher,
    written: u64,
    kept: bool,
}

impl Incoming {
    fn create(cache: &Path) -> io::Result<Self> {
        let mut r = [0u8; 8];
        getrandom::fill(&mut r).map_err(|e| io::Error::other(e.to_string()))?;
        let path = cache.join(format!(".tmp-{}-{:016x}", std::process::id(), u64::from_le_bytes(r)));
        let file = OpenOptions::new().write(true).create_new(true).mode(0o600).open(&path)?;
        Ok(Incoming { file, path, hasher: blake3::Hasher::new(), written: 0, kept: false })
    }

    fn write(&mut self, data: &[u8]) -> io::Result<()> {
        self.file.write_all(data)?;
        self.hasher.update(data);
        self.written += data.len() as u64;
        Ok(())
    }
}

impl Drop for Incoming {
    fn drop(&mut self) {
        if !self.kept {
            let _ = fs::remove_file(&self.path);
        }
    }
}

/// Verifies one received file and moves it into the cache under its hash.
fn finish(ctx: &FtContext, f: &FileMeta, inc: Option<Incoming>) -> Result<(), Fail> {
    let FileSource::Inline { hash, size } = f.source else { return Err(Fail::Refuse("not an inline file".into())) };
    let refuse = |m: String| Fail::Refuse(format!("file {:?}: {m}", f.name));
    let mut inc = match inc {
        Some(i) => i,
        None => Incoming::create(&ctx.cache_dir).map_err(|e| refuse(format!("cache: {e}")))?,
    };
    if inc.written != size {
        return Err(refuse(format!("received {} bytes, expected {size}", inc.written)));
    }
    if inc.hasher.finalize() != blake3::Hash::from_bytes(hash) {
        return Err(refuse("content does not match its BLAKE3 hash".into()));
    }
    let entry = ctx.cache_dir.join(hex(&hash));
    fs::set_permissions(&inc.path, fs::Permissions::from_mode(mode_of(f.executable)))
        .and_then(|()| fs::rename(&inc.path, &entry))
        .map_err(|e| refuse(format!("cache: {e}")))?;
    inc.kept = true;
    touch(&entry);
    Ok(())
}

/// Makes `<dir>/<name>` ready to be created: parent directories exist and are real
/// directories (not symlinks), and nothing is left at the final path.
fn prepare(dir: &Path, name: &str) -> Result<PathBuf> {
    let target = safe_join(dir, name)?;
    let parts: Vec<&str> = name.split('/').collect();
    let mut at = dir.to_path_buf();
    for part in &parts[..parts.len() - 1] {
        at.push(part);
        match fs::symlink_metadata(&at) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => bail!("{} is not a directory", at.display()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => fs::create_dir(&at)
                .or_else(|e| if e.kind() == io::ErrorKind::AlreadyExists { Ok(()) } else { Err(e) })
                .with_context(|| format!("cannot create {}", at.display()))?,
            Err(e) => bail!("{}: {e}", at.display()),
        }
    }
    match fs::symlink_metadata(&target) {
        Ok(m) if m.is_dir() => bail!("a directory is in the way"),
        Ok(_) => fs::remove_file(&target).context("cannot replace the existing file")?,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => bail!("{e}"),
    }
    Ok(target)
}

/// Creates a new file (never through a symlink) with `mode`, whatever the umask.
fn create_new(path: &Path, mode: u32) -> io::Result<File> {
    let f = OpenOptions::new().write(true).create_new(true).mode(mode).open(path)?;
    f.set_permissions(fs::Permissions::from_mode(mode))?;
    Ok(f)
}

fn install(cache: &Path, dir: &Path, f: &FileMeta, hash: &[u8; 32]) -> Result<()> {
    let target = prepare(dir, &f.name)?;
    let src = cache.join(hex(hash));
    let mode = mode_of(f.executable);
    let cached_mode = fs::metadata(&src).context("vanished from the cache")?.permissions().mode() & 0o7777;
    if cached_mode == mode && fs::hard_link(&src, &target).is_ok() {
        return Ok(());
    }
    let mut out = create_new(&target, mode).context("cannot create")?;
    let copied = File::open(&src).and_then(|mut i| io::copy(&mut i, &mut out));
    if let Err(e) = copied {
        let _ = fs::remove_file(&target);
        return Err(anyhow!("cannot copy from the cache: {e}"));
    }
    Ok(())
}

/// Fetches an `http://` input into the job dir: at most `max` bytes (`FT_FETCH_MAX`), refused
/// at once when the server announces more, else stopped as soon as more arrives.
fn fetch(dir: &Path, f: &FileMeta, url: &str, max: u64) -> Result<()> {
    let target = prepare(dir, &f.name)?;
    let config = ureq::Agent::config_builder()
        .timeout_global(Some(FETCH_TIMEOUT))
        .timeout_connect(Some(Duration::from_secs(10)))
        .build();
    let agent = ureq::Agent::new_with_config(config);
    let mut resp = agent.get(url).call().map_err(|e| anyhow!("cannot fetch {url}: {e}"))?;
    let announced = resp.headers().get("content-length").and_then(|v| v.to_str().ok()?.trim().parse::<u64>().ok());
    if let Some(len) = announced.filter(|&len| len > max) {
        bail!("cannot fetch {url}: it is {len} bytes, more than FT_FETCH_MAX ({max} bytes)");
    }
    let mut out = create_new(&target, mode_of(f.executable)).context("cannot create")?;
    let mut body = resp.body_mut().as_reader().take(max.saturating_add(1));
    let copied = io::copy(&mut body, &mut out);
    let failed = match copied {
        Ok(n) if n > max => Some(format!("more than FT_FETCH_MAX ({max} bytes)")),
        Ok(_) => None,
        Err(e) => Some(e.to_string()),
    };
    if let Some(why) = failed {
        drop(out);
        let _ = fs::remove_file(&target);
        bail!("cannot fetch {url}: {why}");
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Client

/// A file the submitter stages.
#[derive(Debug, Clone)]
pub enum LocalFile {
    /// A local file, staged under `name`.
    Path { name: String, path: PathBuf, executable: bool },
    /// A URL the peer fetches itself.
    Url { name: String, url: String, executable: bool },
}

impl LocalFile {
    pub fn name(&self) -> &str {
        match self {
            LocalFile::Path { name, .. } | LocalFile::Url { name, .. } => name,
        }
    }
}

/// Hashes local files (BLAKE3, streamed) once, producing the offer. Errors name the file.
pub fn describe(files: &[LocalFile]) -> Result<Vec<FileMeta>> {
    files
        .iter()
        .map(|lf| {
            safe_join(Path::new("job"), lf.name())?;
            Ok(match lf {
                LocalFile::Path { name, path, executable } => {
                    let file = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
                    let mut hasher = blake3::Hasher::new();
                    hasher.update_reader(file).with_context(|| format!("cannot read {}", path.display()))?;
                    let source = FileSource::Inline { hash: *hasher.finalize().as_bytes(), size: hasher.count() };
                    FileMeta { name: name.clone(), source, executable: *executable }
                }
                LocalFile::Url { name, url, executable } => {
                    FileMeta { name: name.clone(), source: FileSource::Url(url.clone()), executable: *executable }
                }
            })
        })
        .collect()
}

/// What one staging did on a peer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StageReport {
    /// Files whose content the peer's cache already held.
    pub cached: u32,
    /// Files whose content was sent.
    pub received: u32,
    /// URL files the peer fetched itself.
    pub fetched: u32,
}

/// Stages `files` (with their `metas` from describe, same order) to one peer's FT at `addr`.
/// `timeout` bounds each wait for the peer (the handshake at most [`CONNECT_LIMIT`]).
pub fn stage(
    addr: SocketAddr,
    secret: &GridSecret,
    ticket: Ticket,
    job: &str,
    files: &[LocalFile],
    metas: &[FileMeta],
    timeout: Duration,
) -> Result<StageReport> {
    stage_cancellable(addr, secret, ticket, job, files, metas, timeout, &Canceller::new())
}

/// [`stage`], its connection closed by `cancel` whenever it is called (a watchdog that found
/// the peer frozen: its kernel still accepts and buffers, nothing answers).
#[allow(clippy::too_many_arguments)]
pub fn stage_cancellable(
    addr: SocketAddr,
    secret: &GridSecret,
    ticket: Ticket,
    job: &str,
    files: &[LocalFile],
    metas: &[FileMeta],
    timeout: Duration,
    cancel: &Canceller,
) -> Result<StageReport> {
    stage_counted(addr, secret, ticket, job, files, metas, timeout, cancel, &AtomicU64::new(0))
}

/// [`stage_cancellable`], adding to `sent` the bytes of file content as they are sent (for a
/// progress display).
#[allow(clippy::too_many_arguments)]
pub fn stage_counted(
    addr: SocketAddr,
    secret: &GridSecret,
    ticket: Ticket,
    job: &str,
    files: &[LocalFile],
    metas: &[FileMeta],
    timeout: Duration,
    cancel: &Canceller,
    sent: &AtomicU64,
) -> Result<StageReport> {
    stage_inner(addr, secret, ticket, job, files, metas, timeout, cancel, sent)
        .map_err(|e| anyhow!("staging to {addr} failed: {e:#}"))
}

/// Longest wait for a staging's connection and handshake (one round trip).
pub const CONNECT_LIMIT: Duration = Duration::from_secs(10);

#[allow(clippy::too_many_arguments)]
fn stage_inner(
    addr: SocketAddr,
    secret: &GridSecret,
    ticket: Ticket,
    job: &str,
    files: &[LocalFile],
    metas: &[FileMeta],
    timeout: Duration,
    cancel: &Canceller,
    sent: &AtomicU64,
) -> Result<StageReport> {
    if files.len() != metas.len() || files.iter().zip(metas).any(|(f, m)| f.name() != m.name) {
        bail!("the file descriptions do not match the files");
    }
    let mut conn = SecureConn::connect_cancellable(None, addr, secret, timeout.min(CONNECT_LIMIT), cancel)?;
    conn.set_read_timeout(Some(timeout))?;
    let offer = FtRequest::Offer { ticket, job: job.to_string(), files: metas.to_vec() };
    let need = match conn.call(&offer)? {
        FtResponse::Need(need) => need,
        FtResponse::Error(msg) => bail!("the peer refused: {msg}"),
        other => bail!("unexpected answer {other:?}"),
    };
    let mut last = None;
    for &i in &need {
        let ok = metas.get(i as usize).is_some_and(|m| matches!(m.source, FileSource::Inline { .. }));
        if !ok || last.is_some_and(|l| l >= i) {
            bail!("the peer asked for an unexpected file (index {i})");
        }
        last = Some(i);
    }
    if let Err(e) = send_content(&mut conn, files, &need, sent) {
        // The peer may have said why it stopped reading.
        if let Ok(Some(FtResponse::Error(msg))) = conn.recv::<FtResponse>() {
            bail!("the peer refused: {msg}");
        }
        return Err(e);
    }
    let urls = metas.iter().any(|m| matches!(m.source, FileSource::Url(_)));
    conn.set_read_timeout(Some(timeout + if urls { FETCH_TIMEOUT } else { Duration::ZERO }))?;
    match conn.recv::<FtResponse>()? {
        Some(FtResponse::Staged { cached, received, fetched }) => Ok(StageReport { cached, received, fetched }),
        Some(FtResponse::Error(msg)) => bail!("the peer refused: {msg}"),
        Some(other) => bail!("unexpected answer {other:?}"),
        None => bail!("the peer closed the connection"),
    }
}

fn send_content(conn: &mut SecureConn, files: &[LocalFile], need: &[u32], sent: &AtomicU64) -> Result<()> {
    let mut buf = vec![0u8; CHUNK_SIZE];
    for &i in need {
        let LocalFile::Path { name, path, .. } = &files[i as usize] else { bail!("the peer asked for a URL file") };
        let mut f = File::open(path).with_context(|| format!("cannot open {} (staged as {name})", path.display()))?;
        loop {
            let n = read_full(&mut f, &mut buf).with_context(|| format!("cannot read {}", path.display()))?;
            if n == 0 {
                break;
            }
            conn.send(&FtRequest::Chunk { index: i, data: buf[..n].to_vec() })?;
            sent.fetch_add(n as u64, Ordering::Relaxed);
            if n < buf.len() {
                break;
            }
        }
    }
    conn.send(&FtRequest::Done)?;
    Ok(())
}

/// Reads until `buf` is full or the end of the file.
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// Stages to several peers at once, at most `fanout` in parallel, results in the order of
/// `targets`.
#[allow(clippy::too_many_arguments)]
pub fn stage_many(
    targets: &[SocketAddr],
    fanout: usize,
    secret: &GridSecret,
    ticket: Ticket,
    job: &str,
    files: &[LocalFile],
    metas: &[FileMeta],
    timeout: Duration,
) -> Vec<Result<StageReport>> {
    let results: Vec<Mutex<Option<Result<StageReport>>>> = targets.iter().map(|_| Mutex::new(None)).collect();
    let next = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..fanout.clamp(1, targets.len().max(1)) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                let Some(&addr) = targets.get(i) else { break };
                let r = stage(addr, secret, ticket, job, files, metas, timeout);
                *results[i].lock().unwrap_or_else(|p| p.into_inner()) = Some(r);
            });
        }
    });
    results
        .into_iter()
        .zip(targets)
        .map(|(m, addr)| {
            m.into_inner()
                .unwrap_or_else(|p| p.into_inner())
                .unwrap_or_else(|| Err(anyhow!("staging to {addr} failed: not attempted")))
        })
        .collect()
}
