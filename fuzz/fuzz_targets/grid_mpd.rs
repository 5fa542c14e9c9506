//! Grid messages of the MPD family (requests, responses, job events and job control), decoded
//! as the secure channel does (postcard); the first byte chooses the type.
#![no_main]
use libfuzzer_sys::fuzz_target;
use p2pmpi_wire::grid::{JobControl, JobEvent, MpdRequest, MpdResponse};

fuzz_target!(|data: &[u8]| {
    let Some((&which, body)) = data.split_first() else { return };
    match which % 4 {
        0 => drop(postcard::from_bytes::<MpdRequest>(body)),
        1 => drop(postcard::from_bytes::<MpdResponse>(body)),
        2 => drop(postcard::from_bytes::<JobEvent>(body)),
        _ => drop(postcard::from_bytes::<JobControl>(body)),
    }
});
