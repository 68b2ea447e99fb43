//! Counters of delegations and their recalls (issue 23), for the "nfs4"
//! section of `rpcrdma-target stats --json` ([`super::state::V4State::stats_json`]).
//!
//! Kept with atomics: grants, recalls and returns happen on whichever core
//! runs the COMPOUND (or the NFSv3 Call) that causes them; the stats
//! thread reads them without a lock. The recall time is from the conflict
//! that queued the CB_RECALL (another client's OPEN for writing, a WRITE,
//! an NFSv3 change, ...; RFC 8881 s10.4.1) to the holder's DELEGRETURN,
//! in the latency buckets of [`crate::server::stats`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde_json::{json, Value};

use crate::server::stats::{lat_bucket, percentiles, LAT_BUCKETS};

/// Delegation and recall counters (all clients).
#[derive(Debug)]
pub struct DelegStats {
    /// Delegations granted by OPEN.
    pub granted: AtomicU64,
    /// Recalls queued (one per delegation and conflict).
    pub recalls: AtomicU64,
    /// DELEGRETURNs of a delegation that was recalled.
    pub returned_after_recall: AtomicU64,
    /// DELEGRETURNs of a delegation that was not recalled.
    pub returned_unrecalled: AtomicU64,
    /// Delegations revoked (not returned a lease after the recall).
    pub revoked: AtomicU64,
    /// Write delegations granted (counted in `granted` too).
    pub granted_write: AtomicU64,
    /// Recalls of write delegations (in `recalls` too).
    pub recalls_write: AtomicU64,
    /// DELEGRETURNs of write delegations (in the two above too).
    pub returned_write: AtomicU64,
    /// Write delegations revoked (in `revoked` too).
    pub revoked_write: AtomicU64,
    /// Recall to DELEGRETURN, in [`lat_bucket`]s.
    recall_ns: [AtomicU64; LAT_BUCKETS],
    /// The longest recall to DELEGRETURN, in nanoseconds.
    recall_max_ns: AtomicU64,
}

impl Default for DelegStats {
    fn default() -> Self {
        DelegStats {
            granted: AtomicU64::new(0),
            recalls: AtomicU64::new(0),
            returned_after_recall: AtomicU64::new(0),
            returned_unrecalled: AtomicU64::new(0),
            revoked: AtomicU64::new(0),
            granted_write: AtomicU64::new(0),
            recalls_write: AtomicU64::new(0),
            returned_write: AtomicU64::new(0),
            revoked_write: AtomicU64::new(0),
            recall_ns: std::array::from_fn(|_| AtomicU64::new(0)),
            recall_max_ns: AtomicU64::new(0),
        }
    }
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

impl DelegStats {
    /// A delegation granted (`write`: a write delegation).
    pub(super) fn granted(&self, write: bool) {
        bump(&self.granted);
        if write {
            bump(&self.granted_write);
        }
    }

    pub(super) fn recalled(&self, write: bool) {
        bump(&self.recalls);
        if write {
            bump(&self.recalls_write);
        }
    }

    pub(super) fn revoked(&self, write: bool) {
        bump(&self.revoked);
        if write {
            bump(&self.revoked_write);
        }
    }

    /// A DELEGRETURN; `since_recall`: the time since its recall was queued,
    /// `None` when it was not recalled.
    pub(super) fn returned(&self, since_recall: Option<Duration>, write: bool) {
        if write {
            bump(&self.returned_write);
        }
        match since_recall {
            None => bump(&self.returned_unrecalled),
            Some(d) => {
                bump(&self.returned_after_recall);
                let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
                bump(&self.recall_ns[lat_bucket(ns)]);
                self.recall_max_ns.fetch_max(ns, Ordering::Relaxed);
            }
        }
    }

    /// The recall-to-DELEGRETURN histogram (counts per bucket).
    pub fn recall_buckets(&self) -> Vec<u64> {
        self.recall_ns.iter().map(|b| b.load(Ordering::Relaxed)).collect()
    }

    /// The counters as JSON; `held`: delegations in the table now,
    /// `held_write` of them write delegations.
    pub fn json(&self, held: usize, held_write: usize) -> Value {
        let l = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let mut lat = percentiles(&self.recall_buckets());
        // The exact maximum rather than its bucket's upper bound.
        lat["max"] = json!((l(&self.recall_max_ns) as f64 / 10.0).round() / 100.0);
        json!({
            "delegations_held": held,
            "delegations_granted": l(&self.granted),
            "recalls": l(&self.recalls),
            "returned_after_recall": l(&self.returned_after_recall),
            "returned_unrecalled": l(&self.returned_unrecalled),
            "revoked": l(&self.revoked),
            "write_delegations_held": held_write,
            "write_delegations_granted": l(&self.granted_write),
            "write_recalls": l(&self.recalls_write),
            "write_returned": l(&self.returned_write),
            "write_revoked": l(&self.revoked_write),
            "recall_to_return_us": lat,
        })
    }
}
