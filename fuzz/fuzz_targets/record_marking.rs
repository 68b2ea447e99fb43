//! TCP record marking reassembly (RFC 5531 s11) against a whole-buffer reference. See
//! rpcrdma_fuzz::check_record_marking.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    rpcrdma_fuzz::check_record_marking(data);
});
