//! Deferred replies: one core's Calls whose backend work is in flight.
//!
//! A READ that the engine lets the service defer ([`CallView::defer_token`])
//! on a backend whose I/O completes later ([`IoChannel::completes_later`]:
//! `uring`, `nvme`) is submitted straight into the engine's registered data
//! buffer and its reply deferred, so the core goes on serving other Calls
//! with several backend I/Os in flight. [`Deferred::poll_ready`] reaps the
//! channels and reports the Calls whose I/O finished; the engine then
//! resumes each one, and the service runs the Call again with the I/O's
//! result ([`Deferred::resumed`]) instead of submitting it.
//!
//! A WRITE is deferred the same way: its data stays where the engine put it
//! (the Read chunk's buffer, or the receive buffer when inline) while it is
//! written, and its pre-operation attributes are kept for the reply. A
//! COMMIT, and the flush a FILE_SYNC or DATA_SYNC WRITE needs when the
//! write alone was not stable, are deferred flushes (`IORING_OP_FSYNC` on
//! `uring`): the core never waits for an fsync. A WRITE whose flush follows
//! it is deferred twice under the same token; the second resume finds the
//! write's completion in [`Resumed::prev`].
//!
//! Metadata procedures offloaded to the helper pool ([`super::offload`])
//! are deferred too; their completions come from the pool, not from a
//! channel, and are merged in [`Deferred::poll_ready`]. So are NFSv3 Calls
//! held for a delegation recall ([`super::delegwait`]), which no I/O
//! completes.
//!
//! Synchronous I/O on a channel (a Call that may not be deferred: the TCP
//! path, or a full table) waits for its own completion only
//! ([`Deferred::io_sync`]): completions of deferred I/O it reaps meanwhile
//! are kept for their Calls, so it never waits for another Call's I/O.
//! Bounded: at most [`MAX_DEFERRED`] Calls deferred per core; beyond that
//! they run synchronously. Everything here runs on the owning core.
//!
//! [`CallView::defer_token`]: dataplane::service::CallView::defer_token

use dataplane::service::{DeferToken, ReplyBuilder};

use crate::backend::{Attr, FsError, FsResult, IoChannel, IoDesc, IoDone};

/// Most Calls deferred at once on one core (the engine's request slots
/// bound them anyway; this bounds the table allocated at start-up).
pub const MAX_DEFERRED: usize = 1024;

/// Completions reaped per channel poll.
const REAP_BATCH: usize = 32;

/// The tag of synchronous I/O ([`Deferred::io_sync`]). Defer tokens are a
/// request index (low 32 bits, a slab index far below `u32::MAX`) and a
/// generation, so none equals it.
const SYNC_TAG: u64 = u64::MAX;

/// Which channel, if any, completes a pending entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Source {
    /// The channel of backend `n`.
    Channel(usize),
    /// The helper pool ([`super::offload`]).
    Pool,
    /// No I/O: the Call waits for a delegation recall
    /// ([`super::delegwait`]) and runs again from the start.
    Wait,
}

#[derive(Clone, Copy, Debug)]
struct Pending {
    token: DeferToken,
    source: Source,
    done: Option<IoDone>,
    reported: bool,
    /// The file's attributes before the I/O (a WRITE's `wcc_data`; what a
    /// READ was checked against).
    pre: Attr,
    /// The completion of this Call's earlier I/O (a WRITE's, when a flush
    /// follows it).
    prev: Option<IoDone>,
}

/// The I/O result a resumed Call takes instead of submitting its I/O.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Resumed {
    pub token: DeferToken,
    pub done: IoDone,
    /// The attributes from before the I/O ([`Deferred::submit`]).
    pub pre: Attr,
    /// The completion of the Call's earlier deferred I/O, when it was
    /// deferred twice ([`Deferred::submit_after`]).
    pub prev: Option<IoDone>,
    /// It waited for a delegation recall, not for I/O: it runs again as
    /// new ([`Deferred::submit_wait`]).
    pub waited: bool,
}

/// One core's deferred Calls.
#[derive(Debug)]
pub(crate) struct Deferred {
    pending: Vec<Pending>,
    /// The completion of the Call being resumed (set by the service's
    /// `resume`, taken by the procedure).
    pub resumed: Option<Resumed>,
    /// Most Calls deferred at once so far.
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

    /// Can one more Call be deferred?
    pub fn has_room(&self) -> bool {
        self.pending.len() < MAX_DEFERRED
    }

    fn record(&mut self, token: DeferToken, source: Source, pre: Attr, prev: Option<IoDone>) {
        debug_assert!(self.has_room());
        self.pending.push(Pending {
            token,
            source,
            done: None,
            reported: false,
            pre,
            prev,
        });
        self.max_in_flight = self.max_in_flight.max(self.pending.len());
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
        unsafe { self.submit_after(ch, backend, token, io, pre, None, reply) }
    }

    /// [`Deferred::submit`] for a Call being resumed whose earlier I/O
    /// completed with `prev` (kept for its next resume).
    ///
    /// # Safety
    /// As [`Deferred::submit`].
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn submit_after(
        &mut self,
        ch: &mut dyn IoChannel,
        backend: usize,
        token: DeferToken,
        io: IoDesc,
        pre: Attr,
        prev: Option<IoDone>,
        reply: &mut ReplyBuilder<'_>,
    ) -> FsResult<()> {
        // SAFETY: the caller's contract is the channel's.
        unsafe { ch.submit(IoDesc { tag: token.0, ..io })? };
        self.record(token, Source::Channel(backend), pre, prev);
        reply.defer();
        Ok(())
    }

    /// Record a Call handed to the helper pool under `token` and defer
    /// `reply`; [`Deferred::pool_done`] completes it.
    pub fn submit_to_pool(&mut self, token: DeferToken, reply: &mut ReplyBuilder<'_>) {
        self.record(token, Source::Pool, Attr::default(), None);
        reply.defer();
    }

    /// Record a Call held for a delegation recall under `token` and defer
    /// `reply`; [`Deferred::wake`] completes it. The caller checked
    /// [`Deferred::has_room`].
    pub fn submit_wait(&mut self, token: DeferToken, reply: &mut ReplyBuilder<'_>) {
        self.record(token, Source::Wait, Attr::default(), None);
        reply.defer();
    }

    /// The Call of `token`, held for a recall, may run again.
    pub fn wake(&mut self, token: DeferToken) {
        if let Some(p) = self
            .pending
            .iter_mut()
            .find(|p| p.source == Source::Wait && p.done.is_none() && p.token == token)
        {
            p.done = Some(IoDone {
                tag: token.0,
                ..IoDone::default()
            });
        }
    }

    /// The helper pool finished the Call of `token`.
    pub fn pool_done(&mut self, token: DeferToken) {
        if let Some(p) = self
            .pending
            .iter_mut()
            .find(|p| p.source == Source::Pool && p.done.is_none() && p.token == token)
        {
            p.done = Some(IoDone {
                tag: token.0,
                ..IoDone::default()
            });
        }
    }

    fn in_flight_on(&self, backend: usize) -> bool {
        self.pending
            .iter()
            .any(|p| p.source == Source::Channel(backend) && p.done.is_none())
    }

    /// Give the completion `d` of `backend`'s channel to its entry. A
    /// completion no entry claims cannot happen; it is dropped.
    fn claim(&mut self, backend: usize, d: &IoDone) {
        if let Some(p) = self
            .pending
            .iter_mut()
            .find(|p| p.source == Source::Channel(backend) && p.done.is_none() && p.token.0 == d.tag)
        {
            p.done = Some(*d);
        }
    }

    /// Reap `backend`'s channel into the pending entries.
    fn reap(&mut self, backend: usize, ch: &mut dyn IoChannel) {
        let mut out = [IoDone::default(); REAP_BATCH];
        let n = ch.poll(&mut out);
        for d in &out[..n] {
            self.claim(backend, d);
        }
    }

    /// Do `io` on `backend`'s channel now and wait for its completion only
    /// (a Call that is not deferred). Completions of this core's deferred
    /// I/O reaped meanwhile go to their entries; they are not waited for.
    ///
    /// # Safety
    /// As [`IoChannel::submit`], until this returns.
    pub unsafe fn io_sync(&mut self, backend: usize, ch: &mut dyn IoChannel, io: IoDesc) -> FsResult<IoDone> {
        let io = IoDesc { tag: SYNC_TAG, ..io };
        // SAFETY: the caller's guarantee covers `io_now`, which returns only
        // once it is done with the buffer, and `submit` followed by the loop
        // below, which returns only after the completion of `SYNC_TAG` is
        // reaped.
        unsafe {
            if let Some(done) = ch.io_now(&io) {
                return Ok(done);
            }
            ch.submit(io)?;
        }
        let mut out = [IoDone::default(); 1];
        loop {
            if ch.poll(&mut out) == 1 {
                if out[0].tag == SYNC_TAG {
                    return Ok(out[0]);
                }
                self.claim(backend, &out[0]);
                continue;
            }
            std::hint::spin_loop();
        }
    }

    /// Read into `buf` at `offset` synchronously ([`Deferred::io_sync`]):
    /// the bytes read and whether the end of file was reached.
    pub fn read_sync(
        &mut self,
        backend: usize,
        ch: &mut dyn IoChannel,
        io: IoDesc,
        buf: &mut [u8],
    ) -> FsResult<(u32, bool)> {
        let len = u32::try_from(buf.len()).map_err(|_| FsError::Inval)?;
        let io = IoDesc {
            buf: buf.as_mut_ptr(),
            len,
            ..io
        };
        // SAFETY: `buf` is exclusively borrowed for this whole call.
        let done = unsafe { self.io_sync(backend, ch, io)? };
        done.result.map(|n| (n, done.eof))
    }

    /// Reap every channel with deferred I/O in flight, and write the tokens
    /// of finished, not yet reported Calls to `ready`. Returns how many.
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

    /// Take the result of a reported Call (the engine resumes or cancels
    /// it).
    pub fn take(&mut self, token: DeferToken) -> Option<Resumed> {
        let i = self.pending.iter().position(|p| p.token == token && p.reported)?;
        let p = self.pending.swap_remove(i);
        Some(Resumed {
            token,
            done: p.done?,
            pre: p.pre,
            prev: p.prev,
            waited: p.source == Source::Wait,
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
