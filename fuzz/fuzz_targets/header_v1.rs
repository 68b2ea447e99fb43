//! Version 1 transport headers (RFC 8166 s4): decode, view invariants, byte-exact re-
//! encode, error replies. See rpcrdma_fuzz::check_header_version.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    rpcrdma_fuzz::check_header_version(data, 1);
});
