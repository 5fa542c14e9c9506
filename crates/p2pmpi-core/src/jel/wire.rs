//! The binary pieces both implementations' messages are made of: LEB128 integers, addresses,
//! names and events. Readers reject anything malformed and never panic.

use super::{Addr, Event, MemberId};
use std::fmt;
// Address values only (a member's address and its encoding): the core opens no socket and
// resolves no name; the driver does all I/O and hands addresses in.
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// The longest election name accepted on the wire.
pub const MAX_NAME: usize = 1024;

/// Why bytes are not a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecodeError {
    /// The bytes end inside the message.
    Truncated,
    /// Unknown message or event tag.
    BadTag(u8),
    /// An out-of-range field (address family, overlong integer, name not UTF-8 or too long).
    BadField(&'static str),
    /// Bytes after the message.
    Trailing(usize),
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::Truncated => write!(f, "truncated JEL message"),
            DecodeError::BadTag(t) => write!(f, "unknown JEL tag {t}"),
            DecodeError::BadField(w) => write!(f, "bad {w} in a JEL message"),
            DecodeError::Trailing(n) => write!(f, "{n} bytes after a JEL message"),
        }
    }
}

impl std::error::Error for DecodeError {}

pub(crate) use crate::codec::put_var;

pub(crate) fn put_addr(out: &mut Vec<u8>, a: &Addr) {
    match a.ip() {
        IpAddr::V4(ip) => {
            out.push(4);
            out.extend_from_slice(&ip.octets());
        }
        IpAddr::V6(ip) => {
            out.push(6);
            out.extend_from_slice(&ip.octets());
        }
    }
    out.extend_from_slice(&a.port().to_be_bytes());
}

pub(crate) fn put_name(out: &mut Vec<u8>, s: &str) {
    put_var(out, s.len() as u64);
    out.extend_from_slice(s.as_bytes());
}

pub(crate) fn put_id(out: &mut Vec<u8>, id: MemberId) {
    out.extend_from_slice(&id.to_le_bytes());
}

pub(crate) fn put_event(out: &mut Vec<u8>, e: &Event) {
    match e {
        Event::Joined { id, addr } => {
            out.push(1);
            put_id(out, *id);
            put_addr(out, addr);
        }
        Event::Left { id } => {
            out.push(2);
            put_id(out, *id);
        }
        Event::Died { id } => {
            out.push(3);
            put_id(out, *id);
        }
        Event::Elected { name, winner } => {
            out.push(4);
            put_name(out, name);
            put_id(out, *winner);
        }
    }
}

pub(crate) struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(b: &'a [u8]) -> Reader<'a> {
        Reader { b, at: 0 }
    }

    pub(crate) fn u8(&mut self) -> Result<u8, DecodeError> {
        let v = *self.b.get(self.at).ok_or(DecodeError::Truncated)?;
        self.at += 1;
        Ok(v)
    }

    fn bytes<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let s = self.b.get(self.at..self.at.saturating_add(N)).ok_or(DecodeError::Truncated)?;
        self.at += N;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    pub(crate) fn var(&mut self) -> Result<u64, DecodeError> {
        crate::codec::get_var(self.b, &mut self.at).map_err(|e| match e {
            crate::codec::VarError::Truncated => DecodeError::Truncated,
            crate::codec::VarError::Bad => DecodeError::BadField("integer"),
        })
    }

    pub(crate) fn id(&mut self) -> Result<MemberId, DecodeError> {
        Ok(u64::from_le_bytes(self.bytes::<8>()?))
    }

    /// A count of elements, at most the bytes left (every element takes at least one).
    pub(crate) fn len(&mut self) -> Result<usize, DecodeError> {
        let n = self.var()?;
        if n > (self.b.len() - self.at) as u64 {
            return Err(DecodeError::Truncated);
        }
        Ok(n as usize)
    }

    pub(crate) fn bool(&mut self) -> Result<bool, DecodeError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(DecodeError::BadField("flag")),
        }
    }

    pub(crate) fn addr(&mut self) -> Result<Addr, DecodeError> {
        let ip = match self.u8()? {
            4 => IpAddr::V4(Ipv4Addr::from(self.bytes::<4>()?)),
            6 => IpAddr::V6(Ipv6Addr::from(self.bytes::<16>()?)),
            _ => return Err(DecodeError::BadField("address family")),
        };
        let port = u16::from_be_bytes(self.bytes::<2>()?);
        Ok(SocketAddr::new(ip, port))
    }

    pub(crate) fn name(&mut self) -> Result<String, DecodeError> {
        let n = self.len()?;
        if n > MAX_NAME {
            return Err(DecodeError::BadField("name length"));
        }
        let s = &self.b[self.at..self.at + n];
        self.at += n;
        String::from_utf8(s.to_vec()).map_err(|_| DecodeError::BadField("name"))
    }

    pub(crate) fn event(&mut self) -> Result<Event, DecodeError> {
        Ok(match self.u8()? {
            1 => {
                let id = self.id()?;
                Event::Joined { id, addr: self.addr()? }
            }
            2 => Event::Left { id: self.id()? },
            3 => Event::Died { id: self.id()? },
            4 => {
                let name = self.name()?;
                Event::Elected { name, winner: self.id()? }
            }
            t => return Err(DecodeError::BadTag(t)),
        })
    }

    /// Everything left (a nested message).
    pub(crate) fn rest(&mut self) -> &'a [u8] {
        let s = &self.b[self.at..];
        self.at = self.b.len();
        s
    }

    pub(crate) fn finish(&self) -> Result<(), DecodeError> {
        if self.at != self.b.len() {
            return Err(DecodeError::Trailing(self.b.len() - self.at));
        }
        Ok(())
    }
}

#[cfg(test)]
pub(crate) mod arb {
    use super::*;
    use proptest::prelude::*;

    pub fn addr() -> impl Strategy<Value = Addr> {
        (any::<bool>(), any::<[u8; 4]>(), any::<[u8; 16]>(), any::<u16>()).prop_map(|(v6, a, b, port)| {
            if v6 {
                SocketAddr::new(IpAddr::V6(Ipv6Addr::from(b)), port)
            } else {
                SocketAddr::new(IpAddr::V4(Ipv4Addr::from(a)), port)
            }
        })
    }

    pub fn name() -> impl Strategy<Value = String> {
        "[a-zé0-9_]{0,12}"
    }

    pub fn event() -> impl Strategy<Value = Event> {
        prop_oneof![
            (any::<u64>(), addr()).prop_map(|(id, addr)| Event::Joined { id, addr }),
            any::<u64>().prop_map(|id| Event::Left { id }),
            any::<u64>().prop_map(|id| Event::Died { id }),
            (name(), any::<u64>()).prop_map(|(name, winner)| Event::Elected { name, winner }),
        ]
    }
}
