//! Memory for the rpcrdma data plane: hugepage-backed [`region`]s that can be
//! shared with another process by file descriptor, fixed-size buffer
//! [`pool`]s carved from them with per-core caches, and the bounded MPMC
//! [`ring`] used both as the pools' free list and as the reactor's cross-core
//! message queue.
//!
//! Everything is allocated at start-up; the hot path (ring operations,
//! `PoolCache::get_bulk`/`put_bulk`, buffer byte access) never allocates,
//! never registers memory and never panics on exhaustion (a short count is
//! returned instead, which the caller turns into back-pressure).

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]
// `usize::is_multiple_of` needs Rust 1.87; the workspace MSRV is 1.80.
#![allow(unknown_lints, clippy::manual_is_multiple_of)]

pub mod error;
pub mod pool;
pub mod region;
pub mod ring;

pub use error::{BufError, MempoolError};
