//! The FT service's checkpoints (issue 41) over real TCP on 127.0.0.1: access granted with a
//! ticket, keyed connections of a job's processes, chunks checked, the quota, malformed and
//! out-of-place requests refused.
#![forbid(unsafe_code)]

mod common;

use common::Tmp;
use p2pmpi_peer::ft::{self, FtContext};
use p2pmpi_wire::grid::{CkptRequest, CkptResponse, FtRequest, FtResponse, Ticket};
use p2pmpi_wire::secure::{GridSecret, SecureConn};
use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::time::Duration;

const TICKET: Ticket = Ticket(0xfeed);
const JOB: &str = "00c0ffee";
const T: Duration = Duration::from_secs(10);
const KEY: [u8; 32] = [9; 32];

fn secret() -> GridSecret {
    GridSecret::from_phrase("ft checkpoint test grid")
}

fn server(quota: u64) -> (SocketAddr, Tmp) {
    let root = Tmp::new("ft-ckpt");
    let mut ctx = FtContext::new(root.0.join("cache"), root.0.join("jobs"), secret(), |t, _| t == TICKET);
    ctx.ckpt_max = quota;
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    ft::serve(l, Arc::new(ctx));
    (addr, root)
}

fn grant(addr: SocketAddr, ticket: Ticket, job: &str) -> FtResponse {
    let mut c = SecureConn::connect(addr, &secret(), T).unwrap();
    c.call(&FtRequest::CheckpointGrant { ticket, job: job.into(), key: KEY }).unwrap()
}

fn keyed(addr: SocketAddr, job: &str, key: [u8; 32]) -> Result<SecureConn, String> {
    let mut c = SecureConn::connect_keyed(None, addr, job, &GridSecret::keyed(&key), T).map_err(|e| e.to_string())?;
    // The server proves nothing to a client before its first answer: ask something.
    match c.call::<_, CkptResponse>(&CkptRequest::List) {
        Ok(CkptResponse::Manifests(_)) => Ok(c),
        other => Err(format!("{other:?}")),
    }
}

fn put(generation: u64, rank: u32, index: u32, last: bool, data: &[u8]) -> CkptRequest {
    let hash = *blake3::hash(data).as_bytes();
    CkptRequest::Put { generation, rank, index, last, hash, data: data.to_vec() }
}

const MANIFEST: &str = "p2pmpi checkpoint 1\ngeneration 1\n";

#[test]
fn a_granted_job_stores_reads_and_deletes_its_pieces() {
    let (addr, root) = server(1 << 20);
    assert!(keyed(addr, JOB, KEY).is_err(), "no access before the grant");
    assert!(matches!(grant(addr, Ticket(1), JOB), FtResponse::Error(_)), "a ticket of no reservation");
    assert!(matches!(grant(addr, TICKET, "../evil"), FtResponse::Error(_)), "a job id that escapes");
    assert_eq!(grant(addr, TICKET, JOB), FtResponse::Granted);
    assert!(keyed(addr, JOB, [1; 32]).is_err(), "another key");
    let mut c = keyed(addr, JOB, KEY).unwrap();
    assert_eq!(c.call::<_, CkptResponse>(&put(1, 0, 0, false, b"first ")).unwrap(), CkptResponse::Ok);
    assert_eq!(c.call::<_, CkptResponse>(&put(1, 0, 1, true, b"second")).unwrap(), CkptResponse::Ok);
    let stored = root.0.join("checkpoints").join(JOB).join("gen-1").join("rank-0.ckpt");
    assert!(stored.exists());
    let commit = CkptRequest::Commit { generation: 1, manifest: MANIFEST.into() };
    assert_eq!(c.call::<_, CkptResponse>(&commit).unwrap(), CkptResponse::Ok);
    assert_eq!(c.call::<_, CkptResponse>(&CkptRequest::List).unwrap(), CkptResponse::Manifests(vec![MANIFEST.into()]));
    // Read back: the chunks as stored, then an empty last one.
    c.send(&CkptRequest::Get { generation: 1, rank: 0 }).unwrap();
    let mut got = Vec::new();
    loop {
        match c.recv::<CkptResponse>().unwrap().unwrap() {
            CkptResponse::Chunk { last: true, .. } => break,
            CkptResponse::Chunk { hash, data, .. } => {
                assert_eq!(&hash, blake3::hash(&data).as_bytes());
                got.extend(data);
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(got, b"first second");
    // A put older than the last complete generation is not kept.
    let g2 = CkptRequest::Commit { generation: 2, manifest: MANIFEST.into() };
    assert_eq!(c.call::<_, CkptResponse>(&g2).unwrap(), CkptResponse::Ok);
    assert_eq!(c.call::<_, CkptResponse>(&put(1, 1, 0, true, b"late")).unwrap(), CkptResponse::Stale);
    assert_eq!(c.call::<_, CkptResponse>(&CkptRequest::Delete { below: 2 }).unwrap(), CkptResponse::Ok);
    assert!(!stored.exists(), "generation 1 deleted");
    assert_eq!(c.call::<_, CkptResponse>(&CkptRequest::Delete { below: u64::MAX }).unwrap(), CkptResponse::Ok);
    assert!(!root.0.join("checkpoints").join(JOB).exists(), "the job's checkpoints and access are gone");
}

#[test]
fn bad_chunks_and_the_quota_are_refused_with_their_reason() {
    let (addr, root) = server(1000);
    assert_eq!(grant(addr, TICKET, JOB), FtResponse::Granted);
    let mut c = keyed(addr, JOB, KEY).unwrap();
    let mut bad = put(1, 0, 0, true, b"data");
    if let CkptRequest::Put { data, .. } = &mut bad {
        data[0] ^= 1;
    }
    match c.call::<_, CkptResponse>(&bad).unwrap() {
        CkptResponse::Error(e) => assert!(e.contains("hash does not match"), "{e}"),
        other => panic!("{other:?}"),
    }
    match c.call::<_, CkptResponse>(&put(1, 0, 3, true, b"data")).unwrap() {
        CkptResponse::Error(e) => assert!(e.contains("out of order"), "{e}"),
        other => panic!("{other:?}"),
    }
    let bad_manifest = CkptRequest::Commit { generation: 1, manifest: "not a manifest".into() };
    assert!(matches!(c.call::<_, CkptResponse>(&bad_manifest).unwrap(), CkptResponse::Error(_)));
    // 600 bytes fit, 600 more do not: refused naming the key, the partial piece removed.
    assert_eq!(c.call::<_, CkptResponse>(&put(1, 0, 0, true, &[7; 600])).unwrap(), CkptResponse::Ok);
    match c.call::<_, CkptResponse>(&put(1, 1, 0, false, &[8; 600])).unwrap() {
        CkptResponse::Error(e) => assert!(e.contains("quota exceeded") && e.contains("CHECKPOINT_MAX = 1000"), "{e}"),
        other => panic!("{other:?}"),
    }
    let gen1 = root.0.join("checkpoints").join(JOB).join("gen-1");
    let names: Vec<String> =
        std::fs::read_dir(&gen1).unwrap().flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    assert_eq!(names, vec!["rank-0.ckpt".to_string()], "no partial piece left");
}
