//! rpcrdma-dump's input paths: hex, header bytes, header JSON, private data bytes and
//! JSON. See rpcrdma_fuzz::check_dump_input.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    rpcrdma_fuzz::check_dump_input(data);
});
