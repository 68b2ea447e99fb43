//! The blocking half of [`crate::IdlePolicy::SpinThenWait`]: one `epoll`
//! instance per core, with the core's message-ring doorbell (an eventfd)
//! always registered and whatever file descriptors its pollers add
//! ([`crate::CoreCtx::watch_fd`]: completion channels, RDMA-CM event
//! channels, shm doorbells, sockets).
//!
//! The core only needs to know that *something* is ready, and its pollers
//! find what. So a wait is one `epoll_pwait2` (nanosecond timeout; a
//! `ppoll` on the epoll descriptor on kernels without it); every source is
//! level-triggered and each owner clears its own before arming again. The
//! one thing the core takes from the events is whether its own doorbell was
//! among them ([`WaitOutcome`]): only then does it clear the doorbell, so a
//! wake-up by a completion channel costs no `read` of an empty eventfd on
//! the way to the work (issue 24 item 1). A doorbell rung after the wait
//! returned and left uncleared stays readable: the next wait returns at
//! once and reports it, so it costs a spurious wake-up, never a lost one.
//!
//! # The doorbell handshake (no lost wake-up, no system call while busy)
//!
//! The sleeper stores `sleeping = true` (SeqCst) and *then* looks for work
//! once more (its next loop iteration dequeues the ring and polls every
//! poller); a sender pushes its work and *then* loads `sleeping` (after a
//! SeqCst fence), ringing only when it is set. In the single total order of
//! SeqCst operations either the sender's load comes after the sleeper's
//! store (the sender rings, so the wait returns at once) or before it (then
//! the sender's push precedes the sleeper's re-check, which finds the work).
//! While the receiver is busy `sleeping` stays false and senders make no
//! system call.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

/// An eventfd used as a doorbell: any thread rings it, its owner clears it.
#[derive(Debug)]
pub struct Doorbell {
    fd: OwnedFd,
}

impl Doorbell {
    /// A fresh, non-blocking, close-on-exec eventfd.
    pub fn new() -> io::Result<Doorbell> {
        // SAFETY: plain system call; the result is checked.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a new descriptor we own.
        Ok(Doorbell {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    /// Makes the doorbell readable (wakes its owner's wait). Never blocks:
    /// a counter at its maximum is already readable.
    pub fn ring(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to our descriptor.
        let _ = unsafe { libc::write(self.fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }

    /// Clears the doorbell (reads its counter). Never blocks.
    pub fn clear(&self) {
        let mut v: u64 = 0;
        // SAFETY: reads 8 bytes into a live u64 from our descriptor.
        let _ = unsafe { libc::read(self.fd.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
    }

    /// The descriptor, for registration with an `epoll`.
    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// One core's `epoll` instance.
#[derive(Debug)]
pub(crate) struct Waiter {
    epfd: OwnedFd,
    watched: Vec<RawFd>,
}

impl Waiter {
    pub(crate) fn new() -> io::Result<Waiter> {
        // SAFETY: plain system call; the result is checked.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Waiter {
            // SAFETY: `fd` is a new descriptor we own.
            epfd: unsafe { OwnedFd::from_raw_fd(fd) },
            watched: Vec::new(),
        })
    }

    /// Registers `fd` (level-triggered, readable). Registering it twice is
    /// a no-op.
    pub(crate) fn watch(&mut self, fd: RawFd) -> io::Result<()> {
        if self.watched.contains(&fd) {
            return Ok(());
        }
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: fd as u64,
        };
        // SAFETY: `ev` is a live epoll_event; the kernel checks `fd`.
        if unsafe { libc::epoll_ctl(self.epfd.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) } < 0 {
            return Err(io::Error::last_os_error());
        }
        self.watched.push(fd);
        Ok(())
    }

    /// Removes `fd` (call before closing it). Unknown descriptors are
    /// ignored.
    pub(crate) fn unwatch(&mut self, fd: RawFd) {
        if let Some(i) = self.watched.iter().position(|&f| f == fd) {
            self.watched.swap_remove(i);
            // SAFETY: plain system call; a closed `fd` only returns an error.
            unsafe { libc::epoll_ctl(self.epfd.as_raw_fd(), libc::EPOLL_CTL_DEL, fd, std::ptr::null_mut()) };
        }
    }

    /// Blocks until a registered source is ready or `timeout` passed, and
    /// says whether `bell` (a watched descriptor) was among the ready ones.
    ///
    /// One `epoll_pwait2` on the core's epoll (nanosecond timeout, no
    /// intermediate `poll` layer); kernels before 5.11 lack it, and there the
    /// wait is a `ppoll` on the epoll descriptor instead, which cannot tell
    /// which source is ready (reported as the doorbell, so it is cleared).
    /// `RPCRDMA_WAIT=ppoll` forces the `ppoll` form (issue 24 item 1, for
    /// comparison runs).
    pub(crate) fn wait(&self, timeout: Duration, bell: Option<RawFd>) -> WaitOutcome {
        let ts = libc::timespec {
            tv_sec: timeout.as_secs().min(i64::MAX as u64) as libc::time_t,
            tv_nsec: libc::c_long::from(timeout.subsec_nanos() as i32),
        };
        if use_epoll_pwait2() {
            let mut ev = [libc::epoll_event { events: 0, u64: 0 }; WAIT_EVENTS];
            // SAFETY: `ev` is a live array of 8 epoll_events, `ts` a live
            // timespec; no signal mask (null, size 0 is ignored).
            let rc = unsafe {
                libc::syscall(
                    libc::SYS_epoll_pwait2,
                    self.epfd.as_raw_fd(),
                    ev.as_mut_ptr(),
                    ev.len() as libc::c_int,
                    &ts as *const libc::timespec,
                    std::ptr::null::<libc::sigset_t>(),
                    0usize,
                )
            };
            if rc >= 0 {
                let n = (rc as usize).min(WAIT_EVENTS);
                let bell_ready = bell.is_some_and(|b| ev[..n].iter().any(|e| e.u64 == b as u64));
                return WaitOutcome {
                    bell: bell_ready,
                    others: n - usize::from(bell_ready),
                };
            }
            if io::Error::last_os_error().raw_os_error() != Some(libc::ENOSYS) {
                // EINTR: nothing known to be ready; the caller polls anyway.
                return WaitOutcome::default();
            }
            EPOLL_PWAIT2.store(NO, Ordering::Relaxed);
        }
        let mut pfd = libc::pollfd {
            fd: self.epfd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one live pollfd and a live timespec; no signal mask.
        let rc = unsafe { libc::ppoll(&mut pfd, 1, &ts, std::ptr::null()) };
        WaitOutcome {
            bell: rc > 0 && bell.is_some(),
            others: usize::from(rc > 0),
        }
    }
}

/// Events one wait takes from the kernel (more ready sources stay ready for
/// the next wait).
const WAIT_EVENTS: usize = 8;

/// What ended a [`Waiter::wait`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct WaitOutcome {
    /// The core's doorbell was ready (it must be cleared).
    pub(crate) bell: bool,
    /// Other watched descriptors reported ready (0 with `bell` false: the
    /// timeout, or a signal).
    pub(crate) others: usize,
}

const UNKNOWN: u8 = 0;
const YES: u8 = 1;
const NO: u8 = 2;
/// Whether waits use `epoll_pwait2` (decided at the first wait, cleared when
/// the kernel answers ENOSYS).
static EPOLL_PWAIT2: AtomicU8 = AtomicU8::new(UNKNOWN);

fn use_epoll_pwait2() -> bool {
    match EPOLL_PWAIT2.load(Ordering::Relaxed) {
        YES => true,
        NO => false,
        _ => {
            let ppoll = std::env::var_os("RPCRDMA_WAIT").is_some_and(|v| v == "ppoll");
            EPOLL_PWAIT2.store(if ppoll { NO } else { YES }, Ordering::Relaxed);
            !ppoll
        }
    }
}
