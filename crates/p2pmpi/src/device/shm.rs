//! The shared-memory path between two processes of one host: a pair of single-producer,
//! single-consumer rings in a segment both map, carrying exactly the bytes the TCP
//! connection would carry (the same frames), so matching, MID order and `ANY_SOURCE` do not
//! know which transport a peer uses.
//!
//! # Records
//!
//! A ring holds records, each on a cache-line boundary: a stamp word (the record's position
//! XOR the segment's random token), a length word, then up to a chunk of the byte stream. The
//! writer fills the record and stores its stamp last; the reader polls the stamp at its read
//! position. No tail index is shared: a small frame and its stamp share one cache line, so a
//! message costs one line transfer, not two (the tail's, then the frame's).
//!
//! # The segment
//!
//! A file in `/dev/shm` (tmpfs), created by the process that opens the connection (the
//! *connector*) with `O_CREAT | O_EXCL | O_NOFOLLOW` and mode 0600, mapped with `memmap2`
//! (a well-kept crate whose `MmapRaw` gives a shared read-write mapping without claiming
//! exclusive access to memory another process writes). Its name is 128 bits of the HMAC of
//! the job key over the opening's nonce: nobody without the job key can guess it, and the
//! acceptor derives it from the `Hello` without a name on the wire. The acceptor opens it
//! only if it belongs to this user with mode 0600 and has the size its header announces,
//! maps it and **unlinks it at once**; the connector unlinks it too when the opening ends
//! (whichever comes first; the other gets `ENOENT`). From then on the segment lives only in
//! the two mappings, and the kernel frees it when both processes are gone, whatever killed
//! them. The only window for a leftover file is between the connector's `open` and its
//! `Hello` being handled by the acceptor (the opening's round trip), if both processes die in
//! it (a job stopped while it starts): such files are reaped by the next process that creates
//! a segment (`reap_stale`: its creator's pid no longer runs).
//!
//! A memfd would leave no window at all, but passing its descriptor needs a Unix socket
//! (the device's connections are TCP, possibly across a firewall-friendly single port) or
//! `pidfd_getfd` (ptrace permission, often refused in containers); `/dev/shm` with an
//! unguessable name and an early unlink works everywhere Linux runs.
//!
//! # The TCP connection stays
//!
//! The pair's authenticated TCP connection is kept: the opening (challenge-response on the
//! job key) runs on it, a process that dies closes it (the kernel does, even after
//! `kill -9`), and it is the doorbell of a process asleep in `epoll_wait`. A reader that
//! finds its ring empty sleeps only after setting the ring's `consumer_sleep` flag and
//! checking the ring once more; a writer that published bytes checks the flag and, if set,
//! clears it and writes one byte on the TCP connection (Dekker's pattern with sequentially
//! consistent fences on both sides: one of them sees the other). The same holds for a
//! writer waiting for room (`producer_sleep`). While processes spin or yield no system call
//! is made at all.
//!
//! # Failures
//!
//! A peer's death shows as end-of-file on the TCP connection. The ring is then read to its
//! end (what the peer published before dying), and the connection fails as a TCP one would:
//! a message cut in the middle completes no request (a rendez-vous or large eager stream
//! stops with its request pending, then the whole communication fails naming the rank).
//! Indices the peer publishes are checked (`tail - head <= capacity`, monotonic), so a
//! corrupted ring is a protocol error, never a read out of bounds.

//!
//! # Single copy (off by default)
//!
//! With `P2PMPI_SHM_SINGLE_COPY=1`, a receiver copies a rendez-vous message straight from
//! its sender's buffer with `process_vm_readv` ([`copy_from`]) instead of through the ring.
//! Whether it may, and that the pid the peer published is the process that maps this very
//! segment, is probed once per connection ([`Link::probe_single_copy`]: the peer's view of
//! the header, read at the address it published, must equal ours, random token included);
//! the outcome is published in the header for the peer as a sender. Each copy reads the
//! sender's ticket before and after the data, so a withdrawn send or a recycled pid never
//! delivers bytes. Measured slower than the pipelined ring on the machines tried (docs/shm.md).

use memmap2::{MmapOptions, MmapRaw};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::PathBuf;
use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};

const MAGIC: u64 = 0x7032_706d_7069_7368; // "p2pmpish"
const VERSION: u64 = 3;
/// Bytes of the segment header (magic, version, capacity, creator pid, and the words of the
/// single copy below).
const SEG_HEADER: usize = 128;
// Words (u64 indices) of the segment header used by the single copy (`process_vm_readv`):
// where each side maps the segment, its pid, a random token, and whether each side may read
// the other's memory.
const W_CREATOR_PID: usize = 3;
const W_CONNECTOR_ADDR: usize = 4;
const W_TOKEN: usize = 5;
const W_ACCEPTOR_PID: usize = 6;
const W_ACCEPTOR_ADDR: usize = 7;
const W_CONNECTOR_READS: usize = 8;
const W_ACCEPTOR_READS: usize = 9;
/// Bytes of the header a probe reads from the peer: magic through the token.
const PROBE_LEN: usize = 48;
/// Values of the `*_READS` words (0 while not probed yet): permitted, refused (or turned off).
const READS_YES: u64 = 1;
const READS_NO: u64 = 2;
/// Bytes of a ring's control block: the consumer's head and the two sleep flags, each on its
/// own pair of cache lines (no false sharing between the producer's and the consumer's
/// writes). (The producer publishes no index: each record carries its own stamp.)
const RING_HEADER: usize = 512;
const HEAD: usize = 128;
const CONSUMER_SLEEP: usize = 256;
const PRODUCER_SLEEP: usize = 384;

/// Records start on cache-line boundaries...
const REC_ALIGN: usize = 64;
/// ...with a header of two words: the stamp (the record's position XOR the segment's stamp
/// key) and the data's length.
const REC_HDR: usize = 16;

/// Bytes a record of `n` data bytes takes in the ring, header and padding included.
#[inline]
const fn record_size(n: usize) -> usize {
    (REC_HDR + n + REC_ALIGN - 1) & !(REC_ALIGN - 1)
}

/// Smallest and largest ring capacities accepted (`P2PMPI_SHM_RING`).
pub(crate) const MIN_RING: usize = 4096;
pub(crate) const MAX_RING: usize = 1 << 26;
/// Default capacity of each direction's ring.
pub(crate) const DEFAULT_RING: usize = 1 << 20;
/// Most bytes one write publishes, or one read releases, at once: large transfers are
/// pipelined (the reader copies a chunk out while the writer copies the next one in).
const CHUNK: usize = 64 * 1024;

fn seg_len(cap: usize) -> usize {
    SEG_HEADER + 2 * (RING_HEADER + cap)
}

/// Where segments are created: `/dev/shm`, or `P2PMPI_SHM_DIR` (tests watch a directory of
/// their own for leftovers).
fn dir() -> PathBuf {
    std::env::var_os("P2PMPI_SHM_DIR").map_or_else(|| PathBuf::from("/dev/shm"), PathBuf::from)
}

/// The segment's path for an opening with nonce `nc` under `key`.
pub(crate) fn path_for(key: &p2pmpi_wire::auth::JobKey, nc: &[u8]) -> PathBuf {
    let mac = key.proof(p2pmpi_wire::auth::Role::Seed, &[b"p2pmpi shared-memory segment", nc]);
    let hex: String = mac[..16].iter().map(|b| format!("{b:02x}")).collect();
    dir().join(format!("{}{hex}", job_prefix(key)))
}

/// The name prefix of the job's segments: `p2pmpi-`, 32 bits of the HMAC of its key, `-`.
fn job_prefix(key: &p2pmpi_wire::auth::JobKey) -> String {
    let mac = key.proof(p2pmpi_wire::auth::Role::Seed, &[b"p2pmpi shared-memory job".as_slice()]);
    format!("p2pmpi-{:02x}{:02x}{:02x}{:02x}-", mac[0], mac[1], mac[2], mac[3])
}

/// Removes every segment of the job of `key` still in the directory (its launcher, once the
/// job's processes ended: a process killed while it created one leaves it without a header,
/// which [`reap_now`] cannot attribute). Returns how many.
pub(crate) fn remove_job_segments(key: &p2pmpi_wire::auth::JobKey) -> usize {
    let prefix = job_prefix(key);
    let Ok(entries) = std::fs::read_dir(dir()) else { return 0 };
    entries
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .filter(|e| std::fs::remove_file(e.path()).is_ok())
        .count()
}

/// The ring capacity to create segments with: `P2PMPI_SHM_RING` (bytes, a power of two
/// within bounds) or [`DEFAULT_RING`].
pub(crate) fn ring_capacity() -> usize {
    std::env::var("P2PMPI_SHM_RING")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|c| c.is_power_of_two() && (MIN_RING..=MAX_RING).contains(c))
        .unwrap_or(DEFAULT_RING)
}

/// Removes the segments left by processes that died during an opening (a job stopped while
/// it started: the connector created the segment, nobody mapped it). Once per process,
/// before its first segment: every `p2pmpi-*` file of this user whose header names a
/// creator that no longer runs. (A reused pid keeps its file: conservative.)
fn reap_stale() {
    static DONE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if !DONE.swap(true, Ordering::Relaxed) {
        reap_now();
    }
}

/// [`reap_stale`]'s sweep.
fn reap_now() {
    use std::io::Read;
    let Ok(entries) = std::fs::read_dir(dir()) else { return };
    // SAFETY: geteuid takes no argument and cannot fail.
    let me = unsafe { libc::geteuid() };
    for e in entries.flatten() {
        if !e.file_name().to_string_lossy().starts_with("p2pmpi-") {
            continue;
        }
        let path = e.path();
        let Ok(mut f) = OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC).open(&path)
        else {
            continue;
        };
        let mut h = [0u8; 32];
        let Ok(meta) = f.metadata() else { continue };
        if !(meta.uid() == me && meta.is_file()) {
            continue;
        }
        if f.read_exact(&mut h).is_err() {
            // No header: its creator died between creating the file and sizing it (it writes
            // the header right after), unless it was created a moment ago.
            let age = meta.modified().ok().and_then(|t| t.elapsed().ok());
            if meta.len() < h.len() as u64 && age.is_some_and(|a| a > std::time::Duration::from_secs(60)) {
                let _ = std::fs::remove_file(&path);
            }
            continue;
        }
        let word = |i: usize| u64::from_ne_bytes(h[i * 8..i * 8 + 8].try_into().unwrap_or([0; 8]));
        let pid = word(3);
        if word(0) == MAGIC && pid > 0 && !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_file(&path);
        }
    }
}

/// One side of one ring: where its control block and data are in the mapping.
struct Ring {
    ctl: *mut u8,
    data: *mut u8,
    cap: usize,
}

impl Ring {
    fn atomic64(&self, off: usize) -> &AtomicU64 {
        // SAFETY: `ctl + off` (off one of TAIL, HEAD: multiples of 128 within RING_HEADER)
        // is 8-aligned inside the mapping, which outlives `self` (both live in one `Link`,
        // the map field dropped last); the other process only accesses it atomically too.
        unsafe { &*(self.ctl.add(off) as *const AtomicU64) }
    }
    fn atomic32(&self, off: usize) -> &AtomicU32 {
        // SAFETY: as in `atomic64`: an aligned word of the control block.
        unsafe { &*(self.ctl.add(off) as *const AtomicU32) }
    }
    fn head(&self) -> &AtomicU64 {
        self.atomic64(HEAD)
    }
    fn consumer_sleep(&self) -> &AtomicU32 {
        self.atomic32(CONSUMER_SLEEP)
    }
    fn producer_sleep(&self) -> &AtomicU32 {
        self.atomic32(PRODUCER_SLEEP)
    }

    /// The word at position `pos` of the data (a record's stamp at a record's position, its
    /// length 8 bytes further).
    #[inline]
    fn word_at(&self, pos: u64) -> &AtomicU64 {
        // SAFETY: `pos` is a record's position (a multiple of REC_ALIGN) or 8 more, masked
        // into the data, whose capacity is a multiple of REC_ALIGN: the word is 8-aligned
        // (the data starts at a page offset multiple of 64) and inside the mapping, which
        // outlives `self`; the other process only accesses record headers atomically too.
        unsafe { &*(self.data.add(pos as usize & (self.cap - 1)) as *const AtomicU64) }
    }

    /// Room for writing (producer side).
    fn room(&self, tail: u64) -> Result<usize, String> {
        let head = self.head().load(Ordering::Acquire);
        let used = tail.wrapping_sub(head);
        if used > self.cap as u64 {
            return Err(format!("shared-memory ring corrupted (tail {tail}, head {head}, capacity {})", self.cap));
        }
        Ok(self.cap - used as usize)
    }
}

/// A connection's two rings, once both processes mapped the segment.
pub(crate) struct Link {
    tx: Ring,
    rx: Ring,
    /// Where our next record goes (our own count: no shared copy).
    tx_tail: u64,
    /// The consumer's head as last read: the room it shows is never more than the truth, so
    /// a write that fits in it needs no look at the consumer's cache line (in a ping-pong,
    /// one miss fewer per message).
    tx_head_seen: u64,
    /// Where the record being read starts (our own copy of the head we publish: a peer could
    /// scribble on the shared one, ours is the truth).
    rx_head: u64,
    /// The length of the record being read (0: not known yet, its stamp not seen), and how
    /// much of it was read.
    rx_len: usize,
    rx_off: usize,
    /// The segment's random token with its top bit set: a record at position `p` is stamped
    /// `p ^ stamp_key`, which no earlier lap's stamp at that place, nor zeroed memory, equals.
    stamp_key: u64,
    /// The path, while this process may still have to unlink it (the creator).
    path: Option<PathBuf>,
    /// Start of the mapping (its header).
    base: *mut u8,
    /// This side created the segment (it opened the connection).
    connector: bool,
    /// The peer's pid, once a probe showed that this process may read the peer's memory and
    /// that this pid maps this very segment (see [`Self::probe_single_copy`]).
    peer_pid: Option<i32>,
    _map: MmapRaw,
}

impl Drop for Link {
    fn drop(&mut self) {
        self.unlink();
    }
}

impl Link {
    /// Creates the segment of an opening with nonce `nc` (the connector's side), with rings
    /// of `cap` bytes.
    pub(crate) fn create(key: &p2pmpi_wire::auth::JobKey, nc: &[u8], cap: usize) -> std::io::Result<Link> {
        reap_stale();
        let path = path_for(key, nc);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path)?;
        let made = (|| {
            file.set_len(seg_len(cap) as u64)?;
            let map = MmapOptions::new().len(seg_len(cap)).map_raw(&file)?;
            let base = map.as_mut_ptr();
            // SAFETY: the mapping is `seg_len(cap)` >= SEG_HEADER bytes, page-aligned, and
            // nobody else maps it yet (the acceptor learns of it from the Hello sent after
            // this returns); the header's words are written before it is announced.
            unsafe {
                let h = base as *mut u64;
                h.write(MAGIC);
                h.add(1).write(VERSION);
                h.add(2).write(cap as u64);
                h.add(W_CREATOR_PID).write(u64::from(std::process::id()));
                h.add(W_CONNECTOR_ADDR).write(base as u64);
                h.add(W_TOKEN).write(u64::from_ne_bytes(token()));
            }
            Ok::<_, std::io::Error>(Link::from_map(map, cap, true, Some(path.clone())))
        })();
        if made.is_err() {
            let _ = std::fs::remove_file(&path);
        }
        made
    }

    /// Opens, checks, maps and unlinks the segment of an opening with nonce `nc` (the
    /// acceptor's side).
    pub(crate) fn open(key: &p2pmpi_wire::auth::JobKey, nc: &[u8]) -> Result<Link, String> {
        let path = path_for(key, nc);
        let file: File = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path)
            .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
        // Removed whatever happens next: from now on only the mappings hold it.
        let _ = std::fs::remove_file(&path);
        let meta = file.metadata().map_err(|e| format!("cannot stat the segment: {e}"))?;
        // SAFETY: geteuid takes no argument and cannot fail.
        let me = unsafe { libc::geteuid() };
        if meta.uid() != me || meta.mode() & 0o777 != 0o600 || !meta.is_file() {
            return Err(format!("segment owned by uid {} with mode {:o}, not ours with 0600", meta.uid(), meta.mode()));
        }
        let len = meta.len() as usize;
        if len < seg_len(MIN_RING) || len > seg_len(MAX_RING) {
            return Err(format!("segment of {len} bytes"));
        }
        let map = MmapOptions::new().len(len).map_raw(&file).map_err(|e| format!("cannot map the segment: {e}"))?;
        let base = map.as_ptr() as *const u64;
        // SAFETY: the mapping is at least SEG_HEADER bytes (checked above), page-aligned; the
        // creator wrote the header before sending the Hello that led here.
        let (magic, version, cap) = unsafe { (base.read(), base.add(1).read(), base.add(2).read()) };
        let cap = usize::try_from(cap).unwrap_or(0);
        if magic != MAGIC || version != VERSION || !cap.is_power_of_two() || seg_len(cap) != len {
            return Err(format!("not a segment of this version (magic {magic:#x}, version {version}, capacity {cap})"));
        }
        let link = Link::from_map(map, cap, false, None);
        link.word(W_ACCEPTOR_PID).store(u64::from(std::process::id()), Ordering::Relaxed);
        link.word(W_ACCEPTOR_ADDR).store(link.base as u64, Ordering::Release);
        Ok(link)
    }

    fn from_map(map: MmapRaw, cap: usize, connector: bool, path: Option<PathBuf>) -> Link {
        let base = map.as_mut_ptr();
        let ring = |i: usize| {
            // SAFETY: both rings lie inside the `seg_len(cap)` bytes mapped: ring `i` (0 or 1)
            // starts at SEG_HEADER + i * (RING_HEADER + cap) and spans RING_HEADER + cap.
            let ctl = unsafe { base.add(SEG_HEADER + i * (RING_HEADER + cap)) };
            // SAFETY: as above, the data follows the control block inside the ring's span.
            let data = unsafe { ctl.add(RING_HEADER) };
            Ring { ctl, data, cap }
        };
        // Ring 0 carries the connector's bytes, ring 1 the acceptor's.
        let (tx, rx) = if connector { (ring(0), ring(1)) } else { (ring(1), ring(0)) };
        // SAFETY: word W_TOKEN of the header, inside the mapping; the creator wrote it before
        // the segment was announced.
        let token = unsafe { (base as *const u64).add(W_TOKEN).read() };
        Link {
            tx,
            rx,
            tx_tail: 0,
            tx_head_seen: 0,
            rx_head: 0,
            rx_len: 0,
            rx_off: 0,
            stamp_key: token | 1 << 63,
            path,
            base,
            connector,
            peer_pid: None,
            _map: map,
        }
    }

    /// Word `i` of the segment header.
    fn word(&self, i: usize) -> &AtomicU64 {
        debug_assert!(i < SEG_HEADER / 8);
        // SAFETY: `base` is the page-aligned start of the mapping, which outlives `self` and
        // holds SEG_HEADER bytes of header: word `i < 16` is 8-aligned inside it; the other
        // process writes these words once, before the message that makes us read them, or
        // atomically.
        unsafe { &*(self.base.add(8 * i) as *const AtomicU64) }
    }

    /// Checks whether this process may copy from the peer's memory (`process_vm_readv`) and
    /// that the pid the peer published is the process that maps this very segment: reads the
    /// peer's view of the segment header at the address it published and compares it with
    /// ours (it includes a random token). Publishes the outcome: the peer, as a sender, offers
    /// its buffers only if this side may read them ([`Self::peer_reads_me`]). `enabled`
    /// false (the default; `P2PMPI_SHM_SINGLE_COPY=1` turns it on) publishes a refusal.
    pub(crate) fn probe_single_copy(&mut self, enabled: bool) -> Result<i32, String> {
        let outcome =
            if enabled { self.probe() } else { Err("turned off (P2PMPI_SHM_SINGLE_COPY=1 turns it on)".to_string()) };
        let mine = if self.connector { W_CONNECTOR_READS } else { W_ACCEPTOR_READS };
        self.word(mine).store(if outcome.is_ok() { READS_YES } else { READS_NO }, Ordering::Release);
        self.peer_pid = outcome.as_ref().ok().copied();
        outcome
    }

    fn probe(&self) -> Result<i32, String> {
        let (wp, wa) =
            if self.connector { (W_ACCEPTOR_PID, W_ACCEPTOR_ADDR) } else { (W_CREATOR_PID, W_CONNECTOR_ADDR) };
        let pid = self.word(wp).load(Ordering::Acquire);
        let addr = self.word(wa).load(Ordering::Acquire);
        let pid = i32::try_from(pid).ok().filter(|p| *p > 0).ok_or("no peer pid in the segment")?;
        if addr == 0 {
            return Err("no peer address in the segment".into());
        }
        let mut theirs = [0u8; PROBE_LEN];
        // SAFETY: `theirs` is valid for writes of PROBE_LEN bytes.
        let n =
            unsafe { vm_read(pid, &[(theirs.as_mut_ptr(), addr, PROBE_LEN)]) }.map_err(|e| match e.raw_os_error() {
                Some(libc::EPERM) => format!("process_vm_readv not permitted (EPERM: {e})"),
                Some(libc::ENOSYS) => format!("process_vm_readv not available (ENOSYS: {e})"),
                _ => format!("process_vm_readv failed: {e}"),
            })?;
        // SAFETY: the header's first PROBE_LEN bytes, inside the mapping (see `word`); the
        // words compared are written once before the peer learnt of the segment.
        let ours = unsafe { std::slice::from_raw_parts(self.base as *const u8, PROBE_LEN) };
        if n != PROBE_LEN || theirs[..] != ours[..] {
            return Err(format!("process {pid} does not map this segment where it said"));
        }
        Ok(pid)
    }

    /// The peer's pid, if this process may copy from its memory (a successful probe).
    pub(crate) fn peer_pid(&self) -> Option<i32> {
        self.peer_pid
    }

    /// Whether the peer probed this process's memory successfully: it may then copy large
    /// messages straight from this process's buffers. (Not probed yet: no.)
    pub(crate) fn peer_reads_me(&self) -> bool {
        let theirs = if self.connector { W_ACCEPTOR_READS } else { W_CONNECTOR_READS };
        self.word(theirs).load(Ordering::Acquire) == READS_YES
    }

    /// Removes the segment's name (the creator's duty once the acceptor has it, or the
    /// opening failed).
    pub(crate) fn unlink(&mut self) {
        if let Some(p) = self.path.take() {
            let _ = std::fs::remove_file(p);
        }
    }

    /// Writes as much of `buf` as there is room for. Returns the bytes written and whether
    /// the peer asked to be woken (a byte to send on the TCP connection).
    pub(crate) fn write(&mut self, buf: &[u8]) -> Result<(usize, bool), String> {
        self.write_parts(&[buf])
    }

    /// Writes as much of the concatenation of `parts` as there is room for, as one record
    /// (a frame's header and payload: one stamp, one check for a sleeping reader).
    pub(crate) fn write_parts(&mut self, parts: &[&[u8]]) -> Result<(usize, bool), String> {
        let want = parts.iter().map(|p| p.len()).sum::<usize>().min(self.max_record());
        if want == 0 {
            return Ok((0, false));
        }
        let room = self.room_for(record_size(want))?;
        // The data bytes that fit in the room's whole lines after the record's header.
        let n = want.min((room & !(REC_ALIGN - 1)).saturating_sub(REC_HDR));
        if n == 0 {
            return Ok((0, false));
        }
        let cap = self.tx.cap;
        let mut at = (self.tx_tail as usize + REC_HDR) & (cap - 1);
        let mut left = n;
        for buf in parts {
            let k = left.min(buf.len());
            if k == 0 {
                continue;
            }
            let first = k.min(cap - at);
            // SAFETY: `at + first <= cap` and `k - first < cap`: both copies stay inside the
            // ring's data; the record's bytes are free (`record_size(n) <= room`), and the
            // consumer reads none of them before the stamp's Release store in `publish`;
            // `buf` is our memory.
            unsafe {
                std::ptr::copy_nonoverlapping(buf.as_ptr(), self.tx.data.add(at), first);
                std::ptr::copy_nonoverlapping(buf.as_ptr().add(first), self.tx.data, k - first);
            }
            at = (at + k) & (cap - 1);
            left -= k;
            if left == 0 {
                break;
            }
        }
        Ok((n, self.publish(n)))
    }

    /// The largest record's data: a chunk, or what a ring smaller than two chunks holds.
    #[inline]
    fn max_record(&self) -> usize {
        CHUNK.min(self.tx.cap - REC_HDR)
    }

    /// Room for writing: from the head last seen if that shows at least `want` bytes, else
    /// from the consumer's head read again.
    #[inline(always)]
    fn room_for(&mut self, want: usize) -> Result<usize, String> {
        let used = self.tx_tail.wrapping_sub(self.tx_head_seen);
        if used <= self.tx.cap as u64 && self.tx.cap - used as usize >= want {
            return Ok(self.tx.cap - used as usize);
        }
        let room = self.tx.room(self.tx_tail)?;
        self.tx_head_seen = self.tx_tail.wrapping_sub((self.tx.cap - room) as u64);
        Ok(room)
    }

    /// Writes a whole frame — `hdr`, then `payload` — as one record if there is room for it
    /// and it does not wrap around the ring's end; returns whether the peer asked to be
    /// woken, or `None` (nothing written): [`Self::write_parts`] then writes it. The common
    /// case of a small message, with one copy of a fixed size for the header; a frame of up
    /// to 8 payload bytes fills exactly one cache line with its record header. (Always
    /// inline, as `Conn::ring_write_now`: a call more is 40 instructions per message.)
    #[inline(always)]
    pub(crate) fn write_frame<const H: usize>(
        &mut self,
        hdr: &[u8; H],
        payload: &[u8],
    ) -> Result<Option<bool>, String> {
        let n = H + payload.len();
        let cap = self.tx.cap;
        let at = (self.tx_tail as usize) & (cap - 1);
        if n > self.max_record() || at + REC_HDR + n > cap || self.room_for(record_size(n))? < record_size(n) {
            return Ok(None);
        }
        // SAFETY: `at + REC_HDR + n <= cap`: both copies stay inside the ring's data; the
        // record's bytes are free (room checked), and the consumer reads none of them before
        // the stamp's Release store in `publish`; `hdr` and `payload` are our memory.
        unsafe {
            let d = self.tx.data.add(at + REC_HDR);
            std::ptr::copy_nonoverlapping(hdr.as_ptr(), d, H);
            if !payload.is_empty() {
                std::ptr::copy_nonoverlapping(payload.as_ptr(), d.add(H), payload.len());
            }
        }
        Ok(Some(self.publish(n)))
    }

    /// Publishes the record of `n` data bytes written at the tail: its length, then its stamp;
    /// returns whether the consumer sleeps waiting for it (its flag is cleared: one doorbell
    /// per sleep).
    #[inline(always)]
    fn publish(&mut self, n: usize) -> bool {
        let pos = self.tx_tail;
        self.tx.word_at(pos + 8).store(n as u64, Ordering::Relaxed);
        // A sequentially consistent exchange, then a sequentially consistent load of the
        // flag: the consumer stores its flag, fences (SeqCst) and reads the stamp (`arm`), so
        // one of the two sees the other's store. The exchange is a locked instruction, where
        // a store and a separate fence cost an `mfence` more (slow on these CPUs). Its
        // Release half publishes the data and the length written before it.
        self.tx.word_at(pos).swap(pos ^ self.stamp_key, Ordering::SeqCst);
        self.tx_tail = pos.wrapping_add(record_size(n) as u64);
        Self::take_flag(self.tx.consumer_sleep())
    }

    /// The data bytes of the record at the read position not read yet (0: no record there
    /// yet), learning the record's length from its stamp and length words the first time.
    #[inline]
    fn current(&mut self) -> Result<usize, String> {
        if self.rx_len == 0 {
            self.rx_len = self.peek_record()?;
            self.rx_off = 0;
        }
        Ok(self.rx_len - self.rx_off)
    }

    /// The length of the record at the read position if its stamp is there (0 if not), or an
    /// error if the peer wrote an impossible length.
    #[inline]
    fn peek_record(&self) -> Result<usize, String> {
        let pos = self.rx_head;
        if self.rx.word_at(pos).load(Ordering::Acquire) != pos ^ self.stamp_key {
            return Ok(0);
        }
        let len = self.rx.word_at(pos + 8).load(Ordering::Relaxed);
        if len == 0 || len > CHUNK.min(self.rx.cap - REC_HDR) as u64 {
            return Err(format!(
                "shared-memory ring corrupted (a record of {len} bytes at {pos}, capacity {})",
                self.rx.cap
            ));
        }
        Ok(len as usize)
    }

    /// Where the unread data of the current record starts in the ring's data.
    #[inline]
    fn read_at(&self) -> usize {
        (self.rx_head as usize + REC_HDR + self.rx_off) & (self.rx.cap - 1)
    }

    /// Marks `n` more bytes of the current record read; once it is all read, gives its space
    /// back (the new head) and returns whether the producer sleeps waiting for room (as
    /// [`Self::publish`]).
    #[inline]
    fn advance(&mut self, n: usize) -> bool {
        self.rx_off += n;
        debug_assert!(self.rx_off <= self.rx_len);
        if self.rx_off < self.rx_len {
            return false;
        }
        self.rx_head = self.rx_head.wrapping_add(record_size(self.rx_len) as u64);
        self.rx_len = 0;
        self.rx_off = 0;
        self.rx.head().swap(self.rx_head, Ordering::SeqCst);
        Self::take_flag(self.rx.producer_sleep())
    }

    /// Reads up to `buf.len()` bytes. Returns the bytes read and whether the peer asked to
    /// be woken (it waits for room).
    pub(crate) fn read(&mut self, buf: &mut [u8]) -> Result<(usize, bool), String> {
        // SAFETY: `buf` is valid for writes of its length (a slice).
        unsafe { self.read_raw(buf.as_mut_ptr(), buf.len()) }
    }

    /// [`Self::read`] into raw memory: at most a chunk, across records.
    ///
    /// # Safety
    /// `dst` must be valid for writes of `len` bytes, and not be the ring's memory.
    pub(crate) unsafe fn read_raw(&mut self, dst: *mut u8, len: usize) -> Result<(usize, bool), String> {
        let len = len.min(CHUNK);
        let cap = self.rx.cap;
        let (mut done, mut wake) = (0, false);
        while done < len {
            let k = self.current()?.min(len - done);
            if k == 0 {
                break;
            }
            let at = self.read_at();
            let first = k.min(cap - at);
            // SAFETY: `at + first <= cap` and `k - first < cap`: inside the ring's data; the
            // bytes are the current record's, published by the producer's Release store of
            // its stamp (Acquire-loaded in `peek_record`), ours until `advance` gives them
            // back; `dst` is valid for `done + k <= len` bytes (the caller).
            unsafe {
                std::ptr::copy_nonoverlapping(self.rx.data.add(at), dst.add(done), first);
                std::ptr::copy_nonoverlapping(self.rx.data, dst.add(done + first), k - first);
            }
            done += k;
            wake |= self.advance(k);
        }
        Ok((done, wake))
    }

    /// The header of the frame at the read position, copied, if its `H` bytes lie in one
    /// piece in the current record before the ring's end, and how many published bytes follow
    /// the read position so (header included). `None` when fewer than `H` bytes lie so.
    #[inline]
    pub(crate) fn peek_header<const H: usize>(&mut self) -> Result<Option<([u8; H], usize)>, String> {
        let avail = self.current()?;
        let at = self.read_at();
        let n = avail.min(self.rx.cap - at);
        if n < H {
            return Ok(None);
        }
        let mut h = [0u8; H];
        // SAFETY: `at + H <= cap` (`n <= cap - at`): inside the ring's data; the bytes were
        // published with the record's stamp (Acquire-loaded in `peek_record`) and stay ours
        // until `consume` gives the record back.
        unsafe { std::ptr::copy_nonoverlapping(self.rx.data.add(at), h.as_mut_ptr(), H) };
        Ok(Some((h, n)))
    }

    /// Where the byte `off` after the read position is, for a copy straight out of the
    /// ring. Valid for reads of the bytes [`Self::peek_header`] reported published without
    /// wrapping (`off + len` at most its count), until [`Self::consume`].
    #[inline]
    pub(crate) fn at_head(&self, off: usize) -> *const u8 {
        self.rx.data.wrapping_add(self.read_at() + off)
    }

    /// Gives back `n` bytes read in place (at most what [`Self::peek_header`] reported);
    /// returns whether the peer asked to be woken (it waits for room).
    #[inline]
    pub(crate) fn consume(&mut self, n: usize) -> bool {
        self.advance(n)
    }

    #[inline]
    fn take_flag(flag: &AtomicU32) -> bool {
        flag.load(Ordering::SeqCst) != 0 && flag.swap(0, Ordering::AcqRel) != 0
    }

    /// Whether bytes wait to be read: the current record's rest, or the next record's stamp
    /// (one load, in the cache line that also holds a small frame).
    #[inline]
    pub(crate) fn has_data(&self) -> bool {
        self.rx_len > self.rx_off || !matches!(self.peek_record(), Ok(0))
    }

    /// Before sleeping: asks to be woken when data arrives (and, with `want_room`, when room
    /// is made). Returns whether the wait is over already (then nothing should sleep).
    pub(crate) fn arm(&self, want_room: bool) -> bool {
        self.rx.consumer_sleep().store(1, Ordering::SeqCst);
        if want_room {
            self.tx.producer_sleep().store(1, Ordering::SeqCst);
        }
        fence(Ordering::SeqCst);
        // (A corrupted head counts as ready: the write that follows reports it.)
        self.has_data() || (want_room && !matches!(self.tx.room(self.tx_tail), Ok(r) if r < REC_ALIGN))
    }

    /// After sleeping: no doorbell wanted any more.
    pub(crate) fn disarm(&self) {
        self.rx.consumer_sleep().store(0, Ordering::Relaxed);
        self.tx.producer_sleep().store(0, Ordering::Relaxed);
    }
}

/// 8 random bytes (the segment's token).
fn token() -> [u8; 8] {
    let n = p2pmpi_wire::auth::nonce();
    let mut t = [0u8; 8];
    t.copy_from_slice(&n[..8]);
    t
}

/// One `process_vm_readv` call: reads from process `pid`, part by part in order, `len` bytes at
/// remote address `addr` into `dst`. Returns the bytes read: a partial read completes the first
/// parts, then stops (at a fault) within the next one.
///
/// # Safety
/// Every `dst` must be valid for writes of its `len` bytes, and not overlap another.
unsafe fn vm_read(pid: i32, parts: &[(*mut u8, u64, usize)]) -> std::io::Result<usize> {
    let local: Vec<libc::iovec> =
        parts.iter().map(|&(d, _, n)| libc::iovec { iov_base: d as *mut libc::c_void, iov_len: n }).collect();
    let remote: Vec<libc::iovec> =
        parts.iter().map(|&(_, a, n)| libc::iovec { iov_base: a as usize as *mut libc::c_void, iov_len: n }).collect();
    loop {
        // SAFETY: the local iovecs describe memory valid for writes (the caller's contract);
        // the remote ones are only read, in the other process, by the kernel, which checks
        // them (a bad address is EFAULT or a partial read, never a fault here).
        let n = unsafe {
            libc::process_vm_readv(
                pid,
                local.as_ptr(),
                local.len() as libc::c_ulong,
                remote.as_ptr(),
                remote.len() as libc::c_ulong,
                0,
            )
        };
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Why a single copy failed.
#[derive(Debug)]
pub(crate) enum CopyError {
    /// The sender is gone (`ESRCH`): its connection's end follows.
    Gone,
    /// The read failed otherwise (`EFAULT`: the sender's memory went away, a dying process).
    Failed(String),
    /// The sender's ticket no longer holds the announced value: the send was withdrawn (its
    /// buffer may be gone), or the pid is not the sender's any more.
    Withdrawn,
}

/// Copies a message straight from a sender's memory: `len` bytes at `addr` in process `pid`
/// into `dst`. Every call reads the sender's ticket (8 bytes at `ticket`) before and after
/// the data, in the same `process_vm_readv`: the message counts only if both hold `value`
/// (the sender clears its ticket before it lets its buffer go, and values are never reused,
/// so the data was read from the live buffer of this very send). Partial reads go on from
/// where they stopped; a call that moves nothing is a failure.
///
/// # Safety
/// `dst` must be valid for writes of `len` bytes.
pub(crate) unsafe fn copy_from(
    pid: i32,
    addr: u64,
    len: usize,
    dst: *mut u8,
    ticket: u64,
    value: u64,
) -> Result<(), CopyError> {
    let mut done = 0usize;
    loop {
        let rest = len - done;
        let mut before = 0u64;
        let mut after = 0u64;
        let parts = [
            (&mut before as *mut u64 as *mut u8, ticket, 8),
            // SAFETY: `done < len` (or 0): inside `dst`'s `len` bytes (the caller's contract).
            (unsafe { dst.add(done) }, addr + done as u64, rest),
            (&mut after as *mut u64 as *mut u8, ticket, 8),
        ];
        // SAFETY: the two tickets' 8 bytes are locals, the data part is the rest of `dst`.
        let n = match unsafe { vm_read(pid, &parts) } {
            Ok(n) => n,
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => return Err(CopyError::Gone),
            Err(e) => return Err(CopyError::Failed(e.to_string())),
        };
        if n < 8 {
            return Err(CopyError::Failed(format!("process_vm_readv read {n} bytes of the ticket")));
        }
        if before != value {
            return Err(CopyError::Withdrawn);
        }
        if n == rest + 16 {
            return if after == value { Ok(()) } else { Err(CopyError::Withdrawn) };
        }
        let got = (n - 8).min(rest);
        if got == 0 && rest > 0 {
            return Err(CopyError::Failed("process_vm_readv read none of the data (bad address)".into()));
        }
        done += got;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(cap: usize) -> (Link, Link) {
        let key = p2pmpi_wire::auth::JobKey::from_bytes([7; 32]);
        let nc = p2pmpi_wire::auth::nonce();
        let a = Link::create(&key, &nc, cap).expect("create");
        let b = Link::open(&key, &nc).expect("open");
        assert!(!path_for(&key, &nc).exists(), "the acceptor unlinks the segment");
        (a, b)
    }

    #[test]
    fn whole_frames_are_written_and_read_in_place_until_the_ring_is_full() {
        let (mut a, mut b) = pair(MIN_RING);
        let hdr = [9u8; 40];
        let payload: Vec<u8> = (0..100u8).collect();
        // Frames of 140 bytes take records of 192 (16 of header, padding to a cache line):
        // 21 fit in a 4096-byte ring.
        assert_eq!(record_size(140), 192);
        let mut written = 0;
        while let Some(_wake) = a.write_frame(&hdr, &payload).unwrap() {
            written += 1;
            assert!(written <= 21, "a frame without room must be refused");
        }
        assert_eq!(written, 21);
        for k in 0..written {
            let (h, contiguous) = b.peek_header::<40>().unwrap().expect("a published header");
            assert_eq!(h, hdr);
            assert_eq!(contiguous, 140, "frame {k}: the record's bytes in one piece");
            let mut got = vec![0u8; 100];
            // SAFETY: `peek_header` reported at least 140 published bytes from the head.
            unsafe { std::ptr::copy_nonoverlapping(b.at_head(40), got.as_mut_ptr(), 100) };
            assert_eq!(got, payload);
            b.consume(140);
        }
        assert!(b.peek_header::<40>().unwrap().is_none(), "nothing left");
        assert!(!b.has_data());
        // 64 bytes are left before the end: the frame would wrap, so `write_frame` leaves it
        // to the byte path, whose record wraps; the reader sees only 48 bytes in one piece.
        assert!(a.write_frame(&hdr, &payload).unwrap().is_none());
        let mut frame = hdr.to_vec();
        frame.extend_from_slice(&payload);
        assert_eq!(a.write_parts(&[&hdr, &payload]).unwrap().0, 140);
        assert_eq!(b.peek_header::<40>().unwrap().map(|(_, n)| n), Some(48));
        let mut buf = vec![0u8; 140];
        let mut n = 0;
        while n < 140 {
            n += b.read(&mut buf[n..]).unwrap().0;
        }
        assert_eq!(buf, frame);
        assert!(!b.has_data(), "the old lap's stamps are not taken for new records");
    }

    #[test]
    fn the_writer_sees_room_made_by_the_reader_once_it_needs_it() {
        let (mut a, mut b) = pair(MIN_RING);
        let big = vec![1u8; MIN_RING - REC_HDR - 40];
        assert!(a.write_frame(&[0u8; 40], &big).unwrap().is_some(), "the whole ring");
        assert!(a.write_frame(&[0u8; 40], &[]).unwrap().is_none(), "full");
        let mut sink = vec![0u8; MIN_RING];
        assert_eq!(b.read(&mut sink).unwrap().0, MIN_RING - REC_HDR);
        // The head it saw last shows no room: it reads the reader's head again.
        assert_eq!(a.write(&[5u8; 100]).unwrap().0, 100);
    }

    #[test]
    fn bytes_cross_both_ways_and_wrap() {
        let (mut a, mut b) = pair(MIN_RING);
        let msg: Vec<u8> = (0..10_000u32).map(|i| (i * 7) as u8).collect();
        let mut got = Vec::new();
        let mut sent = 0;
        let mut buf = [0u8; 1000];
        while got.len() < msg.len() {
            sent += a.write(&msg[sent..]).unwrap().0;
            let (n, _) = b.read(&mut buf).unwrap();
            got.extend_from_slice(&buf[..n]);
        }
        assert_eq!(got, msg);
        assert_eq!(b.write(b"back").unwrap().0, 4);
        assert_eq!(a.read(&mut buf).unwrap().0, 4);
        assert_eq!(&buf[..4], b"back");
    }

    #[test]
    fn full_ring_takes_nothing_and_doorbells_fire_once() {
        let (mut a, mut b) = pair(MIN_RING);
        assert_eq!(a.write(&vec![1u8; 2 * MIN_RING]).unwrap().0, MIN_RING - REC_HDR);
        assert_eq!(a.write(b"x").unwrap().0, 0);
        // The producer waits for room: the consumer rings once, when it gives the record back.
        assert!(!a.arm(true), "a has no data and no room");
        let mut buf = [0u8; 16];
        assert_eq!(b.read(&mut buf).unwrap(), (16, false), "the record is not given back yet");
        let mut sink = vec![0u8; MIN_RING];
        assert_eq!(b.read(&mut sink).unwrap(), (MIN_RING - 2 * REC_HDR, true));
        a.disarm();
        assert_eq!(a.write(b"x").unwrap(), (1, false));
        assert_eq!(b.read(&mut buf).unwrap(), (1, false), "one doorbell per sleep");
        // The consumer sleeps: the producer's write rings once.
        assert!(!b.arm(false));
        assert_eq!(a.write(b"y").unwrap(), (1, true));
        assert_eq!(a.write(b"z").unwrap(), (1, false));
    }

    #[test]
    fn corrupted_records_and_indices_are_an_error() {
        let (mut a, mut b) = pair(MIN_RING);
        // A stamped record whose length is impossible.
        a.tx.word_at(8).store(10 * MIN_RING as u64, Ordering::Relaxed);
        a.tx.word_at(0).store(a.stamp_key, Ordering::Release);
        let mut buf = [0u8; 8];
        assert!(b.read(&mut buf).is_err());
        assert!(b.has_data(), "a sleeping reader wakes up to find the error");
        // A head beyond what was written: seen once the writer needs to read it again.
        b.rx.head().store(10 * MIN_RING as u64, Ordering::Release);
        assert_eq!(a.write(&[0u8; 3000]).unwrap().0, 3000, "the room seen last");
        assert!(a.write(&[0u8; 3000]).is_err());
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
        /// Any interleaving of writes (whole frames or byte runs, of any size) and reads (into
        /// buffers of any size, or in place) carries the bytes in order, whatever the ring's
        /// capacity, lap after lap.
        #[test]
        fn any_writes_and_reads_carry_the_bytes_in_order(
            cap_log in 12u32..15,
            ops in proptest::collection::vec((0u8..4, 1usize..9000), 1..200),
        ) {
            let (mut a, mut b) = pair(1 << cap_log);
            let mut sent: Vec<u8> = Vec::new();
            let mut got: Vec<u8> = Vec::new();
            let mut next = 0u32;
            let mut bytes = |n: usize| -> Vec<u8> {
                (0..n).map(|_| { next = next.wrapping_mul(1_103_515_245).wrapping_add(12_345); (next >> 16) as u8 }).collect()
            };
            for (kind, n) in ops {
                match kind {
                    0 => {
                        let data = bytes(n);
                        let (w, _) = a.write(&data).unwrap();
                        sent.extend_from_slice(&data[..w]);
                    }
                    1 => {
                        let data = bytes(n.min(200));
                        let hdr: [u8; 40] = bytes(40).try_into().unwrap();
                        if a.write_frame(&hdr, &data).unwrap().is_some() {
                            sent.extend_from_slice(&hdr);
                            sent.extend_from_slice(&data);
                        }
                    }
                    2 => {
                        let mut buf = vec![0u8; n];
                        let (r, _) = b.read(&mut buf).unwrap();
                        got.extend_from_slice(&buf[..r]);
                    }
                    _ => {
                        if let Some((h, contiguous)) = b.peek_header::<40>().unwrap() {
                            let k = contiguous.min(n).max(40);
                            got.extend_from_slice(&h);
                            let mut rest = vec![0u8; k - 40];
                            // SAFETY: `k <= contiguous` bytes lie published in one piece.
                            unsafe { std::ptr::copy_nonoverlapping(b.at_head(40), rest.as_mut_ptr(), k - 40) };
                            got.extend_from_slice(&rest);
                            b.consume(k);
                        }
                    }
                }
                proptest::prop_assert_eq!(&got[..], &sent[..got.len()]);
            }
            let mut buf = vec![0u8; 1 << 16];
            loop {
                let (r, _) = b.read(&mut buf).unwrap();
                if r == 0 { break; }
                got.extend_from_slice(&buf[..r]);
            }
            proptest::prop_assert_eq!(got, sent);
            proptest::prop_assert!(!b.has_data());
        }
    }

    #[test]
    fn single_copy_is_probed_and_checks_the_ticket() {
        let (mut a, mut b) = pair(MIN_RING);
        assert!(!a.peer_reads_me() && !b.peer_reads_me(), "not probed yet: no");
        let me = std::process::id() as i32;
        // Both ends live in this process: each reads the other's mapping of the header.
        assert_eq!(a.probe_single_copy(true), Ok(me));
        assert!(b.peer_reads_me());
        assert!(b.probe_single_copy(false).is_err_and(|e| e.contains("turned off")));
        assert!(!a.peer_reads_me());
        assert_eq!(a.peer_pid(), Some(me));
        assert_eq!(b.peer_pid(), None);

        let src: Vec<u8> = (0..300_001u32).map(|i| (i * 13 + i / 7) as u8).collect();
        let ticket = AtomicU64::new(42);
        let t = &ticket as *const AtomicU64 as u64;
        let mut dst = vec![0u8; src.len()];
        let from = src.as_ptr() as u64;
        let copy = |dst: &mut Vec<u8>, pid: i32, from: u64, value: u64| {
            // SAFETY: `dst` is valid for writes of its `dst.len()` bytes.
            unsafe { copy_from(pid, from, dst.len(), dst.as_mut_ptr(), t, value) }
        };
        copy(&mut dst, me, from, 42).unwrap();
        assert_eq!(dst, src);
        // A withdrawn send (its ticket cleared), or another send's value: refused.
        assert!(matches!(copy(&mut dst, me, from, 41), Err(CopyError::Withdrawn)));
        ticket.store(0, Ordering::SeqCst);
        assert!(matches!(copy(&mut dst, me, from, 42), Err(CopyError::Withdrawn)));
        ticket.store(42, Ordering::SeqCst);
        // Memory that is not mapped: a failure, not a fault here.
        assert!(matches!(copy(&mut dst, me, 4096, 42), Err(CopyError::Failed(_))));
        // A buffer whose end is unmapped (a sender's memory going away under the copy): the
        // read stops at the hole, goes on from there, and fails; nothing counts as whole.
        // SAFETY: sysconf takes no pointer.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
        // SAFETY: a fresh private anonymous mapping of two pages, no address imposed.
        let two = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                2 * page,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(two, libc::MAP_FAILED);
        // SAFETY: the second page of the mapping made just above, used by nothing else.
        assert_eq!(unsafe { libc::munmap((two as *mut u8).add(page) as *mut libc::c_void, page) }, 0);
        let mut half = vec![0u8; 2 * page];
        // SAFETY: `half` is valid for writes of its 2 pages.
        let r = unsafe { copy_from(me, two as u64, 2 * page, half.as_mut_ptr(), t, 42) };
        assert!(matches!(r, Err(CopyError::Failed(_))), "{r:?}");
        // SAFETY: the first page, still mapped, is this test's.
        unsafe { libc::munmap(two, page) };
        // A process that is gone.
        let mut child = std::process::Command::new("true").spawn().expect("spawn true");
        let pid = child.id() as i32;
        child.wait().unwrap();
        assert!(matches!(copy(&mut dst, pid, from, 42), Err(CopyError::Gone)));
    }

    #[test]
    fn a_probe_that_fails_falls_back_to_the_ring() {
        // The acceptor's published pid is not the process that maps the segment (a recycled
        // pid, say): refused, and the connector will not offer its buffers either way.
        let (mut a, b) = pair(MIN_RING);
        let child = std::process::Command::new("sleep").arg("30").spawn();
        let mut child = child.expect("spawn sleep");
        a.word(W_ACCEPTOR_PID).store(u64::from(child.id()), Ordering::Release);
        let e = a.probe_single_copy(true).expect_err("another process");
        assert!(e.contains("does not map this segment") || e.contains("process_vm_readv"), "{e}");
        assert!(!b.peer_reads_me());
        assert_eq!(a.peer_pid(), None);
        let _ = child.kill();
        let _ = child.wait();
        // An address where the peer maps nothing: refused too.
        let (mut a, b) = pair(MIN_RING);
        a.word(W_ACCEPTOR_ADDR).store(4096, Ordering::Release);
        assert!(a.probe_single_copy(true).is_err());
        assert!(!b.peer_reads_me());
        // No pid published at all.
        let (mut a, _b) = pair(MIN_RING);
        a.word(W_ACCEPTOR_PID).store(0, Ordering::Release);
        assert!(a.probe_single_copy(true).is_err_and(|e| e.contains("no peer pid")));
    }

    #[test]
    fn segments_of_dead_creators_are_reaped() {
        let key = p2pmpi_wire::auth::JobKey::from_bytes([5; 32]);
        let nc = p2pmpi_wire::auth::nonce();
        let l = Link::create(&key, &nc, MIN_RING).expect("create");
        let p = path_for(&key, &nc);
        // Its creator "died": a pid that cannot run (above the kernel's pid limit).
        let map = &l._map;
        // SAFETY: word 3 of the header of the mapping this test created, which it alone uses.
        unsafe { (map.as_mut_ptr() as *mut u64).add(3).write(u64::from(u32::MAX)) };
        reap_now();
        assert!(!p.exists(), "the segment of a dead creator is removed");
        // A live creator's segment stays.
        let nc2 = p2pmpi_wire::auth::nonce();
        let _l2 = Link::create(&key, &nc2, MIN_RING).expect("create");
        reap_now();
        assert!(path_for(&key, &nc2).exists(), "a live creator's segment stays");
        let _ = std::fs::remove_file(path_for(&key, &nc2));
    }

    #[test]
    fn a_foreign_or_missing_segment_is_refused() {
        let key = p2pmpi_wire::auth::JobKey::from_bytes([9; 32]);
        let nc = p2pmpi_wire::auth::nonce();
        assert!(Link::open(&key, &nc).is_err());
        let p = path_for(&key, &nc);
        std::fs::write(&p, vec![0u8; seg_len(MIN_RING)]).unwrap();
        let r = Link::open(&key, &nc);
        assert!(r.is_err(), "wrong mode or header");
        assert!(!p.exists());
    }
}
