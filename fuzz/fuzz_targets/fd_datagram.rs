//! `p2pmpi::failure::decode` of failure-detector datagrams. Half of the inputs get a valid
//! MAC on the test key appended, so the fuzzer reaches the postcard-decoded message; the
//! others exercise the MAC check itself.
#![no_main]
use libfuzzer_sys::fuzz_target;
use p2pmpi_wire::auth::JobKey;

fuzz_target!(|data: &[u8]| {
    let Some((&flag, rest)) = data.split_first() else { return };
    let key = JobKey::from_bytes([0x5e; 32]);
    if flag & 1 == 1 {
        let mut signed = rest.to_vec();
        let mac = key.datagram_mac(&signed);
        signed.extend_from_slice(&mac);
        let _ = p2pmpi::failure::decode(&key, &signed);
    } else {
        let _ = p2pmpi::failure::decode(&key, rest);
    }
});
