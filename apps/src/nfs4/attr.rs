//! GETATTR's `fattr4` (RFC 8881 s5): the mandatory attributes and the
//! recommended ones the Linux client asks for, from the backend's
//! attributes.
//!
//! Owners are numeric strings (`"1000"`), as the Linux client expects with
//! AUTH_SYS and id mapping off. `change` is the ctime in nanoseconds.
//! Attributes not in [`SUPPORTED`] are left out of the reply's bitmap
//! (RFC 8881 s18.7.3: GETATTR returns only supported attributes).

use proto::error::EncodeError;
use proto::nfs4::*;
use proto::xdr::Writer;

use crate::backend::{Attr, FileType, FsStat, Time};

use super::state::LEASE_SECS;

/// Every attribute GETATTR and READDIR return.
pub const SUPPORTED: Bitmap = Bitmap::of(&[
    FATTR4_SUPPORTED_ATTRS,
    FATTR4_TYPE,
    FATTR4_FH_EXPIRE_TYPE,
    FATTR4_CHANGE,
    FATTR4_SIZE,
    FATTR4_LINK_SUPPORT,
    FATTR4_SYMLINK_SUPPORT,
    FATTR4_NAMED_ATTR,
    FATTR4_FSID,
    FATTR4_UNIQUE_HANDLES,
    FATTR4_LEASE_TIME,
    FATTR4_RDATTR_ERROR,
    FATTR4_CANSETTIME,
    FATTR4_CASE_INSENSITIVE,
    FATTR4_CASE_PRESERVING,
    FATTR4_CHOWN_RESTRICTED,
    FATTR4_FILEHANDLE,
    FATTR4_FILEID,
    FATTR4_FILES_AVAIL,
    FATTR4_FILES_FREE,
    FATTR4_FILES_TOTAL,
    FATTR4_HOMOGENEOUS,
    FATTR4_MAXFILESIZE,
    FATTR4_MAXLINK,
    FATTR4_MAXNAME,
    FATTR4_MAXREAD,
    FATTR4_MAXWRITE,
    FATTR4_MODE,
    FATTR4_NO_TRUNC,
    FATTR4_NUMLINKS,
    FATTR4_OWNER,
    FATTR4_OWNER_GROUP,
    FATTR4_RAWDEV,
    FATTR4_SPACE_AVAIL,
    FATTR4_SPACE_FREE,
    FATTR4_SPACE_TOTAL,
    FATTR4_SPACE_USED,
    FATTR4_TIME_ACCESS,
    FATTR4_TIME_ACCESS_SET,
    FATTR4_TIME_DELTA,
    FATTR4_TIME_METADATA,
    FATTR4_TIME_MODIFY,
    FATTR4_TIME_MODIFY_SET,
    FATTR4_MOUNTED_ON_FILEID,
    FATTR4_SUPPATTR_EXCLCREAT,
]);

/// Attributes an EXCLUSIVE4_1 create may set (RFC 8881 s5.8.1.14).
pub const EXCLCREAT: Bitmap = Bitmap::of(&[
    FATTR4_SIZE,
    FATTR4_MODE,
    FATTR4_OWNER,
    FATTR4_OWNER_GROUP,
    FATTR4_TIME_ACCESS_SET,
]);

/// Attributes that can be set but not read (access "W" in RFC 8881 s5.7's
/// table): a GETATTR leaves them out.
const WRITE_ONLY: Bitmap = Bitmap::of(&[FATTR4_TIME_ACCESS_SET, FATTR4_TIME_MODIFY_SET]);

/// Attributes that need the file system's statistics.
const NEEDS_FSSTAT: Bitmap = Bitmap::of(&[
    FATTR4_FILES_AVAIL,
    FATTR4_FILES_FREE,
    FATTR4_FILES_TOTAL,
    FATTR4_SPACE_AVAIL,
    FATTR4_SPACE_FREE,
    FATTR4_SPACE_TOTAL,
    FATTR4_MAXFILESIZE,
]);

/// Largest READ/WRITE, names, links.
pub const MAX_LINKS: u32 = 32_000;

/// What the attributes of one object are made of.
#[derive(Clone, Copy, Debug)]
pub struct Obj<'a> {
    pub attr: Attr,
    pub fsid: (u64, u64),
    /// The wire handle.
    pub fh: &'a [u8],
    pub mounted_on_fileid: u64,
    pub max_io: u32,
}

/// Whether `req` asks for something only [`FsStat`] has.
pub fn wants_fsstat(req: &Bitmap) -> bool {
    !req.and(&NEEDS_FSSTAT).is_empty()
}

fn ftype4(t: FileType) -> u32 {
    match t {
        FileType::Regular => NF4REG,
        FileType::Directory => NF4DIR,
        FileType::Block => NF4BLK,
        FileType::Char => NF4CHR,
        FileType::Symlink => NF4LNK,
        FileType::Socket => NF4SOCK,
        FileType::Fifo => NF4FIFO,
    }
}

/// The `change` attribute: ctime in nanoseconds.
pub fn change(a: &Attr) -> u64 {
    u64::from(a.ctime.secs) * 1_000_000_000 + u64::from(a.ctime.nsecs)
}

fn put_time(w: &mut Writer<'_>, t: Time) -> Result<(), EncodeError> {
    w.put_u64(u64::from(t.secs))?;
    w.put_u32(t.nsecs)
}

fn put_bitmap(w: &mut Writer<'_>, b: &Bitmap) -> Result<(), EncodeError> {
    let words = b.encoded_words();
    w.put_u32(words.len() as u32)?;
    for &x in words {
        w.put_u32(x)?;
    }
    Ok(())
}

/// Write `bitmap4`.
pub fn bitmap(w: &mut Writer<'_>, b: &Bitmap) -> Result<(), EncodeError> {
    put_bitmap(w, b)
}

/// A decimal owner string, without allocating.
fn put_id(w: &mut Writer<'_>, id: u32) -> Result<(), EncodeError> {
    let mut buf = [0u8; 10];
    let mut n = 0;
    let mut v = id;
    loop {
        buf[9 - n] = b'0' + (v % 10) as u8;
        n += 1;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    w.put_opaque_var(&buf[10 - n..])
}

/// Write `fattr4` for the attributes of `req` we support: the bitmap of
/// those returned, then their values. `fs` must be `Some` when
/// [`wants_fsstat`] says so (else those attributes are left out).
pub fn fattr(w: &mut Writer<'_>, req: &Bitmap, o: &Obj<'_>, fs: Option<&FsStat>) -> Result<(), EncodeError> {
    // The write-only time_*_set attributes have no value to read.
    let mut give = req.and(&SUPPORTED).and_not(&WRITE_ONLY);
    if fs.is_none() {
        give = give.and_not(&NEEDS_FSSTAT);
    }
    put_bitmap(w, &give)?;
    let len_at = w.len();
    w.put_u32(0)?;
    let a = &o.attr;
    let fs = fs.copied().unwrap_or_default();
    for n in give.iter() {
        match n {
            FATTR4_SUPPORTED_ATTRS => put_bitmap(w, &SUPPORTED)?,
            FATTR4_TYPE => w.put_u32(ftype4(a.ftype))?,
            FATTR4_FH_EXPIRE_TYPE => w.put_u32(FH4_PERSISTENT)?,
            FATTR4_CHANGE => w.put_u64(change(a))?,
            FATTR4_SIZE => w.put_u64(a.size)?,
            FATTR4_LINK_SUPPORT | FATTR4_SYMLINK_SUPPORT => w.put_bool(true)?,
            FATTR4_NAMED_ATTR => w.put_bool(false)?,
            FATTR4_FSID => {
                w.put_u64(o.fsid.0)?;
                w.put_u64(o.fsid.1)?;
            }
            FATTR4_UNIQUE_HANDLES => w.put_bool(true)?,
            FATTR4_LEASE_TIME => w.put_u32(LEASE_SECS)?,
            FATTR4_RDATTR_ERROR => w.put_u32(NFS4_OK)?,
            FATTR4_CANSETTIME => w.put_bool(true)?,
            FATTR4_CASE_INSENSITIVE => w.put_bool(false)?,
            FATTR4_CASE_PRESERVING => w.put_bool(true)?,
            FATTR4_CHOWN_RESTRICTED => w.put_bool(true)?,
            FATTR4_FILEHANDLE => w.put_opaque_var(o.fh)?,
            FATTR4_FILEID => w.put_u64(a.fileid)?,
            FATTR4_FILES_AVAIL => w.put_u64(fs.avail_files)?,
            FATTR4_FILES_FREE => w.put_u64(fs.free_files)?,
            FATTR4_FILES_TOTAL => w.put_u64(fs.total_files)?,
            FATTR4_HOMOGENEOUS => w.put_bool(true)?,
            FATTR4_MAXFILESIZE => w.put_u64(fs.max_file_size)?,
            FATTR4_MAXLINK => w.put_u32(MAX_LINKS)?,
            FATTR4_MAXNAME => w.put_u32(MAX_NAME_BYTES)?,
            FATTR4_MAXREAD | FATTR4_MAXWRITE => w.put_u64(u64::from(o.max_io))?,
            FATTR4_MODE => w.put_u32(a.mode & 0o7777)?,
            FATTR4_NO_TRUNC => w.put_bool(true)?,
            FATTR4_NUMLINKS => w.put_u32(a.nlink)?,
            FATTR4_OWNER => put_id(w, a.uid)?,
            FATTR4_OWNER_GROUP => put_id(w, a.gid)?,
            FATTR4_RAWDEV => {
                w.put_u32(a.rdev.0)?;
                w.put_u32(a.rdev.1)?;
            }
            FATTR4_SPACE_AVAIL => w.put_u64(fs.avail_bytes)?,
            FATTR4_SPACE_FREE => w.put_u64(fs.free_bytes)?,
            FATTR4_SPACE_TOTAL => w.put_u64(fs.total_bytes)?,
            FATTR4_SPACE_USED => w.put_u64(a.used)?,
            FATTR4_TIME_ACCESS => put_time(w, a.atime)?,
            FATTR4_TIME_DELTA => put_time(w, Time { secs: 0, nsecs: 1 })?,
            FATTR4_TIME_METADATA => put_time(w, a.ctime)?,
            FATTR4_TIME_MODIFY => put_time(w, a.mtime)?,
            FATTR4_MOUNTED_ON_FILEID => w.put_u64(o.mounted_on_fileid)?,
            FATTR4_SUPPATTR_EXCLCREAT => put_bitmap(w, &EXCLCREAT)?,
            _ => {}
        }
    }
    let n = w.len() - len_at - 4;
    w.patch_u32(len_at, n as u32)
}
