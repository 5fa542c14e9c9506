//! Messages of the grid's control plane: supernode, MPD, RS and FT services.
//!
//! Each service listens on its own port and speaks request/answer records over a
//! [`crate::secure::SecureConn`]. A connection may carry several requests in a row; a service
//! answers each in order and closes the connection on anything it cannot decode.
//!
//! Peers are named by their [`PeerId`]: the advertised IP address and the MPD port.

use crate::identity::{Certificate, Revocation};
use serde::{Deserialize, Serialize};
use std::fmt;

/// A peer's identity on the grid: advertised IP and MPD port.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct PeerId {
    pub ip: String,
    pub mpd_port: u16,
}

impl fmt::Display for PeerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.ip, self.mpd_port)
    }
}

/// What a peer tells the supernode about itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerInfo {
    pub id: PeerId,
    pub rs_port: u16,
    pub ft_port: u16,
    pub fd_port: u16,
    /// `MAX_PROCESSES_PER_JOB` of this peer.
    pub capacity: u32,
    /// Host name, for humans.
    pub name: String,
}

/// One line of the supernode's host list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostEntry {
    pub info: PeerInfo,
    /// Milliseconds since the supernode last heard from this peer.
    pub last_seen_ms: u64,
}

/// Requests to a supernode.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum SnRequest {
    /// A peer joins (or re-joins): add or refresh it.
    Register(PeerInfo),
    /// A peer halts: remove it.
    Unregister(PeerId),
    /// A peer is alive (the keep-alive signal).
    Alive(PeerId),
    /// The host list.
    List,
    /// Stop the supernode (`stopSupernode`).
    Stop,
    /// Attach this connection to the JEL registry the supernode hosts (SPEC §14): from now
    /// on it carries the pool's records ([`JelRecord`]), no more supernode requests.
    Jel(JelHello),
    /// A rendezvous for the distributed JEL implementation: the last members of `pool` that
    /// asked (answered by [`SnResponse::JelSeeds`]); `addr`, where the asker listens, is
    /// added to them.
    JelSeeds { pool: String, addr: Option<std::net::SocketAddr> },
    /// (supernode → supernode) this connection carries the Raft messages of the JEL
    /// registry replicated among the grid's supernodes, from the supernode whose Raft id is
    /// `from` (its place in `SUPERNODE`, from 1): each record after this one is one message
    /// (`Vec<u8>`, raft-rs's protobuf encoding), one way, no answer.
    Raft { from: u64 },
    /// (the owner's `p2pmpi grid revoke`) record this revocation, signed by the grid's owner,
    /// in the supernodes' registry. Answered `Ok` once it is committed (with several
    /// supernodes: replicated to a majority), else `Error` (a forged one, or a supernode that
    /// does not lead the replicated registry: ask another).
    Revoke(Revocation),
    /// The revocations the registry holds (every daemon polls this): answered by
    /// [`SnResponse::Revoked`].
    Revoked,
    /// (a member's daemon) its certificate is due for renewal: the supernode keeps the
    /// request for the owner's daemon, and answers [`SnResponse::Renewal`] with the renewed
    /// certificate once the owner signed it.
    Renew(Certificate),
    /// (the owner's daemon) the renewals asked for: answered by [`SnResponse::Renewals`].
    RenewalsAsked,
    /// (the owner's daemon) certificates it renewed, for their members to fetch.
    Renewed(Vec<Certificate>),
}

/// The opening record of a JEL connection (SPEC §14): to a registry (inside
/// [`SnRequest::Jel`]) or to another member of the pool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JelHello {
    /// The pool's name.
    pub pool: String,
    /// Where the sender listens (its identity in the JEL cores); for a command that only
    /// asks, its connection's local address.
    pub addr: std::net::SocketAddr,
    /// To a registry: the parameters of the pool, used if this hello creates it (a pool
    /// that exists must have the same dissemination strategy).
    pub config: Option<p2pmpi_core::jel::central::Config>,
}

/// What follows a [`JelHello`] on a JEL connection.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum JelRecord {
    /// (registry → member) the answer to the hello: attached, or why not.
    Attached(Result<(), String>),
    /// One message of a JEL core, in the core's own encoding
    /// (`p2pmpi_core::jel::central::encode` or `…::distributed::encode`).
    Msg(Vec<u8>),
    /// (registry → member) the last record before the registry closes the connection: why
    /// (the member was declared dead).
    Closed(String),
    /// (registry → member) the answer to the hello of a supernode that does not lead the
    /// replicated registry: the leader's address if it knows one (ask there), else none
    /// (an election is under way: ask again).
    NotLeader(Option<std::net::SocketAddr>),
}

/// Answers of a supernode.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum SnResponse {
    Ok,
    /// `Alive` from a peer the supernode does not know (it expired): register again.
    UnknownPeer,
    Hosts(Vec<HostEntry>),
    Error(String),
    /// Members of a distributed JEL pool to bootstrap from (most recent first).
    JelSeeds(Vec<std::net::SocketAddr>),
    /// The revocations of the grid's members (each signed by the owner: check it), and the
    /// hosts (as registered here) whose members are revoked.
    Revoked {
        entries: Vec<Revocation>,
        hosts: Vec<PeerId>,
    },
    /// The answer to `Renew`: the renewed certificate, once the owner signed it.
    Renewal(Option<Certificate>),
    /// The answer to `RenewalsAsked`: certificates to renew.
    Renewals(Vec<Certificate>),
}

/// A reservation ticket: unique key created by the submitter's RS.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Ticket(pub u128);

impl fmt::Display for Ticket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

/// Requests to a reservation service (RS).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum RsRequest {
    /// Book this host for a job (`app` is the program name, for `mpistat` and logs).
    Reserve { ticket: Ticket, app: String, submitter: String },
    /// Release a reservation that will not be used.
    Cancel { ticket: Ticket },
}

/// Answers of a reservation service.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum RsResponse {
    /// Accepted: this host runs up to `p` processes of the job; the reservation lapses after
    /// `expires_ms` unless a launch claims it.
    Ok {
        p: u32,
        expires_ms: u64,
    },
    /// Refused, with the reason (MAX_JOBS reached, host denied, …).
    Nok {
        reason: String,
    },
    Cancelled,
}

/// Where a staged file comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum FileSource {
    /// Sent by the submitter: content hash (BLAKE3) and size.
    Inline { hash: [u8; 32], size: u64 },
    /// Fetched by the peer itself (SPEC §6 mode 2).
    Url(String),
}

/// A file to stage into a job's directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileMeta {
    /// Relative path inside the job directory (checked: no `..`, not absolute).
    pub name: String,
    pub source: FileSource,
    pub executable: bool,
}

/// Requests to a file-transfer service (FT).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum FtRequest {
    /// Opens staging for a reserved job: the files it needs.
    Offer { ticket: Ticket, job: String, files: Vec<FileMeta> },
    /// Content of file `index` of the offer (in order, in chunks).
    Chunk { index: u32, data: Vec<u8> },
    /// All needed content was sent: verify and install.
    Done,
    /// Grants access to the job's checkpoints kept on this peer (issue 41): the connections
    /// that open with the job's id and this key ([`crate::secure::SecureConn::connect_keyed`])
    /// may store and read them ([`CkptRequest`]). Sent by the job's submitter, with a ticket of
    /// its reservation here.
    CheckpointGrant { ticket: Ticket, job: String, key: [u8; 32] },
}

/// Answers of a file-transfer service.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum FtResponse {
    /// The files (indices into the offer) whose content must be sent; the others were in the
    /// peer's cache.
    Need(Vec<u32>),
    /// Every file is in place in the job directory.
    Staged {
        cached: u32,
        received: u32,
        fetched: u32,
    },
    Error(String),
    /// The checkpoint grant is recorded.
    Granted,
}

/// Requests of a job's process to the FT service that keeps its checkpoints, on a connection
/// opened with the job's checkpoint key (the job is the connection's). A piece is sent in
/// chunks (at most [`CKPT_CHUNK`] bytes of data each), each with the BLAKE3 hash of its data.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum CkptRequest {
    /// Chunk `index` of rank `rank`'s piece of `generation`; `last` ends the piece, which
    /// then replaces any earlier copy. Answered `Ok`, `Stale` or `Error`.
    Put {
        generation: u64,
        rank: u32,
        index: u32,
        last: bool,
        hash: [u8; 32],
        #[serde(with = "whole_bytes")]
        data: Vec<u8>,
    },
    /// The manifest of `generation`, written last: the generation is complete here.
    Commit { generation: u64, manifest: String },
    /// The manifests of the complete generations kept here.
    List,
    /// Rank `rank`'s piece of `generation`: answered by its chunks, in order.
    Get { generation: u64, rank: u32 },
    /// Deletes every generation below `below` (`u64::MAX`: the job's checkpoints and access).
    Delete { below: u64 },
}

/// A chunk's bytes written and read as one run: postcard encodes them exactly as a `Vec<u8>`
/// (a varint length, then the bytes), without going through them one by one.
mod whole_bytes {
    use serde::{de, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(v)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        struct Whole;
        impl<'de> de::Visitor<'de> for Whole {
            type Value = Vec<u8>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("bytes")
            }
            fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<Vec<u8>, E> {
                Ok(v.to_vec())
            }
            fn visit_byte_buf<E: de::Error>(self, v: Vec<u8>) -> Result<Vec<u8>, E> {
                Ok(v)
            }
        }
        d.deserialize_byte_buf(Whole)
    }
}

/// Largest data of one checkpoint chunk.
pub const CKPT_CHUNK: usize = 1 << 20;

/// Answers of the FT service to [`CkptRequest`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum CkptResponse {
    Ok,
    /// A later generation is complete here already: this one is not kept.
    Stale,
    /// The manifests of `List` (their text).
    Manifests(Vec<String>),
    /// A chunk of `Get`, as it was stored.
    Chunk {
        hash: [u8; 32],
        #[serde(with = "whole_bytes")]
        data: Vec<u8>,
        last: bool,
    },
    Error(String),
}

/// What a remote MPD must start for a job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchSpec {
    pub ticket: Ticket,
    /// Job identifier (hex, also the name of the job directory).
    pub job: String,
    /// Program name shown by `mpistat`.
    pub app: String,
    /// The program, a file staged in the job directory.
    pub program: String,
    pub args: Vec<String>,
    /// MPI ranks to start here.
    pub ranks: Vec<u32>,
    pub size: u32,
    /// Root's control address (the communicator is built there).
    pub root: String,
    /// The job's key ([`crate::auth`]), which the processes prove to the root and to each
    /// other. It travels only inside the Noise session of the launch request, and reaches the
    /// processes in their environment.
    pub job_key: crate::auth::JobKey,
    /// Extra environment for the processes (`p2pmpirun -x`, and the launcher's own).
    pub env: Vec<(String, String)>,
    /// `p2pmpirun --collect`: patterns (relative to the job directory, `*` and `?` within a
    /// name, `**` for any depth) of files the processes wrote, sent back to the submitter as
    /// [`JobEvent::Collected`] once every process here ended, before the job directory is
    /// removed.
    pub collect: Vec<String>,
}

/// One running MPI process, as `mpistat` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppProcess {
    pub app: String,
    pub job: String,
    /// The process's slot: rank k's replica j is slot k·R + j (with R = `replicas`).
    pub rank: u32,
    /// Replicas per rank of its job (1: no replication).
    pub replicas: u32,
    pub pid: u32,
    /// Root process address (the submitter's control port).
    pub root: String,
}

/// A cached host as `mpihost` shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CachedHost {
    pub info: PeerInfo,
    /// Last measured application-level round-trip time, in microseconds.
    pub rtt_us: Option<u64>,
    pub alive: bool,
    /// Milliseconds since the entry was last updated.
    pub updated_ms: u64,
}

/// A host chosen for a job, as the MPD returns it to the submitter.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placement {
    pub info: PeerInfo,
    pub ranks: Vec<u32>,
}

/// Requests to an MPD.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum MpdRequest {
    /// Application-level ping for latency measurement.
    Ping,
    /// The cached host list (`mpihost`).
    Hosts,
    /// Applications running here (`mpistat`).
    Stat,
    /// Stop the daemon (`mpihalt`; accepted from this host only).
    Halt,
    /// From the local submitter: discover and reserve hosts for n×r processes, placed by
    /// `strategy`, retrying up to `wait_ms`, never on the hosts of `exclude` (the submitter
    /// gave up on them: they stopped answering during an earlier start-up). The MPD answers
    /// with `Progress` records, then `Reserved` or `Failed`.
    /// With `only` not empty (`p2pmpirun -H`/`--hostfile`), only those hosts (addresses or
    /// host names) may be reserved besides this one, which runs rank 0.
    Reserve { n: u32, r: u32, strategy: String, wait_ms: u64, app: String, exclude: Vec<PeerId>, only: Vec<String> },
    /// From the local submitter: give back reservations (unused, or a job that ended).
    Release { ticket: Ticket, peers: Vec<PeerInfo> },
    /// Start processes for a job; the connection then carries [`JobEvent`]s until every
    /// process ended, and the submitter may send [`JobControl`]s.
    Launch(LaunchSpec),
    /// The submitter announces a process it started itself here (rank 0), for `mpistat`.
    Announce(AppProcess),
    /// The announced process ended.
    Retire { job: String, rank: u32 },
    /// What this host is and does now, for the grid's views (`p2pmpi grid status`).
    Report,
    /// From the local submitter: what happened to its job (placement, failures, takeovers,
    /// fenced processes), kept by the MPD in a bounded recent list per job and shown in its
    /// [`HostReport::history`] (`p2pmpi grid status`, `p2pmpi monitor`).
    JobNotices { job: String, app: String, notices: Vec<JobNotice> },
}

/// What a job's launcher noticed about one of its processes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum JobNoticeKind {
    /// The process was placed (and started) on `host`.
    Placed,
    /// The job's supervisor declared the process dead (its detector's verdict, or its end).
    Failed,
    /// The process became its rank's master (the replica whose output is shown) after the
    /// master before it was declared dead.
    Takeover,
    /// The process was heard from after it was declared dead: it was fenced (told it is
    /// out, and stopped).
    Fenced,
    /// The job ended (`rank`/`replica` 0; `detail` says how).
    Ended,
}

/// One event of a job, as its launcher reports it to the local MPD.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobNotice {
    /// When (milliseconds since the Unix epoch, by the launcher's clock).
    pub at_ms: u64,
    pub kind: JobNoticeKind,
    pub rank: u32,
    pub replica: u32,
    /// Where the process runs (an address, or empty when unknown).
    pub host: String,
    /// How, in words (the failure's cause, who detected it, ...).
    pub detail: String,
}

/// The recent events of one job (the MPD of its submitter keeps them).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobHistory {
    pub job: String,
    pub app: String,
    /// Oldest first; bounded (the oldest are dropped).
    pub notices: Vec<JobNotice>,
}

/// A host's report (`MpdRequest::Report`): what it is, what it lends and how busy it is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostReport {
    pub me: PeerId,
    /// Host name.
    pub name: String,
    /// Operating system and kernel release (`Linux 6.1.0`).
    pub os: String,
    pub cpus: u32,
    /// Load average over the last minute.
    pub load1: f32,
    pub mem_total_kb: u64,
    pub mem_available_kb: u64,
    /// `MAX_JOBS` (0: unlimited) and `MAX_PROCESSES_PER_JOB`.
    pub max_jobs: u32,
    pub max_procs: u32,
    /// Jobs running here now (reservations claimed by a launch).
    pub jobs: u32,
    /// The MPI processes running here.
    pub apps: Vec<AppProcess>,
    pub version: String,
    /// Recent events of the jobs submitted from here ([`MpdRequest::JobNotices`]).
    pub history: Vec<JobHistory>,
}

/// Answers of an MPD.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum MpdResponse {
    Pong,
    Hosts {
        me: PeerId,
        hosts: Vec<CachedHost>,
    },
    Stat {
        me: PeerId,
        version: String,
        apps: Vec<AppProcess>,
    },
    Halting,
    Ok,
    /// Reservation progress: hosts that accepted so far, out of those needed.
    Progress {
        accepted: u32,
        needed: u32,
        asked: u32,
    },
    /// Reservation done: the hosts kept, with their ranks (first: this host, with rank 0).
    Reserved {
        ticket: Ticket,
        placements: Vec<Placement>,
    },
    Failed(String),
    /// Reservation: every host known was asked and the grid cannot give what the job needs:
    /// `hosts` hosts accepted, together able to run `slots` processes, against `needed`. The
    /// MPD keeps asking (new peers may join) for `left_ms` more.
    Short {
        hosts: u32,
        slots: u32,
        needed: u32,
        left_ms: u64,
    },
    /// The answer to `Report`.
    Report(HostReport),
}

/// Events of a launched job, from the remote MPD to the submitter.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum JobEvent {
    /// Launch refused (wrong ticket, program missing, …).
    Refused(String),
    Started {
        rank: u32,
        pid: u32,
    },
    /// Output of a process: whole lines (or the last partial line at its exit).
    Output {
        rank: u32,
        stderr: bool,
        data: Vec<u8>,
    },
    /// A process ended: exit code, or the signal that killed it.
    Exited {
        rank: u32,
        code: Option<i32>,
        signal: Option<i32>,
    },
    /// A file collected from the job directory (`LaunchSpec::collect`), in chunks: `name` is
    /// its path relative to the job directory, `data` the next chunk, `last` ends the file.
    /// Sent after every process here ended.
    Collected {
        name: String,
        data: Vec<u8>,
        last: bool,
    },
    /// A file that matched a `collect` pattern but could not be sent (why).
    NotCollected {
        name: String,
        why: String,
    },
}

/// Orders from the submitter to a remote MPD about a launched job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum JobControl {
    /// Send a signal to every process of the job here.
    Signal(i32),
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn records_roundtrip() {
        let id = PeerId { ip: "127.0.0.2".into(), mpd_port: 9897 };
        let info = PeerInfo { id: id.clone(), rs_port: 1, ft_port: 2, fd_port: 3, capacity: 4, name: "h".into() };
        let m = MpdRequest::Launch(LaunchSpec {
            ticket: Ticket(u128::MAX - 3),
            job: "ab".into(),
            app: "pi".into(),
            program: "pi".into(),
            args: vec!["-x".into()],
            ranks: vec![1, 2],
            size: 3,
            root: "127.0.0.1:1".into(),
            job_key: crate::auth::JobKey::from_bytes([5; 32]),
            env: vec![("FOO".into(), "bar".into())],
            collect: vec!["out/*.txt".into()],
        });
        let b = postcard::to_allocvec(&m).unwrap();
        assert_eq!(postcard::from_bytes::<MpdRequest>(&b).unwrap(), m);
        let s = SnResponse::Hosts(vec![HostEntry { info, last_seen_ms: 12 }]);
        let b = postcard::to_allocvec(&s).unwrap();
        assert_eq!(postcard::from_bytes::<SnResponse>(&b).unwrap(), s);
        assert_eq!(id.to_string(), "127.0.0.2:9897");
    }

    #[test]
    fn job_notices_and_reports_roundtrip_and_truncations_are_refused() {
        let notice = JobNotice {
            at_ms: 1_700_000_000_000,
            kind: JobNoticeKind::Takeover,
            rank: 2,
            replica: 1,
            host: "127.0.0.3".into(),
            detail: "rank 2 replica 0 failed".into(),
        };
        let m = MpdRequest::JobNotices { job: "ab".into(), app: "pi".into(), notices: vec![notice.clone()] };
        let b = postcard::to_allocvec(&m).unwrap();
        assert_eq!(postcard::from_bytes::<MpdRequest>(&b).unwrap(), m);
        for cut in 0..b.len() {
            assert!(postcard::from_bytes::<MpdRequest>(&b[..cut]).is_err(), "cut at {cut}");
        }
        let r = MpdResponse::Report(HostReport {
            me: PeerId { ip: "127.0.0.2".into(), mpd_port: 1 },
            name: "h".into(),
            os: "Linux".into(),
            cpus: 2,
            load1: 0.5,
            mem_total_kb: 10,
            mem_available_kb: 5,
            max_jobs: 0,
            max_procs: 4,
            jobs: 1,
            apps: vec![],
            version: "0".into(),
            history: vec![JobHistory { job: "ab".into(), app: "pi".into(), notices: vec![notice] }],
        });
        let b = postcard::to_allocvec(&r).unwrap();
        assert_eq!(postcard::from_bytes::<MpdResponse>(&b).unwrap(), r);
        // A kind that does not exist.
        let mut bad = postcard::to_allocvec(&JobNoticeKind::Ended).unwrap();
        bad[0] = 200;
        assert!(postcard::from_bytes::<JobNoticeKind>(&bad).is_err());
    }

    #[test]
    fn checkpoint_chunks_encode_their_bytes_as_a_vec_would() {
        let data: Vec<u8> = (0..300u32).map(|i| (i * 7) as u8).collect();
        let put = CkptRequest::Put { generation: 3, rank: 1, index: 2, last: true, hash: [5; 32], data: data.clone() };
        let bytes = postcard::to_allocvec(&put).unwrap();
        let plain = postcard::to_allocvec(&(0u8, 3u64, 1u32, 2u32, true, [5u8; 32], data.clone())).unwrap();
        assert_eq!(bytes, plain);
        assert_eq!(postcard::from_bytes::<CkptRequest>(&bytes).unwrap(), put);
        let chunk = CkptResponse::Chunk { hash: [1; 32], data, last: false };
        let bytes = postcard::to_allocvec(&chunk).unwrap();
        assert_eq!(postcard::from_bytes::<CkptResponse>(&bytes).unwrap(), chunk);
        assert!(postcard::from_bytes::<CkptResponse>(&bytes[..bytes.len() - 2]).is_err(), "cut short");
    }

    proptest! {
        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = postcard::from_bytes::<MpdRequest>(&bytes);
            let _ = postcard::from_bytes::<SnRequest>(&bytes);
            let _ = postcard::from_bytes::<RsRequest>(&bytes);
            let _ = postcard::from_bytes::<FtRequest>(&bytes);
            let _ = postcard::from_bytes::<CkptRequest>(&bytes);
            let _ = postcard::from_bytes::<CkptResponse>(&bytes);
            let _ = postcard::from_bytes::<JobEvent>(&bytes);
            let _ = postcard::from_bytes::<MpdResponse>(&bytes);
            let _ = postcard::from_bytes::<JobNotice>(&bytes);
        }
    }
}
