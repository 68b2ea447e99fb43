//! Upper-Layer Bindings (RFC 8166 section 6) and the NFSv3 binding (RFC 8267).
//!
//! A ULB says which XDR data items of an RPC program are *DDP-eligible*, i.e. may
//! be removed from the Payload stream and moved in a Read or Write chunk, and how
//! large a reply can get. Position-Zero Read chunks and Reply chunks may carry
//! anything (RFC 8166 section 3.5.3); only DDP-eligible items go in ordinary Read
//! and Write chunks.
//!
//! The trait is object-safe and allocation-free: locators write into caller slices.

use crate::error::DecodeError;

/// A DDP-eligible data item located in an *unreduced* Payload stream.
///
/// `offset` is the byte offset of the item's first data byte (after any XDR length
/// word, which stays in the Payload stream per RFC 8166 section 3.4.4.1) from the
/// start of the RPC message; `len` is the item's encoded length without XDR
/// roundup padding. The padding (`xdr::pad_len(len)` bytes) follows in the
/// unreduced stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct DdpItem {
    pub offset: u32,
    pub len: u32,
}

/// An Upper-Layer Binding: the DDP rules of one RPC program.
///
/// Implementations may be called from any core.
pub trait UpperLayerBinding: Send + Sync {
    /// The RPC program number this binding describes.
    fn program(&self) -> u32;

    /// Whether `version` of the program is covered by this binding.
    fn supports_version(&self, version: u32) -> bool;

    /// Locate the DDP-eligible items in an encoded, unreduced RPC **Call** message
    /// (`call` starts at the RPC XID). Writes at most `out.len()` items in stream
    /// order and returns how many. Calls of procedures without DDP-eligible
    /// arguments return `Ok(0)`.
    fn call_items(&self, call: &[u8], out: &mut [DdpItem]) -> Result<usize, DecodeError>;

    /// Locate the DDP-eligible items in an encoded, unreduced RPC **Reply** message
    /// (`reply` starts at the RPC XID) to a call of `(version, procedure)`.
    fn reply_items(
        &self,
        version: u32,
        procedure: u32,
        reply: &[u8],
        out: &mut [DdpItem],
    ) -> Result<usize, DecodeError>;

    /// For a call of `(version, procedure)`, the largest DDP-eligible result item
    /// the reply can carry, so a requester knows to provision a Write chunk and how
    /// large (RFC 8166 section 3.4.6). `None` if the procedure has no DDP-eligible
    /// result.
    fn reply_ddp_max(&self, version: u32, procedure: u32) -> Option<u32>;

    /// Upper bound on the size of a reply to `(version, procedure)` **after**
    /// reduction, used to decide whether a Reply chunk is needed
    /// (RFC 8166 section 6.2).
    fn max_reply_size(&self, version: u32, procedure: u32) -> u32;
}
