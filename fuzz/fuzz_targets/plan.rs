//! Responder chunk planning (RFC 8166 s3.4-3.5) over decoded Call headers:
//! plan_reads layout, plan_reply header/echo/writes, and the requester's
//! reassemble_reply agreeing. See rpcrdma_fuzz::check_plan.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    rpcrdma_fuzz::check_plan(data);
});
