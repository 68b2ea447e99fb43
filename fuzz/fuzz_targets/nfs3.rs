//! NFSv3 binding and argument/result decoders. See rpcrdma_fuzz::check_nfs3.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    rpcrdma_fuzz::check_nfs3(data);
});
