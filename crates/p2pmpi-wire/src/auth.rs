//! The per-job key and what it authenticates.
//!
//! Every job has a [`JobKey`]: 32 random bytes drawn by its launcher (`p2pmpirun`) when the
//! job starts. The key never travels over the network in clear: a local launcher gives it
//! to its children in their environment; on the grid the submitter sends it to each peer's
//! MPD inside the launch request, over the reservation's Noise session (encrypted and
//! authenticated with the grid secret), and the MPD gives it to the processes it starts in
//! their environment.
//!
//! With the key, processes prove to each other (and to their launcher) that they belong to
//! the job without ever sending it:
//!
//! * **Connections** (data connections between processes, control connections to the
//!   launcher) open with a challenge-response: the side that connects sends a fresh random
//!   [`Nonce`], the side that accepts answers with its own nonce and a proof
//!   (HMAC-SHA256 keyed by the job key over a [`Role`] label, both nonces and the slots
//!   involved), and the connecting side answers with its proof. Each side checks the other's
//!   proof in constant time; a wrong key, a replayed opening (the acceptor's nonce is new for
//!   every connection) or a proof made for another role fails. Only the opening is
//!   authenticated: the frames that follow are not (bandwidth and latency are untouched).
//! * **Datagrams** of the failure detector carry a [`DATAGRAM_MAC_LEN`]-byte MAC
//!   (HMAC-SHA256 truncated) over every byte before it.
//!
//! The key also seeds what must differ between jobs but agree within one (the replicas'
//! random numbers), through [`JobKey::seed`], from which it cannot be recovered.
//!
//! With `--encrypt`, each data connection derives two session keys from the job key and the
//! opening's nonces ([`session_keys`]), one per direction, and everything after the opening
//! travels in records sealed with ChaCha20-Poly1305 ([`Sealer`], [`Opener`]): a 4-byte length,
//! the ciphertext, a 16-byte tag; the nonce is a per-direction record counter, so a record
//! replayed, dropped or moved fails to open.

use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// Length of a job key.
pub const KEY_LEN: usize = 32;
/// Length of a handshake nonce.
pub const NONCE_LEN: usize = 32;
/// Length of a handshake proof (a full HMAC-SHA256).
pub const PROOF_LEN: usize = 32;
/// Length of the MAC that ends a failure-detector datagram (HMAC-SHA256 truncated to 128
/// bits).
pub const DATAGRAM_MAC_LEN: usize = 16;

/// A connection's challenge: fresh random bytes.
pub type Nonce = [u8; NONCE_LEN];
/// An answer to a challenge.
pub type Proof = [u8; PROOF_LEN];

/// Who computes a MAC, for what: every MAC starts with its role's label, so a proof made for
/// one purpose is worth nothing for another (an acceptor's answer cannot be reflected as a
/// connector's, a datagram's MAC cannot open a connection).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The process that accepted a data connection.
    DataAcceptor,
    /// The process that opened a data connection.
    DataConnector,
    /// The launcher, answering a process's control connection.
    ControlLauncher,
    /// A process registering on its control connection.
    ControlProcess,
    /// A failure-detector datagram.
    Datagram,
    /// A frame of the k-monitor detector on its TCP connections.
    Monitor,
    /// A seed derived from the key (not a MAC anything checks).
    Seed,
    /// A session key of an encrypted data connection (not a MAC anything checks).
    Session,
}

impl Role {
    fn label(self) -> &'static [u8] {
        match self {
            Role::DataAcceptor => b"p2pmpi/1 data acceptor",
            Role::DataConnector => b"p2pmpi/1 data connector",
            Role::ControlLauncher => b"p2pmpi/1 control launcher",
            Role::ControlProcess => b"p2pmpi/1 control process",
            Role::Datagram => b"p2pmpi/1 fd datagram",
            Role::Monitor => b"p2pmpi/1 k-monitor frame",
            Role::Seed => b"p2pmpi/1 seed",
            Role::Session => b"p2pmpi/1 session key",
        }
    }
}

/// A job's secret key. Its `Debug` shows nothing of it; it is written out only by
/// [`JobKey::to_hex`], for the environment of the job's processes.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobKey([u8; KEY_LEN]);

impl std::fmt::Debug for JobKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("JobKey(..)")
    }
}

impl JobKey {
    /// A new random key (from the operating system).
    pub fn random() -> std::io::Result<JobKey> {
        let mut k = [0u8; KEY_LEN];
        getrandom::fill(&mut k).map_err(|e| std::io::Error::other(format!("no randomness for the job key: {e}")))?;
        Ok(JobKey(k))
    }

    /// A key with these bytes (tests, tools).
    pub fn from_bytes(bytes: [u8; KEY_LEN]) -> JobKey {
        JobKey(bytes)
    }

    /// Parses the 64 hexadecimal digits [`JobKey::to_hex`] writes.
    pub fn from_hex(s: &str) -> Option<JobKey> {
        let s = s.trim().as_bytes();
        if s.len() != 2 * KEY_LEN {
            return None;
        }
        let digit = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
        let mut k = [0u8; KEY_LEN];
        for (i, b) in k.iter_mut().enumerate() {
            *b = digit(s[2 * i])? << 4 | digit(s[2 * i + 1])?;
        }
        Some(JobKey(k))
    }

    /// The key as 64 hexadecimal digits (for a process's environment: never for the network).
    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    fn keyed(&self, role: Role, parts: &[&[u8]]) -> HmacSha256 {
        let mut m = HmacSha256::new_from_slice(&self.0).expect("HMAC takes keys of any length");
        m.update(role.label());
        for p in parts {
            // Length-prefixed: the parts cannot be re-split into other parts with the same bytes.
            m.update(&(p.len() as u32).to_le_bytes());
            m.update(p);
        }
        m
    }

    /// HMAC-SHA256 of `parts` for `role`.
    pub fn proof(&self, role: Role, parts: &[&[u8]]) -> Proof {
        self.keyed(role, parts).finalize().into_bytes().into()
    }

    /// Whether `proof` is [`JobKey::proof`] of `parts` for `role` (constant time).
    pub fn verify(&self, role: Role, parts: &[&[u8]], proof: &[u8]) -> bool {
        proof.len() == PROOF_LEN && self.keyed(role, parts).verify_slice(proof).is_ok()
    }

    /// The MAC a failure-detector datagram ends with, over all its bytes before it.
    pub fn datagram_mac(&self, bytes: &[u8]) -> [u8; DATAGRAM_MAC_LEN] {
        let full = self.proof(Role::Datagram, &[bytes]);
        let mut t = [0u8; DATAGRAM_MAC_LEN];
        t.copy_from_slice(&full[..DATAGRAM_MAC_LEN]);
        t
    }

    /// Whether `mac` is the [`JobKey::datagram_mac`] of `bytes` (constant time).
    pub fn verify_datagram(&self, bytes: &[u8], mac: &[u8]) -> bool {
        mac.len() == DATAGRAM_MAC_LEN && self.keyed(Role::Datagram, &[bytes]).verify_truncated_left(mac).is_ok()
    }

    /// A [`DATAGRAM_MAC_LEN`]-byte MAC (HMAC-SHA256 truncated) of `parts` for `role`: what
    /// ends every frame of the k-monitor detector.
    pub fn short_mac(&self, role: Role, parts: &[&[u8]]) -> [u8; DATAGRAM_MAC_LEN] {
        let full = self.proof(role, parts);
        let mut t = [0u8; DATAGRAM_MAC_LEN];
        t.copy_from_slice(&full[..DATAGRAM_MAC_LEN]);
        t
    }

    /// Whether `mac` is the [`JobKey::short_mac`] of `parts` for `role` (constant time).
    pub fn verify_short_mac(&self, role: Role, parts: &[&[u8]], mac: &[u8]) -> bool {
        mac.len() == DATAGRAM_MAC_LEN && self.keyed(role, parts).verify_truncated_left(mac).is_ok()
    }

    /// A 64-bit value derived from the key for `purpose`: the same in every process of the
    /// job, unrelated between jobs, and revealing nothing of the key.
    pub fn seed(&self, purpose: &str) -> u64 {
        let p = self.proof(Role::Seed, &[purpose.as_bytes()]);
        u64::from_le_bytes(p[..8].try_into().expect("8 bytes"))
    }
}

/// A fresh random nonce (from the operating system).
pub fn nonce() -> Nonce {
    let mut n = [0u8; NONCE_LEN];
    getrandom::fill(&mut n).expect("the operating system has no randomness");
    n
}

/// The proof of one side of a data connection's opening: the connecting process's slot,
/// the accepting one's, the connector's nonce, then the acceptor's.
pub fn data_proof(key: &JobKey, role: Role, connector: u32, acceptor: u32, nc: &Nonce, na: &Nonce) -> Proof {
    key.proof(role, &[&connector.to_le_bytes(), &acceptor.to_le_bytes(), nc, na])
}

/// Checks a [`data_proof`].
pub fn verify_data_proof(
    key: &JobKey,
    role: Role,
    connector: u32,
    acceptor: u32,
    nc: &Nonce,
    na: &Nonce,
    proof: &[u8],
) -> bool {
    key.verify(role, &[&connector.to_le_bytes(), &acceptor.to_le_bytes(), nc, na], proof)
}

/// The session keys of an encrypted data connection: (connector → acceptor, acceptor →
/// connector), each HMAC-SHA256 of the job key over the direction, both slots and both
/// nonces of the opening (fresh for every connection).
pub fn session_keys(key: &JobKey, connector: u32, acceptor: u32, nc: &Nonce, na: &Nonce) -> ([u8; 32], [u8; 32]) {
    let k = |dir: &[u8]| key.proof(Role::Session, &[dir, &connector.to_le_bytes(), &acceptor.to_le_bytes(), nc, na]);
    (k(b"c2a"), k(b"a2c"))
}

/// Largest plaintext of one sealed record.
pub const RECORD_MAX: usize = 32 * 1024;
/// Bytes a record adds to its plaintext: its length and its tag.
pub const RECORD_OVERHEAD: usize = 4 + 16;

fn record_nonce(counter: u64) -> chacha20poly1305::Nonce {
    let mut n = [0u8; 12];
    n[..8].copy_from_slice(&counter.to_le_bytes());
    n.into()
}

/// Seals the records one side of an encrypted connection sends.
pub struct Sealer {
    aead: chacha20poly1305::ChaCha20Poly1305,
    counter: u64,
}

impl Sealer {
    pub fn new(key: &[u8; 32]) -> Sealer {
        use chacha20poly1305::KeyInit;
        Sealer { aead: chacha20poly1305::ChaCha20Poly1305::new(key.into()), counter: 0 }
    }

    /// Appends the record of `parts` (their concatenation: at most [`RECORD_MAX`] bytes) to
    /// `out`.
    pub fn seal_into(&mut self, parts: &[&[u8]], out: &mut Vec<u8>) {
        use chacha20poly1305::AeadInPlace;
        let n: usize = parts.iter().map(|p| p.len()).sum();
        assert!(n <= RECORD_MAX, "record of {n} bytes");
        let len = ((n + 16) as u32).to_le_bytes();
        out.extend_from_slice(&len);
        let start = out.len();
        for p in parts {
            out.extend_from_slice(p);
        }
        let tag = self
            .aead
            .encrypt_in_place_detached(&record_nonce(self.counter), &len, &mut out[start..])
            .expect("records are far below ChaCha20-Poly1305's limit");
        out.extend_from_slice(&tag);
        self.counter += 1;
    }
}

/// Opens the records the other side of an encrypted connection sent, in order.
pub struct Opener {
    aead: chacha20poly1305::ChaCha20Poly1305,
    counter: u64,
}

/// What [`Opener::next`] found at the start of a buffer.
#[derive(Debug, PartialEq, Eq)]
pub enum Record {
    /// Not a whole record yet.
    Partial,
    /// A record of this many bytes on the wire, whose plaintext (that many minus
    /// [`RECORD_OVERHEAD`]) now starts at byte 4 of the buffer.
    Opened(usize),
    /// A bad length, or a record that does not open (forged, altered, replayed or out of
    /// order).
    Bad,
}

impl Opener {
    pub fn new(key: &[u8; 32]) -> Opener {
        use chacha20poly1305::KeyInit;
        Opener { aead: chacha20poly1305::ChaCha20Poly1305::new(key.into()), counter: 0 }
    }

    /// Opens the record at the start of `buf` in place.
    pub fn next(&mut self, buf: &mut [u8]) -> Record {
        use chacha20poly1305::AeadInPlace;
        if buf.len() < 4 {
            return Record::Partial;
        }
        let len_bytes: [u8; 4] = buf[..4].try_into().expect("4 bytes");
        let n = u32::from_le_bytes(len_bytes) as usize;
        if !(16..=RECORD_MAX + 16).contains(&n) {
            return Record::Bad;
        }
        if buf.len() < 4 + n {
            return Record::Partial;
        }
        let (body, tag) = buf[4..4 + n].split_at_mut(n - 16);
        let tag = chacha20poly1305::Tag::from_slice(tag);
        match self.aead.decrypt_in_place_detached(&record_nonce(self.counter), &len_bytes, body, tag) {
            Ok(()) => {
                self.counter += 1;
                Record::Opened(4 + n)
            }
            Err(_) => Record::Bad,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_roundtrip_and_rejects() {
        let k = JobKey::random().unwrap();
        assert_eq!(JobKey::from_hex(&k.to_hex()), Some(k.clone()));
        assert_eq!(k.to_hex().len(), 64);
        assert!(JobKey::from_hex("00").is_none());
        assert!(JobKey::from_hex(&"g".repeat(64)).is_none());
        assert!(JobKey::from_hex(&"é".repeat(32)).is_none());
        assert!(!format!("{k:?}").contains(&k.to_hex()[..8]));
    }

    #[test]
    fn proofs_depend_on_key_role_nonces_and_slots() {
        let k = JobKey::from_bytes([7; 32]);
        let other = JobKey::from_bytes([8; 32]);
        let (nc, na) = ([1u8; 32], [2u8; 32]);
        let p = data_proof(&k, Role::DataAcceptor, 3, 1, &nc, &na);
        assert!(verify_data_proof(&k, Role::DataAcceptor, 3, 1, &nc, &na, &p));
        assert!(!verify_data_proof(&other, Role::DataAcceptor, 3, 1, &nc, &na, &p));
        assert!(!verify_data_proof(&k, Role::DataConnector, 3, 1, &nc, &na, &p));
        assert!(!verify_data_proof(&k, Role::DataAcceptor, 1, 3, &nc, &na, &p));
        assert!(!verify_data_proof(&k, Role::DataAcceptor, 3, 1, &na, &nc, &p));
        assert!(!verify_data_proof(&k, Role::DataAcceptor, 3, 1, &nc, &[9; 32], &p));
        assert!(!verify_data_proof(&k, Role::DataAcceptor, 3, 1, &nc, &na, &p[..31]));
        assert!(!k.verify(Role::DataAcceptor, &[], &[]));
    }

    #[test]
    fn datagram_macs() {
        let k = JobKey::from_bytes([7; 32]);
        let m = k.datagram_mac(b"hello");
        assert!(k.verify_datagram(b"hello", &m));
        assert!(!k.verify_datagram(b"hellp", &m));
        assert!(!k.verify_datagram(b"hello", &m[..15]));
        assert!(!JobKey::from_bytes([6; 32]).verify_datagram(b"hello", &m));
    }

    #[test]
    fn seeds_differ_by_purpose_and_key() {
        let k = JobKey::from_bytes([7; 32]);
        assert_eq!(k.seed("a"), k.seed("a"));
        assert_ne!(k.seed("a"), k.seed("b"));
        assert_ne!(k.seed("a"), JobKey::from_bytes([6; 32]).seed("a"));
    }

    #[test]
    fn sealed_records_open_in_order_only() {
        let (c2a, a2c) = session_keys(&JobKey::from_bytes([1; 32]), 1, 0, &[2; 32], &[3; 32]);
        assert_ne!(c2a, a2c);
        let mut s = Sealer::new(&c2a);
        let mut wire = Vec::new();
        s.seal_into(&[b"fi", b"rst"], &mut wire);
        let first_len = wire.len();
        s.seal_into(&[&[7u8; RECORD_MAX]], &mut wire);
        assert!(!contains(&wire, b"first"), "plaintext on the wire");
        let mut o = Opener::new(&c2a);
        assert_eq!(o.next(&mut wire[..3].to_vec()), Record::Partial);
        assert_eq!(o.next(&mut wire[..first_len - 1].to_vec()), Record::Partial);
        let mut b = wire.clone();
        assert_eq!(o.next(&mut b), Record::Opened(first_len));
        assert_eq!(&b[4..first_len - 16], b"first");
        // The first record again (a replay): refused.
        assert_eq!(o.next(&mut wire.clone()), Record::Bad);
        let mut rest = wire[first_len..].to_vec();
        assert_eq!(o.next(&mut rest), Record::Opened(RECORD_MAX + RECORD_OVERHEAD));
        // Wrong key, flipped bit, bad lengths.
        let mut o = Opener::new(&a2c);
        assert_eq!(o.next(&mut wire.clone()), Record::Bad);
        for i in [0usize, 4, first_len - 1] {
            let mut f = wire.clone();
            f[i] ^= 1;
            assert_eq!(Opener::new(&c2a).next(&mut f), Record::Bad, "byte {i}");
        }
        assert_eq!(Opener::new(&c2a).next(&mut [0, 0, 0, 0]), Record::Bad);
        assert_eq!(Opener::new(&c2a).next(&mut [0xff, 0xff, 0xff, 0xff, 0]), Record::Bad);
    }

    fn contains(hay: &[u8], needle: &[u8]) -> bool {
        hay.windows(needle.len()).any(|w| w == needle)
    }

    #[test]
    fn nonces_are_fresh() {
        assert_ne!(nonce(), nonce());
    }
}
