//! `p2pmpi monitor` (also `runVisuProxy`): the grid monitor, a live web view of the overlay,
//! its jobs and their failures (SPEC §17, the thesis' VisuProxy), and `runVisu`, which
//! prints (and on a desktop opens) its page.
//!
//! # Design
//!
//! One poller thread asks the supernodes for the peers and every peer's MPD for its `Report`
//! (the same view as `p2pmpi grid status`, [`crate::grid_status::gather_with`]), at most once
//! per `--interval` (1 s by default; a round waits at most [`ANSWER_WITHIN`] for a peer). The
//! answer is cached as one snapshot; every request and every open page is served from it, so
//! ten open pages cost the peers what one costs: one `Report` per peer per interval. When a
//! snapshot differs from the one before, it is pushed to the open pages as a server-sent
//! event (`/api/events`).
//!
//! # Security
//!
//! The monitor is read-only: it serves GET requests only, and asks the daemons nothing that
//! changes them. Every request needs the token drawn at start (printed in the first line of
//! output, accepted as `?token=` or `Authorization: Bearer`); anything else gets 401. It
//! listens on 127.0.0.1 unless told otherwise; a non-loopback address is served over TLS only
//! (a self-signed certificate made at start, its SHA-256 fingerprint printed), so that the
//! token never crosses a network in clear. It talks to the daemons with the grid secret, over
//! the grid's authenticated channel, like every other command. Connections that made no
//! request with the token are capped and closed after a time-out, so idle connections cannot
//! make it stop answering its token holders ([`conns`]).
//!
//! # Why axum
//!
//! axum (on hyper and tokio) is the most used and best maintained Rust web framework: routing,
//! middleware (the token check) and server-sent events come with it, and HTTP parsing is
//! hyper's, which is fuzzed and widely deployed, rather than ours. TLS is rustls (with ring:
//! no C++ build of aws-lc), certificates rcgen. The page (HTML, JavaScript, CSS, SVG) is the
//! project's own and is embedded in the binary: nothing is fetched at run time.

use crate::grid_run::{load_config, secret_of};
use crate::grid_status::{gather_with, GridView, ANSWER_WITHIN};
use anyhow::{bail, Context, Result};
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use serde::{Deserialize, Serialize};
use std::convert::Infallible;
use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// The page, its script and its styles (the project's own; no third-party file).
mod conns;

const PAGE: &str = include_str!("monitor/page.html");
const SCRIPT: &str = include_str!("monitor/app.js");
const STYLE: &str = include_str!("monitor/app.css");

/// Where the monitor listens by default (`VISU_PROXY`'s default port).
pub const DEFAULT_LISTEN: SocketAddr =
    SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), p2pmpi_peer::config::DEFAULT_VISU_PROXY_PORT);

/// `p2pmpi monitor` / `runVisuProxy`.
#[derive(clap::Args, Debug, Clone)]
pub struct MonitorArgs {
    /// Address to listen on (port 0: any free port). Anything but a loopback address is
    /// served over TLS only, with a certificate made at start.
    #[arg(long, value_name = "ADDR:PORT", default_value_t = DEFAULT_LISTEN)]
    pub listen: SocketAddr,
    /// How often the peers are asked for their reports, in milliseconds (at least 200).
    #[arg(long, value_name = "MS", default_value_t = 1000, value_parser = clap::value_parser!(u64).range(200..))]
    pub interval: u64,
}

/// The cached view, as served.
#[derive(Debug, Clone, Serialize)]
struct Snapshot {
    /// Bumped at every change.
    version: u64,
    /// When the peers were last asked (milliseconds since the Unix epoch; 0: not yet).
    updated_ms: u64,
    /// How long that round took, in milliseconds.
    poll_ms: u64,
    interval_ms: u64,
    /// Why the last round failed (no supernode answered), if it did.
    error: Option<String>,
    supernodes: Vec<String>,
    peers: Vec<crate::grid_status::PeerView>,
    jobs: Vec<crate::grid_status::JobView>,
    /// Members the grid's owner revoked.
    revoked: Vec<String>,
}

#[derive(Clone)]
struct AppState {
    token: Arc<str>,
    snapshot: watch::Receiver<Arc<Snapshot>>,
}

/// What `runVisu` finds of a running monitor (in the p2pmpi directory, private).
#[derive(Debug, Serialize, Deserialize)]
struct MonitorState {
    pid: u32,
    url: String,
    fingerprint: Option<String>,
}

fn state_file() -> std::path::PathBuf {
    p2pmpi_peer::config::p2pmpi_dir().join("monitor.json")
}

fn random_token() -> Result<String> {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b).map_err(|e| anyhow::anyhow!("no randomness from the operating system: {e}"))?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

/// Compares in time independent of where the strings differ.
fn same_secret(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The token of a request: `?token=` or `Authorization: Bearer`.
fn token_of(req: &Request) -> Option<String> {
    if let Some(v) = req.headers().get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()) {
        if let Some(t) = v.strip_prefix("Bearer ") {
            return Some(t.trim().to_string());
        }
    }
    req.uri().query().and_then(|q| q.split('&').find_map(|kv| kv.strip_prefix("token=").map(|t| t.to_string())))
}

async fn require_token(State(st): State<AppState>, req: Request, next: Next) -> Response {
    let ok = token_of(&req).is_some_and(|t| same_secret(t.as_bytes(), st.token.as_bytes()));
    if !ok {
        return (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Bearer"), (header::CACHE_CONTROL, "no-store")],
            "401 Unauthorized: this monitor needs the token it printed at start (?token=... or Authorization: Bearer ...)\n",
        )
            .into_response();
    }
    if let Some(p) = req.extensions().get::<conns::Proven>() {
        p.set();
    }
    let mut res = next.run(req).await;
    let h = res.headers_mut();
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    res
}

async fn page(State(st): State<AppState>) -> Response {
    // The token is hexadecimal: nothing to escape.
    let body = PAGE.replace("{{TOKEN}}", &st.token);
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; \
                 base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
            ),
        ],
        body,
    )
        .into_response()
}

async fn script() -> Response {
    ([(header::CONTENT_TYPE, "text/javascript; charset=utf-8")], SCRIPT).into_response()
}

async fn style() -> Response {
    ([(header::CONTENT_TYPE, "text/css; charset=utf-8")], STYLE).into_response()
}

fn json_response(v: &impl Serialize) -> Response {
    match serde_json::to_string(v) {
        Ok(s) => ([(header::CONTENT_TYPE, "application/json")], s).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

async fn api_peers(State(st): State<AppState>) -> Response {
    let s = st.snapshot.borrow().clone();
    json_response(&serde_json::json!({
        "version": s.version,
        "updated_ms": s.updated_ms,
        "error": s.error,
        "supernodes": s.supernodes,
        "peers": s.peers,
    }))
}

async fn api_jobs(State(st): State<AppState>) -> Response {
    let s = st.snapshot.borrow().clone();
    json_response(&serde_json::json!({ "version": s.version, "updated_ms": s.updated_ms, "jobs": s.jobs }))
}

async fn api_grid(State(st): State<AppState>) -> Response {
    let s = st.snapshot.borrow().clone();
    json_response(&*s)
}

/// Server-sent events: the whole snapshot at once, then each new one as it is made.
async fn api_events(State(st): State<AppState>) -> Sse<impl futures_util::Stream<Item = Result<Event, Infallible>>> {
    let rx = st.snapshot.clone();
    let stream = futures_util::stream::unfold((rx, true), |(mut rx, first)| async move {
        if !first && rx.changed().await.is_err() {
            return None;
        }
        let s = rx.borrow_and_update().clone();
        let data = serde_json::to_string(&*s).unwrap_or_else(|_| "{}".into());
        Some((Ok(Event::default().event("grid").id(s.version.to_string()).data(data)), (rx, false)))
    });
    Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
}

fn router(state: AppState) -> Router {
    Router::new()
        .route("/", get(page))
        .route("/app.js", get(script))
        .route("/app.css", get(style))
        .route("/api/peers", get(api_peers))
        .route("/api/jobs", get(api_jobs))
        .route("/api/grid", get(api_grid))
        .route("/api/events", get(api_events))
        .layer(axum::middleware::from_fn_with_state(state.clone(), require_token))
        .with_state(state)
}

/// The snapshot without what changes at every round (times, load, memory, RTT): whether
/// anything a viewer cares about changed.
fn fingerprint_of(v: &GridView, error: &Option<String>) -> String {
    let peers: Vec<_> = v
        .peers
        .iter()
        .map(|p| {
            (
                &p.address,
                &p.name,
                &p.status,
                &p.error,
                p.jobs,
                p.max_jobs,
                p.max_procs,
                p.load1.map(|l| (l * 10.0) as i32),
            )
        })
        .collect();
    let jobs: Vec<_> = v
        .jobs
        .iter()
        .map(|j| {
            let procs: Vec<_> = j.processes.iter().map(|p| (p.rank, p.replica, p.master, &p.host, &p.status)).collect();
            (&j.job, &j.state, procs, j.events.len())
        })
        .collect();
    format!("{:?}{peers:?}{jobs:?}{error:?}{:?}", v.supernodes, v.revoked)
}

/// The poller: one round per interval, whatever the number of pages open.
fn poll_forever(
    cfg: p2pmpi_peer::config::Config,
    secret: p2pmpi_wire::secure::GridSecret,
    interval: Duration,
    tx: watch::Sender<Arc<Snapshot>>,
) {
    let mut version = 0u64;
    let mut last = String::new();
    let mut last_push = Instant::now();
    // Peers gone down and failed jobs, kept on show.
    let mut memory = crate::grid_status::Memory::default();
    loop {
        let start = Instant::now();
        let (view, error) = match gather_with(&cfg, &secret, ANSWER_WITHIN) {
            Ok(v) => (memory.keep(v, crate::notices::now_ms()), None),
            Err(e) => (
                GridView { supernodes: Vec::new(), peers: Vec::new(), jobs: Vec::new(), revoked: Vec::new() },
                Some(format!("{e:#}")),
            ),
        };
        let poll_ms = start.elapsed().as_millis() as u64;
        let fp = fingerprint_of(&view, &error);
        // A change is pushed at once; the rest (load, memory, RTT) every 5 s at most.
        if fp != last || last_push.elapsed() >= Duration::from_secs(5) {
            version += 1;
            last = fp;
            last_push = Instant::now();
            let snap = Snapshot {
                version,
                updated_ms: crate::notices::now_ms(),
                poll_ms,
                interval_ms: interval.as_millis() as u64,
                error,
                supernodes: view.supernodes,
                peers: view.peers,
                jobs: view.jobs,
                revoked: view.revoked,
            };
            if tx.send(Arc::new(snap)).is_err() {
                return;
            }
        }
        std::thread::sleep(interval.saturating_sub(start.elapsed()));
    }
}

/// A self-signed certificate for `names`: the TLS configuration and its SHA-256 fingerprint.
fn tls_config(names: Vec<String>) -> Result<(Arc<rustls::ServerConfig>, String)> {
    use sha2::Digest;
    let ck = rcgen::generate_simple_self_signed(names).context("cannot make a certificate")?;
    let der = ck.cert.der().clone();
    let fingerprint =
        sha2::Sha256::digest(der.as_ref()).iter().map(|b| format!("{b:02X}")).collect::<Vec<_>>().join(":");
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(rustls::pki_types::PrivatePkcs8KeyDer::from(
        ck.key_pair.serialize_der(),
    ));
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("TLS versions")?
        .with_no_client_auth()
        .with_single_cert(vec![der], key)
        .context("TLS certificate")?;
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok((Arc::new(cfg), fingerprint))
}

/// `p2pmpi monitor`: serves until interrupted.
pub fn run(args: &MonitorArgs) -> Result<()> {
    let cfg = load_config("p2pmpi monitor")?;
    let secret = secret_of(&cfg)?;
    let token = random_token()?;
    let tls = !args.listen.ip().is_loopback();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the web server's runtime")?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(args.listen)
            .await
            .with_context(|| format!("cannot listen on {}", args.listen))?;
        let local = listener.local_addr()?;
        let interval = Duration::from_millis(args.interval);
        let empty = Snapshot {
            version: 0,
            updated_ms: 0,
            poll_ms: 0,
            interval_ms: interval.as_millis() as u64,
            error: None,
            supernodes: Vec::new(),
            peers: Vec::new(),
            jobs: Vec::new(),
            revoked: Vec::new(),
        };
        let (tx, rx) = watch::channel(Arc::new(empty));
        std::thread::Builder::new()
            .name("monitor-poller".into())
            .spawn(move || poll_forever(cfg, secret, interval, tx))
            .context("cannot start the poller")?;
        let state = AppState { token: token.clone().into(), snapshot: rx };
        let app = router(state);
        let mut out = std::io::stdout().lock();
        let (url, fingerprint, tls_cfg) = if tls {
            let host = if local.ip().is_unspecified() { p2pmpi_peer::home::hostname() } else { local.ip().to_string() };
            let mut names = vec![host.clone(), "localhost".to_string(), "127.0.0.1".to_string()];
            if !local.ip().is_unspecified() {
                names.push(local.ip().to_string());
            }
            names.sort();
            names.dedup();
            let (c, fp) = tls_config(names)?;
            let host = if host.contains(':') { format!("[{host}]") } else { host };
            (format!("https://{host}:{}/?token={token}", local.port()), Some(fp), Some(c))
        } else {
            (format!("http://{local}/?token={token}"), None, None)
        };
        // Written before the address is printed: whoever read it finds it for runVisu.
        let st = MonitorState { pid: std::process::id(), url: url.clone(), fingerprint: fingerprint.clone() };
        if let Err(e) = p2pmpi_peer::home::write_json(&state_file(), &st) {
            tracing::debug!("monitor: cannot record its address for runVisu: {e:#}");
        }
        writeln!(out, "monitor: {url}")?;
        if let Some(fp) = &fingerprint {
            writeln!(out, "monitor: TLS certificate (self-signed, made at start) SHA-256 fingerprint {fp}")?;
        }
        writeln!(
            out,
            "monitor: listening on {local}; asking the peers every {} ms; read-only; Ctrl-C stops it",
            args.interval
        )?;
        out.flush()?;
        drop(out);
        conns::serve(listener, app, tls_cfg).await
    })
}

/// `runVisu`: prints the monitor's page (the one this user runs on this host, else the one
/// `VISU_PROXY` names) and opens it where there is a desktop.
pub fn visu() -> Result<()> {
    let running =
        p2pmpi_peer::home::read_json::<MonitorState>(&state_file()).filter(|s| p2pmpi_peer::home::pid_alive(s.pid));
    let url = if let Some(s) = &running {
        println!("monitor: {}", s.url);
        if let Some(fp) = &s.fingerprint {
            println!("monitor: TLS certificate SHA-256 fingerprint {fp}");
        }
        s.url.clone()
    } else {
        let cfg = load_config("runVisu")?;
        let Some(proxy) = cfg.visu_proxy.clone() else {
            bail!("no monitor runs here and VISU_PROXY is not set: start one with `p2pmpi monitor` (or runVisuProxy)");
        };
        let loopback = proxy
            .rsplit_once(':')
            .map(|(h, _)| h.trim_matches(['[', ']']))
            .is_some_and(|h| h == "localhost" || h.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback()));
        let url = format!("{}://{proxy}/", if loopback { "http" } else { "https" });
        println!("monitor: {url}");
        println!("monitor: add ?token=TOKEN, the token the monitor printed at start");
        url
    };
    crate::commands::flush();
    let desktop = std::env::var_os("DISPLAY").is_some() || std::env::var_os("WAYLAND_DISPLAY").is_some();
    if desktop {
        match std::process::Command::new("xdg-open").arg(&url).stdout(std::process::Stdio::null()).status() {
            Ok(s) if s.success() => {}
            _ => eprintln!("runVisu: could not open a browser (xdg-open); open the address above"),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_random_hex_and_compared_whole() {
        let a = random_token().unwrap();
        assert_eq!(a.len(), 32);
        assert!(a.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_ne!(a, random_token().unwrap());
        assert!(same_secret(a.as_bytes(), a.clone().as_bytes()));
        assert!(!same_secret(a.as_bytes(), &a.as_bytes()[..31]));
        assert!(!same_secret(a.as_bytes(), b"x"));
    }

    #[test]
    fn the_token_is_read_from_the_query_or_a_bearer_header() {
        let r = Request::builder().uri("/api/peers?a=1&token=abc").body(axum::body::Body::empty()).unwrap();
        assert_eq!(token_of(&r).as_deref(), Some("abc"));
        let r = Request::builder()
            .uri("/api/peers")
            .header("Authorization", "Bearer xyz")
            .body(axum::body::Body::empty())
            .unwrap();
        assert_eq!(token_of(&r).as_deref(), Some("xyz"));
        let r = Request::builder().uri("/api/peers?tokenx=1").body(axum::body::Body::empty()).unwrap();
        assert_eq!(token_of(&r), None);
    }

    #[test]
    fn the_certificate_fingerprint_is_sha256() {
        let (_, fp) = tls_config(vec!["localhost".into()]).unwrap();
        assert_eq!(fp.len(), 32 * 3 - 1, "{fp}");
    }
}
