//! Small shared files (memfd) that hold a connection's rings: created by one
//! process, sealed against resizing, and mapped by the other after it receives
//! the descriptor.
//!
//! These are not [`mempool::region::Region`]s: a region is at least one hugepage and is
//! meant for buffers; a connection's rings need a few pages of normal memory.
//!
//! Control path only (every function here makes system calls).

use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;

/// Page size the layout is rounded to.
pub const PAGE: usize = 4096;

/// A `MAP_SHARED` read-write mapping of a whole memfd, unmapped on drop.
pub struct SharedFile {
    ptr: NonNull<u8>,
    len: usize,
    fd: OwnedFd,
}

// SAFETY: the mapping is process-wide and not tied to a thread; all accesses
// to its bytes go through atomics (see `ring`).
unsafe impl Send for SharedFile {}
// SAFETY: `&SharedFile` hands out the base pointer and length only; the
// memory behind it is accessed with atomic operations.
unsafe impl Sync for SharedFile {}

impl std::fmt::Debug for SharedFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedFile")
            .field("ptr", &self.ptr)
            .field("len", &self.len)
            .field("fd", &self.fd.as_raw_fd())
            .finish()
    }
}

fn round_up_page(len: usize) -> Option<usize> {
    if len == 0 {
        return None;
    }
    len.checked_add(PAGE - 1).map(|l| l & !(PAGE - 1))
}

fn mmap_rw(fd: &OwnedFd, len: usize) -> io::Result<NonNull<u8>> {
    // SAFETY: a new shared mapping at a kernel-chosen address of a descriptor
    // we own; it aliases no Rust object.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd.as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    NonNull::new(p.cast::<u8>()).ok_or_else(|| io::Error::other("mmap returned NULL"))
}

impl SharedFile {
    /// Create a zero-filled memfd of at least `len` bytes (rounded up to a
    /// page), seal it against shrinking and growing, and map it.
    pub fn create(name: &str, len: usize) -> io::Result<SharedFile> {
        let len = round_up_page(len).ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "bad length"))?;
        let cname = CString::new(format!("rpcrdma-shm-{name}")).map_err(io::Error::other)?;
        // SAFETY: `cname` is a valid NUL-terminated string.
        let raw = unsafe { libc::memfd_create(cname.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a fresh descriptor nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let off = libc::off_t::try_from(len).map_err(io::Error::other)?;
        // SAFETY: valid descriptor; no memory passed.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), off) } != 0 {
            return Err(io::Error::last_os_error());
        }
        let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
        // SAFETY: fcntl on a valid descriptor; no memory passed.
        if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, seals) } != 0 {
            return Err(io::Error::last_os_error());
        }
        let ptr = mmap_rw(&fd, len)?;
        Ok(SharedFile { ptr, len, fd })
    }

    /// Map a file received from the peer. Its first `len` bytes are mapped;
    /// the file must be at least that long and sealed against shrinking (so
    /// the peer cannot truncate it under us and turn our accesses into
    /// `SIGBUS`). Both facts come from the kernel, not from the peer.
    pub fn open_peer(fd: OwnedFd, len: usize) -> io::Result<SharedFile> {
        let len = round_up_page(len).ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "bad length"))?;
        // SAFETY: all-zero is a valid `stat`; fstat fills it.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: valid descriptor and out-pointer.
        if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
            return Err(io::Error::last_os_error());
        }
        if usize::try_from(st.st_size).map_or(true, |s| s < len) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "peer ring file is too short",
            ));
        }
        // SAFETY: fcntl on a valid descriptor; no memory passed.
        let seals = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) };
        if seals < 0 || seals & libc::F_SEAL_SHRINK == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "peer ring file is not sealed against shrinking",
            ));
        }
        let ptr = mmap_rw(&fd, len)?;
        Ok(SharedFile { ptr, len, fd })
    }

    /// Base address of the mapping (page aligned).
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Mapped length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: mappings are at least one page.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The descriptor, to pass to the peer.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl Drop for SharedFile {
    fn drop(&mut self) {
        // SAFETY: we own the mapping [ptr, ptr + len); everything that points
        // into it holds an `Arc<SharedFile>`, so nothing uses it after this.
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dup(fd: BorrowedFd<'_>) -> OwnedFd {
        fd.try_clone_to_owned().expect("dup")
    }

    #[test]
    fn peer_sees_the_same_bytes() {
        let a = SharedFile::create("t", 100).unwrap();
        assert_eq!(a.len(), PAGE);
        let b = SharedFile::open_peer(dup(a.fd()), 100).unwrap();
        // SAFETY: both pointers are inside live mappings of one page.
        unsafe {
            a.as_ptr().add(10).write_volatile(0xab);
            assert_eq!(b.as_ptr().add(10).read_volatile(), 0xab);
        }
    }

    #[test]
    fn short_or_unsealed_peer_files_are_refused() {
        let a = SharedFile::create("t", PAGE).unwrap();
        assert!(SharedFile::open_peer(dup(a.fd()), 2 * PAGE).is_err());
        assert!(SharedFile::open_peer(dup(a.fd()), 0).is_err());
        // An unsealed memfd.
        let name = CString::new("unsealed").unwrap();
        // SAFETY: valid NUL-terminated name.
        let raw = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
        assert!(raw >= 0);
        // SAFETY: fresh descriptor.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: valid descriptor.
        assert_eq!(unsafe { libc::ftruncate(fd.as_raw_fd(), PAGE as libc::off_t) }, 0);
        assert!(SharedFile::open_peer(fd, PAGE).is_err());
    }
}
