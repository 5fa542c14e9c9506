//! The binary pieces both implementations' messages are made of: LEB128 integers, addresses,
//! names and events. Readers reject anything malformed and never panic.

use super::{Addr, Event, MemberId};
// Address values only (a member's address and its encoding): the core opens no socket and
// resolves no name; the driver does all I/O and hands addresses in.
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// The longest election name accepted on the wire.
pub const MAX_NAME: usize = 1024;

pub use crate::codec::DecodeError;
pub(crate) use crate::codec::Reader;

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

/// JEL's fields.
impl Reader<'_> {
    /// A member id.
    pub(crate) fn member_id(&mut self) -> Result<MemberId, DecodeError> {
        Ok(u64::from_le_bytes(self.bytes::<8>()?))
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
                let id = self.member_id()?;
                Event::Joined { id, addr: self.addr()? }
            }
            2 => Event::Left { id: self.member_id()? },
            3 => Event::Died { id: self.member_id()? },
            4 => {
                let name = self.name()?;
                Event::Elected { name, winner: self.member_id()? }
            }
            t => return Err(DecodeError::BadTag(t)),
        })
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
