//! NFSv4.2 operations (RFC 7862): ALLOCATE, DEALLOCATE, SEEK and COPY.

use dataplane::service::ReplyBuilder;
use proto::nfs4::args::Op;
use proto::nfs4::*;

use super::ops::R;
use super::{Ctx, St};

pub(super) fn run(cx: &mut Ctx<'_>, op: Op<'_>, reply: &mut ReplyBuilder<'_>, at: usize, limit: usize) -> R {
    let _ = (cx, op, reply, at, limit);
    Err(St(NFS4ERR_NOTSUPP))
}
