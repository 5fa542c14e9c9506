//! Control plane between an MPI process and its launcher (the local `p2pmpirun`, or a peer's
//! MPD): length-prefixed `postcard` records.
//!
//! Frame: 4-byte little-endian length `n` (at most [`MAX_CONTROL_LEN`]), then `n` bytes of a
//! postcard-encoded [`Control`].
//!
//! A control connection opens with a challenge-response on the job key ([`crate::auth`]): the
//! process sends `Hello` (its slot, a fresh nonce), the launcher answers `Challenge` (its
//! nonce, its proof), and the process checks that proof and sends `Register` with its own
//! proof, which also covers the registration's fields. [`register`] and [`accept`] run the
//! two sides; the key itself is never written.

use crate::auth::{self, JobKey, Nonce, Proof, Role};
use serde::{Deserialize, Serialize};
use std::io::{self, Read, Write};
use thiserror::Error;

/// Largest control record accepted.
pub const MAX_CONTROL_LEN: u32 = 16 << 20;

/// Version of the control protocol, carried by `Hello`: a launcher refuses a process that
/// speaks another (a program built against another p2pmpi than the `p2pmpirun` or MPD that
/// started it would otherwise misread records). 2: `SpawnApp` carries a working directory.
/// 3: `Finalizing`.
pub const CONTROL_VERSION: u32 = 3;

/// One control record. Processes send `Hello`, `Register`, `Finalizing`, `Finalized`, `Abort`, `PeerFailed`,
/// `Renew`, `Agree`, `Revoke` and `Spawn`; the launcher answers with `Challenge`, `World`,
/// `Lease`, `Excluded`, `Agreed`, `AgreeRefused` and `Spawned`, and may send `Dead`,
/// `Revoked` and `Stop`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Control {
    /// A process announces itself: its rank (slot), the address of its data port, its pid,
    /// the address of its failure detector (UDP; empty if none), whether the program handles
    /// failures itself (`tolerant`: the launcher then lets the job go on when a process dies),
    /// and its proof of the job key (see [`register`]).
    Register { rank: u32, data_addr: String, pid: u32, fd_addr: String, tolerant: bool, proof: Proof },
    /// The communicator built at the root: rank → data address, for every rank, with the
    /// failure detector's set-up for this process (`None`: no detector) and, in a replicated
    /// job, the length of the leases the process must hold to send (µs; 0: no fencing).
    World { addrs: Vec<String>, fd: Option<FdSetup>, lease_us: u64 },
    /// The process finalized cleanly.
    Finalized { rank: u32 },
    /// The process entered finalization (its output is complete; it may still wait for
    /// its peers' goodbyes).
    Finalizing,
    /// The process called `abort` (or hit a fatal error): stop the job with `code`.
    /// `lost` names the peer whose loss caused the error, if that is the cause (the launcher
    /// then reports that peer's own fate in preference).
    Abort { rank: u32, code: i32, message: String, lost: Option<u32> },
    /// The launcher stops the job; the process must exit.
    Stop { reason: String },
    /// The failure detector of process `rank` confirmed the failure of process `failed`
    /// (`detail` says how); sent before the process stops, unless the program handles failures.
    PeerFailed { rank: u32, failed: u32, detail: String },
    /// A replicated job's process asks to renew its lease; `stamp_us` is when it asked, by
    /// its own clock (echoed in the answer).
    Renew { stamp_us: u64 },
    /// The lease asked at `stamp_us` is granted: it runs the lease length from then.
    Lease { stamp_us: u64 },
    /// The slots the launcher declared dead so far (every process applies them; a process
    /// that finds itself there was excluded and exits quietly).
    Dead { slots: Vec<u32> },
    /// The process was excluded from the job (suspected or declared dead): it must exit
    /// quietly.
    Excluded { reason: String },
    /// The first record of a control connection: the process's slot, a fresh nonce and its
    /// [`CONTROL_VERSION`].
    Hello { rank: u32, nonce: Nonce, version: u32 },
    /// The launcher's answer to `Hello`: its nonce and its proof of the job key.
    Challenge { nonce: Nonce, proof: Proof },
    /// A fault-aware program's process contributes `flag` to agreement `seq` on the
    /// communicator of context `comm`, whose members are the world ranks `members`
    /// (`p2pmpi_core::agreement`: the launcher decides).
    Agree { comm: u64, seq: u64, members: Vec<u32>, flag: u32 },
    /// The launcher's decision of an agreement: the AND of the flags contributed, the
    /// members (world ranks) that failed, and the decision's number (unique in the job).
    Agreed { comm: u64, seq: u64, flag: u32, failed: Vec<u32>, id: u64 },
    /// The launcher refused the process's contribution (`reason` says why).
    AgreeRefused { comm: u64, seq: u64, reason: String },
    /// A fault-aware program's process revokes the communicator of context `comm` (ULFM's
    /// `MPIX_Comm_revoke`): the launcher tells every process.
    Revoke { comm: u64 },
    /// The communicator of context `comm` was revoked: its pending and later communication
    /// fails.
    Revoked { comm: u64 },
    /// The root of a `spawn` asks the launcher to start new processes: one entry per
    /// program (`spawn_multiple`), the spawning communicator's members (their universe ids
    /// and data addresses, in communicator order) and the context id the parents agreed for
    /// the intercommunicator.
    Spawn { apps: Vec<SpawnApp>, parents: Vec<(u32, String)>, ctx: u32 },
    /// The launcher's answer to `Spawn`: the universe id of the first child (the others
    /// follow), or why the children could not be started.
    Spawned { base: u32, error: Option<String> },
}

/// One program of a `Spawn`: its path, arguments, number of processes, the environment
/// variables its `Command` set (`Some`) or removed (`None`), and the working directory it
/// names (`None`: the launcher's).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpawnApp {
    pub program: String,
    pub args: Vec<String>,
    pub procs: u32,
    pub env: Vec<(String, Option<String>)>,
    pub dir: Option<String>,
}

/// What a process registers with its launcher.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registration {
    /// The process's slot (its rank without replicas).
    pub rank: u32,
    /// Its data port.
    pub data_addr: String,
    pub pid: u32,
    /// Its failure detector's port (UDP; empty if none).
    pub fd_addr: String,
    /// The program handles failures itself.
    pub tolerant: bool,
}

fn launcher_proof(key: &JobKey, rank: u32, np: &Nonce, nl: &Nonce) -> Proof {
    key.proof(Role::ControlLauncher, &[&rank.to_le_bytes(), np, nl])
}

fn process_parts<'a>(
    rank: &'a [u8; 4],
    np: &'a Nonce,
    nl: &'a Nonce,
    r: &'a Registration,
    pid: &'a [u8; 4],
) -> [&'a [u8]; 7] {
    [rank, np, nl, r.data_addr.as_bytes(), pid, r.fd_addr.as_bytes(), if r.tolerant { &[1] } else { &[0] }]
}

fn process_proof(key: &JobKey, np: &Nonce, nl: &Nonce, r: &Registration) -> Proof {
    let (rank, pid) = (r.rank.to_le_bytes(), r.pid.to_le_bytes());
    key.proof(Role::ControlProcess, &process_parts(&rank, np, nl, r, &pid))
}

/// The process's side of a control connection's opening: `Hello`, the launcher's
/// `Challenge` checked, then `Register` with this process's proof.
pub fn register<S: Read + Write>(conn: &mut S, key: &JobKey, reg: &Registration) -> Result<(), ControlError> {
    let np = auth::nonce();
    write_msg(conn, &Control::Hello { rank: reg.rank, nonce: np, version: CONTROL_VERSION })?;
    let nl = match read_msg(conn)? {
        Some(Control::Challenge { nonce, proof }) => {
            if !key.verify(Role::ControlLauncher, &[&reg.rank.to_le_bytes(), &np, &nonce], &proof) {
                return Err(ControlError::Refused("the launcher's answer does not prove the job key".into()));
            }
            nonce
        }
        Some(Control::Stop { reason }) => return Err(ControlError::Refused(format!("job stopped: {reason}"))),
        Some(other) => return Err(ControlError::Refused(format!("unexpected answer from the launcher: {other:?}"))),
        None => return Err(io::Error::from(io::ErrorKind::UnexpectedEof).into()),
    };
    let r = reg.clone();
    let proof = process_proof(key, &np, &nl, &r);
    write_msg(
        conn,
        &Control::Register {
            rank: r.rank,
            data_addr: r.data_addr,
            pid: r.pid,
            fd_addr: r.fd_addr,
            tolerant: r.tolerant,
            proof,
        },
    )
}

/// The launcher's side of a control connection's opening, for a job of `slots` processes:
/// the process's registration once it proved the job key.
pub fn accept<S: Read + Write>(conn: &mut S, key: &JobKey, slots: usize) -> Result<Registration, ControlError> {
    let first = match read_msg(conn) {
        Ok(Some(Control::Hello { version, .. })) if version != CONTROL_VERSION => {
            let why = format!(
                "the program's p2pmpi library speaks control protocol {version}, this launcher {CONTROL_VERSION}: \
                 build the program against the same p2pmpi version as p2pmpirun"
            );
            let _ = write_msg(conn, &Control::Stop { reason: why.clone() });
            return Err(ControlError::Refused(why));
        }
        Err(ControlError::Malformed(e)) => {
            return Err(ControlError::Refused(format!(
                "a malformed first record ({e}): a program built against another p2pmpi version?"
            )))
        }
        other => other?,
    };
    let (rank, np) = match first {
        Some(Control::Hello { rank, nonce, .. }) if (rank as usize) < slots => (rank, nonce),
        Some(Control::Hello { rank, .. }) => return Err(ControlError::Refused(format!("no slot {rank} in this job"))),
        Some(other) => return Err(ControlError::Refused(format!("expected Hello, got {}", other.kind()))),
        None => return Err(io::Error::from(io::ErrorKind::UnexpectedEof).into()),
    };
    let nl = auth::nonce();
    write_msg(conn, &Control::Challenge { nonce: nl, proof: launcher_proof(key, rank, &np, &nl) })?;
    match read_msg(conn)? {
        Some(Control::Register { rank: r, data_addr, pid, fd_addr, tolerant, proof }) if r == rank => {
            let reg = Registration { rank, data_addr, pid, fd_addr, tolerant };
            let (rb, pb) = (rank.to_le_bytes(), pid.to_le_bytes());
            if !key.verify(Role::ControlProcess, &process_parts(&rb, &np, &nl, &reg, &pb), &proof) {
                return Err(ControlError::Refused(format!("slot {rank}'s registration does not prove the job key")));
            }
            Ok(reg)
        }
        Some(other) => Err(ControlError::Refused(format!("expected slot {rank}'s registration, got {}", other.kind()))),
        None => Err(io::Error::from(io::ErrorKind::UnexpectedEof).into()),
    }
}

impl Control {
    /// The record's name (for messages that must not print its content).
    pub fn kind(&self) -> &'static str {
        match self {
            Control::Register { .. } => "Register",
            Control::World { .. } => "World",
            Control::Finalized { .. } => "Finalized",
            Control::Finalizing => "Finalizing",
            Control::Abort { .. } => "Abort",
            Control::Stop { .. } => "Stop",
            Control::PeerFailed { .. } => "PeerFailed",
            Control::Renew { .. } => "Renew",
            Control::Lease { .. } => "Lease",
            Control::Dead { .. } => "Dead",
            Control::Excluded { .. } => "Excluded",
            Control::Hello { .. } => "Hello",
            Control::Challenge { .. } => "Challenge",
            Control::Agree { .. } => "Agree",
            Control::Agreed { .. } => "Agreed",
            Control::AgreeRefused { .. } => "AgreeRefused",
            Control::Revoke { .. } => "Revoke",
            Control::Revoked { .. } => "Revoked",
            Control::Spawn { .. } => "Spawn",
            Control::Spawned { .. } => "Spawned",
        }
    }
}

/// The failure detector's parameters for one application, sent with the communicator
/// (FM §5.3: "at startup, all FDs are instructed with which protocol they should monitor a
/// given application").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FdSetup {
    /// The detector's address (UDP) of every process, by rank.
    pub addrs: Vec<String>,
    /// `GOSSIP_PROTOCOL`: `DBRR`, `BRR`, `RR` or `RANDOM`.
    pub protocol: String,
    /// `T_GOSSIP`, microseconds.
    pub t_gossip_us: u64,
    /// `T_MAX_HANG`, microseconds.
    pub t_max_hang_us: u64,
    /// `Δt_i = ts_i − ts_1`: when the root sent this process the communicator, after its
    /// first send, microseconds (FM equation 4).
    pub delta_t_us: u64,
    /// With `--fd kmonitor`: the k-monitor detector instead of gossip (`addrs` are then its
    /// TCP endpoints; `protocol` and `t_gossip_us` are ignored).
    pub kmonitor: Option<KmonitorSetup>,
}

/// The k-monitor detector's parameters for one application (`--fd kmonitor`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KmonitorSetup {
    /// Monitors per process.
    pub k: u32,
    /// `T_hb`, microseconds.
    pub t_hb_us: u64,
    /// `T_to`, microseconds.
    pub t_to_us: u64,
    /// Ask a second monitor before flooding a time-out.
    pub confirm: bool,
    /// Every rank's subnet prefix length (its cluster), by rank.
    pub prefixes: Vec<u8>,
    /// `T'_hb` between clusters, microseconds.
    pub wide_t_hb_us: u64,
    /// `T'_to` between clusters, microseconds.
    pub wide_t_to_us: u64,
    /// Refused connections to a cluster before leaving it to the other side.
    pub wide_refusals: u32,
}

/// Errors of the control plane.
#[derive(Debug, Error)]
pub enum ControlError {
    #[error("i/o: {0}")]
    Io(#[from] io::Error),
    #[error("control record of {0} bytes exceeds the limit of {MAX_CONTROL_LEN}")]
    TooLong(u32),
    #[error("malformed control record: {0}")]
    Malformed(#[from] postcard::Error),
    #[error("malformed control record: {0} bytes after its value")]
    Trailing(usize),
    #[error("{0}")]
    Refused(String),
}

/// Encodes a record with its length prefix.
pub fn encode(msg: &Control) -> Vec<u8> {
    let body = postcard::to_allocvec(msg).expect("control records always serialize");
    let mut out = Vec::with_capacity(4 + body.len());
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(&body);
    out
}

/// Writes one record.
pub fn write_msg<W: Write>(w: &mut W, msg: &Control) -> Result<(), ControlError> {
    w.write_all(&encode(msg))?;
    w.flush()?;
    Ok(())
}

/// Reads one record (blocking). End of stream before a length prefix is `Ok(None)`.
pub fn read_msg<R: Read>(r: &mut R) -> Result<Option<Control>, ControlError> {
    let mut len = [0u8; 4];
    let mut got = 0;
    while got < 4 {
        match r.read(&mut len[got..]) {
            Ok(0) if got == 0 => return Ok(None),
            Ok(0) => return Err(io::Error::from(io::ErrorKind::UnexpectedEof).into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    let n = u32::from_le_bytes(len);
    if n > MAX_CONTROL_LEN {
        return Err(ControlError::TooLong(n));
    }
    // Grown as the bytes come, not allocated on the peer's word: four bytes announcing 16 MiB
    // must not cost 16 MiB.
    let mut body = Vec::with_capacity((n as usize).min(64 * 1024));
    r.take(n as u64).read_to_end(&mut body)?;
    if body.len() < n as usize {
        return Err(io::Error::from(io::ErrorKind::UnexpectedEof).into());
    }
    // One whole record: bytes after its value make it malformed, not ignored.
    match postcard::take_from_bytes(&body)? {
        (msg, []) => Ok(Some(msg)),
        (_, rest) => Err(ControlError::Trailing(rest.len())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn trailing_bytes_after_a_record_are_refused() {
        let body = postcard::to_allocvec(&Control::Finalized { rank: 3 }).unwrap();
        for extra in [&[0u8][..], &[1, 2, 3]] {
            let mut rec = ((body.len() + extra.len()) as u32).to_le_bytes().to_vec();
            rec.extend_from_slice(&body);
            rec.extend_from_slice(extra);
            match read_msg(&mut &rec[..]) {
                Err(ControlError::Trailing(n)) => assert_eq!(n, extra.len()),
                other => panic!("{extra:?} after the record: {other:?}"),
            }
        }
        // The same record without them is read.
        let rec = encode(&Control::Finalized { rank: 3 });
        assert!(matches!(read_msg(&mut &rec[..]), Ok(Some(Control::Finalized { rank: 3 }))));
    }

    #[test]
    fn roundtrip_all_variants() {
        let msgs = vec![
            Control::Register {
                rank: 3,
                data_addr: "127.0.0.1:4000".into(),
                pid: 77,
                fd_addr: "127.0.0.1:4001".into(),
                tolerant: true,
                proof: [9; 32],
            },
            Control::Hello { rank: 3, nonce: [1; 32], version: CONTROL_VERSION },
            Control::Challenge { nonce: [2; 32], proof: [3; 32] },
            Control::Agree { comm: 5, seq: 2, members: vec![0, 2, 3], flag: 0xff },
            Control::Agreed { comm: 5, seq: 2, flag: 0x0f, failed: vec![2], id: 9 },
            Control::AgreeRefused { comm: 5, seq: 2, reason: "rank 2 was declared failed".into() },
            Control::Revoke { comm: 7 },
            Control::Revoked { comm: 7 },
            Control::World { addrs: vec!["a".into(), "b".into()], fd: None, lease_us: 0 },
            Control::World {
                lease_us: 1_000_000,
                addrs: vec!["a".into()],
                fd: Some(FdSetup {
                    addrs: vec!["u".into()],
                    protocol: "DBRR".into(),
                    t_gossip_us: 500_000,
                    t_max_hang_us: 0,
                    delta_t_us: 12,
                    kmonitor: None,
                }),
            },
            Control::World {
                lease_us: 1,
                addrs: vec!["a".into()],
                fd: Some(FdSetup {
                    addrs: vec!["u".into()],
                    protocol: "KMONITOR".into(),
                    t_gossip_us: 0,
                    t_max_hang_us: 0,
                    delta_t_us: 0,
                    kmonitor: Some(KmonitorSetup {
                        k: 4,
                        t_hb_us: 100_000,
                        t_to_us: 1_000_000,
                        confirm: true,
                        prefixes: vec![8, 24],
                        wide_t_hb_us: 300_000,
                        wide_t_to_us: 3_000_000,
                        wide_refusals: 3,
                    }),
                }),
            },
            Control::PeerFailed { rank: 1, failed: 2, detail: "silent".into() },
            Control::Finalized { rank: 1 },
            Control::Finalizing,
            Control::Abort { rank: 2, code: 5, message: "x".into(), lost: Some(1) },
            Control::Stop { reason: "bye".into() },
            Control::Renew { stamp_us: 17 },
            Control::Lease { stamp_us: 17 },
            Control::Dead { slots: vec![3, 5] },
            Control::Excluded { reason: "suspected".into() },
        ];
        let mut buf = Vec::new();
        for m in &msgs {
            write_msg(&mut buf, m).unwrap();
        }
        let mut r = &buf[..];
        for m in &msgs {
            assert_eq!(read_msg(&mut r).unwrap().as_ref(), Some(m));
        }
        assert!(read_msg(&mut r).unwrap().is_none());
    }

    #[test]
    fn a_short_record_is_an_error_and_its_announced_length_is_not_allocated() {
        let mut b = (MAX_CONTROL_LEN).to_le_bytes().to_vec();
        b.extend_from_slice(&[1, 2, 3]);
        let e = read_msg(&mut &b[..]).unwrap_err();
        assert!(matches!(e, ControlError::Io(ref io) if io.kind() == io::ErrorKind::UnexpectedEof), "{e}");
    }

    #[test]
    fn oversized_length_is_refused_without_allocating() {
        let b = u32::MAX.to_le_bytes();
        assert!(matches!(read_msg(&mut &b[..]), Err(ControlError::TooLong(_))));
    }

    /// A stream that records what is written through it.
    struct Rec<S> {
        inner: S,
        written: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
    }
    impl<S: Read> Read for Rec<S> {
        fn read(&mut self, b: &mut [u8]) -> io::Result<usize> {
            self.inner.read(b)
        }
    }
    impl<S: Write> Write for Rec<S> {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            let n = self.inner.write(b)?;
            self.written.lock().unwrap().extend_from_slice(&b[..n]);
            Ok(n)
        }
        fn flush(&mut self) -> io::Result<()> {
            self.inner.flush()
        }
    }

    /// A scripted peer: reads come from `input`, writes are kept.
    struct Scripted {
        input: io::Cursor<Vec<u8>>,
        output: Vec<u8>,
    }
    impl Read for Scripted {
        fn read(&mut self, b: &mut [u8]) -> io::Result<usize> {
            self.input.read(b)
        }
    }
    impl Write for Scripted {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            self.output.extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    fn reg() -> Registration {
        Registration {
            rank: 2,
            data_addr: "127.0.0.1:5000".into(),
            pid: 42,
            fd_addr: "127.0.0.1:5001".into(),
            tolerant: false,
        }
    }

    fn contains(hay: &[u8], needle: &[u8]) -> bool {
        hay.windows(needle.len()).any(|w| w == needle)
    }

    type Written = std::sync::Arc<std::sync::Mutex<Vec<u8>>>;

    /// Both sides' results, and what the process and the launcher wrote.
    type Handshake = (Result<(), ControlError>, Result<Registration, ControlError>, Vec<u8>, Vec<u8>);

    /// Runs both sides over a socket pair.
    fn handshake(launcher_key: JobKey, process_key: JobKey) -> Handshake {
        let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        let (wa, wb): (Written, Written) = Default::default();
        let mut l = Rec { inner: a, written: wa.clone() };
        let server = std::thread::spawn(move || accept(&mut l, &launcher_key, 4));
        let mut p = Rec { inner: b, written: wb.clone() };
        let client = register(&mut p, &process_key, &reg());
        drop(p);
        let accepted = server.join().unwrap();
        let (pw, lw) = (wb.lock().unwrap().clone(), wa.lock().unwrap().clone());
        (client, accepted, pw, lw)
    }

    #[test]
    fn registration_proves_the_key_without_sending_it() {
        let key = JobKey::from_bytes([0x5a; 32]);
        let (client, accepted, pw, lw) = handshake(key.clone(), key.clone());
        client.unwrap();
        assert_eq!(accepted.unwrap(), reg());
        for bytes in [&pw, &lw] {
            assert!(!contains(bytes, &[0x5a; 32][..8]), "key bytes on the wire");
            assert!(!contains(bytes, key.to_hex().as_bytes()), "key hex on the wire");
        }
    }

    #[test]
    fn a_wrong_key_is_refused_on_both_sides() {
        let (client, accepted, _, _) = handshake(JobKey::from_bytes([1; 32]), JobKey::from_bytes([2; 32]));
        assert!(matches!(client, Err(ControlError::Refused(_))), "{client:?}");
        assert!(accepted.is_err());
    }

    #[test]
    fn a_replayed_registration_is_refused() {
        let key = JobKey::from_bytes([3; 32]);
        let (client, accepted, pw, _) = handshake(key.clone(), key.clone());
        client.unwrap();
        accepted.unwrap();
        // The same bytes again: the launcher's nonce differs, the proof no longer holds.
        let mut replay = Scripted { input: io::Cursor::new(pw), output: Vec::new() };
        match accept(&mut replay, &key, 4) {
            Err(ControlError::Refused(why)) => assert!(why.contains("does not prove"), "{why}"),
            other => panic!("replay accepted: {other:?}"),
        }
    }

    #[test]
    fn a_registration_for_another_slot_or_without_hello_is_refused() {
        let key = JobKey::from_bytes([3; 32]);
        let mut s = Scripted {
            input: io::Cursor::new(encode(&Control::Hello { rank: 9, nonce: [0; 32], version: CONTROL_VERSION })),
            output: vec![],
        };
        assert!(matches!(accept(&mut s, &key, 4), Err(ControlError::Refused(_))));
        let bare = |rank| Control::Register {
            rank,
            data_addr: String::new(),
            pid: 1,
            fd_addr: String::new(),
            tolerant: false,
            proof: [0; 32],
        };
        let mut s = Scripted { input: io::Cursor::new(encode(&bare(1))), output: vec![] };
        assert!(matches!(accept(&mut s, &key, 4), Err(ControlError::Refused(_))));
        let mut input = encode(&Control::Hello { rank: 1, nonce: [0; 32], version: CONTROL_VERSION });
        input.extend(encode(&bare(2)));
        let mut s = Scripted { input: io::Cursor::new(input), output: vec![] };
        assert!(matches!(accept(&mut s, &key, 4), Err(ControlError::Refused(_))));
    }

    #[test]
    fn a_process_speaking_another_control_version_is_told_and_refused() {
        let key = JobKey::from_bytes([3; 32]);
        let hello = Control::Hello { rank: 0, nonce: [0; 32], version: CONTROL_VERSION + 1 };
        let mut s = Scripted { input: io::Cursor::new(encode(&hello)), output: vec![] };
        match accept(&mut s, &key, 4) {
            Err(ControlError::Refused(why)) => assert!(why.contains("control protocol"), "{why}"),
            other => panic!("accepted: {other:?}"),
        }
        // The process is told why, in a record it understands.
        match read_msg(&mut &s.output[..]) {
            Ok(Some(Control::Stop { reason })) => assert!(reason.contains("same p2pmpi version"), "{reason}"),
            other => panic!("no Stop: {other:?}"),
        }
        // A first record that does not decode (an older Hello, cut short) says what may be wrong.
        let mut short = encode(&Control::Hello { rank: 0, nonce: [0; 32], version: CONTROL_VERSION });
        short.truncate(short.len() - 1);
        let body = (short.len() - 4) as u32;
        short[..4].copy_from_slice(&body.to_le_bytes());
        let mut s = Scripted { input: io::Cursor::new(short), output: vec![] };
        match accept(&mut s, &key, 4) {
            Err(ControlError::Refused(why)) => assert!(why.contains("another p2pmpi version"), "{why}"),
            other => panic!("accepted: {other:?}"),
        }
    }

    proptest! {
        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let mut r = &bytes[..];
            for _ in 0..4 {
                if !matches!(read_msg(&mut r), Ok(Some(_))) { break; }
            }
            let mut s = Scripted { input: io::Cursor::new(bytes.clone()), output: vec![] };
            let _ = accept(&mut s, &JobKey::from_bytes([0; 32]), 4);
            let mut s = Scripted { input: io::Cursor::new(bytes), output: vec![] };
            let _ = register(&mut s, &JobKey::from_bytes([0; 32]), &reg());
        }
    }
}
