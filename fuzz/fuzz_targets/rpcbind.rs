//! The rpcbind responder (PMAP v2, RPCB v3/v4). See rpcrdma_fuzz::check_rpcbind.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    rpcrdma_fuzz::check_rpcbind(data);
});
