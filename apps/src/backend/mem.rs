//! The `mem` backend: a RAM file system, like SPDK's malloc bdev with a
//! namespace on top.
//!
//! The data arena is mapped once, at start-up (memory is taken as blocks are
//! first written, in 2 MiB transparent huge pages where the kernel offers
//! them), and carved into fixed
//! [`MEM_BLOCK_BYTES`] blocks handed out from a free list; a file's data is a
//! sparse map from file block number to arena block (holes read as zeros).
//! When the free list is empty a write or a size extension that needs a block
//! fails with `NoSpc`; blocks return to the free list when a file is
//! truncated or its last link is removed.
//!
//! Inodes live in a slab of slots. A file handle is
//! `[tag, instance u32, ino u64, generation u32]` (17 bytes): the instance is
//! random per [`MemBackend`] (handles of a previous run of the target are
//! `Stale`, as its files are gone), and the slot's generation is bumped when
//! the inode is freed, so a handle of a removed file is `Stale` even after the
//! slot is reused.
//!
//! Directory entries are kept in insertion order under a position that never
//! changes while the entry exists: the READDIR cookie of an entry is its
//! position, so a listing resumed from a cookie neither repeats nor skips
//! entries that were there before and still are, whatever else changed. The
//! cookie of a removed entry still resumes at the next position.
//!
//! The namespace, the inodes and the block maps are behind one
//! reader-writer lock: reads (READ, GETATTR, LOOKUP, READDIR) share it,
//! everything that changes them takes it exclusively, briefly. The data of
//! each regular file has a lock of its own ([`FileLock`]): a READ or WRITE
//! takes it, finds its blocks (a WRITE allocates the missing ones) under the
//! namespace lock, lets that lock go, and copies with only the file's lock
//! held. So a 1 MiB write holds up readers of that file only, not readers
//! on other cores (issue 21 item 5). Whatever frees a file's blocks
//! (truncate, the last unlink) waits for the file's lock while it holds the
//! namespace lock, so no copy is still running on a block that is given to
//! another file; a copier never waits for the namespace lock while it holds
//! a file's lock, so the order is always namespace, then file.
//! [`MemChannel::submit`] does the copy between the caller's buffer and the
//! arena right away and queues the completion for [`IoChannel::poll`]. Data is as stable as this backend gets once it is in
//! the arena, so writes complete as `FileSync`; it does not survive the
//! process. Access times are not updated by reads (as with `noatime`).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt;
use std::hash::{BuildHasher, Hasher};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use super::creds::{self, kill_setid};
use super::{
    Attr, Backend, CreateHow, DirChange, DirChanged, DirEntry, DirPre, FileHandle, FileType, FsError, FsResult, FsStat,
    IoChannel, IoDesc, IoDone, IoOp, NodeKind, Owner, SetAttr, SetTime, Stable, Time, NAME_MAX_BYTES, PATH_MAX_BYTES,
};

/// Size of one arena block.
pub const MEM_BLOCK_BYTES: u64 = 4096;
/// Completions a channel holds before `submit` answers `Jukebox` (default).
pub const MEM_DEFAULT_QUEUE_DEPTH: u32 = 128;
/// Largest file size (as Linux's `MAX_LFS_FILESIZE`).
pub const MEM_MAX_FILE_BYTES: u64 = i64::MAX as u64;
/// Fewest inodes a backend offers, whatever its capacity.
pub const MEM_MIN_INODES: u64 = 1024;

const HANDLE_TAG: u8 = 0x4d;
const HANDLE_LEN: usize = 17;
/// Slot index of the root directory (inode number 1).
const ROOT: u32 = 0;
/// The set-group-ID bit of a mode.
const S_ISGID: u32 = 0o2000;
/// Directory positions 1 and 2 are the cookies after `.` and `..`.
const FIRST_POS: u64 = 3;
const NO_ATTR: SetAttr = SetAttr {
    mode: None,
    uid: None,
    gid: None,
    size: None,
    atime: SetTime::DontChange,
    mtime: SetTime::DontChange,
};

/// A RAM file system with a fixed capacity.
pub struct MemBackend {
    name: String,
    shared: Arc<Shared>,
    queue_depth: u32,
}

struct Shared {
    instance: u32,
    fs: RwLock<Fs>,
}

struct Fs {
    arena: Arena,
    total_blocks: u64,
    free_blocks: Vec<u32>,
    slots: Vec<Slot>,
    free_slots: Vec<u32>,
    max_inodes: u64,
    live_inodes: u64,
}

struct Slot {
    generation: u32,
    node: Option<Node>,
}

struct Node {
    mode: u32,
    nlink: u32,
    uid: u32,
    gid: u32,
    size: u64,
    atime: Time,
    mtime: Time,
    ctime: Time,
    body: Body,
}

/// The lock of one file's data (see the module docs).
type FileLock = Arc<RwLock<()>>;

enum Body {
    File {
        /// File block number -> arena block number.
        blocks: BlockMap,
        /// Verifier of an exclusive create.
        verifier: Option<[u8; 8]>,
        /// Held while the file's data is copied.
        lock: FileLock,
    },
    Dir(Dir),
    Symlink(Vec<u8>),
    Special {
        ftype: FileType,
        rdev: (u32, u32),
    },
}

struct Dir {
    /// Slot of the parent directory (the root is its own parent).
    parent: u32,
    by_pos: BTreeMap<u64, (Box<[u8]>, u32)>,
    by_name: HashMap<Box<[u8]>, u64>,
    next_pos: u64,
    /// Bumped on every change of the entries (the cookie verifier).
    version: u64,
}

impl Dir {
    fn new(parent: u32) -> Self {
        Dir {
            parent,
            by_pos: BTreeMap::new(),
            by_name: HashMap::new(),
            next_pos: FIRST_POS,
            version: 1,
        }
    }

    fn get(&self, name: &[u8]) -> Option<u32> {
        self.by_name.get(name).and_then(|p| self.by_pos.get(p)).map(|e| e.1)
    }

    fn insert(&mut self, name: &[u8], slot: u32) {
        let pos = self.next_pos;
        self.next_pos += 1;
        self.by_pos.insert(pos, (name.into(), slot));
        self.by_name.insert(name.into(), pos);
        self.version += 1;
    }

    fn remove(&mut self, name: &[u8]) -> Option<u32> {
        let pos = self.by_name.remove(name)?;
        self.version += 1;
        self.by_pos.remove(&pos).map(|e| e.1)
    }
}

impl Node {
    fn new(mode: u32, owner: Owner, body: Body) -> Self {
        let now = Time::now();
        Node {
            mode: mode & 0o7777,
            nlink: 1,
            uid: owner.uid,
            gid: owner.gid,
            size: 0,
            atime: now,
            mtime: now,
            ctime: now,
            body,
        }
    }

    fn ftype(&self) -> FileType {
        match &self.body {
            Body::File { .. } => FileType::Regular,
            Body::Dir(_) => FileType::Directory,
            Body::Symlink(_) => FileType::Symlink,
            Body::Special { ftype, .. } => *ftype,
        }
    }

    fn attr(&self, slot: u32) -> Attr {
        let (size, used, rdev) = match &self.body {
            Body::File { blocks, .. } => (self.size, blocks.len() * MEM_BLOCK_BYTES, (0, 0)),
            Body::Dir(_) => (MEM_BLOCK_BYTES, MEM_BLOCK_BYTES, (0, 0)),
            Body::Symlink(t) => (t.len() as u64, t.len() as u64, (0, 0)),
            Body::Special { rdev, .. } => (0, 0, *rdev),
        };
        Attr {
            ftype: self.ftype(),
            mode: self.mode,
            nlink: self.nlink,
            uid: self.uid,
            gid: self.gid,
            size,
            used,
            rdev,
            fileid: u64::from(slot) + 1,
            atime: self.atime,
            mtime: self.mtime,
            ctime: self.ctime,
        }
    }

    fn dir(&self) -> FsResult<&Dir> {
        match &self.body {
            Body::Dir(d) => Ok(d),
            _ => Err(FsError::NotDir),
        }
    }

    fn dir_mut(&mut self) -> FsResult<&mut Dir> {
        match &mut self.body {
            Body::Dir(d) => Ok(d),
            _ => Err(FsError::NotDir),
        }
    }

    fn touch_dir(&mut self) {
        let now = Time::now();
        self.mtime = now;
        self.ctime = now;
    }
}

/// A name that may be looked up: not empty, short enough, no `/` or NUL.
fn check_name(name: &[u8]) -> FsResult<()> {
    if name.is_empty() || name.contains(&b'/') || name.contains(&0) {
        return Err(FsError::Inval);
    }
    if name.len() > NAME_MAX_BYTES {
        return Err(FsError::NameTooLong);
    }
    Ok(())
}

/// A name that may be created: as [`check_name`], and not `.` or `..`.
fn check_new_name(name: &[u8]) -> FsResult<()> {
    check_name(name)?;
    if name == b"." || name == b".." {
        return Err(FsError::Exist);
    }
    Ok(())
}

/// A name that may be removed or renamed.
fn check_old_name(name: &[u8]) -> FsResult<()> {
    check_name(name)?;
    if name == b"." || name == b".." {
        return Err(FsError::Inval);
    }
    Ok(())
}

fn time_of(t: SetTime, now: Time) -> Option<Time> {
    match t {
        SetTime::DontChange => None,
        SetTime::ServerTime => Some(now),
        SetTime::Client(t) => Some(t),
    }
}

impl Fs {
    fn node(&self, slot: u32) -> FsResult<&Node> {
        self.slots
            .get(slot as usize)
            .and_then(|s| s.node.as_ref())
            .ok_or(FsError::ServerFault)
    }

    fn node_mut(&mut self, slot: u32) -> FsResult<&mut Node> {
        self.slots
            .get_mut(slot as usize)
            .and_then(|s| s.node.as_mut())
            .ok_or(FsError::ServerFault)
    }

    fn dir_of(&self, slot: u32) -> FsResult<&Dir> {
        self.node(slot)?.dir()
    }

    fn dir_mut_of(&mut self, slot: u32) -> FsResult<&mut Dir> {
        self.node_mut(slot)?.dir_mut()
    }

    fn alloc_slot(&mut self, node: Node) -> FsResult<u32> {
        if self.live_inodes >= self.max_inodes {
            return Err(FsError::NoSpc);
        }
        self.live_inodes += 1;
        if let Some(s) = self.free_slots.pop() {
            self.slots[s as usize].node = Some(node);
            return Ok(s);
        }
        let s = u32::try_from(self.slots.len()).map_err(|_| FsError::NoSpc)?;
        self.slots.push(Slot {
            generation: 1,
            node: Some(node),
        });
        Ok(s)
    }

    /// Free an inode whose last link is gone: its blocks go back to the free
    /// list and the slot's generation moves on, making old handles stale.
    fn free_slot(&mut self, slot: u32) {
        let Some(s) = self.slots.get_mut(slot as usize) else {
            return;
        };
        let Some(node) = s.node.take() else {
            return;
        };
        s.generation = s.generation.wrapping_add(1).max(1);
        if let Body::File { blocks, lock, .. } = node.body {
            // A copy still running on these blocks finishes first.
            drop(lock.write());
            blocks.for_each(|b| self.free_blocks.push(b));
        }
        self.free_slots.push(slot);
        self.live_inodes -= 1;
    }

    /// Drop one link of `slot`; frees the inode when none is left.
    fn unlink_node(&mut self, slot: u32) -> FsResult<()> {
        let node = self.node_mut(slot)?;
        node.nlink = node.nlink.saturating_sub(1);
        node.ctime = Time::now();
        if node.nlink == 0 {
            self.free_slot(slot);
        }
        Ok(())
    }

    /// Block `b` of the arena, to zero. The caller holds the namespace lock
    /// exclusively and the block belongs to no file, or to a file whose
    /// lock it holds: no copy runs on it.
    fn block_range(&mut self, b: u32) -> &mut [u8] {
        let start = b as usize * MEM_BLOCK_BYTES as usize;
        assert!(
            start + MEM_BLOCK_BYTES as usize <= self.arena.len,
            "block {b} outside the arena"
        );
        // SAFETY: in bounds (checked above) of the arena's mapping; only
        // this block is borrowed, never the whole arena, as copies of other
        // files' blocks may run meanwhile through `Arena::base`; nobody
        // else touches this block (see above) while `&mut self` lives.
        unsafe { std::slice::from_raw_parts_mut(self.arena.base().add(start), MEM_BLOCK_BYTES as usize) }
    }

    /// Set a regular file's size: blocks wholly past the new end are freed
    /// and the tail of the last block is zeroed, so that an extension later
    /// reads zeros. Extending allocates nothing (a hole).
    fn truncate(&mut self, slot: u32, new_size: u64) -> FsResult<()> {
        if new_size > MEM_MAX_FILE_BYTES {
            return Err(FsError::FBig);
        }
        let node = self.node_mut(slot)?;
        let old_size = node.size;
        let (blocks, lock) = match &mut node.body {
            Body::File { blocks, lock, .. } => (blocks, lock.clone()),
            Body::Dir(_) => return Err(FsError::IsDir),
            _ => return Err(FsError::Inval),
        };
        node.size = new_size;
        if new_size >= old_size {
            return Ok(());
        }
        // Blocks are freed or zeroed: a copy still running on them
        // finishes first (no new one starts: this holds the namespace lock).
        let _quiet = lock.write().map_err(|_| FsError::ServerFault)?;
        let keep = new_size.div_ceil(MEM_BLOCK_BYTES);
        let mut gone = Vec::new();
        blocks.truncate(keep, |b| gone.push(b));
        let tail = if !new_size.is_multiple_of(MEM_BLOCK_BYTES) {
            blocks.get(new_size / MEM_BLOCK_BYTES)
        } else {
            None
        };
        self.free_blocks.extend(gone);
        if let Some(b) = tail {
            let from = (new_size % MEM_BLOCK_BYTES) as usize;
            self.block_range(b)[from..].fill(0);
        }
        Ok(())
    }

    /// Apply `set`, with the kernel's rules for the caller ([`creds::current`];
    /// issue 21 item 6): a truncation by a caller without CAP_FSETID (not
    /// root) clears the set-id bits; a change of owner or group of a
    /// non-directory clears them (from the new mode, when one is given,
    /// as the Linux server does); a new mode keeps S_ISGID only for root or
    /// a caller in the file's group. Permission to make the change is
    /// checked by the NFS layer.
    fn apply_set(&mut self, slot: u32, set: &SetAttr) -> FsResult<()> {
        let now = Time::now();
        let caller = creds::unprivileged_caller();
        if let Some(size) = set.size {
            self.truncate(slot, size)?;
            let node = self.node_mut(slot)?;
            node.mtime = now;
            if let Some(c) = caller {
                node.mode = kill_setid(node.mode, c.in_group(node.gid));
            }
        }
        let node = self.node_mut(slot)?;
        let chown = (set.uid.is_some() || set.gid.is_some()) && node.ftype() != FileType::Directory;
        if let Some(uid) = set.uid {
            node.uid = uid;
        }
        if let Some(gid) = set.gid {
            node.gid = gid;
        }
        // Root, or a caller in the file's (new) group, keeps a plain S_ISGID.
        let keeps_sgid = caller.is_none_or(|c| c.in_group(node.gid));
        if chown {
            node.mode = kill_setid(node.mode, keeps_sgid);
        }
        if let Some(mode) = set.mode {
            let mut mode = mode & 0o7777;
            if chown {
                mode = kill_setid(mode, keeps_sgid);
            }
            if caller.is_some_and(|c| !c.in_group(node.gid)) {
                mode &= !S_ISGID;
            }
            node.mode = mode;
        }
        if let Some(t) = time_of(set.atime, now) {
            node.atime = t;
        }
        if let Some(t) = time_of(set.mtime, now) {
            node.mtime = t;
        }
        node.ctime = now;
        Ok(())
    }

    /// Create a node named `name` in `dir` (which must not have the name).
    /// Link the new `node` into `dir` as `name`. In a set-group-ID
    /// directory the node takes the directory's group, and a new directory
    /// keeps the set-group-ID bit, as the Linux kernel does for every file
    /// system (POSIX leaves the group of a new file to the implementation;
    /// BSD semantics). Attributes the client set explicitly are applied
    /// after this by the caller.
    fn add_node(&mut self, dir: u32, name: &[u8], mut node: Node) -> FsResult<u32> {
        let is_dir = matches!(node.body, Body::Dir(_));
        let p = self.node(dir)?;
        if p.mode & S_ISGID != 0 {
            node.gid = p.gid;
            if is_dir {
                node.mode |= S_ISGID;
            }
        }
        // A new file keeps S_ISGID (with group execute) only for a creator
        // in its group, as the kernel's inode_init_owner.
        if !is_dir
            && node.mode & (S_ISGID | creds::S_IXGRP) == (S_ISGID | creds::S_IXGRP)
            && creds::unprivileged_caller().is_some_and(|c| !c.in_group(node.gid))
        {
            node.mode &= !S_ISGID;
        }
        let slot = self.alloc_slot(node)?;
        let parent = self.node_mut(dir)?;
        if is_dir {
            parent.nlink = parent.nlink.saturating_add(1);
        }
        parent.touch_dir();
        parent.dir_mut()?.insert(name, slot);
        Ok(slot)
    }

    /// Whether `slot` is `ancestor` or lies below it.
    fn is_under(&self, mut slot: u32, ancestor: u32) -> FsResult<bool> {
        // The depth is bounded by the inode count; the loop ends at the root.
        loop {
            if slot == ancestor {
                return Ok(true);
            }
            if slot == ROOT {
                return Ok(false);
            }
            slot = self.dir_of(slot)?.parent;
        }
    }

    /// The file lock and the pieces of a READ of `len` bytes at `offset`:
    /// `(arena offset or a hole, length)` in order into `ext`, the bytes
    /// read and whether they reach the end of the file.
    fn read_plan(&self, slot: u32, offset: u64, len: usize, ext: &mut Vec<Extent>) -> FsResult<(FileLock, u32, bool)> {
        ext.clear();
        let node = self.node(slot)?;
        let (blocks, lock) = match &node.body {
            Body::File { blocks, lock, .. } => (blocks, lock.clone()),
            Body::Dir(_) => return Err(FsError::IsDir),
            _ => return Err(FsError::Inval),
        };
        if offset >= node.size {
            return Ok((lock, 0, true));
        }
        let n = (node.size - offset).min(len as u64) as usize;
        // Walk the byte range block by block; missing blocks are holes.
        let mut done = 0usize;
        while done < n {
            let pos = offset + done as u64;
            let in_block = (pos % MEM_BLOCK_BYTES) as usize;
            let chunk = (MEM_BLOCK_BYTES as usize - in_block).min(n - done);
            let at = blocks
                .get(pos / MEM_BLOCK_BYTES)
                .map(|b| b as usize * MEM_BLOCK_BYTES as usize + in_block);
            ext.push(Extent { at, len: chunk });
            done += chunk;
        }
        let eof = offset + n as u64 >= node.size;
        Ok((lock, n as u32, eof))
    }

    /// Allocate the blocks a WRITE of `len` bytes at `offset` needs, set the
    /// size and times as after it, and put its pieces (arena offset, length)
    /// in order into `ext`; the caller copies the data, holding the file's
    /// lock. Fails with nothing changed when the arena has too few blocks.
    fn write_plan(&mut self, slot: u32, offset: u64, len: usize, ext: &mut Vec<Extent>) -> FsResult<u32> {
        ext.clear();
        let end = offset.checked_add(len as u64).ok_or(FsError::FBig)?;
        if end > MEM_MAX_FILE_BYTES {
            return Err(FsError::FBig);
        }
        let node = self.node(slot)?;
        let blocks = match &node.body {
            Body::File { blocks, .. } => blocks,
            Body::Dir(_) => return Err(FsError::IsDir),
            _ => return Err(FsError::Inval),
        };
        if len == 0 {
            return Ok(0);
        }
        // Reserve every missing block first, so a full arena fails the whole
        // write with nothing changed.
        let first = offset / MEM_BLOCK_BYTES;
        let last = (end - 1) / MEM_BLOCK_BYTES;
        let present = blocks.count_range(first, last);
        let missing = last - first + 1 - present;
        if missing > self.free_blocks.len() as u64 {
            return Err(FsError::NoSpc);
        }
        let mut done = 0usize;
        while done < len {
            let pos = offset + done as u64;
            let fbn = pos / MEM_BLOCK_BYTES;
            let in_block = (pos % MEM_BLOCK_BYTES) as usize;
            let chunk = (MEM_BLOCK_BYTES as usize - in_block).min(len - done);
            let existing = match &self.node(slot)?.body {
                Body::File { blocks, .. } => blocks.get(fbn),
                _ => return Err(FsError::ServerFault),
            };
            let b = match existing {
                Some(b) => b,
                None => {
                    let b = self.free_blocks.pop().ok_or(FsError::NoSpc)?;
                    if chunk != MEM_BLOCK_BYTES as usize {
                        // Freed blocks hold old data; a partial write must
                        // leave zeros around it.
                        self.block_range(b).fill(0);
                    }
                    if let Body::File { blocks, .. } = &mut self.node_mut(slot)?.body {
                        blocks.insert(fbn, b);
                    }
                    b
                }
            };
            ext.push(Extent {
                at: Some(b as usize * MEM_BLOCK_BYTES as usize + in_block),
                len: chunk,
            });
            done += chunk;
        }
        let node = self.node_mut(slot)?;
        node.size = node.size.max(end);
        let now = Time::now();
        node.mtime = now;
        node.ctime = now;
        // A writer without CAP_FSETID (not root) clears the set-id bits, as
        // the kernel's file_remove_privs (issue 21 item 6).
        if let Some(c) = creds::unprivileged_caller() {
            node.mode = kill_setid(node.mode, c.in_group(node.gid));
        }
        Ok(len as u32)
    }
}

/// One piece of a READ or WRITE: where it lies in the arena (`None`: a hole,
/// read as zeros) and its length.
#[derive(Clone, Copy, Debug)]
struct Extent {
    at: Option<usize>,
    len: usize,
}

thread_local! {
    /// The pieces of the I/O being done on this thread (no allocation per I/O).
    static EXTENTS: std::cell::RefCell<Vec<Extent>> = const { std::cell::RefCell::new(Vec::new()) };
}

impl Shared {
    fn read_fs(&self) -> FsResult<RwLockReadGuard<'_, Fs>> {
        self.fs.read().map_err(|_| FsError::ServerFault)
    }

    fn write_fs(&self) -> FsResult<RwLockWriteGuard<'_, Fs>> {
        self.fs.write().map_err(|_| FsError::ServerFault)
    }

    fn handle(&self, fs: &Fs, slot: u32) -> FileHandle {
        let mut b = [0u8; HANDLE_LEN];
        b[0] = HANDLE_TAG;
        b[1..5].copy_from_slice(&self.instance.to_le_bytes());
        b[5..13].copy_from_slice(&(u64::from(slot) + 1).to_le_bytes());
        let generation = fs.slots.get(slot as usize).map_or(0, |s| s.generation);
        b[13..17].copy_from_slice(&generation.to_le_bytes());
        FileHandle::new(&b).expect("17 bytes is a valid handle length")
    }

    /// The slot a handle names: `BadHandle` when it is not one of ours,
    /// `Stale` when its file is gone (or from another instance).
    fn resolve(&self, fs: &Fs, fh: &FileHandle) -> FsResult<u32> {
        let b = fh.as_bytes();
        if b.len() != HANDLE_LEN || b[0] != HANDLE_TAG {
            return Err(FsError::BadHandle);
        }
        let instance = u32::from_le_bytes([b[1], b[2], b[3], b[4]]);
        let mut ino = [0u8; 8];
        ino.copy_from_slice(&b[5..13]);
        let ino = u64::from_le_bytes(ino);
        let generation = u32::from_le_bytes([b[13], b[14], b[15], b[16]]);
        if instance != self.instance || ino == 0 || ino > fs.slots.len() as u64 {
            return Err(FsError::Stale);
        }
        let slot = (ino - 1) as u32;
        let s = &fs.slots[slot as usize];
        if s.generation != generation || s.node.is_none() {
            return Err(FsError::Stale);
        }
        Ok(slot)
    }

    fn found(&self, fs: &Fs, slot: u32) -> FsResult<(FileHandle, Attr)> {
        Ok((self.handle(fs, slot), fs.node(slot)?.attr(slot)))
    }

    /// READ `out.len()` bytes at `offset` of `fh`: the blocks are found
    /// under the namespace lock, copied under the file's lock only.
    fn read_at(&self, fh: &FileHandle, offset: u64, out: &mut [u8], ext: &mut Vec<Extent>) -> FsResult<(u32, bool)> {
        loop {
            let fs = self.read_fs()?;
            let slot = self.resolve(&fs, fh)?;
            let lock = match &fs.node(slot)?.body {
                Body::File { lock, .. } => lock.clone(),
                Body::Dir(_) => return Err(FsError::IsDir),
                _ => return Err(FsError::Inval),
            };
            // A writer is copying into this file: wait for it without the
            // namespace lock, then look again.
            let _file = match lock.try_read() {
                Ok(g) => g,
                Err(std::sync::TryLockError::WouldBlock) => {
                    drop(fs);
                    drop(lock.read().map_err(|_| FsError::ServerFault)?);
                    continue;
                }
                Err(std::sync::TryLockError::Poisoned(_)) => return Err(FsError::ServerFault),
            };
            let (_, n, eof) = fs.read_plan(slot, offset, out.len(), ext)?;
            let base = fs.arena.base();
            drop(fs);
            let mut done = 0usize;
            for e in ext.iter() {
                let dst = &mut out[done..done + e.len];
                match e.at {
                    // SAFETY: `at..at + len` is inside the arena (a block of
                    // this file, from its block map). The file's read lock
                    // is held: no writer copies into it, and nothing frees
                    // it (freeing takes the file's write lock), until this
                    // copy is done.
                    Some(at) => dst.copy_from_slice(unsafe { std::slice::from_raw_parts(base.add(at), e.len) }),
                    None => dst.fill(0),
                }
                done += e.len;
            }
            return Ok((n, eof));
        }
    }

    /// WRITE `data` at `offset` of `fh`: blocks allocated and the size set
    /// under the namespace lock, the data copied under the file's lock only.
    /// `pre` gets the file's attributes read under the same hold of the
    /// namespace lock as the change (the WRITE's pre-operation attributes,
    /// issue 21 item 8).
    fn write_at(
        &self,
        fh: &FileHandle,
        offset: u64,
        data: &[u8],
        ext: &mut Vec<Extent>,
        pre: &mut Option<Attr>,
    ) -> FsResult<u32> {
        loop {
            let mut fs = self.write_fs()?;
            let slot = self.resolve(&fs, fh)?;
            let lock = match &fs.node(slot)?.body {
                Body::File { lock, .. } => lock.clone(),
                Body::Dir(_) => return Err(FsError::IsDir),
                _ => return Err(FsError::Inval),
            };
            // The file's lock before anything changes: a reader that sees
            // the new size must also see the data.
            let _file = match lock.try_write() {
                Ok(g) => g,
                Err(std::sync::TryLockError::WouldBlock) => {
                    drop(fs);
                    drop(lock.write().map_err(|_| FsError::ServerFault)?);
                    continue;
                }
                Err(std::sync::TryLockError::Poisoned(_)) => return Err(FsError::ServerFault),
            };
            *pre = Some(fs.node(slot)?.attr(slot));
            let n = fs.write_plan(slot, offset, data.len(), ext)?;
            let base = fs.arena.base();
            drop(fs);
            let mut done = 0usize;
            for e in ext.iter() {
                if let Some(at) = e.at {
                    // SAFETY: `at..at + len` is inside the arena, a block
                    // `write_plan` gave this file. The file's write lock is
                    // held: nobody else reads or writes it, and nothing
                    // frees it, until this copy is done.
                    unsafe { std::ptr::copy_nonoverlapping(data[done..].as_ptr(), base.add(at), e.len) };
                }
                done += e.len;
            }
            return Ok(n);
        }
    }

    /// Run `io`; a write leaves its pre-operation attributes in `pre`.
    fn do_io(&self, io: &IoDesc, pre: &mut Option<Attr>) -> IoDone {
        let mut done = IoDone {
            tag: io.tag,
            ..IoDone::default()
        };
        let len = io.len as usize;
        if !io.op.is_flush() && io.buf.is_null() && len != 0 {
            done.result = Err(FsError::Inval);
            return done;
        }
        let ptr = if len == 0 {
            std::ptr::NonNull::<u8>::dangling().as_ptr()
        } else {
            io.buf
        };
        match io.op {
            IoOp::Read => {
                // SAFETY: the submit contract makes `buf` valid for reads and
                // writes of `len` bytes and exclusively ours until the
                // completion is reaped; a zero length uses a dangling,
                // aligned pointer, valid for an empty slice.
                let out = unsafe { std::slice::from_raw_parts_mut(ptr, len) };
                done.result = EXTENTS
                    .with_borrow_mut(|ext| self.read_at(&io.fh, io.offset, out, ext))
                    .map(|(n, eof)| {
                        done.eof = eof;
                        n
                    });
            }
            IoOp::Write(_) => {
                // SAFETY: as for a read; a write only reads the buffer.
                let data = unsafe { std::slice::from_raw_parts(ptr as *const u8, len) };
                *pre = None;
                done.result = EXTENTS.with_borrow_mut(|ext| self.write_at(&io.fh, io.offset, data, ext, pre));
                if done.result.is_ok() {
                    done.committed = Stable::FileSync;
                }
            }
            IoOp::Flush | IoOp::FlushData => {
                done.result = self.read_fs().and_then(|fs| {
                    let slot = self.resolve(&fs, &io.fh)?;
                    fs.node(slot).map(|_| 0)
                });
                done.committed = Stable::FileSync;
            }
        }
        done
    }
}

/// File blocks per [`BlockMap`] leaf (2 MiB of file at 4 KiB blocks).
const LEAF_BLOCKS: usize = 512;
/// A leaf slot with no block (a hole).
const HOLE: u32 = u32::MAX;

/// A file's block map: file block number -> arena block number, as leaves of
/// [`LEAF_BLOCKS`] slots keyed by `fbn / LEAF_BLOCKS` in a `BTreeMap`. A
/// lookup searches a map with one key per 2 MiB of file (a single node for
/// files up to 22 MiB) and indexes the leaf, instead of walking a tree with
/// one key per 4 KiB block; sparse files stay cheap (a leaf per 2 MiB range
/// that holds data).
#[derive(Default)]
struct BlockMap {
    leaves: BTreeMap<u64, Box<[u32; LEAF_BLOCKS]>>,
    /// Blocks held (the file's space used).
    len: u64,
}

impl BlockMap {
    fn split(fbn: u64) -> (u64, usize) {
        (fbn / LEAF_BLOCKS as u64, (fbn % LEAF_BLOCKS as u64) as usize)
    }

    fn len(&self) -> u64 {
        self.len
    }

    fn get(&self, fbn: u64) -> Option<u32> {
        let (leaf, at) = Self::split(fbn);
        let b = self.leaves.get(&leaf)?[at];
        (b != HOLE).then_some(b)
    }

    /// Map `fbn` (a hole) to arena block `b`.
    fn insert(&mut self, fbn: u64, b: u32) {
        debug_assert_ne!(b, HOLE);
        let (leaf, at) = Self::split(fbn);
        let slot = &mut self.leaves.entry(leaf).or_insert_with(|| Box::new([HOLE; LEAF_BLOCKS]))[at];
        if *slot == HOLE {
            self.len += 1;
        }
        *slot = b;
    }

    /// Blocks held in `first..=last`.
    fn count_range(&self, first: u64, last: u64) -> u64 {
        let mut n = 0;
        for (&k, leaf) in self
            .leaves
            .range(first / LEAF_BLOCKS as u64..=last / LEAF_BLOCKS as u64)
        {
            let base = k * LEAF_BLOCKS as u64;
            let lo = first.saturating_sub(base).min(LEAF_BLOCKS as u64 - 1) as usize;
            let hi = (last - base).min(LEAF_BLOCKS as u64 - 1) as usize;
            n += leaf[lo..=hi].iter().filter(|&&b| b != HOLE).count() as u64;
        }
        n
    }

    /// Remove every block from `keep` on, handing each to `free`.
    fn truncate(&mut self, keep: u64, mut free: impl FnMut(u32)) {
        let (leaf, at) = Self::split(keep);
        let whole = self.leaves.split_off(&(leaf + u64::from(at > 0)));
        for b in whole.values().flat_map(|l| l.iter()).copied().filter(|&b| b != HOLE) {
            self.len -= 1;
            free(b);
        }
        if at > 0 {
            if let Some(l) = self.leaves.get_mut(&leaf) {
                for slot in &mut l[at..] {
                    if *slot != HOLE {
                        self.len -= 1;
                        free(std::mem::replace(slot, HOLE));
                    }
                }
                if l.iter().all(|&b| b == HOLE) {
                    self.leaves.remove(&leaf);
                }
            }
        }
    }

    /// Hand every block to `f` (the file is going away).
    fn for_each(self, f: impl FnMut(u32)) {
        self.leaves
            .into_values()
            .flat_map(|l| l.into_iter())
            .filter(|&b| b != HOLE)
            .for_each(f);
    }
}

/// Alignment of the arena: one x86-64 huge page, so transparent huge pages
/// can back all of it.
const ARENA_ALIGN_BYTES: usize = 2 << 20;

/// The data arena: one anonymous private mapping, aligned to 2 MiB and
/// advised `MADV_HUGEPAGE` before any byte of it is touched, so that the
/// first write to each 2 MiB piece faults in a huge page and a random 4 KiB
/// READ costs no page walk that misses the caches. The advice is best
/// effort: without transparent huge pages the arena is normal pages.
///
/// It is mapped rather than allocated: `alloc_zeroed` with a 2 MiB alignment
/// fills the whole allocation with zeros itself, which faults every page in
/// as a small page before the advice can apply (so a 256 MiB arena ended up
/// almost entirely in 4 KiB pages, and a random READ paid a TLB miss), and
/// costs the whole size in memory at start-up. A fresh anonymous mapping
/// reads as zeros and takes memory only as blocks are first written.
struct Arena {
    /// Start of the 2 MiB-aligned part of the mapping.
    ptr: std::ptr::NonNull<u8>,
    /// Bytes usable from `ptr`.
    len: usize,
    /// The whole mapping, as `mmap` returned it (for `munmap`).
    map: std::ptr::NonNull<u8>,
    map_len: usize,
}

// SAFETY: `Arena` owns its mapping exclusively (like `Box<[u8]>`); access
// goes through `&`/`&mut` borrows of it, which the borrow checker orders.
unsafe impl Send for Arena {}
// SAFETY: `&Arena` gives out its base pointer; every access through it is a
// copy of one file's blocks under that file's lock, or a block borrowed
// under the namespace lock held exclusively (see the module docs), so no
// two threads touch one block unordered.
unsafe impl Sync for Arena {}

impl Arena {
    fn new(len: usize) -> FsResult<Arena> {
        if len == 0 {
            return Err(FsError::Inval);
        }
        // Over-map by one alignment so a 2 MiB-aligned start fits inside.
        let map_len = len.checked_add(ARENA_ALIGN_BYTES).ok_or(FsError::FBig)?;
        // SAFETY: a new anonymous private mapping at an address the kernel
        // chooses; no existing memory is affected.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(FsError::NoSpc);
        }
        let map = std::ptr::NonNull::new(p.cast::<u8>()).ok_or(FsError::NoSpc)?;
        let skip = (ARENA_ALIGN_BYTES - (p as usize) % ARENA_ALIGN_BYTES) % ARENA_ALIGN_BYTES;
        // SAFETY: `skip < ARENA_ALIGN_BYTES`, so `p + skip .. p + skip + len`
        // lies inside the `map_len = len + ARENA_ALIGN_BYTES` bytes mapped.
        let start = unsafe { map.as_ptr().add(skip) };
        // SAFETY: `start..start + len` is inside the mapping just made and
        // nothing has touched it yet; `madvise` only changes how the kernel
        // backs it, and its failure (no transparent huge pages) is harmless,
        // so its result is ignored.
        let _ = unsafe { libc::madvise(start.cast(), len, libc::MADV_HUGEPAGE) };
        let ptr = std::ptr::NonNull::new(start).ok_or(FsError::NoSpc)?;
        Ok(Arena { ptr, len, map, map_len })
    }
}

impl Arena {
    /// The start of the arena, for copies made without a borrow of it (under
    /// a file's lock; see [`Shared::read_at`]).
    fn base(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }
}

impl std::ops::Deref for Arena {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: `ptr..ptr + len` is inside a readable, writable mapping
        // owned by `self` (anonymous memory reads as zeros until written),
        // alive until drop.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl std::ops::DerefMut for Arena {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`, and `&mut self` makes this the only borrow.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        // SAFETY: `map..map + map_len` is exactly the mapping made in
        // `Arena::new`, and no borrow of it outlives `self`.
        unsafe { libc::munmap(self.map.as_ptr().cast(), self.map_len) };
    }
}

impl MemBackend {
    /// A RAM file system of `size_bytes` (a non-zero multiple of
    /// [`MEM_BLOCK_BYTES`]), allocated now. Inodes are limited to one per
    /// block, at least [`MEM_MIN_INODES`]. Call at start-up, on any thread.
    pub fn new(name: &str, size_bytes: u64) -> FsResult<MemBackend> {
        if size_bytes == 0 || !size_bytes.is_multiple_of(MEM_BLOCK_BYTES) {
            return Err(FsError::Inval);
        }
        let total_blocks = size_bytes / MEM_BLOCK_BYTES;
        if total_blocks > u64::from(u32::MAX) || usize::try_from(size_bytes).is_err() {
            return Err(FsError::FBig);
        }
        let arena = Arena::new(size_bytes as usize)?;
        let free_blocks: Vec<u32> = (0..total_blocks as u32).rev().collect();
        let mut root = Node::new(0o755, Owner::default(), Body::Dir(Dir::new(ROOT)));
        root.nlink = 2;
        let fs = Fs {
            arena,
            total_blocks,
            free_blocks,
            slots: vec![Slot {
                generation: 1,
                node: Some(root),
            }],
            free_slots: Vec::new(),
            max_inodes: total_blocks.max(MEM_MIN_INODES),
            live_inodes: 1,
        };
        let instance = (std::collections::hash_map::RandomState::new().build_hasher().finish() as u32).max(1);
        Ok(MemBackend {
            name: name.to_owned(),
            shared: Arc::new(Shared {
                instance,
                fs: RwLock::new(fs),
            }),
            queue_depth: MEM_DEFAULT_QUEUE_DEPTH,
        })
    }

    /// Completions each channel holds before `submit` answers `Jukebox`
    /// (at least 1). Call before opening channels.
    pub fn with_queue_depth(mut self, depth: u32) -> Self {
        self.queue_depth = depth.max(1);
        self
    }

    /// The name from the configuration.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl fmt::Debug for MemBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("MemBackend");
        d.field("name", &self.name).field("queue_depth", &self.queue_depth);
        if let Ok(fs) = self.shared.fs.try_read() {
            d.field("total_blocks", &fs.total_blocks)
                .field("free_blocks", &fs.free_blocks.len())
                .field("live_inodes", &fs.live_inodes);
        }
        d.finish()
    }
}

/// The namespace changes on the locked file system, shared by the plain
/// calls and [`Backend::change_checked`] (which checks and changes under one
/// hold of the lock).
impl MemBackend {
    fn create_in(
        &self,
        fs: &mut Fs,
        d: u32,
        name: &[u8],
        how: CreateHow,
        owner: Owner,
    ) -> FsResult<(FileHandle, Attr)> {
        let existing = fs.dir_of(d)?.get(name);
        check_new_name(name)?;
        if let Some(slot) = existing {
            let node = fs.node(slot)?;
            match how {
                CreateHow::Unchecked(set) if node.ftype() == FileType::Regular => {
                    fs.apply_set(
                        slot,
                        &SetAttr {
                            mode: None,
                            uid: None,
                            gid: None,
                            ..set
                        },
                    )?;
                    return self.shared.found(fs, slot);
                }
                CreateHow::Exclusive(v) => {
                    if matches!(node.body, Body::File { verifier: Some(old), .. } if old == v) {
                        return self.shared.found(fs, slot);
                    }
                    return Err(FsError::Exist);
                }
                _ => return Err(FsError::Exist),
            }
        }
        let (set, verifier) = match how {
            CreateHow::Unchecked(set) | CreateHow::Guarded(set) => (set, None),
            CreateHow::Exclusive(v) => (NO_ATTR, Some(v)),
        };
        let mode = set.mode.unwrap_or(if verifier.is_some() { 0o600 } else { 0o644 });
        let node = Node::new(
            mode,
            owner,
            Body::File {
                blocks: BlockMap::default(),
                verifier,
                lock: FileLock::default(),
            },
        );
        let slot = fs.add_node(d, name, node)?;
        if set != NO_ATTR {
            if let Err(e) = fs.apply_set(slot, &SetAttr { mode: None, ..set }) {
                // Undo: the create fails as a whole.
                fs.dir_mut_of(d)?.remove(name);
                fs.free_slot(slot);
                return Err(e);
            }
        }
        self.shared.found(fs, slot)
    }

    fn mkdir_in(&self, fs: &mut Fs, d: u32, name: &[u8], set: &SetAttr, owner: Owner) -> FsResult<(FileHandle, Attr)> {
        let existing = fs.dir_of(d)?.get(name);
        check_new_name(name)?;
        if existing.is_some() {
            return Err(FsError::Exist);
        }
        if set.size.is_some() {
            return Err(FsError::IsDir);
        }
        let mut node = Node::new(set.mode.unwrap_or(0o755), owner, Body::Dir(Dir::new(d)));
        node.nlink = 2;
        let slot = fs.add_node(d, name, node)?;
        fs.apply_set(slot, &SetAttr { mode: None, ..*set })?;
        self.shared.found(fs, slot)
    }

    fn symlink_in(
        &self,
        fs: &mut Fs,
        d: u32,
        name: &[u8],
        target: &[u8],
        set: &SetAttr,
        owner: Owner,
    ) -> FsResult<(FileHandle, Attr)> {
        let existing = fs.dir_of(d)?.get(name);
        check_new_name(name)?;
        if target.is_empty() || target.contains(&0) {
            return Err(FsError::Inval);
        }
        if target.len() > PATH_MAX_BYTES {
            return Err(FsError::NameTooLong);
        }
        if existing.is_some() {
            return Err(FsError::Exist);
        }
        let node = Node::new(0o777, owner, Body::Symlink(target.to_vec()));
        let slot = fs.add_node(d, name, node)?;
        fs.apply_set(
            slot,
            &SetAttr {
                mode: None,
                size: None,
                ..*set
            },
        )?;
        self.shared.found(fs, slot)
    }

    fn mknod_in(
        &self,
        fs: &mut Fs,
        d: u32,
        name: &[u8],
        kind: NodeKind,
        set: &SetAttr,
        owner: Owner,
    ) -> FsResult<(FileHandle, Attr)> {
        let existing = fs.dir_of(d)?.get(name);
        check_new_name(name)?;
        if existing.is_some() {
            return Err(FsError::Exist);
        }
        let (ftype, rdev) = match kind {
            NodeKind::Char { major, minor } => (FileType::Char, (major, minor)),
            NodeKind::Block { major, minor } => (FileType::Block, (major, minor)),
            NodeKind::Socket => (FileType::Socket, (0, 0)),
            NodeKind::Fifo => (FileType::Fifo, (0, 0)),
        };
        let node = Node::new(set.mode.unwrap_or(0o644), owner, Body::Special { ftype, rdev });
        let slot = fs.add_node(d, name, node)?;
        fs.apply_set(
            slot,
            &SetAttr {
                mode: None,
                size: None,
                ..*set
            },
        )?;
        self.shared.found(fs, slot)
    }

    fn remove_in(&self, fs: &mut Fs, d: u32, name: &[u8]) -> FsResult<()> {
        let existing = fs.dir_of(d)?.get(name);
        check_old_name(name)?;
        let slot = existing.ok_or(FsError::NoEnt)?;
        if fs.node(slot)?.ftype() == FileType::Directory {
            return Err(FsError::IsDir);
        }
        let parent = fs.node_mut(d)?;
        parent.touch_dir();
        parent.dir_mut()?.remove(name);
        fs.unlink_node(slot)
    }

    fn rmdir_in(&self, fs: &mut Fs, d: u32, name: &[u8]) -> FsResult<()> {
        let existing = fs.dir_of(d)?.get(name);
        check_name(name)?;
        match name {
            b"." => return Err(FsError::Inval),
            b".." => return Err(FsError::NotEmpty),
            _ => {}
        }
        let slot = existing.ok_or(FsError::NoEnt)?;
        if !fs.dir_of(slot)?.by_pos.is_empty() {
            return Err(FsError::NotEmpty);
        }
        let parent = fs.node_mut(d)?;
        parent.touch_dir();
        parent.nlink = parent.nlink.saturating_sub(1);
        parent.dir_mut()?.remove(name);
        fs.free_slot(slot);
        Ok(())
    }

    fn rename_in(&self, fs: &mut Fs, fd: u32, from: &[u8], td: u32, to: &[u8]) -> FsResult<()> {
        let src = fs.dir_of(fd)?.get(from);
        let dst = fs.dir_of(td)?.get(to);
        check_old_name(from)?;
        check_old_name(to)?;
        let src = src.ok_or(FsError::NoEnt)?;
        let src_is_dir = fs.node(src)?.ftype() == FileType::Directory;
        if src_is_dir && fs.is_under(td, src)? {
            // A directory cannot move below itself.
            return Err(FsError::Inval);
        }
        if let Some(dst) = dst {
            if dst == src {
                // Two links of one file: POSIX says do nothing.
                return Ok(());
            }
            let dst_node = fs.node(dst)?;
            let dst_is_dir = dst_node.ftype() == FileType::Directory;
            match (src_is_dir, dst_is_dir) {
                (true, false) => return Err(FsError::NotDir),
                (false, true) => return Err(FsError::IsDir),
                (true, true) if !dst_node.dir()?.by_pos.is_empty() => return Err(FsError::NotEmpty),
                _ => {}
            }
            fs.dir_mut_of(td)?.remove(to);
            if dst_is_dir {
                let t = fs.node_mut(td)?;
                t.nlink = t.nlink.saturating_sub(1);
                fs.free_slot(dst);
            } else {
                fs.unlink_node(dst)?;
            }
        }
        fs.dir_mut_of(fd)?.remove(from);
        fs.dir_mut_of(td)?.insert(to, src);
        fs.node_mut(fd)?.touch_dir();
        fs.node_mut(td)?.touch_dir();
        let now = Time::now();
        let moved = fs.node_mut(src)?;
        moved.ctime = now;
        if src_is_dir && fd != td {
            moved.dir_mut()?.parent = td;
            let f = fs.node_mut(fd)?;
            f.nlink = f.nlink.saturating_sub(1);
            let t = fs.node_mut(td)?;
            t.nlink = t.nlink.saturating_add(1);
        }
        Ok(())
    }

    fn link_in(&self, fs: &mut Fs, slot: u32, d: u32, name: &[u8]) -> FsResult<()> {
        let existing = fs.dir_of(d)?.get(name);
        check_new_name(name)?;
        let node = fs.node(slot)?;
        if node.ftype() == FileType::Directory {
            return Err(FsError::IsDir);
        }
        if node.nlink == u32::MAX {
            return Err(FsError::Mlink);
        }
        if existing.is_some() {
            return Err(FsError::Exist);
        }
        // Hard links as the kernel's protected_hardlinks (issue 21 item 6).
        if let Some(c) = creds::unprivileged_caller() {
            if !c.may_hardlink(node.ftype() == FileType::Regular, node.mode, node.uid, node.gid) {
                return Err(FsError::Perm);
            }
        }
        let node = fs.node_mut(slot)?;
        node.nlink += 1;
        node.ctime = Time::now();
        let parent = fs.node_mut(d)?;
        parent.touch_dir();
        parent.dir_mut()?.insert(name, slot);
        Ok(())
    }

    /// `name` in directory slot `d`, as [`Backend::lookup`].
    fn lookup_in(&self, fs: &Fs, d: u32, name: &[u8]) -> FsResult<(FileHandle, Attr)> {
        let entries = fs.dir_of(d)?;
        check_name(name)?;
        let slot = match name {
            b"." => d,
            b".." => entries.parent,
            _ => entries.get(name).ok_or(FsError::NoEnt)?,
        };
        self.shared.found(fs, slot)
    }
}

impl Backend for MemBackend {
    fn kind(&self) -> &'static str {
        "mem"
    }

    fn root(&self) -> FileHandle {
        let fs = self.shared.fs.read().unwrap_or_else(|e| e.into_inner());
        self.shared.handle(&fs, ROOT)
    }

    /// Reads keep no access time (module docs).
    fn reads_keep_attributes(&self) -> bool {
        true
    }

    /// Every change sets the ctime from the clock in nanoseconds, and
    /// nothing but the gateway changes the files (docs/BACKENDS.md).
    fn consistent_change(&self) -> bool {
        true
    }

    fn getattr(&self, fh: &FileHandle) -> FsResult<Attr> {
        let fs = self.shared.read_fs()?;
        let slot = self.shared.resolve(&fs, fh)?;
        Ok(fs.node(slot)?.attr(slot))
    }

    fn setattr(&self, fh: &FileHandle, set: &SetAttr) -> FsResult<Attr> {
        let mut fs = self.shared.write_fs()?;
        let slot = self.shared.resolve(&fs, fh)?;
        fs.apply_set(slot, set)?;
        Ok(fs.node(slot)?.attr(slot))
    }

    /// The read, the checks and the change under one hold of the lock: no
    /// other change lands between them (issue 21 item 8).
    fn setattr_checked(
        &self,
        fh: &FileHandle,
        set: &SetAttr,
        check: &mut dyn FnMut(&Attr) -> Result<(), u32>,
    ) -> FsResult<(Attr, Result<Attr, u32>)> {
        let mut fs = self.shared.write_fs()?;
        let slot = self.shared.resolve(&fs, fh)?;
        let pre = fs.node(slot)?.attr(slot);
        if let Err(s) = check(&pre) {
            return Ok((pre, Err(s)));
        }
        let post = fs.apply_set(slot, set).and_then(|()| Ok(fs.node(slot)?.attr(slot)));
        Ok((pre, post.map_err(|e| e.nfsstat3())))
    }

    fn lookup(&self, dir: &FileHandle, name: &[u8]) -> FsResult<(FileHandle, Attr)> {
        let fs = self.shared.read_fs()?;
        let d = self.shared.resolve(&fs, dir)?;
        self.lookup_in(&fs, d, name)
    }

    /// Read, check and change under one hold of the lock (issue 21 item 8).
    fn change_checked(
        &self,
        dir: &FileHandle,
        change: DirChange<'_>,
        check: &mut dyn FnMut(&DirPre<'_>) -> Result<Owner, u32>,
    ) -> FsResult<DirChanged> {
        let mut fs = self.shared.write_fs()?;
        let d = self.shared.resolve(&fs, dir)?;
        let pre = fs.node(d)?.attr(d);
        let (td, pre_to) = match change {
            DirChange::Rename { to_dir, .. } => {
                let td = self.shared.resolve(&fs, to_dir)?;
                (td, Some(fs.node(td)?.attr(td)))
            }
            _ => (d, None),
        };
        let checked = {
            let locked: &Fs = &fs;
            let lookup = |dh: &FileHandle, name: &[u8]| -> FsResult<(FileHandle, Attr)> {
                let slot = self.shared.resolve(locked, dh)?;
                self.lookup_in(locked, slot, name)
            };
            check(&DirPre {
                dir: pre,
                to_dir: pre_to,
                lookup: &lookup,
            })
        };
        let owner = match checked {
            Ok(owner) => owner,
            Err(s) => {
                return Ok(DirChanged {
                    pre,
                    pre_to,
                    post: None,
                    res: Err(s),
                    refused: true,
                })
            }
        };
        let fs = &mut *fs;
        let res = match change {
            DirChange::Create { name, how } => self.create_in(fs, d, name, how, owner).map(Some),
            DirChange::Mkdir { name, set } => self.mkdir_in(fs, d, name, set, owner).map(Some),
            DirChange::Symlink { name, target, set } => self.symlink_in(fs, d, name, target, set, owner).map(Some),
            DirChange::Mknod { name, kind, set } => self.mknod_in(fs, d, name, kind, set, owner).map(Some),
            DirChange::Remove { name } => self.remove_in(fs, d, name).map(|()| None),
            DirChange::Rmdir { name } => self.rmdir_in(fs, d, name).map(|()| None),
            DirChange::Rename { name, to, .. } => self.rename_in(fs, d, name, td, to).map(|()| None),
            DirChange::Link { file, name } => self
                .shared
                .resolve(fs, file)
                .and_then(|slot| self.link_in(fs, slot, d, name))
                .map(|()| None),
        };
        // Still under the lock: the attributes the change left.
        let post = match (fs.node(d), pre_to.map(|_| fs.node(td))) {
            (Ok(n), None) => Some((n.attr(d), None)),
            (Ok(n), Some(Ok(t))) => Some((n.attr(d), Some(t.attr(td)))),
            _ => None,
        };
        Ok(DirChanged {
            pre,
            pre_to,
            post,
            res: res.map_err(|e| e.nfsstat3()),
            refused: false,
        })
    }

    fn readlink(&self, fh: &FileHandle, out: &mut [u8]) -> FsResult<usize> {
        let fs = self.shared.read_fs()?;
        let slot = self.shared.resolve(&fs, fh)?;
        match &fs.node(slot)?.body {
            Body::Symlink(t) => {
                let dst = out.get_mut(..t.len()).ok_or(FsError::TooSmall)?;
                dst.copy_from_slice(t);
                Ok(t.len())
            }
            _ => Err(FsError::Inval),
        }
    }

    fn create(&self, dir: &FileHandle, name: &[u8], how: CreateHow, owner: Owner) -> FsResult<(FileHandle, Attr)> {
        let mut fs = self.shared.write_fs()?;
        let d = self.shared.resolve(&fs, dir)?;
        self.create_in(&mut fs, d, name, how, owner)
    }

    fn mkdir(&self, dir: &FileHandle, name: &[u8], set: &SetAttr, owner: Owner) -> FsResult<(FileHandle, Attr)> {
        let mut fs = self.shared.write_fs()?;
        let d = self.shared.resolve(&fs, dir)?;
        self.mkdir_in(&mut fs, d, name, set, owner)
    }

    fn symlink(
        &self,
        dir: &FileHandle,
        name: &[u8],
        target: &[u8],
        set: &SetAttr,
        owner: Owner,
    ) -> FsResult<(FileHandle, Attr)> {
        let mut fs = self.shared.write_fs()?;
        let d = self.shared.resolve(&fs, dir)?;
        self.symlink_in(&mut fs, d, name, target, set, owner)
    }

    fn mknod(
        &self,
        dir: &FileHandle,
        name: &[u8],
        kind: NodeKind,
        set: &SetAttr,
        owner: Owner,
    ) -> FsResult<(FileHandle, Attr)> {
        let mut fs = self.shared.write_fs()?;
        let d = self.shared.resolve(&fs, dir)?;
        self.mknod_in(&mut fs, d, name, kind, set, owner)
    }

    fn remove(&self, dir: &FileHandle, name: &[u8]) -> FsResult<()> {
        let mut fs = self.shared.write_fs()?;
        let d = self.shared.resolve(&fs, dir)?;
        self.remove_in(&mut fs, d, name)
    }

    fn rmdir(&self, dir: &FileHandle, name: &[u8]) -> FsResult<()> {
        let mut fs = self.shared.write_fs()?;
        let d = self.shared.resolve(&fs, dir)?;
        self.rmdir_in(&mut fs, d, name)
    }

    fn rename(&self, from_dir: &FileHandle, from: &[u8], to_dir: &FileHandle, to: &[u8]) -> FsResult<()> {
        let mut fs = self.shared.write_fs()?;
        let fd = self.shared.resolve(&fs, from_dir)?;
        let td = self.shared.resolve(&fs, to_dir)?;
        self.rename_in(&mut fs, fd, from, td, to)
    }

    fn link(&self, fh: &FileHandle, dir: &FileHandle, name: &[u8]) -> FsResult<()> {
        let mut fs = self.shared.write_fs()?;
        let slot = self.shared.resolve(&fs, fh)?;
        let d = self.shared.resolve(&fs, dir)?;
        self.link_in(&mut fs, slot, d, name)
    }

    fn readdir(&self, dir: &FileHandle, cookie: u64, sink: &mut dyn FnMut(DirEntry<'_>) -> bool) -> FsResult<bool> {
        let fs = self.shared.read_fs()?;
        let d = self.shared.resolve(&fs, dir)?;
        let entries = fs.dir_of(d)?;
        if cookie >= entries.next_pos {
            return Err(FsError::BadCookie);
        }
        let mut give = |name: &[u8], slot: u32, cookie: u64| -> FsResult<bool> {
            let (handle, attr) = self.shared.found(&fs, slot)?;
            Ok(sink(DirEntry {
                fileid: attr.fileid,
                name,
                cookie,
                handle: Some(handle),
                attr: Some(attr),
            }))
        };
        if cookie == 0 && !give(b".", d, 1)? {
            return Ok(false);
        }
        if cookie <= 1 && !give(b"..", entries.parent, 2)? {
            return Ok(false);
        }
        for (&pos, (name, slot)) in entries.by_pos.range(cookie.max(FIRST_POS - 1) + 1..) {
            if !give(name, *slot, pos)? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    fn cookie_verifier(&self, dir: &FileHandle) -> FsResult<u64> {
        let fs = self.shared.read_fs()?;
        let d = self.shared.resolve(&fs, dir)?;
        let version = fs.dir_of(d)?.version;
        Ok((u64::from(self.shared.instance) << 32) ^ version)
    }

    fn fsstat(&self) -> FsResult<FsStat> {
        let fs = self.shared.read_fs()?;
        let free_bytes = fs.free_blocks.len() as u64 * MEM_BLOCK_BYTES;
        let free_files = fs.max_inodes - fs.live_inodes;
        Ok(FsStat {
            total_bytes: fs.total_blocks * MEM_BLOCK_BYTES,
            free_bytes,
            avail_bytes: free_bytes,
            total_files: fs.max_inodes,
            free_files,
            avail_files: free_files,
            max_file_size: MEM_MAX_FILE_BYTES,
            block_size: MEM_BLOCK_BYTES as u32,
        })
    }

    fn commit(&self, fh: &FileHandle) -> FsResult<()> {
        let fs = self.shared.read_fs()?;
        self.shared.resolve(&fs, fh).map(|_| ())
    }

    fn sync_all(&self) -> FsResult<()> {
        Ok(())
    }

    fn open_channel(&self, core: usize) -> FsResult<Box<dyn IoChannel>> {
        Ok(Box::new(MemChannel {
            shared: self.shared.clone(),
            core,
            depth: self.queue_depth as usize,
            done: VecDeque::with_capacity(self.queue_depth as usize),
            write_pre: None,
        }))
    }

    // NFSv4.2 (RFC 7862). The RAM file system keeps no holes it could
    // report: ALLOCATE extends the size (blocks come with the data),
    // DEALLOCATE writes zeros, SEEK finds data up to the end of the file
    // and the hole there, COPY copies through the file locks.

    fn allocate(&self, fh: &FileHandle, offset: u64, len: u64) -> FsResult<()> {
        let a = self.regular(fh)?;
        let end = offset.checked_add(len).ok_or(FsError::FBig)?;
        if end > a.size {
            self.setattr(
                fh,
                &SetAttr {
                    size: Some(end),
                    ..NO_ATTR
                },
            )?;
        }
        Ok(())
    }

    fn deallocate(&self, fh: &FileHandle, offset: u64, len: u64) -> FsResult<()> {
        let a = self.regular(fh)?;
        let end = offset.saturating_add(len).min(a.size);
        let zeros = [0u8; 64 * 1024];
        let mut at = offset;
        while at < end {
            let n = (end - at).min(zeros.len() as u64) as usize;
            EXTENTS.with_borrow_mut(|ext| self.shared.write_at(fh, at, &zeros[..n], ext, &mut None))?;
            at += n as u64;
        }
        Ok(())
    }

    fn seek(&self, fh: &FileHandle, offset: u64, data: bool) -> FsResult<Option<u64>> {
        let a = self.regular(fh)?;
        if offset >= a.size {
            return Err(FsError::Nxio);
        }
        Ok(Some(if data { offset } else { a.size }))
    }

    fn copy(&self, src: &FileHandle, src_off: u64, dst: &FileHandle, dst_off: u64, count: u64) -> FsResult<u64> {
        let a = self.regular(src)?;
        self.regular(dst)?;
        let want = if count == 0 {
            a.size.saturating_sub(src_off)
        } else {
            count
        };
        let mut buf = vec![0u8; 64 * 1024];
        let mut done = 0u64;
        while done < want {
            let n = (want - done).min(buf.len() as u64) as usize;
            let (got, _) =
                EXTENTS.with_borrow_mut(|ext| self.shared.read_at(src, src_off + done, &mut buf[..n], ext))?;
            if got == 0 {
                break;
            }
            let got = got as usize;
            EXTENTS.with_borrow_mut(|ext| self.shared.write_at(dst, dst_off + done, &buf[..got], ext, &mut None))?;
            done += got as u64;
        }
        Ok(done)
    }
}

impl MemBackend {
    /// The attributes of `fh`, a regular file (IsDir, Inval otherwise).
    fn regular(&self, fh: &FileHandle) -> FsResult<Attr> {
        let a = self.getattr(fh)?;
        match a.ftype {
            FileType::Regular => Ok(a),
            FileType::Directory => Err(FsError::IsDir),
            _ => Err(FsError::Inval),
        }
    }
}

/// One core's channel into a [`MemBackend`]: `submit` copies right away
/// under the backend's lock; `poll` hands out the queued completions.
pub struct MemChannel {
    shared: Arc<Shared>,
    core: usize,
    depth: usize,
    done: VecDeque<IoDone>,
    /// The last write's pre-operation attributes ([`IoChannel::take_write_pre`]).
    write_pre: Option<Attr>,
}

impl fmt::Debug for MemChannel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemChannel")
            .field("core", &self.core)
            .field("depth", &self.depth)
            .field("queued", &self.done.len())
            .finish()
    }
}

impl IoChannel for MemChannel {
    /// Runs on the channel's core. Errors of the I/O itself (a stale handle,
    /// `NoSpc`) come back in the completion; only a full queue (`Jukebox`)
    /// fails the submission.
    unsafe fn submit(&mut self, io: IoDesc) -> FsResult<()> {
        if self.done.len() >= self.depth {
            return Err(FsError::Jukebox);
        }
        let done = self.shared.do_io(&io, &mut self.write_pre);
        self.done.push_back(done);
        Ok(())
    }

    fn poll(&mut self, out: &mut [IoDone]) -> usize {
        let n = out.len().min(self.done.len());
        for (slot, done) in out.iter_mut().zip(self.done.drain(..n)) {
            *slot = done;
        }
        n
    }

    fn in_flight(&self) -> usize {
        self.done.len()
    }

    /// Runs on the channel's core. With completions still queued it declines,
    /// so that completions are reaped in submission order.
    unsafe fn io_now(&mut self, io: &IoDesc) -> Option<IoDone> {
        self.done.is_empty().then(|| self.shared.do_io(io, &mut self.write_pre))
    }

    fn take_write_pre(&mut self) -> Option<Attr> {
        self.write_pre.take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kB of `field` (e.g. `AnonHugePages`) of the mapping of this
    /// process that contains `addr`, from `/proc/self/smaps`.
    fn smaps_kb(addr: usize, field: &str) -> Option<u64> {
        let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
        let mut inside = false;
        for line in smaps.lines() {
            let first = line.split_whitespace().next().unwrap_or("");
            if let Some((lo, hi)) = first.split_once('-') {
                if let (Ok(lo), Ok(hi)) = (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16)) {
                    inside = lo <= addr && addr < hi;
                    continue;
                }
            }
            if inside {
                if let Some(rest) = line.strip_prefix(field).and_then(|r| r.strip_prefix(':')) {
                    return rest.trim().trim_end_matches("kB").trim().parse().ok();
                }
            }
        }
        None
    }

    /// The arena starts on a 2 MiB boundary, reads as zeros, takes memory only
    /// where written, and (where the kernel offers transparent huge pages for
    /// advised memory) is backed by huge pages once written: the advice must
    /// come before the first touch, which `alloc_zeroed` did not allow.
    #[test]
    fn arena_is_aligned_lazy_and_huge_page_backed() {
        const LEN: usize = 64 << 20;
        let mut a = Arena::new(LEN).unwrap();
        let p = a.as_ptr() as usize;
        assert_eq!(p % ARENA_ALIGN_BYTES, 0, "2 MiB aligned");
        assert_eq!(a.len(), LEN);
        assert!(a[..4096].iter().all(|&b| b == 0) && a[LEN - 4096..].iter().all(|&b| b == 0));
        // Nothing written yet: no memory taken beyond what the reads faulted.
        let rss_kb = smaps_kb(p, "Rss").expect("the arena is a mapping of its own");
        assert!(rss_kb <= 8 << 10, "untouched arena resident: {rss_kb} kB");
        // Write 8 MiB (four huge pages' worth) in the middle.
        let at = 16 << 20;
        a[at..at + (8 << 20)].fill(0xa5);
        assert_eq!(a[at + 12345], 0xa5);
        assert_eq!(a[at - 1], 0);
        let thp = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").unwrap_or_default();
        if thp.contains("[always]") || thp.contains("[madvise]") {
            let huge_kb = smaps_kb(p, "AnonHugePages").unwrap_or(0);
            assert!(
                huge_kb >= 2 << 10,
                "THP is on ({}) but the written arena has {huge_kb} kB of huge pages",
                thp.trim()
            );
        }
        let e = Arena::new(0).map(|_| ()).unwrap_err();
        assert_eq!(e, FsError::Inval);
    }

    /// `BlockMap` against a `BTreeMap` with one key per block, over random
    /// inserts, lookups, range counts and truncations around leaf edges.
    #[test]
    fn block_map_matches_a_plain_map() {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut rnd = move |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        for round in 0..50 {
            let mut m = BlockMap::default();
            let mut r: BTreeMap<u64, u32> = BTreeMap::new();
            // Mostly near the first leaves' edges, sometimes far (sparse).
            let span = if round % 5 == 0 {
                1 << 40
            } else {
                4 * LEAF_BLOCKS as u64
            };
            for step in 0..400u32 {
                let fbn = rnd(span);
                match rnd(10) {
                    0..=5 => {
                        if let std::collections::btree_map::Entry::Vacant(e) = r.entry(fbn) {
                            e.insert(step);
                            m.insert(fbn, step);
                        }
                    }
                    6 | 7 => {
                        let last = fbn + rnd(3 * LEAF_BLOCKS as u64);
                        assert_eq!(m.count_range(fbn, last), r.range(fbn..=last).count() as u64);
                    }
                    8 if rnd(8) == 0 => {
                        let mut freed = Vec::new();
                        m.truncate(fbn, |b| freed.push(b));
                        let mut want: Vec<u32> = r.split_off(&fbn).into_values().collect();
                        freed.sort_unstable();
                        want.sort_unstable();
                        assert_eq!(freed, want, "truncate at {fbn}");
                    }
                    _ => assert_eq!(m.get(fbn), r.get(&fbn).copied()),
                }
                assert_eq!(m.len(), r.len() as u64);
            }
            for (&k, &v) in &r {
                assert_eq!(m.get(k), Some(v));
            }
            let mut all = Vec::new();
            m.for_each(|b| all.push(b));
            all.sort_unstable();
            let mut want: Vec<u32> = r.into_values().collect();
            want.sort_unstable();
            assert_eq!(all, want);
        }
    }

    #[test]
    fn block_map_truncate_drops_emptied_leaves() {
        let mut m = BlockMap::default();
        for fbn in 0..2 * LEAF_BLOCKS as u64 {
            m.insert(fbn, fbn as u32);
        }
        let mut n = 0;
        m.truncate(LEAF_BLOCKS as u64 + 1, |_| n += 1);
        assert_eq!(
            (n, m.len(), m.leaves.len()),
            (LEAF_BLOCKS - 1, LEAF_BLOCKS as u64 + 1, 2)
        );
        m.truncate(0, |_| n += 1);
        assert_eq!((m.len(), m.leaves.len()), (0, 0));
        assert_eq!(m.get(3), None);
    }
}
