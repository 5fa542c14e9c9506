//! The transport's poll loop: the mio poll, its events, the listening socket and accepting.
//! It tells the engine which connections (by their index in the engine's table) are readable
//! or writable and whether new connections wait to be accepted; it moves bytes and knows no
//! MPI matching and nothing of the layers above the engine.

use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};
use std::io;
use std::net::SocketAddr;
use std::time::Duration;

/// The listener's token: no connection has this index.
const LISTENER: Token = Token(usize::MAX);

/// A connection made ready by a poll: its index, whether it is readable (or closed, or in
/// error: a read tells which) and whether it is writable.
pub(crate) type Ready = (usize, bool, bool);

/// The poll over the listener and the connections.
pub(crate) struct Poller {
    poll: Poll,
    events: Events,
    listener: Option<TcpListener>,
    /// Reused buffer of ready connections (no allocation per poll).
    ready: Vec<Ready>,
}

impl Poller {
    /// A poll watching `listener` (made non-blocking) for new connections.
    pub(crate) fn new(listener: Option<std::net::TcpListener>) -> io::Result<Self> {
        let poll = Poll::new()?;
        let listener = match listener {
            Some(l) => {
                l.set_nonblocking(true)?;
                let mut l = TcpListener::from_std(l);
                poll.registry().register(&mut l, LISTENER, Interest::READABLE)?;
                Some(l)
            }
            None => None,
        };
        Ok(Poller { poll, events: Events::with_capacity(256), listener, ready: Vec::with_capacity(256) })
    }

    /// The address the listener is bound to.
    pub(crate) fn local_addr(&self) -> Option<SocketAddr> {
        self.listener.as_ref().and_then(|l| l.local_addr().ok())
    }

    #[cfg(test)]
    pub(crate) fn listener(&self) -> Option<&TcpListener> {
        self.listener.as_ref()
    }

    /// Watches connection `cid`'s stream for reading.
    pub(crate) fn register(&self, stream: &mut TcpStream, cid: usize) -> io::Result<()> {
        self.poll.registry().register(stream, Token(cid), Interest::READABLE)
    }

    /// Watches connection `cid`'s stream for reading, and for writing if `write`.
    pub(crate) fn reregister(&self, stream: &mut TcpStream, cid: usize, write: bool) {
        let i = if write { Interest::READABLE | Interest::WRITABLE } else { Interest::READABLE };
        let _ = self.poll.registry().reregister(stream, Token(cid), i);
    }

    /// Stops watching a stream.
    pub(crate) fn deregister(&self, stream: &mut TcpStream) {
        let _ = self.poll.registry().deregister(stream);
    }

    /// Waits up to `timeout` for readiness. Returns the ready connections (hand the vector
    /// back with [`Poller::give_back`] so that it is reused) and whether new connections wait
    /// to be accepted ([`Poller::accept`]).
    pub(crate) fn wait(&mut self, timeout: Duration) -> io::Result<(Vec<Ready>, bool)> {
        self.poll.poll(&mut self.events, Some(timeout))?;
        let mut ready = std::mem::take(&mut self.ready);
        ready.clear();
        let mut accept = false;
        for ev in self.events.iter() {
            if ev.token() == LISTENER {
                accept = true;
                continue;
            }
            ready.push((ev.token().0, ev.is_readable() || ev.is_read_closed() || ev.is_error(), ev.is_writable()));
        }
        Ok((ready, accept))
    }

    /// Returns the vector [`Poller::wait`] gave, for the next poll.
    pub(crate) fn give_back(&mut self, ready: Vec<Ready>) {
        self.ready = ready;
    }

    /// Accepts one new connection, tuned for the job's links (no Nagle, loopback congestion
    /// control): `Ok(None)` when none waits (or there is no listener).
    pub(crate) fn accept(&self) -> io::Result<Option<TcpStream>> {
        let Some(l) = self.listener.as_ref() else { return Ok(None) };
        loop {
            match l.accept() {
                Ok((stream, _addr)) => {
                    let _ = stream.set_nodelay(true);
                    super::conn::tune_loopback_link(socket2::SockRef::from(&stream));
                    return Ok(Some(stream));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }
}
