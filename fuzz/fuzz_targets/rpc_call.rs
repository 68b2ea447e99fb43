//! ONC RPC call headers (RFC 5531 s9), AUTH_SYS and RPCSEC_GSS credentials. See
//! rpcrdma_fuzz::check_rpc_call.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    rpcrdma_fuzz::check_rpc_call(data);
});
