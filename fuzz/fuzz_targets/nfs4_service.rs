//! Whole NFSv4.1 COMPOUNDs through the gateway's service with a live
//! session. See rpcrdma_fuzz::nfs4_service.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    rpcrdma_fuzz::check_nfs4_service(data);
});
