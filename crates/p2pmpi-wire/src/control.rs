//! Control plane between an MPI process and its launcher (the local `p2pmpirun`, or a peer's
//! MPD): length-prefixed `postcard` records.
//!
//! Frame: 4-byte little-endian length `n` (at most [`MAX_CONTROL_LEN`]), then `n` bytes of a
//! postcard-encoded [`Control`].

use serde::{Deserialize, Serialize};
use std::io::{self, Read, Write};
use thiserror::Error;

/// Largest control record accepted.
pub const MAX_CONTROL_LEN: u32 = 16 << 20;

/// One control record. Processes send `Register`, `Finalized`, `Abort`, `PeerFailed` and
/// `Renew`; the launcher answers with `World`, `Lease` and `Excluded`, and may send `Dead` and
/// `Stop`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Control {
    /// A process announces itself: its rank, the address of its data port, its pid, the
    /// job's secret token (proves it was started by this launcher), the address of its
    /// failure detector (UDP; empty if none) and whether the program handles failures itself
    /// (`tolerant`: the launcher then lets the job go on when a process dies).
    Register { rank: u32, data_addr: String, pid: u32, token: u64, fd_addr: String, tolerant: bool },
    /// The communicator built at the root: rank → data address, for every rank, with the
    /// failure detector's set-up for this process (`None`: no detector) and, in a replicated
    /// job, the length of the leases the process must hold to send (µs; 0: no fencing).
    World { addrs: Vec<String>, fd: Option<FdSetup>, lease_us: u64 },
    /// The process finalized cleanly.
    Finalized { rank: u32 },
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
    Ok(Some(postcard::from_bytes(&body)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn roundtrip_all_variants() {
        let msgs = vec![
            Control::Register {
                rank: 3,
                data_addr: "127.0.0.1:4000".into(),
                pid: 77,
                token: 9,
                fd_addr: "127.0.0.1:4001".into(),
                tolerant: true,
            },
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
                }),
            },
            Control::PeerFailed { rank: 1, failed: 2, detail: "silent".into() },
            Control::Finalized { rank: 1 },
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

    proptest! {
        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let mut r = &bytes[..];
            for _ in 0..4 {
                if !matches!(read_msg(&mut r), Ok(Some(_))) { break; }
            }
        }
    }
}
