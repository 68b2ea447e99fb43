//! Whole NFS and MOUNT Calls through the gateway's service, and its argument
//! decoders. See rpcrdma_fuzz::nfs_service.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    rpcrdma_fuzz::check_nfs_service(data);
});
