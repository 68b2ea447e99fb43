//! Durable metadata and cached attributes for the `uring` backend.
//!
//! [`sync_meta`] is what a `sync` export does after a namespace change or a
//! SETATTR (RFC 1813 section 1.6, as the Linux server's `commit_metadata`):
//! an `fsync` of the directory whose entries changed, or of the inode whose
//! attributes changed. It runs on the NFS layer's helper threads (the backend
//! says [`Backend::metadata_blocks`](crate::backend::Backend::metadata_blocks)),
//! so a plain system call is right here. Only directories and regular files
//! are opened to be flushed (opening a device or fifo could have side
//! effects; a symbolic link cannot be opened): their metadata is made durable
//! with the directory that names them, which the caller flushes too.
//!
//! [`cached_attr`] answers GETATTR and a READ's or WRITE's attributes from a
//! channel's open descriptor: one `fstat` of an inode the kernel holds in
//! memory, no `open_by_handle_at`.

use std::os::fd::AsRawFd;

use super::{attr_of, fstat, ftype_of, Shared, UringChannel};
use crate::backend::{Attr, FileHandle, FileType, FsResult};

/// `fsync` what `fh` names when it is a directory or a regular file.
pub(super) fn sync_meta(shared: &Shared, fh: &FileHandle) -> FsResult<()> {
    let (_, st) = shared.open_path(fh)?;
    let flags = match ftype_of(st.st_mode) {
        FileType::Directory => libc::O_RDONLY | libc::O_DIRECTORY,
        FileType::Regular => libc::O_RDONLY | libc::O_NONBLOCK,
        _ => return Ok(()),
    };
    let (fd, _) = shared.open_fh(fh, flags)?;
    // SAFETY: plain system call on a descriptor we own.
    super::cvt(unsafe { libc::fsync(fd.as_raw_fd()) }).map(drop)
}

/// The attributes of `fh` from `ch`'s cached descriptor, if it has one that
/// is not stale. A file whose last link is gone is left to the backend
/// (which answers `Stale`).
pub(super) fn cached_attr(ch: &mut UringChannel, fh: &FileHandle) -> Option<FsResult<Attr>> {
    let e = ch.cache.get(fh)?;
    if e.stale {
        return None;
    }
    match fstat(e.fd.as_raw_fd()) {
        Ok(st) if st.st_nlink > 0 => Some(Ok(attr_of(&st))),
        _ => None,
    }
}
