//! The FT service and client over real TCP on 127.0.0.1.
#![forbid(unsafe_code)]

mod common;

use common::Tmp;
use p2pmpi_peer::ft::{self, FtContext, LocalFile, StageReport};
use p2pmpi_wire::grid::{FileMeta, FileSource, FtRequest, FtResponse, Ticket};
use p2pmpi_wire::secure::{GridSecret, SecureConn};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

const TICKET: Ticket = Ticket(0xfeed);
const JOB: &str = "00c0ffee";
const T: Duration = Duration::from_secs(10);

fn secret() -> GridSecret {
    GridSecret::from_phrase("ft test grid")
}

/// An FT service on its own temp dirs: (address, root dir with cache/ and jobs/).
fn server() -> (SocketAddr, Tmp) {
    let root = Tmp::new("ft-srv");
    server_with(root, |_| {})
}

/// An FT service on `root`, its context adjusted by `set` (quota, fetch limit).
fn server_with(root: Tmp, set: impl FnOnce(&mut FtContext)) -> (SocketAddr, Tmp) {
    let mut ctx = FtContext::new(root.0.join("cache"), root.0.join("jobs"), secret(), |t, _| t == TICKET);
    set(&mut ctx);
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    ft::serve(l, Arc::new(ctx));
    (addr, root)
}

/// A submitter's program and input file.
fn local_files(dir: &Path) -> Vec<LocalFile> {
    std::fs::write(dir.join("prog"), b"#!/bin/sh\necho hello\n").unwrap();
    let big: Vec<u8> = (0..(2 << 20) + 12345).map(|i| (i * 31 % 251) as u8).collect();
    std::fs::write(dir.join("input.dat"), &big).unwrap();
    vec![
        LocalFile::Path { name: "prog".into(), path: dir.join("prog"), executable: true },
        LocalFile::Path { name: "data/input.dat".into(), path: dir.join("input.dat"), executable: false },
    ]
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

fn stage1(addr: SocketAddr, files: &[LocalFile], metas: &[FileMeta]) -> anyhow::Result<StageReport> {
    ft::stage(addr, &secret(), TICKET, JOB, files, metas, T)
}

/// Sends one offer by hand; the service's answer.
fn offer_raw(addr: SocketAddr, job: &str, files: Vec<FileMeta>) -> FtResponse {
    let mut c = SecureConn::connect(addr, &secret(), T).unwrap();
    c.set_read_timeout(Some(T)).unwrap();
    c.call(&FtRequest::Offer { ticket: TICKET, job: job.into(), files }).unwrap()
}

fn inline(name: &str, content: &[u8]) -> FileMeta {
    let source = FileSource::Inline { hash: *blake3::hash(content).as_bytes(), size: content.len() as u64 };
    FileMeta { name: name.into(), source, executable: false }
}

fn names_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|r| r.map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    v.sort();
    v
}

#[test]
fn ft_stages_then_caches() {
    let (addr, root) = server();
    let src = Tmp::new("ft-src");
    let files = local_files(&src.0);
    let metas = ft::describe(&files).unwrap();
    let rep = stage1(addr, &files, &metas).unwrap();
    assert_eq!(rep, StageReport { cached: 0, received: 2, fetched: 0 });
    let job = root.0.join("jobs").join(JOB);
    assert_eq!(std::fs::read(job.join("prog")).unwrap(), std::fs::read(src.0.join("prog")).unwrap());
    assert_eq!(std::fs::read(job.join("data/input.dat")).unwrap(), std::fs::read(src.0.join("input.dat")).unwrap());
    assert_eq!(mode(&job.join("prog")), 0o755);
    assert_eq!(mode(&job.join("data/input.dat")), 0o644);
    assert_eq!(names_in(&root.0.join("cache")).len(), 2, "two cache entries, no temp files");

    // Second time: everything from the cache. The local files are gone, so the client could
    // not have sent any content.
    std::fs::remove_file(src.0.join("prog")).unwrap();
    std::fs::remove_file(src.0.join("input.dat")).unwrap();
    std::fs::remove_dir_all(&job).unwrap();
    let rep = stage1(addr, &files, &metas).unwrap();
    assert_eq!(rep, StageReport { cached: 2, received: 0, fetched: 0 });
    assert_eq!(mode(&job.join("prog")), 0o755);
    assert!(job.join("data/input.dat").is_file());

    ft::remove_job(&root.0.join("jobs"), JOB);
    assert!(!job.exists());
}

#[test]
fn ft_empty_file_and_same_content_twice() {
    let (addr, root) = server();
    let src = Tmp::new("ft-src");
    std::fs::write(src.0.join("empty"), b"").unwrap();
    std::fs::write(src.0.join("a"), b"same").unwrap();
    let files = vec![
        LocalFile::Path { name: "empty".into(), path: src.0.join("empty"), executable: false },
        LocalFile::Path { name: "a".into(), path: src.0.join("a"), executable: false },
        LocalFile::Path { name: "b".into(), path: src.0.join("a"), executable: true },
    ];
    let metas = ft::describe(&files).unwrap();
    let rep = stage1(addr, &files, &metas).unwrap();
    assert_eq!(rep, StageReport { cached: 1, received: 2, fetched: 0 });
    let job = root.0.join("jobs").join(JOB);
    assert_eq!(std::fs::read(job.join("empty")).unwrap(), b"");
    assert_eq!(std::fs::read(job.join("b")).unwrap(), b"same");
    assert_eq!((mode(&job.join("a")), mode(&job.join("b"))), (0o644, 0o755), "modes are not shared");
}

#[test]
fn ft_refuses_a_wrong_ticket_and_a_wrong_secret() {
    let (addr, root) = server();
    let src = Tmp::new("ft-src");
    let files = local_files(&src.0);
    let metas = ft::describe(&files).unwrap();
    let e = ft::stage(addr, &secret(), Ticket(1), JOB, &files, &metas, T).unwrap_err().to_string();
    assert_eq!(e, format!("staging to {addr} failed: the peer refused: unknown reservation ticket"));
    let e = ft::stage(addr, &GridSecret::from_phrase("other"), TICKET, JOB, &files, &metas, T).unwrap_err();
    assert!(e.to_string().starts_with(&format!("staging to {addr} failed")), "{e}");
    assert!(!root.0.join("jobs").join(JOB).exists());
}

#[test]
fn ft_refuses_escaping_names_and_job_ids() {
    let (addr, root) = server();
    for name in ["../x", "/etc/passwd", "a/../../x", "./a", "a\\b", "", "a//b", "a/", "nul\0x"] {
        match offer_raw(addr, JOB, vec![inline(name, b"evil")]) {
            FtResponse::Error(m) => assert!(m.contains("refused file name"), "{name:?}: {m}"),
            other => panic!("{name:?} accepted: {other:?}"),
        }
    }
    for job in ["a/b", "..", "", "ABC", "../00", &"a".repeat(65)] {
        assert!(matches!(offer_raw(addr, job, vec![inline("f", b"x")]), FtResponse::Error(_)), "job {job:?}");
    }
    assert!(names_in(&root.0).is_empty(), "nothing written: {:?}", names_in(&root.0));
    let parent = root.0.parent().unwrap();
    assert!(!parent.join("x").exists());
    let src = Tmp::new("ft-src");
    std::fs::write(src.0.join("f"), b"x").unwrap();
    let bad = [LocalFile::Path { name: "../f".into(), path: src.0.join("f"), executable: false }];
    assert!(ft::describe(&bad).is_err(), "the client refuses too");
}

#[test]
fn ft_safe_join_rules() {
    let d = Path::new("/jobs/abc");
    assert_eq!(ft::safe_join(d, "prog").unwrap(), d.join("prog"));
    assert_eq!(ft::safe_join(d, "in/data.txt").unwrap(), d.join("in").join("data.txt"));
    assert_eq!(ft::safe_join(d, "..foo").unwrap(), d.join("..foo"));
    for bad in ["", "/x", "..", "../x", "a/../../x", "./a", "a/.", "a\\b", "a\0b", "a//b", "a/"] {
        assert!(ft::safe_join(d, bad).is_err(), "{bad:?}");
    }
    assert!(ft::safe_join(d, &"x".repeat(255)).is_ok());
    assert!(ft::safe_join(d, &"x".repeat(256)).is_err());
    assert!(ft::job_dir(Path::new("/jobs"), "0123abcdef").is_ok());
    for bad in ["", "a/b", "..", "G", &"0".repeat(65)] {
        assert!(ft::job_dir(Path::new("/jobs"), bad).is_err(), "{bad:?}");
    }
}

#[test]
fn ft_does_not_follow_symlinks_out_of_the_job_dir() {
    let (addr, root) = server();
    let outside = Tmp::new("ft-outside");
    std::fs::write(outside.0.join("target"), b"precious").unwrap();
    let job = root.0.join("jobs").join(JOB);
    std::fs::create_dir_all(&job).unwrap();
    std::os::unix::fs::symlink(outside.0.join("target"), job.join("evil")).unwrap();
    std::os::unix::fs::symlink(&outside.0, job.join("sub")).unwrap();

    assert!(matches!(offer_raw(addr, JOB, vec![inline("evil", b"new")]), FtResponse::Need(_)));
    let src = Tmp::new("ft-src");
    std::fs::write(src.0.join("f"), b"new").unwrap();
    let files = [LocalFile::Path { name: "evil".into(), path: src.0.join("f"), executable: false }];
    stage1(addr, &files, &ft::describe(&files).unwrap()).unwrap();
    assert_eq!(std::fs::read(outside.0.join("target")).unwrap(), b"precious");
    assert!(!std::fs::symlink_metadata(job.join("evil")).unwrap().file_type().is_symlink());

    let files = [LocalFile::Path { name: "sub/f".into(), path: src.0.join("f"), executable: false }];
    let e = stage1(addr, &files, &ft::describe(&files).unwrap()).unwrap_err().to_string();
    assert!(e.contains("sub/f") && e.contains("not a directory"), "{e}");
    assert_eq!(names_in(&outside.0), vec!["target".to_string()]);
}

#[test]
fn ft_hash_mismatch_installs_nothing() {
    let (addr, root) = server();
    let src = Tmp::new("ft-src");
    let files = local_files(&src.0);
    let metas = ft::describe(&files).unwrap();
    std::fs::write(src.0.join("prog"), b"#!/bin/sh\necho HELLO\n").unwrap(); // same size, other content
    let e = stage1(addr, &files, &metas).unwrap_err().to_string();
    assert!(e.contains("\"prog\"") && e.contains("hash"), "{e}");
    assert!(names_in(&root.0.join("jobs").join(JOB)).is_empty());
    assert!(names_in(&root.0.join("cache")).iter().all(|n| !n.starts_with(".tmp")), "temp files removed");

    std::fs::write(src.0.join("prog"), b"longer than it was described").unwrap();
    let e = stage1(addr, &files, &metas).unwrap_err().to_string();
    assert!(e.contains("\"prog\""), "{e}");
    assert!(names_in(&root.0.join("cache")).iter().all(|n| !n.starts_with(".tmp")), "temp files removed");
}

#[test]
fn ft_survives_garbage_and_silence() {
    let _ = tracing_subscriber::fmt().with_test_writer().try_init();
    let (addr, _root) = server();
    let _silent = TcpStream::connect(addr).unwrap();
    let mut g = TcpStream::connect(addr).unwrap();
    g.write_all(&[0x13; 5000]).unwrap();
    let mut sink = Vec::new();
    g.set_read_timeout(Some(T)).unwrap();
    let _ = g.read_to_end(&mut sink); // the service closes it
                                      // An authenticated connection sending a record that is not a request.
    let mut c = SecureConn::connect(addr, &secret(), T).unwrap();
    c.set_read_timeout(Some(T)).unwrap();
    c.send(&vec![0xffu8; 100]).unwrap();
    assert!(!matches!(c.recv::<FtResponse>(), Ok(Some(FtResponse::Need(_)))));
    // A chunk before any offer.
    let mut c = SecureConn::connect(addr, &secret(), T).unwrap();
    c.set_read_timeout(Some(T)).unwrap();
    let r: FtResponse = c.call(&FtRequest::Chunk { index: 0, data: vec![1] }).unwrap();
    assert!(matches!(r, FtResponse::Error(_)));
    // An oversized record.
    let mut c = SecureConn::connect(addr, &secret(), T).unwrap();
    c.set_read_timeout(Some(T)).unwrap();
    let _ = c.send(&FtRequest::Chunk { index: 0, data: vec![0; 3 << 20] });
    assert!(!matches!(c.recv::<FtResponse>(), Ok(Some(_))));

    let src = Tmp::new("ft-src");
    let files = local_files(&src.0);
    let rep = stage1(addr, &files, &ft::describe(&files).unwrap()).unwrap();
    assert_eq!(rep.received, 2);
}

#[test]
fn ft_a_stalled_connection_is_closed() {
    let root = Tmp::new("ft-stall");
    let ctx = FtContext::new(root.0.join("cache"), root.0.join("jobs"), secret(), |_, _| true);
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let t = std::thread::spawn(move || {
        let (s, _) = l.accept().unwrap();
        let start = Instant::now();
        ft::handle_with_timeout(s, &ctx, Duration::from_millis(300));
        start.elapsed()
    });
    let mut c = SecureConn::connect(addr, &secret(), T).unwrap();
    let r: FtResponse =
        c.call(&FtRequest::Offer { ticket: TICKET, job: JOB.into(), files: vec![inline("f", b"abc")] }).unwrap();
    assert_eq!(r, FtResponse::Need(vec![0]));
    // … and then nothing.
    let took = t.join().unwrap();
    assert!(took < Duration::from_secs(5), "{took:?}");
    assert!(names_in(&root.0.join("cache")).is_empty(), "temp file removed");
}

/// An HTTP/1.1 server answering `body` to every request, with its `Content-Length`.
fn http_server(body: &'static [u8]) -> SocketAddr {
    http_server_with(body.to_vec(), true)
}

/// An HTTP/1.1 server answering `body` to every request; without `announce_length`, the body
/// ends when the connection closes (no `Content-Length`).
fn http_server_with(body: Vec<u8>, announce_length: bool) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            let mut req = Vec::new();
            let mut b = [0u8; 1024];
            while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                match s.read(&mut b) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => req.extend_from_slice(&b[..n]),
                }
            }
            let length = if announce_length { format!("Content-Length: {}\r\n", body.len()) } else { String::new() };
            let head = format!("HTTP/1.1 200 OK\r\n{length}Connection: close\r\n\r\n");
            let _ = s.write_all(head.as_bytes());
            let _ = s.write_all(&body);
        }
    });
    addr
}

#[test]
fn ft_fetches_url_files() {
    let (addr, root) = server();
    let http = http_server(b"fetched content\n");
    let src = Tmp::new("ft-src");
    let mut files = local_files(&src.0);
    files.push(LocalFile::Url {
        name: "in/remote.txt".into(),
        url: format!("http://{http}/remote.txt"),
        executable: true,
    });
    let metas = ft::describe(&files).unwrap();
    let rep = stage1(addr, &files, &metas).unwrap();
    assert_eq!(rep, StageReport { cached: 0, received: 2, fetched: 1 });
    let f = root.0.join("jobs").join(JOB).join("in/remote.txt");
    assert_eq!(std::fs::read(&f).unwrap(), b"fetched content\n");
    assert_eq!(mode(&f), 0o755);

    let files = [LocalFile::Url { name: "x".into(), url: "https://example.org/x".into(), executable: false }];
    let e = stage1(addr, &files, &ft::describe(&files).unwrap()).unwrap_err().to_string();
    assert!(e.contains("only http://"), "{e}");
}

#[test]
fn ft_stage_many_in_target_order() {
    let servers: Vec<(SocketAddr, Tmp)> = (0..3).map(|_| server()).collect();
    let src = Tmp::new("ft-src");
    let files = local_files(&src.0);
    let metas = ft::describe(&files).unwrap();
    let mut targets: Vec<SocketAddr> = servers.iter().map(|s| s.0).collect();
    let dead = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap(); // closed right away
    targets.insert(1, dead);
    let res = ft::stage_many(&targets, 2, &secret(), TICKET, JOB, &files, &metas, T);
    assert_eq!(res.len(), 4);
    assert!(res[1].as_ref().unwrap_err().to_string().starts_with(&format!("staging to {dead} failed")));
    for (i, r) in res.iter().enumerate().filter(|(i, _)| *i != 1) {
        assert_eq!(r.as_ref().unwrap().received, 2, "target {i}");
    }
    for (_, root) in &servers {
        assert!(root.0.join("jobs").join(JOB).join("prog").is_file());
    }
}

/// `FT_FETCH_MAX`: an `http://` input larger than the limit is refused, naming the URL and the
/// limit, whether the server announces its length or not; nothing of it is kept.
#[test]
fn ft_fetch_stops_at_ft_fetch_max() {
    let (addr, root) = server_with(Tmp::new("ft-fetchmax"), |c| c.fetch_max = 1000);
    let file = root.0.join("jobs").join(JOB).join("big.dat");
    for announced in [true, false] {
        let http = http_server_with(vec![b'x'; 5000], announced);
        let url = format!("http://{http}/big.dat");
        let files = [LocalFile::Url { name: "big.dat".into(), url: url.clone(), executable: false }];
        let e = stage1(addr, &files, &ft::describe(&files).unwrap()).unwrap_err().to_string();
        assert!(e.contains(&format!("cannot fetch {url}")), "{e}");
        assert!(e.contains("more than FT_FETCH_MAX (1000 bytes)"), "{e}");
        assert_eq!(e.contains("5000 bytes"), announced, "{e}");
        assert!(!file.exists(), "a partial download is removed");
    }
    // At the limit, the file is fetched.
    let http = http_server_with(vec![b'y'; 1000], false);
    let files = [LocalFile::Url { name: "big.dat".into(), url: format!("http://{http}/big.dat"), executable: false }];
    let rep = stage1(addr, &files, &ft::describe(&files).unwrap()).unwrap();
    assert_eq!(rep.fetched, 1);
    assert_eq!(std::fs::read(&file).unwrap(), vec![b'y'; 1000]);
}

/// 100 000 bytes of content that depend on `seed`, staged as `name`.
fn sized_file(dir: &Path, name: &str, seed: u8) -> (Vec<LocalFile>, String) {
    let content: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8 ^ seed).collect();
    std::fs::write(dir.join(name), &content).unwrap();
    let hash = blake3::hash(&content).to_hex().to_string();
    (vec![LocalFile::Path { name: name.into(), path: dir.join(name), executable: false }], hash)
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

/// `FT_CACHE_MAX`: after a staging, the cache is cut back to its quota by evicting the least
/// recently used entries (a cache hit is a use); the jobs' files are not disturbed.
#[test]
fn ft_cache_keeps_its_quota_evicting_the_least_recently_used() {
    let (addr, root) = server_with(Tmp::new("ft-quota"), |c| c.cache_max = 250_000);
    let cache = root.0.join("cache");
    let src = Tmp::new("ft-src");
    let ((a, ha), (b, hb), (c, hc)) =
        (sized_file(&src.0, "a", 1), sized_file(&src.0, "b", 2), sized_file(&src.0, "c", 3));
    let stage = |f: &[LocalFile]| stage1(addr, f, &ft::describe(f).unwrap()).unwrap();
    assert_eq!(stage(&a).received, 1);
    assert_eq!(stage(&b).received, 1);
    assert_eq!(stage(&a).cached, 1, "a is used again: b is now the least recently used");
    assert_eq!(stage(&c).received, 1);
    assert_eq!(names_in(&cache), sorted(vec![ha.clone(), hc.clone()]), "300 000 bytes > 250 000: b evicted");
    assert_eq!(stage(&b).received, 1, "b was evicted, so it is sent again");
    assert_eq!(names_in(&cache), sorted(vec![hc, hb]), "then a was the least recently used");
    let job = root.0.join("jobs").join(JOB);
    assert_eq!(std::fs::read(job.join("a")).unwrap(), std::fs::read(src.0.join("a")).unwrap());
}

/// An entry that a running staging found in the cache is never evicted before that staging
/// installs it, even when it is the least recently used; afterwards it may go.
#[test]
fn ft_cache_never_evicts_an_entry_a_staging_uses() {
    let (addr, root) = server_with(Tmp::new("ft-inuse"), |c| c.cache_max = 150_000);
    let cache = root.0.join("cache");
    let src = Tmp::new("ft-src");
    let ((a, ha), (b, _), (c, hc)) =
        (sized_file(&src.0, "a", 1), sized_file(&src.0, "b", 2), sized_file(&src.0, "c", 3));
    let stage = |f: &[LocalFile]| stage1(addr, f, &ft::describe(f).unwrap()).unwrap();
    assert_eq!(stage(&a).received, 1);

    // A staging of another job finds a in the cache, and is not finished yet.
    let job2 = "00beef";
    let mut held = SecureConn::connect(addr, &secret(), T).unwrap();
    held.set_read_timeout(Some(T)).unwrap();
    let offer = FtRequest::Offer { ticket: TICKET, job: job2.into(), files: ft::describe(&a).unwrap() };
    assert_eq!(held.call::<_, FtResponse>(&offer).unwrap(), FtResponse::Need(vec![]));

    // b goes over the quota; a is the least recently used but in use: b is evicted instead.
    assert_eq!(stage(&b).received, 1);
    assert_eq!(names_in(&cache), vec![ha.clone()]);

    // The held staging completes from the cache.
    held.send(&FtRequest::Done).unwrap();
    assert_eq!(held.recv::<FtResponse>().unwrap(), Some(FtResponse::Staged { cached: 1, received: 0, fetched: 0 }));
    let staged = root.0.join("jobs").join(job2).join("a");
    assert_eq!(std::fs::read(&staged).unwrap(), std::fs::read(src.0.join("a")).unwrap());

    // No longer in use, a is evicted like any other entry.
    assert_eq!(stage(&c).received, 1);
    assert_eq!(names_in(&cache), vec![hc]);
}

/// When the service starts, temporary files left by a dead daemon are removed and the cache
/// is cut back to its quota, oldest entries first; other files are left alone.
#[test]
fn ft_start_cleans_the_cache() {
    let root = Tmp::new("ft-start");
    let cache = root.0.join("cache");
    std::fs::create_dir_all(&cache).unwrap();
    let entry = |n: u8| {
        let content = vec![n; 100];
        let name = blake3::hash(&content).to_hex().to_string();
        let f = std::fs::File::create(cache.join(&name)).unwrap();
        std::io::Write::write_all(&mut &f, &content).unwrap();
        f.set_modified(std::time::UNIX_EPOCH + Duration::from_secs(1_000_000 + n as u64)).unwrap();
        name
    };
    let (oldest, middle, newest) = (entry(1), entry(2), entry(3));
    // No process has this pid (above Linux's largest, 2^22).
    std::fs::write(cache.join(".tmp-4999999-0123456789abcdef"), b"torn").unwrap();
    let ours = format!(".tmp-{}-0123456789abcdef", std::process::id());
    std::fs::write(cache.join(&ours), b"being received").unwrap();
    std::fs::write(cache.join("notes.txt"), b"not an entry").unwrap();
    let _server = server_with(root, |c| c.cache_max = 250);
    assert!(!names_in(&cache).contains(&oldest));
    let want = sorted(vec![middle, newest, ours, "notes.txt".into()]);
    assert_eq!(names_in(&cache), want);
}
