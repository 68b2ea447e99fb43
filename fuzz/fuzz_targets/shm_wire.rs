//! The shm fabric's connection-setup messages. See rpcrdma_fuzz::check_shm_wire.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    rpcrdma_fuzz::check_shm_wire(data);
});
