//! NFS version 3 and MOUNT version 3 (RFC 1813): program constants, status
//! codes, encoded sizes, and zero-copy decoders for the arguments and results that
//! the RPC-over-RDMA binding ([`crate::ulb::Nfs3Binding`], RFC 8267 section 4)
//! has to look into.
//!
//! Decoders take an [`xdr::Reader`](crate::xdr::Reader) positioned at the start of
//! the arguments or results, so error offsets are relative to whatever buffer the
//! reader was built on (normally the whole RPC message). Nothing allocates; all
//! functions may be called from any core.

use crate::error::{DecodeError, DecodeErrorKind};
use crate::xdr::Reader;

// ---------------------------------------------------------------------------
// Programs and procedures (RFC 1813 sections 2.2, 3 and 5.2)
// ---------------------------------------------------------------------------

/// NFS RPC program number.
pub const NFS_PROGRAM: u32 = 100_003;
/// NFS protocol version 3.
pub const NFS_V3: u32 = 3;

pub const NFSPROC3_NULL: u32 = 0;
pub const NFSPROC3_GETATTR: u32 = 1;
pub const NFSPROC3_SETATTR: u32 = 2;
pub const NFSPROC3_LOOKUP: u32 = 3;
pub const NFSPROC3_ACCESS: u32 = 4;
pub const NFSPROC3_READLINK: u32 = 5;
pub const NFSPROC3_READ: u32 = 6;
pub const NFSPROC3_WRITE: u32 = 7;
pub const NFSPROC3_CREATE: u32 = 8;
pub const NFSPROC3_MKDIR: u32 = 9;
pub const NFSPROC3_SYMLINK: u32 = 10;
pub const NFSPROC3_MKNOD: u32 = 11;
pub const NFSPROC3_REMOVE: u32 = 12;
pub const NFSPROC3_RMDIR: u32 = 13;
pub const NFSPROC3_RENAME: u32 = 14;
pub const NFSPROC3_LINK: u32 = 15;
pub const NFSPROC3_READDIR: u32 = 16;
pub const NFSPROC3_READDIRPLUS: u32 = 17;
pub const NFSPROC3_FSSTAT: u32 = 18;
pub const NFSPROC3_FSINFO: u32 = 19;
pub const NFSPROC3_PATHCONF: u32 = 20;
pub const NFSPROC3_COMMIT: u32 = 21;
/// Number of NFSv3 procedures (0..=21).
pub const NFSPROC3_COUNT: u32 = 22;

/// MOUNT RPC program number.
pub const MOUNT_PROGRAM: u32 = 100_005;
/// MOUNT protocol version 3.
pub const MOUNT_V3: u32 = 3;

pub const MOUNTPROC3_NULL: u32 = 0;
pub const MOUNTPROC3_MNT: u32 = 1;
pub const MOUNTPROC3_DUMP: u32 = 2;
pub const MOUNTPROC3_UMNT: u32 = 3;
pub const MOUNTPROC3_UMNTALL: u32 = 4;
pub const MOUNTPROC3_EXPORT: u32 = 5;

/// MOUNT `dirpath` bound (RFC 1813 section 5.1.1, MNTPATHLEN).
pub const MNTPATHLEN: u32 = 1024;
/// MOUNT `name` bound (RFC 1813 section 5.1.1, MNTNAMLEN).
pub const MNTNAMLEN: u32 = 255;
/// MOUNT v3 file handle bound (FHSIZE3).
pub const FHSIZE3: u32 = 64;

/// `mountstat3` (RFC 1813 section 5.1.5).
pub const MNT3_OK: u32 = 0;
pub const MNT3ERR_PERM: u32 = 1;
pub const MNT3ERR_NOENT: u32 = 2;
pub const MNT3ERR_IO: u32 = 5;
pub const MNT3ERR_ACCES: u32 = 13;
pub const MNT3ERR_NOTDIR: u32 = 20;
pub const MNT3ERR_INVAL: u32 = 22;
pub const MNT3ERR_NAMETOOLONG: u32 = 63;
pub const MNT3ERR_NOTSUPP: u32 = 10004;
pub const MNT3ERR_SERVERFAULT: u32 = 10006;

// ---------------------------------------------------------------------------
// NFSv3 protocol constants (RFC 1813 sections 2.4, 2.5, 2.6)
// ---------------------------------------------------------------------------

/// Maximum size of an `nfs_fh3` body (NFS3_FHSIZE).
pub const NFS3_FHSIZE: u32 = 64;
pub const NFS3_COOKIEVERFSIZE: usize = 8;
pub const NFS3_CREATEVERFSIZE: usize = 8;
pub const NFS3_WRITEVERFSIZE: usize = 8;
/// Bound on `filename3`. RFC 1813 leaves `filename3` unbounded (`string<>`);
/// 255 is the usual NAME_MAX that servers enforce.
pub const NFS3_MAXNAMLEN: u32 = 255;
/// Bound on `nfspath3`. RFC 1813 leaves `nfspath3` unbounded (`string<>`); 4096
/// is PATH_MAX, the value Linux uses for its NFS3_MAXPATHLEN, so symlink targets
/// Linux accepts are not refused here.
pub const NFS3_MAXPATHLEN: u32 = 4096;

/// `nfsstat3` (RFC 1813 section 2.6).
pub const NFS3_OK: u32 = 0;
pub const NFS3ERR_PERM: u32 = 1;
pub const NFS3ERR_NOENT: u32 = 2;
pub const NFS3ERR_IO: u32 = 5;
pub const NFS3ERR_NXIO: u32 = 6;
pub const NFS3ERR_ACCES: u32 = 13;
pub const NFS3ERR_EXIST: u32 = 17;
pub const NFS3ERR_XDEV: u32 = 18;
pub const NFS3ERR_NODEV: u32 = 19;
pub const NFS3ERR_NOTDIR: u32 = 20;
pub const NFS3ERR_ISDIR: u32 = 21;
pub const NFS3ERR_INVAL: u32 = 22;
pub const NFS3ERR_FBIG: u32 = 27;
pub const NFS3ERR_NOSPC: u32 = 28;
pub const NFS3ERR_ROFS: u32 = 30;
pub const NFS3ERR_MLINK: u32 = 31;
pub const NFS3ERR_NAMETOOLONG: u32 = 63;
pub const NFS3ERR_NOTEMPTY: u32 = 66;
pub const NFS3ERR_DQUOT: u32 = 69;
pub const NFS3ERR_STALE: u32 = 70;
pub const NFS3ERR_REMOTE: u32 = 71;
pub const NFS3ERR_BADHANDLE: u32 = 10001;
pub const NFS3ERR_NOT_SYNC: u32 = 10002;
pub const NFS3ERR_BAD_COOKIE: u32 = 10003;
pub const NFS3ERR_NOTSUPP: u32 = 10004;
pub const NFS3ERR_TOOSMALL: u32 = 10005;
pub const NFS3ERR_SERVERFAULT: u32 = 10006;
pub const NFS3ERR_BADTYPE: u32 = 10007;
pub const NFS3ERR_JUKEBOX: u32 = 10008;

/// `stable_how` (RFC 1813 section 3.3.7).
pub const UNSTABLE: u32 = 0;
pub const DATA_SYNC: u32 = 1;
pub const FILE_SYNC: u32 = 2;

/// `time_how` (RFC 1813 section 2.6, `set_atime` / `set_mtime`).
pub const DONT_CHANGE: u32 = 0;
pub const SET_TO_SERVER_TIME: u32 = 1;
pub const SET_TO_CLIENT_TIME: u32 = 2;

// ---------------------------------------------------------------------------
// Encoded sizes (RFC 1813 section 2.6)
// ---------------------------------------------------------------------------

/// `fattr3`: type, mode, nlink, uid, gid (5 words), size, used, rdev, fsid,
/// fileid, atime, mtime, ctime (8 double words).
pub const FATTR3_BYTES: usize = 5 * 4 + 8 * 8;
/// `post_op_attr` with attributes present.
pub const POST_OP_ATTR_MAX_BYTES: usize = 4 + FATTR3_BYTES;
/// `wcc_attr`: size, mtime, ctime.
pub const WCC_ATTR_BYTES: usize = 8 + 8 + 8;
/// `pre_op_attr` with attributes present.
pub const PRE_OP_ATTR_MAX_BYTES: usize = 4 + WCC_ATTR_BYTES;
/// `wcc_data`: before and after.
pub const WCC_DATA_MAX_BYTES: usize = PRE_OP_ATTR_MAX_BYTES + POST_OP_ATTR_MAX_BYTES;
/// `nfs_fh3` at its 64-byte bound.
pub const NFS_FH3_MAX_BYTES: usize = 4 + NFS3_FHSIZE as usize;
/// `post_op_fh3` with a handle present.
pub const POST_OP_FH3_MAX_BYTES: usize = 4 + NFS_FH3_MAX_BYTES;

const _: () = assert!(FATTR3_BYTES == 84);
const _: () = assert!(WCC_DATA_MAX_BYTES == 116);
const _: () = assert!(NFS3_FHSIZE == FHSIZE3);
const _: () = assert!(NFS3_FHSIZE & 3 == 0);

/// The largest results of an NFSv3 procedure (everything after the RPC reply
/// header), **after** reduction (RFC 8166 section 3.4.6): for READ and READLINK the data item is
/// in a Write chunk and only its length word remains. Taken over both the resok
/// and resfail arms with every optional attribute present and handles at 64
/// bytes.
///
/// `None` for READDIR and READDIRPLUS (bounded by the call's `count`/`maxcount`,
/// which the caller knows) and for unknown procedures.
pub const fn max_result_bytes(procedure: u32) -> Option<usize> {
    const ST: usize = 4; // nfsstat3
    let n = match procedure {
        NFSPROC3_NULL => 0,
        // status, fattr3
        NFSPROC3_GETATTR => ST + FATTR3_BYTES,
        // status, obj_wcc
        NFSPROC3_SETATTR => ST + WCC_DATA_MAX_BYTES,
        // status, object, obj_attributes, dir_attributes
        NFSPROC3_LOOKUP => ST + NFS_FH3_MAX_BYTES + 2 * POST_OP_ATTR_MAX_BYTES,
        // status, obj_attributes, access
        NFSPROC3_ACCESS => ST + POST_OP_ATTR_MAX_BYTES + 4,
        // status, symlink_attributes, data length word (data reduced)
        NFSPROC3_READLINK => ST + POST_OP_ATTR_MAX_BYTES + 4,
        // status, file_attributes, count, eof, data length word (data reduced)
        NFSPROC3_READ => ST + POST_OP_ATTR_MAX_BYTES + 4 + 4 + 4,
        // status, file_wcc, count, committed, verf
        NFSPROC3_WRITE => ST + WCC_DATA_MAX_BYTES + 4 + 4 + NFS3_WRITEVERFSIZE,
        // status, obj, obj_attributes, dir_wcc
        NFSPROC3_CREATE | NFSPROC3_MKDIR | NFSPROC3_SYMLINK | NFSPROC3_MKNOD => {
            ST + POST_OP_FH3_MAX_BYTES + POST_OP_ATTR_MAX_BYTES + WCC_DATA_MAX_BYTES
        }
        // status, dir_wcc
        NFSPROC3_REMOVE | NFSPROC3_RMDIR => ST + WCC_DATA_MAX_BYTES,
        // status, fromdir_wcc, todir_wcc
        NFSPROC3_RENAME => ST + 2 * WCC_DATA_MAX_BYTES,
        // status, file_attributes, linkdir_wcc
        NFSPROC3_LINK => ST + POST_OP_ATTR_MAX_BYTES + WCC_DATA_MAX_BYTES,
        // status, obj_attributes, tbytes fbytes abytes tfiles ffiles afiles, invarsec
        NFSPROC3_FSSTAT => ST + POST_OP_ATTR_MAX_BYTES + 6 * 8 + 4,
        // status, obj_attributes, rtmax rtpref rtmult wtmax wtpref wtmult dtpref,
        // maxfilesize, time_delta, properties
        NFSPROC3_FSINFO => ST + POST_OP_ATTR_MAX_BYTES + 7 * 4 + 8 + 8 + 4,
        // status, obj_attributes, linkmax, name_max, four bools
        NFSPROC3_PATHCONF => ST + POST_OP_ATTR_MAX_BYTES + 4 + 4 + 4 * 4,
        // status, file_wcc, verf
        NFSPROC3_COMMIT => ST + WCC_DATA_MAX_BYTES + NFS3_WRITEVERFSIZE,
        _ => return None,
    };
    Some(n)
}

// ---------------------------------------------------------------------------
// Decoders
// ---------------------------------------------------------------------------

/// A variable-length data item located in a message: `offset` is where its first
/// data byte sits (after the XDR length word), in the coordinates of the reader
/// it was decoded from; `data` excludes the XDR padding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DataAt<'a> {
    pub offset: usize,
    pub data: &'a [u8],
}

#[inline]
fn opaque_at<'a>(r: &mut Reader<'a>, max: u32, field: &'static str) -> Result<DataAt<'a>, DecodeError> {
    let offset = r.offset() + 4;
    let data = r.opaque_var(max, field)?;
    Ok(DataAt { offset, data })
}

#[inline]
fn bad(value: u32, field: &'static str, at: usize) -> DecodeError {
    DecodeError::new(DecodeErrorKind::BadDiscriminant { value }, field, at)
}

/// `nfs_fh3`: `opaque data<NFS3_FHSIZE>`. Returns the handle bytes.
#[inline]
pub fn nfs_fh3<'a>(r: &mut Reader<'a>, field: &'static str) -> Result<&'a [u8], DecodeError> {
    r.opaque_var(NFS3_FHSIZE, field)
}

/// `filename3`, bounded by [`NFS3_MAXNAMLEN`].
#[inline]
pub fn filename3<'a>(r: &mut Reader<'a>, field: &'static str) -> Result<&'a [u8], DecodeError> {
    r.string(NFS3_MAXNAMLEN, field)
}

/// Skip a `post_op_attr` (`bool attributes_follow`, then `fattr3` if true).
#[inline]
pub fn skip_post_op_attr(r: &mut Reader<'_>, field: &'static str) -> Result<(), DecodeError> {
    if r.bool(field)? {
        r.skip(FATTR3_BYTES, field)?;
    }
    Ok(())
}

/// Skip a `set_atime` / `set_mtime` union (`time_how set_it`, `nfstime3` if
/// SET_TO_CLIENT_TIME).
fn skip_set_time(r: &mut Reader<'_>, field: &'static str) -> Result<(), DecodeError> {
    let at = r.offset();
    match r.u32(field)? {
        DONT_CHANGE | SET_TO_SERVER_TIME => Ok(()),
        SET_TO_CLIENT_TIME => r.skip(8, field),
        v => Err(bad(v, field, at)),
    }
}

/// Skip a `sattr3` (RFC 1813 section 2.6): `mode`, `uid`, `gid` (`bool set_it`
/// then a `uint32`), `size` (`bool` then `uint64`), `atime`, `mtime`
/// (`time_how`, then `nfstime3` for SET_TO_CLIENT_TIME).
pub fn skip_sattr3(r: &mut Reader<'_>) -> Result<(), DecodeError> {
    for field in ["mode", "uid", "gid"] {
        if r.bool(field)? {
            r.skip(4, field)?;
        }
    }
    if r.bool("size")? {
        r.skip(8, "size")?;
    }
    skip_set_time(r, "atime")?;
    skip_set_time(r, "mtime")
}

/// `READ3args` (RFC 1813 section 3.3.6).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Read3Args<'a> {
    pub file: &'a [u8],
    pub offset: u64,
    pub count: u32,
}

impl<'a> Read3Args<'a> {
    pub fn decode(r: &mut Reader<'a>) -> Result<Self, DecodeError> {
        Ok(Self {
            file: nfs_fh3(r, "file")?,
            offset: r.u64("offset")?,
            count: r.u32("count")?,
        })
    }
}

/// `WRITE3args` (RFC 1813 section 3.3.7); `data` is the DDP-eligible item.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Write3Args<'a> {
    pub file: &'a [u8],
    pub offset: u64,
    pub count: u32,
    pub stable: u32,
    pub data: DataAt<'a>,
}

impl<'a> Write3Args<'a> {
    /// Decode, refusing `data` longer than `max_data_bytes` and `stable` values
    /// outside `stable_how`.
    pub fn decode(r: &mut Reader<'a>, max_data_bytes: u32) -> Result<Self, DecodeError> {
        let file = nfs_fh3(r, "file")?;
        let offset = r.u64("offset")?;
        let count = r.u32("count")?;
        let at = r.offset();
        let stable = r.u32("stable")?;
        if stable > FILE_SYNC {
            return Err(bad(stable, "stable", at));
        }
        let data = opaque_at(r, max_data_bytes, "data")?;
        Ok(Self {
            file,
            offset,
            count,
            stable,
            data,
        })
    }
}

/// `SYMLINK3args` (RFC 1813 section 3.3.10): `where` (dir, name), then
/// `symlink` (`symlink_attributes`, skipped, and `symlink_data`, the
/// DDP-eligible item).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Symlink3Args<'a> {
    pub dir: &'a [u8],
    pub name: &'a [u8],
    pub symlink_data: DataAt<'a>,
}

impl<'a> Symlink3Args<'a> {
    pub fn decode(r: &mut Reader<'a>, max_path_bytes: u32) -> Result<Self, DecodeError> {
        let dir = nfs_fh3(r, "dir")?;
        let name = filename3(r, "name")?;
        skip_sattr3(r)?;
        let symlink_data = opaque_at(r, max_path_bytes, "symlink_data")?;
        Ok(Self {
            dir,
            name,
            symlink_data,
        })
    }
}

/// `READ3resok` (RFC 1813 section 3.3.6), without the attributes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Read3ResOk<'a> {
    pub count: u32,
    pub eof: bool,
    pub data: DataAt<'a>,
}

/// `READ3res`: the status, and the resok arm when it is NFS3_OK.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Read3Res<'a> {
    pub status: u32,
    pub ok: Option<Read3ResOk<'a>>,
}

impl<'a> Read3Res<'a> {
    /// Decode, refusing `data` longer than `max_data_bytes`.
    pub fn decode(r: &mut Reader<'a>, max_data_bytes: u32) -> Result<Self, DecodeError> {
        let status = r.u32("status")?;
        skip_post_op_attr(r, "file_attributes")?;
        if status != NFS3_OK {
            return Ok(Self { status, ok: None });
        }
        let count = r.u32("count")?;
        let eof = r.bool("eof")?;
        let data = opaque_at(r, max_data_bytes, "data")?;
        Ok(Self {
            status,
            ok: Some(Read3ResOk { count, eof, data }),
        })
    }
}

/// `READLINK3res` (RFC 1813 section 3.3.5): the status, and the path when it is
/// NFS3_OK.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Readlink3Res<'a> {
    pub status: u32,
    pub data: Option<DataAt<'a>>,
}

impl<'a> Readlink3Res<'a> {
    /// Decode, refusing a path longer than `max_path_bytes`.
    pub fn decode(r: &mut Reader<'a>, max_path_bytes: u32) -> Result<Self, DecodeError> {
        let status = r.u32("status")?;
        skip_post_op_attr(r, "symlink_attributes")?;
        if status != NFS3_OK {
            return Ok(Self { status, data: None });
        }
        let data = opaque_at(r, max_path_bytes, "data")?;
        Ok(Self {
            status,
            data: Some(data),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(ws: &[u32]) -> Vec<u8> {
        ws.iter().flat_map(|w| w.to_be_bytes()).collect()
    }

    #[test]
    fn result_bounds() {
        assert_eq!(max_result_bytes(NFSPROC3_GETATTR), Some(88));
        assert_eq!(max_result_bytes(NFSPROC3_READ), Some(104));
        assert_eq!(max_result_bytes(NFSPROC3_CREATE), Some(4 + 72 + 88 + 116));
        assert_eq!(max_result_bytes(NFSPROC3_READDIR), None);
        assert_eq!(max_result_bytes(NFSPROC3_READDIRPLUS), None);
        assert_eq!(max_result_bytes(NFSPROC3_COUNT), None);
        for p in 0..NFSPROC3_COUNT {
            if p != NFSPROC3_READDIR && p != NFSPROC3_READDIRPLUS {
                assert!(max_result_bytes(p).is_some(), "proc {p}");
            }
        }
    }

    #[test]
    fn sattr3_every_arm() {
        // all set, client times
        let all = words(&[1, 0o644, 1, 1000, 1, 100, 1, 0, 4096, 2, 1, 2, 2, 3, 4]);
        let mut r = Reader::new(&all);
        skip_sattr3(&mut r).unwrap();
        assert_eq!(r.remaining(), 0);
        // nothing set, server time
        let none = words(&[0, 0, 0, 0, 0, 1]);
        let mut r = Reader::new(&none);
        skip_sattr3(&mut r).unwrap();
        assert_eq!(r.remaining(), 0);
        // bad time_how
        let bad = words(&[0, 0, 0, 0, 3, 0]);
        let e = skip_sattr3(&mut Reader::new(&bad)).unwrap_err();
        assert_eq!((e.field, e.offset), ("atime", 16));
        assert_eq!(e.kind, DecodeErrorKind::BadDiscriminant { value: 3 });
        // bad bool
        let bad = words(&[0, 2, 0, 0, 0, 0]);
        let e = skip_sattr3(&mut Reader::new(&bad)).unwrap_err();
        assert_eq!((e.field, e.offset), ("uid", 4));
        for n in 0..all.len() {
            assert!(skip_sattr3(&mut Reader::new(&all[..n])).is_err());
        }
    }

    #[test]
    fn read3_args_and_bad_stable() {
        let v = words(&[4, 0xaabb_ccdd, 0, 512, 4096]);
        let a = Read3Args::decode(&mut Reader::new(&v)).unwrap();
        assert_eq!(a.file, &[0xaa, 0xbb, 0xcc, 0xdd]);
        assert_eq!((a.offset, a.count), (512, 4096));
        let v = words(&[0, 0, 0, 1, 3, 0]);
        let e = Write3Args::decode(&mut Reader::new(&v), 16).unwrap_err();
        assert_eq!((e.field, e.offset), ("stable", 16));
        let v = words(&[0, 0, 0, 1, 2, 17]);
        let e = Write3Args::decode(&mut Reader::new(&v), 16).unwrap_err();
        assert_eq!(e.kind, DecodeErrorKind::TooLong { len: 17, max: 16 });
        // a 65-byte handle
        let v = words(&[65]);
        let e = nfs_fh3(&mut Reader::new(&v), "file").unwrap_err();
        assert_eq!(e.kind, DecodeErrorKind::TooLong { len: 65, max: 64 });
    }

    #[test]
    fn read3res_fail_arm() {
        // NFS3ERR_STALE with attributes present
        let mut v = words(&[NFS3ERR_STALE, 1]);
        v.extend_from_slice(&[0u8; FATTR3_BYTES]);
        let mut r = Reader::new(&v);
        let res = Read3Res::decode(&mut r, 1 << 20).unwrap();
        assert_eq!(
            res,
            Read3Res {
                status: NFS3ERR_STALE,
                ok: None
            }
        );
        assert_eq!(r.remaining(), 0);
        let v = words(&[NFS3ERR_IO, 0]);
        let res = Readlink3Res::decode(&mut Reader::new(&v), 4096).unwrap();
        assert_eq!(
            res,
            Readlink3Res {
                status: NFS3ERR_IO,
                data: None
            }
        );
    }
}
