//! `p2pmpi::failure::decode` of failure-detector datagrams. The job token is taken from the
//! input's first 8 bytes half of the time, so the fuzzer reaches the postcard-decoded message.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&flag, rest)) = data.split_first() else { return };
    let token = if flag & 1 == 1 && rest.len() >= 12 {
        u64::from_le_bytes(rest[4..12].try_into().unwrap())
    } else {
        0x5eed_0f_f00d
    };
    let _ = p2pmpi::failure::decode(token, rest);
});
