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
#![deny(missing_debug_implementations)]

pub mod fabric;
pub mod shm;
pub mod sim;

pub use fabric::*;
