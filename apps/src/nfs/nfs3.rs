//! The 21 NFSv3 procedures after NULL (RFC 1813 section 3.3), on one core.
//!
//! Each procedure decodes its arguments (GARBAGE_ARGS if they do not decode),
//! resolves its handles through the exports (BADHANDLE / STALE / ACCES /
//! AUTH_TOOWEAK), checks the export's read-only flag and the caller's mode-bit
//! permissions, runs the backend, and writes its results after the reply
//! header with full `wcc_data` / `post_op_attr`. Failures that carry
//! attributes are written by the procedure; the others return
//! [`Fail::Nfs`] and get the procedure's empty failure arm
//! ([`empty_failure`]).

use proto::error::EncodeError;
use proto::nfs3::*;
use proto::xdr::{pad_len, roundup, Reader, Writer};

use dataplane::service::ReplyBuilder;

use super::auth::{access_bits, Caller, Cred, MAY_EXEC, MAY_READ, MAY_WRITE};
use super::export::{split_fh, FhError};
use super::xdr::*;
use super::{Call, CoreState, Fail, NfsShared};
use crate::backend::creds;
use crate::backend::{
    Attr, Backend, CreateHow, DirChange, DirEntry, DirPre, FileHandle, FileType, FsError, FsResult, IoDesc, IoDone,
    IoOp, NodeKind, SetAttr, SetTime, Stable, FH_MAX_BYTES, NAME_MAX_BYTES, PATH_MAX_BYTES,
};
use crate::nfs4::deleg::Conflict;
use proto::rpc::AuthStat;

/// `PATHCONF3resok.linkmax`.
pub const LINK_MAX: u32 = 32_000;
/// Smallest READDIR / READDIRPLUS result budget worth trying.
const DIR_MIN_BYTES: usize = 4 + POST_OP_ATTR_MAX_BYTES + 8 + 8;

/// Entries collected from a backend's `readdir` before encoding (READDIRPLUS
/// looks each one up afterwards, outside the backend's listing lock).
/// Bounded by the reply budget, reused across calls.
#[derive(Debug, Default)]
pub(crate) struct DirScratch {
    entries: Vec<Ent>,
    names: Vec<u8>,
}

#[derive(Clone, Copy, Debug)]
struct Ent {
    fileid: u64,
    cookie: u64,
    name_at: u32,
    name_len: u16,
    handle: Option<FileHandle>,
    attr: Option<Attr>,
}

/// A resolved handle: the export, the backend handle, and who the caller is
/// on that export.
#[derive(Clone, Copy, Debug)]
struct Obj {
    ex: usize,
    fh: FileHandle,
    caller: Caller,
}

/// Resolve a peer's handle: malformed is BADHANDLE, an unknown export STALE;
/// a client outside the export's networks gets ACCES, AUTH_NONE on an export
/// without `allow_auth_none` AUTH_TOOWEAK.
fn resolve(sh: &NfsShared, c: &Call<'_>, nfs_fh: &[u8]) -> Result<Obj, Fail> {
    let (id, fh) = split_fh(nfs_fh).map_err(|e| {
        Fail::Nfs(match e {
            FhError::Bad => NFS3ERR_BADHANDLE,
            FhError::Stale => NFS3ERR_STALE,
        })
    })?;
    let ex = sh.export_by_id(id).ok_or(Fail::Nfs(NFS3ERR_STALE))?;
    let e = &sh.exports[ex];
    if !e.allows_peer(c.peer) {
        return Err(Fail::Nfs(NFS3ERR_ACCES));
    }
    if matches!(c.cred, Cred::None) && !e.allow_auth_none {
        return Err(Fail::Auth(AuthStat::TooWeak));
    }
    let caller = Caller::for_export(&c.cred, e);
    // The backends act as this caller until the Call ends ([`call`]'s scope).
    creds::set_current(Some(caller.creds()));
    Ok(Obj { ex, fh, caller })
}

/// Whether `o`'s caller may `want` (`MAY_*`) on `fh`, whose attributes are
/// `a`: the file system decides where it checks permissions itself (POSIX
/// ACLs apply), the mode bits otherwise.
fn may(b: &dyn Backend, o: &Obj, fh: &FileHandle, a: &Attr, want: u32) -> bool {
    // Root (not squashed) passes the kernel's checks as it passes the mode
    // bits' (CAP_DAC_OVERRIDE; execute needs some x bit): no system call.
    if b.enforces_permissions() && !o.caller.is_root() {
        b.may(fh, want).unwrap_or(false)
    } else {
        o.caller.may(a, want)
    }
}

/// [`may`] with the Linux server's owner override for READ, WRITE and
/// truncation: the owner of a regular file may read and write it whatever
/// its mode (see [`Caller::may_io`]).
fn may_io(b: &dyn Backend, o: &Obj, fh: &FileHandle, a: &Attr, want: u32) -> bool {
    (a.ftype == FileType::Regular && o.caller.uid == a.uid) || may(b, o, fh, a, want)
}

fn backend<'s>(sh: &'s NfsShared, o: &Obj) -> &'s dyn Backend {
    &*sh.backends[sh.exports[o.ex].backend].1
}

/// The attributes of `o` now: from this core's channel when it has the file
/// open (no lookup, nothing that waits), else from the backend.
fn attr_now(sh: &NfsShared, st: &mut CoreState, o: &Obj) -> FsResult<Attr> {
    let bi = sh.exports[o.ex].backend;
    if let Some(a) = st.channels.get_mut(bi).and_then(|ch| ch.getattr_cached(&o.fh)) {
        return a;
    }
    backend(sh, o).getattr(&o.fh)
}

fn fsid(sh: &NfsShared, o: &Obj) -> u64 {
    sh.exports[o.ex].id
}

fn read_only(sh: &NfsShared, o: &Obj) -> bool {
    sh.exports[o.ex].read_only
}

/// On a `sync` export (the default), make a namespace change or SETATTR
/// durable before its reply (RFC 1813 section 1.6: these procedures are
/// synchronous; the Linux server's `commit_metadata`): the directories and
/// inodes in `fhs`, in order. The first error is the procedure's status.
fn commit_meta(sh: &NfsShared, o: &Obj, fhs: &[&FileHandle]) -> Result<(), u32> {
    if !sh.exports[o.ex].sync {
        return Ok(());
    }
    let b = backend(sh, o);
    for fh in fhs {
        b.sync_meta(fh).map_err(|e| e.nfsstat3())?;
    }
    Ok(())
}

/// A status for a bad name: too long, empty, or with `/` or NUL in it.
pub(crate) fn check_name(name: &[u8]) -> Result<(), u32> {
    if name.len() > NAME_MAX_BYTES {
        Err(NFS3ERR_NAMETOOLONG)
    } else if name.is_empty() || name.contains(&b'/') || name.contains(&0) {
        Err(NFS3ERR_INVAL)
    } else {
        Ok(())
    }
}

pub(crate) fn is_dot(name: &[u8]) -> bool {
    name == b"." || name == b".."
}

/// A name a new object may get: [`check_name`], and not `.` or `..` (EXIST).
pub(crate) fn check_new_name(name: &[u8]) -> Result<(), u32> {
    check_name(name)?;
    if is_dot(name) {
        return Err(NFS3ERR_EXIST);
    }
    Ok(())
}

/// A name an object may be removed or renamed by: not `.` or `..` (INVAL).
pub(crate) fn check_old_name(name: &[u8]) -> Result<(), u32> {
    check_name(name)?;
    if is_dot(name) {
        return Err(NFS3ERR_INVAL);
    }
    Ok(())
}

/// Non-root callers may not give new objects another owner or a group they
/// are not in (NFS3ERR_PERM).
pub(crate) fn check_new_attrs(caller: &Caller, s: &SetAttr) -> Result<(), u32> {
    if caller.is_root() {
        return Ok(());
    }
    if s.uid.is_some_and(|u| u != caller.uid) || s.gid.is_some_and(|g| !caller.in_group(g)) {
        return Err(NFS3ERR_PERM);
    }
    Ok(())
}

/// The owner of an object created in `dir`: the caller, with the directory's
/// group when the directory is set-group-ID.
pub(crate) fn new_owner(caller: &Caller, dir: &Attr) -> crate::backend::Owner {
    let mut o = caller.owner();
    if dir.mode & 0o2000 != 0 {
        o.gid = dir.gid;
    }
    o
}

/// SETATTR's permission rules (as POSIX chmod/chown/truncate/utimes).
pub(crate) fn check_setattr(caller: &Caller, a: &Attr, s: &SetAttr) -> Result<(), u32> {
    let owner = caller.is_root() || caller.uid == a.uid;
    if s.mode.is_some() && !owner {
        return Err(NFS3ERR_PERM);
    }
    if s.uid.is_some_and(|u| u != a.uid) && !caller.is_root() {
        return Err(NFS3ERR_PERM);
    }
    if let Some(g) = s.gid.filter(|&g| g != a.gid) {
        if !(caller.is_root() || (caller.uid == a.uid && caller.in_group(g))) {
            return Err(NFS3ERR_PERM);
        }
    }
    if s.size.is_some() && !caller.may_io(a, MAY_WRITE) {
        return Err(NFS3ERR_ACCES);
    }
    for t in [s.atime, s.mtime] {
        match t {
            SetTime::DontChange => {}
            SetTime::ServerTime => {
                if !owner && !caller.may(a, MAY_WRITE) {
                    return Err(NFS3ERR_ACCES);
                }
            }
            SetTime::Client(_) => {
                if !owner {
                    return Err(NFS3ERR_PERM);
                }
            }
        }
    }
    Ok(())
}

/// Write `status` and the empty failure arm of `proc_` (every optional
/// attribute absent).
pub(crate) fn empty_failure(w: &mut Writer<'_>, proc_: u32, status: u32) -> Result<(), EncodeError> {
    w.put_u32(status)?;
    match proc_ {
        NFSPROC3_GETATTR => Ok(()),
        NFSPROC3_LOOKUP | NFSPROC3_ACCESS | NFSPROC3_READLINK | NFSPROC3_READ | NFSPROC3_READDIR
        | NFSPROC3_READDIRPLUS | NFSPROC3_FSSTAT | NFSPROC3_FSINFO | NFSPROC3_PATHCONF => w.put_bool(false),
        NFSPROC3_RENAME => {
            put_wcc(w, None, None, 0)?;
            put_wcc(w, None, None, 0)
        }
        NFSPROC3_LINK => {
            put_post_op_attr(w, None, 0)?;
            put_wcc(w, None, None, 0)
        }
        // SETATTR, WRITE, CREATE, MKDIR, SYMLINK, MKNOD, REMOVE, RMDIR, COMMIT
        _ => put_wcc(w, None, None, 0),
    }
}

/// Run procedure `c.proc_` (1..=21), writing its results at `base` of the
/// head. Returns the results' length.
pub(crate) fn call(
    sh: &NfsShared,
    st: &mut CoreState,
    c: &Call<'_>,
    reply: &mut ReplyBuilder<'_>,
    base: usize,
) -> Result<usize, Fail> {
    // Whoever `resolve` names as the caller stops acting when the Call ends.
    let _acting = creds::Scope::enter();
    match c.proc_ {
        NFSPROC3_GETATTR => getattr(sh, st, c, reply, base),
        NFSPROC3_SETATTR => setattr(sh, c, reply, base),
        NFSPROC3_LOOKUP => lookup(sh, c, reply, base),
        NFSPROC3_ACCESS => access(sh, c, reply, base),
        NFSPROC3_READLINK => readlink(sh, c, reply, base),
        NFSPROC3_READ => read(sh, st, c, reply, base),
        NFSPROC3_WRITE => write(sh, st, c, reply, base),
        NFSPROC3_CREATE | NFSPROC3_MKDIR | NFSPROC3_SYMLINK | NFSPROC3_MKNOD => create(sh, c, reply, base),
        NFSPROC3_REMOVE | NFSPROC3_RMDIR => remove(sh, c, reply, base),
        NFSPROC3_RENAME => rename(sh, c, reply, base),
        NFSPROC3_LINK => link(sh, c, reply, base),
        NFSPROC3_READDIR | NFSPROC3_READDIRPLUS => readdir(sh, st, c, reply, base),
        NFSPROC3_FSSTAT | NFSPROC3_FSINFO | NFSPROC3_PATHCONF => fsinfo(sh, c, reply, base),
        NFSPROC3_COMMIT => commit(sh, st, c, reply, base),
        _ => Err(Fail::System),
    }
}

/// A change to a regular file through NFSv3 recalls the NFSv4
/// delegations on it (crate::nfs4::deleg); until they are returned or
/// revoked the Call is held ([`Fail::Recalled`], [`super::delegwait`])
/// when the engine lets it be deferred, and answered NFS3ERR_JUKEBOX
/// otherwise (the client retries).
fn v4_delegations(sh: &NfsShared, c: &Call<'_>, ex: usize, fh: &FileHandle) -> Result<(), Fail> {
    v4_conflict(sh, c, ex, fh, Conflict::Change)
}

/// A look at a file's data or attributes through NFSv3 (READ, GETATTR,
/// LOOKUP and ACCESS, whose replies carry them, SETATTR of anything but
/// the size) recalls the NFSv4 write delegations
/// on it, held as [`v4_delegations`] holds a change: the holder may have
/// cached writes (RFC 8881 s10.4). One atomic load while no write
/// delegation exists.
fn v4_write_delegations(sh: &NfsShared, c: &Call<'_>, ex: usize, fh: &FileHandle) -> Result<(), Fail> {
    v4_conflict(sh, c, ex, fh, Conflict::Read)
}

fn v4_conflict(sh: &NfsShared, c: &Call<'_>, ex: usize, fh: &FileHandle, kind: Conflict) -> Result<(), Fail> {
    sh.v4
        .deleg_conflict_as(&(ex, *fh), None, kind)
        .map_err(|_| match c.token {
            Some(_) => Fail::Recalled((ex, *fh), kind),
            None => Fail::Nfs(NFS3ERR_JUKEBOX),
        })
}

/// The file `name` in `dir` when it is a regular file (one a delegation
/// may cover).
fn regular_in(b: &dyn Backend, dir: &FileHandle, name: &[u8]) -> Option<FileHandle> {
    match b.lookup(dir, name) {
        Ok((fh, a)) if a.ftype == FileType::Regular => Some(fh),
        _ => None,
    }
}

/// A writer over the head from `base`.
fn out<'r>(reply: &'r mut ReplyBuilder<'_>, base: usize) -> Writer<'r> {
    let head = reply.head_mut();
    let at = base.min(head.len());
    Writer::new(&mut head[at..])
}

// ---------------------------------------------------------------------------
// Attributes and lookups
// ---------------------------------------------------------------------------

fn getattr(
    sh: &NfsShared,
    st: &mut CoreState,
    c: &Call<'_>,
    reply: &mut ReplyBuilder<'_>,
    base: usize,
) -> Result<usize, Fail> {
    let fh = nfs_fh3(&mut Reader::new(c.args), "object")?;
    let o = resolve(sh, c, fh)?;
    v4_write_delegations(sh, c, o.ex, &o.fh)?;
    let a = attr_now(sh, st, &o)?;
    let mut w = out(reply, base);
    w.put_u32(NFS3_OK)?;
    put_fattr3(&mut w, &a, fsid(sh, &o))?;
    Ok(w.len())
}

fn setattr(sh: &NfsShared, c: &Call<'_>, reply: &mut ReplyBuilder<'_>, base: usize) -> Result<usize, Fail> {
    let args = SetattrArgs::decode(&mut Reader::new(c.args))?;
    let o = resolve(sh, c, args.object)?;
    if args.attrs.size.is_some() {
        v4_delegations(sh, c, o.ex, &o.fh)?;
    } else {
        v4_write_delegations(sh, c, o.ex, &o.fh)?;
    }
    let (b, id) = (backend(sh, &o), fsid(sh, &o));
    let ro = read_only(sh, &o);
    // The guard and the caller's rights are checked against the attributes
    // the change starts from, read with it where the backend can (issue 21
    // item 8; `Backend::setattr_checked`).
    let mut refused = false;
    let mut check = |pre: &Attr| -> Result<(), u32> {
        let r = if ro {
            Err(NFS3ERR_ROFS)
        } else if args.guard.is_some_and(|t| t != pre.ctime) {
            Err(NFS3ERR_NOT_SYNC)
        } else if b.enforces_permissions() {
            // The file system checks ownership and times as the caller; a
            // truncation goes through a descriptor the gateway opened, so its
            // write permission is checked here.
            if args.attrs.size.is_some() && !may_io(b, &o, &o.fh, pre, MAY_WRITE) {
                Err(NFS3ERR_ACCES)
            } else {
                Ok(())
            }
        } else {
            check_setattr(&o.caller, pre, &args.attrs)
        };
        refused = r.is_err();
        r
    };
    let (pre, res) = b.setattr_checked(&o.fh, &args.attrs, &mut check)?;
    // A `sync` export makes the change durable before it is acknowledged.
    let res = res.and_then(|post| commit_meta(sh, &o, &[&o.fh]).map(|()| post));
    let mut w = out(reply, base);
    match res {
        Ok(post) => {
            w.put_u32(NFS3_OK)?;
            put_wcc(&mut w, Some(&pre), Some(&post), id)?;
        }
        // Refused before any change: the attributes are still `pre`.
        Err(s) if refused => {
            w.put_u32(s)?;
            put_wcc(&mut w, Some(&pre), Some(&pre), id)?;
        }
        Err(s) => {
            w.put_u32(s)?;
            put_wcc(&mut w, Some(&pre), b.getattr(&o.fh).ok().as_ref(), id)?;
        }
    }
    Ok(w.len())
}

fn lookup(sh: &NfsShared, c: &Call<'_>, reply: &mut ReplyBuilder<'_>, base: usize) -> Result<usize, Fail> {
    let args = diropargs3(&mut Reader::new(c.args))?;
    let o = resolve(sh, c, args.dir)?;
    let (b, id) = (backend(sh, &o), fsid(sh, &o));
    let dir = b.getattr(&o.fh)?;
    let mut w = out(reply, base);
    let found = if dir.ftype != FileType::Directory {
        Err(NFS3ERR_NOTDIR)
    } else if !may(b, &o, &o.fh, &dir, MAY_EXEC) {
        Err(NFS3ERR_ACCES)
    } else if args.name == b".." && sh.exports[o.ex].is_root(&o.fh) {
        // The export's root is the top of its clients' tree, as `/` is
        // (another export of the backend may hold the directory above).
        Ok((o.fh, dir))
    } else {
        check_name(args.name).and_then(|()| b.lookup(&o.fh, args.name).map_err(|e| e.nfsstat3()))
    };
    match found {
        Ok((fh, a)) => {
            // The file's attributes go back with its handle: another
            // client's cached writes to it are recalled first.
            if a.ftype == FileType::Regular {
                v4_write_delegations(sh, c, o.ex, &fh)?;
            }
            let mut nfh = [0u8; FH_MAX_BYTES];
            let n = sh.exports[o.ex]
                .encode_fh(&fh, &mut nfh)
                .ok_or(Fail::Nfs(NFS3ERR_SERVERFAULT))?;
            w.put_u32(NFS3_OK)?;
            w.put_opaque_var(&nfh[..n])?;
            put_post_op_attr(&mut w, Some(&a), id)?;
            put_post_op_attr(&mut w, Some(&dir), id)?;
        }
        Err(s) => {
            w.put_u32(s)?;
            put_post_op_attr(&mut w, Some(&dir), id)?;
        }
    }
    Ok(w.len())
}

fn access(sh: &NfsShared, c: &Call<'_>, reply: &mut ReplyBuilder<'_>, base: usize) -> Result<usize, Fail> {
    let args = AccessArgs::decode(&mut Reader::new(c.args))?;
    let o = resolve(sh, c, args.object)?;
    // The reply carries the attributes.
    v4_write_delegations(sh, c, o.ex, &o.fh)?;
    let b = backend(sh, &o);
    let a = b.getattr(&o.fh)?;
    let got = access_bits(&a, args.access & ACCESS3_ALL, read_only(sh, &o), |want| {
        may(b, &o, &o.fh, &a, want)
    });
    let mut w = out(reply, base);
    w.put_u32(NFS3_OK)?;
    put_post_op_attr(&mut w, Some(&a), fsid(sh, &o))?;
    w.put_u32(got)?;
    Ok(w.len())
}

/// READLINK: the path is read straight into the head and marked as a
/// DDP-eligible item (RFC 8267 section 4), so the engine may move it in a
/// Write chunk.
fn readlink(sh: &NfsShared, c: &Call<'_>, reply: &mut ReplyBuilder<'_>, base: usize) -> Result<usize, Fail> {
    let fh = nfs_fh3(&mut Reader::new(c.args), "symlink")?;
    let o = resolve(sh, c, fh)?;
    let (b, id) = (backend(sh, &o), fsid(sh, &o));
    let a = b.getattr(&o.fh)?;
    // status, post_op_attr, length word, then the path.
    let path_at = base + 4 + POST_OP_ATTR_MAX_BYTES + 4;
    let res = if a.ftype != FileType::Symlink {
        Err(NFS3ERR_INVAL)
    } else {
        let head = reply.head_mut();
        let room = head.len().saturating_sub(path_at + 3).min(PATH_MAX_BYTES);
        if room == 0 {
            return Err(Fail::System);
        }
        b.readlink(&o.fh, &mut head[path_at..path_at + room])
            .map_err(|e| e.nfsstat3())
            .map(|n| n.min(room))
    };
    match res {
        Ok(n) => {
            {
                let mut w = out(reply, base);
                w.put_u32(NFS3_OK)?;
                put_post_op_attr(&mut w, Some(&a), id)?;
                w.put_u32(n as u32)?;
            }
            let head = reply.head_mut();
            head[path_at + n..path_at + roundup(n)].fill(0);
            // The item lies inside the head; marking can only fail when the
            // engine's item table is full, and then it simply stays inline.
            let _ = reply.add_head_item(path_at, n);
            Ok(path_at + roundup(n) - base)
        }
        Err(s) => {
            let mut w = out(reply, base);
            w.put_u32(s)?;
            put_post_op_attr(&mut w, Some(&a), id)?;
            Ok(w.len())
        }
    }
}

// ---------------------------------------------------------------------------
// Data: READ, WRITE, COMMIT
// ---------------------------------------------------------------------------

/// READ: into the engine's registered data buffer when there is one (the
/// DDP-eligible item, RFC 8267), else into the head after the results.
/// The first READ, WRITE or COMMIT of a file on this core, on a backend
/// whose opens may wait for a disk (`uring`'s `open_by_handle_at`): the
/// file is opened on the helper pool with the Call deferred meanwhile, and
/// the Call runs again here once the channel has it (issue 21 item 5).
/// Returns whether the Call was deferred so. A Call that cannot be
/// deferred (TCP) opens the file on the core, as before.
fn open_off_core(sh: &NfsShared, st: &mut CoreState, c: &Call<'_>, o: &Obj, reply: &mut ReplyBuilder<'_>) -> bool {
    let Some(token) = c.token else {
        return false;
    };
    let bi = sh.exports[o.ex].backend;
    if st.offload.was_opened(c.token)
        || !st.deferred.has_room()
        || !sh.backends[bi].1.metadata_blocks()
        || !st.channels.get_mut(bi).is_some_and(|ch| ch.needs_open(&o.fh))
        || !sh.helpers().is_running()
    {
        return false;
    }
    st.offload.submit_open(sh, token, bi, o.fh);
    st.deferred.submit_to_pool(token, reply);
    st.stats.offloaded_opens += 1;
    true
}

fn read(
    sh: &NfsShared,
    st: &mut CoreState,
    c: &Call<'_>,
    reply: &mut ReplyBuilder<'_>,
    base: usize,
) -> Result<usize, Fail> {
    let args = Read3Args::decode(&mut Reader::new(c.args))?;
    let o = resolve(sh, c, args.file)?;
    let (b, id) = (backend(sh, &o), fsid(sh, &o));
    // Resuming this Call after its deferred read: its result, and the
    // attributes it was checked against (one backend call fewer).
    let resumed = st.deferred.resumed_for(c.token);
    if resumed.is_none() {
        v4_write_delegations(sh, c, o.ex, &o.fh)?;
    }
    if resumed.is_none() && open_off_core(sh, st, c, &o, reply) {
        return Ok(0);
    }
    let pre = match resumed.map(|r| r.pre) {
        Some(a) => a,
        None => attr_now(sh, st, &o)?,
    };
    let denied = match pre.ftype {
        FileType::Regular if may_io(b, &o, &o.fh, &pre, MAY_READ) => None,
        FileType::Regular => Some(NFS3ERR_ACCES),
        FileType::Directory => Some(NFS3ERR_ISDIR),
        _ => Some(NFS3ERR_INVAL),
    };
    if let Some(s) = denied {
        let mut w = out(reply, base);
        w.put_u32(s)?;
        put_post_op_attr(&mut w, Some(&pre), id)?;
        return Ok(w.len());
    }
    let bi = sh.exports[o.ex].backend;
    let CoreState {
        channels,
        deferred,
        stats,
        ..
    } = st;
    let ch = &mut *channels[bi];
    let mut count = args.count.min(sh.max_io_bytes) as usize;
    // status, post_op_attr, count, eof, data length word.
    let fixed = 4 + POST_OP_ATTR_MAX_BYTES + 4 + 4 + 4;
    let to_buffer = reply.data_capacity() > 0;
    // A READ waited for here: `read_sync` places it in the slice it is given.
    let sync_read = IoDesc {
        fh: o.fh,
        op: IoOp::Read,
        offset: args.offset,
        buf: std::ptr::null_mut(),
        len: 0,
        tag: 0,
    };
    let res = if let Some(done) = resumed.map(|r| r.done) {
        count = count.min(reply.data_capacity());
        done.result.map(|n| (n, done.eof))
    } else if to_buffer {
        count = count.min(reply.data_capacity());
        let defer_as = c.token.filter(|_| ch.completes_later() && deferred.has_room());
        match reply.data_mut() {
            Some(buf) if count > 0 => match defer_as {
                Some(t) => {
                    let io = IoDesc {
                        fh: o.fh,
                        op: IoOp::Read,
                        offset: args.offset,
                        buf: buf.as_mut_ptr(),
                        len: count as u32,
                        tag: 0,
                    };
                    // SAFETY: `buf` is the engine's data buffer of this Call.
                    match unsafe { deferred.submit(ch, bi, t, io, pre, reply) } {
                        Ok(()) => {
                            stats.deferred_reads += 1;
                            return Ok(0);
                        }
                        // The channel's queue is full: the engine runs the
                        // Call again when it has room.
                        Err(crate::backend::FsError::Jukebox) => return Err(Fail::Busy),
                        Err(e) => Err(e),
                    }
                }
                None => deferred.read_sync(bi, ch, sync_read, &mut buf[..count]),
            },
            _ => Ok((0, args.offset >= pre.size)),
        }
    } else {
        let at = base + fixed;
        let head = reply.head_mut();
        count = count.min(head.len().saturating_sub(at + 3));
        if count > 0 {
            deferred.read_sync(bi, ch, sync_read, &mut head[at..at + count])
        } else {
            Ok((0, args.offset >= pre.size))
        }
    };
    let (n, eof) = match res {
        Ok((n, eof)) => ((n as usize).min(count), eof),
        Err(e) => {
            let mut w = out(reply, base);
            w.put_u32(e.nfsstat3())?;
            put_post_op_attr(&mut w, b.getattr(&o.fh).ok().as_ref(), id)?;
            return Ok(w.len());
        }
    };
    // The attributes after the read: those checked before it where reading
    // changes none (RFC 1813 s3.3.6 asks for the file's attributes on
    // completion of the read).
    let post = if b.reads_keep_attributes() {
        pre
    } else {
        attr_now(sh, st, &o).unwrap_or(pre)
    };
    {
        let mut w = out(reply, base);
        w.put_u32(NFS3_OK)?;
        put_post_op_attr(&mut w, Some(&post), id)?;
        w.put_u32(n as u32)?;
        w.put_bool(eof)?;
        w.put_u32(n as u32)?;
        debug_assert_eq!(w.len(), fixed);
    }
    if to_buffer {
        reply.set_data(n, true);
        Ok(fixed)
    } else {
        let at = base + fixed;
        reply.head_mut()[at + n..at + n + pad_len(n)].fill(0);
        Ok(fixed + roundup(n))
    }
}

fn stable_how(v: u32) -> Stable {
    match v {
        DATA_SYNC => Stable::DataSync,
        FILE_SYNC => Stable::FileSync,
        _ => Stable::Unstable,
    }
}

fn stable_u32(s: Stable) -> u32 {
    match s {
        Stable::Unstable => UNSTABLE,
        Stable::DataSync => DATA_SYNC,
        Stable::FileSync => FILE_SYNC,
    }
}

/// WRITE: from the Read chunk the engine pulled (the piece after the head) or
/// the inline arguments, without a copy. FILE_SYNC and DATA_SYNC data is
/// durable before the reply: if the backend reports less than was asked, the
/// file is flushed (`fsync`, or `fdatasync` for DATA_SYNC), deferred like
/// the write itself where the Call may be.
fn write(
    sh: &NfsShared,
    st: &mut CoreState,
    c: &Call<'_>,
    reply: &mut ReplyBuilder<'_>,
    base: usize,
) -> Result<usize, Fail> {
    let mut r = Reader::new(c.args);
    let h = WriteHead::decode(&mut r)?;
    let len = h.data_len as usize;
    let data: &[u8] = if r.remaining() > 0 || len == 0 {
        // Inline: the data and its XDR padding.
        r.opaque_fixed(len, "data")?
    } else {
        match c.tail {
            Some(t) if r.remaining() == 0 && t.len() >= len => &t[..len],
            _ => return Err(Fail::Garbage),
        }
    };
    if h.count != h.data_len {
        return Err(Fail::Garbage);
    }
    let o = resolve(sh, c, h.file)?;
    if read_only(sh, &o) {
        return Err(Fail::Nfs(NFS3ERR_ROFS));
    }
    // Not when resuming after the write's I/O (it was checked before).
    let resuming = matches!((c.token, st.deferred.resumed), (Some(t), Some(r)) if r.token == t);
    if !resuming {
        v4_delegations(sh, c, o.ex, &o.fh)?;
    }
    let id = fsid(sh, &o);
    let bi = sh.exports[o.ex].backend;
    // Resuming this Call after its deferred write (or flush): its result,
    // and the attributes from before it.
    let resumed = st.deferred.resumed_for(c.token);
    if resumed.is_none() && open_off_core(sh, st, c, &o, reply) {
        return Ok(0);
    }
    // The pre-operation attributes: on `uring` one `fstat` of the open
    // descriptor just before the write is submitted (an io_uring write
    // returns no attributes, so another writer may land in between); a
    // channel that reads them with the change (`mem`, under its lock) gives
    // those instead, after the write (issue 21 item 8).
    let mut pre = match resumed.map(|r| r.pre) {
        Some(a) => a,
        None => attr_now(sh, st, &o)?,
    };
    let denied = match pre.ftype {
        FileType::Regular if may_io(backend(sh, &o), &o, &o.fh, &pre, MAY_WRITE) => None,
        FileType::Regular => Some(NFS3ERR_ACCES),
        FileType::Directory => Some(NFS3ERR_ISDIR),
        _ => Some(NFS3ERR_INVAL),
    };
    if let Some(s) = denied {
        let mut w = out(reply, base);
        w.put_u32(s)?;
        put_wcc(&mut w, Some(&pre), Some(&pre), id)?;
        return Ok(w.len());
    }
    let n = data.len().min(sh.max_io_bytes as usize);
    let want = stable_how(h.stable);
    let res = {
        let CoreState {
            channels,
            deferred,
            stats,
            ..
        } = &mut *st;
        let ch = &mut *channels[bi];
        let defer_as = c.token.filter(|_| ch.completes_later() && deferred.has_room());
        let written = match resumed {
            // The flush that followed the write: the write's count.
            Some(r) if r.prev.is_some() => {
                let w = r.prev.unwrap_or(r.done);
                w.result.and_then(|k| r.done.result.map(|_| (k, want)))
            }
            Some(r) => r.done.result.map(|k| (k, r.done.committed)),
            None => {
                let io = IoDesc {
                    fh: o.fh,
                    op: IoOp::Write(want),
                    offset: h.offset,
                    // The channel only reads through this pointer for a write.
                    buf: data.as_ptr() as *mut u8,
                    len: n as u32,
                    tag: 0,
                };
                match defer_as.filter(|_| n > 0) {
                    Some(t) => {
                        // SAFETY: `data` lies in this Call's receive or
                        // Read-chunk buffer; the write only reads it.
                        match unsafe { deferred.submit(ch, bi, t, io, pre, reply) } {
                            Ok(()) => {
                                stats.deferred_writes += 1;
                                return Ok(0);
                            }
                            // As for READ: run again when the queue has room.
                            Err(FsError::Jukebox) => return Err(Fail::Busy),
                            Err(e) => Err(e),
                        }
                    }
                    // SAFETY: `data` is borrowed for this whole call and a
                    // write only reads it.
                    None => unsafe { deferred.io_sync(bi, ch, io) }.and_then(|d| d.result.map(|k| (k, d.committed))),
                }
            }
        };
        match written {
            Ok((k, got)) if got < want => {
                let io = IoDesc {
                    fh: o.fh,
                    op: if want == Stable::FileSync {
                        IoOp::Flush
                    } else {
                        IoOp::FlushData
                    },
                    offset: 0,
                    buf: std::ptr::null_mut(),
                    len: 0,
                    tag: 0,
                };
                let prev = IoDone {
                    result: Ok(k),
                    committed: got,
                    ..IoDone::default()
                };
                match defer_as {
                    // SAFETY: a flush has no buffer.
                    Some(t) => match unsafe { deferred.submit_after(ch, bi, t, io, pre, Some(prev), reply) } {
                        Ok(()) => {
                            stats.deferred_flushes += 1;
                            return Ok(0);
                        }
                        Err(FsError::Jukebox) if resumed.is_none() => return Err(Fail::Busy),
                        Err(e) => Err(e),
                    },
                    // SAFETY: a flush has no buffer.
                    None => unsafe { deferred.io_sync(bi, ch, io) }.and_then(|d| d.result.map(|_| (k, want))),
                }
            }
            other => other,
        }
    };
    if resumed.is_none() {
        if let Some(a) = st.channels[bi].take_write_pre() {
            pre = a;
        }
    }
    // A stable WRITE that failed may have failed in its flush, which can
    // lose earlier UNSTABLE data of the file: a new verifier.
    if res.is_err() && want != Stable::Unstable {
        sh.writeback_failed();
    }
    let post = attr_now(sh, st, &o).ok();
    let mut w = out(reply, base);
    match res {
        Ok((k, committed)) => {
            w.put_u32(NFS3_OK)?;
            put_wcc(&mut w, Some(&pre), post.as_ref(), id)?;
            w.put_u32(k)?;
            w.put_u32(stable_u32(committed))?;
            w.put_bytes(&sh.write_verifier())?;
        }
        Err(e) => {
            w.put_u32(e.nfsstat3())?;
            put_wcc(&mut w, Some(&pre), post.as_ref(), id)?;
        }
    }
    Ok(w.len())
}

/// COMMIT: flush the file through this core's channel (the whole file; the
/// range is advisory). Where the Call may be deferred and the channel
/// completes later (`uring`: `IORING_OP_FSYNC`), the reply waits for the
/// flush while the core serves other Calls.
fn commit(
    sh: &NfsShared,
    st: &mut CoreState,
    c: &Call<'_>,
    reply: &mut ReplyBuilder<'_>,
    base: usize,
) -> Result<usize, Fail> {
    let args = CommitArgs::decode(&mut Reader::new(c.args))?;
    let o = resolve(sh, c, args.file)?;
    let id = fsid(sh, &o);
    let resumed = st.deferred.resumed_for(c.token);
    if resumed.is_none() && open_off_core(sh, st, c, &o, reply) {
        return Ok(0);
    }
    let pre = match resumed.map(|r| r.pre) {
        Some(a) => a,
        None => attr_now(sh, st, &o)?,
    };
    let res = match pre.ftype {
        FileType::Regular => {
            let flushed = match resumed {
                Some(r) => r.done.result.map(drop),
                None => {
                    let bi = sh.exports[o.ex].backend;
                    let CoreState {
                        channels,
                        deferred,
                        stats,
                        ..
                    } = &mut *st;
                    let ch = &mut *channels[bi];
                    let io = IoDesc {
                        fh: o.fh,
                        op: IoOp::Flush,
                        offset: 0,
                        buf: std::ptr::null_mut(),
                        len: 0,
                        tag: 0,
                    };
                    match c.token.filter(|_| ch.completes_later() && deferred.has_room()) {
                        // SAFETY: a flush has no buffer.
                        Some(t) => match unsafe { deferred.submit(ch, bi, t, io, pre, reply) } {
                            Ok(()) => {
                                stats.deferred_commits += 1;
                                return Ok(0);
                            }
                            Err(FsError::Jukebox) => return Err(Fail::Busy),
                            Err(e) => Err(e),
                        },
                        // SAFETY: a flush has no buffer.
                        None => unsafe { deferred.io_sync(bi, ch, io) }.and_then(|d| d.result.map(drop)),
                    }
                }
            };
            flushed.map_err(|e| {
                sh.writeback_failed();
                e.nfsstat3()
            })
        }
        FileType::Directory => Err(NFS3ERR_ISDIR),
        _ => Err(NFS3ERR_INVAL),
    };
    let post = attr_now(sh, st, &o).ok();
    let mut w = out(reply, base);
    match res {
        Ok(()) => {
            w.put_u32(NFS3_OK)?;
            put_wcc(&mut w, Some(&pre), post.as_ref(), id)?;
            w.put_bytes(&sh.write_verifier())?;
        }
        Err(s) => {
            w.put_u32(s)?;
            put_wcc(&mut w, Some(&pre), post.as_ref(), id)?;
        }
    }
    Ok(w.len())
}

// ---------------------------------------------------------------------------
// Namespace: CREATE, MKDIR, SYMLINK, MKNOD, REMOVE, RMDIR, RENAME, LINK
// ---------------------------------------------------------------------------

/// What a creating procedure makes.
enum Make<'a> {
    File(CreateHow),
    Dir(SetAttr),
    Symlink(SetAttr, &'a [u8]),
    Node(Option<NodeKind>, SetAttr),
}

fn create(sh: &NfsShared, c: &Call<'_>, reply: &mut ReplyBuilder<'_>, base: usize) -> Result<usize, Fail> {
    let mut r = Reader::new(c.args);
    let (where_, make) = match c.proc_ {
        NFSPROC3_CREATE => {
            let a = CreateArgs::decode(&mut r)?;
            (a.where_, Make::File(a.how))
        }
        NFSPROC3_MKDIR => {
            let a = MkdirArgs::decode(&mut r)?;
            (a.where_, Make::Dir(a.attrs))
        }
        NFSPROC3_SYMLINK => {
            let a = SymlinkArgs::decode(&mut r)?;
            (a.where_, Make::Symlink(a.attrs, a.target))
        }
        _ => {
            let a = MknodArgs::decode(&mut r)?;
            (a.where_, Make::Node(a.kind, a.attrs))
        }
    };
    let o = resolve(sh, c, where_.dir)?;
    if read_only(sh, &o) {
        return Err(Fail::Nfs(NFS3ERR_ROFS));
    }
    let (b, id) = (backend(sh, &o), fsid(sh, &o));
    let caller = &o.caller;
    let attrs = match &make {
        Make::File(CreateHow::Unchecked(s) | CreateHow::Guarded(s)) => Some(s),
        Make::File(CreateHow::Exclusive(_)) => None,
        Make::Dir(s) | Make::Symlink(s, _) | Make::Node(_, s) => Some(s),
    };
    let name = where_.name;
    let change = match &make {
        Make::File(how) => DirChange::Create { name, how: *how },
        Make::Dir(set) => DirChange::Mkdir { name, set },
        Make::Symlink(set, target) => DirChange::Symlink { name, target, set },
        Make::Node(Some(kind), set) => DirChange::Mknod { name, kind: *kind, set },
        // An unknown type: the check below refuses it before any change.
        Make::Node(None, set) => DirChange::Mknod {
            name,
            kind: NodeKind::Fifo,
            set,
        },
    };
    // The checks and the pre-operation attributes are the ones the change
    // starts from (issue 21 item 8; `Backend::change_checked`).
    let mut check = |p: &DirPre<'_>| -> Result<crate::backend::Owner, u32> {
        let pre = &p.dir;
        if pre.ftype != FileType::Directory {
            return Err(NFS3ERR_NOTDIR);
        }
        check_new_name(name)?;
        if !may(b, &o, &o.fh, pre, MAY_WRITE | MAY_EXEC) {
            return Err(NFS3ERR_ACCES);
        }
        if let Some(s) = attrs {
            check_new_attrs(caller, s)?;
        }
        match &make {
            Make::Node(None, _) => return Err(NFS3ERR_BADTYPE),
            Make::Node(Some(NodeKind::Char { .. } | NodeKind::Block { .. }), _) if !caller.is_root() => {
                return Err(NFS3ERR_PERM)
            }
            Make::Symlink(_, []) => return Err(NFS3ERR_INVAL),
            // An UNCHECKED create of an existing file truncates it when a size
            // is given: that needs write permission on the file.
            Make::File(CreateHow::Unchecked(s)) if s.size.is_some() => {
                if let Ok((fh, a)) = (p.lookup)(&o.fh, name) {
                    if a.ftype == FileType::Regular && !may_io(b, &o, &fh, &a, MAY_WRITE) {
                        return Err(NFS3ERR_ACCES);
                    }
                }
            }
            _ => {}
        }
        Ok(new_owner(caller, pre))
    };
    let done = b.change_checked(&o.fh, change, &mut check)?;
    let pre = done.pre;
    let mut w = out(reply, base);
    if done.refused {
        w.put_u32(done.res.err().unwrap_or(NFS3ERR_SERVERFAULT))?;
        put_wcc(&mut w, Some(&pre), Some(&pre), id)?;
        return Ok(w.len());
    }
    let made = done.res.and_then(|made| {
        let (fh, a) = made.ok_or(NFS3ERR_SERVERFAULT)?;
        // A `sync` export makes the change durable before it is acknowledged.
        match commit_meta(sh, &o, &[&fh, &o.fh]) {
            Ok(()) => Ok((fh, a)),
            Err(_) => Err(NFS3ERR_IO),
        }
    });
    let post = b.getattr(&o.fh).ok();
    match made {
        Ok((fh, a)) => {
            let mut nfh = [0u8; FH_MAX_BYTES];
            let n = sh.exports[o.ex].encode_fh(&fh, &mut nfh);
            w.put_u32(NFS3_OK)?;
            put_post_op_fh3(&mut w, n.map(|n| &nfh[..n]))?;
            put_post_op_attr(&mut w, Some(&a), id)?;
            put_wcc(&mut w, Some(&pre), post.as_ref(), id)?;
        }
        Err(s) => {
            w.put_u32(s)?;
            put_wcc(&mut w, Some(&pre), post.as_ref(), id)?;
        }
    }
    Ok(w.len())
}

fn remove(sh: &NfsShared, c: &Call<'_>, reply: &mut ReplyBuilder<'_>, base: usize) -> Result<usize, Fail> {
    let args = diropargs3(&mut Reader::new(c.args))?;
    let o = resolve(sh, c, args.dir)?;
    if read_only(sh, &o) {
        return Err(Fail::Nfs(NFS3ERR_ROFS));
    }
    let (b, id) = (backend(sh, &o), fsid(sh, &o));
    if let Some(f) = regular_in(b, &o.fh, args.name) {
        v4_delegations(sh, c, o.ex, &f)?;
    }
    let mut check = |p: &DirPre<'_>| -> Result<crate::backend::Owner, u32> {
        let pre = &p.dir;
        if pre.ftype != FileType::Directory {
            return Err(NFS3ERR_NOTDIR);
        }
        check_old_name(args.name)?;
        if !may(b, &o, &o.fh, pre, MAY_WRITE | MAY_EXEC) {
            return Err(NFS3ERR_ACCES);
        }
        // The sticky rule: the file system applies it itself when it checks.
        if pre.mode & 0o1000 != 0 && !b.enforces_permissions() {
            let (_, victim) = (p.lookup)(&o.fh, args.name).map_err(|e| e.nfsstat3())?;
            if !o.caller.may_unlink(pre, &victim) {
                // EPERM, as the kernel's may_delete.
                return Err(NFS3ERR_PERM);
            }
        }
        Ok(o.caller.owner())
    };
    let change = if c.proc_ == NFSPROC3_RMDIR {
        DirChange::Rmdir { name: args.name }
    } else {
        DirChange::Remove { name: args.name }
    };
    let done = b.change_checked(&o.fh, change, &mut check)?;
    let res = done.res.and_then(|_| commit_meta(sh, &o, &[&o.fh]));
    let post = if done.refused {
        Some(done.pre)
    } else {
        b.getattr(&o.fh).ok()
    };
    let mut w = out(reply, base);
    w.put_u32(res.err().unwrap_or(NFS3_OK))?;
    put_wcc(&mut w, Some(&done.pre), post.as_ref(), id)?;
    Ok(w.len())
}

fn rename(sh: &NfsShared, c: &Call<'_>, reply: &mut ReplyBuilder<'_>, base: usize) -> Result<usize, Fail> {
    let args = RenameArgs::decode(&mut Reader::new(c.args))?;
    let from = resolve(sh, c, args.from.dir)?;
    let to = resolve(sh, c, args.to.dir)?;
    if from.ex != to.ex {
        return Err(Fail::Nfs(NFS3ERR_XDEV));
    }
    if read_only(sh, &from) {
        return Err(Fail::Nfs(NFS3ERR_ROFS));
    }
    let (b, id) = (backend(sh, &from), fsid(sh, &from));
    for (d, n) in [(&from.fh, args.from.name), (&to.fh, args.to.name)] {
        if let Some(f) = regular_in(b, d, n) {
            v4_delegations(sh, c, from.ex, &f)?;
        }
    }
    let caller = &from.caller;
    let mut check = |p: &DirPre<'_>| -> Result<crate::backend::Owner, u32> {
        let pre_from = &p.dir;
        let pre_to = p.to_dir.as_ref().ok_or(NFS3ERR_SERVERFAULT)?;
        if pre_from.ftype != FileType::Directory || pre_to.ftype != FileType::Directory {
            return Err(NFS3ERR_NOTDIR);
        }
        check_old_name(args.from.name)?;
        check_old_name(args.to.name)?;
        if !may(b, &from, &from.fh, pre_from, MAY_WRITE | MAY_EXEC)
            || !may(b, &to, &to.fh, pre_to, MAY_WRITE | MAY_EXEC)
        {
            return Err(NFS3ERR_ACCES);
        }
        if b.enforces_permissions() {
            // The sticky rules and moving a directory: the file system's.
            return Ok(caller.owner());
        }
        // A directory that moves to another parent has its `..` rewritten:
        // that needs write permission on it (as the kernel's vfs_rename).
        if from.fh != to.fh {
            if let Ok((_, moved)) = (p.lookup)(&from.fh, args.from.name) {
                if moved.ftype == FileType::Directory && !caller.may(&moved, MAY_WRITE) {
                    return Err(NFS3ERR_ACCES);
                }
            }
        }
        if pre_from.mode & 0o1000 != 0 {
            let (_, victim) = (p.lookup)(&from.fh, args.from.name).map_err(|e| e.nfsstat3())?;
            if !caller.may_unlink(pre_from, &victim) {
                return Err(NFS3ERR_PERM);
            }
        }
        if pre_to.mode & 0o1000 != 0 {
            if let Ok((_, victim)) = (p.lookup)(&to.fh, args.to.name) {
                if !caller.may_unlink(pre_to, &victim) {
                    return Err(NFS3ERR_PERM);
                }
            }
        }
        Ok(caller.owner())
    };
    let change = DirChange::Rename {
        name: args.from.name,
        to_dir: &to.fh,
        to: args.to.name,
    };
    let done = b.change_checked(&from.fh, change, &mut check)?;
    let res = done.res.and_then(|_| {
        if to.fh == from.fh {
            commit_meta(sh, &from, &[&from.fh])
        } else {
            commit_meta(sh, &from, &[&from.fh, &to.fh])
        }
    });
    let pre_from = done.pre;
    let pre_to = done.pre_to;
    let (post_from, post_to) = if done.refused {
        (Some(pre_from), pre_to)
    } else {
        (b.getattr(&from.fh).ok(), b.getattr(&to.fh).ok())
    };
    let mut w = out(reply, base);
    w.put_u32(res.err().unwrap_or(NFS3_OK))?;
    put_wcc(&mut w, Some(&pre_from), post_from.as_ref(), id)?;
    put_wcc(&mut w, pre_to.as_ref(), post_to.as_ref(), id)?;
    Ok(w.len())
}

fn link(sh: &NfsShared, c: &Call<'_>, reply: &mut ReplyBuilder<'_>, base: usize) -> Result<usize, Fail> {
    let args = LinkArgs::decode(&mut Reader::new(c.args))?;
    let file = resolve(sh, c, args.file)?;
    let dir = resolve(sh, c, args.link.dir)?;
    if file.ex != dir.ex {
        return Err(Fail::Nfs(NFS3ERR_XDEV));
    }
    if read_only(sh, &dir) {
        return Err(Fail::Nfs(NFS3ERR_ROFS));
    }
    let (b, id) = (backend(sh, &dir), fsid(sh, &dir));
    v4_delegations(sh, c, file.ex, &file.fh)?;
    let fa = b.getattr(&file.fh)?;
    let mut check = |p: &DirPre<'_>| -> Result<crate::backend::Owner, u32> {
        let pre = &p.dir;
        if pre.ftype != FileType::Directory {
            return Err(NFS3ERR_NOTDIR);
        }
        if fa.ftype == FileType::Directory {
            return Err(NFS3ERR_INVAL);
        }
        check_new_name(args.link.name)?;
        if !may(b, &dir, &dir.fh, pre, MAY_WRITE | MAY_EXEC) {
            return Err(NFS3ERR_ACCES);
        }
        Ok(dir.caller.owner())
    };
    let change = DirChange::Link {
        file: &file.fh,
        name: args.link.name,
    };
    let done = b.change_checked(&dir.fh, change, &mut check)?;
    let res = done.res.and_then(|_| commit_meta(sh, &dir, &[&file.fh, &dir.fh]));
    let post_file = b.getattr(&file.fh).ok();
    let post = if done.refused {
        Some(done.pre)
    } else {
        b.getattr(&dir.fh).ok()
    };
    let mut w = out(reply, base);
    w.put_u32(res.err().unwrap_or(NFS3_OK))?;
    put_post_op_attr(&mut w, post_file.as_ref(), id)?;
    put_wcc(&mut w, Some(&done.pre), post.as_ref(), id)?;
    Ok(w.len())
}

// ---------------------------------------------------------------------------
// READDIR, READDIRPLUS
// ---------------------------------------------------------------------------

/// READDIR and READDIRPLUS. The results stay within `maxcount` (READDIR's
/// `count`) and the head buffer; READDIRPLUS's directory part also within
/// `dircount` (0 means no separate bound).
///
/// Cookie verifier (RFC 1813 s3.3.16): the reply carries the directory's
/// current verifier, but a resumed listing is not refused because the
/// directory changed since: every backend keeps its cookies valid across
/// unrelated changes (an entry's cookie never moves), and answers
/// NFS3ERR_BAD_COOKIE itself for a cookie it never issued. Refusing on a
/// changed verifier would make a client that lists a directory while changing
/// it (`rm -r`, concurrent writers) restart its listing over and over.
fn readdir(
    sh: &NfsShared,
    st: &mut CoreState,
    c: &Call<'_>,
    reply: &mut ReplyBuilder<'_>,
    base: usize,
) -> Result<usize, Fail> {
    let plus = c.proc_ == NFSPROC3_READDIRPLUS;
    let args = ReaddirArgs::decode(&mut Reader::new(c.args), plus)?;
    let o = resolve(sh, c, args.dir)?;
    let (b, id) = (backend(sh, &o), fsid(sh, &o));
    let ex = &sh.exports[o.ex];
    let da = b.getattr(&o.fh)?;
    // At the export's root, `..` is the root itself (see LOOKUP).
    let at_root = ex.is_root(&o.fh);
    let head_room = reply.head_mut().len().saturating_sub(base);
    let budget = (args.maxcount as usize).min(head_room);
    let dir_budget = if args.dircount == 0 {
        usize::MAX
    } else {
        args.dircount as usize
    };
    let verf = b.cookie_verifier(&o.fh);
    let pre = if da.ftype != FileType::Directory {
        Err(NFS3ERR_NOTDIR)
    } else if !may(b, &o, &o.fh, &da, MAY_READ) {
        Err(NFS3ERR_ACCES)
    } else {
        match verf {
            Ok(_) if budget < DIR_MIN_BYTES => Err(NFS3ERR_TOOSMALL),
            Ok(v) => Ok(v),
            Err(e) => Err(e.nfsstat3()),
        }
    };
    let verf = match pre {
        Ok(v) => v,
        Err(s) => {
            let mut w = out(reply, base);
            w.put_u32(s)?;
            put_post_op_attr(&mut w, Some(&da), id)?;
            return Ok(w.len());
        }
    };
    // Collect what fits: status, dir attributes, verifier, entries, then
    // "no more entries" and eof.
    let ds = &mut st.dir;
    ds.entries.clear();
    ds.names.clear();
    let mut used = DIR_MIN_BYTES;
    let mut dir_used = 0usize;
    let mut stopped = false;
    let listed = {
        let (entries, names) = (&mut ds.entries, &mut ds.names);
        let mut sink = |e: DirEntry<'_>| -> bool {
            let name = &e.name[..e.name.len().min(NAME_MAX_BYTES)];
            let dir_bytes = entry3_bytes(name.len());
            let bytes = if plus {
                // A handle is the 9-byte prefix and at most 32 backend bytes.
                entryplus3_bytes(name.len(), 9 + 32)
            } else {
                dir_bytes
            };
            if used + bytes > budget || dir_used + dir_bytes > dir_budget {
                stopped = true;
                return false;
            }
            used += bytes;
            dir_used += dir_bytes;
            let top = at_root && name == b"..";
            entries.push(Ent {
                fileid: if top { da.fileid } else { e.fileid },
                cookie: e.cookie,
                name_at: names.len() as u32,
                name_len: name.len() as u16,
                handle: if top { Some(o.fh) } else { e.handle },
                attr: if top { Some(da) } else { e.attr },
            });
            names.extend_from_slice(name);
            true
        };
        b.readdir(&o.fh, args.cookie, &mut sink)
    };
    let eof = match listed {
        Ok(end) => end && !stopped,
        Err(e) => {
            let mut w = out(reply, base);
            w.put_u32(e.nfsstat3())?;
            put_post_op_attr(&mut w, Some(&da), id)?;
            return Ok(w.len());
        }
    };
    if ds.entries.is_empty() && !eof {
        let mut w = out(reply, base);
        w.put_u32(NFS3ERR_TOOSMALL)?;
        put_post_op_attr(&mut w, Some(&da), id)?;
        return Ok(w.len());
    }
    if plus {
        // Look up what the listing did not give, outside its lock.
        for i in 0..ds.entries.len() {
            let e = ds.entries[i];
            if e.handle.is_none() || e.attr.is_none() {
                let name = &ds.names[e.name_at as usize..e.name_at as usize + e.name_len as usize];
                let found = b.lookup(&o.fh, name).ok();
                ds.entries[i].handle = found.map(|f| f.0);
                ds.entries[i].attr = found.map(|f| f.1);
            }
        }
    }
    let mut w = out(reply, base);
    w.put_u32(NFS3_OK)?;
    put_post_op_attr(&mut w, Some(&da), id)?;
    w.put_u64(verf)?;
    for e in &ds.entries {
        let name = &ds.names[e.name_at as usize..e.name_at as usize + e.name_len as usize];
        w.put_bool(true)?;
        w.put_u64(e.fileid)?;
        w.put_opaque_var(name)?;
        w.put_u64(e.cookie)?;
        if plus {
            put_post_op_attr(&mut w, e.attr.as_ref(), id)?;
            let mut nfh = [0u8; FH_MAX_BYTES];
            let n = e.handle.and_then(|h| ex.encode_fh(&h, &mut nfh));
            put_post_op_fh3(&mut w, n.map(|n| &nfh[..n]))?;
        }
    }
    w.put_bool(false)?;
    w.put_bool(eof)?;
    Ok(w.len())
}

// ---------------------------------------------------------------------------
// FSSTAT, FSINFO, PATHCONF
// ---------------------------------------------------------------------------

fn fsinfo(sh: &NfsShared, c: &Call<'_>, reply: &mut ReplyBuilder<'_>, base: usize) -> Result<usize, Fail> {
    let fh = nfs_fh3(&mut Reader::new(c.args), "object")?;
    let o = resolve(sh, c, fh)?;
    let (b, id) = (backend(sh, &o), fsid(sh, &o));
    let a = b.getattr(&o.fh).ok();
    let head_room = reply.head_mut().len();
    let mut w = out(reply, base);
    match c.proc_ {
        NFSPROC3_FSSTAT => {
            let s = b.fsstat()?;
            w.put_u32(NFS3_OK)?;
            put_post_op_attr(&mut w, a.as_ref(), id)?;
            for v in [
                s.total_bytes,
                s.free_bytes,
                s.avail_bytes,
                s.total_files,
                s.free_files,
                s.avail_files,
            ] {
                w.put_u64(v)?;
            }
            // invarsec: the values may change at any time.
            w.put_u32(0)?;
        }
        NFSPROC3_FSINFO => {
            let s = b.fsstat()?;
            let io = sh.max_io_bytes;
            let mult = if s.block_size == 0 { 4096 } else { s.block_size }.min(io);
            // READDIR results travel in the head buffer: prefer what fits it.
            let dtpref = (head_room.saturating_sub(1024) as u32 & !511).clamp(512, 64 * 1024);
            w.put_u32(NFS3_OK)?;
            put_post_op_attr(&mut w, a.as_ref(), id)?;
            for v in [io, io, mult, io, io, mult, dtpref] {
                w.put_u32(v)?;
            }
            w.put_u64(if s.max_file_size == 0 {
                u64::MAX
            } else {
                s.max_file_size
            })?;
            // time_delta: nanosecond timestamps.
            w.put_u32(0)?;
            w.put_u32(1)?;
            // Only what the backend does (a fixed namespace makes no links).
            let f = b.features();
            let mut props = FSF3_HOMOGENEOUS;
            for (has, bit) in [
                (f.hard_links, FSF3_LINK),
                (f.symlinks, FSF3_SYMLINK),
                (f.set_time, FSF3_CANSETTIME),
            ] {
                if has {
                    props |= bit;
                }
            }
            w.put_u32(props)?;
        }
        _ => {
            w.put_u32(NFS3_OK)?;
            put_post_op_attr(&mut w, a.as_ref(), id)?;
            w.put_u32(if b.features().hard_links { LINK_MAX } else { 1 })?;
            w.put_u32(NAME_MAX_BYTES as u32)?;
            w.put_bool(true)?; // no_trunc
            w.put_bool(true)?; // chown_restricted
            w.put_bool(false)?; // case_insensitive
            w.put_bool(true)?; // case_preserving
        }
    }
    Ok(w.len())
}
