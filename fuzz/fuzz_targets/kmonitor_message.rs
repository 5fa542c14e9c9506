//! `p2pmpi_core::kmonitor::decode` of the k-monitor detector's messages: never panics, and
//! what it accepts encodes back to the same bytes (one form per message).
#![no_main]
use libfuzzer_sys::fuzz_target;
use p2pmpi_core::kmonitor::{decode, encode};

fuzz_target!(|data: &[u8]| {
    if let Ok(m) = decode(data) {
        assert_eq!(encode(&m), data, "{m:?}");
    }
});
