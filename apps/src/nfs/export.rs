//! Exports and the gateway's file handles.
//!
//! An NFS file handle is the backend's handle behind a 9-byte prefix:
//!
//! | bytes | what |
//! |---|---|
//! | 0 | handle format version, [`FH_VERSION`] |
//! | 1..9 | export id, big-endian: FNV-1a 64 of the export path, so stable across restarts |
//! | 9.. | the backend's handle (at most 55 bytes; backends promise 32) |
//!
//! A handle whose prefix is malformed is NFS3ERR_BADHANDLE; a well-formed one
//! naming no export (an export removed from the configuration) is
//! NFS3ERR_STALE. Everything here is immutable after start-up and may be read
//! from any core.
//!
//! An export serves one directory of its backend (`dir` in the
//! configuration, the backend's root by default), so several exports of one
//! backend each serve their own subtree. The export's root is the top of
//! what its clients see: LOOKUP of `..` there, and the `..` entry READDIRPLUS
//! lists there, give the export's root itself, as the Linux server does
//! ([`Export::is_root`]). MNT of a path below an export path mounts that
//! directory ([`find`], [`walk`]). Like the Linux server's default
//! `no_subtree_check`, a handle is not checked to lie below its export's
//! root: a client that makes up the handle of a file of another export of
//! the same backend (its backend part, behind this export's prefix) reaches
//! it; exports meant to keep clients apart belong on different backends.

use std::net::IpAddr;

use crate::config::{parse_network, ExportConfig, IpNetwork};

use crate::backend::{Backend, FileHandle, FileType, FsError, Owner, SetAttr, FH_MAX_BYTES};

/// Version byte of the handle format.
pub const FH_VERSION: u8 = 1;
/// Bytes in front of the backend's handle.
pub const FH_PREFIX_BYTES: usize = 9;
/// Longest backend handle that still fits an NFSv3 handle after the prefix.
pub const BACKEND_FH_MAX_BYTES: usize = FH_MAX_BYTES - FH_PREFIX_BYTES;

/// Why a peer's handle was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FhError {
    /// Malformed (NFS3ERR_BADHANDLE).
    Bad,
    /// Names no export (NFS3ERR_STALE).
    Stale,
}

/// FNV-1a, 64 bits.
pub fn fnv1a64(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &x| {
        (h ^ u64::from(x)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// An export path without trailing slashes (`/` stays `/`).
pub fn normalize_path(p: &[u8]) -> &[u8] {
    let mut end = p.len();
    while end > 1 && p[end - 1] == b'/' {
        end -= 1;
    }
    &p[..end]
}

/// One export, resolved against the backends.
#[derive(Debug, Clone)]
pub struct Export {
    /// The path clients mount (normalized).
    pub path: String,
    /// Stable id: FNV-1a 64 of `path`. Also the `fsid` of every file.
    pub id: u64,
    /// Index of the backend in [`super::NfsShared`]'s list.
    pub backend: usize,
    /// The configured client networks, as written (MOUNT EXPORT lists them).
    pub clients: Vec<String>,
    networks: Vec<IpNetwork>,
    pub read_only: bool,
    /// Namespace changes and SETATTR are durable before their replies
    /// (the default; the configuration's `async` turns it off).
    pub sync: bool,
    pub root_squash: bool,
    pub allow_auth_none: bool,
    pub anon_uid: u32,
    pub anon_gid: u32,
    /// The backend's root handle.
    pub root: FileHandle,
    /// Some network is `0.0.0.0/0` or `::/0`: a caller without a known
    /// address is allowed too.
    allows_unknown: bool,
}

impl Export {
    /// Build from the configuration. Fails on a network that does not parse,
    /// or a root handle too long for the prefix.
    pub fn new(cfg: &ExportConfig, backend: usize, root: FileHandle) -> Result<Self, String> {
        let path = String::from_utf8_lossy(normalize_path(cfg.path.as_bytes())).into_owned();
        if !path.starts_with('/') {
            return Err(format!("export {:?}: not an absolute path", cfg.path));
        }
        let mut networks = Vec::with_capacity(cfg.clients.len());
        for c in &cfg.clients {
            networks.push(parse_network(c).map_err(|e| format!("export {path}: client {c:?}: {e}"))?);
        }
        if root.as_bytes().len() > BACKEND_FH_MAX_BYTES {
            return Err(format!(
                "export {path}: backend root handle of {} bytes (at most {BACKEND_FH_MAX_BYTES})",
                root.as_bytes().len()
            ));
        }
        let allows_unknown = networks.iter().any(|n| n.prefix_len == 0);
        Ok(Export {
            id: fnv1a64(path.as_bytes()),
            path,
            backend,
            clients: cfg.clients.clone(),
            networks,
            read_only: cfg.read_only,
            sync: !cfg.r#async,
            root_squash: cfg.root_squash,
            allow_auth_none: cfg.allow_auth_none,
            anon_uid: cfg.anon_uid,
            anon_gid: cfg.anon_gid,
            root,
            allows_unknown,
        })
    }

    /// Whether a client at `peer` may use the export. An unknown address is
    /// allowed only when some network is `0.0.0.0/0` or `::/0`. An
    /// IPv4-mapped IPv6 address also matches as its IPv4 address.
    pub fn allows_peer(&self, peer: Option<IpAddr>) -> bool {
        let Some(a) = peer else {
            return self.allows_unknown;
        };
        let mapped = match a {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4),
            IpAddr::V4(_) => None,
        };
        self.networks
            .iter()
            .any(|n| n.contains(a) || mapped.is_some_and(|m| n.contains(m)))
    }

    /// Whether backend handle `fh` is this export's root, above which its
    /// clients see nothing.
    pub fn is_root(&self, fh: &FileHandle) -> bool {
        *fh == self.root
    }

    /// The NFS handle of backend handle `fh` on this export, written into
    /// `out`; returns its length, or `None` if the backend handle is too long.
    pub fn encode_fh(&self, fh: &FileHandle, out: &mut [u8; FH_MAX_BYTES]) -> Option<usize> {
        let b = fh.as_bytes();
        if b.len() > BACKEND_FH_MAX_BYTES {
            return None;
        }
        out[0] = FH_VERSION;
        out[1..FH_PREFIX_BYTES].copy_from_slice(&self.id.to_be_bytes());
        out[FH_PREFIX_BYTES..FH_PREFIX_BYTES + b.len()].copy_from_slice(b);
        Some(FH_PREFIX_BYTES + b.len())
    }
}

/// The export a MOUNT path names, and the rest of the path below it: the
/// export whose path is the longest one equal to `path` or a prefix of it
/// ending at a `/` (so `/export/sub` is below `/export`, `/exportx` is not).
pub fn find<'e, 'p>(exports: &'e [Export], path: &'p [u8]) -> Option<(&'e Export, &'p [u8])> {
    let mut best: Option<&Export> = None;
    for e in exports {
        let p = e.path.as_bytes();
        let below = path.starts_with(p) && (path.len() == p.len() || p == b"/" || path[p.len()] == b'/');
        if below && best.is_none_or(|b| b.path.len() < p.len()) {
            best = Some(e);
        }
    }
    best.map(|e| (e, &path[e.path.len()..]))
}

/// Walk `rest` (components separated by `/`; empty ones and `.` skipped)
/// down from `from` in `backend`, each a directory: the handle reached.
/// `..` is refused (`Acces`): a mount stays below its export.
pub fn walk(backend: &dyn Backend, from: FileHandle, rest: &[u8]) -> Result<FileHandle, FsError> {
    let mut at = from;
    for part in rest.split(|&b| b == b'/') {
        match part {
            b"" | b"." => continue,
            b".." => return Err(FsError::Acces),
            name => {
                let (fh, a) = backend.lookup(&at, name)?;
                if a.ftype != FileType::Directory {
                    return Err(FsError::NotDir);
                }
                at = fh;
            }
        }
    }
    Ok(at)
}

/// The directory `dir` of `backend` (a path from its root), made (mode
/// 0755, owner root) where missing. At start-up.
pub fn export_dir(backend: &dyn Backend, dir: &str) -> Result<FileHandle, String> {
    let mut at = backend.root();
    for part in dir.split('/').filter(|p| !p.is_empty() && *p != ".") {
        let name = part.as_bytes();
        let found = match backend.lookup(&at, name) {
            Err(FsError::NoEnt) => {
                let set = SetAttr {
                    mode: Some(0o755),
                    ..SetAttr::default()
                };
                backend.mkdir(&at, name, &set, Owner { uid: 0, gid: 0 })
            }
            r => r,
        };
        let (fh, a) = found.map_err(|e| format!("directory {dir:?} of the backend, at {part:?}: {e}"))?;
        if a.ftype != FileType::Directory {
            return Err(format!("{dir:?} of the backend: {part:?} is not a directory"));
        }
        at = fh;
    }
    Ok(at)
}

/// Split an NFS handle into the export id and the backend handle.
pub fn split_fh(b: &[u8]) -> Result<(u64, FileHandle), FhError> {
    if b.len() <= FH_PREFIX_BYTES || b.len() > FH_MAX_BYTES || b[0] != FH_VERSION {
        return Err(FhError::Bad);
    }
    let mut id = [0u8; 8];
    id.copy_from_slice(&b[1..FH_PREFIX_BYTES]);
    let fh = FileHandle::new(&b[FH_PREFIX_BYTES..]).ok_or(FhError::Bad)?;
    Ok((u64::from_be_bytes(id), fh))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(path: &str, clients: &[&str]) -> ExportConfig {
        ExportConfig {
            path: path.into(),
            backend: "b".into(),
            clients: clients.iter().map(|s| s.to_string()).collect(),
            read_only: false,
            r#async: false,
            root_squash: true,
            allow_auth_none: false,
            anon_uid: 65534,
            anon_gid: 65534,
            dir: "/".into(),
        }
    }

    #[test]
    fn handles_round_trip_and_refuse_garbage() {
        let e = Export::new(&cfg("/x/", &["10.0.0.0/8"]), 0, FileHandle::new(&[7; 16]).unwrap()).unwrap();
        assert_eq!(e.path, "/x");
        assert_eq!(e.id, fnv1a64(b"/x"));
        let mut out = [0u8; FH_MAX_BYTES];
        let n = e.encode_fh(&FileHandle::new(&[1, 2, 3]).unwrap(), &mut out).unwrap();
        assert_eq!(n, 12);
        let (id, fh) = split_fh(&out[..n]).unwrap();
        assert_eq!((id, fh.as_bytes()), (e.id, &[1u8, 2, 3][..]));
        assert_eq!(split_fh(&out[..9]), Err(FhError::Bad), "no backend part");
        assert_eq!(split_fh(&[]), Err(FhError::Bad));
        out[0] = 2;
        assert_eq!(split_fh(&out[..n]), Err(FhError::Bad), "wrong version");
        assert!(e.encode_fh(&FileHandle::new(&[0; 56]).unwrap(), &mut out).is_none());
    }

    #[test]
    fn peers() {
        let e = Export::new(
            &cfg("/x", &["10.0.0.0/8", "fd00::/8"]),
            0,
            FileHandle::new(&[1]).unwrap(),
        )
        .unwrap();
        assert!(e.allows_peer(Some("10.1.2.3".parse().unwrap())));
        assert!(e.allows_peer(Some("::ffff:10.1.2.3".parse().unwrap())));
        assert!(e.allows_peer(Some("fd00::1".parse().unwrap())));
        assert!(!e.allows_peer(Some("11.0.0.1".parse().unwrap())));
        assert!(!e.allows_peer(None));
        let any = Export::new(&cfg("/y", &["0.0.0.0/0"]), 0, FileHandle::new(&[1]).unwrap()).unwrap();
        assert!(any.allows_peer(None));
        assert!(Export::new(&cfg("/z", &["bogus"]), 0, FileHandle::new(&[1]).unwrap()).is_err());
    }
}
