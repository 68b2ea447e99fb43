//! RFC 8797 CM Private Data search and decode. See rpcrdma_fuzz::check_private_data.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    rpcrdma_fuzz::check_private_data(data);
});
