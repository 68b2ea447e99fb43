//! The flat file system that presents the devices as the files of one fixed
//! root directory: file handles, attributes kept in memory, the answers to
//! operations that would change the namespace (the table in the parent
//! module's documentation), and the state every core's channel shares.

use std::fmt;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::backend::{
    Attr, Backend, CreateHow, DirEntry, Features, FileHandle, FileType, FsError, FsResult, FsStat, IoChannel, NodeKind,
    Owner, SetAttr, SetTime, Time, NAME_MAX_BYTES,
};

use super::channel::NvmeChannel;
use super::device::{ns_from_time, nvme_flush_sync, probe, time_from_ns, Dev, DevIo, DeviceInfo, Meta};

pub(super) const FH_BYTES: usize = 16;
pub(super) const FH_MAGIC: [u8; 3] = [b'n', b'v', 1];
pub(super) const FH_ROOT: u8 = 0;
pub(super) const FH_FILE: u8 = 1;
pub(super) const ROOT_FILEID: u64 = 1;
/// Largest queue depth per channel.
pub const MAX_QUEUE_DEPTH: u32 = 4096;
/// Most devices in one backend.
pub const MAX_DEVICES: usize = 4096;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Node {
    Root,
    File(usize),
}

/// One unaligned passthrough write's LBA range, locked for its
/// read-modify-write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct RangeLock {
    pub(super) dev: usize,
    pub(super) start: u64,
    pub(super) end: u64,
}

#[derive(Debug)]
pub(super) struct Shared {
    pub(super) devs: Vec<Dev>,
    pub(super) root_hash: u64,
    pub(super) depth: u32,
    pub(super) rmw: Mutex<Vec<RangeLock>>,
}

impl Shared {
    pub(super) fn try_lock_range(&self, l: RangeLock) -> bool {
        let mut v = lock(&self.rmw);
        if v.iter().any(|o| o.dev == l.dev && o.start < l.end && l.start < o.end) {
            return false;
        }
        v.push(l);
        true
    }
    pub(super) fn unlock_range(&self, l: RangeLock) {
        let mut v = lock(&self.rmw);
        if let Some(i) = v.iter().position(|o| *o == l) {
            v.swap_remove(i);
        }
    }
}

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding one of these locks leaves plain data behind.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The `nvme` backend: see the module documentation.
pub struct NvmeBackend {
    name: String,
    shared: Arc<Shared>,
    root_meta: Mutex<Meta>,
}

impl fmt::Debug for NvmeBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NvmeBackend")
            .field("name", &self.name)
            .field("devices", &self.devices())
            .finish()
    }
}

impl NvmeBackend {
    /// Open every device of `devices` (see the module documentation for what
    /// each kind of path becomes). `queue_depth` is the number of requests a
    /// channel takes at once (a power of two, at most [`MAX_QUEUE_DEPTH`]).
    /// `passthrough` selects NVMe passthrough for `/dev/ngXnY`.
    ///
    /// Control path; any thread.
    pub fn open(name: &str, devices: &[PathBuf], queue_depth: u32, passthrough: bool) -> FsResult<NvmeBackend> {
        if queue_depth == 0 || !queue_depth.is_power_of_two() || queue_depth > MAX_QUEUE_DEPTH {
            return Err(FsError::Inval);
        }
        if devices.len() > MAX_DEVICES {
            return Err(FsError::Inval);
        }
        let mut devs: Vec<Dev> = Vec::with_capacity(devices.len());
        for path in devices {
            let fname = path.file_name().ok_or(FsError::Inval)?.as_bytes().to_vec();
            if fname.len() > NAME_MAX_BYTES {
                return Err(FsError::NameTooLong);
            }
            if devs.iter().any(|d| d.name == fname) {
                tracing::warn!(path = %path.display(), "nvme: two devices with the same file name");
                return Err(FsError::Exist);
            }
            let p = probe(path, passthrough).inspect_err(|e| {
                tracing::warn!(path = %path.display(), error = %e, "nvme: cannot open device");
            })?;
            let hash = fnv1a(&[path.as_os_str().as_bytes()]);
            let fileid = 2 + hash % (u64::MAX - 2);
            if devs.iter().any(|d| d.hash == hash) {
                return Err(FsError::Exist);
            }
            devs.push(Dev {
                name: fname,
                path: path.clone(),
                hash,
                fileid,
                io: p.io,
                size_bytes: p.size_bytes,
                used_bytes: p.used_bytes,
                lba_bytes: p.lba_bytes,
                max_xfer_bytes: p.max_xfer_bytes,
                iopoll: p.iopoll,
                meta: Mutex::new(p.meta),
                mtime_ns: AtomicU64::new(p.mtime_ns),
            });
        }
        let now = Time::now();
        Ok(NvmeBackend {
            name: name.to_string(),
            shared: Arc::new(Shared {
                devs,
                root_hash: fnv1a(&[b"nvme-root", name.as_bytes()]),
                depth: queue_depth,
                rmw: Mutex::new(Vec::new()),
            }),
            root_meta: Mutex::new(Meta {
                mode: 0o755,
                uid: 0,
                gid: 0,
                atime: now,
                ctime: now,
            }),
        })
    }

    /// The devices as opened, in configuration order. Any thread.
    pub fn devices(&self) -> Vec<DeviceInfo> {
        self.shared
            .devs
            .iter()
            .map(|d| DeviceInfo {
                name: String::from_utf8_lossy(&d.name).into_owned(),
                path: d.path.clone(),
                mode: d.mode(),
                nsid: match d.io {
                    DevIo::Passthrough { nsid, .. } => nsid,
                    DevIo::Fd { .. } => 0,
                },
                size_bytes: d.size_bytes,
                lba_bytes: d.lba_bytes,
                max_xfer_bytes: d.max_xfer_bytes,
                iopoll: d.iopoll,
            })
            .collect()
    }

    /// [`Backend::open_channel`] with the concrete type. Call on the core
    /// that will use the channel.
    pub fn open_nvme_channel(&self, core: usize) -> FsResult<NvmeChannel> {
        NvmeChannel::new(self.shared.clone(), core)
    }

    fn fh(&self, node: Node) -> FileHandle {
        let mut b = [0u8; FH_BYTES];
        b[..3].copy_from_slice(&FH_MAGIC);
        match node {
            Node::Root => {
                b[3] = FH_ROOT;
                b[8..16].copy_from_slice(&self.shared.root_hash.to_le_bytes());
            }
            Node::File(i) => {
                b[3] = FH_FILE;
                b[4..8].copy_from_slice(&(i as u32).to_le_bytes());
                b[8..16].copy_from_slice(&self.shared.devs[i].hash.to_le_bytes());
            }
        }
        FileHandle::new(&b).expect("16-byte handle")
    }

    fn node(&self, fh: &FileHandle) -> FsResult<Node> {
        decode_fh(&self.shared, fh)
    }

    fn dir(&self, fh: &FileHandle) -> FsResult<()> {
        match self.node(fh)? {
            Node::Root => Ok(()),
            Node::File(_) => Err(FsError::NotDir),
        }
    }

    fn find(&self, name: &[u8]) -> Option<usize> {
        self.shared.devs.iter().position(|d| d.name == name)
    }

    fn attr(&self, node: Node) -> Attr {
        match node {
            Node::Root => {
                let m = *lock(&self.root_meta);
                Attr {
                    ftype: FileType::Directory,
                    mode: m.mode,
                    nlink: 2,
                    uid: m.uid,
                    gid: m.gid,
                    size: 4096,
                    used: 4096,
                    rdev: (0, 0),
                    fileid: ROOT_FILEID,
                    atime: m.atime,
                    mtime: m.ctime,
                    ctime: m.ctime,
                }
            }
            Node::File(i) => {
                let d = &self.shared.devs[i];
                let m = *lock(&d.meta);
                let mtime = time_from_ns(d.mtime_ns.load(Ordering::Relaxed));
                Attr {
                    ftype: FileType::Regular,
                    mode: m.mode,
                    nlink: 1,
                    uid: m.uid,
                    gid: m.gid,
                    size: d.size_bytes,
                    used: d.used_bytes,
                    rdev: (0, 0),
                    fileid: d.fileid,
                    atime: m.atime,
                    mtime,
                    ctime: m.ctime.max(mtime),
                }
            }
        }
    }

    /// Name checks shared by the directory operations: `Some(node)` when the
    /// name exists (`.` and `..` are the root).
    fn entry(&self, name: &[u8]) -> FsResult<Option<Node>> {
        if name.is_empty() {
            return Err(FsError::NoEnt);
        }
        if name.len() > NAME_MAX_BYTES {
            return Err(FsError::NameTooLong);
        }
        if name == b"." || name == b".." {
            return Ok(Some(Node::Root));
        }
        Ok(self.find(name).map(Node::File))
    }

    /// MKDIR, SYMLINK, MKNOD, LINK and new-name CREATE: the namespace is fixed.
    fn refuse_new(&self, dir: &FileHandle, name: &[u8]) -> FsResult<(FileHandle, Attr)> {
        self.dir(dir)?;
        match self.entry(name)? {
            Some(_) => Err(FsError::Exist),
            None => Err(FsError::NotSupp),
        }
    }

    fn flush_dev(&self, i: usize) -> FsResult<()> {
        match &self.shared.devs[i].io {
            DevIo::Passthrough { ng, nsid } => nvme_flush_sync(ng, *nsid),
            DevIo::Fd { buffered, .. } => buffered.sync_all().map_err(|e| FsError::from_io(&e)),
        }
    }
}

pub(super) fn decode_fh(shared: &Shared, fh: &FileHandle) -> FsResult<Node> {
    let b = fh.as_bytes();
    if b.len() != FH_BYTES || b[..3] != FH_MAGIC {
        return Err(FsError::BadHandle);
    }
    let idx = u32::from_le_bytes([b[4], b[5], b[6], b[7]]) as usize;
    let hash = u64::from_le_bytes(b[8..16].try_into().map_err(|_| FsError::BadHandle)?);
    match b[3] {
        FH_ROOT if idx == 0 => {
            if hash == shared.root_hash {
                Ok(Node::Root)
            } else {
                Err(FsError::Stale)
            }
        }
        FH_FILE => {
            if shared.devs.get(idx).is_some_and(|d| d.hash == hash) {
                return Ok(Node::File(idx));
            }
            // The list was reordered: the path hash still names the device.
            shared
                .devs
                .iter()
                .position(|d| d.hash == hash)
                .map(Node::File)
                .ok_or(FsError::Stale)
        }
        _ => Err(FsError::BadHandle),
    }
}

pub(super) fn apply_times(m: &mut Meta, set: &SetAttr, mtime: &AtomicU64) {
    let now = Time::now();
    if let Some(mode) = set.mode {
        m.mode = mode & 0o7777;
    }
    if let Some(uid) = set.uid {
        m.uid = uid;
    }
    if let Some(gid) = set.gid {
        m.gid = gid;
    }
    match set.atime {
        SetTime::DontChange => {}
        SetTime::ServerTime => m.atime = now,
        SetTime::Client(t) => m.atime = t,
    }
    match set.mtime {
        SetTime::DontChange => {}
        SetTime::ServerTime => mtime.store(ns_from_time(now), Ordering::Relaxed),
        SetTime::Client(t) => mtime.store(ns_from_time(t), Ordering::Relaxed),
    }
    m.ctime = now;
}

impl Backend for NvmeBackend {
    fn kind(&self) -> &'static str {
        "nvme"
    }

    /// The gateway owns the devices: every data write moves the mtime
    /// (nanoseconds, never backwards) and every SETATTR the ctime, both
    /// kept in memory (module docs).
    fn consistent_change(&self) -> bool {
        true
    }

    fn root(&self) -> FileHandle {
        self.fh(Node::Root)
    }

    fn getattr(&self, fh: &FileHandle) -> FsResult<Attr> {
        Ok(self.attr(self.node(fh)?))
    }

    /// Mode, owner and times are kept in memory only; size must stay the capacity.
    fn setattr(&self, fh: &FileHandle, set: &SetAttr) -> FsResult<Attr> {
        let node = self.node(fh)?;
        match node {
            Node::Root => {
                if set.size.is_some() {
                    return Err(FsError::IsDir);
                }
                let mut m = lock(&self.root_meta);
                let unused = AtomicU64::new(0);
                apply_times(&mut m, set, &unused);
                if set.mtime != SetTime::DontChange {
                    // The root's mtime is its ctime (no separate field kept).
                    m.ctime = time_from_ns(unused.load(Ordering::Relaxed));
                }
            }
            Node::File(i) => {
                let d = &self.shared.devs[i];
                // A device's size is its capacity: more is FBig; less is
                // accepted and changes nothing, as opening a block device
                // with O_TRUNC does (so `cp` onto it, which opens its target
                // O_TRUNC and so sends SETATTR size 0, works).
                if set.size.is_some_and(|s| s > d.size_bytes) {
                    return Err(FsError::FBig);
                }
                let mut m = lock(&d.meta);
                apply_times(&mut m, set, &d.mtime_ns);
            }
        }
        Ok(self.attr(node))
    }

    fn lookup(&self, dir: &FileHandle, name: &[u8]) -> FsResult<(FileHandle, Attr)> {
        self.dir(dir)?;
        match self.entry(name)? {
            Some(n) => Ok((self.fh(n), self.attr(n))),
            None => Err(FsError::NoEnt),
        }
    }

    fn readlink(&self, fh: &FileHandle, _out: &mut [u8]) -> FsResult<usize> {
        self.node(fh)?;
        Err(FsError::Inval)
    }

    fn create(&self, dir: &FileHandle, name: &[u8], how: CreateHow, _owner: Owner) -> FsResult<(FileHandle, Attr)> {
        self.dir(dir)?;
        match (self.entry(name)?, how) {
            (Some(Node::File(i)), CreateHow::Unchecked(set)) => {
                let fh = self.fh(Node::File(i));
                let attr = self.setattr(&fh, &set)?;
                Ok((fh, attr))
            }
            (Some(_), _) => Err(FsError::Exist),
            (None, _) => Err(FsError::NotSupp),
        }
    }

    fn mkdir(&self, dir: &FileHandle, name: &[u8], _set: &SetAttr, _owner: Owner) -> FsResult<(FileHandle, Attr)> {
        self.refuse_new(dir, name)
    }

    fn symlink(
        &self,
        dir: &FileHandle,
        name: &[u8],
        _target: &[u8],
        _set: &SetAttr,
        _owner: Owner,
    ) -> FsResult<(FileHandle, Attr)> {
        self.refuse_new(dir, name)
    }

    fn mknod(
        &self,
        dir: &FileHandle,
        name: &[u8],
        _kind: NodeKind,
        _set: &SetAttr,
        _owner: Owner,
    ) -> FsResult<(FileHandle, Attr)> {
        self.refuse_new(dir, name)
    }

    fn remove(&self, dir: &FileHandle, name: &[u8]) -> FsResult<()> {
        self.dir(dir)?;
        match self.entry(name)? {
            Some(Node::Root) => Err(FsError::Inval),
            Some(Node::File(_)) => Err(FsError::Acces),
            None => Err(FsError::NoEnt),
        }
    }

    fn rmdir(&self, dir: &FileHandle, name: &[u8]) -> FsResult<()> {
        self.dir(dir)?;
        match self.entry(name)? {
            Some(Node::Root) => Err(FsError::Inval),
            Some(Node::File(_)) => Err(FsError::NotDir),
            None => Err(FsError::NoEnt),
        }
    }

    fn rename(&self, from_dir: &FileHandle, from: &[u8], to_dir: &FileHandle, to: &[u8]) -> FsResult<()> {
        self.dir(from_dir)?;
        self.dir(to_dir)?;
        let src = self.entry(from)?;
        // Validate the target name too (length).
        let dst = self.entry(to)?;
        match src {
            None => Err(FsError::NoEnt),
            Some(Node::Root) => Err(FsError::Inval),
            Some(Node::File(i)) if dst == Some(Node::File(i)) => Ok(()),
            Some(Node::File(_)) => Err(FsError::Acces),
        }
    }

    fn link(&self, fh: &FileHandle, dir: &FileHandle, name: &[u8]) -> FsResult<()> {
        if self.node(fh)? == Node::Root {
            return Err(FsError::IsDir);
        }
        self.refuse_new(dir, name).map(|_| ())
    }

    fn readdir(&self, dir: &FileHandle, cookie: u64, sink: &mut dyn FnMut(DirEntry<'_>) -> bool) -> FsResult<bool> {
        self.dir(dir)?;
        let n = self.shared.devs.len() as u64;
        // Positions: 0 ".", 1 "..", 2.. the devices; an entry's cookie is its position + 1.
        if cookie > n + 2 {
            return Err(FsError::BadCookie);
        }
        for pos in cookie..n + 2 {
            let (node, name): (Node, &[u8]) = match pos {
                0 => (Node::Root, b"."),
                1 => (Node::Root, b".."),
                p => {
                    let i = (p - 2) as usize;
                    (Node::File(i), &self.shared.devs[i].name)
                }
            };
            let attr = self.attr(node);
            let entry = DirEntry {
                fileid: attr.fileid,
                name,
                cookie: pos + 1,
                handle: Some(self.fh(node)),
                attr: Some(attr),
            };
            if !sink(entry) {
                return Ok(false);
            }
        }
        Ok(true)
    }

    fn cookie_verifier(&self, dir: &FileHandle) -> FsResult<u64> {
        self.dir(dir)?;
        // The directory never changes.
        Ok(self.shared.root_hash)
    }

    fn fsstat(&self) -> FsResult<FsStat> {
        let devs = &self.shared.devs;
        let total: u64 = devs.iter().map(|d| d.size_bytes).sum();
        let free: u64 = devs.iter().map(|d| d.free_bytes()).sum();
        Ok(FsStat {
            total_bytes: total,
            free_bytes: free,
            avail_bytes: free,
            total_files: devs.len() as u64 + 1,
            free_files: 0,
            avail_files: 0,
            max_file_size: devs.iter().map(|d| d.size_bytes).max().unwrap_or(0),
            block_size: devs.iter().map(|d| d.lba_bytes).max().unwrap_or(4096).max(4096),
        })
    }

    /// No hard or symbolic links: the namespace is the configured devices.
    fn features(&self) -> Features {
        Features {
            hard_links: false,
            symlinks: false,
            set_time: true,
        }
    }

    fn commit(&self, fh: &FileHandle) -> FsResult<()> {
        match self.node(fh)? {
            Node::Root => Ok(()),
            Node::File(i) => self.flush_dev(i),
        }
    }

    fn sync_all(&self) -> FsResult<()> {
        let mut first = Ok(());
        for i in 0..self.shared.devs.len() {
            let r = self.flush_dev(i);
            if first.is_ok() {
                first = r;
            }
        }
        first
    }

    fn open_channel(&self, core: usize) -> FsResult<Box<dyn IoChannel>> {
        Ok(Box::new(self.open_nvme_channel(core)?))
    }
}

pub(super) fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for &b in *p {
            h ^= b as u64;
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        // Separator so that ("ab", "c") and ("a", "bc") differ.
        h ^= 0xff;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}
