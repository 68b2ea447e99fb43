//! Version 2 transport headers (draft-cel-nfsv4-rpcrdma-version-two-09 s5-6): decode,
//! view invariants, re-encode, error replies. See rpcrdma_fuzz::check_header_version.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    rpcrdma_fuzz::check_header_version(data, 2);
});
