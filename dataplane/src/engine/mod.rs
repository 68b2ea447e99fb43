//! The transport engine: the responder (server) and requester (client)
//! sides of RPC-over-RDMA versions 1 and 2, each a sans-IO-style state
//! machine per request driven by its core's poll loop over a
//! [`crate::fabric::Fabric`]. Each role is a folder of files of one job
//! (admission, Reads, execution, replies, connections).

pub mod requester;
pub mod responder;

/// Completions polled per `poll_cq` call, by either role.
pub const CQ_BATCH: usize = 32;

/// Connection-manager events are control plane: they are polled once every this
/// many turns of the loop (and on the first), not on every turn, because a
/// provider's CM poll may cost syscalls (SPDK polls its CM channel on a separate,
/// slower poller for the same reason).
pub const CM_POLL_INTERVAL: u32 = 256;
