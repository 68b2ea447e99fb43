//! COMPOUNDs suspended at a deferred I/O operation (READ, WRITE, COMMIT on
//! a backend whose I/O completes later: `uring`, `nvme`).
//!
//! A COMPOUND such as SEQUENCE, PUTFH, READ runs up to its I/O operation,
//! which submits the I/O under the Call's defer token and defers the reply
//! ([`crate::nfs::defer`]). The walk stops there: the results encoded so far
//! (everything after the RPC reply header), the filehandles and stateids,
//! the session and the loop's counters are kept here under the token, and
//! the core goes on serving other Calls. When the I/O completes, the engine
//! resumes the Call; [`super::call`] finds its entry, puts the results back
//! into the (empty again) reply head, skips the operations that already
//! ran without running them again (decoding only), and runs the I/O
//! operation again, which takes the completion instead of submitting. The
//! session slot stays in use while the COMPOUND is suspended (a retry gets
//! NFS4ERR_DELAY) and its reply is cached only once it is complete; a Call
//! the engine cancels (its connection went away) frees the slot with
//! nothing cached ([`Suspended::cancel`]).
//!
//! Bounded: one entry per deferred Call (at most
//! [`crate::nfs::defer::MAX_DEFERRED`]), and results of at most
//! [`MAX_KEPT_BYTES`] bytes before the I/O operation; a COMPOUND with more
//! runs its I/O synchronously. The buffers are reused, so a suspension
//! allocates only while the table grows.

use dataplane::service::DeferToken;
use proto::nfs4::{SessionId, Stateid};

use super::fh::Fh;

/// Most result bytes kept for a suspended COMPOUND (status, tag, count and
/// the results before the I/O operation; SEQUENCE and PUTFH take about 70).
pub const MAX_KEPT_BYTES: usize = 1024;

/// Where a COMPOUND stopped.
#[derive(Debug)]
pub(crate) struct Stop {
    pub token: DeferToken,
    /// Operations that ran before the I/O operation (SEQUENCE included).
    pub done_ops: u32,
    /// Results so far: the reply from after the RPC header up to the I/O
    /// operation's result.
    pub kept: Vec<u8>,
    /// Where `numres` is, from the start of `kept`.
    pub numres_at: usize,
    pub numres: u32,
    pub limit: usize,
    pub max_ops: u32,
    pub cachethis: bool,
    pub cur: Option<Fh>,
    pub saved: Option<Fh>,
    pub cur_sid: Option<Stateid>,
    pub saved_sid: Option<Stateid>,
    pub session: Option<(SessionId, u32, u64)>,
}

/// One core's suspended COMPOUNDs.
#[derive(Debug, Default)]
pub(crate) struct Suspended {
    stops: Vec<Stop>,
    /// Result buffers of resumed entries, for reuse.
    free: Vec<Vec<u8>>,
}

impl Suspended {
    /// A buffer for the results kept by a new entry.
    pub fn buffer(&mut self) -> Vec<u8> {
        let mut b = self.free.pop().unwrap_or_else(|| Vec::with_capacity(MAX_KEPT_BYTES));
        b.clear();
        b
    }

    /// Keep `s` until its Call is resumed or cancelled (one entry per token:
    /// a COMPOUND deferred again replaces its entry).
    pub fn keep(&mut self, s: Stop) {
        debug_assert!(self.stops.len() < crate::nfs::defer::MAX_DEFERRED);
        if let Some(i) = self.stops.iter().position(|o| o.token == s.token) {
            let old = std::mem::replace(&mut self.stops[i], s);
            self.free.push(old.kept);
        } else {
            self.stops.push(s);
        }
    }

    /// The entry of `token`, when that Call is a suspended COMPOUND.
    pub fn take(&mut self, token: Option<DeferToken>) -> Option<Stop> {
        let t = token?;
        if self.stops.is_empty() {
            return None;
        }
        let i = self.stops.iter().position(|s| s.token == t)?;
        Some(self.stops.swap_remove(i))
    }

    /// Give an entry's buffer back.
    pub fn recycle(&mut self, s: Stop) {
        if self.free.len() < 64 {
            self.free.push(s.kept);
        }
    }

    /// The engine will not resume `token`: forget it, and free its session
    /// slot with no reply cached.
    pub fn cancel(&mut self, v4: &super::state::V4State, token: DeferToken) {
        if let Some(s) = self.take(Some(token)) {
            if let Some((sid, slot, _)) = s.session {
                v4.sequence_done(&sid, slot, None);
            }
            self.recycle(s);
        }
    }
}
