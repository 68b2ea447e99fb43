//! Callback Calls as a client reads them (RFC 8881 s20). See rpcrdma_fuzz::check_nfs4_cb_call.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    rpcrdma_fuzz::check_nfs4_cb_call(data);
});
