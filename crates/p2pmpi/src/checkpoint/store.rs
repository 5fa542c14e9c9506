//! Where checkpoints are kept: the [`Store`] interface and the store of a local run, a
//! directory ([`Directory`]).
//!
//! A checkpoint's *generation* `g` is complete once every rank's piece is written and the
//! manifest, written last, names them with their hashes. A piece and a manifest are each
//! written atomically (a temporary file, `fsync`, `rename`, the directory synced), so a crash
//! leaves either the old file or the new one. A directory store lays a generation out as
//! `DIR/gen-<g>/rank-<r>.ckpt` and `DIR/gen-<g>/MANIFEST`.
//!
//! A piece is `MAGIC`, the length of its header (u32, little-endian), the header (postcard:
//! [`PieceHeader`]), the state's bytes, and the BLAKE3 hash of everything before it (32
//! bytes). The manifest is text: `p2pmpi checkpoint 1`, `generation G`, `step S`, `size N`,
//! one `rank R HASH` line per rank, and `hash H`, the hash of the lines above it.

use serde::{Deserialize, Serialize};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// The first bytes of a piece.
pub const MAGIC: &[u8; 8] = b"P2PMCKP1";

/// The length of a piece's hash.
pub const HASH_LEN: usize = 32;

/// What the library keeps of itself in a checkpoint, besides the program's state: enough for
/// a process started again to number its messages and communicators as the others do.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LibraryState {
    /// The next communicator context id this process may use.
    pub next_ctx: u32,
    /// The communicator contexts (MID communicators) that carried messages so far.
    pub comms: Vec<u32>,
    /// Sequence counters of sends: (communicator, destination, tag, next sequence).
    pub send: Vec<(u32, i32, i32, u64)>,
    /// Sequence counters of receives: (communicator, source, tag, next sequence expected),
    /// counting only what the program received (not what waits in the unexpected queue).
    pub recv: Vec<(u32, i32, i32, u64)>,
    /// Agreements (ULFM) run so far per communicator context.
    pub agreements: Vec<(u32, u64)>,
}

/// The header of a piece: who wrote it, of what, and the library's state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PieceHeader {
    pub generation: u64,
    pub step: u64,
    pub rank: u32,
    pub size: u32,
    /// `std::any::type_name` of the program's state.
    pub type_name: String,
    /// BLAKE3 hash of the program's executable.
    pub program: [u8; 32],
    pub library: LibraryState,
    /// Length of the state's bytes that follow the header.
    pub state_len: u64,
}

/// A complete generation, as its manifest says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manifest {
    pub generation: u64,
    pub step: u64,
    /// Per rank, the hash of its piece.
    pub pieces: Vec<[u8; HASH_LEN]>,
}

/// Where checkpoints are kept (a directory for a local run; peers of the grid later).
pub trait Store: Send {
    /// Writes rank `rank`'s piece of generation `generation`, made of `parts` one after the
    /// other, atomically; returns the hash that ends it (over all the parts).
    fn put_piece(&mut self, generation: u64, rank: u32, parts: &[&[u8]]) -> io::Result<[u8; HASH_LEN]>;
    /// Makes `m`'s generation complete (its manifest, written last), then deletes every
    /// other generation.
    fn commit(&mut self, m: &Manifest) -> io::Result<()>;
    /// The last complete generation, if any.
    fn latest(&self) -> io::Result<Option<Manifest>>;
    /// Rank `rank`'s piece of generation `generation`, checked against its own hash and the
    /// manifest's; `InvalidData` names what does not match.
    fn get_piece(&self, m: &Manifest, rank: u32) -> io::Result<Vec<u8>>;
}

/// Hex digits of a hash.
pub fn hex(h: &[u8]) -> String {
    h.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<[u8; HASH_LEN]> {
    if s.len() != 2 * HASH_LEN {
        return None;
    }
    let mut out = [0u8; HASH_LEN];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg)
}

impl Manifest {
    /// The manifest's text (its last line hashes the others).
    pub fn to_text(&self) -> String {
        let mut s = format!(
            "p2pmpi checkpoint 1\ngeneration {}\nstep {}\nsize {}\n",
            self.generation,
            self.step,
            self.pieces.len()
        );
        for (r, h) in self.pieces.iter().enumerate() {
            s.push_str(&format!("rank {r} {}\n", hex(h)));
        }
        let h = blake3::hash(s.as_bytes());
        s.push_str(&format!("hash {}\n", hex(h.as_bytes())));
        s
    }

    /// Reads a manifest's text; an error says which line is wrong.
    pub fn parse(text: &str) -> Result<Manifest, String> {
        let body_end = text.rfind("hash ").ok_or("no line `hash`")?;
        let (body, last) = text.split_at(body_end);
        let want = unhex(last.trim_start_matches("hash ").trim()).ok_or("line `hash`: not a hash")?;
        if *blake3::hash(body.as_bytes()).as_bytes() != want {
            return Err("its hash does not match its contents".into());
        }
        let mut lines = body.lines();
        if lines.next() != Some("p2pmpi checkpoint 1") {
            return Err("line 1: not `p2pmpi checkpoint 1`".into());
        }
        let mut field = |n: usize, key: &str| -> Result<u64, String> {
            lines
                .next()
                .and_then(|l| l.strip_prefix(key))
                .and_then(|v| v.trim().parse().ok())
                .ok_or_else(|| format!("line {n}: want `{}N`", key))
        };
        let generation = field(2, "generation ")?;
        let step = field(3, "step ")?;
        let size = field(4, "size ")? as usize;
        let mut pieces = Vec::with_capacity(size.min(1 << 20));
        for (r, l) in lines.enumerate() {
            let bad = || format!("line {}: want `rank {r} HASH`", 5 + r);
            let rest = l.strip_prefix(&format!("rank {r} ")).ok_or_else(bad)?;
            pieces.push(unhex(rest.trim()).ok_or_else(bad)?);
        }
        if pieces.len() != size {
            return Err(format!("{} piece(s) for size {size}", pieces.len()));
        }
        Ok(Manifest { generation, step, pieces })
    }
}

/// A store in a directory of this host (`p2pmpirun --local`).
#[derive(Debug, Clone)]
pub struct Directory {
    dir: PathBuf,
}

impl Directory {
    pub fn new(dir: impl Into<PathBuf>) -> Directory {
        Directory { dir: dir.into() }
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    fn generation_dir(&self, g: u64) -> PathBuf {
        self.dir.join(format!("gen-{g}"))
    }

    /// The path of rank `rank`'s piece of generation `g`.
    pub fn piece_path(&self, g: u64, rank: u32) -> PathBuf {
        self.generation_dir(g).join(format!("rank-{rank}.ckpt"))
    }

    /// The generations present (complete or not), in increasing order.
    fn generations(&self) -> io::Result<Vec<u64>> {
        let rd = match std::fs::read_dir(&self.dir) {
            Ok(rd) => rd,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let mut gens: Vec<u64> = rd
            .filter_map(|e| e.ok())
            .filter_map(|e| e.file_name().to_str().and_then(|n| n.strip_prefix("gen-")).and_then(|g| g.parse().ok()))
            .collect();
        gens.sort_unstable();
        Ok(gens)
    }

    /// Whether a generation `from` or later is complete (has its manifest).
    fn complete_from(&self, from: u64) -> bool {
        self.generations()
            .is_ok_and(|gs| gs.into_iter().any(|g| g >= from && self.generation_dir(g).join("MANIFEST").exists()))
    }

    /// Deletes every generation (a fresh start in a directory used before).
    pub fn clear(&self) -> io::Result<()> {
        for g in self.generations()? {
            std::fs::remove_dir_all(self.generation_dir(g))?;
        }
        Ok(())
    }
}

/// The hash a piece of `parts` is written with.
fn hash_parts(parts: &[&[u8]]) -> [u8; HASH_LEN] {
    let mut h = blake3::Hasher::new();
    for p in parts {
        h.update(p);
    }
    *h.finalize().as_bytes()
}

/// Writes `parts` to `path` atomically: a temporary file beside it, synced, renamed, the
/// directory synced. Returns the BLAKE3 hash of the parts when `hashed`, appended to the file.
fn write_atomic(path: &Path, parts: &[&[u8]], hashed: bool) -> io::Result<[u8; HASH_LEN]> {
    let dir = path.parent().ok_or_else(|| invalid(format!("{}: no parent directory", path.display())))?;
    std::fs::create_dir_all(dir)?;
    // The replicas of a rank write the same piece: each through a file of its own.
    let tmp = path.with_extension(format!("{}.tmp", std::process::id()));
    let mut hasher = blake3::Hasher::new();
    {
        let mut f = std::fs::File::create(&tmp)?;
        for p in parts {
            f.write_all(p)?;
            if hashed {
                hasher.update(p);
            }
        }
        let h = *hasher.finalize().as_bytes();
        if hashed {
            f.write_all(&h)?;
        }
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)?;
    std::fs::File::open(dir)?.sync_all()?;
    Ok(*hasher.finalize().as_bytes())
}

impl Store for Directory {
    fn put_piece(&mut self, generation: u64, rank: u32, parts: &[&[u8]]) -> io::Result<[u8; HASH_LEN]> {
        // A replica behind its rank's others: a later generation is complete already (and
        // this one may be deleted), so its piece, the same as theirs, is not written again.
        if self.complete_from(generation + 1) {
            return Ok(hash_parts(parts));
        }
        write_atomic(&self.piece_path(generation, rank), parts, true).or_else(|e| {
            match self.complete_from(generation + 1) {
                true => Ok(hash_parts(parts)),
                false => Err(e),
            }
        })
    }

    fn commit(&mut self, m: &Manifest) -> io::Result<()> {
        // A replica of rank 0 behind another that committed a later generation already.
        if self.complete_from(m.generation + 1) {
            return Ok(());
        }
        let path = self.generation_dir(m.generation).join("MANIFEST");
        if let Err(e) = write_atomic(&path, &[m.to_text().as_bytes()], false) {
            return if self.complete_from(m.generation + 1) { Ok(()) } else { Err(e) };
        }
        // Only the older ones: a replica ahead may be writing the next.
        for g in self.generations()? {
            if g < m.generation {
                match std::fs::remove_dir_all(self.generation_dir(g)) {
                    Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                    _ => {}
                }
            }
        }
        Ok(())
    }

    fn latest(&self) -> io::Result<Option<Manifest>> {
        for g in self.generations()?.into_iter().rev() {
            let path = self.generation_dir(g).join("MANIFEST");
            let text = match std::fs::read_to_string(&path) {
                Ok(t) => t,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            };
            let m = Manifest::parse(&text).map_err(|e| invalid(format!("{}: {e}", path.display())))?;
            if m.generation != g {
                return Err(invalid(format!("{}: it names generation {}", path.display(), m.generation)));
            }
            return Ok(Some(m));
        }
        Ok(None)
    }

    fn get_piece(&self, m: &Manifest, rank: u32) -> io::Result<Vec<u8>> {
        let path = self.piece_path(m.generation, rank);
        let mut data =
            std::fs::read(&path).map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
        let corrupt = |why: &str| invalid(format!("{} is corrupted: {why}", path.display()));
        if data.len() < HASH_LEN {
            return Err(corrupt("too short"));
        }
        let body_len = data.len() - HASH_LEN;
        let h = *blake3::hash(&data[..body_len]).as_bytes();
        if h[..] != data[body_len..] {
            return Err(corrupt("its hash does not match its contents"));
        }
        let want = m.pieces.get(rank as usize).ok_or_else(|| corrupt("the manifest has no such rank"))?;
        if h != *want {
            return Err(corrupt("its hash is not the one the manifest names"));
        }
        data.truncate(body_len);
        Ok(data)
    }
}

/// A piece's parts before the state: the magic, the header's length and the header.
pub fn piece_prefix(h: &PieceHeader) -> Result<Vec<u8>, String> {
    let header = postcard::to_allocvec(h).map_err(|e| e.to_string())?;
    let mut v = Vec::with_capacity(12 + header.len());
    v.extend_from_slice(MAGIC);
    v.extend_from_slice(&(header.len() as u32).to_le_bytes());
    v.extend_from_slice(&header);
    Ok(v)
}

/// Splits a piece (without its hash) into its header and the state's bytes.
pub fn split_piece(data: &[u8]) -> Result<(PieceHeader, &[u8]), String> {
    if data.len() < 12 || &data[..8] != MAGIC {
        return Err("not a p2pmpi checkpoint piece (bad magic)".into());
    }
    let len = u32::from_le_bytes(data[8..12].try_into().expect("4 bytes")) as usize;
    let header = data.get(12..12 + len).ok_or("header longer than the piece")?;
    let h: PieceHeader = postcard::from_bytes(header).map_err(|e| format!("bad header: {e}"))?;
    let state = &data[12 + len..];
    if state.len() as u64 != h.state_len {
        return Err(format!("state of {} bytes, the header says {}", state.len(), h.state_len));
    }
    Ok((h, state))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmpdir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("p2pmpi-ckpt-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn manifest_round_trips_and_rejects_tampering() {
        let m = Manifest { generation: 3, step: 40, pieces: vec![[1; 32], [2; 32]] };
        let t = m.to_text();
        assert_eq!(Manifest::parse(&t), Ok(m));
        let bad = t.replace("step 40", "step 41");
        assert!(Manifest::parse(&bad).unwrap_err().contains("hash does not match"));
        assert!(Manifest::parse("garbage").is_err());
    }

    #[test]
    fn a_generation_is_complete_only_with_its_manifest_and_old_ones_go() {
        let d = tmpdir("gens");
        let mut s = Directory::new(&d);
        assert_eq!(s.latest().unwrap(), None);
        let h0 = s.put_piece(1, 0, &[b"ab", b"cd"]).unwrap();
        let h1 = s.put_piece(1, 1, &[b"x"]).unwrap();
        assert_eq!(s.latest().unwrap(), None, "no manifest yet");
        let m1 = Manifest { generation: 1, step: 10, pieces: vec![h0, h1] };
        s.commit(&m1).unwrap();
        assert_eq!(s.latest().unwrap(), Some(m1.clone()));
        assert_eq!(s.get_piece(&m1, 0).unwrap(), b"abcd");
        // Generation 2 half written: 1 is still the last complete one.
        let g0 = s.put_piece(2, 0, &[b"new"]).unwrap();
        assert_eq!(s.latest().unwrap(), Some(m1));
        let g1 = s.put_piece(2, 1, &[b"new1"]).unwrap();
        let m2 = Manifest { generation: 2, step: 20, pieces: vec![g0, g1] };
        s.commit(&m2).unwrap();
        assert_eq!(s.latest().unwrap(), Some(m2.clone()));
        assert!(!d.join("gen-1").exists(), "the older generation is deleted");
        // A flipped byte is found.
        let p = s.piece_path(2, 1);
        let mut bytes = std::fs::read(&p).unwrap();
        bytes[1] ^= 0xff;
        std::fs::write(&p, bytes).unwrap();
        let e = s.get_piece(&m2, 1).unwrap_err();
        assert!(e.to_string().contains("corrupted"), "{e}");
        s.clear().unwrap();
        assert_eq!(s.latest().unwrap(), None);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn pieces_split_back_into_header_and_state() {
        let h = PieceHeader {
            generation: 1,
            step: 5,
            rank: 2,
            size: 4,
            type_name: "u64".into(),
            program: [7; 32],
            library: LibraryState { next_ctx: 4, comms: vec![0, 1], ..Default::default() },
            state_len: 3,
        };
        let mut v = piece_prefix(&h).unwrap();
        v.extend_from_slice(b"abc");
        let (h2, st) = split_piece(&v).unwrap();
        assert_eq!((h2, st), (h, &b"abc"[..]));
        assert!(split_piece(b"nonsense-bytes").is_err());
        assert!(split_piece(&v[..v.len() - 1]).is_err());
    }
}
