//! Grid messages of the supernode and reservation families, decoded as the secure channel
//! does (postcard); the first byte chooses the type.
#![no_main]
use libfuzzer_sys::fuzz_target;
use p2pmpi_wire::grid::{RsRequest, RsResponse, SnRequest, SnResponse};

fuzz_target!(|data: &[u8]| {
    let Some((&which, body)) = data.split_first() else { return };
    match which % 4 {
        0 => drop(postcard::from_bytes::<SnRequest>(body)),
        1 => drop(postcard::from_bytes::<SnResponse>(body)),
        2 => drop(postcard::from_bytes::<RsRequest>(body)),
        _ => drop(postcard::from_bytes::<RsResponse>(body)),
    }
});
