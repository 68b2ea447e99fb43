//! # rpcrdma-proto: the sans-IO RPC-over-RDMA wire engine
//!
//! Everything here is pure: no I/O, no clock, no `unsafe`, no allocation on the hot
//! path. Decoders return borrowed views over `&[u8]` that were validated once, so
//! their accessors cannot panic; encoders write into caller buffers.
//!
//! | module | what | spec |
//! |---|---|---|
//! | [`xdr`] | zero-copy XDR cursor and writer | RFC 4506 |
//! | [`rpc`] | ONC RPC call/reply headers, AUTH_NONE, AUTH_SYS | RFC 5531 |
//! | [`header`] | RPC-over-RDMA v1 and v2 transport headers and chunk lists: every decoder and encoder | RFC 8166 s4, draft-cel-nfsv4-rpcrdma-version-two-09 s3-6 |
//! | [`private_data`] | RDMA-CM private data | RFC 8797 |
//! | [`negotiate`] | v1/v2 version negotiation as a state machine | draft -09 s7 |
//! | [`ulb`] | Upper-Layer Bindings and the NFSv3 binding | RFC 8166 s6, RFC 8267 |
//! | [`nfs4`] | NFSv4.1/4.2 constants, COMPOUND decoding into bounded views, the NFSv4 binding's Call items | RFC 8881, RFC 7862, RFC 8267 s6 |
//! | [`plan`] | chunk planning for requester and responder (Call, Read list, Reply, reassembly) | RFC 8166 s3.4-3.5 |
//!
//! Functions here may be called from any core; nothing holds shared state.
#![forbid(unsafe_code)]
#![deny(missing_debug_implementations)]

pub mod error;
pub mod header;
pub mod negotiate;
pub mod nfs3;
pub mod nfs4;
pub mod plan;
pub mod private_data;
pub mod rpc;
pub mod ulb;
pub mod xdr;

pub use error::{DecodeError, DecodeErrorKind, EncodeError};
