//! Member identities of a grid: key pairs, member certificates, signing and checking.
//!
//! Every peer has its own **member key** (an Ed25519 key pair made by `p2pmpi init`). A grid
//! has one **owner key**, which never leaves the owner's machine; it signs a **member
//! certificate** for each member: the member's name, its public key, its roles
//! ([`Role::Host`] lends CPUs, [`Role::Submit`] may run jobs, [`Role::Supernode`]) and a
//! validity period. The grid is named by its owner's public key: a certificate belongs to a
//! grid when that key signed it.
//!
//! Checking a certificate ([`Certificate::check`]) is pure: the time is passed in, and so is
//! the list of revoked members ([`Revocations`]). The owner revokes a member with a signed
//! [`Revocation`]; a [`RevocationList`] takes only those its owner signed: the supernodes'
//! registry holds it (replicated with the JEL registry's Raft log) and every daemon keeps a
//! copy. A certificate is renewed, with the same life, once two thirds of it passed
//! ([`renewal_due`], [`KeyPair::renew`]).
//!
//! The handshake (the `secure` module) proves that a side holds the key its certificate names
//! by signing the Noise handshake hash ([`hello_message`]), so a certificate copied from a
//! recorded connection is worth nothing without the private key.
//!
//! Signatures: the `snow` crate gives X25519 (key agreement) but no signatures; we use
//! `ed25519-dalek` (the maintained Ed25519 of the dalek project, built on the same
//! `curve25519-dalek` that the Noise handshake already uses, audited, `verify_strict`
//! refuses malleable and small-order signatures). Every signed message starts with its own
//! context string, so a certificate signature can never pass for a handshake signature or
//! the reverse.
//!
//! Encoding: a certificate is a postcard record ([`Certificate::to_bytes`]); in files and
//! codes it is written as hex ([`to_hex`]).

use ed25519_dalek::{Signature, Signer, SigningKey, VerifyingKey};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use thiserror::Error;

/// Context of a certificate's signature.
const CERT_CONTEXT: &[u8] = b"p2pmpi member certificate v1\0";
/// Context of a handshake signature.
const HELLO_CONTEXT: &[u8] = b"p2pmpi handshake v1\0";
/// Context of a revocation's signature.
const REVOKE_CONTEXT: &[u8] = b"p2pmpi revocation v1\0";
/// Default validity of a member certificate: 90 days.
pub const CERT_VALIDITY_S: u64 = 90 * 24 * 3600;
/// A certificate is renewed when less than this is left of it: 30 days.
pub const RENEW_BEFORE_S: u64 = 30 * 24 * 3600;
/// Longest member name.
pub const MAX_NAME: usize = 64;

/// A public key (Ed25519), 32 bytes.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct PublicKey(pub [u8; 32]);

impl PublicKey {
    /// A short printable form (first 8 bytes, hex) for logs and listings.
    pub fn fingerprint(&self) -> String {
        to_hex(&self.0[..8])
    }

    fn verifying(&self) -> Option<VerifyingKey> {
        VerifyingKey::from_bytes(&self.0).ok()
    }
}

impl std::fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PublicKey({})", self.fingerprint())
    }
}

/// A private key (a member's or the grid owner's). Its bytes are the 32-byte Ed25519 seed.
#[derive(Clone)]
pub struct KeyPair(SigningKey);

impl KeyPair {
    /// A new key pair from the operating system's random source.
    pub fn generate() -> Result<Self, IdentityError> {
        let mut seed = [0u8; 32];
        getrandom::fill(&mut seed).map_err(|e| IdentityError::Random(e.to_string()))?;
        Ok(KeyPair(SigningKey::from_bytes(&seed)))
    }

    pub fn from_seed(seed: &[u8; 32]) -> Self {
        KeyPair(SigningKey::from_bytes(seed))
    }

    pub fn seed(&self) -> [u8; 32] {
        self.0.to_bytes()
    }

    pub fn public(&self) -> PublicKey {
        PublicKey(self.0.verifying_key().to_bytes())
    }

    fn sign(&self, context: &[u8], msg: &[u8]) -> [u8; 64] {
        let mut m = Vec::with_capacity(context.len() + msg.len());
        m.extend_from_slice(context);
        m.extend_from_slice(msg);
        self.0.sign(&m).to_bytes()
    }

    /// Signs a certificate for `name` (the owner key does this): `roles`, valid from `now_s`
    /// for `validity_s` seconds (UNIX time, seconds).
    pub fn issue(
        &self,
        name: &str,
        key: PublicKey,
        roles: Roles,
        now_s: u64,
        validity_s: u64,
    ) -> Result<Certificate, IdentityError> {
        valid_name(name)?;
        let body = CertBody {
            grid: self.public(),
            name: name.to_string(),
            key,
            roles,
            not_before_s: now_s,
            not_after_s: now_s.saturating_add(validity_s),
        };
        let bytes = postcard::to_allocvec(&body).map_err(|e| IdentityError::Malformed(e.to_string()))?;
        let sig = self.sign(CERT_CONTEXT, &bytes);
        Ok(Certificate { body, sig: sig.to_vec() })
    }

    /// Signs a revocation of the member `name` (and of `key`, when given) at `now_s` (the
    /// owner key does this).
    pub fn revoke(&self, name: &str, key: Option<PublicKey>, now_s: u64) -> Result<Revocation, IdentityError> {
        valid_name(name)?;
        let body = RevocationBody { grid: self.public(), name: name.to_string(), key, at_s: now_s };
        let bytes = postcard::to_allocvec(&body).map_err(|e| IdentityError::Malformed(e.to_string()))?;
        let sig = self.sign(REVOKE_CONTEXT, &bytes);
        Ok(Revocation { body, sig: sig.to_vec() })
    }

    /// A certificate like `old` (same grid, name, key and roles) valid for as long as `old`
    /// was, from `now_s`: its renewal (the owner key does this).
    pub fn renew(&self, old: &Certificate, now_s: u64) -> Result<Certificate, IdentityError> {
        let b = &old.body;
        self.issue(&b.name, b.key, b.roles, now_s, b.not_after_s.saturating_sub(b.not_before_s))
    }

    /// Signs a handshake hash (see [`hello_message`]).
    pub fn sign_hello(&self, initiator: bool, handshake_hash: &[u8]) -> Vec<u8> {
        self.sign(HELLO_CONTEXT, &hello_message(initiator, handshake_hash)).to_vec()
    }
}

impl std::fmt::Debug for KeyPair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "KeyPair({:?})", self.public())
    }
}

/// What a handshake signature covers: which side signs (so that one side's signature cannot
/// be reflected back as the other's: both see the same hash) and the handshake hash.
pub fn hello_message(initiator: bool, handshake_hash: &[u8]) -> Vec<u8> {
    let mut m = Vec::with_capacity(1 + handshake_hash.len());
    m.push(u8::from(initiator));
    m.extend_from_slice(handshake_hash);
    m
}

/// A member's role.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Lends its CPUs: runs other members' processes.
    Host,
    /// May run jobs on the grid.
    Submit,
    /// Runs a supernode.
    Supernode,
}

impl Role {
    const ALL: [Role; 3] = [Role::Host, Role::Submit, Role::Supernode];

    fn bit(self) -> u8 {
        match self {
            Role::Host => 1,
            Role::Submit => 2,
            Role::Supernode => 4,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Role::Host => "host",
            Role::Submit => "submit",
            Role::Supernode => "supernode",
        }
    }
}

/// A set of roles.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Roles(u8);

impl Roles {
    pub const NONE: Roles = Roles(0);
    /// Every role (the owner's own certificate).
    pub const ALL: Roles = Roles(7);

    pub fn with(self, r: Role) -> Roles {
        Roles(self.0 | r.bit())
    }

    pub fn has(self, r: Role) -> bool {
        self.0 & r.bit() != 0
    }

    /// Parses a comma list (`host,submit`).
    pub fn parse(s: &str) -> Result<Roles, IdentityError> {
        let mut roles = Roles::NONE;
        for w in s.split(',').map(str::trim).filter(|w| !w.is_empty()) {
            let r = Role::ALL.into_iter().find(|r| r.name() == w).ok_or_else(|| IdentityError::Role(w.to_string()))?;
            roles = roles.with(r);
        }
        Ok(roles)
    }
}

impl std::fmt::Display for Roles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = Role::ALL.into_iter().filter(|r| self.has(*r)).map(Role::name).collect();
        f.write_str(&names.join(","))
    }
}

/// What the owner signs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CertBody {
    /// The grid: its owner's public key.
    pub grid: PublicKey,
    pub name: String,
    /// The member's public key.
    pub key: PublicKey,
    pub roles: Roles,
    /// Valid from (UNIX time, seconds).
    pub not_before_s: u64,
    /// Valid until (UNIX time, seconds, excluded).
    pub not_after_s: u64,
}

/// A member certificate: its body and the owner's signature over it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Certificate {
    pub body: CertBody,
    /// Ed25519 signature, 64 bytes.
    pub sig: Vec<u8>,
}

/// Members whose certificates no longer count: by name (every certificate of that name) or
/// by key. Filled from the owner's signed [`Revocation`]s ([`RevocationList`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Revocations {
    pub names: BTreeSet<String>,
    pub keys: BTreeSet<PublicKey>,
}

impl Revocations {
    pub fn is_revoked(&self, body: &CertBody) -> bool {
        self.names.contains(&body.name) || self.keys.contains(&body.key)
    }
}

/// What the owner signs to revoke a member.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct RevocationBody {
    /// The grid: its owner's public key.
    pub grid: PublicKey,
    /// The member revoked: every certificate of this name.
    pub name: String,
    /// And every certificate of this key, when known.
    pub key: Option<PublicKey>,
    /// When the owner revoked it (UNIX time, seconds).
    pub at_s: u64,
}

/// A revocation: its body and the owner's signature over it. Revocations are final (a
/// revoked name stays revoked; a machine comes back under another name).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Revocation {
    pub body: RevocationBody,
    /// Ed25519 signature, 64 bytes.
    pub sig: Vec<u8>,
}

impl Revocation {
    /// Checks that the grid `owner` signed it, unchanged. Pure.
    pub fn check(&self, owner: &PublicKey) -> Result<(), CertError> {
        if self.body.grid != *owner {
            return Err(CertError::OtherGrid(self.body.grid.fingerprint()));
        }
        let bytes = postcard::to_allocvec(&self.body).map_err(|_| CertError::ForgedRevocation)?;
        verify(owner, REVOKE_CONTEXT, &bytes, &self.sig).map_err(|()| CertError::ForgedRevocation)
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        postcard::to_allocvec(self).expect("a revocation encodes")
    }

    pub fn to_hex(&self) -> String {
        to_hex(&self.to_bytes())
    }

    /// Decodes a revocation (hex); malformed input, or bytes after it, is an error.
    pub fn from_hex(s: &str) -> Result<Self, IdentityError> {
        Self::from_bytes(&from_hex(s.trim())?)
    }

    /// Decodes a revocation; malformed input, or bytes after it, is an error.
    pub fn from_bytes(b: &[u8]) -> Result<Self, IdentityError> {
        match postcard::take_from_bytes(b) {
            Ok((r, [])) => Ok(r),
            Ok((_, rest)) => Err(IdentityError::Malformed(format!("{} bytes after the revocation", rest.len()))),
            Err(e) => Err(IdentityError::Malformed(e.to_string())),
        }
    }
}

/// Most revocations a list holds (a grid revokes members one by one, by hand).
pub const MAX_REVOCATIONS: usize = 4096;

/// The revocations of one grid, each checked against its owner's key before it is taken:
/// what the supernodes' registry replicates and every daemon keeps (and persists). Pure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RevocationList {
    owner: PublicKey,
    entries: BTreeSet<Revocation>,
}

impl RevocationList {
    pub fn new(owner: PublicKey) -> Self {
        RevocationList { owner, entries: BTreeSet::new() }
    }

    /// Adds `r` if the owner signed it. `Ok(true)`: it is new (its member was not revoked
    /// by an entry already held); `Err`: forged, another grid's, or the list is full.
    pub fn add(&mut self, r: Revocation) -> Result<bool, CertError> {
        r.check(&self.owner)?;
        if self.entries.contains(&r) {
            return Ok(false);
        }
        if self.entries.len() >= MAX_REVOCATIONS {
            return Err(CertError::TooManyRevocations);
        }
        let known = self.revocations();
        let new = !known.names.contains(&r.body.name) || r.body.key.is_some_and(|k| !known.keys.contains(&k));
        self.entries.insert(r);
        Ok(new)
    }

    /// Adds every entry of `rs` that checks; returns the new ones' names and the refused
    /// ones' errors.
    pub fn merge(&mut self, rs: impl IntoIterator<Item = Revocation>) -> (Vec<String>, Vec<CertError>) {
        let (mut new, mut bad) = (Vec::new(), Vec::new());
        for r in rs {
            let name = r.body.name.clone();
            match self.add(r) {
                Ok(true) => new.push(name),
                Ok(false) => {}
                Err(e) => bad.push(e),
            }
        }
        (new, bad)
    }

    pub fn entries(&self) -> impl Iterator<Item = &Revocation> {
        self.entries.iter()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The names and keys revoked, for [`Certificate::check`].
    pub fn revocations(&self) -> Revocations {
        let mut r = Revocations::default();
        for e in &self.entries {
            r.names.insert(e.body.name.clone());
            r.keys.extend(e.body.key);
        }
        r
    }

    /// One revocation a line, hex (the file every daemon keeps).
    pub fn to_text(&self) -> String {
        self.entries.iter().map(|r| r.to_hex() + "\n").collect()
    }

    /// Reads [`Self::to_text`]'s lines; a line that does not decode or check is an error
    /// naming it.
    pub fn from_text(owner: PublicKey, text: &str) -> Result<Self, String> {
        let mut l = RevocationList::new(owner);
        for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
            let r = Revocation::from_hex(line).map_err(|e| format!("line {}: {e}", i + 1))?;
            l.add(r).map_err(|e| format!("line {}: {e}", i + 1))?;
        }
        Ok(l)
    }
}

/// Checks that the other side of a connection (its certificate, `None` in the transition
/// mode, where roles do not exist) has the role `role`.
pub fn require_role(cert: Option<&Certificate>, role: Role) -> Result<(), CertError> {
    match cert {
        Some(c) if !c.body.roles.has(role) => Err(CertError::MissingRole(c.body.name.clone(), role.name())),
        _ => Ok(()),
    }
}

/// When a member's daemon asks for its certificate's renewal: once two thirds of its
/// validity passed (so a third, 30 days of the default 90, is left to reach the owner).
/// Pure.
pub fn renewal_due(cert: &Certificate, now_s: u64) -> bool {
    let b = &cert.body;
    let life = b.not_after_s.saturating_sub(b.not_before_s);
    now_s >= b.not_before_s.saturating_add(life - life / 3)
}

impl Certificate {
    /// Checks that this certificate is the grid `owner`'s, unchanged, valid at `now_s` and
    /// not revoked. Pure.
    pub fn check(&self, owner: &PublicKey, now_s: u64, revoked: &Revocations) -> Result<(), CertError> {
        let b = &self.body;
        if b.grid != *owner {
            return Err(CertError::OtherGrid(b.grid.fingerprint()));
        }
        let bytes = postcard::to_allocvec(b).map_err(|_| CertError::Forged)?;
        verify(owner, CERT_CONTEXT, &bytes, &self.sig).map_err(|()| CertError::Forged)?;
        if now_s < b.not_before_s {
            return Err(CertError::NotYetValid(b.name.clone()));
        }
        if now_s >= b.not_after_s {
            return Err(CertError::Expired(b.name.clone(), now_s - b.not_after_s));
        }
        if revoked.is_revoked(b) {
            return Err(CertError::Revoked(b.name.clone()));
        }
        Ok(())
    }

    /// Checks a handshake signature made with this certificate's key.
    pub fn check_hello(&self, initiator: bool, handshake_hash: &[u8], sig: &[u8]) -> Result<(), CertError> {
        verify(&self.body.key, HELLO_CONTEXT, &hello_message(initiator, handshake_hash), sig)
            .map_err(|()| CertError::BadProof(self.body.name.clone()))
    }

    /// True when less than `before_s` is left of it at `now_s` (time to renew).
    pub fn due_for_renewal(&self, now_s: u64, before_s: u64) -> bool {
        now_s.saturating_add(before_s) >= self.body.not_after_s
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        postcard::to_allocvec(self).expect("a certificate encodes")
    }

    /// Decodes a certificate; malformed input, or bytes after it, is an error. (Decoded here
    /// rather than by `secure`'s record decoder: the channel uses certificates, not the reverse.)
    pub fn from_bytes(b: &[u8]) -> Result<Self, IdentityError> {
        match postcard::take_from_bytes(b) {
            Ok((c, [])) => Ok(c),
            Ok((_, rest)) => Err(IdentityError::Malformed(format!("{} bytes after the certificate", rest.len()))),
            Err(e) => Err(IdentityError::Malformed(e.to_string())),
        }
    }

    pub fn to_hex(&self) -> String {
        to_hex(&self.to_bytes())
    }

    pub fn from_hex(s: &str) -> Result<Self, IdentityError> {
        Self::from_bytes(&from_hex(s.trim())?)
    }
}

fn verify(key: &PublicKey, context: &[u8], msg: &[u8], sig: &[u8]) -> Result<(), ()> {
    let sig: [u8; 64] = sig.try_into().map_err(|_| ())?;
    let vk = key.verifying().ok_or(())?;
    let mut m = Vec::with_capacity(context.len() + msg.len());
    m.extend_from_slice(context);
    m.extend_from_slice(msg);
    vk.verify_strict(&m, &Signature::from_bytes(&sig)).map_err(|_| ())
}

/// A member name: 1 to [`MAX_NAME`] characters among letters, digits, `-`, `_`, `.`.
pub fn valid_name(name: &str) -> Result<(), IdentityError> {
    let ok = !name.is_empty()
        && name.len() <= MAX_NAME
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(())
    } else {
        Err(IdentityError::Name(name.to_string()))
    }
}

/// Why a certificate was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum CertError {
    #[error("certificate of another grid (owner {0})")]
    OtherGrid(String),
    #[error("certificate not signed by the grid's owner (forged or altered)")]
    Forged,
    #[error("certificate of {0} not valid yet")]
    NotYetValid(String),
    #[error("certificate of {name} expired {when} ago", name = .0, when = ago(*.1))]
    Expired(String, u64),
    #[error("member {0} is revoked")]
    Revoked(String),
    #[error("{0} did not prove that it holds its certificate's key")]
    BadProof(String),
    #[error("member {0} has no {1} role")]
    MissingRole(String, &'static str),
    #[error("revocation not signed by the grid's owner (forged or altered)")]
    ForgedRevocation,
    #[error("too many revocations (at most {MAX_REVOCATIONS})")]
    TooManyRevocations,
}

/// A time past, `s` seconds, in the unit a person reads: `12 s`, `5 min`, `3 h`, `4 days`.
pub fn ago(s: u64) -> String {
    match s {
        0..120 => format!("{s} s"),
        120..7200 => format!("{} min", s / 60),
        7200..172_800 => format!("{} h", s / 3600),
        _ => format!("{} days", s / 86_400),
    }
}

/// Errors of keys, names and encodings.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum IdentityError {
    #[error("no random source: {0}")]
    Random(String),
    #[error("invalid member name {0:?} (1 to 64 letters, digits, '-', '_', '.')")]
    Name(String),
    #[error("unknown role {0:?} (host, submit, supernode)")]
    Role(String),
    #[error("malformed: {0}")]
    Malformed(String),
}

/// Lower-case hex.
pub fn to_hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Parses hex (either case); anything else is an error.
pub fn from_hex(s: &str) -> Result<Vec<u8>, IdentityError> {
    if s.len() % 2 != 0 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(IdentityError::Malformed("not hex, or of odd length".into()));
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).map_err(|_| IdentityError::Malformed("not hex".into())))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_expiry_is_said_in_the_unit_a_person_reads() {
        assert_eq!(ago(12), "12 s");
        assert_eq!(ago(300), "5 min");
        assert_eq!(ago(3 * 3600 + 5), "3 h");
        assert_eq!(ago(4 * 86_400), "4 days");
        assert_eq!(CertError::Expired("m2".into(), 3 * 3600).to_string(), "certificate of m2 expired 3 h ago");
    }

    const NOW: u64 = 1_800_000_000;

    fn grid() -> (KeyPair, KeyPair, Certificate) {
        let owner = KeyPair::from_seed(&[1; 32]);
        let member = KeyPair::from_seed(&[2; 32]);
        let roles = Roles::NONE.with(Role::Host).with(Role::Submit);
        let cert = owner.issue("node-1", member.public(), roles, NOW, 3600).unwrap();
        (owner, member, cert)
    }

    #[test]
    fn a_certificate_is_valid_within_its_period_only() {
        let (owner, _, cert) = grid();
        let none = Revocations::default();
        assert_eq!(cert.check(&owner.public(), NOW, &none), Ok(()));
        assert_eq!(cert.check(&owner.public(), NOW + 3599, &none), Ok(()));
        assert_eq!(cert.check(&owner.public(), NOW + 3600, &none), Err(CertError::Expired("node-1".into(), 0)));
        assert_eq!(cert.check(&owner.public(), NOW - 1, &none), Err(CertError::NotYetValid("node-1".into())));
        assert!(!cert.due_for_renewal(NOW, 600) && cert.due_for_renewal(NOW + 3000, 600));
    }

    #[test]
    fn a_forged_or_altered_certificate_is_refused() {
        let (owner, member, cert) = grid();
        let none = Revocations::default();
        // More roles, a longer life, another name or key: the signature no longer matches.
        let mut c = cert.clone();
        c.body.roles = Roles::ALL;
        assert_eq!(c.check(&owner.public(), NOW, &none), Err(CertError::Forged));
        let mut c = cert.clone();
        c.body.not_after_s += 1;
        assert_eq!(c.check(&owner.public(), NOW, &none), Err(CertError::Forged));
        let mut c = cert.clone();
        c.body.key = KeyPair::from_seed(&[9; 32]).public();
        assert_eq!(c.check(&owner.public(), NOW, &none), Err(CertError::Forged));
        let mut c = cert.clone();
        c.sig[10] ^= 1;
        assert_eq!(c.check(&owner.public(), NOW, &none), Err(CertError::Forged));
        c.sig.truncate(63);
        assert_eq!(c.check(&owner.public(), NOW, &none), Err(CertError::Forged));
        // Signed by a member, not the owner, claiming the owner's grid.
        let mut self_made = member.issue("node-1", member.public(), Roles::ALL, NOW, 3600).unwrap();
        assert!(matches!(self_made.check(&owner.public(), NOW, &none), Err(CertError::OtherGrid(_))));
        self_made.body.grid = owner.public();
        assert_eq!(self_made.check(&owner.public(), NOW, &none), Err(CertError::Forged));
    }

    #[test]
    fn a_revoked_member_is_refused_by_name_or_key() {
        let (owner, member, cert) = grid();
        let mut r = Revocations::default();
        r.names.insert("node-1".into());
        assert_eq!(cert.check(&owner.public(), NOW, &r), Err(CertError::Revoked("node-1".into())));
        let mut r = Revocations::default();
        r.keys.insert(member.public());
        assert_eq!(cert.check(&owner.public(), NOW, &r), Err(CertError::Revoked("node-1".into())));
        r.keys.clear();
        r.names.insert("node-2".into());
        assert_eq!(cert.check(&owner.public(), NOW, &r), Ok(()));
    }

    #[test]
    fn revocations_are_taken_only_when_the_owner_signed_them() {
        let (owner, member, cert) = grid();
        let mut list = RevocationList::new(owner.public());
        let r = owner.revoke("node-1", Some(member.public()), NOW).unwrap();
        assert_eq!(list.add(r.clone()), Ok(true));
        assert_eq!(list.add(r.clone()), Ok(false), "the same entry twice");
        assert_eq!(cert.check(&owner.public(), NOW, &list.revocations()), Err(CertError::Revoked("node-1".into())));
        // Forged: signed by a member, or altered after the owner signed it.
        let thief = KeyPair::from_seed(&[7; 32]);
        let mut forged = thief.revoke("node-2", None, NOW).unwrap();
        assert!(matches!(list.add(forged.clone()), Err(CertError::OtherGrid(_))));
        forged.body.grid = owner.public();
        assert_eq!(list.add(forged), Err(CertError::ForgedRevocation));
        let mut altered = r.clone();
        altered.body.name = "node-2".into();
        assert_eq!(list.add(altered.clone()), Err(CertError::ForgedRevocation));
        let (new, bad) = list.merge([altered, owner.revoke("node-3", None, NOW).unwrap()]);
        assert_eq!((new, bad.len()), (vec!["node-3".to_string()], 1));
        // Persisted as text and read back; a damaged line is refused, naming it.
        let text = list.to_text();
        assert_eq!(RevocationList::from_text(owner.public(), &text).unwrap(), list);
        let mut bad = text.clone();
        bad.replace_range(10..12, "00");
        let e = RevocationList::from_text(owner.public(), &bad).unwrap_err();
        assert!(e.starts_with("line 1"), "{e}");
        assert!(RevocationList::from_text(thief.public(), &text).is_err(), "another grid's list");
        assert_eq!(RevocationList::from_text(owner.public(), "\n").unwrap().len(), 0);
    }

    #[test]
    fn a_certificate_is_renewed_after_two_thirds_of_its_life_with_the_same_life() {
        let (owner, _, cert) = grid();
        // 3600 s of life: due from 2400 s on.
        assert!(!renewal_due(&cert, NOW) && !renewal_due(&cert, NOW + 2399));
        assert!(renewal_due(&cert, NOW + 2400) && renewal_due(&cert, NOW + 4000));
        let new = owner.renew(&cert, NOW + 2400).unwrap();
        assert_eq!((new.body.name.as_str(), new.body.key, new.body.roles), ("node-1", cert.body.key, cert.body.roles));
        assert_eq!((new.body.not_before_s, new.body.not_after_s), (NOW + 2400, NOW + 6000));
        assert_eq!(new.check(&owner.public(), NOW + 5999, &Revocations::default()), Ok(()));
        assert!(!renewal_due(&new, NOW + 2401));
    }

    #[test]
    fn a_hello_proves_the_key_for_one_side_and_one_hash() {
        let (_, member, cert) = grid();
        let h = [5u8; 32];
        let sig = member.sign_hello(true, &h);
        assert_eq!(cert.check_hello(true, &h, &sig), Ok(()));
        // Reflected as the other side's, on another handshake, or by another key: refused.
        assert!(cert.check_hello(false, &h, &sig).is_err());
        assert!(cert.check_hello(true, &[6u8; 32], &sig).is_err());
        let thief = KeyPair::from_seed(&[3; 32]);
        assert!(cert.check_hello(true, &h, &thief.sign_hello(true, &h)).is_err());
    }

    #[test]
    fn roles_names_and_encodings() {
        let r = Roles::parse("submit, host").unwrap();
        assert!(r.has(Role::Host) && r.has(Role::Submit) && !r.has(Role::Supernode));
        assert_eq!(r.to_string(), "host,submit");
        assert_eq!(Roles::parse("host,root"), Err(IdentityError::Role("root".into())));
        assert_eq!(Roles::parse("").unwrap(), Roles::NONE);
        assert!(valid_name("node-1.lab_2").is_ok());
        for bad in ["", "a b", "x/y", &"n".repeat(65)] {
            assert!(valid_name(bad).is_err(), "{bad:?}");
        }
        let (_, _, cert) = grid();
        assert_eq!(Certificate::from_hex(&cert.to_hex()).unwrap(), cert);
        assert!(Certificate::from_hex("zz").is_err());
        assert!(Certificate::from_hex("abc").is_err());
        assert!(Certificate::from_bytes(&cert.to_bytes()[..20]).is_err());
        let mut longer = cert.to_bytes();
        longer.push(0);
        assert!(Certificate::from_bytes(&longer).is_err());
        let k = KeyPair::generate().unwrap();
        assert_eq!(KeyPair::from_seed(&k.seed()).public(), k.public());
        assert_ne!(KeyPair::generate().unwrap().public(), k.public());
    }
}
