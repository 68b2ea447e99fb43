//! Interrupt mode of the fabrics (issue 24 item 1): how a core that has
//! nothing to do blocks until a provider has something for it, through
//! [`super::Fabric::wake_fds`], [`super::Fabric::arm_wakeup`] and
//! [`super::Fabric::disarm_wakeup`].
//!
//! | provider | descriptors | arming |
//! |---|---|---|
//! | `verbs` | the completion channel, the RDMA-CM event channel | `ibv_get_cq_event` + `ibv_ack_cq_events` for what may have fired (a CQ polled since its request), `ibv_req_notify_cq` on every CQ not armed still |
//! | `shm` | the fabric's doorbell eventfd, its listening sockets | clear the doorbell, set `sleeping` in every connection's ring file (peers ring only then; `shm::doorbell`) |
//! | `sim` | none | never (virtual time is stepped by its owner) |
//!
//! In every case the caller polls each CQ and the CM once more *after*
//! arming and blocks only if that finds nothing: what arrived before arming
//! is found by that poll, what arrives after makes a descriptor readable.

/// How often a fabric entered its device driver on its data path
/// ([`super::Fabric::driver_calls`]; the verbs provider's counters):
/// each is a system call on software devices (rxe, siw) and on some
/// hardware. For diagnostics and the doorbell-batching tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DriverCalls {
    /// `ibv_post_send` calls for consumer work (one per chain).
    pub post_send_calls: u64,
    /// Consumer send work requests posted.
    pub send_wrs: u64,
    /// `ibv_req_notify_cq` calls.
    pub notify_requests: u64,
    /// `ibv_get_cq_event` calls (including those that found none).
    pub event_reads: u64,
    /// `ibv_get_cq_event` calls that found the channel empty.
    pub empty_event_reads: u64,
}
