//! The shm doorbell (issue 24 item 1): how a core that blocks in its epoll
//! learns that a peer pushed a delivery into one of its rings, with no
//! system call while both sides are busy.
//!
//! - Each fabric owns one eventfd (the *bell*); it is passed to every peer
//!   as the last `SCM_RIGHTS` descriptor of REQ / ACCEPT (an older peer
//!   that sends none simply never rings: the fabric then cannot arm).
//! - Each connection's ring file has a *sleeping* word in its header
//!   (block 0, next to `closed`), written by the file's owner and read by
//!   the peer.
//! - Receiver ([`ShmFabric::arm_wakeup`]): clear the bell, store
//!   `sleeping = 1` (SeqCst) in every connection's file, then the caller
//!   polls once more before blocking; [`ShmFabric::disarm_wakeup`] stores 0.
//! - Sender (after pushing deliveries, and when closing): a SeqCst fence,
//!   then a load of the peer's `sleeping`; only if set, swap it to 0 and
//!   write the peer's bell. Either the sender's load follows the receiver's
//!   store in the SeqCst order (it rings) or the push precedes the
//!   receiver's re-check (which finds the delivery). The swap makes one
//!   ring per sleep, however many Sends follow.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{fence, AtomicU32, Ordering};

use super::mapping::SharedFile;
use super::ShmFabric;

/// Offset of the sleeping word in a ring file's header: in block 0 with
/// `closed` (offset 0), which the peer polls as well.
const OFF_SLEEPING: usize = 8;

/// The ring file header (`conn::FILE_HEADER`) is at least this long.
const HEADER_MIN: usize = 2 * super::ring::INDEX_BLOCK;

fn sleeping_word(file: &SharedFile) -> &AtomicU32 {
    debug_assert!(file.len() >= HEADER_MIN);
    // SAFETY: every ring file (ours and, after `Peer::attach` checked its
    // layout, the peer's) is a page-aligned mapping at least HEADER_MIN
    // long; OFF_SLEEPING is 4-aligned and inside it; AtomicU32 is valid for
    // any bit pattern; the reference borrows `file`, keeping it mapped.
    unsafe { &*file.as_ptr().add(OFF_SLEEPING).cast::<AtomicU32>() }
}

/// An eventfd: ours (we wait on it) or a peer's (we ring it).
#[derive(Debug)]
pub struct Bell {
    fd: OwnedFd,
}

impl Bell {
    /// A fresh, non-blocking, close-on-exec eventfd.
    pub fn new() -> std::io::Result<Bell> {
        // SAFETY: plain system call; the result is checked.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `fd` is a new descriptor we own.
        Ok(Bell {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    /// A peer's bell, received over the CM socket. Control path.
    pub fn from_peer(fd: OwnedFd) -> Bell {
        Bell { fd }
    }

    pub fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.fd.as_fd()
    }

    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Makes the bell readable. Never blocks (a peer's eventfd that is not
    /// one, or is full, only fails the write).
    pub fn ring(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to a descriptor we own.
        let _ = unsafe { libc::write(self.fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }

    /// Clears our bell. Never blocks.
    pub fn clear(&self) {
        let mut v: u64 = 0;
        // SAFETY: reads 8 bytes into a live u64 from a descriptor we own.
        let _ = unsafe { libc::read(self.fd.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
    }
}

/// Sender side: after publishing deliveries into the peer whose ring file is
/// `peer_file` (or marking ours closed), wake the peer if it said it sleeps.
#[inline]
pub fn ring_if_sleeping(peer_file: &SharedFile, bell: Option<&Bell>) {
    let Some(bell) = bell else { return };
    // Pairs with the receiver's SeqCst store of `sleeping` followed by its
    // re-check (module docs).
    fence(Ordering::SeqCst);
    let w = sleeping_word(peer_file);
    if w.load(Ordering::Relaxed) != 0 && w.swap(0, Ordering::Relaxed) != 0 {
        bell.ring();
    }
}

impl ShmFabric {
    /// Our bell and our listening sockets: readable when armed and a peer
    /// pushes a delivery, closes, or connects.
    pub(super) fn do_wake_fds(&self) -> Vec<RawFd> {
        let mut v = Vec::with_capacity(1 + self.listeners.len());
        if let Some(b) = &self.bell {
            v.push(b.raw_fd());
        }
        v.extend(self.listeners.iter().map(|l| l.fd.as_raw_fd()));
        v
    }

    /// Tells every peer that we sleep. `false` when something cannot ring
    /// us: connection set-up in progress (its socket messages are not
    /// watched), Sends waiting for the peer's receives, a connection in
    /// error not yet reaped, a peer that sent no bell, or no bell at all.
    pub(super) fn do_arm_wakeup(&mut self) -> bool {
        let Some(bell) = &self.bell else { return false };
        bell.clear();
        if !self.incoming.is_empty() || self.requests.len() != 0 || !self.events.is_empty() {
            return false;
        }
        let mut ok = true;
        for ci in self.conns.used() {
            let Some(c) = self.conns.get(ci) else { continue };
            let rings = c.state == super::conn::State::Established
                && c.sq_len() == 0
                && c.peer.as_ref().is_some_and(|p| p.bell.is_some());
            if !rings {
                ok = false;
                continue;
            }
            // SeqCst: ordered before the caller's re-check of the rings.
            sleeping_word(&c.file).store(1, Ordering::SeqCst);
        }
        fence(Ordering::SeqCst);
        ok
    }

    /// Undoes [`ShmFabric::do_arm_wakeup`]: peers stop ringing.
    pub(super) fn do_disarm_wakeup(&mut self) {
        for ci in self.conns.used() {
            if let Some(c) = self.conns.get(ci) {
                sleeping_word(&c.file).store(0, Ordering::Relaxed);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::sock::{self, UnixAddr};
    use super::super::{ShmConfig, ShmFabric};
    use crate::fabric::Fabric;
    use std::os::fd::RawFd;

    /// Whether any of `fds` is readable now (what the core's epoll would
    /// report).
    fn any_readable(fds: &[RawFd]) -> bool {
        let mut p: Vec<libc::pollfd> = fds
            .iter()
            .map(|&fd| libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        // SAFETY: `p` is a live array of `p.len()` pollfds; timeout 0.
        let n = unsafe { libc::poll(p.as_mut_ptr(), p.len() as libc::nfds_t, 0) };
        n > 0
    }

    /// The re-check after arming (one `poll_cm`) may accept a connection
    /// whose REQ has not arrived yet; that empties the listener, so a wait
    /// would miss the REQ unless something else is readable (a lost
    /// wake-up in connection set-up: a client's connect timed out while
    /// the target's core slept).
    #[test]
    fn spin_then_wait_accept_during_recheck_keeps_the_core_awake() {
        let mut f = ShmFabric::new(ShmConfig {
            cm_sweep_period: std::time::Duration::ZERO,
            ..ShmConfig::default()
        })
        .unwrap();
        let addr = format!("@rpcrdma-shm-unit-accept-wake-{}", std::process::id());
        f.listen(&addr).unwrap();
        let fds = f.wake_fds();
        assert!(f.arm_wakeup(), "nothing pending: the fabric arms");
        assert!(!any_readable(&fds), "nothing to wake for yet");
        // A peer connects; its REQ is still to come.
        let peer = sock::connect(&UnixAddr::parse(&addr).unwrap()).unwrap();
        assert!(any_readable(&fds), "the listener wakes the core");
        // The core's re-check: the sweep accepts the socket, no event yet.
        assert_eq!(f.poll_cm(), None);
        assert_eq!(f.incoming.len(), 1, "accepted, waiting for its REQ");
        assert!(
            any_readable(&fds),
            "after the accept something must still wake the core, or the REQ waits a whole wait"
        );
        f.disarm_wakeup();
        assert!(!f.arm_wakeup(), "no arming while a REQ is awaited");
        drop(peer);
    }
}
