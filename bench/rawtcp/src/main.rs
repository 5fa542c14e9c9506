//! Raw TCP ping-pong: the "speed of light" baseline for p2pmpi's TCP transport.
//!
//! Two processes exchange messages over one TCP connection on 127.0.0.1 with
//! `TCP_NODELAY` set. Both sides put the socket in non-blocking mode and
//! **busy-poll** (`read`/`write` retried on `WouldBlock` with a spin hint, never
//! sleeping in the kernel): this is the fastest a user-space TCP ping-pong gets
//! on loopback, at the price of burning one core per process.
//!
//! The payload is sent raw, without any framing or header (rank 1 knows the size
//! from a control message sent before each batch). A 0-byte "message" cannot exist
//! on a byte stream, so for size 0 a single byte is exchanged (bandwidth reported
//! as 0, as the MPI benchmarks do).
//!
//! Usage:
//!   rawtcp-pingpong [SIZES]                 spawn a copy of itself as rank 1 and run
//!   rawtcp-pingpong --listen ADDR [SIZES]   rank 0: wait for rank 1 on ADDR, then run
//!   rawtcp-pingpong --server ADDR           rank 1: connect to rank 0 at ADDR and echo
//!
//! SIZES is a comma-separated list of byte counts (default: 0,1,8,64,512,4096,
//! 32768,65536,131072,524288,1048576,4194304). Rank 0 prints, per size,
//! `pingpong <bytes> <one_way_latency_us> <bandwidth_MB_per_s>` with
//! one_way = round_trip / 2 and bandwidth = bytes / one_way (MB = 1e6 bytes).
//!
//! Iteration counts use the same adaptive algorithm as `bench/c/pingpong.c`:
//! warm-up batches doubled until one lasts >= 20 ms, then enough timed round
//! trips for about 0.2 s (clamped to 20..=1_000_000).
#![forbid(unsafe_code)]

use std::io::{self, ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, ExitCode};
use std::time::Instant;

const DEFAULT_SIZES: [usize; 12] = [0, 1, 8, 64, 512, 4096, 32768, 65536, 131072, 524288, 1048576, 4194304];
const WARM_S: f64 = 0.02;
const TARGET_S: f64 = 0.2;
const MIN_ITERS: u64 = 20;
const MAX_ITERS: u64 = 1_000_000;

/// Read exactly `buf.len()` bytes from a non-blocking socket, spinning on `WouldBlock`.
fn recv_spin(s: &mut TcpStream, buf: &mut [u8]) -> io::Result<()> {
    let mut got = 0;
    while got < buf.len() {
        match s.read(&mut buf[got..]) {
            Ok(0) => return Err(io::Error::new(ErrorKind::UnexpectedEof, "peer closed")),
            Ok(k) => got += k,
            Err(e) if e.kind() == ErrorKind::WouldBlock => std::hint::spin_loop(),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Write all of `buf` to a non-blocking socket, spinning on `WouldBlock`.
fn send_spin(s: &mut TcpStream, buf: &[u8]) -> io::Result<()> {
    let mut sent = 0;
    while sent < buf.len() {
        match s.write(&buf[sent..]) {
            Ok(0) => return Err(io::Error::new(ErrorKind::WriteZero, "write returned 0")),
            Ok(k) => sent += k,
            Err(e) if e.kind() == ErrorKind::WouldBlock => std::hint::spin_loop(),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn setup(s: &TcpStream) -> io::Result<()> {
    s.set_nodelay(true)?;
    s.set_nonblocking(true)
}

/// Bytes actually on the wire for a message of `size` bytes (see module docs).
fn wire_len(size: usize) -> usize {
    size.max(1)
}

/// Rank 0: drive the benchmark and print the results.
fn run_rank0(mut s: TcpStream, sizes: &[usize]) -> io::Result<()> {
    setup(&s)?;
    let max = sizes.iter().copied().map(wire_len).max().unwrap_or(1);
    let mut buf = vec![b'x'; max];
    let mut out = io::stdout().lock();

    // Control message: (size, n) then n round trips; n == 0 ends the session.
    let batch = |s: &mut TcpStream, buf: &mut [u8], size: usize, n: u64| -> io::Result<f64> {
        let mut ctl = [0u8; 16];
        ctl[..8].copy_from_slice(&(size as u64).to_le_bytes());
        ctl[8..].copy_from_slice(&n.to_le_bytes());
        send_spin(s, &ctl)?;
        let msg = &mut buf[..wire_len(size)];
        let t0 = Instant::now();
        for _ in 0..n {
            send_spin(s, msg)?;
            recv_spin(s, msg)?;
        }
        Ok(t0.elapsed().as_secs_f64())
    };

    for &size in sizes {
        let mut n = 2u64;
        let iters = loop {
            let dt = batch(&mut s, &mut buf, size, n)?;
            if dt >= WARM_S || n >= MAX_ITERS {
                let per_rt = dt / n as f64;
                let it = if per_rt > 0.0 { (TARGET_S / per_rt) as u64 } else { MAX_ITERS };
                break it.clamp(MIN_ITERS, MAX_ITERS);
            }
            n *= 2;
        };
        let dt = batch(&mut s, &mut buf, size, iters)?;
        let one_way_us = dt / iters as f64 / 2.0 * 1e6;
        let mbps = if size > 0 { size as f64 / (one_way_us * 1e-6) / 1e6 } else { 0.0 };
        writeln!(out, "pingpong {size} {one_way_us:.3} {mbps:.2}")?;
        out.flush()?;
    }
    send_spin(&mut s, &[0u8; 16])?;
    Ok(())
}

/// Rank 1: echo every message back, as told by the control messages.
fn run_rank1(mut s: TcpStream) -> io::Result<()> {
    setup(&s)?;
    let mut buf: Vec<u8> = Vec::new();
    loop {
        let mut ctl = [0u8; 16];
        recv_spin(&mut s, &mut ctl)?;
        let size = u64::from_le_bytes(ctl[..8].try_into().unwrap()) as usize;
        let n = u64::from_le_bytes(ctl[8..].try_into().unwrap());
        if n == 0 {
            return Ok(());
        }
        let len = wire_len(size);
        if buf.len() < len {
            buf.resize(len, 0);
        }
        let msg = &mut buf[..len];
        for _ in 0..n {
            recv_spin(&mut s, msg)?;
            send_spin(&mut s, msg)?;
        }
    }
}

fn parse_sizes(arg: Option<&str>) -> Result<Vec<usize>, String> {
    match arg {
        None | Some("") => Ok(DEFAULT_SIZES.to_vec()),
        Some(list) => {
            list.split(',').map(|t| t.trim().parse::<usize>().map_err(|_| format!("bad size '{t}'"))).collect()
        }
    }
}

fn run() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let err = |e: io::Error| e.to_string();
    match args.first().map(String::as_str) {
        Some("-h") | Some("--help") => {
            println!(
                "usage: rawtcp-pingpong [SIZES]\n       rawtcp-pingpong --listen ADDR [SIZES]\n       rawtcp-pingpong --server ADDR"
            );
            Ok(())
        }
        Some("--server") => {
            let addr = args.get(1).ok_or("--server needs ADDR")?;
            let s = TcpStream::connect(addr.as_str()).map_err(err)?;
            run_rank1(s).map_err(err)
        }
        Some("--listen") => {
            let addr = args.get(1).ok_or("--listen needs ADDR")?;
            let sizes = parse_sizes(args.get(2).map(String::as_str))?;
            let l = TcpListener::bind(addr.as_str()).map_err(err)?;
            let (s, _) = l.accept().map_err(err)?;
            run_rank0(s, &sizes).map_err(err)
        }
        first => {
            let sizes = parse_sizes(first)?;
            let l = TcpListener::bind("127.0.0.1:0").map_err(err)?;
            let addr = l.local_addr().map_err(err)?;
            let exe = std::env::current_exe().map_err(err)?;
            let mut child = Command::new(exe).arg("--server").arg(addr.to_string()).spawn().map_err(err)?;
            let (s, _) = l.accept().map_err(err)?;
            let res = run_rank0(s, &sizes).map_err(err);
            if res.is_err() {
                let _ = child.kill();
            }
            let status = child.wait().map_err(err)?;
            res?;
            if status.success() {
                Ok(())
            } else {
                Err(format!("rank 1 failed: {status}"))
            }
        }
    }
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rawtcp-pingpong: {e}");
            ExitCode::FAILURE
        }
    }
}
