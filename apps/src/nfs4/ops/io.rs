//! READ, WRITE and COMMIT (RFC 8881 s18.22, s18.32, s18.3): the operations
//! that do backend I/O. Where the Call may be deferred
//! ([`Ctx::token`](super::Ctx)) and the backend's I/O completes later
//! (`uring`, `nvme`), the I/O is submitted under the Call's token and the
//! reply deferred, as NFSv3's are ([`crate::nfs::defer`]): the COMPOUND
//! suspends at this operation ([`crate::nfs4::suspend`]) and runs it again
//! when the I/O completes, taking the completion instead of submitting.
//! Otherwise (TCP, `mem`, a full table) the I/O runs synchronously and waits
//! for its own completion only.

use proto::nfs4::*;
use proto::xdr::{pad_len, roundup};

use dataplane::service::ReplyBuilder;

use super::{cur_real, io_file, real_attr, w_at, Ctx, Real, St, R};
use crate::backend::{Attr, FileType, FsError, FsResult, IoDesc, IoDone, IoOp, Stable};
use crate::nfs::CoreState;

/// Submit `io` deferred under `token` on backend `bi`'s channel, or do it
/// now (`token` is `None`, or the channel's queue is full). `Ok(None)`: the
/// reply is deferred.
///
/// # Safety
/// `io.buf` is the engine's data buffer of this Call (kept while it is
/// deferred) or none; with no token, it is valid until this returns.
unsafe fn submit_or_wait(
    st: &mut CoreState,
    bi: usize,
    token: Option<dataplane::service::DeferToken>,
    io: IoDesc,
    pre: Attr,
    prev: Option<IoDone>,
    reply: &mut ReplyBuilder<'_>,
) -> FsResult<Option<IoDone>> {
    let CoreState { channels, deferred, .. } = st;
    let ch = &mut *channels[bi];
    if let Some(t) = token.filter(|_| ch.completes_later() && deferred.has_room()) {
        // SAFETY: the caller's contract.
        match unsafe { deferred.submit_after(ch, bi, t, io, pre, prev, reply) } {
            Ok(()) => return Ok(None),
            // The channel's queue is full: wait for this I/O instead (a
            // COMPOUND cannot be run again from the start once SEQUENCE ran).
            Err(FsError::Jukebox) => {}
            Err(e) => return Err(e),
        }
    }
    // SAFETY: the caller's contract.
    unsafe { deferred.io_sync(bi, ch, io) }.map(Some)
}

/// READ: into the engine's data buffer when it ends the COMPOUND (the DDP
/// item the engine writes into the client's Write chunk), deferred where it
/// may be; else into the head, marked DDP-eligible, synchronously.
#[allow(clippy::too_many_arguments)]
pub(super) fn read(
    cx: &mut Ctx<'_>,
    st: &mut CoreState,
    reply: &mut ReplyBuilder<'_>,
    at: usize,
    limit: usize,
    sid: Stateid,
    offset: u64,
    count: u32,
) -> R {
    let sh = cx.sh;
    let resumed = st.deferred.resumed_for(cx.token);
    let (o, a) = match resumed {
        // Checked before the read was submitted.
        Some(r) => (cur_real(cx, NFS4ERR_ISDIR)?, r.pre),
        None => io_file(cx, st, sid, false)?,
    };
    let bi = sh.exports()[o.ex].backend;
    let count = count.min(sh.max_io_bytes()) as usize;
    if cx.last && reply.data_capacity() > 0 {
        let n = count.min(reply.data_capacity());
        let (got, eof) = match (resumed, reply.data_mut()) {
            (Some(r), _) => r.done.result.map(|k| (k, r.done.eof))?,
            (None, Some(buf)) if n > 0 => {
                let io = IoDesc::read(&o.fh, offset, &mut buf[..n], 0)?;
                // SAFETY: `buf` is the engine's data buffer of this Call.
                match unsafe { submit_or_wait(st, bi, cx.token, io, a, None, reply)? } {
                    None => {
                        st.stats.deferred_reads += 1;
                        return Ok(0);
                    }
                    Some(d) => d.result.map(|k| (k, d.eof))?,
                }
            }
            _ => (0, offset >= a.size),
        };
        let got = (got as usize).min(n);
        let mut w = w_at(reply, at, limit);
        w.put_bool(eof)?;
        w.put_u32(got as u32)?;
        let len = w.len();
        reply.set_data(got, true);
        return Ok(len);
    }
    // eof, length word, data, padding: in the head. Deferred like the
    // last READ's: the data goes into the head buffer after the results so
    // far, which the engine keeps, as the service left it, while the Call
    // is deferred, and gives back when it resumes (`Service::resume`); the
    // COMPOUND suspends here and, resumed, puts back only the results
    // before this operation, so the data stays where it was read.
    let room = limit.saturating_sub(at + 8);
    let n = count.min(room & !3);
    let head = reply.head_mut();
    let (got, eof) = match resumed {
        Some(r) => r.done.result.map(|k| (k, r.done.eof))?,
        None if n > 0 => {
            let io = IoDesc::read(&o.fh, offset, &mut head[at + 8..at + 8 + n], 0)?;
            // SAFETY: the head buffer of this Call, which the engine keeps
            // untouched while the Call is deferred; with no token (or no
            // room), the read is done before this returns, and the head
            // slice is not touched meanwhile.
            match unsafe { submit_or_wait(st, bi, cx.token, io, a, None, reply)? } {
                Some(d) => d.result.map(|k| (k, d.eof))?,
                None => {
                    st.stats.deferred_reads += 1;
                    return Ok(0);
                }
            }
        }
        None => (0, offset >= a.size),
    };
    let got = (got as usize).min(n);
    let head = reply.head_mut();
    head[at..at + 4].copy_from_slice(&u32::from(eof).to_be_bytes());
    head[at + 4..at + 8].copy_from_slice(&(got as u32).to_be_bytes());
    head[at + 8 + got..at + 8 + got + pad_len(got)].fill(0);
    // RFC 8267 s6.1: READ data is DDP-eligible wherever it is.
    let _ = reply.add_head_item(at + 8, got);
    Ok(8 + roundup(got))
}

/// WRITE: from the Read chunk the engine pulled (or the inline arguments),
/// without a copy; a FILE_SYNC or DATA_SYNC WRITE whose write was not that
/// stable is flushed before the reply, deferred as the write is.
#[allow(clippy::too_many_arguments)]
pub(super) fn write(
    cx: &mut Ctx<'_>,
    st: &mut CoreState,
    reply: &mut ReplyBuilder<'_>,
    at: usize,
    limit: usize,
    sid: Stateid,
    offset: u64,
    stable: u32,
    data: &[u8],
) -> R {
    let sh = cx.sh;
    let want = match stable {
        UNSTABLE4 => Stable::Unstable,
        DATA_SYNC4 => Stable::DataSync,
        _ => Stable::FileSync,
    };
    let data = &data[..data.len().min(sh.max_io_bytes() as usize)];
    let resumed = st.deferred.resumed_for(cx.token);
    let (o, a): (Real, Attr) = match resumed {
        Some(r) => (cur_real(cx, NFS4ERR_ISDIR)?, r.pre),
        None => {
            let o = cur_real(cx, NFS4ERR_ISDIR)?;
            if sh.exports()[o.ex].read_only {
                return Err(St(NFS4ERR_ROFS));
            }
            let (_, a) = io_file(cx, st, sid, true)?;
            if offset.checked_add(data.len() as u64).is_none() {
                return Err(St(NFS4ERR_INVAL));
            }
            (o, a)
        }
    };
    let bi = sh.exports()[o.ex].backend;
    let res: FsResult<(u32, Stable)> = (|| {
        let written = match resumed {
            // The flush that followed the write: the write's count.
            Some(r) if r.prev.is_some() => {
                let w = r.prev.unwrap_or(r.done);
                return w.result.and_then(|k| r.done.result.map(|_| (k, want)));
            }
            Some(r) => r.done.result.map(|k| (k, r.done.committed))?,
            None if data.is_empty() => (0, want),
            None => {
                let io = IoDesc::write(&o.fh, offset, data, want, 0)?;
                // SAFETY: `data` lies in this Call's receive or Read-chunk
                // buffer, which the engine keeps while the Call is
                // deferred; a write only reads it.
                match unsafe { submit_or_wait(st, bi, cx.token, io, a, None, reply)? } {
                    None => {
                        st.stats.deferred_writes += 1;
                        return Ok((0, want));
                    }
                    Some(d) => d.result.map(|k| (k, d.committed))?,
                }
            }
        };
        let (k, got) = written;
        if got >= want {
            return Ok(written);
        }
        // A stable write the backend did not make that stable: flush it.
        let io = IoDesc {
            op: if want == Stable::FileSync {
                IoOp::Flush
            } else {
                IoOp::FlushData
            },
            ..IoDesc::flush(&o.fh, 0)
        };
        let prev = IoDone {
            result: Ok(k),
            committed: got,
            ..IoDone::default()
        };
        // SAFETY: a flush has no buffer.
        match unsafe { submit_or_wait(st, bi, cx.token, io, a, Some(prev), reply)? } {
            None => {
                st.stats.deferred_flushes += 1;
                Ok((0, want))
            }
            Some(d) => d.result.map(|_| (k, want)),
        }
    })();
    if reply.is_deferred() {
        return Ok(0);
    }
    let (n, committed) = match res {
        Ok(v) => v,
        Err(e) => {
            // A stable WRITE that failed may have failed in its flush,
            // which can lose earlier UNSTABLE data: a new verifier.
            if want != Stable::Unstable {
                sh.writeback_failed();
            }
            return Err(e.into());
        }
    };
    let mut w = w_at(reply, at, limit);
    w.put_u32(n)?;
    w.put_u32(match committed {
        Stable::Unstable => UNSTABLE4,
        Stable::DataSync => DATA_SYNC4,
        Stable::FileSync => FILE_SYNC4,
    })?;
    w.put_bytes(&sh.write_verifier())?;
    Ok(w.len())
}

/// COMMIT: flush the file through this core's channel (the whole file; the
/// range is advisory), deferred where the Call may be.
pub(super) fn commit(cx: &mut Ctx<'_>, st: &mut CoreState, reply: &mut ReplyBuilder<'_>, at: usize, limit: usize) -> R {
    let sh = cx.sh;
    let o = cur_real(cx, NFS4ERR_ISDIR)?;
    let flushed = match st.deferred.resumed_for(cx.token) {
        Some(r) => r.done.result.map(drop),
        None => {
            let a = real_attr(cx, st, &o)?;
            match a.ftype {
                FileType::Regular => {}
                FileType::Directory => return Err(St(NFS4ERR_ISDIR)),
                _ => return Err(St(NFS4ERR_INVAL)),
            }
            let bi = sh.exports()[o.ex].backend;
            // SAFETY: a flush has no buffer.
            match unsafe { submit_or_wait(st, bi, cx.token, IoDesc::flush(&o.fh, 0), a, None, reply) } {
                Ok(None) => {
                    st.stats.deferred_commits += 1;
                    return Ok(0);
                }
                Ok(Some(d)) => d.result.map(drop),
                Err(e) => Err(e),
            }
        }
    };
    if let Err(e) = flushed {
        sh.writeback_failed();
        return Err(e.into());
    }
    let mut w = w_at(reply, at, limit);
    w.put_bytes(&sh.write_verifier())?;
    Ok(w.len())
}
