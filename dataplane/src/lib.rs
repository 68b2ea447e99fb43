//! # rpcrdma-dataplane
//!
//! The fabric trait ([`fabric::Fabric`]) and its providers, and the RPC-over-RDMA
//! transport engine for both roles on top of `proto`'s planner.
//!
//! | module | what |
//! |---|---|
//! | [`fabric`] | the verbs-shaped provider interface |
//! | [`sim`] | in-process deterministic fabric with fault injection |
//! | [`shm`] | two processes on one host over shared memory |
//! | [`responder`] | the server side of the transport engine |
//! | [`service`] | what the responder hands decoded Calls to |
//! | [`credits`] | credit accounting for both roles |
//! | [`queue`] | fixed-capacity pending queues and slabs |
#![deny(missing_debug_implementations)]

pub mod credits;
pub mod fabric;
pub mod queue;
pub mod requester;
pub mod responder;
pub mod service;
pub mod shm;
pub mod sim;
pub mod testprog;
#[cfg(feature = "verbs")]
pub mod verbs;

pub use fabric::*;
