//! The transport engine: the responder (server) and requester (client)
//! sides of RPC-over-RDMA versions 1 and 2, each a sans-IO-style state
//! machine per request driven by its core's poll loop over a
//! [`crate::fabric::Fabric`]. Each role is a folder of files of one job
//! (admission, Reads, execution, replies, connections).

pub mod requester;
pub mod responder;

use crate::fabric::{CmEvent, Completion, CqId, Fabric};
use crate::stages::{StageTimer, Stamp};

/// Completions polled per `poll_cq` call, by either role.
pub const CQ_BATCH: usize = 32;

/// Connection-manager events are control plane: they are polled once every this
/// many turns of the loop (and on the first), not on every turn, because a
/// provider's CM poll may cost syscalls (SPDK polls its CM channel on a separate,
/// slower poller for the same reason).
pub const CM_POLL_INTERVAL: u32 = 256;

/// What both roles' poll loops share: each role hands out its fabric and
/// completion-queue state, and handles the completions and connection
/// events the shared loop ([`poll_cm`], [`poll_completions`]) reads.
pub(crate) trait PollLoop {
    type F: Fabric;
    /// The fabric, the completion queue, the batch last polled, when it was
    /// polled (stage timing) and the turn count for connection events.
    fn cq_parts(&mut self) -> CqParts<'_, Self::F>;
    fn handle_completion(&mut self, wc: Completion);
    fn handle_cm(&mut self, ev: CmEvent);
    /// A batch of `n` (at least one) completions was just polled, before
    /// any of them is handled.
    fn batch_polled(&mut self, n: usize);
}

/// [`PollLoop`] for a role `$ty` (generic over `$gen`) whose fields `fabric`,
/// `cq`, `wcs`, `polled_at` and `cm_tick` hold its loop's state and whose
/// inherent `handle_completion`, `handle_cm` and `batch_polled` handle what
/// it reads.
macro_rules! impl_poll_loop {
    ($ty:ty, [$($gen:tt)*]) => {
        impl<$($gen)*> $crate::engine::PollLoop for $ty {
            type F = F;
            #[inline(always)]
            fn cq_parts(&mut self) -> $crate::engine::CqParts<'_, F> {
                $crate::engine::CqParts {
                    fabric: &mut self.fabric,
                    cq: self.cq,
                    wcs: &mut self.wcs,
                    polled_at: &mut self.polled_at,
                    cm_tick: &mut self.cm_tick,
                }
            }
            #[inline(always)]
            fn handle_completion(&mut self, wc: Completion) {
                <$ty>::handle_completion(self, wc);
            }
            fn handle_cm(&mut self, ev: CmEvent) {
                <$ty>::handle_cm(self, ev);
            }
            #[inline(always)]
            fn batch_polled(&mut self, n: usize) {
                <$ty>::batch_polled(self, n);
            }
        }
    };
}
pub(crate) use impl_poll_loop;

/// A role's fabric and completion-queue state ([`PollLoop::cq_parts`]).
pub(crate) struct CqParts<'a, F> {
    pub(crate) fabric: &'a mut F,
    pub(crate) cq: CqId,
    pub(crate) wcs: &'a mut [Completion; CQ_BATCH],
    pub(crate) polled_at: &'a mut Stamp,
    pub(crate) cm_tick: &'a mut u32,
}

/// Connection events, when due: on one turn in [`CM_POLL_INTERVAL`], or on
/// every turn while `urgent`. Returns how many were handled.
#[inline]
pub(crate) fn poll_cm<E: PollLoop>(e: &mut E, urgent: bool) -> usize {
    let tick = e.cq_parts().cm_tick;
    let due = *tick == 0 || urgent;
    *tick = (*tick + 1) % CM_POLL_INTERVAL;
    let mut work = 0;
    while let Some(ev) = if due { e.cq_parts().fabric.poll_cm() } else { None } {
        e.handle_cm(ev);
        work += 1;
    }
    work
}

/// One batch of completions (at most [`CQ_BATCH`]), each handled in order;
/// returns how many.
#[inline(always)]
pub(crate) fn poll_completions<E: PollLoop>(e: &mut E) -> usize {
    let p = e.cq_parts();
    let n = p.fabric.poll_cq(p.cq, p.wcs);
    *p.polled_at = StageTimer::now();
    if n > 0 {
        e.batch_polled(n);
    }
    for k in 0..n {
        let wc = e.cq_parts().wcs[k];
        e.handle_completion(wc);
    }
    n
}
