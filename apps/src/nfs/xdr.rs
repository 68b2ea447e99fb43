//! XDR of the NFSv3 and MOUNT v3 arguments and results the gateway needs beyond
//! what `proto::nfs3` has (RFC 1813 sections 2.5, 2.6, 3.3 and 5.2).
//!
//! Decoders are zero-copy and bounded: every length is checked against a bound
//! and against the bytes present before it is used, and nothing allocates, so
//! they may run on peer input on any core. Encoders write into a caller-supplied
//! [`Writer`] and fail with `BufferTooSmall` when the head buffer is full.

use proto::error::{DecodeError, DecodeErrorKind, EncodeError};
use proto::nfs3::{self as p, DONT_CHANGE, SET_TO_CLIENT_TIME, SET_TO_SERVER_TIME};
use proto::xdr::{Reader, Writer};

use crate::backend::{Attr, CreateHow, FileType, NodeKind, SetAttr, SetTime, Time};

/// Longest file name read off the wire. `filename3` is unbounded in RFC 1813;
/// names up to this length decode, and the gateway answers names longer than
/// [`crate::backend::NAME_MAX_BYTES`] with NFS3ERR_NAMETOOLONG instead of
/// GARBAGE_ARGS.
pub const NAME_DECODE_MAX_BYTES: u32 = 1024;
/// Longest symbolic link target read off the wire (NFS3_MAXPATHLEN).
pub const PATH_DECODE_MAX_BYTES: u32 = p::NFS3_MAXPATHLEN;

// ---------------------------------------------------------------------------
// ACCESS bits (RFC 1813 section 3.3.4) and FSINFO properties (section 3.3.19)
// ---------------------------------------------------------------------------

pub const ACCESS3_READ: u32 = 0x0001;
pub const ACCESS3_LOOKUP: u32 = 0x0002;
pub const ACCESS3_MODIFY: u32 = 0x0004;
pub const ACCESS3_EXTEND: u32 = 0x0008;
pub const ACCESS3_DELETE: u32 = 0x0010;
pub const ACCESS3_EXECUTE: u32 = 0x0020;
/// Every ACCESS bit RFC 1813 defines.
pub const ACCESS3_ALL: u32 = 0x003f;

pub const FSF3_LINK: u32 = 0x0001;
pub const FSF3_SYMLINK: u32 = 0x0002;
pub const FSF3_HOMOGENEOUS: u32 = 0x0008;
pub const FSF3_CANSETTIME: u32 = 0x0010;

/// `createmode3` (RFC 1813 section 3.3.8).
pub const UNCHECKED: u32 = 0;
pub const GUARDED: u32 = 1;
pub const EXCLUSIVE: u32 = 2;

/// `ftype3` values (RFC 1813 section 2.6).
pub const NF3REG: u32 = 1;
pub const NF3DIR: u32 = 2;
pub const NF3BLK: u32 = 3;
pub const NF3CHR: u32 = 4;
pub const NF3LNK: u32 = 5;
pub const NF3SOCK: u32 = 6;
pub const NF3FIFO: u32 = 7;

#[inline]
fn bad(value: u32, field: &'static str, at: usize) -> DecodeError {
    DecodeError::new(DecodeErrorKind::BadDiscriminant { value }, field, at)
}

// ---------------------------------------------------------------------------
// Decoders
// ---------------------------------------------------------------------------

/// `nfstime3`.
pub fn nfstime3(r: &mut Reader<'_>, field: &'static str) -> Result<Time, DecodeError> {
    Ok(Time {
        secs: r.u32(field)?,
        nsecs: r.u32(field)?,
    })
}

fn set_time(r: &mut Reader<'_>, field: &'static str) -> Result<SetTime, DecodeError> {
    let at = r.offset();
    match r.u32(field)? {
        DONT_CHANGE => Ok(SetTime::DontChange),
        SET_TO_SERVER_TIME => Ok(SetTime::ServerTime),
        SET_TO_CLIENT_TIME => Ok(SetTime::Client(nfstime3(r, field)?)),
        v => Err(bad(v, field, at)),
    }
}

fn opt_u32(r: &mut Reader<'_>, field: &'static str) -> Result<Option<u32>, DecodeError> {
    Ok(if r.bool(field)? { Some(r.u32(field)?) } else { None })
}

/// `sattr3` (RFC 1813 section 2.6).
pub fn sattr3(r: &mut Reader<'_>) -> Result<SetAttr, DecodeError> {
    let mode = opt_u32(r, "mode")?;
    let uid = opt_u32(r, "uid")?;
    let gid = opt_u32(r, "gid")?;
    let size = if r.bool("size")? { Some(r.u64("size")?) } else { None };
    let atime = set_time(r, "atime")?;
    let mtime = set_time(r, "mtime")?;
    Ok(SetAttr {
        mode,
        uid,
        gid,
        size,
        atime,
        mtime,
    })
}

/// `filename3`, decoded up to [`NAME_DECODE_MAX_BYTES`] (see there).
#[inline]
pub fn name<'a>(r: &mut Reader<'a>, field: &'static str) -> Result<&'a [u8], DecodeError> {
    r.string(NAME_DECODE_MAX_BYTES, field)
}

/// `diropargs3`: a directory handle and a name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DirOpArgs<'a> {
    pub dir: &'a [u8],
    pub name: &'a [u8],
}

/// `diropargs3`.
pub fn diropargs3<'a>(r: &mut Reader<'a>) -> Result<DirOpArgs<'a>, DecodeError> {
    Ok(DirOpArgs {
        dir: p::nfs_fh3(r, "dir")?,
        name: name(r, "name")?,
    })
}

/// `SETATTR3args` (RFC 1813 section 3.3.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SetattrArgs<'a> {
    pub object: &'a [u8],
    pub attrs: SetAttr,
    /// `sattrguard3`: the ctime the object must still have.
    pub guard: Option<Time>,
}

impl<'a> SetattrArgs<'a> {
    pub fn decode(r: &mut Reader<'a>) -> Result<Self, DecodeError> {
        let object = p::nfs_fh3(r, "object")?;
        let attrs = sattr3(r)?;
        let guard = if r.bool("guard")? {
            Some(nfstime3(r, "obj_ctime")?)
        } else {
            None
        };
        Ok(Self { object, attrs, guard })
    }
}

/// `ACCESS3args` (section 3.3.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AccessArgs<'a> {
    pub object: &'a [u8],
    pub access: u32,
}

impl<'a> AccessArgs<'a> {
    pub fn decode(r: &mut Reader<'a>) -> Result<Self, DecodeError> {
        Ok(Self {
            object: p::nfs_fh3(r, "object")?,
            access: r.u32("access")?,
        })
    }
}

/// The fixed part of `WRITE3args` (section 3.3.7) up to and including the
/// data length word; the data itself may sit in a Read chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WriteHead<'a> {
    pub file: &'a [u8],
    pub offset: u64,
    pub count: u32,
    pub stable: u32,
    /// The `data<>` length word.
    pub data_len: u32,
}

impl<'a> WriteHead<'a> {
    pub fn decode(r: &mut Reader<'a>) -> Result<Self, DecodeError> {
        let file = p::nfs_fh3(r, "file")?;
        let offset = r.u64("offset")?;
        let count = r.u32("count")?;
        let at = r.offset();
        let stable = r.u32("stable")?;
        if stable > p::FILE_SYNC {
            return Err(bad(stable, "stable", at));
        }
        let data_len = r.u32("data")?;
        Ok(Self {
            file,
            offset,
            count,
            stable,
            data_len,
        })
    }
}

/// `CREATE3args` (section 3.3.8).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CreateArgs<'a> {
    pub where_: DirOpArgs<'a>,
    pub how: CreateHow,
}

impl<'a> CreateArgs<'a> {
    pub fn decode(r: &mut Reader<'a>) -> Result<Self, DecodeError> {
        let where_ = diropargs3(r)?;
        let at = r.offset();
        let how = match r.u32("mode")? {
            UNCHECKED => CreateHow::Unchecked(sattr3(r)?),
            GUARDED => CreateHow::Guarded(sattr3(r)?),
            EXCLUSIVE => {
                let v = r.opaque_fixed(p::NFS3_CREATEVERFSIZE, "verf")?;
                let mut verf = [0u8; 8];
                verf.copy_from_slice(v);
                CreateHow::Exclusive(verf)
            }
            v => return Err(bad(v, "mode", at)),
        };
        Ok(Self { where_, how })
    }
}

/// `MKDIR3args` (section 3.3.9).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MkdirArgs<'a> {
    pub where_: DirOpArgs<'a>,
    pub attrs: SetAttr,
}

impl<'a> MkdirArgs<'a> {
    pub fn decode(r: &mut Reader<'a>) -> Result<Self, DecodeError> {
        Ok(Self {
            where_: diropargs3(r)?,
            attrs: sattr3(r)?,
        })
    }
}

/// `SYMLINK3args` (section 3.3.10).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SymlinkArgs<'a> {
    pub where_: DirOpArgs<'a>,
    pub attrs: SetAttr,
    pub target: &'a [u8],
}

impl<'a> SymlinkArgs<'a> {
    pub fn decode(r: &mut Reader<'a>) -> Result<Self, DecodeError> {
        Ok(Self {
            where_: diropargs3(r)?,
            attrs: sattr3(r)?,
            target: r.string(PATH_DECODE_MAX_BYTES, "symlink_data")?,
        })
    }
}

/// `MKNOD3args` (section 3.3.11). `kind` is `None` for the types MKNOD cannot
/// create (regular files, directories, links: NFS3ERR_BADTYPE).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MknodArgs<'a> {
    pub where_: DirOpArgs<'a>,
    pub kind: Option<NodeKind>,
    pub attrs: SetAttr,
}

impl<'a> MknodArgs<'a> {
    pub fn decode(r: &mut Reader<'a>) -> Result<Self, DecodeError> {
        let where_ = diropargs3(r)?;
        let at = r.offset();
        let t = r.u32("type")?;
        let (kind, attrs) = match t {
            NF3CHR | NF3BLK => {
                let attrs = sattr3(r)?;
                let major = r.u32("specdata1")?;
                let minor = r.u32("specdata2")?;
                let k = if t == NF3CHR {
                    NodeKind::Char { major, minor }
                } else {
                    NodeKind::Block { major, minor }
                };
                (Some(k), attrs)
            }
            NF3SOCK => (Some(NodeKind::Socket), sattr3(r)?),
            NF3FIFO => (Some(NodeKind::Fifo), sattr3(r)?),
            NF3REG | NF3DIR | NF3LNK => (None, SetAttr::default()),
            v => return Err(bad(v, "type", at)),
        };
        Ok(Self { where_, kind, attrs })
    }
}

/// `RENAME3args` (section 3.3.14).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RenameArgs<'a> {
    pub from: DirOpArgs<'a>,
    pub to: DirOpArgs<'a>,
}

impl<'a> RenameArgs<'a> {
    pub fn decode(r: &mut Reader<'a>) -> Result<Self, DecodeError> {
        Ok(Self {
            from: diropargs3(r)?,
            to: diropargs3(r)?,
        })
    }
}

/// `LINK3args` (section 3.3.15).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinkArgs<'a> {
    pub file: &'a [u8],
    pub link: DirOpArgs<'a>,
}

impl<'a> LinkArgs<'a> {
    pub fn decode(r: &mut Reader<'a>) -> Result<Self, DecodeError> {
        Ok(Self {
            file: p::nfs_fh3(r, "file")?,
            link: diropargs3(r)?,
        })
    }
}

/// `READDIR3args` (section 3.3.16) and `READDIRPLUS3args` (section 3.3.17):
/// READDIR's `count` is `maxcount` here and `dircount` equals it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReaddirArgs<'a> {
    pub dir: &'a [u8],
    pub cookie: u64,
    pub cookieverf: u64,
    pub dircount: u32,
    pub maxcount: u32,
}

impl<'a> ReaddirArgs<'a> {
    /// `plus`: READDIRPLUS (two counts) instead of READDIR (one).
    pub fn decode(r: &mut Reader<'a>, plus: bool) -> Result<Self, DecodeError> {
        let dir = p::nfs_fh3(r, "dir")?;
        let cookie = r.u64("cookie")?;
        let cookieverf = r.u64("cookieverf")?;
        let dircount = r.u32(if plus { "dircount" } else { "count" })?;
        let maxcount = if plus { r.u32("maxcount")? } else { dircount };
        Ok(Self {
            dir,
            cookie,
            cookieverf,
            dircount,
            maxcount,
        })
    }
}

/// `COMMIT3args` (section 3.3.21).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CommitArgs<'a> {
    pub file: &'a [u8],
    pub offset: u64,
    pub count: u32,
}

impl<'a> CommitArgs<'a> {
    pub fn decode(r: &mut Reader<'a>) -> Result<Self, DecodeError> {
        Ok(Self {
            file: p::nfs_fh3(r, "file")?,
            offset: r.u64("offset")?,
            count: r.u32("count")?,
        })
    }
}

/// MOUNT `dirpath` (RFC 1813 section 5.1.1, bounded by MNTPATHLEN).
pub fn dirpath<'a>(r: &mut Reader<'a>) -> Result<&'a [u8], DecodeError> {
    r.string(p::MNTPATHLEN, "dirpath")
}

// ---------------------------------------------------------------------------
// Encoders
// ---------------------------------------------------------------------------

/// `nfstime3`.
pub fn put_time(w: &mut Writer<'_>, t: Time) -> Result<(), EncodeError> {
    w.put_u32(t.secs)?;
    w.put_u32(t.nsecs)
}

/// `fattr3` with the export's `fsid`.
pub fn put_fattr3(w: &mut Writer<'_>, a: &Attr, fsid: u64) -> Result<(), EncodeError> {
    if w.remaining() < p::FATTR3_BYTES {
        return Err(EncodeError::BufferTooSmall {
            needed: w.len() + p::FATTR3_BYTES,
        });
    }
    let (major, minor) = match a.ftype {
        FileType::Block | FileType::Char => a.rdev,
        _ => (0, 0),
    };
    let hi = |v: u64| (v >> 32) as u32;
    // RFC 1813 s2.6: type, mode, nlink, uid, gid, size, used, rdev, fsid,
    // fileid, atime, mtime, ctime; written as one block of 21 words.
    w.put_u32s([
        a.ftype.ftype3(),
        a.mode & 0o7777,
        a.nlink,
        a.uid,
        a.gid,
        hi(a.size),
        a.size as u32,
        hi(a.used),
        a.used as u32,
        major,
        minor,
        hi(fsid),
        fsid as u32,
        hi(a.fileid),
        a.fileid as u32,
        a.atime.secs,
        a.atime.nsecs,
        a.mtime.secs,
        a.mtime.nsecs,
        a.ctime.secs,
        a.ctime.nsecs,
    ])
}

/// `post_op_attr`.
pub fn put_post_op_attr(w: &mut Writer<'_>, a: Option<&Attr>, fsid: u64) -> Result<(), EncodeError> {
    match a {
        Some(a) => {
            w.put_bool(true)?;
            put_fattr3(w, a, fsid)
        }
        None => w.put_bool(false),
    }
}

/// `pre_op_attr` (a `wcc_attr`: size, mtime, ctime).
pub fn put_pre_op_attr(w: &mut Writer<'_>, a: Option<&Attr>) -> Result<(), EncodeError> {
    match a {
        Some(a) => {
            w.put_bool(true)?;
            w.put_u64(a.size)?;
            put_time(w, a.mtime)?;
            put_time(w, a.ctime)
        }
        None => w.put_bool(false),
    }
}

/// `wcc_data`.
pub fn put_wcc(w: &mut Writer<'_>, pre: Option<&Attr>, post: Option<&Attr>, fsid: u64) -> Result<(), EncodeError> {
    put_pre_op_attr(w, pre)?;
    put_post_op_attr(w, post, fsid)
}

/// `post_op_fh3`.
pub fn put_post_op_fh3(w: &mut Writer<'_>, fh: Option<&[u8]>) -> Result<(), EncodeError> {
    match fh {
        Some(b) => {
            w.put_bool(true)?;
            w.put_opaque_var(b)
        }
        None => w.put_bool(false),
    }
}

/// Encoded size of an `entry3` (READDIR) with a name of `name_len` bytes:
/// value_follows, fileid, name, cookie.
pub const fn entry3_bytes(name_len: usize) -> usize {
    4 + 8 + 4 + proto::xdr::roundup(name_len) + 8
}

/// Encoded size of an `entryplus3` with attributes and a handle of `fh_len`
/// bytes: [`entry3_bytes`] plus `post_op_attr` and `post_op_fh3`.
pub const fn entryplus3_bytes(name_len: usize, fh_len: usize) -> usize {
    entry3_bytes(name_len) + p::POST_OP_ATTR_MAX_BYTES + 4 + 4 + proto::xdr::roundup(fh_len)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(ws: &[u32]) -> Vec<u8> {
        ws.iter().flat_map(|w| w.to_be_bytes()).collect()
    }

    #[test]
    fn sattr3_arms() {
        let v = words(&[1, 0o640, 1, 7, 0, 1, 0, 99, 2, 5, 6, 1]);
        let mut r = Reader::new(&v);
        let s = sattr3(&mut r).unwrap();
        assert_eq!(r.remaining(), 0);
        assert_eq!(s.mode, Some(0o640));
        assert_eq!(s.uid, Some(7));
        assert_eq!(s.gid, None);
        assert_eq!(s.size, Some(99));
        assert_eq!(s.atime, SetTime::Client(Time { secs: 5, nsecs: 6 }));
        assert_eq!(s.mtime, SetTime::ServerTime);
        let bad = words(&[0, 0, 0, 0, 3, 0]);
        assert_eq!(
            sattr3(&mut Reader::new(&bad)).unwrap_err().kind,
            DecodeErrorKind::BadDiscriminant { value: 3 }
        );
    }

    #[test]
    fn create_modes() {
        let mut v = words(&[4, 0x0102_0304, 1, u32::from_be_bytes(*b"f\0\0\0")]);
        v.extend(words(&[EXCLUSIVE]));
        v.extend_from_slice(b"verifier");
        let a = CreateArgs::decode(&mut Reader::new(&v)).unwrap();
        assert_eq!(a.where_.name, b"f");
        assert_eq!(a.how, CreateHow::Exclusive(*b"verifier"));
        let mut v = words(&[4, 1, 1, u32::from_be_bytes(*b"f\0\0\0")]);
        v.extend(words(&[3]));
        assert!(CreateArgs::decode(&mut Reader::new(&v)).is_err());
    }

    #[test]
    fn mknod_types() {
        let base = words(&[4, 1, 1, u32::from_be_bytes(*b"n\0\0\0")]);
        let mut chr = base.clone();
        chr.extend(words(&[NF3CHR, 0, 0, 0, 0, 0, 0, 5, 9]));
        let a = MknodArgs::decode(&mut Reader::new(&chr)).unwrap();
        assert_eq!(a.kind, Some(NodeKind::Char { major: 5, minor: 9 }));
        let mut reg = base.clone();
        reg.extend(words(&[NF3REG]));
        assert_eq!(MknodArgs::decode(&mut Reader::new(&reg)).unwrap().kind, None);
        let mut bad = base;
        bad.extend(words(&[8]));
        assert!(MknodArgs::decode(&mut Reader::new(&bad)).is_err());
    }

    /// Every field in RFC 1813's order (s2.6 `fattr3`), 64-bit values most
    /// significant word first; device numbers only for device files.
    #[test]
    fn fattr3_fields_in_order() {
        let t = |secs, nsecs| crate::backend::Time { secs, nsecs };
        let mut a = Attr {
            ftype: FileType::Char,
            mode: 0o104_755,
            nlink: 3,
            uid: 1000,
            gid: 100,
            size: 0x1_0000_0002,
            used: 0x3_0000_0004,
            rdev: (8, 1),
            fileid: 0x5_0000_0006,
            atime: t(11, 12),
            mtime: t(13, 14),
            ctime: t(15, 16),
        };
        let fsid = 0x7_0000_0008;
        let put = |a: &Attr| {
            let mut b = [0u8; 84];
            put_fattr3(&mut Writer::new(&mut b), a, fsid).unwrap();
            b.chunks(4)
                .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]))
                .collect::<Vec<u32>>()
        };
        assert_eq!(
            put(&a),
            [4, 0o4755, 3, 1000, 100, 1, 2, 3, 4, 8, 1, 7, 8, 5, 6, 11, 12, 13, 14, 15, 16]
        );
        a.ftype = FileType::Regular;
        assert_eq!(put(&a)[..11], [1, 0o4755, 3, 1000, 100, 1, 2, 3, 4, 0, 0]);
    }

    #[test]
    fn fattr3_is_84_bytes() {
        let mut b = [0u8; 128];
        let mut w = Writer::new(&mut b);
        put_fattr3(&mut w, &Attr::default(), 7).unwrap();
        assert_eq!(w.len(), p::FATTR3_BYTES);
        let mut small = [0u8; 80];
        let mut w = Writer::new(&mut small);
        assert!(put_fattr3(&mut w, &Attr::default(), 7).is_err());
        assert_eq!(w.len(), 0, "nothing written on overflow");
    }
}
