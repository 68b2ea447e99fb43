//! The transport engine: the responder (server) and requester (client)
//! sides of RPC-over-RDMA versions 1 and 2, each a sans-IO-style state
//! machine per request driven by its core's poll loop over a
//! [`crate::fabric::Fabric`]. Each role is a folder of files of one job
//! (admission, Reads, execution, replies, connections).

pub mod requester;
pub mod responder;
