//! Peer regions mapped once per process (issue 24 part 5).
//!
//! A client process passes the same pool files on each of its connections,
//! and a target may run those connections on several cores. Mapping each
//! file once per connection multiplied the target's resident set by the
//! connection count (the pages are shared, but RSS counts every mapping that
//! touched them, and `mlock` charged each). Here a peer region is mapped
//! once per process and shared, reference-counted, by every connection that
//! was handed the same file; the mapping goes when the last of them does.
//!
//! Sharing the mapping shares no access: a connection reaches a peer region
//! only through that peer's windows in its own ring file ([`super::window`]),
//! and a peer can hand us only files it holds itself.
//!
//! The table is keyed by the file's identity `(st_dev, st_ino)`, which the
//! kernel gives each memfd and hugetlbfs file uniquely while it exists.
//! Control path only: a connection's set-up looks up and inserts under a
//! short lock, and maps (the slow part) outside it.

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::{Arc, Mutex, Weak};

use mempool::region::Region;

/// The identity of an open file: `(st_dev, st_ino)`.
type FileId = (u64, u64);

/// Mappings of peer regions in this process, by file identity. Entries
/// whose mapping is gone are pruned when a new one is inserted.
static MAPS: Mutex<Vec<(FileId, Weak<Region>)>> = Mutex::new(Vec::new());

fn file_id(fd: &OwnedFd) -> Result<FileId, String> {
    // SAFETY: all-zero is a valid `stat`; fstat fills it.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a valid descriptor and out-pointer.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(format!("fstat: {}", std::io::Error::last_os_error()));
    }
    #[allow(clippy::unnecessary_cast)] // st_dev / st_ino types differ by target
    Ok((st.st_dev as u64, st.st_ino as u64))
}

fn lookup(id: FileId, len: u64) -> Option<Arc<Region>> {
    let maps = MAPS.lock().unwrap_or_else(|e| e.into_inner());
    maps.iter()
        .filter(|(k, _)| *k == id)
        .filter_map(|(_, w)| w.upgrade())
        .find(|r| r.len() as u64 >= len)
}

/// The mapping of the peer region in `fd` covering at least `len` bytes:
/// the one this process already holds for the same file when it is long
/// enough, otherwise a new one ([`Region::map_from_fd`], which checks `len`
/// against the file), remembered for the next connection. `id` names the
/// region in errors and in a new mapping.
pub fn map(fd: OwnedFd, len: u64, id: u16) -> Result<Arc<Region>, String> {
    let key = file_id(&fd)?;
    if let Some(r) = lookup(key, len) {
        return Ok(r);
    }
    let n = usize::try_from(len).map_err(|_| "region length")?;
    let region = Arc::new(Region::map_from_fd(fd, n, id).map_err(|e| e.to_string())?);
    let mut maps = MAPS.lock().unwrap_or_else(|e| e.into_inner());
    // Another connection may have mapped the same file meanwhile: keep one.
    let raced = maps
        .iter()
        .filter(|(k, _)| *k == key)
        .filter_map(|(_, w)| w.upgrade())
        .find(|r| r.len() >= region.len());
    if let Some(r) = raced {
        return Ok(r);
    }
    maps.retain(|(_, w)| w.strong_count() > 0);
    maps.push((key, Arc::downgrade(&region)));
    Ok(region)
}

/// How many peer mappings this process holds (tests, diagnostics).
pub fn live_count() -> usize {
    let maps = MAPS.lock().unwrap_or_else(|e| e.into_inner());
    maps.iter().filter(|(_, w)| w.strong_count() > 0).count()
}
