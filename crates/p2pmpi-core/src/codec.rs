//! LEB128 integers, shared by the cores' compact binary encodings (the k-monitor detector's
//! and JEL's messages). One form per value: an overlong encoding (a last byte of zero after
//! others) is refused, so that what a decoder accepts encodes back to the same bytes.

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
