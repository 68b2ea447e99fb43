//! Storage backends: the trait the NFS gateway serves files from.
//!
//! The shape follows SPDK's block-device layer: a shared [`Backend`] object
//! (SPDK's `spdk_bdev`, here with the namespace of a file system on top) and
//! a per-core [`IoChannel`] (SPDK's `spdk_io_channel`) through which data I/O
//! is *submitted* into caller-owned, registered buffers and *completed* on the
//! same core by polling. Data never goes through an intermediate copy: an NFS
//! READ reads straight into the registered buffer the transport will RDMA
//! Write from, and an NFS WRITE writes straight from the buffer the Read chunk
//! was pulled into.
//!
//! Metadata operations (LOOKUP, CREATE, ...) are synchronous calls on the
//! shared [`Backend`]; they are control-path work and take the backend's own
//! lock. Only READ, WRITE and COMMIT data go through channels. A backend
//! whose metadata calls may block in the kernel
//! ([`Backend::metadata_blocks`]: `uring`) has them run on the NFS layer's
//! helper threads, never on a core; its channel may answer the attributes of
//! a file it has open without that ([`IoChannel::getattr_cached`]).
//!
//! | backend | what | module |
//! |---|---|---|
//! | `mem` | a RAM file system (SPDK's malloc bdev, with a namespace) | [`mem`] |
//! | `uring` | a directory tree on a local file system, data through io_uring | [`uring`] |
//! | `nvme` | NVMe namespaces, partitions or image files as files of a flat directory, io_uring passthrough | [`nvme`] |
//!
//! An SPDK block device would plug in as a third kind of channel: see
//! `docs/BACKENDS.md`. SPDK is not in any registry this project can reach, so
//! there is no SPDK backend.

use std::fmt;

pub mod creds;
pub mod mem;
pub mod nvme;
pub mod personality;
pub mod uring;

/// Largest NFSv3 file handle (RFC 1813 s2.5, `NFS3_FHSIZE`).
pub const FH_MAX_BYTES: usize = 64;
/// Longest file name component (RFC 1813 `NFS3_MAXNAMLEN`).
pub const NAME_MAX_BYTES: usize = 255;
/// Longest symbolic link target (`NFS3_MAXPATHLEN`).
pub const PATH_MAX_BYTES: usize = 4096;

/// An opaque file handle, at most [`FH_MAX_BYTES`]. Backends choose the
/// contents; they must stay valid across a restart of the target for the
/// persistent backends (`uring`, `nvme`) and must not be reused for another
/// file while a client may still hold them (a generation number).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct FileHandle {
    len: u8,
    bytes: [u8; FH_MAX_BYTES],
}

impl FileHandle {
    /// A handle from bytes; `None` when longer than [`FH_MAX_BYTES`] or empty.
    pub fn new(b: &[u8]) -> Option<Self> {
        if b.is_empty() || b.len() > FH_MAX_BYTES {
            return None;
        }
        let mut bytes = [0u8; FH_MAX_BYTES];
        bytes[..b.len()].copy_from_slice(b);
        Some(FileHandle {
            len: b.len() as u8,
            bytes,
        })
    }
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }
}

impl fmt::Debug for FileHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FileHandle(")?;
        for b in self.as_bytes() {
            write!(f, "{b:02x}")?;
        }
        write!(f, ")")
    }
}

/// Why an operation failed; each maps to one `nfsstat3` (RFC 1813 s2.6).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FsError {
    #[error("not owner")]
    Perm,
    #[error("no such file or directory")]
    NoEnt,
    #[error("I/O error")]
    Io,
    #[error("no such device or address")]
    Nxio,
    #[error("permission denied")]
    Acces,
    #[error("file exists")]
    Exist,
    #[error("cross-device link")]
    Xdev,
    #[error("not a directory")]
    NotDir,
    #[error("is a directory")]
    IsDir,
    #[error("invalid argument")]
    Inval,
    #[error("file too large")]
    FBig,
    #[error("no space left")]
    NoSpc,
    /// The owner's quota is used up (`EDQUOT`; NFS3ERR_DQUOT and
    /// NFS4ERR_DQUOT, RFC 1813 s2.6, RFC 8881 s15.1.4.2).
    #[error("disk quota exceeded")]
    DQuot,
    #[error("read-only file system")]
    Rofs,
    #[error("too many links")]
    Mlink,
    #[error("name too long")]
    NameTooLong,
    #[error("directory not empty")]
    NotEmpty,
    #[error("stale file handle")]
    Stale,
    #[error("bad file handle")]
    BadHandle,
    #[error("bad readdir cookie")]
    BadCookie,
    #[error("operation not supported")]
    NotSupp,
    #[error("buffer too small")]
    TooSmall,
    #[error("server fault")]
    ServerFault,
    #[error("bad object type")]
    BadType,
    #[error("try again later")]
    Jukebox,
}

impl FsError {
    /// The `nfsstat3` value (RFC 1813 s2.6).
    pub fn nfsstat3(self) -> u32 {
        use proto::nfs3::*;
        match self {
            FsError::Perm => NFS3ERR_PERM,
            FsError::NoEnt => NFS3ERR_NOENT,
            FsError::Io => NFS3ERR_IO,
            FsError::Nxio => NFS3ERR_NXIO,
            FsError::Acces => NFS3ERR_ACCES,
            FsError::Exist => NFS3ERR_EXIST,
            FsError::Xdev => NFS3ERR_XDEV,
            FsError::NotDir => NFS3ERR_NOTDIR,
            FsError::IsDir => NFS3ERR_ISDIR,
            FsError::Inval => NFS3ERR_INVAL,
            FsError::FBig => NFS3ERR_FBIG,
            FsError::NoSpc => NFS3ERR_NOSPC,
            FsError::DQuot => NFS3ERR_DQUOT,
            FsError::Rofs => NFS3ERR_ROFS,
            FsError::Mlink => NFS3ERR_MLINK,
            FsError::NameTooLong => NFS3ERR_NAMETOOLONG,
            FsError::NotEmpty => NFS3ERR_NOTEMPTY,
            FsError::Stale => NFS3ERR_STALE,
            FsError::BadHandle => NFS3ERR_BADHANDLE,
            FsError::BadCookie => NFS3ERR_BAD_COOKIE,
            FsError::NotSupp => NFS3ERR_NOTSUPP,
            FsError::TooSmall => NFS3ERR_TOOSMALL,
            FsError::ServerFault => NFS3ERR_SERVERFAULT,
            FsError::BadType => NFS3ERR_BADTYPE,
            FsError::Jukebox => NFS3ERR_JUKEBOX,
        }
    }

    /// Map an OS error number (for the backends on a local file system).
    pub fn from_errno(e: i32) -> Self {
        match e {
            libc::EPERM => FsError::Perm,
            libc::ENOENT => FsError::NoEnt,
            libc::ENXIO | libc::ENODEV => FsError::Nxio,
            libc::EACCES => FsError::Acces,
            libc::EEXIST => FsError::Exist,
            libc::EXDEV => FsError::Xdev,
            libc::ENOTDIR | libc::ELOOP => FsError::NotDir,
            libc::EISDIR => FsError::IsDir,
            libc::EINVAL => FsError::Inval,
            libc::EFBIG => FsError::FBig,
            libc::ENOSPC => FsError::NoSpc,
            libc::EDQUOT => FsError::DQuot,
            libc::EROFS => FsError::Rofs,
            libc::EMLINK => FsError::Mlink,
            libc::ENAMETOOLONG => FsError::NameTooLong,
            libc::ENOTEMPTY => FsError::NotEmpty,
            libc::ESTALE => FsError::Stale,
            libc::EOPNOTSUPP => FsError::NotSupp,
            libc::EAGAIN => FsError::Jukebox,
            _ => FsError::Io,
        }
    }

    /// Map a `std::io::Error`.
    pub fn from_io(e: &std::io::Error) -> Self {
        e.raw_os_error().map_or(FsError::Io, FsError::from_errno)
    }
}

pub type FsResult<T> = Result<T, FsError>;

/// `ftype3` (RFC 1813 s2.6).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum FileType {
    #[default]
    Regular,
    Directory,
    Block,
    Char,
    Symlink,
    Socket,
    Fifo,
}

impl FileType {
    /// The `ftype3` value.
    pub fn ftype3(self) -> u32 {
        match self {
            FileType::Regular => 1,
            FileType::Directory => 2,
            FileType::Block => 3,
            FileType::Char => 4,
            FileType::Symlink => 5,
            FileType::Socket => 6,
            FileType::Fifo => 7,
        }
    }
}

/// `nfstime3`: seconds and nanoseconds since the epoch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Time {
    pub secs: u32,
    pub nsecs: u32,
}

impl Time {
    /// The wall clock now ([`reactor::clock::wall_now`]: no system call
    /// per read where the OS clock has no vDSO path; every WRITE to the mem
    /// backend reads it).
    pub fn now() -> Self {
        let d = reactor::clock::wall_now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        Time {
            secs: d.as_secs() as u32,
            nsecs: d.subsec_nanos(),
        }
    }
}

/// `fattr3` (RFC 1813 s2.6) without the file system id, which the NFS layer
/// fills per export.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Attr {
    pub ftype: FileType,
    /// Permission bits (`0o7777` mask).
    pub mode: u32,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    /// Bytes of storage used.
    pub used: u64,
    /// Device numbers for `Block` and `Char`.
    pub rdev: (u32, u32),
    /// Stable file number (`fileid3`), unique in the backend.
    pub fileid: u64,
    pub atime: Time,
    pub mtime: Time,
    pub ctime: Time,
}

/// `time_how` and its value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum SetTime {
    #[default]
    DontChange,
    ServerTime,
    Client(Time),
}

/// `sattr3` (RFC 1813 s2.6).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct SetAttr {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: SetTime,
    pub mtime: SetTime,
}

/// Who creates an object: owner of new files (after root squashing).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Owner {
    pub uid: u32,
    pub gid: u32,
}

/// `createhow3` (RFC 1813 s3.3.8).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CreateHow {
    /// Create, or truncate/set attributes of an existing regular file.
    Unchecked(SetAttr),
    /// Fail with `Exist` if the name exists.
    Guarded(SetAttr),
    /// Exclusive create with a verifier: a retransmission with the same
    /// verifier succeeds and returns the same file.
    Exclusive([u8; 8]),
}

/// `mknoddata3` (RFC 1813 s3.3.11).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeKind {
    Char { major: u32, minor: u32 },
    Block { major: u32, minor: u32 },
    Socket,
    Fifo,
}

/// A change to a directory's entries, for [`Backend::change_checked`]:
/// CREATE, MKDIR, SYMLINK, MKNOD, REMOVE, RMDIR, RENAME, LINK (RFC 1813
/// s3.3.8-15), in the directory the call names.
#[derive(Clone, Copy, Debug)]
pub enum DirChange<'a> {
    Create {
        name: &'a [u8],
        how: CreateHow,
    },
    Mkdir {
        name: &'a [u8],
        set: &'a SetAttr,
    },
    Symlink {
        name: &'a [u8],
        target: &'a [u8],
        set: &'a SetAttr,
    },
    Mknod {
        name: &'a [u8],
        kind: NodeKind,
        set: &'a SetAttr,
    },
    Remove {
        name: &'a [u8],
    },
    Rmdir {
        name: &'a [u8],
    },
    /// `name` in the directory becomes `to` in `to_dir`.
    Rename {
        name: &'a [u8],
        to_dir: &'a FileHandle,
        to: &'a [u8],
    },
    /// `file` gets the name `name` in the directory.
    Link {
        file: &'a FileHandle,
        name: &'a [u8],
    },
}

/// A lookup of a name in a directory, as [`Backend::lookup`].
pub type LookupFn<'a> = &'a dyn Fn(&FileHandle, &[u8]) -> FsResult<(FileHandle, Attr)>;

/// What the check of [`Backend::change_checked`] sees: the attributes the
/// change starts from, and lookups as the change will see them.
pub struct DirPre<'a> {
    pub dir: Attr,
    /// RENAME's target directory.
    pub to_dir: Option<Attr>,
    /// Look a name up in a directory (under the same hold of the lock as
    /// the change, on `mem`).
    pub lookup: LookupFn<'a>,
}

impl fmt::Debug for DirPre<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DirPre")
            .field("dir", &self.dir)
            .field("to_dir", &self.to_dir)
            .finish_non_exhaustive()
    }
}

/// The outcome of [`Backend::change_checked`]: the pre-operation attributes
/// of the directory (and of RENAME's target directory), and the new object
/// of a CREATE, MKDIR, SYMLINK or MKNOD, or the refusal or failure as an
/// `nfsstat3`. `refused`: the check refused, nothing changed.
#[derive(Clone, Copy, Debug)]
pub struct DirChanged {
    pub pre: Attr,
    pub pre_to: Option<Attr>,
    /// The directory's (and RENAME's target directory's) attributes right
    /// after the change, read with `pre` under one hold of the backend's
    /// lock, so no other change lies between them (NFSv4's `change_info4`
    /// is then `atomic`, RFC 8881 s3.3.6); `None` where the backend cannot
    /// (the caller reads them after, and says they are not atomic).
    pub post: Option<(Attr, Option<Attr>)>,
    pub res: Result<Option<(FileHandle, Attr)>, u32>,
    pub refused: bool,
}

/// Make `change` in `dir` with `owner` for a new object, through the
/// backend's plain calls.
pub fn apply_change<B: Backend + ?Sized>(
    b: &B,
    dir: &FileHandle,
    change: DirChange<'_>,
    owner: Owner,
) -> FsResult<Option<(FileHandle, Attr)>> {
    match change {
        DirChange::Create { name, how } => b.create(dir, name, how, owner).map(Some),
        DirChange::Mkdir { name, set } => b.mkdir(dir, name, set, owner).map(Some),
        DirChange::Symlink { name, target, set } => b.symlink(dir, name, target, set, owner).map(Some),
        DirChange::Mknod { name, kind, set } => b.mknod(dir, name, kind, set, owner).map(Some),
        DirChange::Remove { name } => b.remove(dir, name).map(|()| None),
        DirChange::Rmdir { name } => b.rmdir(dir, name).map(|()| None),
        DirChange::Rename { name, to_dir, to } => b.rename(dir, name, to_dir, to).map(|()| None),
        DirChange::Link { file, name } => b.link(file, dir, name).map(|()| None),
    }
}

/// One directory entry given to a READDIR sink.
#[derive(Clone, Copy, Debug)]
pub struct DirEntry<'a> {
    pub fileid: u64,
    pub name: &'a [u8],
    /// Cookie that resumes the listing *after* this entry. Never 0.
    pub cookie: u64,
    /// Handle and attributes of the entry (READDIRPLUS), when cheap to give;
    /// the NFS layer looks them up otherwise.
    pub handle: Option<FileHandle>,
    pub attr: Option<Attr>,
}

/// `FSSTAT3resok` and the parts of `FSINFO3resok` a backend knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct FsStat {
    pub total_bytes: u64,
    pub free_bytes: u64,
    pub avail_bytes: u64,
    pub total_files: u64,
    pub free_files: u64,
    pub avail_files: u64,
    /// Largest file size supported.
    pub max_file_size: u64,
    /// Preferred I/O alignment (bytes), e.g. 4096 for O_DIRECT devices.
    pub block_size: u32,
}

/// What a backend's namespace supports: FSINFO's `properties` (RFC 1813
/// s3.3.19) and PATHCONF's `linkmax` (s3.3.20) say so to clients.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Features {
    /// LINK makes hard links (`FSF3_LINK`; else PATHCONF `linkmax` is 1).
    pub hard_links: bool,
    /// SYMLINK makes symbolic links (`FSF3_SYMLINK`).
    pub symlinks: bool,
    /// SETATTR sets times to what the client asks (`FSF3_CANSETTIME`).
    pub set_time: bool,
}

impl Features {
    /// A POSIX file system: all of them.
    pub const POSIX: Features = Features {
        hard_links: true,
        symlinks: true,
        set_time: true,
    };
}

/// `stable_how` (RFC 1813 s3.3.7).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Default)]
pub enum Stable {
    #[default]
    Unstable,
    DataSync,
    FileSync,
}

/// A storage backend: the namespace and attributes, shared by all cores.
///
/// May be called from any core (implementations lock internally). Every
/// `dir`/`fh` argument may be a peer-supplied, forged or stale handle:
/// implementations answer `BadHandle` or `Stale`, never panic.
pub trait Backend: Send + Sync + fmt::Debug {
    /// `"mem"`, `"uring"` or `"nvme"`.
    fn kind(&self) -> &'static str;
    /// Handle of the root directory (what MOUNT returns for the export).
    fn root(&self) -> FileHandle;
    fn getattr(&self, fh: &FileHandle) -> FsResult<Attr>;
    /// Whether reading a file changes none of its attributes (no access
    /// time is kept): then the attributes a READ checked just before
    /// reading are also the ones after it, unless a writer came in between,
    /// and the NFS READ reply carries them without asking again. Default:
    /// no.
    fn reads_keep_attributes(&self) -> bool {
        false
    }
    /// Whether the `change` attribute (the ctime in nanoseconds) moves
    /// with every change to a file's data or attributes made through this
    /// gateway, so NFSv4 may grant write delegations on its files (RFC 8881
    /// s10.4): a holder's flushed writes are then seen as a change by every
    /// other client. Changes made behind the gateway's back are not seen
    /// either way (docs/BACKENDS.md). Default: no.
    fn consistent_change(&self) -> bool {
        false
    }
    /// Whether the file system itself checks each operation against the
    /// caller's credentials ([`creds::current`]), POSIX ACLs included, as
    /// the Linux server lets it: the NFS layer then asks [`Backend::may`]
    /// rather than reading mode bits, and leaves ownership, set-id and
    /// sticky-directory rules to the file system. Default: no (the NFS layer
    /// checks mode bits and the backend applies the rest in user space).
    fn enforces_permissions(&self) -> bool {
        false
    }
    /// Whether the current caller may `want` (`MAY_READ` 4, `MAY_WRITE` 2,
    /// `MAY_EXEC` 1, or'ed) on `fh`, as the file system decides. Called only
    /// when [`Backend::enforces_permissions`].
    fn may(&self, _fh: &FileHandle, _want: u32) -> FsResult<bool> {
        Err(FsError::NotSupp)
    }
    /// Whether the metadata calls (everything but the channels' data I/O)
    /// are system calls that may wait for a disk, so the NFS layer runs them
    /// on its helper threads rather than on a core. Default: no.
    fn metadata_blocks(&self) -> bool {
        false
    }
    /// Make the metadata of `fh` (a directory's entries, an inode's
    /// attributes) durable: an `fsync` on a local file system. A `sync`
    /// export calls it after each namespace change and SETATTR, before the
    /// reply (RFC 1813 section 1.6). Default: nothing to do (a backend whose
    /// metadata is durable when changed, or not durable at all).
    fn sync_meta(&self, _fh: &FileHandle) -> FsResult<()> {
        Ok(())
    }
    /// Apply `set` (size changes truncate or extend) and return the new attributes.
    fn setattr(&self, fh: &FileHandle, set: &SetAttr) -> FsResult<Attr>;
    /// SETATTR with its checks: `check` gets the attributes the change
    /// starts from (the guard's ctime, RFC 1813 s3.3.2, and the caller's
    /// rights are checked against them) and may refuse it with an
    /// `nfsstat3`. Returns those attributes (the reply's pre-operation
    /// attributes) and the new ones, or the refusal or failure.
    ///
    /// The default reads, checks and changes one after the other, so
    /// another change may land in between (the guard then passes on a
    /// ctime that is no longer current); a backend that can does all three
    /// atomically (`mem`, under its lock).
    fn setattr_checked(
        &self,
        fh: &FileHandle,
        set: &SetAttr,
        check: &mut dyn FnMut(&Attr) -> Result<(), u32>,
    ) -> FsResult<(Attr, Result<Attr, u32>)> {
        let pre = self.getattr(fh)?;
        if let Err(s) = check(&pre) {
            return Ok((pre, Err(s)));
        }
        Ok((pre, self.setattr(fh, set).map_err(|e| e.nfsstat3())))
    }
    /// A change to `dir`'s entries with its checks, as
    /// [`Backend::setattr_checked`]: `check` gets the attributes of the
    /// directories the change starts from (the reply's pre-operation
    /// attributes, RFC 1813 s2.6 `wcc_data`) and returns the owner of a new
    /// object, or refuses with an `nfsstat3`.
    ///
    /// The default reads, checks and changes one after the other, so
    /// another change may land in between and the pre-operation attributes
    /// are then not the ones the change started from; `mem` does all three
    /// under one hold of its lock, `uring` reads the directories again with
    /// one `fstat` each just before the system call (issue 21 item 8).
    fn change_checked(
        &self,
        dir: &FileHandle,
        change: DirChange<'_>,
        check: &mut dyn FnMut(&DirPre<'_>) -> Result<Owner, u32>,
    ) -> FsResult<DirChanged> {
        let pre = self.getattr(dir)?;
        let pre_to = match change {
            DirChange::Rename { to_dir, .. } => Some(self.getattr(to_dir)?),
            _ => None,
        };
        let lookup = |d: &FileHandle, n: &[u8]| self.lookup(d, n);
        let seen = DirPre {
            dir: pre,
            to_dir: pre_to,
            lookup: &lookup,
        };
        let (res, refused) = match check(&seen) {
            Ok(owner) => (apply_change(self, dir, change, owner).map_err(|e| e.nfsstat3()), false),
            Err(s) => (Err(s), true),
        };
        Ok(DirChanged {
            pre,
            pre_to,
            post: None,
            res,
            refused,
        })
    }
    /// Look `name` up in `dir` (`.` and `..` included).
    fn lookup(&self, dir: &FileHandle, name: &[u8]) -> FsResult<(FileHandle, Attr)>;
    /// Copy the link target into `out`; returns its length.
    fn readlink(&self, fh: &FileHandle, out: &mut [u8]) -> FsResult<usize>;
    fn create(&self, dir: &FileHandle, name: &[u8], how: CreateHow, owner: Owner) -> FsResult<(FileHandle, Attr)>;
    fn mkdir(&self, dir: &FileHandle, name: &[u8], set: &SetAttr, owner: Owner) -> FsResult<(FileHandle, Attr)>;
    fn symlink(
        &self,
        dir: &FileHandle,
        name: &[u8],
        target: &[u8],
        set: &SetAttr,
        owner: Owner,
    ) -> FsResult<(FileHandle, Attr)>;
    fn mknod(
        &self,
        dir: &FileHandle,
        name: &[u8],
        kind: NodeKind,
        set: &SetAttr,
        owner: Owner,
    ) -> FsResult<(FileHandle, Attr)>;
    /// Remove a non-directory.
    fn remove(&self, dir: &FileHandle, name: &[u8]) -> FsResult<()>;
    /// Remove an empty directory.
    fn rmdir(&self, dir: &FileHandle, name: &[u8]) -> FsResult<()>;
    fn rename(&self, from_dir: &FileHandle, from: &[u8], to_dir: &FileHandle, to: &[u8]) -> FsResult<()>;
    /// Hard link `fh` as `name` in `dir`.
    fn link(&self, fh: &FileHandle, dir: &FileHandle, name: &[u8]) -> FsResult<()>;
    /// List `dir` from `cookie` (0 = start; `.` and `..` first), giving each
    /// entry to `sink` until it returns false. Returns `true` when the listing
    /// reached the end. A cookie that no longer exists gives `BadCookie`.
    fn readdir(&self, dir: &FileHandle, cookie: u64, sink: &mut dyn FnMut(DirEntry<'_>) -> bool) -> FsResult<bool>;
    /// Changes whenever the directory's entries change (`cookieverf3`).
    fn cookie_verifier(&self, dir: &FileHandle) -> FsResult<u64>;
    fn fsstat(&self) -> FsResult<FsStat>;
    /// What the namespace supports (FSINFO, PATHCONF). Default: everything.
    fn features(&self) -> Features {
        Features::POSIX
    }
    /// Flush the file's data and metadata to stable storage (COMMIT).
    fn commit(&self, fh: &FileHandle) -> FsResult<()>;
    /// Flush everything (clean shutdown).
    fn sync_all(&self) -> FsResult<()>;
    /// Open `fh` for a channel's I/O, on a helper thread rather than on the
    /// core, when the channel says it would otherwise open it itself
    /// ([`IoChannel::needs_open`]); the core gives the result to its
    /// channel ([`IoChannel::adopt`]). Default: nothing to open.
    fn open_for_io(&self, _fh: &FileHandle) -> FsResult<Option<OpenedFile>> {
        Ok(None)
    }
    /// Open this core's data channel. Called once per core at start-up.
    fn open_channel(&self, core: usize) -> FsResult<Box<dyn IoChannel>>;
    /// Reserve `len` bytes at `offset` of a regular file, extending its size
    /// when they pass it (NFSv4.2 ALLOCATE, RFC 7862 s15.1). Default: NotSupp.
    fn allocate(&self, _fh: &FileHandle, _offset: u64, _len: u64) -> FsResult<()> {
        Err(FsError::NotSupp)
    }
    /// Make `len` bytes at `offset` a hole reading as zeros, the size kept
    /// (NFSv4.2 DEALLOCATE, RFC 7862 s15.4). Default: NotSupp.
    fn deallocate(&self, _fh: &FileHandle, _offset: u64, _len: u64) -> FsResult<()> {
        Err(FsError::NotSupp)
    }
    /// The first offset at or after `offset` starting data (`data`) or a
    /// hole; `Nxio` when `offset` is at or past the end of the file, `None`
    /// when there is no data after it (NFSv4.2 SEEK, RFC 7862 s15.11).
    /// Default: NotSupp.
    fn seek(&self, _fh: &FileHandle, _offset: u64, _data: bool) -> FsResult<Option<u64>> {
        Err(FsError::NotSupp)
    }
    /// Copy `count` bytes (0: to the end of `src`) from `src` at `src_off`
    /// to `dst` at `dst_off`, durably; the bytes copied (NFSv4.2 COPY,
    /// RFC 7862 s15.2). Default: NotSupp.
    fn copy(&self, _src: &FileHandle, _src_off: u64, _dst: &FileHandle, _dst_off: u64, _count: u64) -> FsResult<u64> {
        Err(FsError::NotSupp)
    }
}

/// A data I/O request for [`IoChannel::submit`].
#[derive(Clone, Copy, Debug)]
pub struct IoDesc {
    pub fh: FileHandle,
    pub op: IoOp,
    pub offset: u64,
    /// Caller-owned buffer (registered memory): destination of a read, source
    /// of a write. See the safety contract of [`IoChannel::submit`].
    pub buf: *mut u8,
    pub len: u32,
    /// Returned in the completion.
    pub tag: u64,
}

impl IoDesc {
    /// A read of `len` bytes at `offset` into `buf`, tagged `tag`.
    pub fn read(fh: &FileHandle, offset: u64, buf: &mut [u8], tag: u64) -> FsResult<IoDesc> {
        let len = u32::try_from(buf.len()).map_err(|_| FsError::Inval)?;
        Ok(IoDesc {
            fh: *fh,
            op: IoOp::Read,
            offset,
            buf: buf.as_mut_ptr(),
            len,
            tag,
        })
    }

    /// A write of `buf` at `offset`, tagged `tag`. The channel only reads
    /// through the pointer.
    pub fn write(fh: &FileHandle, offset: u64, buf: &[u8], stable: Stable, tag: u64) -> FsResult<IoDesc> {
        let len = u32::try_from(buf.len()).map_err(|_| FsError::Inval)?;
        Ok(IoDesc {
            fh: *fh,
            op: IoOp::Write(stable),
            offset,
            buf: buf.as_ptr() as *mut u8,
            len,
            tag,
        })
    }

    /// A flush of `fh` (no buffer), tagged `tag`.
    pub fn flush(fh: &FileHandle, tag: u64) -> IoDesc {
        IoDesc {
            fh: *fh,
            op: IoOp::Flush,
            offset: 0,
            buf: std::ptr::null_mut(),
            len: 0,
            tag,
        }
    }
}

/// The operation of an [`IoDesc`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoOp {
    Read,
    Write(Stable),
    /// Flush the file's data and metadata to stable storage (`fsync`;
    /// `buf`, `len` unused).
    Flush,
    /// Flush the file's data, and only the metadata needed to read it back
    /// (`fdatasync`; `buf`, `len` unused). Backends without the distinction
    /// do a [`IoOp::Flush`].
    FlushData,
}

impl IoOp {
    /// A flush of either kind (no buffer).
    pub fn is_flush(self) -> bool {
        matches!(self, IoOp::Flush | IoOp::FlushData)
    }
}

/// A finished I/O, from [`IoChannel::poll`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IoDone {
    pub tag: u64,
    /// Bytes transferred.
    pub result: FsResult<u32>,
    /// Read: the read reached the end of the file.
    pub eof: bool,
    /// Write: how stable the data is now (may exceed what was asked).
    pub committed: Stable,
}

impl Default for IoDone {
    fn default() -> Self {
        IoDone {
            tag: 0,
            result: Ok(0),
            eof: false,
            committed: Stable::Unstable,
        }
    }
}

/// One core's data path into a backend (SPDK's `spdk_io_channel`). Not shared:
/// owned and polled by one core.
pub trait IoChannel: fmt::Debug {
    /// Queue one I/O. Returns `Jukebox` when the channel's queue is full.
    ///
    /// # Safety
    /// `io.buf` must be valid for reads and writes of `io.len` bytes, and must
    /// not be accessed by anyone else, until [`IoChannel::poll`] returns the
    /// completion carrying `io.tag`.
    unsafe fn submit(&mut self, io: IoDesc) -> FsResult<()>;
    /// Reap finished I/O into `out`; returns how many. Never blocks.
    fn poll(&mut self, out: &mut [IoDone]) -> usize;
    /// Submitted and not yet reaped.
    fn in_flight(&self) -> usize;
    /// Whether I/O takes long enough (a device, the kernel) that a service
    /// should answer other Calls while it is in flight (deferred replies)
    /// rather than poll for it. Default: no (the work is done at submit).
    fn completes_later(&self) -> bool {
        false
    }
    /// The attributes of `fh` when this channel has the file open and can
    /// tell them without waiting (an `fstat` of its cached descriptor);
    /// `None` otherwise, and the caller asks the backend. Default: `None`.
    fn getattr_cached(&mut self, _fh: &FileHandle) -> Option<FsResult<Attr>> {
        None
    }
    /// Do `io` now, on the calling thread, and return its completion without
    /// queueing it, if this channel works that way (it does its work at
    /// submit) and has nothing queued; `None` otherwise, and the caller
    /// submits and polls. The synchronous helpers ([`read_sync`],
    /// [`write_sync`]) try this first. Default: `None`.
    ///
    /// # Safety
    /// `io.buf` must be valid for reads and writes of `io.len` bytes, and must
    /// not be accessed by anyone else, until this returns.
    unsafe fn io_now(&mut self, _io: &IoDesc) -> Option<IoDone> {
        None
    }
    /// The attributes the last write on this channel started from, read
    /// with the change (a WRITE's pre-operation attributes, RFC 1813
    /// s3.3.7), once. Default: none (the caller read them just before).
    fn take_write_pre(&mut self) -> Option<Attr> {
        None
    }
    /// Whether I/O on `fh` would first open it here, with system calls that
    /// may wait for a disk (`open_by_handle_at` on `uring`): the NFS layer
    /// then opens it on a helper thread first ([`Backend::open_for_io`]).
    /// Default: no.
    fn needs_open(&mut self, _fh: &FileHandle) -> bool {
        false
    }
    /// Take a file [`Backend::open_for_io`] opened for this channel.
    /// Default: drop it.
    fn adopt(&mut self, _fh: &FileHandle, _file: OpenedFile) {}
}

/// A file a backend opened off the core for a channel
/// ([`Backend::open_for_io`]); only that backend's channels know what is
/// inside.
pub struct OpenedFile(pub Box<dyn std::any::Any + Send>);

impl fmt::Debug for OpenedFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("OpenedFile")
    }
}

/// Read into `buf` at `offset` and wait (polling) for the completion.
/// Returns the bytes read and whether the end of file was reached.
///
/// Runs on the channel's core; the channel must have nothing else in flight.
pub fn read_sync(ch: &mut dyn IoChannel, fh: &FileHandle, offset: u64, buf: &mut [u8]) -> FsResult<(u32, bool)> {
    let io = IoDesc::read(fh, offset, buf, 1)?;
    // SAFETY: `buf` is exclusively borrowed for this whole function.
    let done = unsafe { io_sync(ch, io)? };
    done.result.map(|n| (n, done.eof))
}

/// Write `buf` at `offset` and wait (polling) for the completion. Returns the
/// bytes written and how stable they are.
///
/// Runs on the channel's core; the channel must have nothing else in flight.
pub fn write_sync(
    ch: &mut dyn IoChannel,
    fh: &FileHandle,
    offset: u64,
    buf: &[u8],
    stable: Stable,
) -> FsResult<(u32, Stable)> {
    let io = IoDesc::write(fh, offset, buf, stable, 2)?;
    // SAFETY: `buf` is borrowed for this whole function and a write only
    // reads it.
    let done = unsafe { io_sync(ch, io)? };
    done.result.map(|n| (n, done.committed))
}

/// Flush `fh` through the channel and wait.
pub fn flush_sync(ch: &mut dyn IoChannel, fh: &FileHandle) -> FsResult<()> {
    let io = IoDesc::flush(fh, 3);
    // SAFETY: a flush has no buffer.
    unsafe { ch.submit(io)? };
    wait_one(ch, 3)?.result.map(|_| ())
}

/// Do `io` and wait for it: at once when the channel can ([`IoChannel::io_now`]),
/// otherwise submitted and polled until its completion is reaped.
///
/// # Safety
/// As [`IoChannel::submit`], until this returns.
unsafe fn io_sync(ch: &mut dyn IoChannel, io: IoDesc) -> FsResult<IoDone> {
    // SAFETY: the caller's guarantee covers `io_now`, which returns only once
    // it is done with the buffer, and `submit` followed by `wait_one`, which
    // returns only after the completion of `io.tag` is reaped.
    unsafe {
        if let Some(done) = ch.io_now(&io) {
            return Ok(done);
        }
        ch.submit(io)?;
    }
    wait_one(ch, io.tag)
}

fn wait_one(ch: &mut dyn IoChannel, tag: u64) -> FsResult<IoDone> {
    let mut out = [IoDone::default(); 1];
    loop {
        if ch.poll(&mut out) == 1 {
            if out[0].tag == tag {
                return Ok(out[0]);
            }
            // Something else was in flight: the caller broke the contract.
            return Err(FsError::ServerFault);
        }
        std::hint::spin_loop();
    }
}

/// Open the backend `cfg` describes, outside a target ([`open_for`] with no
/// cores).
pub fn open(cfg: &crate::config::BackendConfig) -> Result<std::sync::Arc<dyn Backend>, FsError> {
    open_for(cfg, &uring::CoreCpus::default())
}

/// Open the backend `cfg` describes for a reactor whose cores run on
/// `cores` (where a `uring` backend keeps its io-wq workers away from).
/// Called once per backend at start-up, on the thread that builds the
/// target (before any core runs or pins itself).
pub fn open_for(
    cfg: &crate::config::BackendConfig,
    cores: &uring::CoreCpus,
) -> Result<std::sync::Arc<dyn Backend>, FsError> {
    use crate::config::BackendConfig;
    match cfg {
        BackendConfig::Mem { name, size_bytes } => Ok(std::sync::Arc::new(mem::MemBackend::new(name, *size_bytes)?)),
        BackendConfig::Uring {
            name,
            path,
            queue_depth,
            o_direct,
            iowq_off_cores,
        } => Ok(std::sync::Arc::new(
            uring::UringBackend::open(name, std::path::Path::new(path), *queue_depth, *o_direct)?
                .with_io_workers(*iowq_off_cores, cores.clone()),
        )),
        BackendConfig::Nvme {
            name,
            devices,
            queue_depth,
            passthrough,
        } => {
            let devices: Vec<std::path::PathBuf> = devices.iter().map(std::path::PathBuf::from).collect();
            Ok(std::sync::Arc::new(nvme::NvmeBackend::open(
                name,
                &devices,
                *queue_depth,
                *passthrough,
            )?))
        }
    }
}
