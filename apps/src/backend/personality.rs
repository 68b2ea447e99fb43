//! io_uring personalities per caller (issue 21 item 6): the credentials an
//! io_uring request runs with, so a `uring` channel's writes are checked
//! and charged as the caller's (a non-owner's write clears S_ISUID/S_ISGID,
//! quota limits hold) rather than as the gateway's root.
//!
//! A personality is registered (`IORING_REGISTER_PERSONALITY`) by the
//! calling thread while it holds the caller's file system identity
//! ([`creds::with_creds`]): the ring records that thread's credentials of
//! the moment. Each SQE then names it in `personality`. One ring keeps a
//! bounded set, least recently used first out; one is unregistered only when
//! no request still in the channel uses it (a short transfer is resubmitted
//! with the same personality).

use io_uring::IoUring;

use super::creds::{self, Creds};
use super::{FsError, FsResult};

/// Personalities one ring keeps registered.
pub const PERSONALITIES_MAX: usize = 64;

#[derive(Debug)]
struct Entry {
    creds: Creds,
    id: u16,
    /// Requests in the channel that use it.
    users: u32,
    last_use: u64,
}

/// The personalities of one ring.
#[derive(Debug, Default)]
pub struct Personalities {
    entries: Vec<Entry>,
    tick: u64,
    /// Registered since the channel opened (cache misses).
    pub registered: u64,
}

impl Personalities {
    /// The personality that runs a request as `c`, registered on `ring` if
    /// it is not yet; `None` for work that runs as the process (root callers,
    /// an unprivileged process). Counts a user: give it back with
    /// [`Personalities::release`]. `Jukebox` when the set is full of
    /// personalities in use (the Call waits for room).
    ///
    /// `flush` hands queued SQEs to the kernel before one is unregistered:
    /// a personality is looked up when the SQE is submitted.
    pub fn acquire(&mut self, ring: &IoUring, c: &Creds, flush: impl FnOnce()) -> FsResult<Option<u16>> {
        if c.is_root() || !is_privileged() {
            return Ok(None);
        }
        self.tick += 1;
        if let Some(e) = self.entries.iter_mut().find(|e| e.creds == *c) {
            e.users += 1;
            e.last_use = self.tick;
            return Ok(Some(e.id));
        }
        if self.entries.len() >= PERSONALITIES_MAX {
            let victim = self
                .entries
                .iter()
                .enumerate()
                .filter(|(_, e)| e.users == 0)
                .min_by_key(|(_, e)| e.last_use)
                .map(|(i, _)| i)
                .ok_or(FsError::Jukebox)?;
            flush();
            let e = self.entries.swap_remove(victim);
            // Requests already submitted hold their own reference to the
            // credentials; nothing queued names it (flushed above).
            let _ = ring.submitter().unregister_personality(e.id);
        }
        let id = creds::with_creds(c, || ring.submitter().register_personality())
            .map_err(|_| FsError::Acces)?
            .map_err(|e| FsError::from_io(&e))?;
        self.registered += 1;
        self.entries.push(Entry {
            creds: *c,
            id,
            users: 1,
            last_use: self.tick,
        });
        Ok(Some(id))
    }

    /// A request that used personality `id` left the channel.
    pub fn release(&mut self, id: u16) {
        if let Some(e) = self.entries.iter_mut().find(|e| e.id == id) {
            debug_assert!(e.users > 0, "personality {id} released more often than acquired");
            e.users -= 1;
        }
    }

    /// Registered now.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

fn is_privileged() -> bool {
    // SAFETY: no arguments, no side effects.
    unsafe { libc::geteuid() == 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_and_reused() {
        if !is_privileged() {
            return;
        }
        let ring = IoUring::new(8).unwrap();
        let mut p = Personalities::default();
        let a = Creds::new(1000, 1000, &[]);
        let id = p.acquire(&ring, &a, || {}).unwrap().unwrap();
        assert_eq!(p.acquire(&ring, &a, || {}).unwrap(), Some(id));
        assert_eq!(p.registered, 1);
        assert_eq!(p.acquire(&ring, &Creds::new(0, 0, &[]), || {}).unwrap(), None);
        // Full of personalities in use: the request waits.
        for u in 1..PERSONALITIES_MAX as u32 {
            p.acquire(&ring, &Creds::new(2000 + u, 1, &[]), || {}).unwrap();
        }
        assert_eq!(p.len(), PERSONALITIES_MAX);
        assert_eq!(p.acquire(&ring, &Creds::new(9, 9, &[]), || {}), Err(FsError::Jukebox));
        // One released: the least recently used idle one goes.
        p.release(id);
        p.release(id);
        let mut flushed = false;
        p.acquire(&ring, &Creds::new(9, 9, &[]), || flushed = true).unwrap();
        assert!(flushed);
        assert_eq!(p.len(), PERSONALITIES_MAX);
        assert!(!p.entries.iter().any(|e| e.creds == a));
    }
}
