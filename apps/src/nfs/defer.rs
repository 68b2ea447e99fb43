//! Deferred READ and WRITE replies: one core's Calls whose backend I/O is
//! in flight.
//!
//! A READ that the engine lets the service defer ([`CallView::defer_token`])
//! on a backend whose I/O completes later ([`IoChannel::completes_later`]:
//! `uring`, `nvme`) is submitted straight into the engine's registered data
//! buffer and its reply deferred, so the core goes on serving other Calls
//! with several backend I/Os in flight. [`Deferred::poll_ready`] reaps the
//! channels and reports the READs whose I/O finished; the engine then
//! resumes each one, and the service runs the READ again with the I/O's
//! result ([`Deferred::resumed`]) instead of submitting it.
//!
//! A WRITE is deferred the same way: its data stays where the engine put it
//! (the Read chunk's buffer, or the receive buffer when inline) while it is
//! written, and its pre-operation attributes are kept for the reply.
//!
//! Synchronous I/O on a channel (COMMIT, a READ without a data buffer, a
//! flush a WRITE needs) first waits for that channel's deferred I/O
//! ([`Deferred::quiesce`]): the synchronous helpers own the channel while
//! they run. Bounded: at most [`MAX_DEFERRED`] READs in flight per core;
//! beyond that READs run synchronously. Everything here runs on the owning
//! core.
//!
//! [`CallView::defer_token`]: dataplane::service::CallView::defer_token

use dataplane::service::{DeferToken, ReplyBuilder};

use crate::backend::{Attr, FsResult, IoChannel, IoDesc, IoDone};

/// Most deferred READs in flight on one core (the engine's request slots
/// bound them anyway; this bounds the table allocated at start-up).
pub const MAX_DEFERRED: usize = 1024;

/// Completions reaped per channel poll.
const REAP_BATCH: usize = 32;

#[derive(Clone, Copy, Debug)]
struct Pending {
    token: DeferToken,
    backend: usize,
    done: Option<IoDone>,
    reported: bool,
    /// The file's attributes before the I/O (a WRITE's `wcc_data`; what a
    /// READ was checked against).
    pre: Attr,
}

/// The I/O result a resumed Call takes instead of submitting its I/O.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Resumed {
    pub token: DeferToken,
    pub done: IoDone,
    /// The attributes from before the I/O ([`Deferred::submit`]).
    pub pre: Attr,
}

/// One core's deferred READs and WRITEs.
#[derive(Debug)]
pub(crate) struct Deferred {
    pending: Vec<Pending>,
    /// The completion of the READ being resumed (set by the service's
    /// `resume`, taken by `read`).
    pub resumed: Option<Resumed>,
    /// Most READs deferred at once so far.
    pub max_in_flight: usize,
}

impl Deferred {
    pub fn new() -> Self {
        Deferred {
            pending: Vec::with_capacity(MAX_DEFERRED),
            resumed: None,
            max_in_flight: 0,
        }
    }

    /// Can one more READ be deferred?
    pub fn has_room(&self) -> bool {
        self.pending.len() < MAX_DEFERRED
    }

    /// Submit `io` on `backend`'s channel under `token`, record it (`pre`
    /// comes back with its result) and defer `reply`. The caller checked
    /// [`Deferred::has_room`].
    ///
    /// # Safety
    /// As [`IoChannel::submit`]: `io.buf` must be this Call's buffer in the
    /// engine, which keeps it, untouched, while the Call is deferred, until
    /// [`Deferred::poll_ready`] has reported the completion
    /// (`dataplane::service::ReplyBuilder::defer`).
    pub unsafe fn submit(
        &mut self,
        ch: &mut dyn IoChannel,
        backend: usize,
        token: DeferToken,
        io: IoDesc,
        pre: Attr,
        reply: &mut ReplyBuilder<'_>,
    ) -> FsResult<()> {
        // SAFETY: the caller's contract is the channel's.
        unsafe { ch.submit(IoDesc { tag: token.0, ..io })? };
        debug_assert!(self.has_room());
        self.pending.push(Pending {
            token,
            backend,
            done: None,
            reported: false,
            pre,
        });
        self.max_in_flight = self.max_in_flight.max(self.pending.len());
        reply.defer();
        Ok(())
    }

    fn in_flight_on(&self, backend: usize) -> bool {
        self.pending.iter().any(|p| p.backend == backend && p.done.is_none())
    }

    /// Reap `backend`'s channel into the pending entries. A completion no
    /// entry claims cannot happen (synchronous I/O waits for its own); it is
    /// dropped.
    fn reap(&mut self, backend: usize, ch: &mut dyn IoChannel) {
        let mut out = [IoDone::default(); REAP_BATCH];
        let n = ch.poll(&mut out);
        for d in &out[..n] {
            if let Some(p) = self
                .pending
                .iter_mut()
                .find(|p| p.backend == backend && p.done.is_none() && p.token.0 == d.tag)
            {
                p.done = Some(*d);
            }
        }
    }

    /// Before synchronous I/O on `backend`: wait (polling) until none of
    /// this core's deferred READs is in flight on its channel.
    pub fn quiesce(&mut self, backend: usize, ch: &mut dyn IoChannel) {
        while self.in_flight_on(backend) {
            self.reap(backend, ch);
            std::hint::spin_loop();
        }
    }

    /// Reap every channel with deferred READs in flight, and write the
    /// tokens of finished, not yet reported READs to `ready`. Returns how
    /// many.
    pub fn poll_ready(&mut self, channels: &mut [Box<dyn IoChannel>], ready: &mut [DeferToken]) -> usize {
        if self.pending.is_empty() {
            return 0;
        }
        for (b, ch) in channels.iter_mut().enumerate() {
            if self.in_flight_on(b) {
                self.reap(b, &mut **ch);
            }
        }
        let mut n = 0;
        for p in self.pending.iter_mut().filter(|p| p.done.is_some() && !p.reported) {
            if n == ready.len() {
                break;
            }
            p.reported = true;
            ready[n] = p.token;
            n += 1;
        }
        n
    }

    /// Take the result of a reported I/O (the engine resumes or cancels its
    /// Call).
    pub fn take(&mut self, token: DeferToken) -> Option<Resumed> {
        let i = self.pending.iter().position(|p| p.token == token && p.reported)?;
        let p = self.pending.swap_remove(i);
        Some(Resumed {
            token,
            done: p.done?,
            pre: p.pre,
        })
    }

    /// The result for the Call with `token`, if it is being resumed.
    pub fn resumed_for(&mut self, token: Option<DeferToken>) -> Option<Resumed> {
        match (token, self.resumed) {
            (Some(t), Some(r)) if r.token == t => self.resumed.take(),
            _ => None,
        }
    }
}
