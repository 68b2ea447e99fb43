//! The settable attributes of a `fattr4` in a Call (SETATTR, CREATE, OPEN's
//! `createattrs`, EXCLUSIVE4_1's `cva_attrs`): RFC 8881 s5.6 / s5.7.
//!
//! Values follow the bitmap in ascending attribute order and must use up
//! `attr_vals` exactly (else NFS4ERR_BADXDR). A read-only attribute is
//! NFS4ERR_INVAL, one we do not support NFS4ERR_ATTRNOTSUPP (RFC 8881
//! s18.30.4). Owners are numeric strings (what the Linux client sends for
//! AUTH_SYS when id mapping is off); anything else is NFS4ERR_BADOWNER.

use super::args::Fattr;
use super::*;
use crate::xdr::Reader;

/// How a time attribute is set (`settime4`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetTime4 {
    Server,
    Client { secs: i64, nsecs: u32 },
}

/// The settable attributes we support, decoded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SetAttrs4 {
    pub size: Option<u64>,
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub atime: Option<SetTime4>,
    pub mtime: Option<SetTime4>,
    /// The attributes set (the `attrsset` of the reply when they apply).
    pub mask: Bitmap,
}

/// The attributes a client may set here.
pub const SETTABLE: Bitmap = Bitmap::of(&[
    FATTR4_SIZE,
    FATTR4_MODE,
    FATTR4_OWNER,
    FATTR4_OWNER_GROUP,
    FATTR4_TIME_ACCESS_SET,
    FATTR4_TIME_MODIFY_SET,
]);

/// Read-only attributes of RFC 8881 s5.6 and s5.7 we know (setting one is
/// NFS4ERR_INVAL).
const READ_ONLY: Bitmap = Bitmap::of(&[
    FATTR4_SUPPORTED_ATTRS,
    FATTR4_TYPE,
    FATTR4_FH_EXPIRE_TYPE,
    FATTR4_CHANGE,
    FATTR4_LINK_SUPPORT,
    FATTR4_SYMLINK_SUPPORT,
    FATTR4_NAMED_ATTR,
    FATTR4_FSID,
    FATTR4_UNIQUE_HANDLES,
    FATTR4_LEASE_TIME,
    FATTR4_RDATTR_ERROR,
    FATTR4_FILEHANDLE,
    FATTR4_FILEID,
    FATTR4_FILES_AVAIL,
    FATTR4_FILES_FREE,
    FATTR4_FILES_TOTAL,
    FATTR4_MAXFILESIZE,
    FATTR4_MAXLINK,
    FATTR4_MAXNAME,
    FATTR4_MAXREAD,
    FATTR4_MAXWRITE,
    FATTR4_NUMLINKS,
    FATTR4_RAWDEV,
    FATTR4_SPACE_AVAIL,
    FATTR4_SPACE_FREE,
    FATTR4_SPACE_TOTAL,
    FATTR4_SPACE_USED,
    FATTR4_TIME_ACCESS,
    FATTR4_TIME_DELTA,
    FATTR4_TIME_METADATA,
    FATTR4_TIME_MODIFY,
    FATTR4_MOUNTED_ON_FILEID,
    FATTR4_SUPPATTR_EXCLCREAT,
]);

/// A numeric owner or group string (`"1000"`); NFS4ERR_BADOWNER otherwise.
pub fn numeric_id(s: &[u8]) -> Result<u32, u32> {
    if s.is_empty() || s.len() > 10 || !s.iter().all(u8::is_ascii_digit) {
        return Err(NFS4ERR_BADOWNER);
    }
    s.iter()
        .try_fold(0u32, |n, &d| n.checked_mul(10)?.checked_add(u32::from(d - b'0')))
        .ok_or(NFS4ERR_BADOWNER)
}

fn settime(r: &mut Reader<'_>) -> Result<SetTime4, u32> {
    match r.u32("set_it").map_err(|_| NFS4ERR_BADXDR)? {
        SET_TO_SERVER_TIME4 => Ok(SetTime4::Server),
        SET_TO_CLIENT_TIME4 => {
            let secs = r.u64("seconds").map_err(|_| NFS4ERR_BADXDR)? as i64;
            let nsecs = r.u32("nseconds").map_err(|_| NFS4ERR_BADXDR)?;
            if nsecs >= 1_000_000_000 {
                return Err(NFS4ERR_INVAL);
            }
            Ok(SetTime4::Client { secs, nsecs })
        }
        _ => Err(NFS4ERR_BADXDR),
    }
}

/// Decode `f` as attributes to set; the status to answer otherwise.
pub fn decode_settable(f: &Fattr<'_>) -> Result<SetAttrs4, u32> {
    let mut out = SetAttrs4 {
        mask: f.mask,
        ..SetAttrs4::default()
    };
    for n in f.mask.iter() {
        if !SETTABLE.has(n) {
            return Err(if READ_ONLY.has(n) {
                NFS4ERR_INVAL
            } else {
                NFS4ERR_ATTRNOTSUPP
            });
        }
    }
    let mut r = Reader::new(f.vals);
    let x = |_| NFS4ERR_BADXDR;
    for n in f.mask.iter() {
        match n {
            FATTR4_SIZE => out.size = Some(r.u64("size").map_err(x)?),
            FATTR4_MODE => {
                let m = r.u32("mode").map_err(x)?;
                if m > 0o7777 {
                    return Err(NFS4ERR_INVAL);
                }
                out.mode = Some(m);
            }
            FATTR4_OWNER => out.uid = Some(numeric_id(r.string(NFS4_OPAQUE_LIMIT, "owner").map_err(x)?)?),
            FATTR4_OWNER_GROUP => out.gid = Some(numeric_id(r.string(NFS4_OPAQUE_LIMIT, "owner_group").map_err(x)?)?),
            FATTR4_TIME_ACCESS_SET => out.atime = Some(settime(&mut r)?),
            FATTR4_TIME_MODIFY_SET => out.mtime = Some(settime(&mut r)?),
            _ => return Err(NFS4ERR_ATTRNOTSUPP),
        }
    }
    if r.remaining() != 0 {
        return Err(NFS4ERR_BADXDR);
    }
    Ok(out)
}
