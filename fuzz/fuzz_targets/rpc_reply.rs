//! ONC RPC reply headers (RFC 5531 s9). See rpcrdma_fuzz::check_rpc_reply.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    rpcrdma_fuzz::check_rpc_reply(data);
});
