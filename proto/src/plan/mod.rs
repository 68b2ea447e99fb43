//! Chunk planning for both roles (RFC 8166 sections 3.4 and 3.5; the same rules
//! hold in version 2, draft-cel-nfsv4-rpcrdma-version-two-09 sections 4.2.1 and
//! 5.3.3).
//!
//! Everything here is pure computation over sizes, offsets and decoded header
//! views: no I/O, no allocation (fixed-capacity arrays sized by the
//! [`header`](crate::header) limit constants), and no panic on any input. Every
//! length coming from a peer is summed in `u64` and checked before use.
//!
//! # Requester (client) side
//!
//! 1. [`plan_call`] decides how an unreduced RPC Call travels (section 3.5):
//!    a Short message ([`CallKind::Short`], RDMA_MSG, nothing reduced), a Chunked
//!    message ([`CallKind::Chunked`], DDP-eligible items moved to Read chunks), or
//!    a Long call ([`CallKind::Long`], RDMA_NOMSG with a Position-Zero Read chunk
//!    holding the whole Call). It also decides what to provision for the reply:
//!    Write chunks for DDP-eligible results and a Reply chunk when the largest
//!    possible reply does not fit the reply inline threshold.
//! 2. The caller maps the plan's byte ranges to registered memory and calls
//!    [`encode_call_header`]; the Send is that header followed by the plan's
//!    [`CallPlan::inline`] byte ranges of the Call.
//! 3. When the reply arrives, [`reassemble_reply`] checks the echoed chunks
//!    against what the Call provisioned and says how many bytes each Write chunk
//!    received and whether the reply came in the Reply chunk;
//!    [`ReplyLayout::pieces`] turns that into a splice list.
//!
//! # Responder (server) side
//!
//! 1. [`plan_reads`] validates a received Call's whole Read list before anything
//!    acts on it (positions, Position-Zero rules, total size), and returns the
//!    RDMA Reads to issue ([`ReadPlan::read_ops`]) and the layout of the
//!    reassembled Call as [`Piece`]s, so the service parses borrowed views.
//! 2. [`plan_reply`] reduces the reply's DDP-eligible items into the Call's Write
//!    chunks and chooses inline (RDMA_MSG) or the Reply chunk (RDMA_NOMSG), or
//!    reports the error to return (ERR_CHUNK, RDMA2_ERR_WRITE_RESOURCE,
//!    RDMA2_ERR_REPLY_RESOURCE). [`ReplyPlan::write_ops`] lists the RDMA Writes,
//!    [`ReplyPlan::reduced_ranges`] the inline payload, and
//!    [`encode_reply_header`] writes the reply's transport header with every
//!    Write chunk and the Reply chunk echoed with updated lengths.
//!
//! # Sizes
//!
//! Inline thresholds passed in here are the largest Send (transport header plus
//! inline payload) the *receiver* of that message accepts: RFC 8166 section 3.3.2
//! for v1 (1024 bytes by default, or the RFC 8797 private-data values), the
//! peer's RBSIZ for v2 (draft -09 section 4.2.1), in each case capped by the
//! sender's own Send buffer size.
//!
//! # Files
//!
//! | file | holds |
//! |---|---|
//! | `mod.rs` | shared types ([`FixedVec`], [`ByteRange`], [`Piece`], [`PlanError`]), [`items_valid`], [`ReducedRanges`] |
//! | `call.rs` | requester, the Call: [`CallParams`], [`ReplyNeeds`], [`plan_call`], [`is_chunk_free_call`], [`one_write_call`] |
//! | `reassemble.rs` | requester, the Reply: [`ReplyLayout`], [`reassemble_reply`], [`reassemble_reply_provisioned`] |
//! | `reads.rs` | responder, the Call: [`ReadLimits`], [`ReadPlan`], [`plan_reads`], [`ReadOp`] |
//! | `reply.rs` | responder, the Reply: [`plan_reply`], [`ReplyPlan`], [`WriteOps`], [`one_write_short_reply`] |
//! | `tests.rs` | planner tests; each one-step shortcut against the general planner |
//!
//! The transport header encoders these plans feed live in [`crate::header`];
//! the ones the engines call are re-exported here under their old paths.
//!
//! Functions here may be called from any core; nothing holds shared state.

use core::fmt;

use crate::error::EncodeError;
use crate::header::{V1Error, V2Error};
use crate::header::{
    MAX_CHUNK_SEGMENTS, MAX_READ_CHUNKS, MAX_READ_SEGMENTS, MAX_WRITE_CHUNKS, READ_ENTRY_LEN, RPCRDMA_VERSION_1,
    RPCRDMA_VERSION_2, SEGMENT_LEN, V1_PREFIX_LEN, V2_PREFIX_LEN,
};
use crate::ulb::DdpItem;

// The encoders of transport headers live in `header`; the engines reach them
// here, beside the planners whose plans they encode.
/// Lives in [`crate::header`] (`header::chunk_free_header_len`); re-exported here.
pub use crate::header::chunk_free_header_len;
/// Lives in [`crate::header`] (`header::encode_call_header`); re-exported here.
pub use crate::header::encode_call_header;
/// Lives in [`crate::header`] (`header::encode_chunk_free_call_header`); re-exported here.
pub use crate::header::encode_chunk_free_call_header;
/// Lives in [`crate::header`] (`header::encode_one_write_call_header`); re-exported here.
pub use crate::header::encode_one_write_call_header;
/// Lives in [`crate::header`] (`header::encode_reply_header`); re-exported here.
pub use crate::header::encode_reply_header;
/// Lives in [`crate::header`] (`header::one_write_header_len`); re-exported here.
pub use crate::header::one_write_header_len;
/// Lives in [`crate::header`] (`header::ReplyHeaderOut`); re-exported here.
pub use crate::header::ReplyHeaderOut;

/// Capacity for Read chunks in a plan (the header decoder's default limit).
pub const PLAN_READ_CHUNKS: usize = MAX_READ_CHUNKS as usize;
/// Capacity for Write chunks in a plan (the header decoder's default limit).
pub const PLAN_WRITE_CHUNKS: usize = MAX_WRITE_CHUNKS as usize;
/// Inline ranges of a reduced stream: one more than the chunks cut out of it.
pub const PLAN_INLINE_RANGES: usize = PLAN_READ_CHUNKS + 1;
/// Pieces of a reassembled stream: chunks interleaved with inline ranges.
pub const PLAN_PIECES: usize = 2 * if PLAN_READ_CHUNKS > PLAN_WRITE_CHUNKS {
    PLAN_READ_CHUNKS
} else {
    PLAN_WRITE_CHUNKS
} + 1;

const _: () = assert!(PLAN_READ_CHUNKS > 0 && PLAN_WRITE_CHUNKS > 0);
const _: () = assert!(PLAN_PIECES > 2 * PLAN_READ_CHUNKS && PLAN_PIECES > 2 * PLAN_WRITE_CHUNKS);
// Lengths of headers we size here stay far below u32::MAX (so u64 sums of them
// cannot overflow).
const _: () = assert!(
    (MAX_READ_SEGMENTS as usize) * READ_ENTRY_LEN
        + (MAX_WRITE_CHUNKS as usize + 1) * (8 + MAX_CHUNK_SEGMENTS as usize * SEGMENT_LEN)
        < u32::MAX as usize
);

// ------------------------------------------------------------------ FixedVec

/// A fixed-capacity vector of `Copy` values stored inline (no allocation).
#[derive(Clone, Copy)]
pub struct FixedVec<T: Copy + Default, const N: usize> {
    len: usize,
    items: [T; N],
}

impl<T: Copy + Default, const N: usize> FixedVec<T, N> {
    /// An empty vector.
    pub fn new() -> Self {
        Self {
            len: 0,
            items: [T::default(); N],
        }
    }
    /// Build from a slice; `None` if it is longer than `N`.
    pub fn from_slice(s: &[T]) -> Option<Self> {
        let mut v = Self::new();
        for &x in s {
            if !v.push(x) {
                return None;
            }
        }
        Some(v)
    }
    /// Append `v`; returns false (and drops `v`) when full.
    #[must_use]
    pub fn push(&mut self, v: T) -> bool {
        match self.items.get_mut(self.len) {
            Some(slot) => {
                *slot = v;
                self.len += 1;
                true
            }
            None => false,
        }
    }
    /// The capacity `N`.
    pub const fn capacity(&self) -> usize {
        N
    }
    /// Remove every item (the storage keeps its old values, unreachable).
    #[inline]
    pub fn clear(&mut self) {
        self.len = 0;
    }
    pub fn as_slice(&self) -> &[T] {
        self.items.get(..self.len).unwrap_or(&[])
    }
}

impl<T: Copy + Default, const N: usize> Default for FixedVec<T, N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Copy + Default, const N: usize> core::ops::Deref for FixedVec<T, N> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        self.as_slice()
    }
}

impl<T: Copy + Default + fmt::Debug, const N: usize> fmt::Debug for FixedVec<T, N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.as_slice()).finish()
    }
}

impl<T: Copy + Default + PartialEq, const N: usize> PartialEq for FixedVec<T, N> {
    fn eq(&self, o: &Self) -> bool {
        self.as_slice() == o.as_slice()
    }
}
impl<T: Copy + Default + Eq, const N: usize> Eq for FixedVec<T, N> {}

// ------------------------------------------------------------------ common types

/// A byte range `[start, start + len)` of an RPC message (the unreduced stream
/// unless said otherwise). Plans only produce ranges that lie inside the message,
/// whose length fits a `u32`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct ByteRange {
    pub start: u32,
    pub len: u32,
}

impl ByteRange {
    /// One past the last byte.
    #[inline]
    pub const fn end(&self) -> u64 {
        self.start as u64 + self.len as u64
    }
    /// As a `usize` range for slicing.
    #[inline]
    pub fn range(&self) -> core::ops::Range<usize> {
        let s = self.start as usize;
        s..s.saturating_add(self.len as usize)
    }
}

/// One piece of a reassembled message, in stream order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Piece {
    /// `len` bytes of the received inline payload (or reduced stream) from `start`.
    Inline { start: u32, len: u32 },
    /// Chunk `index`'s data (`len` bytes), followed by `pad` zero bytes of XDR
    /// roundup that the sender did not transfer (RFC 8166 sections 3.4.5.2 and
    /// 3.4.6.2: chunks normally leave the padding out).
    Chunk { index: u32, len: u32, pad: u32 },
}

impl Default for Piece {
    fn default() -> Self {
        Piece::Inline { start: 0, len: 0 }
    }
}

impl Piece {
    /// Bytes this piece contributes to the reassembled stream.
    pub const fn stream_len(&self) -> u64 {
        match *self {
            Piece::Inline { len, .. } => len as u64,
            Piece::Chunk { len, pad, .. } => len as u64 + pad as u64,
        }
    }
}

/// Pieces of a reassembled message.
pub type Pieces = FixedVec<Piece, PLAN_PIECES>;

/// How a Call travels (RFC 8166 section 3.5).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum CallKind {
    /// Short message (s3.5.1): RDMA_MSG, the whole Call inline, no Read chunks.
    #[default]
    Short,
    /// Chunked message (s3.5.2): RDMA_MSG, DDP-eligible items in Read chunks.
    Chunked,
    /// Long Call (s3.5.3): RDMA_NOMSG, the whole Call in a Position-Zero Read chunk.
    Long,
}

/// How a Reply travels (RFC 8166 section 3.5).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum ReplyKind {
    /// RDMA_MSG: the (possibly reduced) Reply follows the header in the Send
    /// (s3.5.1, s3.5.2).
    #[default]
    Short,
    /// Long Reply (s3.5.3): RDMA_NOMSG, the reduced Reply written into the Reply
    /// chunk.
    Long,
}

/// Why a plan could not be made, or the error a responder must answer with.
///
/// Responder-side errors map to the wire error through [`PlanError::v1`]
/// (RFC 8166 section 4.5) and [`PlanError::v2`] (draft -09 section 5.3.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PlanError {
    /// The protocol version is neither 1 nor 2.
    UnsupportedVersion { vers: u32 },
    /// The header type carries no RPC message (DONE, ERROR, CONNPROP).
    NotAMessage { htype: u32 },
    /// RDMA_MSGP received by a responder (RFC 8166 section 4.6: no longer used).
    MsgPUnsupported,
    /// An RDMA_NOMSG Call without a Position-Zero Read chunk: no Call to process.
    NoCallMessage,
    /// A Position-Zero Read chunk in an RDMA_MSG (s3.5.3: it only comes with NOMSG).
    PositionZeroInMsg,
    /// A Position-Zero Read chunk together with other Read chunks (s3.5.3: the
    /// PZRC carries the whole Call).
    PositionZeroNotAlone,
    /// A Read chunk's Position lies beyond the reassembled stream (s3.4.5).
    PositionBeyondPayload { position: u32, inline_len: u32 },
    /// A Read chunk's Position lies inside the previous chunk's data (s3.4.5).
    ChunkOverlap { position: u32 },
    /// More Read chunks than this responder processes (RDMA2_ERR_READ_CHUNKS).
    TooManyReadChunks { max: u32 },
    /// More Read segments than this responder processes (RDMA2_ERR_SEGMENTS).
    TooManyReadSegments { max: u32 },
    /// The Read chunks need more room than configured (s3.4.4: the ULP's
    /// wsize bounds what a Responder reads). `total` is the segment lengths'
    /// sum when that alone is too much, else the placed area: every chunk at a
    /// 4-byte aligned offset after the previous one and its XDR padding
    /// (s3.4.5.2), which is what the data buffer must hold. ERR_CHUNK in v1
    /// (s4.5), RDMA2_ERR_BAD_XDR (the same code) in v2.
    ReadTooLarge { total: u64, max: u64 },
    /// A reassembled message would be longer than `u32::MAX` bytes.
    MessageTooLong,
    /// A Write chunk is too short for its DDP-eligible result (draft s5.3.3
    /// RDMA2_ERR_WRITE_RESOURCE; `chunk_index` counts from 1).
    WriteResource { chunk_index: u32, length_needed: u32 },
    /// The reply fits neither inline nor the Reply chunk (draft s5.3.3
    /// RDMA2_ERR_REPLY_RESOURCE; RFC 8166 s4.5 ERR_CHUNK).
    ReplyResource { length_needed: u32 },
    /// The transport header alone exceeds the inline threshold.
    HeaderTooLarge { needed: u64, max: u32 },
    /// A DDP item is misplaced: unaligned, at offset 0, overlapping the previous
    /// item, or past the end of the message. `index` is its place in the slice.
    BadItem { index: u32 },
    /// The caller's chunks or segments do not match the plan (`what` says which).
    ChunkMismatch { what: &'static str },
    /// A reply header contradicts the chunks the Call provisioned (`what` says how).
    BadReply { what: &'static str },
    /// The output buffer is too small.
    Encode(EncodeError),
}

impl PlanError {
    /// The RPC-over-RDMA version 1 error to return (RFC 8166 section 4.5): every
    /// planning failure is ERR_CHUNK.
    pub const fn v1(&self) -> V1Error {
        V1Error::Chunk
    }

    /// The RPC-over-RDMA version 2 error to return (draft -09 section 5.3.3).
    pub const fn v2(&self) -> V2Error {
        match *self {
            PlanError::TooManyReadChunks { max } => V2Error::ReadChunks { max_chunks: max },
            PlanError::TooManyReadSegments { max } => V2Error::Segments { max_segments: max },
            PlanError::WriteResource {
                chunk_index,
                length_needed,
            } => V2Error::WriteResource {
                chunk_index,
                length_needed,
            },
            PlanError::ReplyResource { length_needed } => V2Error::ReplyResource { length_needed },
            PlanError::MsgPUnsupported | PlanError::NotAMessage { .. } => V2Error::InvalHtype,
            PlanError::HeaderTooLarge { .. }
            | PlanError::BadItem { .. }
            | PlanError::ChunkMismatch { .. }
            | PlanError::Encode(_) => V2Error::System,
            _ => V2Error::BadXdr,
        }
    }
}

impl From<EncodeError> for PlanError {
    fn from(e: EncodeError) -> Self {
        PlanError::Encode(e)
    }
}

impl fmt::Display for PlanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::UnsupportedVersion { vers } => write!(f, "unsupported RPC-over-RDMA version {vers}"),
            Self::NotAMessage { htype } => write!(f, "header type {htype} carries no RPC message"),
            Self::MsgPUnsupported => write!(f, "RDMA_MSGP is not supported"),
            Self::NoCallMessage => write!(f, "RDMA_NOMSG call without a position-zero read chunk"),
            Self::PositionZeroInMsg => write!(f, "position-zero read chunk in RDMA_MSG"),
            Self::PositionZeroNotAlone => write!(f, "position-zero read chunk with other read chunks"),
            Self::PositionBeyondPayload { position, inline_len } => {
                write!(
                    f,
                    "read position {position} beyond the payload ({inline_len} inline bytes)"
                )
            }
            Self::ChunkOverlap { position } => write!(f, "read chunk at {position} overlaps the previous chunk"),
            Self::TooManyReadChunks { max } => write!(f, "more than {max} read chunks"),
            Self::TooManyReadSegments { max } => write!(f, "more than {max} read segments"),
            Self::ReadTooLarge { total, max } => write!(f, "read chunks need {total} bytes, limit {max}"),
            Self::MessageTooLong => write!(f, "reassembled message longer than 4 GiB"),
            Self::WriteResource {
                chunk_index,
                length_needed,
            } => write!(f, "write chunk {chunk_index} too short: {length_needed} bytes needed"),
            Self::ReplyResource { length_needed } => {
                write!(f, "reply does not fit: {length_needed} reply chunk bytes needed")
            }
            Self::HeaderTooLarge { needed, max } => {
                write!(f, "transport header of {needed} bytes exceeds inline threshold {max}")
            }
            Self::BadItem { index } => write!(f, "DDP item {index} is misplaced"),
            Self::ChunkMismatch { what } => write!(f, "chunks do not match the plan: {what}"),
            Self::BadReply { what } => write!(f, "reply header does not match the call: {what}"),
            Self::Encode(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for PlanError {}

// ------------------------------------------------------------------ helpers

/// XDR roundup padding after `len` bytes (RFC 4506 s4.10).
#[inline]
const fn pad4(len: u64) -> u64 {
    (4 - (len & 3)) & 3
}

/// Bytes before the Read list: the prefix, plus `rdma_inv_handle` in v2
/// (RFC 8166 s4.1; draft s3.1 and s3.3).
#[inline]
pub(crate) fn fixed_len(vers: u32) -> Result<u64, PlanError> {
    match vers {
        RPCRDMA_VERSION_1 => Ok(V1_PREFIX_LEN as u64),
        RPCRDMA_VERSION_2 => Ok(V2_PREFIX_LEN as u64 + 4),
        vers => Err(PlanError::UnsupportedVersion { vers }),
    }
}

/// Encoded size of a Write chunk or Reply chunk entry with `segments` segments,
/// including its optional-data word and count.
#[inline]
pub(crate) const fn write_entry_len(segments: u64) -> u64 {
    8 + segments * SEGMENT_LEN as u64
}

/// Check that DDP items are in stream order, 4-byte aligned, not at offset 0
/// (that would read as a Position-Zero chunk), and that each item and its XDR
/// padding lie inside a message of `msg_len` bytes without overlapping
/// (RFC 8166 s3.4.4.4, s3.4.5). Returns the bytes the items occupy (with padding).
/// Whether `items` are valid DDP-eligible items of a message of `msg_len`
/// bytes (what [`plan_reply`] checks first; RFC 8166 s3.4.4.4 and s6.1):
/// non-zero, 4-byte aligned offsets in order, each with its padding inside
/// the message.
pub fn items_valid(items: &[DdpItem], msg_len: u64) -> bool {
    check_items(items, msg_len).is_ok()
}

fn check_items(items: &[DdpItem], msg_len: u64) -> Result<u64, PlanError> {
    let mut end = 0u64;
    let mut removed = 0u64;
    for (i, it) in items.iter().enumerate() {
        let off = it.offset as u64;
        let size = it.len as u64 + pad4(it.len as u64);
        if off == 0 || !off.is_multiple_of(4) || off < end || off + size > msg_len {
            return Err(PlanError::BadItem {
                index: u32::try_from(i).unwrap_or(u32::MAX),
            });
        }
        end = off + size;
        removed += size;
    }
    Ok(removed)
}

/// Iterator over the ranges of a message left after removing `items` (each with
/// its XDR padding, RFC 8166 s3.4.4.4): the reduced Payload stream.
#[derive(Clone, Debug)]
pub struct ReducedRanges<'p> {
    items: &'p [DdpItem],
    cursor: u64,
    end: u64,
    done: bool,
}

impl<'p> ReducedRanges<'p> {
    fn new(items: &'p [DdpItem], msg_len: u32) -> Self {
        Self {
            items,
            cursor: 0,
            end: msg_len as u64,
            done: false,
        }
    }
}

impl Iterator for ReducedRanges<'_> {
    type Item = ByteRange;
    fn next(&mut self) -> Option<ByteRange> {
        loop {
            if let Some((it, rest)) = self.items.split_first() {
                self.items = rest;
                let start = self.cursor;
                let stop = (it.offset as u64).clamp(start, self.end);
                self.cursor = (it.offset as u64 + it.len as u64 + pad4(it.len as u64)).clamp(stop, self.end);
                if stop > start {
                    return Some(range_u64(start, stop));
                }
            } else if !self.done {
                self.done = true;
                if self.end > self.cursor {
                    return Some(range_u64(self.cursor, self.end));
                }
            } else {
                return None;
            }
        }
    }
}

/// `[start, stop)` as a [`ByteRange`]; callers keep both within a u32 message.
#[inline]
fn range_u64(start: u64, stop: u64) -> ByteRange {
    ByteRange {
        start: start as u32,
        len: (stop - start) as u32,
    }
}

/// Checked narrowing for lengths already bounded by a u32 message length.
#[inline]
fn to_u32(v: u64) -> Result<u32, PlanError> {
    u32::try_from(v).map_err(|_| PlanError::MessageTooLong)
}

mod call;
mod reads;
mod reassemble;
mod reply;
#[cfg(test)]
mod tests;

pub use call::*;
pub use reads::*;
pub use reassemble::*;
pub use reply::*;
