//! Grid messages of the file-transfer family, decoded as the secure channel does (postcard);
//! the first byte chooses the type.
#![no_main]
use libfuzzer_sys::fuzz_target;
use p2pmpi_wire::grid::{FtRequest, FtResponse};

fuzz_target!(|data: &[u8]| {
    let Some((&which, body)) = data.split_first() else { return };
    match which % 2 {
        0 => drop(postcard::from_bytes::<FtRequest>(body)),
        _ => drop(postcard::from_bytes::<FtResponse>(body)),
    }
});
