//! Interrupt mode of the fabrics (issue 24 item 1): how a core that has
//! nothing to do blocks until a provider has something for it, through
//! [`super::Fabric::wake_fds`], [`super::Fabric::arm_wakeup`] and
//! [`super::Fabric::disarm_wakeup`].
//!
//! | provider | descriptors | arming |
//! |---|---|---|
//! | `verbs` | the completion channel, the RDMA-CM event channel | `ibv_get_cq_event` + `ibv_ack_cq_events` for what fired, `ibv_req_notify_cq` on every CQ |
//! | `shm` | the fabric's doorbell eventfd, its listening sockets | clear the doorbell, set `sleeping` in every connection's ring file (peers ring only then; `shm::doorbell`) |
//! | `sim` | none | never (virtual time is stepped by its owner) |
//!
//! In every case the caller polls each CQ and the CM once more *after*
//! arming and blocks only if that finds nothing: what arrived before arming
//! is found by that poll, what arrives after makes a descriptor readable.
