//! NFSv4 file handles and the pseudo file system (RFC 8881 s7.3-7.7).
//!
//! The server's root (PUTROOTFH) is a pseudo file system whose directories
//! are the path prefixes of the exports; an export's path leads to that
//! export's root. If `/` itself is exported, the root is that export.
//! Pseudo directories are read-only, owned by root, mode 0555, in fsid
//! (0, 0); a real object's fsid is (export id, 0), so the fsid changes at
//! every export boundary and the client sees each export as its own file
//! system.
//!
//! A pseudo directory's handle is [`PSEUDO_FH_VERSION`] and the FNV-1a 64 of
//! its path (9 bytes, stable across restarts); a real object's handle is the
//! NFSv3 one ([`crate::nfs::export`]), so v3 and v4 clients share handles.

use std::net::IpAddr;

use proto::nfs4::*;

use crate::backend::{Attr, FileHandle, FileType, Time, FH_MAX_BYTES};
use crate::nfs::auth::{Caller, Cred};
use crate::nfs::export::{fnv1a64, split_fh, Export, FhError};
use crate::nfs::NfsShared;

/// First byte of a pseudo directory's handle.
pub const PSEUDO_FH_VERSION: u8 = 0x50;
/// Longest path of a pseudo directory or export handled.
pub const MAX_PATH_BYTES: usize = 1024;

/// A current or saved filehandle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fh {
    /// A directory of the pseudo file system, by the hash of its path.
    Pseudo(u64),
    /// An object of export `ex`.
    Real { ex: usize, fh: FileHandle },
}

/// The wire form of `fh` written into `out`; its length.
pub fn encode(sh: &NfsShared, fh: &Fh, out: &mut [u8; FH_MAX_BYTES]) -> Option<usize> {
    match fh {
        Fh::Pseudo(id) => {
            out[0] = PSEUDO_FH_VERSION;
            out[1..9].copy_from_slice(&id.to_be_bytes());
            Some(9)
        }
        Fh::Real { ex, fh } => sh.exports().get(*ex)?.encode_fh(fh, out),
    }
}

/// A peer's handle (PUTFH): NFS4ERR_BADHANDLE if malformed, NFS4ERR_STALE
/// if it names nothing we export.
pub fn decode(sh: &NfsShared, b: &[u8]) -> Result<Fh, u32> {
    if b.len() == 9 && b[0] == PSEUDO_FH_VERSION {
        let mut id = [0u8; 8];
        id.copy_from_slice(&b[1..9]);
        let id = u64::from_be_bytes(id);
        return match pseudo_path(sh, id) {
            Some(_) => Ok(Fh::Pseudo(id)),
            None => Err(NFS4ERR_STALE),
        };
    }
    let (id, fh) = split_fh(b).map_err(|e| match e {
        FhError::Bad => NFS4ERR_BADHANDLE,
        FhError::Stale => NFS4ERR_STALE,
    })?;
    let ex = sh.exports().iter().position(|e| e.id == id).ok_or(NFS4ERR_STALE)?;
    Ok(Fh::Real { ex, fh })
}

/// The prefixes of `path` that are pseudo directories: `/` and every
/// proper prefix ending before a `/` (for `/a/b`: `/`, `/a`).
fn prefixes(path: &str) -> impl Iterator<Item = &str> {
    std::iter::once("/").chain(
        path.char_indices()
            .filter(|&(i, c)| c == '/' && i > 0)
            .map(move |(i, _)| &path[..i]),
    )
}

/// The path of pseudo directory `id`, if some export lies under it.
pub fn pseudo_path(sh: &NfsShared, id: u64) -> Option<&str> {
    sh.exports()
        .iter()
        .filter(|e| e.path != "/")
        .flat_map(|e| prefixes(&e.path))
        .find(|p| fnv1a64(p.as_bytes()) == id)
}

/// The root of the server's namespace (PUTROOTFH).
pub fn root(sh: &NfsShared) -> Fh {
    match sh.exports().iter().position(|e| e.path == "/") {
        Some(ex) => Fh::Real {
            ex,
            fh: sh.exports()[ex].root,
        },
        None => Fh::Pseudo(fnv1a64(b"/")),
    }
}

/// `dir/name` into `buf`; its length, or `None` if too long.
fn join<'b>(buf: &'b mut [u8; MAX_PATH_BYTES], dir: &str, name: &[u8]) -> Option<&'b [u8]> {
    let sep = usize::from(dir != "/");
    let n = dir.len() + sep + name.len();
    if n > MAX_PATH_BYTES {
        return None;
    }
    buf[..dir.len()].copy_from_slice(dir.as_bytes());
    if sep == 1 {
        buf[dir.len()] = b'/';
    }
    buf[dir.len() + sep..n].copy_from_slice(name);
    Some(&buf[..n])
}

/// LOOKUP in pseudo directory `dir`: an export's root, a deeper pseudo
/// directory, or NFS4ERR_NOENT.
pub fn pseudo_lookup(sh: &NfsShared, dir: &str, name: &[u8]) -> Result<Fh, u32> {
    let mut buf = [0u8; MAX_PATH_BYTES];
    let child = join(&mut buf, dir, name).ok_or(NFS4ERR_NAMETOOLONG)?;
    if let Some(ex) = sh.exports().iter().position(|e| e.path.as_bytes() == child) {
        return Ok(Fh::Real {
            ex,
            fh: sh.exports()[ex].root,
        });
    }
    let under = sh.exports().iter().any(|e| {
        let p = e.path.as_bytes();
        p.len() > child.len() && p.starts_with(child) && p[child.len()] == b'/'
    });
    if under {
        Ok(Fh::Pseudo(fnv1a64(child)))
    } else {
        Err(NFS4ERR_NOENT)
    }
}

/// The parent of a pseudo directory or export path (`None` for `/`).
pub fn parent_path(path: &str) -> Option<&str> {
    if path == "/" {
        return None;
    }
    match path.rfind('/') {
        Some(0) => Some("/"),
        Some(i) => Some(&path[..i]),
        None => None,
    }
}

/// The entries of pseudo directory `dir`, in export order without
/// repeats: (name, handle) for each, after `skip` of them.
pub fn pseudo_entries<'s>(sh: &'s NfsShared, dir: &'s str) -> impl Iterator<Item = (&'s str, Fh)> + 's {
    let ex = sh.exports();
    ex.iter()
        .enumerate()
        .filter_map(move |(i, e)| {
            let rest = if dir == "/" {
                e.path.strip_prefix('/')?
            } else {
                e.path.strip_prefix(dir)?.strip_prefix('/')?
            };
            if rest.is_empty() {
                return None;
            }
            let name = rest.split('/').next()?;
            // Keep the first export that yields this name.
            let first = ex[..i].iter().all(|o| {
                let r = if dir == "/" {
                    o.path.strip_prefix('/')
                } else {
                    o.path.strip_prefix(dir).and_then(|r| r.strip_prefix('/'))
                };
                r.and_then(|r| r.split('/').next()) != Some(name)
            });
            first.then(|| (name, pseudo_lookup(sh, dir, name.as_bytes()).ok()))
        })
        .filter_map(|(n, f)| Some((n, f?)))
}

/// The attributes of a pseudo directory (fileid = its id).
pub fn pseudo_attr(id: u64, start: Time) -> Attr {
    Attr {
        ftype: FileType::Directory,
        mode: 0o555,
        nlink: 2,
        uid: 0,
        gid: 0,
        size: 4096,
        used: 4096,
        rdev: (0, 0),
        fileid: id,
        atime: start,
        mtime: start,
        ctime: start,
    }
}

/// An export a Call may use (RFC 8881 s2.6.3.1 leaves the error to the
/// operation): the client's network must be allowed (NFS4ERR_ACCESS) and
/// AUTH_NONE needs `allow_auth_none` (NFS4ERR_WRONGSEC). The caller after
/// squashing.
pub fn check_export(e: &Export, cred: &Cred<'_>, peer: Option<IpAddr>) -> Result<Caller, u32> {
    if !e.allows_peer(peer) {
        return Err(NFS4ERR_ACCESS);
    }
    if matches!(cred, Cred::None) && !e.allow_auth_none {
        return Err(NFS4ERR_WRONGSEC);
    }
    Ok(Caller::for_export(cred, e))
}
