//! Member keys in the p2pmpi directory, and the decision whether a member's job may run here.
//!
//! ```text
//! <home>/keys/member.key    this peer's private key (hex Ed25519 seed; 0600), made by `p2pmpi init`
//! <home>/keys/member.cert   its certificate signed by the grid's owner (hex), from `grid join`
//! <home>/keys/grid.pub      the grid's owner public key (hex): names the grid, checks certificates
//! <home>/keys/owner.key     the owner's private key: only on the owner's machine (`grid create`)
//! <home>/keys/revoked       the revocations this peer learnt (one signed entry a line, hex)
//! ```
//!
//! [`Revoked`] keeps a daemon's list of revoked members: each entry checked against the
//! owner's key, written to its file, and applied to the daemon's credential, so that every
//! service of the process refuses the revoked members' new connections.
//!
//! A peer whose directory holds `member.cert` runs in **member mode** ([`credential`]); one
//! without runs in the transition mode, on `GRID_SECRET`. Files are written owner-only and
//! atomically ([`home::write_private`]). The certificate format and its checks are in
//! [`p2pmpi_wire::identity`].

use crate::home::{self, Home};
use anyhow::{bail, Context, Result};
use p2pmpi_wire::identity::{
    from_hex, renewal_due, to_hex, CertError, Certificate, KeyPair, PublicKey, Revocation, RevocationList, Revocations,
    Role, Roles, CERT_VALIDITY_S,
};
use p2pmpi_wire::secure::GridSecret;
use std::path::{Path, PathBuf};

/// Paths of a p2pmpi directory's keys.
#[derive(Debug, Clone)]
pub struct Keys {
    pub dir: PathBuf,
}

impl Keys {
    pub fn of(home: &Home) -> Self {
        Keys { dir: home.dir.join("keys") }
    }
    pub fn member_key(&self) -> PathBuf {
        self.dir.join("member.key")
    }
    pub fn member_cert(&self) -> PathBuf {
        self.dir.join("member.cert")
    }
    pub fn grid_pub(&self) -> PathBuf {
        self.dir.join("grid.pub")
    }
    pub fn owner_key(&self) -> PathBuf {
        self.dir.join("owner.key")
    }
    pub fn revoked(&self) -> PathBuf {
        self.dir.join("revoked")
    }

    fn create_dir(&self) -> Result<()> {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.dir)
            .with_context(|| format!("cannot create {}", self.dir.display()))
    }

    fn read_key(&self, path: &std::path::Path) -> Result<KeyPair> {
        let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
        let seed: [u8; 32] = from_hex(text.trim())
            .ok()
            .and_then(|b| b.try_into().ok())
            .with_context(|| format!("{} is not a key (64 hex digits)", path.display()))?;
        Ok(KeyPair::from_seed(&seed))
    }

    /// This peer's key pair, made now if there is none. Returns it and whether it was made.
    pub fn ensure_member_key(&self) -> Result<(KeyPair, bool)> {
        if self.member_key().exists() {
            return Ok((self.read_key(&self.member_key())?, false));
        }
        self.create_dir()?;
        let k = KeyPair::generate()?;
        home::write_private(&self.member_key(), format!("{}\n", to_hex(&k.seed())).as_bytes())?;
        Ok((k, true))
    }

    pub fn member_keypair(&self) -> Result<KeyPair> {
        self.read_key(&self.member_key())
    }

    pub fn owner_keypair(&self) -> Result<KeyPair> {
        if !self.owner_key().exists() {
            bail!(
                "{} does not exist: only the grid's owner (`p2pmpi grid create`) may do this",
                self.owner_key().display()
            );
        }
        self.read_key(&self.owner_key())
    }

    /// The grid's owner key, if this directory belongs to a grid.
    pub fn grid(&self) -> Result<Option<PublicKey>> {
        let p = self.grid_pub();
        if !p.exists() {
            return Ok(None);
        }
        let text = std::fs::read_to_string(&p).with_context(|| format!("cannot read {}", p.display()))?;
        let b: [u8; 32] = from_hex(text.trim())
            .ok()
            .and_then(|b| b.try_into().ok())
            .with_context(|| format!("{} is not a public key (64 hex digits)", p.display()))?;
        Ok(Some(PublicKey(b)))
    }

    pub fn certificate(&self) -> Result<Option<Certificate>> {
        let p = self.member_cert();
        if !p.exists() {
            return Ok(None);
        }
        let text = std::fs::read_to_string(&p).with_context(|| format!("cannot read {}", p.display()))?;
        Ok(Some(Certificate::from_hex(&text).with_context(|| format!("{} is not a certificate", p.display()))?))
    }

    /// Makes this directory a grid's owner: a new owner key, and a certificate with every role
    /// for this peer's own key under `name`. Refuses if it already belongs to a grid.
    pub fn create_grid(&self, name: &str, now_s: u64) -> Result<(PublicKey, Certificate)> {
        if self.grid_pub().exists() || self.owner_key().exists() {
            bail!(
                "{} already belongs to a grid (remove its grid.pub and owner.key to start another)",
                self.dir.display()
            );
        }
        let (member, _) = self.ensure_member_key()?;
        let owner = KeyPair::generate()?;
        let cert = owner.issue(name, member.public(), Roles::ALL, now_s, cert_lifetime_s())?;
        home::write_private(&self.owner_key(), format!("{}\n", to_hex(&owner.seed())).as_bytes())?;
        self.install(&cert, owner.public())?;
        Ok((owner.public(), cert))
    }

    /// Signs a certificate for `name`'s key (the owner does this), valid [`CERT_VALIDITY_S`]
    /// or `P2PMPI_CERT_LIFETIME` seconds (shorter lives, for tests of renewal).
    pub fn issue(&self, name: &str, key: PublicKey, roles: Roles, now_s: u64) -> Result<Certificate> {
        let owner = self.owner_keypair()?;
        Ok(owner.issue(name, key, roles, now_s, cert_lifetime_s())?)
    }

    /// Installs this peer's certificate and the grid's owner key (after a join). The
    /// certificate must be for this peer's key and signed by `owner`.
    pub fn install(&self, cert: &Certificate, owner: PublicKey) -> Result<()> {
        let me = self.member_keypair()?.public();
        if cert.body.key != me {
            bail!("the certificate is for another key than this peer's ({})", me.fingerprint());
        }
        let revoked = Default::default();
        cert.check(&owner, cert.body.not_before_s, &revoked).context("the certificate does not check")?;
        self.create_dir()?;
        home::write_private(&self.grid_pub(), format!("{}\n", to_hex(&owner.0)).as_bytes())?;
        home::write_private(&self.member_cert(), format!("{}\n", cert.to_hex()).as_bytes())
    }
}

/// The handshake credential of a p2pmpi directory in member mode: its key, certificate and
/// grid; `None` when it has no certificate (the transition mode, `GRID_SECRET`). A certificate
/// that expired (at `now_s`) is an error saying so.
pub fn credential(home: &Home, now_s: u64) -> Result<Option<GridSecret>> {
    let keys = Keys::of(home);
    let Some(cert) = keys.certificate()? else { return Ok(None) };
    let owner = keys.grid()?.with_context(|| format!("{} is missing", keys.grid_pub().display()))?;
    let revoked = load_revoked(&keys.revoked(), owner)?;
    if let Err(e) = cert.check(&owner, now_s, &revoked.revocations()) {
        let what = match e {
            CertError::Expired(..) => {
                ": this machine must be invited again (`p2pmpi grid invite NAME` on the grid owner's machine, then \
                 `p2pmpi grid join CODE` here)"
            }
            CertError::NotYetValid(_) => ": check this machine's clock",
            _ => "",
        };
        bail!("this peer's certificate ({}) is not valid: {e}{what}", keys.member_cert().display());
    }
    let secret = GridSecret::member(keys.member_keypair()?, cert, owner);
    if let Some(m) = secret.member_info() {
        m.set_revoked(revoked.revocations());
    }
    Ok(Some(secret))
}

/// What [`refused_words`] says between the refusing side and the reason.
pub const REFUSES: &str = " refuses this machine: ";

/// The words for a refusal record ([`p2pmpi_wire::secure::SecureError::RefusedBy`]): `by`
/// (`supernode 10.0.0.1:9000`) refuses this machine's certificate for `why` (`member m2 is
/// revoked`, `certificate of m2 expired 12 s ago`), with what to do about it.
pub fn refused_words(by: &str, why: &str) -> String {
    let what = if why.contains(" expired ") {
        ": this machine must be invited again (`p2pmpi grid invite NAME` on the grid owner's machine, then \
         `p2pmpi grid join CODE` here)"
    } else if why.ends_with(" is revoked") {
        ": this machine was revoked from the grid (a revoked machine comes back only under another name, with a new \
         invitation)"
    } else if why.contains(" not valid yet") {
        ": check this machine's clock"
    } else {
        ""
    };
    format!("{by}{REFUSES}{why}{what}")
}

/// The revocations kept in `path` (none if it does not exist).
fn load_revoked(path: &Path, owner: PublicKey) -> Result<RevocationList> {
    match std::fs::read_to_string(path) {
        Ok(text) => RevocationList::from_text(owner, &text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(RevocationList::new(owner)),
        Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
    }
}

/// A daemon's revoked members: the owner's signed revocations it learnt, kept in a file (so
/// that they stay refused after a restart, supernodes or not) and applied to its credential.
pub struct Revoked {
    list: parking_lot::Mutex<RevocationList>,
    path: PathBuf,
    secret: GridSecret,
}

impl Revoked {
    /// The list kept in `path`, applied to `secret`'s credential; `None` in the transition
    /// mode (no owner, no revocation).
    pub fn open(secret: &GridSecret, path: PathBuf) -> Result<Option<Revoked>> {
        let Some(m) = secret.member_info() else { return Ok(None) };
        let list = load_revoked(&path, m.owner)?;
        m.set_revoked(list.revocations());
        Ok(Some(Revoked { list: parking_lot::Mutex::new(list), path, secret: secret.clone() }))
    }

    /// Takes the entries the owner signed (the others are refused and returned as errors),
    /// and when some are new, writes the file and applies them to the credential. Returns
    /// the newly revoked names.
    pub fn merge(&self, entries: Vec<Revocation>) -> (Vec<String>, Vec<CertError>) {
        let mut list = self.list.lock();
        let (new, bad) = list.merge(entries);
        if !new.is_empty() {
            if let Some(m) = self.secret.member_info() {
                m.set_revoked(list.revocations());
            }
            if let Err(e) = home::write_private(&self.path, list.to_text().as_bytes()) {
                tracing::warn!("cannot keep the revocations in {}: {e:#}", self.path.display());
            }
        }
        (new, bad)
    }

    pub fn entries(&self) -> Vec<Revocation> {
        self.list.lock().entries().cloned().collect()
    }

    pub fn revocations(&self) -> Revocations {
        self.list.lock().revocations()
    }
}

/// Adds `r` to the revoked members `secret`'s connections refuse (a command's or the
/// launcher's credential, which keeps no file of its own).
pub fn add_revoked(secret: &GridSecret, r: &Revocations) {
    if let Some(m) = secret.member_info() {
        let mut all = m.revoked.read().unwrap_or_else(|p| p.into_inner()).clone();
        all.names.extend(r.names.iter().cloned());
        all.keys.extend(r.keys.iter().copied());
        m.set_revoked(all);
    }
}

/// What a member's daemon does about its certificate's renewal at `now_s`: `Some(cert)`, the
/// certificate to ask the owner to renew (two thirds of its life passed), else `None`. Pure.
pub fn renewal_request(own: &Certificate, now_s: u64) -> Option<Certificate> {
    renewal_due(own, now_s).then(|| own.clone())
}

/// Whether `new` may replace this member's certificate `own`: the owner signed it, for the
/// same key, name and roles, valid at `now_s`, ending later than `own`. Pure.
pub fn acceptable_renewal(own: &Certificate, new: &Certificate, owner: &PublicKey, now_s: u64) -> bool {
    let (a, b) = (&own.body, &new.body);
    new.check(owner, now_s, &Revocations::default()).is_ok()
        && (a.key, &a.name, a.roles) == (b.key, &b.name, b.roles)
        && b.not_after_s > a.not_after_s
}

/// The owner's side of a renewal: the renewed certificate for `asked`, if the owner signed
/// it, it is still valid at `now_s` (an expired certificate is not renewed: its member must
/// be invited again) and its member is not revoked.
pub fn renew_for(owner: &KeyPair, asked: &Certificate, now_s: u64, revoked: &Revocations) -> Result<Certificate> {
    asked.check(&owner.public(), now_s, revoked).context("not renewed")?;
    Ok(owner.renew(asked, now_s)?)
}

/// Whether this MPD takes a reservation or a launch from the member `peer` (its certificate
/// as the handshake checked it; `None` in the transition mode): this peer's own certificate
/// must have the `host` role, the other's the `submit` role, and its name must be in
/// `submit_allow` when that is not empty. `Err` gives the reason. Pure.
pub fn may_run(own: Option<&Certificate>, peer: Option<&Certificate>, submit_allow: &[String]) -> Result<(), String> {
    if let Some(own) = own {
        if !own.body.roles.has(Role::Host) {
            return Err(format!("this peer's certificate ({}) has no host role", own.body.name));
        }
    }
    match peer {
        Some(c) if !c.body.roles.has(Role::Submit) => Err(format!("member {} has no submit role", c.body.name)),
        Some(c) if !submit_allow.is_empty() && !submit_allow.contains(&c.body.name) => {
            Err(format!("member {} is not in this peer's SUBMIT_ALLOW", c.body.name))
        }
        None if !submit_allow.is_empty() => Err("SUBMIT_ALLOW needs member keys (the grid secret names nobody)".into()),
        _ => Ok(()),
    }
}

/// How long the certificates the owner signs are valid: `P2PMPI_CERT_LIFETIME` (seconds, at
/// least 3) if set, else [`CERT_VALIDITY_S`].
pub fn cert_lifetime_s() -> u64 {
    std::env::var("P2PMPI_CERT_LIFETIME").ok().and_then(|v| v.parse().ok()).map_or(CERT_VALIDITY_S, |s: u64| s.max(3))
}

/// Seconds since the UNIX epoch, now.
pub fn unix_now_s() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_800_000_000;

    fn cert(name: &str, roles: &str) -> Certificate {
        let owner = KeyPair::from_seed(&[1; 32]);
        owner.issue(name, KeyPair::from_seed(&[2; 32]).public(), Roles::parse(roles).unwrap(), NOW, 60).unwrap()
    }

    #[test]
    fn a_member_without_submit_or_outside_submit_allow_cannot_run_a_job() {
        let host = cert("h", "host");
        let alice = cert("alice", "submit");
        let bob = cert("bob", "host");
        assert_eq!(may_run(Some(&host), Some(&alice), &[]), Ok(()));
        assert_eq!(may_run(Some(&host), Some(&bob), &[]), Err("member bob has no submit role".into()));
        let allow = vec!["carol".to_string()];
        assert!(may_run(Some(&host), Some(&alice), &allow).unwrap_err().contains("SUBMIT_ALLOW"));
        assert_eq!(may_run(Some(&host), Some(&alice), &["alice".into()]), Ok(()));
        // A peer without the host role lends nothing.
        assert!(may_run(Some(&alice), Some(&alice), &[]).unwrap_err().contains("no host role"));
        // Transition mode: anyone with the secret, unless SUBMIT_ALLOW asks for names.
        assert_eq!(may_run(None, None, &[]), Ok(()));
        assert!(may_run(None, None, &allow).is_err());
    }

    #[test]
    fn renewals_keep_the_member_and_only_extend_it() {
        let owner = KeyPair::from_seed(&[1; 32]);
        let own = cert("alice", "host,submit");
        // 60 s of life: asked from 40 s on.
        assert!(renewal_request(&own, NOW + 39).is_none());
        assert_eq!(renewal_request(&own, NOW + 40), Some(own.clone()));
        let none = Revocations::default();
        let new = renew_for(&owner, &own, NOW + 40, &none).unwrap();
        assert!(acceptable_renewal(&own, &new, &owner.public(), NOW + 41));
        assert_eq!(new.body.not_after_s, NOW + 100);
        // Not older, not another member's, not raised roles, not someone else's signature.
        assert!(!acceptable_renewal(&new, &own, &owner.public(), NOW + 41));
        let other = owner.issue("bob", own.body.key, own.body.roles, NOW + 40, 60).unwrap();
        assert!(!acceptable_renewal(&own, &other, &owner.public(), NOW + 41));
        let more = owner.issue("alice", own.body.key, Roles::ALL, NOW + 40, 60).unwrap();
        assert!(!acceptable_renewal(&own, &more, &owner.public(), NOW + 41));
        let thief = KeyPair::from_seed(&[4; 32]);
        assert!(!acceptable_renewal(&own, &thief.renew(&own, NOW + 40).unwrap(), &owner.public(), NOW + 41));
        // The owner renews neither an expired certificate nor a revoked member's.
        assert!(renew_for(&owner, &own, NOW + 60, &none).is_err());
        let mut r = Revocations::default();
        r.names.insert("alice".into());
        assert!(renew_for(&owner, &own, NOW + 40, &r).is_err());
    }

    #[test]
    fn revocations_are_kept_and_applied_to_the_credential() {
        let dir = std::env::temp_dir().join(format!("p2pmpi-revoked-{}-{:x}", std::process::id(), home::random_u128()));
        let h = Home::new(dir.clone());
        let keys = Keys::of(&h);
        keys.create_grid("owner", NOW).unwrap();
        let owner = keys.owner_keypair().unwrap();
        let secret = credential(&h, NOW).unwrap().unwrap();
        let store = Revoked::open(&secret, keys.revoked()).unwrap().expect("member mode");
        let r = owner.revoke("bob", None, NOW).unwrap();
        let forged = KeyPair::from_seed(&[9; 32]).revoke("carol", None, NOW).unwrap();
        let (new, bad) = store.merge(vec![r.clone(), forged]);
        assert_eq!((new, bad.len()), (vec!["bob".to_string()], 1));
        assert!(secret.member_info().unwrap().revoked.read().unwrap().names.contains("bob"));
        assert_eq!(store.merge(vec![r]).0.len(), 0, "known already");
        // A restart: the credential starts with the list kept.
        let again = credential(&h, NOW).unwrap().unwrap();
        let names = again.member_info().unwrap().revoked.read().unwrap().names.clone();
        assert_eq!(names.into_iter().collect::<Vec<_>>(), ["bob"]);
        // A damaged file stops the daemon, naming it.
        std::fs::write(keys.revoked(), "zz\n").unwrap();
        assert!(format!("{:#}", credential(&h, NOW).err().unwrap()).contains("line 1"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn keys_are_made_once_and_a_grid_signs_its_members() {
        let dir = std::env::temp_dir().join(format!("p2pmpi-keys-{}-{:x}", std::process::id(), home::random_u128()));
        let owner_home = Home::new(dir.join("owner"));
        let keys = Keys::of(&owner_home);
        assert!(credential(&owner_home, NOW).unwrap().is_none(), "no certificate: transition mode");
        let (k1, made) = keys.ensure_member_key().unwrap();
        assert!(made);
        let (k2, made) = keys.ensure_member_key().unwrap();
        assert!(!made && k1.public() == k2.public());
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(keys.member_key()).unwrap().permissions().mode();
        assert_eq!(mode & 0o077, 0, "private key readable by others: {mode:o}");

        let (grid, own) = keys.create_grid("owner", NOW).unwrap();
        assert!(keys.create_grid("again", NOW).is_err());
        assert_eq!(own.body.roles, Roles::ALL);
        let cred = credential(&owner_home, NOW).unwrap().expect("member mode");
        assert_eq!(cred.member_info().unwrap().cert().body.name, "owner");

        // A new member: its own key, a certificate from the owner, installed.
        let new_home = Home::new(dir.join("new"));
        let nk = Keys::of(&new_home);
        let (member, _) = nk.ensure_member_key().unwrap();
        let c = keys.issue("node-2", member.public(), Roles::parse("host").unwrap(), NOW).unwrap();
        assert!(nk.owner_keypair().is_err(), "a member cannot sign");
        // A certificate for another key is refused.
        let wrong = keys.issue("node-3", KeyPair::from_seed(&[5; 32]).public(), Roles::ALL, NOW).unwrap();
        assert!(nk.install(&wrong, grid).is_err());
        nk.install(&c, grid).unwrap();
        let cred = credential(&new_home, NOW + 1).unwrap().unwrap();
        assert_eq!(cred.member_info().unwrap().cert().body.name, "node-2");
        // Expired: the daemon refuses to start with it, saying why.
        let e = credential(&new_home, NOW + CERT_VALIDITY_S).err().unwrap();
        assert!(format!("{e:#}").contains("expired"), "{e:#}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
