//! What the cores' compact binary encodings (the k-monitor detector's and JEL's messages)
//! share: LEB128 integers, a bounds-checked `Reader` and the one [`DecodeError`].
//!
//! An integer has one form per value: an overlong encoding (a last byte of zero after others)
//! is refused, so that what a decoder accepts encodes back to the same bytes. Readers reject
//! anything malformed and never panic.

use std::fmt;

/// Why bytes are not a message (of any core's encoding).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecodeError {
    /// The bytes end inside the message.
    Truncated,
    /// Unknown message (or event) tag.
    BadTag(u8),
    /// An out-of-range field (address family, prefix, overlong integer, name not UTF-8 or
    /// too long, ...), named.
    BadField(&'static str),
    /// Bytes after the message.
    Trailing(usize),
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::Truncated => write!(f, "truncated message"),
            DecodeError::BadTag(t) => write!(f, "unknown message tag {t}"),
            DecodeError::BadField(w) => write!(f, "bad {w} in a message"),
            DecodeError::Trailing(n) => write!(f, "{n} bytes after a message"),
        }
    }
}

impl std::error::Error for DecodeError {}

/// Reads a message's fields from its bytes, front to back. The encodings add their own
/// fields (addresses, endpoints, events) in their modules.
pub(crate) struct Reader<'a> {
    pub(crate) b: &'a [u8],
    pub(crate) at: usize,
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

    pub(crate) fn bytes<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let s = self.b.get(self.at..self.at.saturating_add(N)).ok_or(DecodeError::Truncated)?;
        self.at += N;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    /// A LEB128 integer.
    pub(crate) fn var(&mut self) -> Result<u64, DecodeError> {
        get_var(self.b, &mut self.at).map_err(|e| match e {
            VarError::Truncated => DecodeError::Truncated,
            VarError::Bad => DecodeError::BadField("integer"),
        })
    }

    /// A count of elements, at most the bytes left (every element takes at least one).
    pub(crate) fn len(&mut self) -> Result<usize, DecodeError> {
        let n = self.var()?;
        if n > (self.b.len() - self.at) as u64 {
            return Err(DecodeError::Truncated);
        }
        Ok(n as usize)
    }

    /// Everything left (a nested message).
    pub(crate) fn rest(&mut self) -> &'a [u8] {
        let s = &self.b[self.at..];
        self.at = self.b.len();
        s
    }

    /// The end: nothing may follow.
    pub(crate) fn finish(&self) -> Result<(), DecodeError> {
        if self.at != self.b.len() {
            return Err(DecodeError::Trailing(self.b.len() - self.at));
        }
        Ok(())
    }
}

/// Appends `v` as LEB128.
pub(crate) fn put_var(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Why an integer could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum VarError {
    /// The bytes end inside it.
    Truncated,
    /// More than 64 bits, or an overlong form.
    Bad,
}

/// Reads a LEB128 integer at `*at`, advancing it.
pub(crate) fn get_var(b: &[u8], at: &mut usize) -> Result<u64, VarError> {
    let mut v = 0u64;
    for i in 0..10 {
        let byte = *b.get(*at).ok_or(VarError::Truncated)?;
        *at += 1;
        if i == 9 && byte > 1 {
            return Err(VarError::Bad);
        }
        v |= ((byte & 0x7f) as u64) << (7 * i);
        if byte & 0x80 == 0 {
            if byte == 0 && i > 0 {
                return Err(VarError::Bad);
            }
            return Ok(v);
        }
    }
    Err(VarError::Bad)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn one_form_per_value(v in any::<u64>(), bytes in proptest::collection::vec(any::<u8>(), 0..12)) {
            let mut out = Vec::new();
            put_var(&mut out, v);
            let mut at = 0;
            prop_assert_eq!(get_var(&out, &mut at), Ok(v));
            prop_assert_eq!(at, out.len());
            let mut at = 0;
            if let Ok(w) = get_var(&bytes, &mut at) {
                let mut again = Vec::new();
                put_var(&mut again, w);
                prop_assert_eq!(&again[..], &bytes[..at]);
            }
        }
    }

    #[test]
    fn overlong_and_oversized_forms_are_refused() {
        assert_eq!(get_var(&[0x81, 0x00], &mut 0), Err(VarError::Bad));
        assert_eq!(get_var(&[0xff; 9].iter().copied().chain([2]).collect::<Vec<_>>(), &mut 0), Err(VarError::Bad));
        assert_eq!(get_var(&[0x80], &mut 0), Err(VarError::Truncated));
        assert_eq!(get_var(&[0], &mut 0), Ok(0));
    }
}
