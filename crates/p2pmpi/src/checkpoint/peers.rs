//! The store of a grid run (issue 41): each rank's piece kept on K peers of the grid other
//! than its own host, through their FT service.
//!
//! **Keys.** The launcher draws a 32-byte *checkpoint secret* per job and gives it to the
//! ranks in their environment ([`super::env::KEY`]; on the grid inside the launch request,
//! encrypted, like the job key). Two keys derive from it: the *access key*
//! ([`access_key`]), which the launcher grants to the peers' FT services and with which the
//! ranks open keyed connections to them (the grid secret stays with the daemons), and the
//! *sealing key*, which never leaves the job: every chunk is encrypted with
//! ChaCha20-Poly1305 before it is sent, so a peer keeps ciphertext only.
//!
//! **Pieces.** A piece is cut into chunks of at most [`CKPT_CHUNK`] bytes on the wire: a
//! 12-byte nonce, then the ciphertext and its tag. The nonce is synthetic (a keyed BLAKE3 of
//! the chunk's place and plaintext), so the replicas of a rank, which write the same piece,
//! send the same bytes, and a nonce is never used for two plaintexts. The associated data
//! binds a chunk to its job, generation, rank, index and whether it is the last, so chunks
//! moved, dropped or cut off fail to open. Each chunk travels with the BLAKE3 hash of its bytes
//! (the peer checks it when it stores the chunk, the reader when it gets it back), and the
//! manifest names the hash of each piece's plaintext.
//!
//! **Placement.** Rank r's piece goes to the first K peers that take it, in the order of the
//! job's peers ([`super::env::PEERS`]) rotated by r, skipping this host's own; fewer than K
//! (unreachable, refused, over quota) and the piece fails with each peer's reason. The
//! manifest goes to every peer; a generation is complete when at least K took it, and the
//! older generations are then deleted on every peer. [`Store::latest`] takes the newest
//! manifest any peer holds; [`Store::get_piece`] tries the peers in turn (the rotated order
//! first) until a copy opens and matches the manifest's hash.

use super::store::{Manifest, Store, HASH_LEN};
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{ChaCha20Poly1305, Key, Nonce};
use p2pmpi_wire::grid::{CkptRequest, CkptResponse, CKPT_CHUNK};
use p2pmpi_wire::secure::{GridSecret, SecureConn};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

/// Plaintext bytes per chunk (a chunk's nonce and tag fill it up to [`CKPT_CHUNK`]).
pub const PLAIN_CHUNK: usize = CKPT_CHUNK - 12 - 16;
/// Time to open a connection to a peer.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Time a peer may stay silent in a transfer.
const READ_TIMEOUT: Duration = Duration::from_secs(30);
/// Chunks sent to a peer ahead of its answers.
const WINDOW: usize = 4;

/// The access key of a job's checkpoints (granted to the peers) from its checkpoint secret.
pub fn access_key(secret: &[u8; 32]) -> [u8; 32] {
    blake3::derive_key("p2pmpi checkpoint access v1", secret)
}

/// The store of a grid run.
pub struct Peers {
    job: String,
    access: GridSecret,
    cipher: ChaCha20Poly1305,
    nonce_key: [u8; 32],
    peers: Vec<SocketAddr>,
    own: Option<IpAddr>,
    copies: usize,
}

fn hex32(s: &str) -> Option<[u8; 32]> {
    if s.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

fn err(kind: io::ErrorKind, msg: String) -> io::Error {
    io::Error::new(kind, msg)
}

/// A peer's answer that is not the one expected.
fn unexpected(a: CkptResponse) -> String {
    match a {
        CkptResponse::Error(e) => e,
        other => format!("unexpected answer {other:?}"),
    }
}

impl Peers {
    /// The store of job `job`'s checkpoints on `peers` (their FT addresses), `copies` copies
    /// of each piece, none on `own` (this host, when known).
    pub fn new(job: &str, secret: &[u8; 32], peers: Vec<SocketAddr>, copies: usize, own: Option<IpAddr>) -> Peers {
        let seal = blake3::derive_key("p2pmpi checkpoint seal v1", secret);
        Peers {
            job: job.to_string(),
            access: GridSecret::keyed(&access_key(secret)),
            cipher: ChaCha20Poly1305::new(Key::from_slice(&seal)),
            nonce_key: blake3::derive_key("p2pmpi checkpoint nonce v1", secret),
            peers,
            own,
            copies: copies.max(1),
        }
    }

    /// The store the environment describes ([`super::env::PEERS`], [`super::env::KEY`],
    /// [`super::env::JOB`], [`super::env::COPIES`]; this host from `P2PMPI_BIND`), or why not.
    pub fn from_env() -> Result<Peers, String> {
        use super::env;
        let var = |k: &str| std::env::var(k).map_err(|_| format!("{k} is not set"));
        let peers = var(env::PEERS)?
            .split(',')
            .filter(|s| !s.trim().is_empty())
            .map(|s| s.trim().parse().map_err(|_| format!("{}: {s:?} is not an address", env::PEERS)))
            .collect::<Result<Vec<SocketAddr>, String>>()?;
        let secret = hex32(&var(env::KEY)?).ok_or_else(|| format!("{}: not 64 hex digits", env::KEY))?;
        let job = var(env::JOB)?;
        let copies = var(env::COPIES).ok().and_then(|c| c.parse().ok()).unwrap_or(2);
        let own = std::env::var(crate::bootstrap::env::BIND).ok().and_then(|b| b.parse().ok());
        Ok(Peers::new(&job, &secret, peers, copies, own))
    }

    /// The peers in the order rank `rank` tries them: the job's list rotated by the rank.
    fn order(&self, rank: u32) -> Vec<SocketAddr> {
        let n = self.peers.len().max(1);
        let k = rank as usize % n;
        self.peers.iter().skip(k).chain(self.peers.iter().take(k)).copied().collect()
    }

    fn connect(&self, addr: SocketAddr) -> io::Result<SecureConn> {
        let c = SecureConn::connect_keyed(self.own, addr, &self.job, &self.access, CONNECT_TIMEOUT)
            .map_err(|e| err(io::ErrorKind::ConnectionRefused, format!("{addr}: {e}")))?;
        c.set_read_timeout(Some(READ_TIMEOUT))?;
        Ok(c)
    }

    fn call(&self, addr: SocketAddr, req: &CkptRequest) -> Result<CkptResponse, String> {
        let mut c = self.connect(addr).map_err(|e| e.to_string())?;
        c.call(req).map_err(|e| format!("{addr}: {e}"))
    }

    /// The associated data of a chunk: it binds the chunk to its place.
    fn aad(&self, generation: u64, rank: u32, index: u32, last: bool) -> Vec<u8> {
        let mut a = Vec::with_capacity(self.job.len() + 17);
        a.extend_from_slice(self.job.as_bytes());
        a.extend_from_slice(&generation.to_le_bytes());
        a.extend_from_slice(&rank.to_le_bytes());
        a.extend_from_slice(&index.to_le_bytes());
        a.push(last as u8);
        a
    }

    /// Seals a chunk: its nonce, then the ciphertext and tag.
    fn seal(&self, (generation, rank, index, last): (u64, u32, u32, bool), plain: &[u8]) -> Vec<u8> {
        let aad = self.aad(generation, rank, index, last);
        let mut h = blake3::Hasher::new_keyed(&self.nonce_key);
        h.update(&aad);
        h.update(plain);
        let nonce: [u8; 12] = h.finalize().as_bytes()[..12].try_into().expect("12 bytes");
        let ct = self.cipher.encrypt(Nonce::from_slice(&nonce), Payload { msg: plain, aad: &aad }).expect("sealing");
        let mut out = Vec::with_capacity(12 + ct.len());
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&ct);
        out
    }

    fn open(&self, place: (u64, u32, u32, bool), data: &[u8]) -> Result<Vec<u8>, String> {
        let (generation, rank, index, last) = place;
        if data.len() < 28 {
            return Err(format!("chunk {index}: too short"));
        }
        let aad = self.aad(generation, rank, index, last);
        self.cipher
            .decrypt(Nonce::from_slice(&data[..12]), Payload { msg: &data[12..], aad: &aad })
            .map_err(|_| format!("chunk {index} does not open (corrupted, or not this job's)"))
    }

    /// Sends a piece (`parts`, one after the other) to `addrs` at once, each chunk sealed as
    /// it goes; per peer, `Ok` or why not.
    fn send_piece(&self, addrs: &[SocketAddr], generation: u64, rank: u32, parts: &[&[u8]]) -> Vec<Result<(), String>> {
        let mut out: Vec<Result<(), String>> = Vec::with_capacity(addrs.len());
        let mut conns: Vec<Option<SecureConn>> = Vec::with_capacity(addrs.len());
        for &a in addrs {
            match self.connect(a) {
                Ok(c) => {
                    conns.push(Some(c));
                    out.push(Ok(()));
                }
                Err(e) => {
                    conns.push(None);
                    out.push(Err(e.to_string()));
                }
            }
        }
        let mut waiting = 0usize;
        let recv_one = |c: &mut Option<SecureConn>, o: &mut Result<(), String>, a: SocketAddr| {
            if let Some(conn) = c {
                match conn.recv::<CkptResponse>() {
                    Ok(Some(CkptResponse::Ok | CkptResponse::Stale)) => {}
                    Ok(Some(x)) => {
                        *o = Err(format!("{a}: {}", unexpected(x)));
                        *c = None;
                    }
                    Ok(None) => {
                        *o = Err(format!("{a}: closed the connection"));
                        *c = None;
                    }
                    Err(e) => {
                        *o = Err(format!("{a}: {e}"));
                        *c = None;
                    }
                }
            }
        };
        let total: usize = parts.iter().map(|p| p.len()).sum();
        let n = total.div_ceil(PLAIN_CHUNK).max(1);
        let mut plain = Vec::with_capacity(PLAIN_CHUNK.min(total));
        for i in 0..n {
            if conns.iter().all(Option::is_none) {
                break;
            }
            let last = i + 1 == n;
            chunk_at(parts, i * PLAIN_CHUNK, &mut plain);
            let data = self.seal((generation, rank, i as u32, last), &plain);
            let hash = *blake3::hash(&data).as_bytes();
            let req = CkptRequest::Put { generation, rank, index: i as u32, last, hash, data };
            for ((c, o), &a) in conns.iter_mut().zip(out.iter_mut()).zip(addrs) {
                if let Some(conn) = c {
                    if let Err(e) = conn.send(&req) {
                        // The peer may have said why before it closed.
                        recv_one(c, o, a);
                        if o.is_ok() {
                            *o = Err(format!("{a}: {e}"));
                        }
                        *c = None;
                    }
                }
            }
            waiting += 1;
            if waiting > WINDOW {
                for ((c, o), &a) in conns.iter_mut().zip(out.iter_mut()).zip(addrs) {
                    recv_one(c, o, a);
                }
                waiting -= 1;
            }
        }
        for _ in 0..waiting {
            for ((c, o), &a) in conns.iter_mut().zip(out.iter_mut()).zip(addrs) {
                recv_one(c, o, a);
            }
        }
        out
    }

    /// Reads rank `rank`'s piece of `m` from one peer: its plaintext, checked.
    fn get_from(&self, addr: SocketAddr, m: &Manifest, rank: u32) -> Result<Vec<u8>, String> {
        let mut c = self.connect(addr).map_err(|e| e.to_string())?;
        c.send(&CkptRequest::Get { generation: m.generation, rank }).map_err(|e| format!("{addr}: {e}"))?;
        let mut sealed: Vec<Vec<u8>> = Vec::new();
        loop {
            match c.recv::<CkptResponse>() {
                Ok(Some(CkptResponse::Chunk { last: true, .. })) => break,
                Ok(Some(CkptResponse::Chunk { hash, data, .. })) => {
                    if blake3::hash(&data).as_bytes() != &hash {
                        return Err(format!("{addr}: chunk {} is corrupted (its hash does not match)", sealed.len()));
                    }
                    sealed.push(data);
                }
                Ok(Some(x)) => return Err(format!("{addr}: {}", unexpected(x))),
                Ok(None) => return Err(format!("{addr}: closed the connection")),
                Err(e) => return Err(format!("{addr}: {e}")),
            }
        }
        let mut plain = Vec::new();
        let n = sealed.len();
        for (i, s) in sealed.iter().enumerate() {
            let p = self.open((m.generation, rank, i as u32, i + 1 == n), s).map_err(|e| format!("{addr}: {e}"))?;
            plain.extend_from_slice(&p);
        }
        let want = m.pieces.get(rank as usize).ok_or_else(|| format!("the manifest has no rank {rank}"))?;
        if blake3::hash(&plain).as_bytes() != want {
            return Err(format!("{addr}: the copy's hash is not the one the manifest names"));
        }
        Ok(plain)
    }

    /// Deletes every generation of this job on every peer (the job is over).
    pub fn clear(&self) -> io::Result<()> {
        for &a in &self.peers {
            let _ = self.call(a, &CkptRequest::Delete { below: u64::MAX });
        }
        Ok(())
    }
}

/// The chunk of `parts` (one after the other) that starts at byte `start`: at most
/// [`PLAIN_CHUNK`] bytes, into `out`.
fn chunk_at(parts: &[&[u8]], start: usize, out: &mut Vec<u8>) {
    out.clear();
    let mut skip = start;
    for p in parts {
        if skip >= p.len() {
            skip -= p.len();
            continue;
        }
        let take = (PLAIN_CHUNK - out.len()).min(p.len() - skip);
        out.extend_from_slice(&p[skip..skip + take]);
        skip = 0;
        if out.len() == PLAIN_CHUNK {
            return;
        }
    }
}

impl Store for Peers {
    fn put_piece(&mut self, generation: u64, rank: u32, parts: &[&[u8]]) -> io::Result<[u8; HASH_LEN]> {
        let mut h = blake3::Hasher::new();
        parts.iter().for_each(|p| {
            h.update(p);
        });
        let hash = *h.finalize().as_bytes();
        let candidates: Vec<SocketAddr> =
            self.order(rank).into_iter().filter(|a| Some(a.ip()) != self.own || self.own.is_none()).collect();
        if candidates.len() < self.copies {
            return Err(err(
                io::ErrorKind::NotFound,
                format!(
                    "{} peer(s) of the grid other than this host for {} copies (--checkpoint-copies)",
                    candidates.len(),
                    self.copies
                ),
            ));
        }
        let mut stored = 0;
        let mut why = Vec::new();
        let mut next = 0;
        while stored < self.copies && next < candidates.len() {
            let take = (self.copies - stored).min(candidates.len() - next);
            let batch = &candidates[next..next + take];
            next += take;
            for r in self.send_piece(batch, generation, rank, parts) {
                match r {
                    Ok(()) => stored += 1,
                    Err(e) => why.push(e),
                }
            }
        }
        if stored < self.copies {
            return Err(err(
                io::ErrorKind::Other,
                format!("stored on {stored} of {} peer(s): {}", self.copies, why.join("; ")),
            ));
        }
        Ok(hash)
    }

    fn commit(&mut self, m: &Manifest) -> io::Result<()> {
        let req = CkptRequest::Commit { generation: m.generation, manifest: m.to_text() };
        let mut took = 0;
        let mut why = Vec::new();
        for &a in &self.peers {
            match self.call(a, &req) {
                Ok(CkptResponse::Ok | CkptResponse::Stale) => took += 1,
                Ok(x) => why.push(format!("{a}: {}", unexpected(x))),
                Err(e) => why.push(e),
            }
        }
        if took < self.copies.min(self.peers.len()).max(1) {
            return Err(err(
                io::ErrorKind::Other,
                format!("the manifest is on {took} peer(s), fewer than {}: {}", self.copies, why.join("; ")),
            ));
        }
        // Complete on K peers: the older generations go, everywhere.
        for &a in &self.peers {
            let _ = self.call(a, &CkptRequest::Delete { below: m.generation });
        }
        Ok(())
    }

    fn latest(&self) -> io::Result<Option<Manifest>> {
        let mut best: Option<Manifest> = None;
        let mut reached = 0;
        let mut why = Vec::new();
        for &a in &self.peers {
            match self.call(a, &CkptRequest::List) {
                Ok(CkptResponse::Manifests(texts)) => {
                    reached += 1;
                    for m in texts.iter().filter_map(|t| Manifest::parse(t).ok()) {
                        if best.as_ref().is_none_or(|b| m.generation > b.generation) {
                            best = Some(m);
                        }
                    }
                }
                Ok(x) => why.push(format!("{a}: {}", unexpected(x))),
                Err(e) => why.push(e),
            }
        }
        if reached == 0 && !self.peers.is_empty() {
            return Err(err(io::ErrorKind::NotConnected, format!("no peer answered: {}", why.join("; "))));
        }
        Ok(best)
    }

    fn get_piece(&self, m: &Manifest, rank: u32) -> io::Result<Vec<u8>> {
        let mut why = Vec::new();
        for a in self.order(rank) {
            match self.get_from(a, m, rank) {
                Ok(p) => return Ok(p),
                Err(e) => why.push(e),
            }
        }
        Err(err(
            io::ErrorKind::InvalidData,
            format!("no good copy of rank {rank}'s piece of generation {}: {}", m.generation, why.join("; ")),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_cut_parts_and_seal_opens_only_in_place() {
        let big: Vec<u8> = (0..PLAIN_CHUNK + 10).map(|i| i as u8).collect();
        let parts: [&[u8]; 3] = [b"head", &big, b"tail"];
        let whole: Vec<u8> = parts.concat();
        let mut c = Vec::new();
        chunk_at(&parts, 0, &mut c);
        assert_eq!(c, whole[..PLAIN_CHUNK]);
        chunk_at(&parts, PLAIN_CHUNK, &mut c);
        assert_eq!(c, whole[PLAIN_CHUNK..], "the rest, across two parts");
        chunk_at(&[], 0, &mut c);
        assert!(c.is_empty());
        let p = Peers::new("job", &[1; 32], Vec::new(), 2, None);
        let s = p.seal((3, 1, 0, true), b"secret state");
        assert!(s.len() <= CKPT_CHUNK && !s.windows(6).any(|w| w == b"secret"));
        assert_eq!(p.seal((3, 1, 0, true), b"secret state"), s, "replicas send the same bytes");
        assert_eq!(p.open((3, 1, 0, true), &s).unwrap(), b"secret state");
        assert!(p.open((3, 1, 0, false), &s).is_err(), "a chunk cut off");
        assert!(p.open((4, 1, 0, true), &s).is_err(), "another generation");
        let other = Peers::new("job", &[2; 32], Vec::new(), 2, None);
        assert!(other.open((3, 1, 0, true), &s).is_err(), "another key");
        let mut bad = s.clone();
        bad[20] ^= 1;
        assert!(p.open((3, 1, 0, true), &bad).is_err());
    }

    #[test]
    fn too_few_peers_is_an_error_that_says_so() {
        let own: IpAddr = "127.0.0.1".parse().unwrap();
        let mut p = Peers::new("job", &[1; 32], vec!["127.0.0.1:1".parse().unwrap()], 2, Some(own));
        let e = p.put_piece(1, 0, &[b"x"]).unwrap_err().to_string();
        assert!(e.contains("0 peer(s)") && e.contains("2 copies"), "{e}");
    }
}
