//! The grid monitor (`p2pmpi monitor`): its JSON API and events against a local grid running
//! a replicated job, its token, its TLS on a non-loopback address, an unreachable peer, and
//! its page in a real browser (headless Chromium, driven over the DevTools protocol) seeing a
//! killed replica marked failed.
#![forbid(unsafe_code)]

mod common;

use common::example;
use common::grid::{bin, wait_for, TestGrid, LIMIT};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::channel;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A running monitor: its address, token, URL and output (first lines), killed on drop.
struct Monitor {
    child: Child,
    url: String,
    addr: SocketAddr,
    token: String,
    lines: Vec<String>,
}

impl Drop for Monitor {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `p2pmpi monitor ARGS` for the p2pmpi directory `home`; returns once it printed its
/// first lines (bounded).
fn monitor(home: &Path, args: &[&str], want_lines: usize) -> Monitor {
    let mut child = Command::new(bin("p2pmpi"))
        .arg("monitor")
        .args(args)
        .env("P2PMPI_HOME", home)
        .env_remove("P2PMPI_CONF_FILE")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start the monitor");
    let out = child.stdout.take().unwrap();
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        for l in BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    let mut lines = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while lines.len() < want_lines {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(l) => lines.push(l),
            Err(_) => {
                let _ = child.kill();
                panic!("the monitor printed {lines:?} within 30 s, not {want_lines} lines");
            }
        }
    }
    let url = lines[0].strip_prefix("monitor: ").unwrap_or_else(|| panic!("first line: {:?}", lines[0])).to_string();
    let rest = url.split_once("://").unwrap().1;
    let (hostport, query) = rest.split_once("/?token=").unwrap_or_else(|| panic!("no token in {url}"));
    let port: u16 = hostport.rsplit_once(':').unwrap().1.parse().unwrap();
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    Monitor { child, url: url.clone(), addr, token: query.to_string(), lines }
}

/// A plain HTTP/1.1 GET: (status, body).
fn get(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> (u16, String) {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect to the monitor");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    exchange(&mut s, path, headers)
}

fn exchange(s: &mut (impl Read + Write), path: &str, headers: &[(&str, &str)]) -> (u16, String) {
    let mut req = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    let mut buf = Vec::new();
    // A TLS peer may close without close_notify: what was read counts.
    let _ = s.read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf).into_owned();
    parse_response(&text).unwrap_or_else(|| panic!("not an HTTP response: {text:?}"))
}

fn parse_response(text: &str) -> Option<(u16, String)> {
    let status = text.strip_prefix("HTTP/1.1 ")?.get(..3)?.parse().ok()?;
    let (_, body) = text.split_once("\r\n\r\n")?;
    Some((status, body.to_string()))
}

fn json(body: &str) -> serde_json::Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"))
}

/// Starts `p2pmpirun -n 3 -r 2 fdwatch --hold MS` from peer 1 and waits until it runs.
fn replicated_job(g: &TestGrid, hold_ms: u32) -> common::job::Job {
    let mut cmd = Command::new(bin("p2pmpirun"));
    cmd.args(["-n", "3", "-r", "2"])
        .arg(example("fdwatch"))
        .args(["--hold", &hold_ms.to_string()])
        .env("P2PMPI_HOME", g.home(1))
        .env_remove("P2PMPI_CONF_FILE");
    let job = common::job::Job::spawn(&mut cmd);
    job.ready(3, LIMIT);
    job
}

fn stop_job(job: common::job::Job) {
    common::terminate(job.pid());
    let _ = job.end(LIMIT);
}

/// Waits (at most `limit`) for `f` to find what it wants in `path`'s JSON.
fn wait_api<T>(m: &Monitor, path: &str, limit: Duration, mut f: impl FnMut(&serde_json::Value) -> Option<T>) -> T {
    let deadline = Instant::now() + limit;
    let bearer = format!("Bearer {}", m.token);
    loop {
        let (status, body) = get(m.addr, path, &[("Authorization", &bearer)]);
        assert_eq!(status, 200, "{body}");
        let v = json(&body);
        if let Some(x) = f(&v) {
            return x;
        }
        assert!(Instant::now() < deadline, "{path}: not as expected within {limit:?}: {v:#}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn monitor_serves_the_grid_and_its_replicated_job_to_token_holders_only() {
    let g = TestGrid::start("monitor", 3, &["--procs", "2"]);
    g.wait_hosts(1, 2);
    let m = monitor(&g.home(2), &["--listen", "127.0.0.1:0", "--interval", "300"], 1);
    assert!(m.url.starts_with("http://127.0.0.1:"), "{}", m.url);
    assert_eq!(m.token.len(), 32, "{}", m.url);
    let job = replicated_job(&g, 30_000);

    // The token: none, a wrong one, in the query, as a bearer.
    for path in ["/", "/api/peers", "/api/jobs", "/api/events", "/app.js"] {
        assert_eq!(get(m.addr, path, &[]).0, 401, "{path} without the token");
        assert_eq!(get(m.addr, &format!("{path}?token=0123"), &[]).0, 401, "{path} with a wrong token");
        let wrong = format!("Bearer {}", "f".repeat(32));
        assert_eq!(get(m.addr, path, &[("Authorization", &wrong)]).0, 401, "{path} with a wrong bearer");
    }
    let (status, page) = get(m.addr, &format!("/?token={}", m.token), &[]);
    assert_eq!(status, 200);
    assert!(page.contains("p2pmpi grid monitor") && page.contains("app.js"), "{page}");

    // Every peer, up, with its details.
    let peers = wait_api(&m, "/api/peers", LIMIT, |v| {
        let p = v["peers"].as_array()?.clone();
        (p.len() == 3 && p.iter().all(|p| p["status"] == "up")).then_some(p)
    });
    for p in &peers {
        assert!(p["os"].as_str().unwrap().starts_with("Linux"), "{p}");
        assert!(p["rtt_ms"].as_f64().unwrap() >= 0.0 && p["max_procs"] == 2, "{p}");
        assert_eq!(p["subnet"], "127.0.0.0/24", "{p}");
    }
    // The job: its program, its 6 processes, one master per rank, on different hosts.
    let jobs = wait_api(&m, "/api/jobs", LIMIT, |v| {
        let j = v["jobs"].as_array()?.clone();
        (j.len() == 1 && j[0]["processes"].as_array()?.len() == 6 && j[0]["submitter"].is_string()).then_some(j)
    });
    let j = &jobs[0];
    assert_eq!(j["program"], "fdwatch", "{j}");
    assert_eq!(j["replicas"], 2, "{j}");
    assert_eq!(j["state"], "running", "{j}");
    assert_eq!(j["failures"], 0, "{j}");
    let procs = j["processes"].as_array().unwrap();
    for rank in 0..3u64 {
        let mine: Vec<&serde_json::Value> = procs.iter().filter(|p| p["rank"] == rank).collect();
        assert_eq!(mine.len(), 2, "rank {rank}: {mine:?}");
        assert_ne!(mine[0]["host"], mine[1]["host"], "{mine:?}");
        assert_eq!(mine.iter().filter(|p| p["master"] == true).count(), 1, "{mine:?}");
    }

    // Server-sent events: the grid at once, with the job.
    let mut s = TcpStream::connect(m.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET /api/events?token={} HTTP/1.1\r\nHost: localhost\r\nAccept: text/event-stream\r\n\r\n", m.token)
        .unwrap();
    let mut seen = String::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut buf = [0u8; 16384];
    while !(seen.contains("event: grid") && seen.contains("\"program\":\"fdwatch\"")) {
        assert!(Instant::now() < deadline, "no grid event within 10 s: {seen}");
        let n = s.read(&mut buf).expect("the event stream");
        assert!(n > 0, "the event stream closed: {seen}");
        seen.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    assert!(seen.starts_with("HTTP/1.1 200") && seen.contains("text/event-stream"), "{seen}");

    // Read-only: nothing but GET.
    let mut s2 = TcpStream::connect(m.addr).unwrap();
    s2.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s2,
        "POST /api/peers?token={} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
        m.token
    )
    .unwrap();
    let mut r = String::new();
    let _ = s2.read_to_string(&mut r);
    assert!(r.starts_with("HTTP/1.1 405"), "{r}");

    // A replica killed: failed, and its rank taken over by the other one, in the API and in
    // `p2pmpi grid status`.
    let victim = procs.iter().find(|p| p["rank"] == 2 && p["master"] == true).unwrap().clone();
    common::kill9(victim["pid"].as_u64().unwrap() as u32);
    let j = wait_api(&m, "/api/jobs", Duration::from_secs(10), |v| {
        let j = &v["jobs"][0];
        (j["failures"] == 1 && j["takeovers"] == 1).then(|| j.clone())
    });
    let mine: Vec<&serde_json::Value> = j["processes"].as_array().unwrap().iter().filter(|p| p["rank"] == 2).collect();
    assert!(
        mine.iter().any(|p| p["replica"] == victim["replica"] && p["status"] == "failed" && p["failure"].is_string()),
        "{mine:?}"
    );
    assert!(mine.iter().any(|p| p["replica"] != victim["replica"] && p["master"] == true), "{mine:?}");
    for p in j["processes"].as_array().unwrap() {
        if p["rank"] != 2 || p["replica"] != victim["replica"] {
            assert_eq!(p["status"], "running", "only the killed replica stopped: {p}");
        }
    }
    let kinds: Vec<&str> = j["events"].as_array().unwrap().iter().filter_map(|e| e["kind"].as_str()).collect();
    assert!(kinds.contains(&"failed") && kinds.contains(&"takeover"), "{kinds:?}");
    let text = g.on(3, "p2pmpi", &["grid", "status"]);
    text.assert_ok();
    assert!(text.stdout.contains("FAILED") && text.stdout.contains("1 failure(s), 1 takeover(s)"), "{}", text.stdout);

    // A peer whose daemon stops answering is shown unreachable; the monitor keeps serving.
    let pid3: u32 = json(&std::fs::read_to_string(g.home(3).join("mpd.json")).unwrap())["pid"].as_u64().unwrap() as u32;
    common::freeze(pid3);
    let resume = Resume(pid3);
    let bad = wait_api(&m, "/api/peers", Duration::from_secs(15), |v| {
        let p = v["peers"].as_array()?;
        let bad: Vec<_> = p.iter().filter(|p| p["status"] == "unreachable").cloned().collect();
        (p.len() == 3 && bad.len() == 1).then_some(bad)
    });
    drop(resume);
    assert!(bad[0]["error"].is_string(), "{:?}", bad[0]);
    assert_eq!(get(m.addr, &format!("/api/jobs?token={}", m.token), &[]).0, 200);
    wait_api(&m, "/api/peers", Duration::from_secs(15), |v| {
        v["peers"].as_array()?.iter().all(|p| p["status"] == "up").then_some(())
    });
    stop_job(job);

    // Without replicas, a killed rank ends the job: shown ended, with its failure.
    let mut cmd = Command::new(bin("p2pmpirun"));
    cmd.args(["-n", "2"])
        .arg(example("fdwatch"))
        .args(["--hold", "30000"])
        .env("P2PMPI_HOME", g.home(1))
        .env_remove("P2PMPI_CONF_FILE");
    let job = common::job::Job::spawn(&mut cmd);
    let ready = job.ready(2, LIMIT);
    common::kill9(ready[1].0);
    let _ = job.end(LIMIT);
    let j = wait_api(&m, "/api/jobs", Duration::from_secs(10), |v| {
        v["jobs"].as_array()?.iter().find(|j| j["replicas"] == 1 && j["state"] == "ended").cloned()
    });
    assert_eq!(j["program"], "fdwatch", "{j}");
    assert_eq!(j["failures"], 1, "{j}");
    let failed = j["processes"].as_array().unwrap().iter().find(|p| p["status"] == "failed").cloned().unwrap();
    assert_eq!(failed["rank"], 1, "{j}");
    assert!(failed["failure"].as_str().unwrap().contains("SIGKILL"), "{j}");
}

/// Resumes a stopped process when dropped (also when the test fails meanwhile), checked
/// unless the test already failed.
struct Resume(u32);

impl Drop for Resume {
    fn drop(&mut self) {
        let resumed = common::try_thaw(self.0);
        if !std::thread::panicking() {
            resumed.unwrap_or_else(|e| panic!("{e}"));
        }
    }
}

/// Accepts exactly the certificate whose SHA-256 fingerprint the monitor printed.
#[derive(Debug)]
struct Pinned {
    fingerprint: String,
    provider: Arc<rustls::crypto::CryptoProvider>,
}

impl rustls::client::danger::ServerCertVerifier for Pinned {
    fn verify_server_cert(
        &self,
        end_entity: &rustls::pki_types::CertificateDer<'_>,
        _: &[rustls::pki_types::CertificateDer<'_>],
        _: &rustls::pki_types::ServerName<'_>,
        _: &[u8],
        _: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        use sha2::Digest;
        let fp: Vec<String> = sha2::Sha256::digest(end_entity.as_ref()).iter().map(|b| format!("{b:02X}")).collect();
        if fp.join(":") == self.fingerprint {
            Ok(rustls::client::danger::ServerCertVerified::assertion())
        } else {
            Err(rustls::Error::General("not the pinned certificate".into()))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.provider.signature_verification_algorithms.supported_schemes()
    }
}

fn https_get(addr: SocketAddr, fingerprint: &str, path: &str) -> Result<(u16, String), String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cfg = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(Pinned { fingerprint: fingerprint.to_string(), provider }))
        .with_no_client_auth();
    let conn = rustls::ClientConnection::new(Arc::new(cfg), "localhost".try_into().unwrap()).unwrap();
    let tcp = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    let req = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    tls.write_all(req.as_bytes()).map_err(|e| e.to_string())?;
    let mut buf = Vec::new();
    let r = tls.read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf).into_owned();
    parse_response(&text).ok_or_else(|| format!("{r:?}: {text:?}"))
}

#[test]
fn a_monitor_on_a_network_address_speaks_tls_only_with_the_certificate_it_printed() {
    // No grid needed: the monitor serves (and says no supernode answered).
    let home = std::env::temp_dir().join(format!("p2pmpi-monitor-tls-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&home);
    std::fs::create_dir_all(&home).unwrap();
    let init = Command::new(bin("p2pmpi"))
        .args(["init", "--supernode", "127.0.0.1:1"])
        .env("P2PMPI_HOME", &home)
        .env_remove("P2PMPI_CONF_FILE")
        .output()
        .unwrap();
    assert!(init.status.success(), "{init:?}");
    let m = monitor(&home, &["--listen", "0.0.0.0:0", "--interval", "500"], 2);
    assert!(m.url.starts_with("https://"), "{:?}", m.lines);
    let fp = m.lines[1].rsplit(' ').next().unwrap().to_string();
    assert!(m.lines[1].contains("SHA-256 fingerprint") && fp.len() == 95, "{:?}", m.lines);

    let (status, body) = https_get(m.addr, &fp, &format!("/api/peers?token={}", m.token)).expect("HTTPS");
    assert_eq!(status, 200, "{body}");
    let v = wait_for(|| {
        let (_, body) = https_get(m.addr, &fp, &format!("/api/peers?token={}", m.token)).ok()?;
        let v = json(&body);
        v["error"].is_string().then_some(v)
    });
    assert!(v["error"].as_str().unwrap().contains("no supernode answered"), "{v}");
    let (status, _) = https_get(m.addr, &fp, "/api/peers").expect("HTTPS");
    assert_eq!(status, 401, "no token over TLS either");
    // Another certificate is refused (pinning works), and plain HTTP gets no answer.
    assert!(https_get(m.addr, &["00"; 32].join(":"), "/").is_err(), "another certificate was accepted");
    let mut s = TcpStream::connect(m.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    // (The server may have closed the connection already: the write may fail too.)
    let _ = write!(s, "GET /api/peers?token={} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n", m.token);
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    assert!(!String::from_utf8_lossy(&buf).contains("HTTP/1.1 200"), "plain HTTP answered");

    // runVisu: the page of the monitor running here (no desktop: printed only) ...
    let visu = || {
        Command::new(env!("CARGO_BIN_EXE_runVisu"))
            .env("P2PMPI_HOME", &home)
            .env_remove("P2PMPI_CONF_FILE")
            .env_remove("DISPLAY")
            .env_remove("WAYLAND_DISPLAY")
            .output()
            .unwrap()
    };
    let o = visu();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success() && out.contains(&m.lines[0]) && out.contains(&fp), "{o:?}");
    drop(m);
    // ... else the one VISU_PROXY names, else an error that says what to do.
    let o = visu();
    assert!(!o.status.success() && String::from_utf8_lossy(&o.stderr).contains("VISU_PROXY"), "{o:?}");
    let mut conf = std::fs::OpenOptions::new().append(true).open(home.join("P2P-MPI.conf")).unwrap();
    writeln!(conf, "VISU_PROXY=monitor.example.org").unwrap();
    let o = visu();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success() && out.contains("https://monitor.example.org:9701/"), "{o:?}");
    let _ = std::fs::remove_dir_all(&home);
}

/// Headless Chromium driven over the DevTools protocol (a websocket), closed on drop.
struct Browser {
    child: Child,
    dir: PathBuf,
    ws: tungstenite::WebSocket<TcpStream>,
    next: u64,
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn chromium() -> Option<PathBuf> {
    ["chromium", "chromium-browser"].iter().find_map(|name| {
        std::env::var_os("PATH")?.to_str()?.split(':').map(|d| Path::new(d).join(name)).find(|p| p.is_file())
    })
}

impl Browser {
    fn open(exe: &Path, url: &str) -> Browser {
        let dir = std::env::temp_dir().join(format!("p2pmpi-monitor-chromium-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let child = Command::new(exe)
            .args(["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run"])
            .args(["--remote-debugging-port=0", "--window-size=1280,900", "--hide-scrollbars"])
            .arg(format!("--user-data-dir={}", dir.display()))
            .arg(url)
            // Its singleton socket's directory (`org.chromium.Chromium.*`) too: removed with
            // the profile, not left in /tmp.
            .env("TMPDIR", &dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromium");
        // Chromium writes its DevTools port in the profile directory.
        let port_file = dir.join("DevToolsActivePort");
        let deadline = Instant::now() + Duration::from_secs(60);
        let port: u16 = loop {
            if let Some(p) = std::fs::read_to_string(&port_file).ok().and_then(|t| t.lines().next()?.parse().ok()) {
                break p;
            }
            assert!(Instant::now() < deadline, "chromium did not open its DevTools port within 60 s");
            std::thread::sleep(Duration::from_millis(50));
        };
        let devtools = SocketAddr::from(([127, 0, 0, 1], port));
        let page = wait_for(|| {
            let mut s = TcpStream::connect(devtools).ok()?;
            s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
            let (status, body) = exchange(&mut s, "/json/list", &[]);
            let v: serde_json::Value = serde_json::from_str(&body).ok()?;
            let page = v.as_array()?.iter().find(|t| t["type"] == "page")?;
            (status == 200).then(|| page["webSocketDebuggerUrl"].as_str().map(str::to_string))?
        });
        let tcp = TcpStream::connect(devtools).unwrap();
        tcp.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let (ws, _) = tungstenite::client(page.as_str(), tcp).expect("DevTools websocket");
        Browser { child, dir, ws, next: 0 }
    }

    /// Calls a DevTools method; its result.
    fn call(&mut self, method: &str, params: serde_json::Value) -> serde_json::Value {
        self.next += 1;
        let id = self.next;
        let msg = serde_json::json!({ "id": id, "method": method, "params": params });
        self.ws.send(tungstenite::Message::text(msg.to_string())).expect("DevTools send");
        loop {
            let m = self.ws.read().expect("DevTools answer");
            let Ok(text) = m.to_text() else { continue };
            let v: serde_json::Value = serde_json::from_str(text).unwrap_or_default();
            if v["id"] == id {
                assert!(v["error"].is_null(), "{method}: {v}");
                return v["result"].clone();
            }
        }
    }

    /// Evaluates a JavaScript expression in the page; its value.
    fn eval(&mut self, expr: &str) -> serde_json::Value {
        self.call("Runtime.evaluate", serde_json::json!({ "expression": expr, "returnByValue": true }))["result"]
            ["value"]
            .clone()
    }

    /// What the page shows: the peers' rows and the jobs' processes.
    fn shown(&mut self) -> serde_json::Value {
        let v = self.eval(
            "JSON.stringify({ \
               peers: [...document.querySelectorAll('#peers tbody tr')].map(r => [r.dataset.address, r.dataset.status]), \
               programs: [...document.querySelectorAll('.job')].map(j => j.dataset.program), \
               procs: [...document.querySelectorAll('.proc')].map(p => [+p.dataset.rank, +p.dataset.replica, p.dataset.status, p.classList.contains('master')]), \
               log: document.getElementById('log').innerText, \
               details: document.getElementById('details').innerText, \
               conn: document.getElementById('conn').textContent })",
        );
        v.as_str().map(|s| serde_json::from_str(s).unwrap()).unwrap_or_default()
    }

    fn wait_shown<T>(&mut self, limit: Duration, what: &str, mut f: impl FnMut(&serde_json::Value) -> Option<T>) -> T {
        let deadline = Instant::now() + limit;
        loop {
            let v = self.shown();
            if let Some(x) = f(&v) {
                return x;
            }
            assert!(Instant::now() < deadline, "{what}: not shown within {limit:?}: {v:#}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn screenshot(&mut self, path: &Path) {
        let r = self.call("Page.captureScreenshot", serde_json::json!({ "format": "png" }));
        std::fs::write(path, base64_decode(r["data"].as_str().unwrap())).unwrap();
    }
}

fn base64_decode(s: &str) -> Vec<u8> {
    let val = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        _ => 63,
    };
    let bytes: Vec<u8> = s.bytes().filter(|&c| c != b'=' && !c.is_ascii_whitespace()).map(val).collect();
    let mut out = Vec::with_capacity(bytes.len() * 3 / 4);
    for c in bytes.chunks(4) {
        let n = c.iter().enumerate().fold(0u32, |n, (i, &v)| n | (v as u32) << (18 - 6 * i));
        out.extend_from_slice(&n.to_be_bytes()[1..c.len()]);
    }
    out
}

#[test]
fn the_page_in_a_real_browser_shows_the_grid_the_job_and_a_killed_replica_failed() {
    let exe = chromium();
    let lacks = exe.is_none().then(|| "needs `chromium` to show the page in a real browser".to_string());
    if !common::require(lacks) {
        return;
    }
    let exe = exe.unwrap();
    let g = TestGrid::start("monitorpage", 3, &["--procs", "2"]);
    g.wait_hosts(1, 2);
    let m = monitor(&g.home(1), &["--listen", "127.0.0.1:0", "--interval", "300"], 1);
    let job = replicated_job(&g, 60_000);
    let mut b = Browser::open(&exe, &m.url);

    let peers = b.wait_shown(LIMIT, "every peer", |v| {
        let p = v["peers"].as_array()?;
        (p.len() == 3 && p.iter().all(|p| p[1] == "up")).then(|| p.clone())
    });
    let (_, body) = get(m.addr, &format!("/api/peers?token={}", m.token), &[]);
    for p in json(&body)["peers"].as_array().unwrap() {
        assert!(peers.iter().any(|q| q[0] == p["address"]), "{p} not on the page: {peers:?}");
    }
    b.wait_shown(LIMIT, "the running job", |v| {
        let procs = v["procs"].as_array()?;
        (v["programs"].as_array()?.iter().any(|p| p == "fdwatch")
            && procs.len() == 6
            && procs.iter().all(|p| p[2] == "running"))
        .then_some(())
    });

    // Kill rank 1's master replica: the page marks it failed (and its other replica master).
    let (_, body) = get(m.addr, &format!("/api/jobs?token={}", m.token), &[]);
    let jobs = json(&body);
    let victim = jobs["jobs"][0]["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["rank"] == 1 && p["master"] == true)
        .cloned()
        .expect("rank 1's master");
    let replica = victim["replica"].as_u64().unwrap();
    let killed = Instant::now();
    common::kill9(victim["pid"].as_u64().unwrap() as u32);
    let shown = b.wait_shown(Duration::from_secs(10), "the killed replica marked failed", |v| {
        let procs = v["procs"].as_array()?;
        let failed = procs.iter().any(|p| p[0] == 1 && p[1] == replica && p[2] == "failed");
        let master = procs.iter().any(|p| p[0] == 1 && p[1] != replica && p[2] == "running" && p[3] == true);
        (failed && master).then(|| v.clone())
    });
    eprintln!("the failure reached the page {:.1} s after the kill", killed.elapsed().as_secs_f64());
    let log = shown["log"].as_str().unwrap_or_default();
    assert!(log.contains("failed") && log.contains("takeover"), "{log}");
    if let Some(path) = std::env::var_os("P2PMPI_MONITOR_SCREENSHOT") {
        b.call(
            "Emulation.setDeviceMetricsOverride",
            serde_json::json!({"width": 1280, "height": 900, "deviceScaleFactor": 1, "mobile": false}),
        );
        // A peer's details shown, as a click shows them.
        b.eval("document.querySelector('#peers tbody tr:nth-child(2)').click()");
        b.wait_shown(Duration::from_secs(5), "the details", |v| {
            v["details"].as_str()?.contains("Processes").then_some(())
        });
        b.screenshot(Path::new(&path));
    }
    drop(b);
    stop_job(job);
}

/// A C program built by Debian's `mpicc.mpich` (MPICH's ABI, on p2pmpi's library staged with it)
/// shows in the monitor like a Rust one: its processes, and a killed replica marked failed with
/// its rank taken over; the job still ends well.
#[test]
fn a_replicated_c_job_is_shown_with_its_killed_replica_failed() {
    if !common::require_tools(&["mpicc.mpich"], "(Debian's MPICH builds the C program: apt install mpich libmpich-dev)")
    {
        return;
    }
    common::abi::build_library();
    let prog = common::abi::c_program("steps", "steps", &["mpicc.mpich"], &[]);
    let g = TestGrid::start("monitor-c", 3, &["--procs", "2"]);
    g.wait_hosts(1, 2);
    let m = monitor(&g.home(2), &["--listen", "127.0.0.1:0", "--interval", "300"], 1);
    let mut cmd = Command::new(bin("p2pmpirun"));
    cmd.args(["-n", "3", "-r", "2"])
        .arg(&prog)
        .args(["150", "40"])
        .env("P2PMPI_HOME", g.home(1))
        .env_remove("P2PMPI_CONF_FILE");
    let job = common::job::Job::spawn(&mut cmd);
    let j = wait_api(&m, "/api/jobs", LIMIT, |v| {
        let j = v["jobs"].as_array()?.first()?.clone();
        (j["processes"].as_array()?.len() == 6 && j["state"] == "running").then_some(j)
    });
    assert_eq!(j["program"], "steps", "{j}");
    assert_eq!(j["replicas"], 2, "{j}");
    let victim =
        j["processes"].as_array().unwrap().iter().find(|p| p["rank"] == 1 && p["master"] == true).unwrap().clone();
    common::kill9(victim["pid"].as_u64().unwrap() as u32);
    let j = wait_api(&m, "/api/jobs", Duration::from_secs(10), |v| {
        let j = &v["jobs"][0];
        (j["failures"] == 1 && j["takeovers"] == 1).then(|| j.clone())
    });
    let mine: Vec<&serde_json::Value> = j["processes"].as_array().unwrap().iter().filter(|p| p["rank"] == 1).collect();
    assert!(mine.iter().any(|p| p["replica"] == victim["replica"] && p["status"] == "failed"), "{mine:?}");
    let e = job.end(LIMIT);
    assert_eq!(e.code, 0, "{}", e.text);
    assert_eq!(e.stdout.lines().filter(|l| l.starts_with("step ")).count(), 150 * 3, "{}", e.text);
}
