//! The operations of a COMPOUND (RFC 8881 s18), each writing its result
//! body (after the operation number and status the loop writes) into the
//! reply head.

use proto::nfs4::args::{Claim, CreateHow as CreateHow4, CreateType, Fattr, Op};
use proto::nfs4::fattr::{decode_settable, SetAttrs4, SetTime4};
use proto::nfs4::*;
use proto::xdr::{pad_len, roundup, Writer};

use dataplane::service::ReplyBuilder;

use super::attr::{self, Obj};
use super::fh::{self, Fh};
use super::{fs_status, Ctx, St};
use crate::backend::{
    creds, Attr, Backend, CreateHow, DirChange, DirChanged, DirPre, FileHandle, FileType, NodeKind, Owner, SetAttr,
    SetTime, Time, FH_MAX_BYTES,
};
use crate::nfs::auth::{Caller, MAY_EXEC, MAY_READ, MAY_WRITE};
use crate::nfs::export::fnv1a64;
use crate::nfs::nfs3::{check_new_attrs, check_new_name, check_old_name, check_setattr, new_owner};
use crate::nfs::CoreState;

pub(super) type R = Result<usize, St>;

mod io;

/// On a `sync` export (the default), make a namespace change or SETATTR
/// durable before its reply, as NFSv3's are: the directories and inodes in
/// `fhs`, in order (`Backend::sync_meta`).
fn commit_meta(cx: &Ctx<'_>, o: &Real, fhs: &[&FileHandle]) -> Result<(), St> {
    if !cx.sh.exports()[o.ex].sync {
        return Ok(());
    }
    let b = backend(cx, o);
    for fh in fhs {
        b.sync_meta(fh)?;
    }
    Ok(())
}

/// An object of an export, with who the Call acts as there.
#[derive(Clone, Copy, Debug)]
pub(super) struct Real {
    pub ex: usize,
    pub fh: FileHandle,
    pub caller: Caller,
}

pub(super) fn cur(cx: &Ctx<'_>) -> Result<Fh, St> {
    cx.cur.ok_or(St(NFS4ERR_NOFILEHANDLE))
}

fn real_of(cx: &Ctx<'_>, f: Fh) -> Result<Option<Real>, St> {
    match f {
        Fh::Pseudo(_) => Ok(None),
        Fh::Real { ex, fh } => {
            // An earlier operation of this COMPOUND passed this export's
            // rules and made the backend act as its caller.
            if let Some((at, caller)) = cx.acting.get() {
                if at == ex {
                    return Ok(Some(Real { ex, fh, caller }));
                }
            }
            let e = &cx.sh.exports()[ex];
            let caller = fh::check_export(e, &cx.cred, cx.peer)?;
            // The backend acts as this caller (after the export's squashing)
            // until the COMPOUND ends (the scope in [`super::call`]), as for
            // NFSv3: the kernel checks with the caller's credentials and
            // charges the caller's quota (issue 21 item 6).
            creds::set_current(Some(caller.creds()));
            cx.acting.set(Some((ex, caller)));
            Ok(Some(Real { ex, fh, caller }))
        }
    }
}

/// `f` as an export's object (`None`: a pseudo directory).
pub(super) fn real_of_pub(cx: &Ctx<'_>, f: Fh) -> Result<Option<Real>, St> {
    real_of(cx, f)
}

/// The current filehandle as an export's object; a pseudo directory is
/// `pseudo` (the status for operations that change things there).
pub(super) fn cur_real(cx: &Ctx<'_>, pseudo: u32) -> Result<Real, St> {
    real_of(cx, cur(cx)?)?.ok_or(St(pseudo))
}

/// The saved and the current filehandle of RENAME or LINK (RFC 8881
/// s18.26.3, s18.9.3) as objects of one export that may be changed: no
/// saved filehandle is NOFILEHANDLE, a pseudo-directory saved one is
/// `saved_pseudo` (a current one ROFS), two exports are XDEV, a read-only
/// export is ROFS.
fn saved_and_current_writable(cx: &Ctx<'_>, saved_pseudo: u32) -> Result<(Real, Real), St> {
    let saved = real_of(cx, cx.saved.ok_or(St(NFS4ERR_NOFILEHANDLE))?)?.ok_or(St(saved_pseudo))?;
    let current = cur_real(cx, NFS4ERR_ROFS)?;
    if saved.ex != current.ex {
        return Err(St(NFS4ERR_XDEV));
    }
    if cx.sh.exports()[current.ex].read_only {
        return Err(St(NFS4ERR_ROFS));
    }
    Ok((saved, current))
}

pub(super) fn backend<'s>(cx: &Ctx<'s>, o: &Real) -> &'s dyn Backend {
    let sh = cx.sh;
    &*sh.backends()[sh.exports()[o.ex].backend].1
}

fn start_time(cx: &Ctx<'_>) -> Time {
    Time {
        secs: cx.sh.v4.boot(),
        nsecs: 0,
    }
}

fn attr_of(cx: &Ctx<'_>, f: Fh) -> Result<Attr, St> {
    match real_of(cx, f)? {
        None => match f {
            Fh::Pseudo(id) => Ok(fh::pseudo_attr(id, start_time(cx))),
            Fh::Real { .. } => Err(St(NFS4ERR_SERVERFAULT)),
        },
        Some(o) => Ok(backend(cx, &o).getattr(&o.fh)?),
    }
}

/// The attributes of `o` now: from this core's channel when it has the
/// file open (one `fstat` of a descriptor it holds, on `uring`), else from
/// the backend (an `open_by_handle_at`, `fstat` and `close` on `uring`), as
/// NFSv3's READ, WRITE and GETATTR take them (`nfs3::attr_now`). The
/// operations of a READ or WRITE COMPOUND (READ, WRITE, COMMIT, GETATTR)
/// use it, so a kernel client's 4 KiB op costs the core no more system
/// calls than its NFSv3 one (issue 22).
pub(super) fn real_attr(cx: &Ctx<'_>, st: &mut CoreState, o: &Real) -> Result<Attr, St> {
    let bi = cx.sh.exports()[o.ex].backend;
    if let Some(a) = st.channels.get_mut(bi).and_then(|ch| ch.getattr_cached(&o.fh)) {
        return Ok(a?);
    }
    Ok(backend(cx, o).getattr(&o.fh)?)
}

/// [`attr_of`], through this core's channel for an export's object
/// ([`real_attr`]).
fn attr_now(cx: &Ctx<'_>, st: &mut CoreState, f: Fh) -> Result<Attr, St> {
    match real_of(cx, f)? {
        Some(o) => real_attr(cx, st, &o),
        None => attr_of(cx, f),
    }
}

/// `fattr4` of `f` for `req`.
fn put_fattr(cx: &Ctx<'_>, w: &mut Writer<'_>, f: Fh, a: &Attr, req: &Bitmap) -> Result<(), St> {
    let mut wire = [0u8; FH_MAX_BYTES];
    let n = fh::encode(cx.sh, &f, &mut wire).ok_or(St(NFS4ERR_SERVERFAULT))?;
    let (fsid, mounted_on) = match f {
        Fh::Pseudo(id) => ((0, 0), id),
        Fh::Real { ex, fh } => {
            let e = &cx.sh.exports()[ex];
            let on = if fh == e.root && e.path != "/" {
                fnv1a64(e.path.as_bytes())
            } else {
                a.fileid
            };
            ((e.id, 0), on)
        }
    };
    let fs = match (attr::wants_fsstat(req), f) {
        (true, Fh::Real { ex, .. }) => cx.sh.backends()[cx.sh.exports()[ex].backend].1.fsstat().ok(),
        _ => None,
    };
    let o = Obj {
        attr: *a,
        fsid,
        fh: &wire[..n],
        mounted_on_fileid: mounted_on,
        max_io: cx.sh.max_io_bytes(),
    };
    attr::fattr(w, req, &o, fs.as_ref())?;
    Ok(())
}

pub(super) fn w_at<'r>(reply: &'r mut ReplyBuilder<'_>, at: usize, limit: usize) -> Writer<'r> {
    Writer::new(&mut reply.head_mut()[at..limit])
}

/// `change_info4` of a directory around a change (RFC 8881 s3.3.6):
/// `atomic` when no other change can lie between `before` and `after`.
fn put_cinfo(w: &mut Writer<'_>, atomic: bool, before: &Attr, after: &Attr) -> Result<(), St> {
    w.put_bool(atomic)?;
    w.put_u64(attr::change(before))?;
    w.put_u64(attr::change(after))?;
    Ok(())
}

/// The attributes of a change's directory (and RENAME's target directory)
/// after it, and whether its `change_info4` is atomic: so when the backend
/// read them with the attributes the change started from under one hold
/// (`mem`); else they are read now, after the change (`uring`: another
/// change may land between the `fstat` before the call and this read, see
/// docs/BACKENDS.md), and are not.
fn after_change(
    b: &dyn Backend,
    done: &DirChanged,
    dir: &FileHandle,
    to: Option<&FileHandle>,
) -> Result<(bool, Attr, Option<Attr>), St> {
    match done.post {
        Some((a, t)) => Ok((true, a, t)),
        None => Ok((false, b.getattr(dir)?, to.map(|t| b.getattr(t)).transpose()?)),
    }
}

fn to_setattr(s: &SetAttrs4) -> SetAttr {
    let t = |x: Option<SetTime4>| match x {
        None => SetTime::DontChange,
        Some(SetTime4::Server) => SetTime::ServerTime,
        Some(SetTime4::Client { secs, nsecs }) => SetTime::Client(Time {
            secs: secs.clamp(0, i64::from(u32::MAX)) as u32,
            nsecs,
        }),
    };
    SetAttr {
        mode: s.mode,
        uid: s.uid,
        gid: s.gid,
        size: s.size,
        atime: t(s.atime),
        mtime: t(s.mtime),
    }
}

/// SEQUENCE4resok.
pub(super) fn sequence_res(
    w: &mut Writer<'_>,
    sid: &SessionId,
    seq: u32,
    slot: u32,
    highest: u32,
    slots: u32,
    status: u32,
) -> Result<(), proto::error::EncodeError> {
    let _ = highest;
    w.put_bytes(sid)?;
    w.put_u32(seq)?;
    w.put_u32(slot)?;
    w.put_u32(slots - 1)?;
    w.put_u32(slots - 1)?;
    w.put_u32(status)
}

/// A change to `file` (WRITE, SETATTR of the size, REMOVE, RENAME, LINK)
/// recalls other clients' delegations on it first (NFS4ERR_DELAY until
/// they are returned or revoked, [`super::deleg`]).
pub(super) fn deleg_conflict(cx: &Ctx<'_>, ex: usize, fh: &FileHandle) -> Result<(), St> {
    let client = cx.session.map(|s| s.2);
    cx.sh.v4.deleg_conflict(&(ex, *fh), client).map_err(St)
}

/// The attributes a write delegation's holder changes in its cache
/// (RFC 8881 s10.4.3): another client's GETATTR or VERIFY asking for one
/// of them recalls the delegation.
const DELEG_CACHED_ATTRS: [u32; 5] = [
    FATTR4_CHANGE,
    FATTR4_SIZE,
    FATTR4_SPACE_USED,
    FATTR4_TIME_MODIFY,
    FATTR4_TIME_METADATA,
];

/// Another client's look at `f`'s data or its attributes `mask` (`None`:
/// the data) recalls write delegations on it first (NFS4ERR_DELAY until
/// they are returned or revoked; there is no CB_GETATTR, RFC 8881
/// s10.4.3). One atomic load while no write delegation exists.
pub(super) fn deleg_look(cx: &Ctx<'_>, f: Fh, mask: Option<&Bitmap>) -> Result<(), St> {
    let Fh::Real { ex, fh } = f else { return Ok(()) };
    if mask.is_some_and(|m| !DELEG_CACHED_ATTRS.iter().any(|&n| m.has(n))) {
        return Ok(());
    }
    let client = cx.session.map(|s| s.2);
    cx.sh
        .v4
        .deleg_conflict_as(&(ex, fh), client, super::deleg::Conflict::Read)
        .map_err(St)
}

/// Run one operation (not SEQUENCE); its result body is written at `at`.
pub(super) fn run(
    cx: &mut Ctx<'_>,
    st: &mut CoreState,
    op: Op<'_>,
    reply: &mut ReplyBuilder<'_>,
    at: usize,
    limit: usize,
) -> R {
    let sh = cx.sh;
    match op {
        Op::Sequence { .. } => Err(St(NFS4ERR_SEQUENCE_POS)),
        Op::ExchangeId {
            verifier,
            ownerid,
            flags,
            state_protect,
        } => {
            if state_protect == SP4_SSV {
                return Err(St(NFS4ERR_ENCR_ALG_UNSUPP));
            }
            let r = sh.v4.exchange_id(verifier, ownerid, flags)?;
            let mut w = w_at(reply, at, limit);
            w.put_u64(r.clientid)?;
            w.put_u32(r.sequenceid)?;
            w.put_u32(r.flags)?;
            w.put_u32(SP4_NONE)?;
            // server_owner4, server_scope, one nfs_impl_id4.
            w.put_u64(0)?;
            w.put_opaque_var(b"rpcrdma-target")?;
            w.put_opaque_var(b"rpcrdma-target")?;
            w.put_u32(1)?;
            w.put_opaque_var(b"rpcrdma")?;
            w.put_opaque_var(b"rpcrdma-target")?;
            w.put_u64(0)?;
            w.put_u32(0)?;
            Ok(w.len())
        }
        Op::CreateSession {
            clientid,
            sequence,
            flags,
            fore,
            back,
            cb_program,
            cb_sec,
        } => {
            let cb = super::state::SessionCb {
                flags,
                program: cb_program,
                sec: super::callback::OwnedSec::of(cb_sec),
                conn: cx.conn,
                minorversion: cx.minor,
            };
            let r = sh.v4.create_session_cb(clientid, sequence, &fore, &back, &cb)?;
            let mut w = w_at(reply, at, limit);
            w.put_bytes(&r.sessionid)?;
            w.put_u32(r.sequence)?;
            w.put_u32(r.flags)?;
            for c in [r.fore, r.back] {
                w.put_u32(c.headerpadsize)?;
                w.put_u32(c.maxrequestsize)?;
                w.put_u32(c.maxresponsesize)?;
                w.put_u32(c.maxresponsesize_cached)?;
                w.put_u32(c.maxoperations)?;
                w.put_u32(c.maxrequests)?;
                match c.rdma_ird {
                    Some(v) => {
                        w.put_u32(1)?;
                        w.put_u32(v)?;
                    }
                    None => w.put_u32(0)?,
                }
            }
            Ok(w.len())
        }
        Op::DestroySession(sid) => {
            let own = cx.session.filter(|s| s.0 == sid).map(|s| s.1);
            sh.v4.destroy_session(&sid, own)?;
            Ok(0)
        }
        Op::DestroyClientid(id) => {
            sh.v4.destroy_clientid(id)?;
            Ok(0)
        }
        Op::BindConnToSession { sessionid, dir, .. } => {
            if !sh.v4.has_session(&sessionid) {
                return Err(St(NFS4ERR_BADSESSION));
            }
            if !matches!(dir, CDFC4_FORE | CDFC4_FORE_OR_BOTH | CDFC4_BACK_OR_BOTH | CDFC4_BACK) {
                return Err(St(NFS4ERR_INVAL));
            }
            // Every connection carries any session's fore channel; a
            // backchannel is bound to this connection when asked (RFC 8881
            // s18.34.3), which re-probes it and re-sends what waited.
            let back = dir != CDFC4_FORE && cx.conn.is_some_and(|c| sh.v4.cb.bind(&sessionid, c));
            let res = match (dir, back) {
                (CDFC4_BACK, true) => CDFS4_BACK,
                (CDFC4_BACK, false) => return Err(St(NFS4ERR_INVAL)),
                (_, true) => CDFS4_BOTH,
                (_, false) => CDFS4_FORE,
            };
            let mut w = w_at(reply, at, limit);
            w.put_bytes(&sessionid)?;
            w.put_u32(res)?;
            w.put_bool(false)?;
            Ok(w.len())
        }
        Op::BackchannelCtl { cb_program, cb_sec } => {
            let (sid, _, _) = cx.session.ok_or(St(NFS4ERR_OP_NOT_IN_SESSION))?;
            if !sh
                .v4
                .cb
                .set_program(&sid, cb_program, super::callback::OwnedSec::of(cb_sec))
            {
                return Err(St(NFS4ERR_BADSESSION));
            }
            Ok(0)
        }
        Op::Delegreturn(stateid) => {
            let client = cx.session.map(|s| s.2).ok_or(St(NFS4ERR_OP_NOT_IN_SESSION))?;
            let o = cur_real(cx, NFS4ERR_BAD_STATEID)?;
            let sid = current_sid(cx, stateid)?;
            sh.v4.delegreturn(client, &sid, &(o.ex, o.fh))?;
            Ok(0)
        }
        Op::ReclaimComplete(one_fs) => {
            let client = cx.session.map(|s| s.2).ok_or(St(NFS4ERR_OP_NOT_IN_SESSION))?;
            if !one_fs {
                sh.v4.reclaim_complete(client)?;
            }
            Ok(0)
        }
        Op::Putrootfh | Op::Putpubfh => {
            cx.cur = Some(fh::root(sh));
            cx.cur_sid = None;
            Ok(0)
        }
        Op::Putfh(b) => {
            cx.cur = Some(fh::decode(sh, b)?);
            cx.cur_sid = None;
            Ok(0)
        }
        Op::Getfh => {
            let f = cur(cx)?;
            let mut wire = [0u8; FH_MAX_BYTES];
            let n = fh::encode(sh, &f, &mut wire).ok_or(St(NFS4ERR_SERVERFAULT))?;
            let mut w = w_at(reply, at, limit);
            w.put_opaque_var(&wire[..n])?;
            Ok(w.len())
        }
        Op::Savefh => {
            cx.saved = Some(cur(cx)?);
            cx.saved_sid = cx.cur_sid;
            Ok(0)
        }
        Op::Restorefh => {
            cx.cur = Some(cx.saved.ok_or(St(NFS4ERR_RESTOREFH))?);
            cx.cur_sid = cx.saved_sid;
            Ok(0)
        }
        Op::Lookup(name) => lookup(cx, name).map(|()| 0),
        Op::Lookupp => lookupp(cx).map(|()| 0),
        Op::Getattr(req) => {
            let f = cur(cx)?;
            deleg_look(cx, f, Some(&req))?;
            let a = attr_now(cx, st, f)?;
            let mut w = w_at(reply, at, limit);
            put_fattr(cx, &mut w, f, &a, &req)?;
            Ok(w.len())
        }
        Op::Access(want) => {
            let f = cur(cx)?;
            let a = attr_of(cx, f)?;
            let granted = match real_of(cx, f)? {
                // Pseudo directories: read and look up.
                None => want & (ACCESS4_READ | ACCESS4_LOOKUP),
                Some(o) => o.caller.access(&a, want, sh.exports()[o.ex].read_only),
            };
            let mut w = w_at(reply, at, limit);
            w.put_u32(want & 0x3f)?;
            w.put_u32(granted & want)?;
            Ok(w.len())
        }
        Op::SecinfoNoName(style) => {
            let f = cur(cx)?;
            if style > SECINFO_STYLE4_PARENT {
                return Err(St(NFS4ERR_INVAL));
            }
            if style == SECINFO_STYLE4_PARENT {
                lookupp(cx)?;
            }
            let _ = f;
            secinfo(cx, reply, at, limit)
        }
        Op::Secinfo(name) => {
            lookup(cx, name)?;
            secinfo(cx, reply, at, limit)
        }
        Op::Readlink => {
            let o = cur_real(cx, NFS4ERR_INVAL)?;
            let b = backend(cx, &o);
            if b.getattr(&o.fh)?.ftype != FileType::Symlink {
                return Err(St(NFS4ERR_INVAL));
            }
            let head = reply.head_mut();
            let room = limit.saturating_sub(at + 4);
            let n = b.readlink(&o.fh, &mut head[at + 4..at + 4 + room])?;
            if roundup(n) > room {
                return Err(St(NFS4ERR_REP_TOO_BIG));
            }
            head[at..at + 4].copy_from_slice(&(n as u32).to_be_bytes());
            head[at + 4 + n..at + 4 + n + pad_len(n)].fill(0);
            // RFC 8267 s6.1: the link text is DDP-eligible.
            let _ = reply.add_head_item(at + 4, n);
            Ok(4 + roundup(n))
        }
        Op::Readdir {
            cookie,
            verf,
            maxcount,
            attrs,
            ..
        } => readdir(cx, reply, at, limit, cookie, verf, maxcount, &attrs),
        Op::Open {
            share_access,
            share_deny,
            owner,
            create,
            claim,
            ..
        } => open(cx, reply, at, limit, share_access, share_deny, owner, create, claim),
        Op::Close { stateid, .. } => {
            let o = cur_real(cx, NFS4ERR_BAD_STATEID)?;
            let sid = current_sid(cx, stateid)?;
            sh.v4.close(&sid, &(o.ex, o.fh))?;
            cx.cur_sid = None;
            let mut w = w_at(reply, at, limit);
            put_stateid(&mut w, &Stateid::INVALID)?;
            Ok(w.len())
        }
        Op::OpenDowngrade {
            stateid,
            share_access,
            share_deny,
            ..
        } => {
            let o = cur_real(cx, NFS4ERR_BAD_STATEID)?;
            let sid = current_sid(cx, stateid)?;
            let s = sh.v4.downgrade(&sid, &(o.ex, o.fh), share_access & 3, share_deny)?;
            cx.cur_sid = Some(s);
            let mut w = w_at(reply, at, limit);
            put_stateid(&mut w, &s)?;
            Ok(w.len())
        }
        Op::Read { stateid, offset, count } => io::read(cx, st, reply, at, limit, stateid, offset, count),
        Op::Write {
            stateid,
            offset,
            stable,
            data,
        } => io::write(cx, st, reply, at, limit, stateid, offset, stable, data),
        Op::Commit { .. } => io::commit(cx, st, reply, at, limit),
        Op::Create { ty, name, attrs } => create(cx, reply, at, limit, ty, name, &attrs),
        Op::Remove(name) => {
            let d = cur_real(cx, NFS4ERR_ROFS)?;
            if sh.exports()[d.ex].read_only {
                return Err(St(NFS4ERR_ROFS));
            }
            check_old_name(name).map_err(St)?;
            let b = backend(cx, &d);
            // RMDIR or REMOVE by what the name is now; the checks and the
            // attributes the change starts from are taken with the change
            // (`Backend::change_checked`, issue 21 item 8).
            // A read delegation on the file removed is recalled first (the
            // holder's cached view would go stale; RFC 8881 s10.4.5).
            let found = b.lookup(&d.fh, name).ok();
            let rmdir = matches!(&found, Some((_, a)) if a.ftype == FileType::Directory);
            if let Some((vfh, a)) = &found {
                if a.ftype == FileType::Regular {
                    deleg_conflict(cx, d.ex, vfh)?;
                }
            }
            let mut check = |p: &DirPre<'_>| -> Result<Owner, u32> {
                if p.dir.ftype != FileType::Directory {
                    return Err(NFS4ERR_NOTDIR);
                }
                if !d.caller.may(&p.dir, MAY_WRITE | MAY_EXEC) {
                    return Err(NFS4ERR_ACCESS);
                }
                let (_, victim) = (p.lookup)(&d.fh, name).map_err(fs_status)?;
                if !d.caller.may_unlink(&p.dir, &victim) {
                    return Err(NFS4ERR_ACCESS);
                }
                Ok(d.caller.owner())
            };
            let change = if rmdir {
                DirChange::Rmdir { name }
            } else {
                DirChange::Remove { name }
            };
            let done = b.change_checked(&d.fh, change, &mut check)?;
            done.res.map_err(St)?;
            commit_meta(cx, &d, &[&d.fh])?;
            let (atomic, after, _) = after_change(b, &done, &d.fh, None)?;
            let mut w = w_at(reply, at, limit);
            put_cinfo(&mut w, atomic, &done.pre, &after)?;
            Ok(w.len())
        }
        Op::Rename { old, new } => {
            let (src, dst) = saved_and_current_writable(cx, NFS4ERR_ROFS)?;
            check_old_name(old).map_err(St)?;
            check_new_name(new).map_err(|s| St(if s == NFS4ERR_EXIST { NFS4ERR_INVAL } else { s }))?;
            let b = backend(cx, &dst);
            // The file renamed and the one it replaces: their read
            // delegations are recalled first.
            for (dir, n) in [(&src.fh, old), (&dst.fh, new)] {
                if let Ok((f, fa)) = b.lookup(dir, n) {
                    if fa.ftype == FileType::Regular {
                        deleg_conflict(cx, dst.ex, &f)?;
                    }
                }
            }
            let mut check = |p: &DirPre<'_>| -> Result<Owner, u32> {
                let (sb, db) = (&p.dir, p.to_dir.as_ref().ok_or(NFS4ERR_SERVERFAULT)?);
                if sb.ftype != FileType::Directory || db.ftype != FileType::Directory {
                    return Err(NFS4ERR_NOTDIR);
                }
                if !dst.caller.may(sb, MAY_WRITE | MAY_EXEC) || !dst.caller.may(db, MAY_WRITE | MAY_EXEC) {
                    return Err(NFS4ERR_ACCESS);
                }
                Ok(dst.caller.owner())
            };
            let change = DirChange::Rename {
                name: old,
                to_dir: &dst.fh,
                to: new,
            };
            let done = b.change_checked(&src.fh, change, &mut check)?;
            done.res.map_err(St)?;
            if src.fh == dst.fh {
                commit_meta(cx, &dst, &[&dst.fh])?;
            } else {
                commit_meta(cx, &dst, &[&src.fh, &dst.fh])?;
            }
            let (atomic, sa, da) = after_change(b, &done, &src.fh, Some(&dst.fh))?;
            let (db, da) = done.pre_to.zip(da).ok_or(St(NFS4ERR_SERVERFAULT))?;
            let mut w = w_at(reply, at, limit);
            put_cinfo(&mut w, atomic, &done.pre, &sa)?;
            put_cinfo(&mut w, atomic, &db, &da)?;
            Ok(w.len())
        }
        Op::Link(name) => {
            let (file, dir) = saved_and_current_writable(cx, NFS4ERR_ISDIR)?;
            check_new_name(name).map_err(St)?;
            let b = backend(cx, &dir);
            let fa = b.getattr(&file.fh)?;
            let mut check = |p: &DirPre<'_>| -> Result<Owner, u32> {
                if p.dir.ftype != FileType::Directory {
                    return Err(NFS4ERR_NOTDIR);
                }
                if fa.ftype == FileType::Directory {
                    return Err(NFS4ERR_ISDIR);
                }
                if !dir.caller.may(&p.dir, MAY_WRITE | MAY_EXEC) {
                    return Err(NFS4ERR_ACCESS);
                }
                Ok(dir.caller.owner())
            };
            deleg_conflict(cx, file.ex, &file.fh)?;
            let change = DirChange::Link { file: &file.fh, name };
            let done = b.change_checked(&dir.fh, change, &mut check)?;
            done.res.map_err(St)?;
            commit_meta(cx, &dir, &[&file.fh, &dir.fh])?;
            let (atomic, after, _) = after_change(b, &done, &dir.fh, None)?;
            let mut w = w_at(reply, at, limit);
            put_cinfo(&mut w, atomic, &done.pre, &after)?;
            Ok(w.len())
        }
        Op::Setattr { stateid, attrs } => {
            let o = cur_real(cx, NFS4ERR_ROFS)?;
            if sh.exports()[o.ex].read_only {
                return Err(St(NFS4ERR_ROFS));
            }
            let s = decode_settable(&attrs)?;
            let b = backend(cx, &o);
            let a = b.getattr(&o.fh)?;
            if s.size.is_some() {
                if a.ftype == FileType::Directory {
                    return Err(St(NFS4ERR_ISDIR));
                }
                if a.ftype != FileType::Regular {
                    return Err(St(NFS4ERR_INVAL));
                }
                let sid = current_sid(cx, stateid)?;
                sh.v4.check_io(&sid, &(o.ex, o.fh), true)?;
                deleg_conflict(cx, o.ex, &o.fh)?;
            } else {
                // Any other attribute: a write delegation's holder may
                // have cached a change of the file (RFC 8881 s10.4).
                deleg_look(cx, Fh::Real { ex: o.ex, fh: o.fh }, None)?;
            }
            let set = to_setattr(&s);
            check_setattr(&o.caller, &a, &set).map_err(St)?;
            b.setattr(&o.fh, &set)?;
            commit_meta(cx, &o, &[&o.fh])?;
            let mut w = w_at(reply, at, limit);
            attr::bitmap(&mut w, &s.mask)?;
            Ok(w.len())
        }
        Op::Verify(f) | Op::Nverify(f) => {
            let same = verify(cx, &f)?;
            let want_same = matches!(op, Op::Verify(_));
            match (same, want_same) {
                (true, true) | (false, false) => Ok(0),
                (false, true) => Err(St(NFS4ERR_NOT_SAME)),
                (true, false) => Err(St(NFS4ERR_SAME)),
            }
        }
        Op::Openattr(_) => Err(St(NFS4ERR_NOTSUPP)),
        Op::TestStateid { count, raw } => {
            let client = cx.session.map(|s| s.2).unwrap_or(0);
            let mut w = w_at(reply, at, limit);
            w.put_u32(count)?;
            for c in raw.chunks_exact(16) {
                let mut other = [0u8; NFS4_OTHER_SIZE];
                other.copy_from_slice(&c[4..]);
                let sid = Stateid {
                    seqid: u32::from_be_bytes([c[0], c[1], c[2], c[3]]),
                    other,
                };
                w.put_u32(sh.v4.test_stateid(client, &sid))?;
            }
            Ok(w.len())
        }
        Op::Lock {
            locktype,
            reclaim,
            offset,
            length,
            locker,
        } => super::lock::op_lock(cx, reply, at, limit, locktype, reclaim, (offset, length), locker),
        Op::Lockt {
            locktype,
            offset,
            length,
            owner,
        } => super::lock::op_lockt(cx, reply, at, limit, locktype, (offset, length), owner.owner),
        Op::Locku {
            stateid,
            offset,
            length,
            ..
        } => super::lock::op_locku(cx, reply, at, limit, stateid, (offset, length)),
        // RFC 8881 s18.45: NFSv4.0 only.
        Op::ReleaseLockowner(_) => Err(St(NFS4ERR_NOTSUPP)),
        Op::Allocate { .. } | Op::Deallocate { .. } | Op::Seek { .. } | Op::Copy { .. } => {
            super::v42::run(cx, op, reply, at, limit)
        }
        Op::FreeStateid(sid) => {
            let client = cx.session.map(|s| s.2).unwrap_or(0);
            match sh.v4.free_stateid(client, &sid) {
                NFS4_OK => Ok(0),
                e => Err(St(e)),
            }
        }
    }
}

pub(super) fn put_stateid(w: &mut Writer<'_>, s: &Stateid) -> Result<(), St> {
    w.put_u32(s.seqid)?;
    w.put_bytes(&s.other)?;
    Ok(())
}

/// The stateid an operation names: the current stateid for the special
/// "current" value (RFC 8881 s16.2.3.1.2).
pub(super) fn current_sid(cx: &Ctx<'_>, s: Stateid) -> Result<Stateid, St> {
    if s == Stateid::CURRENT {
        cx.cur_sid.ok_or(St(NFS4ERR_BAD_STATEID))
    } else {
        Ok(s)
    }
}

/// SECINFO4resok: AUTH_SYS, and AUTH_NONE where the export allows it. The
/// current filehandle is consumed (RFC 8881 s2.6.3.1.1.8).
fn secinfo(cx: &mut Ctx<'_>, reply: &mut ReplyBuilder<'_>, at: usize, limit: usize) -> R {
    let none = match cx.cur {
        Some(Fh::Real { ex, .. }) => cx.sh.exports()[ex].allow_auth_none,
        _ => false,
    };
    cx.cur = None;
    let mut w = w_at(reply, at, limit);
    w.put_u32(1 + u32::from(none))?;
    w.put_u32(proto::rpc::AUTH_SYS)?;
    if none {
        w.put_u32(proto::rpc::AUTH_NONE)?;
    }
    Ok(w.len())
}

fn lookup(cx: &mut Ctx<'_>, name: &[u8]) -> Result<(), St> {
    let f = cur(cx)?;
    if name.is_empty() || name.contains(&b'/') || name.contains(&0) {
        return Err(St(NFS4ERR_INVAL));
    }
    if name == b"." || name == b".." {
        return Err(St(NFS4ERR_BADNAME));
    }
    let next = match real_of(cx, f)? {
        None => {
            let Fh::Pseudo(id) = f else {
                return Err(St(NFS4ERR_SERVERFAULT));
            };
            let path = fh::pseudo_path(cx.sh, id).ok_or(St(NFS4ERR_STALE))?;
            fh::pseudo_lookup(cx.sh, path, name)?
        }
        Some(o) => {
            let b = backend(cx, &o);
            let d = b.getattr(&o.fh)?;
            match d.ftype {
                FileType::Directory => {}
                FileType::Symlink => return Err(St(NFS4ERR_SYMLINK)),
                _ => return Err(St(NFS4ERR_NOTDIR)),
            }
            if !o.caller.may(&d, MAY_EXEC) {
                return Err(St(NFS4ERR_ACCESS));
            }
            let (fh, _) = b.lookup(&o.fh, name)?;
            Fh::Real { ex: o.ex, fh }
        }
    };
    cx.cur = Some(next);
    cx.cur_sid = None;
    Ok(())
}

fn lookupp(cx: &mut Ctx<'_>) -> Result<(), St> {
    let f = cur(cx)?;
    let sh = cx.sh;
    let up = match f {
        Fh::Pseudo(id) => {
            let path = fh::pseudo_path(sh, id).ok_or(St(NFS4ERR_STALE))?;
            let p = fh::parent_path(path).ok_or(St(NFS4ERR_NOENT))?;
            Fh::Pseudo(fnv1a64(p.as_bytes()))
        }
        Fh::Real { ex, fh } => {
            let e = &sh.exports()[ex];
            if fh == e.root {
                match fh::parent_path(&e.path) {
                    None => return Err(St(NFS4ERR_NOENT)),
                    Some(p) => Fh::Pseudo(fnv1a64(p.as_bytes())),
                }
            } else {
                let o = cur_real(cx, NFS4ERR_NOENT)?;
                let b = backend(cx, &o);
                if b.getattr(&o.fh)?.ftype != FileType::Directory {
                    return Err(St(NFS4ERR_NOTDIR));
                }
                let (p, _) = b.lookup(&o.fh, b"..")?;
                Fh::Real { ex, fh: p }
            }
        }
    };
    cx.cur = Some(up);
    cx.cur_sid = None;
    Ok(())
}

/// VERIFY / NVERIFY: whether our values of `f`'s attributes are `f`'s.
fn verify(cx: &Ctx<'_>, f: &Fattr<'_>) -> Result<bool, St> {
    let fh = cur(cx)?;
    deleg_look(cx, fh, Some(&f.mask))?;
    for n in f.mask.iter() {
        if !attr::SUPPORTED.has(n) {
            return Err(St(NFS4ERR_ATTRNOTSUPP));
        }
        if n == FATTR4_RDATTR_ERROR || n == FATTR4_TIME_ACCESS_SET || n == FATTR4_TIME_MODIFY_SET {
            return Err(St(NFS4ERR_INVAL));
        }
    }
    let a = attr_of(cx, fh)?;
    let mut buf = [0u8; MAX_FATTR_BYTES as usize + 64];
    let mut w = Writer::new(&mut buf);
    put_fattr(cx, &mut w, fh, &a, &f.mask)?;
    let ours = w.written();
    // Skip our bitmap (the same words as the Call's) and the length word.
    let words = f.mask.encoded_words().len();
    let vals = ours.get(4 + 4 * words + 4..).unwrap_or(&[]);
    Ok(vals == f.vals)
}

#[allow(clippy::too_many_arguments)]
fn readdir(
    cx: &mut Ctx<'_>,
    reply: &mut ReplyBuilder<'_>,
    at: usize,
    limit: usize,
    cookie: u64,
    verf: Verifier,
    maxcount: u32,
    req: &Bitmap,
) -> R {
    let f = cur(cx)?;
    let a = attr_of(cx, f)?;
    if a.ftype != FileType::Directory {
        return Err(St(NFS4ERR_NOTDIR));
    }
    let sh = cx.sh;
    // The reply's budget: maxcount bounds READDIR4resok (RFC 8881 s18.23.3).
    let end = limit.min(at.saturating_add(maxcount as usize));
    if end < at + 8 + 4 + 4 + 4 {
        return Err(St(NFS4ERR_TOOSMALL));
    }
    // Room kept for the terminating `value_follows` false and `eof`.
    let entries_end = end - 8;
    let mut pos;
    let mut eof = true;
    let mut count = 0usize;
    match real_of(cx, f)? {
        None => {
            let Fh::Pseudo(id) = f else {
                return Err(St(NFS4ERR_SERVERFAULT));
            };
            let path = fh::pseudo_path(sh, id).ok_or(St(NFS4ERR_STALE))?;
            let verf_ours = [0u8; 8];
            if cookie != 0 && verf != verf_ours {
                return Err(St(NFS4ERR_NOT_SAME));
            }
            {
                let mut w = w_at(reply, at, limit);
                w.put_bytes(&verf_ours)?;
                pos = at + w.len();
            }
            for (i, (name, child)) in fh::pseudo_entries(sh, path).enumerate() {
                let ck = 3 + i as u64;
                if ck <= cookie {
                    continue;
                }
                let ca = match attr_of(cx, child) {
                    Ok(a) => a,
                    Err(_) => continue,
                };
                let mut w = w_at(reply, pos, entries_end);
                let ok = w.put_u32(1).is_ok()
                    && w.put_u64(ck).is_ok()
                    && w.put_opaque_var(name.as_bytes()).is_ok()
                    && put_fattr(cx, &mut w, child, &ca, req).is_ok();
                if !ok {
                    eof = false;
                    break;
                }
                pos += w.len();
                count += 1;
            }
        }
        Some(o) => {
            let b = backend(cx, &o);
            if !o.caller.may(&a, MAY_READ) {
                return Err(St(NFS4ERR_ACCESS));
            }
            let cv = b.cookie_verifier(&o.fh)?.to_be_bytes();
            if cookie != 0 && verf != cv && verf != [0; 8] {
                return Err(St(NFS4ERR_NOT_SAME));
            }
            if cookie == 1 || cookie == 2 {
                return Err(St(NFS4ERR_BAD_COOKIE));
            }
            {
                let mut w = w_at(reply, at, limit);
                w.put_bytes(&cv)?;
                pos = at + w.len();
            }
            // Names first (the backend's listing may hold a lock), then each
            // entry's attributes, into the reply.
            let mut names = [0u8; 8192];
            let mut ents: [(u64, u16, u16); 128] = [(0, 0, 0); 128];
            let mut n = 0usize;
            let mut used = 0usize;
            let mut more = false;
            let all = b.readdir(&o.fh, cookie, &mut |e| {
                if e.name == b"." || e.name == b".." {
                    return true;
                }
                if n == ents.len() || used + e.name.len() > names.len() {
                    more = true;
                    return false;
                }
                names[used..used + e.name.len()].copy_from_slice(e.name);
                ents[n] = (e.cookie, used as u16, e.name.len() as u16);
                used += e.name.len();
                n += 1;
                true
            })?;
            eof = all && !more;
            for &(ck, off, len) in &ents[..n] {
                let name = &names[off as usize..off as usize + len as usize];
                let (cfh, ca) = match b.lookup(&o.fh, name) {
                    Ok(v) => v,
                    // Removed since it was listed.
                    Err(_) => continue,
                };
                let child = Fh::Real { ex: o.ex, fh: cfh };
                let mut w = w_at(reply, pos, entries_end);
                let ok = w.put_u32(1).is_ok()
                    && w.put_u64(ck).is_ok()
                    && w.put_opaque_var(name).is_ok()
                    && put_fattr(cx, &mut w, child, &ca, req).is_ok();
                if !ok {
                    eof = false;
                    break;
                }
                pos += w.len();
                count += 1;
            }
        }
    }
    if count == 0 && !eof {
        return Err(St(NFS4ERR_TOOSMALL));
    }
    let mut w = w_at(reply, pos, end);
    w.put_u32(0)?;
    w.put_bool(eof)?;
    Ok(pos + w.len() - at)
}

#[allow(clippy::too_many_arguments)]
fn open(
    cx: &mut Ctx<'_>,
    reply: &mut ReplyBuilder<'_>,
    at: usize,
    limit: usize,
    share_access: u32,
    share_deny: u32,
    owner: &[u8],
    create: Option<CreateHow4<'_>>,
    claim: Claim<'_>,
) -> R {
    let sh = cx.sh;
    let client = cx.session.map(|s| s.2).ok_or(St(NFS4ERR_OP_NOT_IN_SESSION))?;
    let access = share_access & OPEN4_SHARE_ACCESS_BOTH;
    if access == 0 || share_deny > OPEN4_SHARE_DENY_BOTH {
        return Err(St(NFS4ERR_INVAL));
    }
    let mut attrset = Bitmap::default();
    let mut cinfo = None;
    // The grace rules, then the client's stable record on the backend
    // (super::grace).
    sh.v4.check_grace(client, matches!(claim, Claim::Previous(_)))?;
    if let Some(Fh::Real { ex, .. }) = cx.cur {
        sh.v4.record_open(client, sh.exports()[ex].backend)?;
    }
    let (o, a) = match claim {
        Claim::Deleg(_) => return Err(St(NFS4ERR_NOTSUPP)),
        Claim::DelegCur { stateid, name } => {
            // An open under a delegation the client holds (RFC 8881
            // s18.16.3): the file by name in the current directory, or
            // the current filehandle.
            let cur = cur_real(cx, NFS4ERR_ISDIR)?;
            let o = match name {
                None => cur,
                Some(n) => {
                    crate::nfs::nfs3::check_name(n).map_err(St)?;
                    let b = backend(cx, &cur);
                    if b.getattr(&cur.fh)?.ftype != FileType::Directory {
                        return Err(St(NFS4ERR_NOTDIR));
                    }
                    let (fh, _) = b.lookup(&cur.fh, n)?;
                    Real { fh, ..cur }
                }
            };
            sh.v4.check_deleg_claim(client, &stateid, &(o.ex, o.fh))?;
            let a = backend(cx, &o).getattr(&o.fh)?;
            (o, a)
        }
        Claim::Fh | Claim::Previous(_) => {
            let o = cur_real(cx, NFS4ERR_ISDIR)?;
            let a = backend(cx, &o).getattr(&o.fh)?;
            (o, a)
        }
        Claim::Null(name) => {
            // An OPEN by name in a pseudo directory finds nothing (or may
            // create nothing).
            let d = cur_real(cx, if create.is_some() { NFS4ERR_ROFS } else { NFS4ERR_NOENT })?;
            let b = backend(cx, &d);
            let dir = b.getattr(&d.fh)?;
            if dir.ftype != FileType::Directory {
                return Err(St(NFS4ERR_NOTDIR));
            }
            crate::nfs::nfs3::check_name(name).map_err(St)?;
            if !d.caller.may(&dir, MAY_EXEC) {
                return Err(St(NFS4ERR_ACCESS));
            }
            let found = match b.lookup(&d.fh, name) {
                Ok(v) => Some(v),
                Err(crate::backend::FsError::NoEnt) => None,
                Err(e) => return Err(e.into()),
            };
            match (create, found) {
                (None, None) => return Err(St(NFS4ERR_NOENT)),
                (None, Some((fh, a))) => (Real { fh, ..d }, a),
                (Some(how), found) => {
                    if sh.exports()[d.ex].read_only {
                        return Err(St(NFS4ERR_ROFS));
                    }
                    let (set4, backend_how) = match how {
                        CreateHow4::Unchecked(f) => {
                            let s = decode_settable(&f)?;
                            (s, CreateHow::Unchecked(to_setattr(&s)))
                        }
                        CreateHow4::Guarded(f) => {
                            if found.is_some() {
                                return Err(St(NFS4ERR_EXIST));
                            }
                            let s = decode_settable(&f)?;
                            (s, CreateHow::Guarded(to_setattr(&s)))
                        }
                        CreateHow4::Exclusive(v) => (SetAttrs4::default(), CreateHow::Exclusive(v)),
                        CreateHow4::Exclusive41(v, f) => {
                            let s = decode_settable(&f)?;
                            if !s.mask.and(&attr::EXCLCREAT).eq(&s.mask) {
                                return Err(St(NFS4ERR_INVAL));
                            }
                            (s, CreateHow::Exclusive(v))
                        }
                    };
                    if let Some((fh, a)) = found.filter(|_| matches!(how, CreateHow4::Unchecked(_))) {
                        // UNCHECKED on an existing file: opened, with only
                        // a size of zero applied (RFC 8881 s18.16.3).
                        let mut a = a;
                        if set4.size == Some(0) && a.ftype == FileType::Regular && a.size != 0 {
                            if !d.caller.may_io(&a, MAY_WRITE) {
                                return Err(St(NFS4ERR_ACCESS));
                            }
                            // A truncation: other clients' delegations on
                            // the file are recalled first, as for SETATTR.
                            deleg_conflict(cx, d.ex, &fh)?;
                            a = b.setattr(
                                &fh,
                                &SetAttr {
                                    size: Some(0),
                                    ..SetAttr::default()
                                },
                            )?;
                            commit_meta(cx, &d, &[&fh])?;
                            attrset.words[0] |= 1 << FATTR4_SIZE;
                        }
                        (Real { fh, ..d }, a)
                    } else {
                        // Checked, and `change_info4` taken, with the
                        // change (`Backend::change_checked`).
                        let mut check = |p: &DirPre<'_>| -> Result<Owner, u32> {
                            if p.dir.ftype != FileType::Directory {
                                return Err(NFS4ERR_NOTDIR);
                            }
                            if !d.caller.may(&p.dir, MAY_WRITE | MAY_EXEC) {
                                return Err(NFS4ERR_ACCESS);
                            }
                            check_new_name(name)?;
                            check_new_attrs(&d.caller, &to_setattr(&set4))?;
                            Ok(new_owner(&d.caller, &p.dir))
                        };
                        let change = DirChange::Create { name, how: backend_how };
                        let done = b.change_checked(&d.fh, change, &mut check)?;
                        let (fh, _) = done.res.map_err(St)?.ok_or(St(NFS4ERR_SERVERFAULT))?;
                        if let CreateHow4::Exclusive41(_, _) = how {
                            let s = to_setattr(&set4);
                            if s != SetAttr::default() {
                                b.setattr(&fh, &s)?;
                            }
                        }
                        commit_meta(cx, &d, &[&fh, &d.fh])?;
                        attrset = set4.mask;
                        let (atomic, after, _) = after_change(b, &done, &d.fh, None)?;
                        cinfo = Some((atomic, done.pre, after));
                        // The creator may use the file whatever its mode.
                        let o = Real { fh, ..d };
                        let sid = sh.v4.open(client, owner, (o.ex, o.fh), access, share_deny)?;
                        let deleg = offer(cx, o, share_access);
                        return open_res(cx, reply, at, limit, o, sid, cinfo, attrset, deleg);
                    }
                }
            }
        }
    };
    match a.ftype {
        FileType::Regular => {}
        FileType::Directory => return Err(St(NFS4ERR_ISDIR)),
        FileType::Symlink => return Err(St(NFS4ERR_SYMLINK)),
        _ => return Err(St(NFS4ERR_WRONG_TYPE)),
    }
    if access & OPEN4_SHARE_ACCESS_READ != 0 && !o.caller.may_io(&a, MAY_READ) {
        return Err(St(NFS4ERR_ACCESS));
    }
    if access & OPEN4_SHARE_ACCESS_WRITE != 0 {
        if sh.exports()[o.ex].read_only {
            return Err(St(NFS4ERR_ROFS));
        }
        if !o.caller.may_io(&a, MAY_WRITE) {
            return Err(St(NFS4ERR_ACCESS));
        }
    }
    let sid = sh.v4.open(client, owner, (o.ex, o.fh), access, share_deny)?;
    // No new delegation under CLAIM_DELEGATE_CUR: the client has one. None
    // on a reclaim either (CLAIM_PREVIOUS, RFC 8881 s18.16.3, s10.2.1):
    // delegations are not in the client records, so one the client says it
    // held is not given back; its open is, with OPEN_DELEGATE_NONE (as the
    // Linux server answers a delegation reclaim it refuses), and the client
    // then reclaims the locks it held under the delegation and writes back
    // what it cached. Refusing the whole reclaim would lose those locks.
    let deleg = if matches!(claim, Claim::DelegCur { .. } | Claim::Previous(_)) {
        super::deleg::Offer::None
    } else {
        offer(cx, o, share_access)
    };
    open_res(cx, reply, at, limit, o, sid, cinfo, attrset, deleg)
}

/// The delegation an OPEN of `o` with `share_access` gets
/// ([`super::deleg`]).
fn offer(cx: &Ctx<'_>, o: Real, share_access: u32) -> super::deleg::Offer {
    let Some((session, _, client)) = cx.session else {
        return super::deleg::Offer::None;
    };
    let mut wire = [0u8; FH_MAX_BYTES];
    let Some(n) = fh::encode(cx.sh, &Fh::Real { ex: o.ex, fh: o.fh }, &mut wire) else {
        return super::deleg::Offer::None;
    };
    let facts = super::deleg::OpenFacts {
        share_access,
        consistent_change: backend(cx, &o).consistent_change(),
    };
    cx.sh.v4.offer(client, &session, (o.ex, o.fh), &wire[..n], facts)
}

/// A write delegation's `space_limit` (NFS_LIMIT_SIZE, RFC 8881 s18.16.1):
/// the file may grow by [`super::deleg::WRITE_DELEG_GROWTH_BYTES`], or the
/// space the backend has free when that is less, before the holder must
/// flush on CLOSE; and its `permissions` ACE: EVERYONE@ is allowed what the
/// mode bits allow every class (owner, group and others) alike, so the
/// holder asks ACCESS for anything more (nothing where the file system
/// checks permissions itself).
fn write_deleg_terms(cx: &Ctx<'_>, o: &Real) -> (u64, u32) {
    let b = backend(cx, o);
    // Granted already: without the attributes, no room and no ACE.
    let Ok(a) = b.getattr(&o.fh) else { return (0, 0) };
    let free = b.fsstat().map(|f| f.avail_bytes).unwrap_or(0);
    let limit = a.size.saturating_add(free.min(super::deleg::WRITE_DELEG_GROWTH_BYTES));
    let all = if b.enforces_permissions() {
        0
    } else {
        (a.mode >> 6) & (a.mode >> 3) & a.mode & 7
    };
    let mut mask = 0;
    if all & 4 != 0 {
        mask |= ACE4_READ_DATA;
    }
    if all & 2 != 0 {
        mask |= ACE4_WRITE_DATA | ACE4_APPEND_DATA;
    }
    (limit, mask)
}

#[allow(clippy::too_many_arguments)]
fn open_res(
    cx: &mut Ctx<'_>,
    reply: &mut ReplyBuilder<'_>,
    at: usize,
    limit: usize,
    o: Real,
    sid: Stateid,
    cinfo: Option<(bool, Attr, Attr)>,
    attrset: Bitmap,
    deleg: super::deleg::Offer,
) -> R {
    let terms = match deleg {
        super::deleg::Offer::Write(_) => write_deleg_terms(cx, &o),
        _ => (0, 0),
    };
    cx.cur = Some(Fh::Real { ex: o.ex, fh: o.fh });
    // Blocking locks' owners are told when a lock is released, where the
    // session has a working backchannel (RFC 8881 s18.16.4).
    let notify = cx.session.is_some_and(|(s, _, _)| cx.sh.v4.cb.usable(&s));
    cx.cur_sid = Some(sid);
    let mut w = w_at(reply, at, limit);
    put_stateid(&mut w, &sid)?;
    match cinfo {
        Some((atomic, b, a)) => put_cinfo(&mut w, atomic, &b, &a)?,
        None => {
            w.put_bool(false)?;
            w.put_u64(0)?;
            w.put_u64(0)?;
        }
    }
    let rflags = OPEN4_RESULT_LOCKTYPE_POSIX | if notify { OPEN4_RESULT_MAY_NOTIFY_LOCK } else { 0 };
    w.put_u32(rflags)?;
    attr::bitmap(&mut w, &attrset)?;
    match deleg {
        super::deleg::Offer::None => w.put_u32(OPEN_DELEGATE_NONE)?,
        super::deleg::Offer::NoneExt(why) => {
            w.put_u32(OPEN_DELEGATE_NONE_EXT)?;
            w.put_u32(why)?;
            if matches!(why, WND4_CONTENTION | WND4_RESOURCE) {
                // ond_server_will_push_deleg / ond_server_will_signal_avail.
                w.put_bool(false)?;
            }
        }
        super::deleg::Offer::Read(sid) => {
            // open_read_delegation4: the stateid, no recall pending, and
            // an ACE saying who may read without asking (everyone the
            // mode lets: the client checks ACCESS as usual).
            w.put_u32(OPEN_DELEGATE_READ)?;
            put_stateid(&mut w, &sid)?;
            w.put_bool(false)?;
            w.put_u32(ACE4_ACCESS_ALLOWED_ACE_TYPE)?;
            w.put_u32(0)?;
            w.put_u32(ACE4_READ_DATA)?;
            w.put_opaque_var(b"EVERYONE@")?;
        }
        super::deleg::Offer::Write(sid) => {
            // open_write_delegation4: the stateid, no recall pending, the
            // space limit, the ACE.
            w.put_u32(OPEN_DELEGATE_WRITE)?;
            put_stateid(&mut w, &sid)?;
            w.put_bool(false)?;
            w.put_u32(NFS_LIMIT_SIZE)?;
            w.put_u64(terms.0)?;
            w.put_u32(ACE4_ACCESS_ALLOWED_ACE_TYPE)?;
            w.put_u32(0)?;
            w.put_u32(terms.1)?;
            w.put_opaque_var(b"EVERYONE@")?;
        }
    }
    Ok(w.len())
}

/// The file a READ or WRITE works on: regular (ISDIR, INVAL otherwise),
/// the stateid valid for it, and the mode bits allowing it.
fn io_file(cx: &Ctx<'_>, st: &mut CoreState, sid: Stateid, write: bool) -> Result<(Real, Attr), St> {
    let o = cur_real(cx, NFS4ERR_ISDIR)?;
    let a = real_attr(cx, st, &o)?;
    match a.ftype {
        FileType::Regular => {}
        FileType::Directory => return Err(St(NFS4ERR_ISDIR)),
        FileType::Symlink => return Err(St(NFS4ERR_INVAL)),
        _ => return Err(St(NFS4ERR_INVAL)),
    }
    let sid = current_sid(cx, sid)?;
    cx.sh.v4.check_io(&sid, &(o.ex, o.fh), write)?;
    if !o.caller.may_io(&a, if write { MAY_WRITE } else { MAY_READ }) {
        return Err(St(NFS4ERR_ACCESS));
    }
    if write {
        deleg_conflict(cx, o.ex, &o.fh)?;
    } else {
        deleg_look(cx, Fh::Real { ex: o.ex, fh: o.fh }, None)?;
    }
    Ok((o, a))
}

#[allow(clippy::too_many_arguments)]
fn create(
    cx: &mut Ctx<'_>,
    reply: &mut ReplyBuilder<'_>,
    at: usize,
    limit: usize,
    ty: CreateType<'_>,
    name: &[u8],
    attrs: &Fattr<'_>,
) -> R {
    let d = cur_real(cx, NFS4ERR_ROFS)?;
    let sh = cx.sh;
    if let CreateType::Other(t) = ty {
        return Err(St(if t == NF4REG { NFS4ERR_BADTYPE } else { NFS4ERR_BADXDR }));
    }
    if sh.exports()[d.ex].read_only {
        return Err(St(NFS4ERR_ROFS));
    }
    check_new_name(name).map_err(St)?;
    let s4 = decode_settable(attrs)?;
    let set = to_setattr(&s4);
    let b = backend(cx, &d);
    let node = |kind| DirChange::Mknod { name, kind, set: &set };
    let change = match ty {
        CreateType::Dir => DirChange::Mkdir { name, set: &set },
        CreateType::Link(target) => DirChange::Symlink {
            name,
            target,
            set: &set,
        },
        CreateType::Block(major, minor) => node(NodeKind::Block { major, minor }),
        CreateType::Char(major, minor) => node(NodeKind::Char { major, minor }),
        CreateType::Socket => node(NodeKind::Socket),
        CreateType::Fifo => node(NodeKind::Fifo),
        CreateType::Other(_) => return Err(St(NFS4ERR_BADTYPE)),
    };
    // The checks and the attributes the change starts from are taken with
    // the change (`Backend::change_checked`, issue 21 item 8).
    let mut check = |p: &DirPre<'_>| -> Result<Owner, u32> {
        if p.dir.ftype != FileType::Directory {
            return Err(NFS4ERR_NOTDIR);
        }
        if !d.caller.may(&p.dir, MAY_WRITE | MAY_EXEC) {
            return Err(NFS4ERR_ACCESS);
        }
        check_new_attrs(&d.caller, &set)?;
        if matches!(ty, CreateType::Link([])) {
            return Err(NFS4ERR_INVAL);
        }
        Ok(new_owner(&d.caller, &p.dir))
    };
    let done = b.change_checked(&d.fh, change, &mut check)?;
    let (fh, _) = done.res.map_err(St)?.ok_or(St(NFS4ERR_SERVERFAULT))?;
    commit_meta(cx, &d, &[&fh, &d.fh])?;
    let (atomic, after, _) = after_change(b, &done, &d.fh, None)?;
    cx.cur = Some(Fh::Real { ex: d.ex, fh });
    cx.cur_sid = None;
    let mut w = w_at(reply, at, limit);
    put_cinfo(&mut w, atomic, &done.pre, &after)?;
    attr::bitmap(&mut w, &s4.mask)?;
    Ok(w.len())
}
