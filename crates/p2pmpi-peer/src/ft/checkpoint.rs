//! Checkpoints kept for the jobs of other peers (issue 41): the FT service's side of
//! [`CkptRequest`].
//!
//! A job's submitter grants access to its checkpoints with `FtRequest::CheckpointGrant` (over
//! a grid connection, with a ticket of its reservation here): the key is written to
//! `<ckpt_dir>/<job>/ACCESS` (mode 0600), so that it outlives the job's reservation, a restart
//! of this daemon and a restart of the job elsewhere. The job's processes, which do not hold
//! the grid secret, then open keyed connections ([`SecureConn::connect_keyed`]) labelled with
//! the job's id; the service finds the key in that file and serves only that job's
//! checkpoints on the connection.
//!
//! Layout: `<ckpt_dir>/<job>/gen-<g>/rank-<r>.ckpt` and `gen-<g>/MANIFEST`. A piece is kept as
//! it came, record after record: the data's length (u32, little-endian), its BLAKE3 hash and
//! the data (the process encrypted it: this peer never sees a checkpoint in clear). A chunk
//! whose hash does not match its data is refused; a piece goes to a temporary file, synced,
//! and is renamed once its last chunk arrived; a manifest likewise. A generation is complete
//! here once its manifest is.
//!
//! The quota (`CHECKPOINT_MAX`, bytes per job) is checked at every chunk against what the job
//! keeps here (every generation, complete or not) plus the piece being received: a chunk that
//! would exceed it is refused with an error naming the key, and the partial piece removed. The
//! quota must hold two generations (the next is written before the last is deleted). A put
//! for a generation older than the last complete one here is answered `Stale` (a replica
//! behind its rank's others) and not kept.

use super::{self as ft, FtContext, MAX_RECORD};
use p2pmpi_wire::grid::{CkptRequest, CkptResponse, Ticket, CKPT_CHUNK};
use p2pmpi_wire::secure::{GridSecret, SecureConn};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tracing::{info, warn};

/// The file of a job's checkpoint directory that holds its access key.
pub const ACCESS: &str = "ACCESS";
/// Largest manifest accepted.
pub const MAX_MANIFEST: usize = 1 << 20;

/// The checkpoint directory of a job, its id validated (no creation).
fn job_dir(ctx_dir: &Path, job: &str) -> Result<PathBuf, String> {
    ft::job_dir(ctx_dir, job).map_err(|e| format!("{e:#}"))
}

/// The key of a keyed connection for `job`'s checkpoints, if it was granted here.
pub fn access(ckpt_dir: &Path, job: &str) -> Option<GridSecret> {
    let dir = job_dir(ckpt_dir, job).ok()?;
    let bytes = fs::read(dir.join(ACCESS)).ok()?;
    let key: [u8; 32] = bytes.try_into().ok()?;
    Some(GridSecret::keyed(&key))
}

/// Records the access key of `job`'s checkpoints (`FtRequest::CheckpointGrant`).
pub fn grant(ctx: &FtContext, ticket: Ticket, job: &str, key: &[u8; 32]) -> Result<(), String> {
    let dir = job_dir(&ctx.ckpt_dir, job)?;
    if !(ctx.check_ticket)(ticket, job) {
        return Err("no live reservation for this ticket".into());
    }
    fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    write_atomic(&dir.join(ACCESS), &[key], 0o600).map_err(|e| format!("{}: {e}", dir.display()))
}

/// Writes `parts` to `path` atomically (a temporary file beside it, synced, renamed).
fn write_atomic(path: &Path, parts: &[&[u8]], mode: u32) -> io::Result<()> {
    let tmp = temp_beside(path);
    let mut f = OpenOptions::new().write(true).create_new(true).mode(mode).open(&tmp)?;
    for p in parts {
        f.write_all(p)?;
    }
    f.sync_all()?;
    fs::rename(&tmp, path)
}

/// A temporary name beside `path`, of this process and of no other write in it.
fn temp_beside(path: &Path) -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    path.with_extension(format!("{}-{n}.tmp", std::process::id()))
}

/// The generations a job keeps here (complete or not), in increasing order.
fn generations(dir: &Path) -> Vec<u64> {
    let mut gens: Vec<u64> = fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.strip_prefix("gen-")).and_then(|g| g.parse().ok()))
        .collect();
    gens.sort_unstable();
    gens
}

fn gen_dir(dir: &Path, g: u64) -> PathBuf {
    dir.join(format!("gen-{g}"))
}

/// The last generation complete here (with its manifest).
fn last_complete(dir: &Path) -> Option<u64> {
    generations(dir).into_iter().rev().find(|&g| gen_dir(dir, g).join("MANIFEST").exists())
}

/// Bytes a job keeps here.
fn used(dir: &Path) -> u64 {
    generations(dir)
        .into_iter()
        .flat_map(|g| fs::read_dir(gen_dir(dir, g)).into_iter().flatten())
        .filter_map(|e| e.ok()?.metadata().ok())
        .map(|m| m.len())
        .sum()
}

/// The FT ports a job's processes reach for their checkpoints (from the variables the
/// launcher gives them, `P2PMPI_CHECKPOINT_PEERS`): a confined process may connect to them (the
/// service admits only connections keyed with a job's access key, or the grid's secret).
pub fn ports_of(env: &[(String, String)]) -> Vec<u16> {
    let peers = env.iter().rev().find(|(k, _)| k == "P2PMPI_CHECKPOINT_PEERS").map(|(_, v)| v.as_str());
    let mut ports: Vec<u16> = peers
        .unwrap_or_default()
        .split(',')
        .filter_map(|a| a.trim().parse::<SocketAddr>().ok())
        .map(|a| a.port())
        .collect();
    ports.sort_unstable();
    ports.dedup();
    ports
}

/// A piece being received.
struct Incoming {
    generation: u64,
    rank: u32,
    next: u32,
    file: File,
    tmp: PathBuf,
    /// Bytes the job kept here when the piece began, plus the piece so far.
    total: u64,
}

impl Drop for Incoming {
    fn drop(&mut self) {
        // Renamed when complete; a partial piece goes.
        let _ = fs::remove_file(&self.tmp);
    }
}

/// Serves one keyed connection of `job`'s processes until they close it.
pub fn serve_conn(mut conn: SecureConn, peer: SocketAddr, ctx: &FtContext, job: &str, stall: Duration) {
    conn.set_max_record(MAX_RECORD);
    if let Err(e) = conn.set_read_timeout(Some(stall)) {
        return warn!("ft: {peer}: cannot set a time-out: {e}");
    }
    let dir = match job_dir(&ctx.ckpt_dir, job) {
        Ok(d) => d,
        Err(e) => return warn!("ft: {peer}: checkpoints of job {job}: {e}"),
    };
    let mut incoming: Option<Incoming> = None;
    loop {
        let req = match conn.recv::<CkptRequest>() {
            Ok(Some(r)) => r,
            Ok(None) => break,
            Err(e) if e.is_timeout() => {
                warn!("ft: {peer}: checkpoints of job {job}: stalled; connection closed");
                break;
            }
            Err(e) => {
                warn!("ft: {peer}: checkpoints of job {job}: {e}; connection closed");
                break;
            }
        };
        let answer = match req {
            CkptRequest::Put { generation, rank, index, last, hash, data } => {
                let put = Put { generation, rank, index, last, hash: &hash, data: &data };
                put_chunk(ctx, &dir, &mut incoming, put).unwrap_or_else(|e| {
                    incoming = None;
                    CkptResponse::Error(e)
                })
            }
            CkptRequest::Commit { generation, manifest } => commit(&dir, generation, &manifest),
            CkptRequest::List => list(&dir),
            CkptRequest::Get { generation, rank } => match send_piece(&mut conn, &dir, generation, rank) {
                Ok(()) => continue,
                Err(e) => CkptResponse::Error(e),
            },
            CkptRequest::Delete { below } => delete(&dir, below),
        };
        if let CkptResponse::Error(e) = &answer {
            warn!("ft: {peer}: checkpoints of job {job}: {e}");
        }
        if conn.send(&answer).is_err() {
            break;
        }
    }
    conn.writer.close();
}

/// A `Put` request's fields.
struct Put<'a> {
    generation: u64,
    rank: u32,
    index: u32,
    last: bool,
    hash: &'a [u8; 32],
    data: &'a [u8],
}

fn put_chunk(ctx: &FtContext, dir: &Path, incoming: &mut Option<Incoming>, p: Put) -> Result<CkptResponse, String> {
    if last_complete(dir).is_some_and(|g| g > p.generation) {
        *incoming = None;
        return Ok(CkptResponse::Stale);
    }
    if p.data.len() > CKPT_CHUNK {
        return Err(format!("a chunk of {} bytes (at most {CKPT_CHUNK})", p.data.len()));
    }
    if blake3::hash(p.data).as_bytes() != p.hash {
        return Err(format!("chunk {} of rank {}'s piece: its hash does not match its data", p.index, p.rank));
    }
    if p.index == 0 {
        // Generations begun after the last complete one and before this were abandoned (a
        // checkpoint that failed): their pieces go, not to count against the quota.
        let done = last_complete(dir).unwrap_or(0);
        for old in generations(dir).into_iter().filter(|&g| g > done && g < p.generation) {
            let _ = fs::remove_dir_all(gen_dir(dir, old));
        }
        let g = gen_dir(dir, p.generation);
        fs::create_dir_all(&g).map_err(|e| format!("{}: {e}", g.display()))?;
        let tmp = temp_beside(&g.join(format!("rank-{}.ckpt", p.rank)));
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(|e| format!("{}: {e}", tmp.display()))?;
        *incoming = Some(Incoming { generation: p.generation, rank: p.rank, next: 0, file, tmp, total: used(dir) });
    }
    let inc = incoming.as_mut().filter(|i| (i.generation, i.rank, i.next) == (p.generation, p.rank, p.index));
    let Some(inc) = inc else {
        return Err(format!(
            "chunk {} of rank {}'s piece of generation {} out of order",
            p.index, p.rank, p.generation
        ));
    };
    let record = 4 + 32 + p.data.len() as u64;
    if inc.total + record > ctx.ckpt_max {
        return Err(format!(
            "quota exceeded: the job's checkpoints would take more than CHECKPOINT_MAX = {} bytes on this peer",
            ctx.ckpt_max
        ));
    }
    let write = |f: &mut File| -> io::Result<()> {
        f.write_all(&(p.data.len() as u32).to_le_bytes())?;
        f.write_all(p.hash)?;
        f.write_all(p.data)
    };
    write(&mut inc.file).map_err(|e| format!("{}: {e}", inc.tmp.display()))?;
    inc.total += record;
    inc.next += 1;
    if p.last {
        let inc = incoming.take().expect("checked above");
        let path = gen_dir(dir, inc.generation).join(format!("rank-{}.ckpt", inc.rank));
        inc.file
            .sync_all()
            .and_then(|()| fs::rename(&inc.tmp, &path))
            .map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(CkptResponse::Ok)
}

fn commit(dir: &Path, generation: u64, manifest: &str) -> CkptResponse {
    if manifest.len() > MAX_MANIFEST || !manifest.starts_with("p2pmpi checkpoint 1\n") {
        return CkptResponse::Error("not a checkpoint manifest".into());
    }
    if last_complete(dir).is_some_and(|g| g > generation) {
        return CkptResponse::Stale;
    }
    let g = gen_dir(dir, generation);
    match fs::create_dir_all(&g).and_then(|()| write_atomic(&g.join("MANIFEST"), &[manifest.as_bytes()], 0o600)) {
        Ok(()) => {
            info!("ft: checkpoint generation {generation} complete in {}", dir.display());
            CkptResponse::Ok
        }
        Err(e) => CkptResponse::Error(format!("{}: {e}", g.display())),
    }
}

fn list(dir: &Path) -> CkptResponse {
    let texts = generations(dir)
        .into_iter()
        .filter_map(|g| fs::read_to_string(gen_dir(dir, g).join("MANIFEST")).ok())
        .filter(|t| t.len() <= MAX_MANIFEST)
        .collect();
    CkptResponse::Manifests(texts)
}

/// Sends a piece's chunks as they were stored; the last is empty and says so.
fn send_piece(conn: &mut SecureConn, dir: &Path, generation: u64, rank: u32) -> Result<(), String> {
    let path = gen_dir(dir, generation).join(format!("rank-{rank}.ckpt"));
    let mut f = File::open(&path).map_err(|e| format!("rank {rank}'s piece of generation {generation}: {e}"))?;
    let mut head = [0u8; 36];
    loop {
        match read_full(&mut f, &mut head) {
            Ok(0) => break,
            Ok(36) => {}
            _ => return Err(format!("{}: a truncated record", path.display())),
        }
        let len = u32::from_le_bytes(head[..4].try_into().expect("4 bytes")) as usize;
        if len > CKPT_CHUNK {
            return Err(format!("{}: a record of {len} bytes", path.display()));
        }
        let mut data = vec![0u8; len];
        if read_full(&mut f, &mut data).ok() != Some(len) {
            return Err(format!("{}: a truncated record", path.display()));
        }
        let hash = head[4..].try_into().expect("32 bytes");
        conn.send(&CkptResponse::Chunk { hash, data, last: false }).map_err(|e| e.to_string())?;
    }
    let end = CkptResponse::Chunk { hash: *blake3::hash(&[]).as_bytes(), data: Vec::new(), last: true };
    conn.send(&end).map_err(|e| e.to_string())
}

fn read_full(r: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

fn delete(dir: &Path, below: u64) -> CkptResponse {
    if below == u64::MAX {
        // Every generation: the job is over, its access goes too.
        return match fs::remove_dir_all(dir) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => CkptResponse::Error(format!("{}: {e}", dir.display())),
            _ => CkptResponse::Ok,
        };
    }
    for g in generations(dir).into_iter().filter(|&g| g < below) {
        let d = gen_dir(dir, g);
        if let Err(e) = fs::remove_dir_all(&d) {
            if e.kind() != io::ErrorKind::NotFound {
                return CkptResponse::Error(format!("{}: {e}", d.display()));
            }
        }
    }
    CkptResponse::Ok
}
