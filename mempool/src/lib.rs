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
//!
//! ```
//! use mempool::pool::{Mempool, PoolPlan, INLINE_RECV_SIZE_V2};
//! use mempool::region::RegionConfig;
//!
//! // Start-up: holders declare their worst cases; the pool is sized from them.
//! let mut plan = PoolPlan::new(2); // two cores
//! let recv = plan.add_class("inline", INLINE_RECV_SIZE_V2, 32)?;
//! plan.reserve("receive", recv, 256).reserve("send", recv, 64);
//! let pool = Mempool::new(&plan, &RegionConfig::default())?;
//! if let Some(w) = pool.warning() {
//!     eprintln!("{w}"); // e.g. no hugepages reserved: running on normal pages
//! }
//!
//! // On core 0: a cache in front of the shared free ring.
//! let mut cache = pool.cache(recv, 0)?;
//! let mut buf = cache.get().expect("pool sized for the worst case");
//! buf.as_mut_slice()[..4].copy_from_slice(b"RPC!");
//! cache.put(buf)?;
//! assert_eq!(pool.stats(recv).unwrap().in_use, 0);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]
// `usize::is_multiple_of` needs Rust 1.87; the workspace MSRV is 1.80.
#![allow(unknown_lints, clippy::manual_is_multiple_of)]

pub mod error;
pub mod pool;
pub mod region;
pub mod ring;

pub use error::{BufError, MempoolError};
