//! Issue 38, item 5: the FT's quota applies before a transfer, not after it.
//!
//! An offer announces every inline file's size. An offer whose content to receive does not
//! fit `FT_CACHE_MAX` (with what running stagings receive), or whose inline files together
//! exceed `FT_JOB_MAX`, is refused before any byte is written: the cache directory is left
//! exactly as it was, and no entry is evicted for it.
#![forbid(unsafe_code)]

mod common;

use common::Tmp;
use p2pmpi_peer::ft::{self, FtContext, LocalFile};
use p2pmpi_wire::grid::{FileMeta, FileSource, FtRequest, FtResponse, Ticket};
use p2pmpi_wire::secure::{GridSecret, SecureConn};
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

const TICKET: Ticket = Ticket(0xfeed);
const T: Duration = Duration::from_secs(10);

fn secret() -> GridSecret {
    GridSecret::from_phrase("ft limits test grid")
}

fn server_with(root: &Tmp, set: impl FnOnce(&mut FtContext)) -> SocketAddr {
    let mut ctx = FtContext::new(root.0.join("cache"), root.0.join("jobs"), secret(), |t, _| t == TICKET);
    set(&mut ctx);
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    ft::serve(l, Arc::new(ctx));
    addr
}

/// An offer of files announced with `sizes` (content never sent), on a connection kept open.
fn offer(addr: SocketAddr, job: &str, sizes: &[u64]) -> (SecureConn, FtResponse) {
    let files = sizes
        .iter()
        .enumerate()
        .map(|(i, &size)| FileMeta {
            name: format!("f{i}"),
            source: FileSource::Inline { hash: *blake3::hash(&[i as u8, job.len() as u8]).as_bytes(), size },
            executable: false,
        })
        .collect();
    let mut c = SecureConn::connect(addr, &secret(), T).unwrap();
    c.set_read_timeout(Some(T)).unwrap();
    let answer = c.call(&FtRequest::Offer { ticket: TICKET, job: job.into(), files }).unwrap();
    (c, answer)
}

/// The cache directory: (name, size) of every file in it, sorted.
fn listing(dir: &Path) -> Vec<(String, u64)> {
    let mut v: Vec<(String, u64)> = std::fs::read_dir(dir)
        .map(|r| {
            r.map(|e| {
                let e = e.unwrap();
                (e.file_name().to_string_lossy().into_owned(), e.metadata().unwrap().len())
            })
            .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// The case, scaled down: a file twice the cache's quota. Before, the offer was
/// accepted (`Need`), the file written whole to the cache, then every other entry evicted;
/// now it is refused at the offer, and the cache (holding one staged entry) is untouched.
#[test]
fn an_offer_over_the_cache_quota_is_refused_before_anything_is_written() {
    let root = Tmp::new("ftl-quota");
    let addr = server_with(&root, |c| c.cache_max = 1 << 20);
    let cache = root.0.join("cache");
    // One entry already cached, by a real staging.
    let src = Tmp::new("ftl-src");
    std::fs::write(src.0.join("prog"), vec![3u8; 1000]).unwrap();
    let files = vec![LocalFile::Path { name: "prog".into(), path: src.0.join("prog"), executable: false }];
    let report = ft::stage(addr, &secret(), TICKET, "00a1", &files, &ft::describe(&files).unwrap(), T).unwrap();
    assert_eq!(report.received, 1);
    let before = listing(&cache);
    assert_eq!(before.len(), 1);

    let (_c, answer) = offer(addr, "00a2", &[2 << 20]);
    match answer {
        FtResponse::Error(e) => assert!(e.contains("FT_CACHE_MAX") && e.contains(&(2u64 << 20).to_string()), "{e}"),
        other => panic!("an offer twice the quota was accepted: {other:?}"),
    }
    assert_eq!(listing(&cache), before, "the cache changed");
    assert!(!root.0.join("jobs").join("00a2").exists());
    // A file that fits is still staged.
    let (_c, answer) = offer(addr, "00a3", &[1 << 19]);
    assert_eq!(answer, FtResponse::Need(vec![0]));
}

/// Stagings running at once book their content against the quota: two that fit together
/// are accepted, a third that does not is refused, and accepted again once one ended.
#[test]
fn concurrent_offers_share_the_cache_quota() {
    let root = Tmp::new("ftl-book");
    let addr = server_with(&root, |c| c.cache_max = 1000);
    let (first, a) = offer(addr, "00b1", &[400]);
    let (_second, b) = offer(addr, "00b2", &[500]);
    assert_eq!((a, b), (FtResponse::Need(vec![0]), FtResponse::Need(vec![0])));
    let (_third, c) = offer(addr, "00b3", &[200]);
    assert!(matches!(&c, FtResponse::Error(e) if e.contains("900 of them booked")), "{c:?}");
    // The first staging ends (its client gives up): its booking is given back.
    drop(first);
    let deadline = std::time::Instant::now() + T;
    loop {
        let (_c, answer) = offer(addr, "00b4", &[200]);
        if answer == FtResponse::Need(vec![0]) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the booking was never given back: {answer:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `FT_JOB_MAX`: an offer whose inline files together exceed it is refused, even when each
/// one fits, and even when they are all in the cache already.
#[test]
fn an_offer_over_the_job_cap_is_refused() {
    let root = Tmp::new("ftl-job");
    let addr = server_with(&root, |c| c.job_max = 1000);
    let (_c, answer) = offer(addr, "00c1", &[600, 600]);
    assert!(matches!(&answer, FtResponse::Error(e) if e.contains("FT_JOB_MAX") && e.contains("1200")), "{answer:?}");
    assert!(listing(&root.0.join("cache")).is_empty(), "something was written");
    let (_c, answer) = offer(addr, "00c2", &[600, 400]);
    assert_eq!(answer, FtResponse::Need(vec![0, 1]));
    // Sizes that would overflow a sum are refused too.
    let (_c, answer) = offer(addr, "00c3", &[u64::MAX, 2]);
    assert!(matches!(&answer, FtResponse::Error(e) if e.contains("FT_JOB_MAX")), "{answer:?}");
}
