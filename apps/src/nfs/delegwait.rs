//! NFSv3 Calls held while the NFSv4 delegations they conflict with are
//! recalled (issue 23).
//!
//! An NFSv3 WRITE, SETATTR of the size, REMOVE, RENAME or LINK of a file an
//! NFSv4 client holds a delegation on recalls it, and so does a READ,
//! GETATTR or other SETATTR of a file under a write delegation
//! ([`crate::nfs4::deleg`]).
//! NFSv3 has no way to say "later" but NFS3ERR_JUKEBOX (RFC 1813 s2.6),
//! after which the Linux client waits five seconds before it retries,
//! while a client answers a recall in a round trip or two. So a Call the
//! engine lets the service defer ([`dataplane::service::CallView::defer_token`])
//! is held instead: its reply is deferred ([`super::defer::Deferred::submit_wait`])
//! and it is kept here with the file it waits for. Each turn of the core's
//! loop while Calls wait ([`DelegWaits::poll`]) looks at them again when a
//! delegation was returned, revoked or dropped since the last look
//! ([`crate::nfs4::state::V4State::deleg_generation`]), and at least every
//! [`RECHECK`] (a holder whose lease expired loses its state at that look,
//! as at a conflict). A Call whose file is free is resumed and runs again
//! from the start; the recall rule and the revocation timer bound its
//! wait to about a lease.
//!
//! Bounded: at most [`MAX_WAITS`] Calls wait per core (each holds a credit
//! and its buffers in the engine); beyond that, and for Calls that cannot
//! be deferred (TCP, the helper pool), the answer is NFS3ERR_JUKEBOX as
//! before.

use std::time::{Duration, Instant};

use dataplane::service::{DeferToken, ReplyBuilder};

use super::defer::Deferred;
use crate::nfs4::deleg::Conflict;
use crate::nfs4::state::{FileKey, V4State};

/// Most Calls held for a recall at once on one core.
pub const MAX_WAITS: usize = 64;

/// Longest time between two looks at the held Calls when no delegation
/// changed.
pub const RECHECK: Duration = Duration::from_millis(50);

/// Counters of the held Calls.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DelegWaitStats {
    /// Calls held for a recall.
    pub held: u64,
    /// Calls answered NFS3ERR_JUKEBOX because [`MAX_WAITS`] were held.
    pub jukebox: u64,
    /// Most held at once.
    pub max_held: u64,
}

/// One core's Calls held for a recall.
#[derive(Debug)]
pub(crate) struct DelegWaits {
    /// Each held Call, the file it waits for and what it does to it.
    waits: Vec<(DeferToken, (FileKey, Conflict))>,
    /// The delegation generation at the last look.
    gen: u64,
    /// When the last look was.
    looked: Instant,
    pub stats: DelegWaitStats,
}

impl Default for DelegWaits {
    fn default() -> Self {
        DelegWaits {
            waits: Vec::new(),
            gen: 0,
            looked: Instant::now(),
            stats: DelegWaitStats::default(),
        }
    }
}

impl DelegWaits {
    /// Hold the Call of `token`, which conflicts with a delegation on
    /// `file` being recalled, deferring `reply`. False (nothing done) when
    /// [`MAX_WAITS`] are held or the deferred table is full: the caller
    /// answers NFS3ERR_JUKEBOX.
    pub fn hold(
        &mut self,
        v4: &V4State,
        token: DeferToken,
        file: (FileKey, Conflict),
        deferred: &mut Deferred,
        reply: &mut ReplyBuilder<'_>,
    ) -> bool {
        if self.waits.len() >= MAX_WAITS || !deferred.has_room() {
            self.stats.jukebox += 1;
            return false;
        }
        if self.waits.is_empty() {
            self.gen = v4.deleg_generation();
            self.looked = Instant::now();
        }
        deferred.submit_wait(token, reply);
        self.waits.push((token, file));
        self.stats.held += 1;
        self.stats.max_held = self.stats.max_held.max(self.waits.len() as u64);
        true
    }

    /// Release the held Calls whose file no other client's delegation
    /// covers any more (their deferred entries complete; the engine then
    /// resumes them).
    pub fn poll(&mut self, v4: &V4State, deferred: &mut Deferred) {
        if self.waits.is_empty() {
            return;
        }
        let gen = v4.deleg_generation();
        if gen == self.gen && self.looked.elapsed() < RECHECK {
            return;
        }
        self.gen = gen;
        self.looked = Instant::now();
        self.waits.retain(|(token, (file, kind))| {
            // The conflict rule itself: revokes an overdue recall, drops
            // an expired holder's state, recalls one granted since.
            if v4.deleg_conflict_as(file, None, *kind).is_ok() {
                deferred.wake(*token);
                false
            } else {
                true
            }
        });
    }

    /// The engine will not resume `token` (its connection went).
    pub fn cancel(&mut self, token: DeferToken) {
        self.waits.retain(|(t, _)| *t != token);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::FileHandle;

    /// At most [`MAX_WAITS`] Calls are held; the next is refused (the
    /// caller answers NFS3ERR_JUKEBOX); a cancelled one frees its place.
    #[test]
    fn holds_are_bounded() {
        let v4 = V4State::new(8, 1 << 20);
        let mut d = Deferred::new();
        let mut w = DelegWaits::default();
        let file = ((0, FileHandle::new(b"f").unwrap()), Conflict::Change);
        let mut head = [0u8; 64];
        for i in 0..MAX_WAITS as u64 {
            let mut rb = ReplyBuilder::new(&mut head, None);
            assert!(w.hold(&v4, DeferToken(i), file, &mut d, &mut rb));
            assert!(rb.is_deferred());
        }
        let mut rb = ReplyBuilder::new(&mut head, None);
        assert!(!w.hold(&v4, DeferToken(999), file, &mut d, &mut rb));
        assert!(!rb.is_deferred(), "refused: not deferred");
        assert_eq!((w.stats.held, w.stats.jukebox, w.stats.max_held), (64, 1, 64));
        w.cancel(DeferToken(3));
        let _ = d.take(DeferToken(3));
        let mut rb = ReplyBuilder::new(&mut head, None);
        assert!(w.hold(&v4, DeferToken(1000), file, &mut d, &mut rb));
        // No delegation on the file: every held Call is released at the
        // next look, and comes back as a wait, not as I/O.
        w.gen = u64::MAX;
        w.poll(&v4, &mut d);
        let mut ready = [DeferToken(0); 128];
        let n = d.poll_ready(&mut [], &mut ready);
        assert_eq!(n, MAX_WAITS);
        assert!(d.take(ready[0]).is_some_and(|r| r.waited));
    }
}
