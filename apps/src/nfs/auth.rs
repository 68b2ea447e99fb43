//! Callers and permissions: AUTH_SYS / AUTH_NONE credentials mapped through an
//! export's squashing rules, and the mode-bit checks the gateway applies on
//! behalf of the backends (which do not check permissions themselves).
//!
//! Pure functions of their arguments; callable from any core.

use proto::rpc::AuthSysParms;

use super::export::Export;
use super::xdr::{ACCESS3_DELETE, ACCESS3_EXECUTE, ACCESS3_EXTEND, ACCESS3_LOOKUP, ACCESS3_MODIFY, ACCESS3_READ};
use crate::backend::creds::Creds;
use crate::backend::{Attr, FileType, Owner};

/// Read permission bit (of a `rwx` triple).
pub const MAY_READ: u32 = 4;
/// Write permission bit.
pub const MAY_WRITE: u32 = 2;
/// Execute / search permission bit.
pub const MAY_EXEC: u32 = 1;

/// The credential of a call, before an export's rules apply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cred<'a> {
    /// AUTH_NONE: acts as the export's anonymous user, where allowed.
    None,
    /// AUTH_SYS.
    Sys(AuthSysParms<'a>),
}

/// Most groups a caller carries: the primary group and AUTH_SYS's 16.
const MAX_GROUPS: usize = 17;

/// Who a call acts as on one export (after root squashing).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Caller {
    pub uid: u32,
    pub gid: u32,
    groups: [u32; MAX_GROUPS],
    ngroups: u8,
}

impl Caller {
    /// A caller with a primary group and supplementary groups (at most 16 are kept).
    pub fn new(uid: u32, gid: u32, gids: &[u32]) -> Self {
        let mut groups = [0u32; MAX_GROUPS];
        groups[0] = gid;
        let n = gids.len().min(MAX_GROUPS - 1);
        groups[1..1 + n].copy_from_slice(&gids[..n]);
        Caller {
            uid,
            gid,
            groups,
            ngroups: (1 + n) as u8,
        }
    }

    /// The caller `cred` acts as on `ex`: AUTH_NONE is the anonymous user; with
    /// root squashing uid 0 becomes `anon_uid` and group 0 (primary or
    /// supplementary) becomes `anon_gid`.
    pub fn for_export(cred: &Cred<'_>, ex: &Export) -> Self {
        match cred {
            Cred::None => Caller::new(ex.anon_uid, ex.anon_gid, &[]),
            Cred::Sys(s) => {
                let mut c = Caller::new(s.uid, s.gid, s.gids());
                if ex.root_squash {
                    if c.uid == 0 {
                        c.uid = ex.anon_uid;
                    }
                    if c.gid == 0 {
                        c.gid = ex.anon_gid;
                    }
                    for g in c.groups_mut() {
                        if *g == 0 {
                            *g = ex.anon_gid;
                        }
                    }
                }
                c
            }
        }
    }

    fn groups_mut(&mut self) -> &mut [u32] {
        &mut self.groups[..usize::from(self.ngroups).min(MAX_GROUPS)]
    }

    /// The primary and supplementary groups.
    pub fn groups(&self) -> &[u32] {
        &self.groups[..usize::from(self.ngroups).min(MAX_GROUPS)]
    }

    pub fn is_root(&self) -> bool {
        self.uid == 0
    }

    pub fn in_group(&self, gid: u32) -> bool {
        self.groups().contains(&gid)
    }

    /// The identity the backends act as for this caller (supplementary
    /// groups without the primary one, as the Linux server's `cr_group_info`).
    pub fn creds(&self) -> Creds {
        Creds::new(self.uid, self.gid, &self.groups()[1..])
    }

    /// Owner of the objects this caller creates.
    pub fn owner(&self) -> Owner {
        Owner {
            uid: self.uid,
            gid: self.gid,
        }
    }

    /// The `rwx` triple of `a`'s mode that applies to this caller.
    fn triple(&self, a: &Attr) -> u32 {
        if self.uid == a.uid {
            (a.mode >> 6) & 7
        } else if self.in_group(a.gid) {
            (a.mode >> 3) & 7
        } else {
            a.mode & 7
        }
    }

    /// Whether the mode bits of `a` grant every bit of `want` (`MAY_*`). Root
    /// is granted everything except executing a non-directory without any
    /// execute bit.
    pub fn may(&self, a: &Attr, want: u32) -> bool {
        if self.is_root() {
            return want & MAY_EXEC == 0 || a.ftype == FileType::Directory || a.mode & 0o111 != 0;
        }
        self.triple(a) & want == want
    }

    /// Like [`may`](Self::may), but the owner of a regular file may read and
    /// write it whatever its mode: the client checked the permission when the
    /// file was opened, and a file created with mode 0444 is still written
    /// through the descriptor that created it (the Linux server does the same).
    pub fn may_io(&self, a: &Attr, want: u32) -> bool {
        (a.ftype == FileType::Regular && self.uid == a.uid) || self.may(a, want)
    }

    /// The ACCESS bits (RFC 1813 section 3.3.4) of `requested` this caller
    /// holds on `a`; `read_only` exports grant no MODIFY, EXTEND or DELETE.
    pub fn access(&self, a: &Attr, requested: u32, read_only: bool) -> u32 {
        access_bits(a, requested, read_only, |want| self.may(a, want))
    }

    /// In a sticky directory (mode 01000) only the owner of the entry, the
    /// owner of the directory, or root may remove or rename it.
    pub fn may_unlink(&self, dir: &Attr, victim: &Attr) -> bool {
        dir.mode & 0o1000 == 0 || self.is_root() || self.uid == dir.uid || self.uid == victim.uid
    }
}

/// The ACCESS bits (RFC 1813 section 3.3.4) of `requested` that `may` (a
/// `MAY_*` test: mode bits, or the file system's own check) grants on `a`;
/// `read_only` exports grant no MODIFY, EXTEND or DELETE.
pub fn access_bits(a: &Attr, requested: u32, read_only: bool, may: impl Fn(u32) -> bool) -> u32 {
    let mut got = 0;
    let dir = a.ftype == FileType::Directory;
    if may(MAY_READ) {
        got |= ACCESS3_READ;
    }
    if !read_only && may(MAY_WRITE) {
        got |= ACCESS3_MODIFY | ACCESS3_EXTEND;
        if dir && may(MAY_EXEC) {
            got |= ACCESS3_DELETE;
        }
    }
    if may(MAY_EXEC) {
        got |= if dir { ACCESS3_LOOKUP } else { ACCESS3_EXECUTE };
    }
    got & requested
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::FileHandle;
    use crate::config::ExportConfig;

    fn export(squash: bool) -> Export {
        let cfg = ExportConfig {
            path: "/e".into(),
            backend: "b".into(),
            clients: vec!["0.0.0.0/0".into()],
            read_only: false,
            r#async: false,
            root_squash: squash,
            allow_auth_none: true,
            anon_uid: 99,
            anon_gid: 98,
            dir: "/".into(),
        };
        Export::new(&cfg, 0, FileHandle::new(&[1]).unwrap()).unwrap()
    }

    fn file(mode: u32, uid: u32, gid: u32) -> Attr {
        Attr {
            mode,
            uid,
            gid,
            ..Attr::default()
        }
    }

    #[test]
    fn squash() {
        let p = AuthSysParms::new(0, b"h", 0, 0, &[0, 5]).unwrap();
        let c = Caller::for_export(&Cred::Sys(p), &export(true));
        assert_eq!((c.uid, c.gid), (99, 98));
        assert_eq!(c.groups(), &[98, 98, 5]);
        let c = Caller::for_export(&Cred::Sys(p), &export(false));
        assert_eq!((c.uid, c.gid), (0, 0));
        let c = Caller::for_export(&Cred::None, &export(false));
        assert_eq!((c.uid, c.gid), (99, 98));
    }

    #[test]
    fn mode_bits() {
        let a = file(0o640, 10, 20);
        let owner = Caller::new(10, 1, &[]);
        let member = Caller::new(11, 1, &[20]);
        let other = Caller::new(12, 1, &[]);
        assert!(owner.may(&a, MAY_READ | MAY_WRITE) && !owner.may(&a, MAY_EXEC));
        assert!(member.may(&a, MAY_READ) && !member.may(&a, MAY_WRITE));
        assert!(!other.may(&a, MAY_READ));
        let root = Caller::new(0, 0, &[]);
        assert!(root.may(&a, MAY_READ | MAY_WRITE));
        assert!(!root.may(&a, MAY_EXEC), "root needs some x bit to execute");
        assert!(root.may(&file(0o001, 10, 20), MAY_EXEC));
        let ro = file(0o444, 10, 20);
        assert!(owner.may_io(&ro, MAY_WRITE) && !owner.may(&ro, MAY_WRITE));
        assert!(!member.may_io(&ro, MAY_WRITE));
    }

    #[test]
    fn access_bits() {
        let mut d = file(0o755, 10, 20);
        d.ftype = FileType::Directory;
        let owner = Caller::new(10, 1, &[]);
        let other = Caller::new(12, 1, &[]);
        assert_eq!(owner.access(&d, 0x3f, false), 0x1f);
        assert_eq!(owner.access(&d, 0x3f, true), ACCESS3_READ | ACCESS3_LOOKUP);
        assert_eq!(other.access(&d, 0x3f, false), ACCESS3_READ | ACCESS3_LOOKUP);
        let f = file(0o751, 10, 20);
        assert_eq!(owner.access(&f, 0x3f, false), 0x2d);
        assert_eq!(other.access(&f, 0x3f, false), ACCESS3_EXECUTE);
        assert_eq!(owner.access(&f, ACCESS3_READ, false), ACCESS3_READ);
    }
}
