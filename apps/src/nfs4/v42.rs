//! NFSv4.2 operations (RFC 7862): ALLOCATE, DEALLOCATE, SEEK and an
//! intra-server, synchronous COPY, through the backend's
//! [`Backend::allocate`], [`Backend::deallocate`], [`Backend::seek`] and
//! [`Backend::copy`]; a backend that cannot answers NFS4ERR_NOTSUPP.
//!
//! A COPY copies at most [`MAX_COPY_BYTES`] per Call and says how much it
//! copied (`wr_count`): the client asks again for the rest, and a core is
//! never held longer than by a large WRITE (the Linux server bounds its
//! synchronous copies the same way).
//!
//! Each checks its stateid as READ (SEEK, COPY's source) or WRITE
//! (ALLOCATE, DEALLOCATE, COPY's destination) does. COPY copies the whole
//! range before answering (no `wr_callback_id`, `cr_synchronous` true) and
//! reports FILE_SYNC4: the backend makes the destination durable. An
//! inter-server COPY (a `ca_source_server` given) is NFS4ERR_NOTSUPP.
//!
//! [`Backend::allocate`]: crate::backend::Backend::allocate
//! [`Backend::deallocate`]: crate::backend::Backend::deallocate
//! [`Backend::seek`]: crate::backend::Backend::seek
//! [`Backend::copy`]: crate::backend::Backend::copy

use dataplane::service::ReplyBuilder;
use proto::nfs4::args::Op;
use proto::nfs4::*;

use super::ops::{backend, cur_real, current_sid, w_at, Real, R};
use super::{Ctx, St};
use crate::backend::{Attr, FileType};
use crate::nfs::auth::{MAY_READ, MAY_WRITE};

/// Bytes one synchronous COPY copies at most.
pub const MAX_COPY_BYTES: u64 = 4 << 20;

/// The regular file `o` for I/O of the kind `write`, with the stateid
/// valid for it.
fn io_file(cx: &Ctx<'_>, o: &Real, sid: Stateid, write: bool) -> Result<Attr, St> {
    let a = backend(cx, o).getattr(&o.fh)?;
    match a.ftype {
        FileType::Regular => {}
        FileType::Directory => return Err(St(NFS4ERR_ISDIR)),
        _ => return Err(St(NFS4ERR_WRONG_TYPE)),
    }
    if write && cx.sh.exports()[o.ex].read_only {
        return Err(St(NFS4ERR_ROFS));
    }
    let sid = current_sid(cx, sid)?;
    cx.sh.v4.check_io(&sid, &(o.ex, o.fh), write)?;
    if write {
        super::ops::deleg_conflict(cx, o.ex, &o.fh)?;
    } else {
        super::ops::deleg_look(cx, super::fh::Fh::Real { ex: o.ex, fh: o.fh }, None)?;
    }
    if !o.caller.may_io(&a, if write { MAY_WRITE } else { MAY_READ }) {
        return Err(St(NFS4ERR_ACCESS));
    }
    Ok(a)
}

/// A range of ALLOCATE or DEALLOCATE: empty, or past 2^64 - 1, is INVAL.
fn range(offset: u64, length: u64) -> Result<(), St> {
    match offset.checked_add(length) {
        Some(_) if length > 0 => Ok(()),
        _ => Err(St(NFS4ERR_INVAL)),
    }
}

pub(super) fn run(cx: &mut Ctx<'_>, op: Op<'_>, reply: &mut ReplyBuilder<'_>, at: usize, limit: usize) -> R {
    match op {
        Op::Allocate {
            stateid,
            offset,
            length,
        } => {
            let o = cur_real(cx, NFS4ERR_ISDIR)?;
            io_file(cx, &o, stateid, true)?;
            range(offset, length)?;
            backend(cx, &o).allocate(&o.fh, offset, length)?;
            Ok(0)
        }
        Op::Deallocate {
            stateid,
            offset,
            length,
        } => {
            let o = cur_real(cx, NFS4ERR_ISDIR)?;
            io_file(cx, &o, stateid, true)?;
            range(offset, length)?;
            backend(cx, &o).deallocate(&o.fh, offset, length)?;
            Ok(0)
        }
        Op::Seek { stateid, offset, what } => {
            let o = cur_real(cx, NFS4ERR_ISDIR)?;
            let a = io_file(cx, &o, stateid, false)?;
            // RFC 7862 s15.11.3: past the end NFS4ERR_NXIO (the backend
            // says so); nothing of the kind after `offset` is sr_eof.
            let found = backend(cx, &o).seek(&o.fh, offset, what == NFS4_CONTENT_DATA)?;
            let (eof, at_off) = match found {
                Some(x) => (x >= a.size, x),
                None => (true, a.size),
            };
            let mut w = w_at(reply, at, limit);
            w.put_bool(eof)?;
            w.put_u64(at_off)?;
            Ok(w.len())
        }
        Op::Copy {
            src_stateid,
            dst_stateid,
            src_offset,
            dst_offset,
            count,
            source_servers,
            ..
        } => {
            if source_servers > 0 {
                // An inter-server copy.
                return Err(St(NFS4ERR_NOTSUPP));
            }
            let saved = cx.saved.ok_or(St(NFS4ERR_NOFILEHANDLE))?;
            let src = super::ops::real_of_pub(cx, saved)?.ok_or(St(NFS4ERR_ISDIR))?;
            let dst = cur_real(cx, NFS4ERR_ISDIR)?;
            if cx.sh.exports()[src.ex].backend != cx.sh.exports()[dst.ex].backend {
                return Err(St(NFS4ERR_XDEV));
            }
            let sa = io_file(cx, &src, src_stateid, false)?;
            io_file(cx, &dst, dst_stateid, true)?;
            // RFC 7862 s15.2.3: the source range must lie in the file.
            let end = src_offset.checked_add(count).ok_or(St(NFS4ERR_INVAL))?;
            if src_offset > sa.size || (count != 0 && end > sa.size) {
                return Err(St(NFS4ERR_INVAL));
            }
            let n = if count == 0 { sa.size - src_offset } else { count }.min(MAX_COPY_BYTES);
            if src.fh == dst.fh && n > 0 {
                let overlap = src_offset < dst_offset.saturating_add(n) && dst_offset < src_offset + n;
                if overlap {
                    return Err(St(NFS4ERR_INVAL));
                }
            }
            let copied = backend(cx, &dst).copy(&src.fh, src_offset, &dst.fh, dst_offset, n)?;
            let mut w = w_at(reply, at, limit);
            // write_response4: no callback id (synchronous), the count,
            // FILE_SYNC4, the write verifier; then copy_requirements4.
            w.put_u32(0)?;
            w.put_u64(copied)?;
            w.put_u32(FILE_SYNC4)?;
            w.put_bytes(&cx.sh.write_verifier())?;
            w.put_bool(true)?;
            w.put_bool(true)?;
            Ok(w.len())
        }
        _ => Err(St(NFS4ERR_NOTSUPP)),
    }
}
