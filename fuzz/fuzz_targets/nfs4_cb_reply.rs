//! Replies to NFSv4.1 callbacks (RFC 8881 s20). See rpcrdma_fuzz::check_nfs4_cb_reply.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    rpcrdma_fuzz::check_nfs4_cb_reply(data);
});
