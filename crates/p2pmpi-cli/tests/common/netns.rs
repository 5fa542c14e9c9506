//! A network-namespace harness: hosts in their own network namespaces, a bridge per site,
//! a router between the sites, and sites behind NAT (needs root, `ip` and `nft`).
//!
//! ```text
//!            router namespace (forwards between the sites; NAT for NAT sites)
//!        br-a 10.0.1.254/24                      br-b 10.0.2.254/24
//!        /      |       \                         /        \
//!    va1       va2 ...   vsn                    vb1        vb2        (router-side veths)
//!     |         |         |                      |          |
//!    a1        a2        sn                     b1         b2         (one namespace each,
//!  10.0.1.1  10.0.1.2  10.0.1.3              10.0.2.1   10.0.2.2      eth0 + lo)
//! ```
//!
//! Site *s* (1-based, in the order given) is the subnet 10.0.*s*.0/24; its hosts get
//! 10.0.*s*.1, .2, … in the order named, and a default route via the router, 10.0.*s*.254.
//! A NAT site's traffic to other sites is masqueraded (it leaves with the router's address on
//! the destination's bridge), and the router drops new connections from other sites into it:
//! its members can connect out (TCP, and UDP with replies) but cannot be connected to, as
//! behind a home router. Addresses repeat from one topology to the next: each lives in its
//! own namespaces, so topologies never see each other.
//!
//! Namespaces are named `p2pns-<pid>-<tag>-<host>` (and `…-router`), so tests running in
//! parallel never collide; [`Netns::new`] removes namespaces left by test processes that no
//! longer run, and [`Drop`] kills every process still in the topology's namespaces (by pid,
//! from `ip netns pids`) and deletes them, also when the test panicked.
//!
//! [`Netns::link_down`] pulls a host's cable: its router-side veth goes down, so nothing
//! reaches it and nothing it sends leaves (no error on either side, only silence), until
//! [`Netns::link_up`].

use super::grid::{bin, LIMIT};
use super::{lacking, require, run_cmd, Outcome};
use p2pmpi_peer::config::Config;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Every namespace of the harness starts with this.
pub const PREFIX: &str = "p2pns-";

/// Whether the harness can run here (root, `ip` and `nft`), decided by [`require`]: outside
/// CI a test without them says so and returns; under CI it fails.
pub fn available() -> bool {
    require(lacking(true, &["ip", "nft"], "to build network namespaces (iproute2, nftables)"))
}

/// One site: a subnet with a bridge in the router.
#[derive(Debug, Clone)]
pub struct Site {
    /// Host names, unique in the topology, at most 12 characters.
    pub hosts: Vec<String>,
    /// Behind NAT: members connect out, nothing connects in.
    pub nat: bool,
}

impl Site {
    pub fn open(hosts: &[&str]) -> Site {
        Site { hosts: hosts.iter().map(|h| h.to_string()).collect(), nat: false }
    }
    pub fn nat(hosts: &[&str]) -> Site {
        Site { nat: true, ..Site::open(hosts) }
    }
}

#[derive(Debug, Clone)]
pub struct Host {
    pub name: String,
    /// Its namespace.
    pub ns: String,
    /// 1-based.
    pub site: usize,
    pub ip: Ipv4Addr,
    /// Its cable's end in the router namespace.
    port: String,
}

/// A topology of network namespaces; torn down on drop.
pub struct Netns {
    /// `p2pns-<pid>-<tag>-`: every namespace of this topology starts with it.
    pub prefix: String,
    pub router: String,
    pub hosts: Vec<Host>,
    pub sites: Vec<Site>,
}

/// Runs `ip ARGS`; panics with its error output if it fails.
fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).stdin(Stdio::null()).output().expect("run ip");
    assert!(out.status.success(), "ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim());
}

/// Runs a batch of `ip` commands in namespace `ns` (one per line).
fn ip_batch(ns: &str, lines: &[String]) {
    use std::io::Write;
    let mut child = Command::new("ip")
        .args(["-n", ns, "-batch", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run ip");
    child.stdin.take().unwrap().write_all(lines.join("\n").as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "ip -n {ns} -batch:\n{}\n{}", lines.join("\n"), String::from_utf8_lossy(&out.stderr));
}

/// Runs `nft -f -` with `rules` inside namespace `ns`.
fn nft(ns: &str, rules: &str) {
    use std::io::Write;
    let mut child = Command::new("ip")
        .args(["netns", "exec", ns, "nft", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run nft");
    child.stdin.take().unwrap().write_all(rules.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "nft in {ns}:\n{rules}\n{}", String::from_utf8_lossy(&out.stderr));
}

/// Names of the existing network namespaces.
fn namespaces() -> Vec<String> {
    let out = Command::new("ip").args(["netns", "list"]).output().expect("run ip");
    String::from_utf8_lossy(&out.stdout).lines().filter_map(|l| l.split_whitespace().next()).map(String::from).collect()
}

/// Pids of the processes in namespace `ns`.
pub fn pids_in(ns: &str) -> Vec<u32> {
    let out = Command::new("ip").args(["netns", "pids", ns]).output().expect("run ip");
    String::from_utf8_lossy(&out.stdout).split_whitespace().filter_map(|p| p.parse().ok()).collect()
}

/// Kills every process in `ns` (bounded wait for them to go), then deletes it.
fn remove_ns(ns: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let pids = pids_in(ns);
        if pids.is_empty() || Instant::now() >= deadline {
            break;
        }
        for pid in pids {
            let _ = p2pmpi_peer::os::signal(pid, libc::SIGKILL);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = Command::new("ip").args(["netns", "del", ns]).stderr(Stdio::null()).status();
}

fn pid_alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

impl Netns {
    /// Builds the topology: a router namespace with one bridge per site, a namespace per host
    /// cabled to its site's bridge. `tag` names the test (a few letters).
    pub fn new(tag: &str, sites: &[Site]) -> Netns {
        let me = std::process::id();
        let prefix = format!("{PREFIX}{me}-{tag}-");
        // Namespaces of test processes that are gone, and ours of an earlier attempt.
        for ns in namespaces() {
            let Some(rest) = ns.strip_prefix(PREFIX) else { continue };
            let owner = rest.split('-').next().and_then(|p| p.parse::<u32>().ok());
            if ns.starts_with(&prefix) || owner.is_some_and(|p| p != me && !pid_alive(p)) {
                remove_ns(&ns);
            }
        }
        let router = format!("{prefix}router");
        let mut hosts = Vec::new();
        for (s, site) in sites.iter().enumerate() {
            assert!(site.hosts.len() < 254, "at most 253 hosts a site");
            for (i, name) in site.hosts.iter().enumerate() {
                assert!(name.len() <= 12 && !name.contains('-'), "host name {name:?}: at most 12 characters, no '-'");
                hosts.push(Host {
                    name: name.clone(),
                    ns: format!("{prefix}{name}"),
                    site: s + 1,
                    ip: Ipv4Addr::new(10, 0, s as u8 + 1, i as u8 + 1),
                    port: format!("v{name}"),
                });
            }
        }
        let net = Netns { prefix, router, hosts, sites: sites.to_vec() };
        for (i, h) in net.hosts.iter().enumerate() {
            assert!(!net.hosts[..i].iter().any(|o| o.name == h.name), "host {} named twice", h.name);
        }
        // From here on a panic tears down what exists.
        ip(&["netns", "add", &net.router]);
        let mut lines = vec!["link set lo up".to_string()];
        for s in 1..=sites.len() {
            lines.push(format!("link add br{s} type bridge"));
            lines.push(format!("addr add 10.0.{s}.254/24 dev br{s}"));
            lines.push(format!("link set br{s} up"));
        }
        ip_batch(&net.router, &lines);
        for h in &net.hosts {
            ip(&["netns", "add", &h.ns]);
            ip_batch(
                &net.router,
                &[
                    format!("link add {} type veth peer name eth0 netns {}", h.port, h.ns),
                    format!("link set {} master br{}", h.port, h.site),
                    format!("link set {} up", h.port),
                ],
            );
            ip_batch(
                &h.ns,
                &[
                    "link set lo up".into(),
                    format!("addr add {}/24 dev eth0", h.ip),
                    "link set eth0 up".into(),
                    format!("route add default via 10.0.{}.254", h.site),
                ],
            );
        }
        let out = Command::new("ip")
            .args(["netns", "exec", &net.router, "sysctl", "-qw", "net.ipv4.ip_forward=1"])
            .output()
            .expect("run sysctl");
        assert!(out.status.success(), "ip_forward in the router: {}", String::from_utf8_lossy(&out.stderr));
        let mut nat = String::new();
        let mut filter = String::new();
        for s in (0..sites.len()).filter(|&s| sites[s].nat) {
            let net = format!("10.0.{}.0/24", s + 1);
            nat += &format!("    ip saddr {net} ip daddr != {net} masquerade\n");
            filter += &format!("    ip daddr {net} ip saddr != {net} drop\n");
        }
        if !nat.is_empty() {
            nft(
                &net.router,
                &format!(
                    "table ip p2pns {{\n  chain postrouting {{\n    type nat hook postrouting priority srcnat; policy accept;\n{nat}  }}\n  chain forward {{\n    type filter hook forward priority filter; policy accept;\n    ct state established,related accept\n{filter}  }}\n}}\n"
                ),
            );
        }
        net
    }

    pub fn host(&self, name: &str) -> &Host {
        self.hosts.iter().find(|h| h.name == name).unwrap_or_else(|| panic!("no host {name} in the topology"))
    }

    pub fn addr(&self, name: &str) -> Ipv4Addr {
        self.host(name).ip
    }

    /// The router's address on site `site` (1-based): where a NAT site's traffic seems to
    /// come from on that site.
    pub fn router_addr(&self, site: usize) -> Ipv4Addr {
        Ipv4Addr::new(10, 0, site as u8, 254)
    }

    pub fn ns(&self, name: &str) -> &str {
        &self.host(name).ns
    }

    /// `ip netns exec <its namespace> PROGRAM`: add arguments and environment as usual.
    pub fn exec(&self, name: &str, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", self.ns(name)]).arg(program);
        cmd
    }

    /// Runs `f` on a thread that entered the host's namespace: sockets it opens live there
    /// (also once handed to other threads).
    pub fn in_ns<T: Send + 'static>(&self, name: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
        let path = format!("/var/run/netns/{}", self.ns(name));
        let r = std::thread::spawn(move || {
            let fd = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
            p2pmpi_peer::os::enter_netns(&fd).unwrap_or_else(|e| panic!("setns {path}: {e}"));
            f()
        })
        .join();
        r.unwrap_or_else(|e| std::panic::resume_unwind(e))
    }

    /// A TCP listener of host `name` on its address (port 0: any).
    pub fn listen(&self, name: &str, port: u16) -> TcpListener {
        let ip = self.addr(name);
        self.in_ns(name, move || TcpListener::bind((ip, port)).expect("listen"))
    }

    /// A UDP socket of host `name` on its address.
    pub fn udp(&self, name: &str) -> UdpSocket {
        let ip = self.addr(name);
        self.in_ns(name, move || UdpSocket::bind((ip, 0)).expect("udp bind"))
    }

    /// A TCP connection from host `name` to `to`, given up after `limit`.
    pub fn connect(&self, name: &str, to: SocketAddr, limit: Duration) -> std::io::Result<TcpStream> {
        self.in_ns(name, move || TcpStream::connect_timeout(&to, limit))
    }

    /// Pulls host `name`'s cable: its router-side veth goes down, checked (the router lists it
    /// down and the host's end has lost its carrier, within 5 s).
    pub fn link_down(&self, name: &str) {
        let port = &self.host(name).port;
        ip(&["-n", &self.router, "link", "set", port, "down"]);
        let show = |ns: &str, dev: &str| {
            let out = Command::new("ip").args(["-n", ns, "-br", "link", "show", dev]).output().expect("run ip");
            String::from_utf8_lossy(&out.stdout).into_owned()
        };
        let what = format!("{name}'s cable pulled (router end {port} DOWN, its eth0 without carrier)");
        super::wait_until(Duration::from_secs(5), &what, || {
            show(&self.router, port).split_whitespace().nth(1) == Some("DOWN")
                && show(self.ns(name), "eth0").contains("NO-CARRIER")
        });
    }

    /// Plugs it back in, and waits (at most 5 s) until its end sees the carrier.
    pub fn link_up(&self, name: &str) {
        ip(&["-n", &self.router, "link", "set", &self.host(name).port, "up"]);
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let out = Command::new("ip").args(["-n", self.ns(name), "-br", "link", "show", "eth0"]).output().unwrap();
            let text = String::from_utf8_lossy(&out.stdout).to_string();
            if text.split_whitespace().nth(1) == Some("UP") {
                return;
            }
            assert!(Instant::now() < deadline, "{name}'s link is not up 5 s after plugging it in: {text}");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Every namespace of the topology, hosts first.
    pub fn namespaces(&self) -> Vec<String> {
        let mut v: Vec<String> = self.hosts.iter().map(|h| h.ns.clone()).collect();
        v.push(self.router.clone());
        v
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        for ns in self.namespaces() {
            remove_ns(&ns);
        }
    }
}

// ------------------------------------------------------------------------------ a grid

/// A grid of real daemons in a [`Netns`] topology: a supernode and peer daemons (MPDs), each
/// in its host's namespace, started with the real commands (`runSupernode`, `mpiboot`) run by
/// `ip netns exec`. Every daemon binds to its host's address and advertises it
/// (`EXTERNAL_IP`); the peers name the supernode's address. Homes (configuration, state,
/// logs) are `DIR/<host>`. Dropping it kills the daemons (the topology's drop kills whatever
/// else runs in its namespaces).
pub struct NsGrid<'a> {
    pub net: &'a Netns,
    pub dir: PathBuf,
    pub supernode: String,
    pub peers: Vec<String>,
}

/// A host's entry in `mpihost`'s table.
#[derive(Debug, Clone)]
pub struct Seen {
    pub ip: String,
    pub alive: bool,
    pub rtt_measured: bool,
}

impl<'a> NsGrid<'a> {
    /// Starts the supernode on host `supernode` and an MPD on every host of `peers`
    /// (`MAX_PROCESSES_PER_JOB` = `procs`, plus `extra` configuration lines). Fast membership
    /// periods, as `p2pmpi local-grid`: keep-alive and refresh 1 s, pings 2 s, reservation
    /// time-out 1.5 s.
    pub fn start(net: &'a Netns, supernode: &str, peers: &[&str], procs: u32, extra: &[&str]) -> NsGrid<'a> {
        let dir = std::env::temp_dir().join(format!("{}grid", net.prefix));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let g = NsGrid { net, dir, supernode: supernode.into(), peers: peers.iter().map(|p| p.to_string()).collect() };
        let secret = format!("{:032x}", p2pmpi_peer::home::random_u128());

        let sn_home = g.home(supernode);
        std::fs::create_dir_all(&sn_home).unwrap();
        let cfg = Config {
            supernode_port: 0,
            external_ip: Some(IpAddr::V4(net.addr(supernode))),
            grid_secret: Some(secret.clone()),
            peer_ttl_ms: 5000,
            ..Config::default()
        };
        std::fs::write(sn_home.join("P2P-MPI.conf"), cfg.to_text()).unwrap();
        g.on(supernode, "runSupernode", &[]).assert_ok();
        let state: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(sn_home.join("supernode.json")).unwrap()).unwrap();
        let sn_addr = state["addr"].as_str().expect("supernode address").to_string();

        for p in peers {
            let home = g.home(p);
            std::fs::create_dir_all(&home).unwrap();
            let cfg = Config {
                supernodes: vec![sn_addr.clone()],
                mpd_port: 0,
                ft_port: 0,
                fd_port: 0,
                rs_port: 0,
                external_ip: Some(IpAddr::V4(net.addr(p))),
                max_processes_per_job: procs,
                grid_secret: Some(secret.clone()),
                alive_period_ms: 1000,
                refresh_period_ms: 1000,
                ping_period_ms: 2000,
                reserve_timeout_ms: 1500,
                peer_cache: Some(home.join("peer-cache.json")),
                ..Config::default()
            };
            let mut text = cfg.to_text();
            for l in extra {
                text.push_str(l);
                text.push('\n');
            }
            std::fs::write(home.join("P2P-MPI.conf"), text).unwrap();
            let out = g.on(p, "mpiboot", &[]);
            assert!(out.status.success(), "mpiboot on {p}:\n{}{}\nlog:\n{}", out.stdout, out.stderr, g.log(p));
        }
        g
    }

    pub fn home(&self, host: &str) -> PathBuf {
        self.dir.join(host)
    }

    /// Command `cmd` of this crate as a user on `host` types it, not yet run.
    pub fn command(&self, host: &str, cmd: &str) -> Command {
        let mut c = self.net.exec(host, bin(cmd));
        c.env("P2PMPI_HOME", self.home(host)).env_remove("P2PMPI_CONF_FILE");
        c
    }

    /// Runs command `cmd ARGS` on `host` (at most [`LIMIT`]).
    pub fn on(&self, host: &str, cmd: &str, args: &[&str]) -> Outcome {
        run_cmd(self.command(host, cmd).args(args), LIMIT)
    }

    /// `p2pmpirun` submitted from `host`, not yet run.
    pub fn p2pmpirun(&self, host: &str) -> Command {
        self.command(host, "p2pmpirun")
    }

    /// The daemon log of `host`.
    pub fn log(&self, host: &str) -> String {
        let mut all = String::new();
        if let Ok(d) = std::fs::read_dir(self.home(host).join("tmp")) {
            for e in d.flatten() {
                all.push_str(&std::fs::read_to_string(e.path()).unwrap_or_default());
            }
        }
        all
    }

    /// The host list of `host`'s MPD (`mpihost`), by address.
    pub fn hosts_seen(&self, host: &str) -> Vec<Seen> {
        let out = self.on(host, "mpihost", &[]);
        out.stdout
            .lines()
            .filter_map(|l| {
                let w: Vec<&str> = l.split_whitespace().collect();
                let alive = match w.get(3) {
                    Some(&"true") => true,
                    Some(&"false") => false,
                    _ => return None,
                };
                w[0].parse::<IpAddr>().ok()?;
                Some(Seen { ip: w[0].to_string(), alive, rtt_measured: w[2] != "-" })
            })
            .collect()
    }

    /// Waits (at most 30 s) until `host`'s MPD knows every host of `alive` alive with a
    /// measured round trip, and every host of `dead` not alive. Returns its host list.
    pub fn wait_hosts(&self, host: &str, alive: &[&str], dead: &[&str]) -> Vec<Seen> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let seen = self.hosts_seen(host);
            let state = |h: &str| seen.iter().find(|s| s.ip == self.net.addr(h).to_string()).cloned();
            let ok = alive.iter().all(|h| state(h).is_some_and(|s| s.alive && s.rtt_measured))
                && dead.iter().all(|h| state(h).is_some_and(|s| !s.alive));
            if ok {
                return seen;
            }
            assert!(
                Instant::now() < deadline,
                "{host} does not see {alive:?} alive and {dead:?} dead after 30 s: {seen:?}\nlog:\n{}",
                self.log(host)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The host of the topology whose address is `ip`.
    pub fn host_of(&self, ip: &str) -> String {
        self.net
            .hosts
            .iter()
            .find(|h| h.ip.to_string() == ip)
            .map(|h| h.name.clone())
            .unwrap_or_else(|| panic!("no host has address {ip}"))
    }

    /// The daemons' pids (from their state files) that run in their host's namespace.
    pub fn daemon_pids(&self) -> Vec<u32> {
        let mut pids = Vec::new();
        for h in std::iter::once(&self.supernode).chain(&self.peers) {
            let running = pids_in(self.net.ns(h));
            for state in ["mpd.json", "supernode.json"] {
                if let Ok(text) = std::fs::read_to_string(self.home(h).join(state)) {
                    if let Some(pid) =
                        serde_json::from_str::<serde_json::Value>(&text).ok().and_then(|v| v["pid"].as_u64())
                    {
                        if running.contains(&(pid as u32)) {
                            pids.push(pid as u32);
                        }
                    }
                }
            }
        }
        pids
    }
}

impl Drop for NsGrid<'_> {
    fn drop(&mut self) {
        for pid in self.daemon_pids() {
            let _ = p2pmpi_peer::os::signal(pid, libc::SIGKILL);
        }
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Kills the daemons (MPD, supernode) started in these homes when dropped: a test that ends
/// early leaves none running.
pub struct Daemons(pub Vec<PathBuf>);

impl Drop for Daemons {
    fn drop(&mut self) {
        for home in &self.0 {
            for state in ["mpd.json", "supernode.json"] {
                if let Ok(text) = std::fs::read_to_string(home.join(state)) {
                    if let Some(pid) =
                        serde_json::from_str::<serde_json::Value>(&text).ok().and_then(|v| v["pid"].as_u64())
                    {
                        let _ = p2pmpi_peer::os::signal(pid as u32, libc::SIGKILL);
                    }
                }
            }
        }
    }
}
