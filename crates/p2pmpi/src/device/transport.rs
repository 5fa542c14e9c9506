//! The transport's poll loop and table of connections: the mio poll, its events, the
//! listening socket and accepting ([`Poller`]), and the connections by their id ([`Conns`]).
//! It tells the engine which connections (by id) are readable or writable and whether new
//! connections wait to be accepted; it moves bytes and knows no MPI matching and nothing of
//! the layers above the engine.

use super::conn::Conn;
use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};
use std::io;
use std::net::SocketAddr;
use std::ops::{Deref, DerefMut};
use std::time::Duration;

/// The table of connections, by connection id: the index a connection keeps for its life,
/// which is also its token in the poll; an id freed by [`Conns::remove`] is given to a later
/// connection, never the id of a connection taken out of its slot for a while. Boxed: a
/// connection is taken out of its slot while its frames are handled, then put back, and
/// moving the whole struct twice per read was a tenth of an 8-byte message's cost. Besides
/// the slots (read and written as a slice), the two lists of connections the poll loop reads
/// whatever the kernel says.
pub(crate) struct Conns {
    slots: Vec<Option<Box<Conn>>>,
    /// Ids of connections removed for good, free for new ones. An empty slot is not free by
    /// itself: while a connection's frames are handled its slot is empty, and an accept in
    /// a nested progress call must not take its id.
    free: Vec<usize>,
    /// Connections left readable when their read budget ran out (epoll is edge-triggered:
    /// no new event comes for data already there), read again by the next progress call.
    pub unread: Vec<usize>,
    /// The list `unread` was, kept empty for its room while the connections it named are
    /// read ([`Conns::take_unread`]): the two lists take turns, and a poll round allocates
    /// nothing.
    spare: Vec<usize>,
    /// Connections whose frames travel through shared-memory rings (looked at on every
    /// progress call).
    pub rings: Vec<usize>,
}

impl Deref for Conns {
    type Target = [Option<Box<Conn>>];
    #[inline(always)]
    fn deref(&self) -> &Self::Target {
        &self.slots
    }
}

impl DerefMut for Conns {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.slots
    }
}

impl Conns {
    pub(crate) fn new() -> Conns {
        Conns { slots: Vec::new(), free: Vec::new(), unread: Vec::new(), spare: Vec::new(), rings: Vec::new() }
    }

    /// The id the next new connection gets ([`Conns::fill`]): the last one freed, or a new
    /// one at the end of the table.
    pub(crate) fn vacant(&self) -> usize {
        self.free.last().copied().unwrap_or(self.slots.len())
    }

    /// Connection `conn` takes id `cid`, which [`Conns::vacant`] gave.
    pub(crate) fn fill(&mut self, cid: usize, conn: Box<Conn>) {
        if self.free.last() == Some(&cid) {
            self.free.pop();
        } else {
            debug_assert_eq!(cid, self.slots.len(), "connection id {cid} was not vacant");
            self.slots.push(None);
        }
        self.slots[cid] = Some(conn);
    }

    /// Connection `cid` leaves the table for good: taken out of its slot, its stream no
    /// longer watched by `poller`, its ring no longer looked at. `None` if the slot is empty.
    pub(crate) fn remove(&mut self, cid: usize, poller: &Poller) -> Option<Box<Conn>> {
        self.rings.retain(|c| *c != cid);
        let mut conn = self.slots.get_mut(cid)?.take()?;
        self.free.push(cid);
        poller.deregister(&mut conn.stream);
        Some(conn)
    }

    /// Connection `cid` is read again by the next progress call (its read budget ran out).
    #[inline]
    pub(crate) fn read_later(&mut self, cid: usize) {
        if !self.unread.contains(&cid) {
            self.unread.push(cid);
        }
    }

    /// The connections to read again, taken out (`unread` starts empty, with the room of
    /// the list given back last); give the list back with [`Conns::give_back_unread`].
    #[inline]
    pub(crate) fn take_unread(&mut self) -> Vec<usize> {
        let spare = std::mem::take(&mut self.spare);
        std::mem::replace(&mut self.unread, spare)
    }

    /// The list [`Conns::take_unread`] gave, once its connections were read: kept for its room.
    #[inline]
    pub(crate) fn give_back_unread(&mut self, mut list: Vec<usize>) {
        list.clear();
        self.spare = list;
    }

    /// Connection `cid`'s frames travel through shared memory from now on.
    pub(crate) fn watch_ring(&mut self, cid: usize) {
        if !self.rings.contains(&cid) {
            self.rings.push(cid);
        }
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    fn conn(to: SocketAddr) -> Box<Conn> {
        let std_stream = std::net::TcpStream::connect(to).unwrap();
        std_stream.set_nonblocking(true).unwrap();
        Box::new(Conn::accepted(TcpStream::from_std(std_stream)))
    }

    #[test]
    fn an_id_is_reused_only_once_its_connection_is_removed_never_while_it_is_taken_out() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let to = listener.local_addr().unwrap();
        let poller = Poller::new(None).unwrap();
        let mut conns = Conns::new();
        for expected in 0..3 {
            let cid = conns.vacant();
            assert_eq!(cid, expected);
            conns.fill(cid, conn(to));
        }
        // Connection 1 is taken out while its frames are handled: its id is not free.
        let out = conns[1].take().unwrap();
        assert_eq!(conns.vacant(), 3, "a new connection must not take the id of one taken out");
        conns[1] = Some(out);
        // Removed for good, its id goes to the next connection.
        assert!(conns.remove(1, &poller).is_some());
        assert!(conns.remove(1, &poller).is_none(), "removing twice gives nothing");
        assert_eq!(conns.vacant(), 1);
        conns.fill(1, conn(to));
        assert_eq!(conns.vacant(), 3);
        assert!(conns.iter().all(Option::is_some));
    }
}
