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
//! Functions here may be called from any core; nothing holds shared state.

use core::fmt;

use crate::error::EncodeError;
use crate::header::{
    Body, ChunkLists, Header, ReadList, Segment, SegmentArray, WriteChunks, MAX_CHUNK_SEGMENTS, MAX_READ_CHUNKS,
    MAX_READ_SEGMENTS, MAX_WRITE_CHUNKS, READ_ENTRY_LEN, RPCRDMA_VERSION_1, RPCRDMA_VERSION_2, SEGMENT_LEN,
    V1_PREFIX_LEN, V2_PREFIX_LEN,
};
use crate::header::{V1Error, V2Error};
use crate::ulb::{DdpItem, UpperLayerBinding};

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
/// Lives in [`crate::header`] (`header::encode_one_write_reply_header`); re-exported here.
pub use crate::header::encode_one_write_reply_header;
/// Lives in [`crate::header`] (`header::encode_reply_header`); re-exported here.
pub use crate::header::encode_reply_header;
/// Lives in [`crate::header`] (`header::encode_short_reply_header`); re-exported here.
pub use crate::header::encode_short_reply_header;
/// Lives in [`crate::header`] (`header::one_write_header_len`); re-exported here.
pub use crate::header::one_write_header_len;

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

// ================================================================== requester

/// Connection parameters for [`plan_call`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CallParams {
    /// RPC-over-RDMA version of the connection (1 or 2).
    pub vers: u32,
    /// Largest Send the responder accepts: the call inline threshold
    /// (RFC 8166 s3.3.2; v2: the responder's RBSIZ, draft s4.2.1).
    pub call_inline_max: u32,
    /// Largest Send the requester accepts: the reply inline threshold (our own
    /// Receive buffer size).
    pub reply_inline_max: u32,
    /// Whether DDP (Read and Write chunks for DDP-eligible items) is used at all.
    pub ddp: bool,
    /// Segments the caller will use per chunk at most; header sizes are computed
    /// with this many (at least 1). [`encode_call_header`] rechecks the real size.
    pub max_segments_per_chunk: u32,
    /// Include each item's XDR roundup padding in its Read chunk. RFC 8166
    /// s3.4.5.2 says a Requester SHOULD NOT; this exists to exercise responders.
    pub pad_read_chunks: bool,
}

impl CallParams {
    /// Parameters for `vers` with the v1 default thresholds of 1024 bytes
    /// (RFC 8166 s3.3.2), DDP on, one segment per chunk, no Read chunk padding.
    pub const fn new(vers: u32) -> Self {
        Self {
            vers,
            call_inline_max: 1024,
            reply_inline_max: 1024,
            ddp: true,
            max_segments_per_chunk: 1,
            pad_read_chunks: false,
        }
    }
}

/// What a reply may need, from the Upper-Layer Binding (RFC 8166 s6.1, s6.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct ReplyNeeds {
    /// Largest size of each DDP-eligible result, in reply stream order: one Write
    /// chunk is provisioned per entry (s3.4.6), without roundup space (s3.4.6.2).
    pub write_chunks: FixedVec<u32, PLAN_WRITE_CHUNKS>,
    /// Upper bound on the reply's size after those results are removed (s6.2).
    pub max_reply_size: u32,
}

impl ReplyNeeds {
    /// Needs with the given Write chunk sizes; `None` if more than
    /// [`PLAN_WRITE_CHUNKS`].
    pub fn new(write_chunks: &[u32], max_reply_size: u32) -> Option<Self> {
        Some(Self {
            write_chunks: FixedVec::from_slice(write_chunks)?,
            max_reply_size,
        })
    }

    /// Needs of a call of `(version, procedure)` according to `ulb`: one Write
    /// chunk of [`UpperLayerBinding::reply_ddp_max`] bytes if the procedure has a
    /// DDP-eligible result, and its [`UpperLayerBinding::max_reply_size`].
    pub fn from_ulb(ulb: &dyn UpperLayerBinding, version: u32, procedure: u32) -> Self {
        let mut write_chunks = FixedVec::new();
        if let Some(n) = ulb.reply_ddp_max(version, procedure) {
            // Capacity is at least 1 (const assertion above), so this push fits.
            let _ = write_chunks.push(n);
        }
        Self {
            write_chunks,
            max_reply_size: ulb.max_reply_size(version, procedure),
        }
    }
}

/// A Read chunk the requester exposes: its Position and the Call bytes it holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct ReadExpose {
    /// Position in the unreduced Call (RFC 8166 s3.4.5); 0 for the PZRC.
    pub position: u32,
    /// Bytes of the unreduced Call that go in this chunk (the chunk's length).
    pub range: ByteRange,
}

/// The requester's plan for one Call. See [`plan_call`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CallPlan {
    pub vers: u32,
    pub kind: CallKind,
    /// Length of the unreduced Call.
    pub call_len: u32,
    /// Read chunks to expose, in Position order (one PZRC for [`CallKind::Long`]).
    pub reads: FixedVec<ReadExpose, PLAN_READ_CHUNKS>,
    /// The inline payload, as ranges of the Call to send after the header, in
    /// order (empty for [`CallKind::Long`]).
    pub inline: FixedVec<ByteRange, PLAN_INLINE_RANGES>,
    /// Total bytes of `inline`.
    pub inline_len: u32,
    /// Write chunks to provision, with their lengths (s3.4.6).
    pub write_chunks: FixedVec<u32, PLAN_WRITE_CHUNKS>,
    /// Reply chunk to provision, with its length (s3.5.3), if any.
    pub reply_chunk: Option<u32>,
    /// The call inline threshold the plan was made for.
    pub call_inline_max: u32,
}

/// Plan a Call of `call_len` bytes (the unreduced RPC message, starting at its
/// XID) whose DDP-eligible items are `items` (from
/// [`UpperLayerBinding::call_items`], in stream order).
///
/// Rules applied:
/// - Reply provisioning first, because it shapes the Call's header: with DDP on,
///   one Write chunk per entry of `needs.write_chunks`, exactly that long
///   (s3.4.6, s3.4.6.2: no room for roundup); a Reply chunk when the reply
///   header plus the largest possible reply (s6.2; with DDP off the results
///   stay in the reply, padded) exceeds `reply_inline_max` (s3.5.3).
/// - Short message if header plus Call fit `call_inline_max` (s3.5.1).
/// - Otherwise, with DDP on and at most [`PLAN_READ_CHUNKS`] items, every item
///   goes in its own Read chunk (s3.5.2): Position = the item's offset in the
///   unreduced Call (s3.4.5), length = the item's length without roundup
///   (s3.4.5.2 SHOULD NOT include it, unless `pad_read_chunks`); the item and
///   its padding leave the inline payload (s3.4.4.4); its XDR length word stays
///   inline (s3.4.4.1).
/// - If that still does not fit, or nothing could be reduced, a Long Call: the
///   whole Call in a Position-Zero Read chunk with RDMA_NOMSG (s3.5.3).
///
/// Header sizes assume `max_segments_per_chunk` segments per chunk.
pub fn plan_call(
    call_len: usize,
    items: &[DdpItem],
    needs: &ReplyNeeds,
    p: &CallParams,
) -> Result<CallPlan, PlanError> {
    let fixed = fixed_len(p.vers)?;
    let call_len32 = u32::try_from(call_len).map_err(|_| PlanError::MessageTooLong)?;
    let len = call_len32 as u64;
    let removed = check_items(items, len)?;
    let segs = p.max_segments_per_chunk.max(1) as u64;
    let max = p.call_inline_max as u64;

    // Reply resources (s3.4.6, s3.5.3, s6.2).
    let mut write_chunks = FixedVec::new();
    let mut reply_bound = needs.max_reply_size as u64;
    if p.ddp {
        write_chunks = needs.write_chunks;
    } else {
        reply_bound += needs
            .write_chunks
            .iter()
            .map(|&n| n as u64 + pad4(n as u64))
            .sum::<u64>();
    }
    let writes_len: u64 = write_chunks.len() as u64 * write_entry_len(segs) + 4;
    // The reply's header when it comes inline: fixed, empty Read list, the echoed
    // Write list, an absent Reply chunk.
    let reply_inline_hdr = fixed + 4 + writes_len + 4;
    let reply_chunk = if reply_inline_hdr + reply_bound > p.reply_inline_max as u64 {
        // The Long reply's header (Reply chunk echoed) must itself fit a Send.
        let long_hdr = reply_inline_hdr - 4 + write_entry_len(segs);
        if long_hdr > p.reply_inline_max as u64 {
            return Err(PlanError::HeaderTooLarge {
                needed: long_hdr,
                max: p.reply_inline_max,
            });
        }
        Some(to_u32(reply_bound + pad4(reply_bound))?)
    } else {
        None
    };
    let call_hdr0 = fixed
        + 4
        + writes_len
        + if reply_chunk.is_some() {
            write_entry_len(segs)
        } else {
            4
        };

    let mut plan = CallPlan {
        vers: p.vers,
        kind: CallKind::Short,
        call_len: call_len32,
        reads: FixedVec::new(),
        inline: FixedVec::new(),
        inline_len: 0,
        write_chunks,
        reply_chunk,
        call_inline_max: p.call_inline_max,
    };

    // s3.5.1 Short message.
    if call_hdr0 + len <= max {
        if len > 0
            && !plan.inline.push(ByteRange {
                start: 0,
                len: call_len32,
            })
        {
            return Err(PlanError::MessageTooLong);
        }
        plan.inline_len = call_len32;
        return Ok(plan);
    }

    // s3.5.2 Chunked message.
    if p.ddp && !items.is_empty() && items.len() <= PLAN_READ_CHUNKS {
        let reads_len = items.len() as u64 * segs * READ_ENTRY_LEN as u64;
        let reduced = len - removed;
        if call_hdr0 + reads_len + reduced <= max {
            for it in items {
                let chunk_len = if p.pad_read_chunks {
                    it.len as u64 + pad4(it.len as u64)
                } else {
                    it.len as u64
                };
                let ok = plan.reads.push(ReadExpose {
                    position: it.offset,
                    range: ByteRange {
                        start: it.offset,
                        len: to_u32(chunk_len)?,
                    },
                });
                if !ok {
                    return Err(PlanError::ChunkMismatch {
                        what: "read chunk capacity",
                    });
                }
            }
            for r in ReducedRanges::new(items, call_len32) {
                if !plan.inline.push(r) {
                    return Err(PlanError::ChunkMismatch {
                        what: "inline range capacity",
                    });
                }
            }
            plan.kind = CallKind::Chunked;
            plan.inline_len = to_u32(reduced)?;
            return Ok(plan);
        }
    }

    // s3.5.3 Long Call.
    let needed = call_hdr0 + segs * READ_ENTRY_LEN as u64;
    if needed > max {
        return Err(PlanError::HeaderTooLarge {
            needed,
            max: p.call_inline_max,
        });
    }
    plan.kind = CallKind::Long;
    if !plan.reads.push(ReadExpose {
        position: 0,
        range: ByteRange {
            start: 0,
            len: call_len32,
        },
    }) {
        return Err(PlanError::ChunkMismatch {
            what: "read chunk capacity",
        });
    }
    Ok(plan)
}

/// What a reply delivered, as seen by the requester. See [`reassemble_reply`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct ReplyLayout {
    pub kind: ReplyKind,
    /// Length of the reduced reply: the inline payload for [`ReplyKind::Short`],
    /// the bytes written into the Reply chunk for [`ReplyKind::Long`].
    pub reduced_len: u32,
    /// Bytes the responder wrote into each Write chunk of the Call, in order
    /// (0 for an unused chunk).
    pub write_lens: FixedVec<u32, PLAN_WRITE_CHUNKS>,
}

/// Check one echoed chunk against the provisioned one (RFC 8166 s3.4.6: same
/// segment count and segments, lengths updated to what was written, filled in
/// segment array order). Returns the bytes written.
fn check_echo<P: Provisioned>(got: &SegmentArray<'_>, sent: &P) -> Result<u32, PlanError> {
    if got.len() != sent.count() {
        return Err(PlanError::BadReply {
            what: "segment count changed",
        });
    }
    let mut total = 0u64;
    let mut short_seen = false;
    for (i, g) in got.iter().enumerate() {
        let s = sent.segment(i);
        if g.handle != s.handle || g.offset != s.offset {
            return Err(PlanError::BadReply {
                what: "segment changed",
            });
        }
        if g.length > s.length {
            return Err(PlanError::BadReply {
                what: "segment length above provisioned",
            });
        }
        if short_seen && g.length != 0 {
            return Err(PlanError::BadReply {
                what: "chunk not filled in segment order",
            });
        }
        short_seen |= g.length < s.length;
        total += g.length as u64;
    }
    to_u32(total)
}

/// A chunk as the Call provisioned it: decoded from the Call's header, or
/// the segments the requester advertised.
trait Provisioned {
    fn count(&self) -> usize;
    /// Segment `i < count()`.
    fn segment(&self, i: usize) -> Segment;
}

impl Provisioned for SegmentArray<'_> {
    #[inline]
    fn count(&self) -> usize {
        self.len()
    }
    #[inline]
    fn segment(&self, i: usize) -> Segment {
        self.get(i).unwrap_or_default()
    }
}

impl Provisioned for &[Segment] {
    #[inline]
    fn count(&self) -> usize {
        self.len()
    }
    #[inline]
    fn segment(&self, i: usize) -> Segment {
        self.get(i).copied().unwrap_or_default()
    }
}

/// Requester side: check a decoded reply header against the chunks the Call
/// provisioned (`call`, the Call's own decoded chunk lists) and report what was
/// delivered.
///
/// Rules checked: a reply carries no Read list; every Write chunk of the Call
/// comes back with the same segments and lengths no larger than provisioned,
/// filled in segment order (s3.4.6); RDMA_NOMSG means the reply is in the Reply
/// chunk (s3.5.3), which must then be echoed; an RDMA_MSG reply may echo the
/// Reply chunk only with nothing written in it. The data of Write chunk `k`
/// belongs at the place of the `k`th DDP-eligible result, whose XDR length word
/// stayed inline (s3.4.4.1, s3.4.6.1); see [`ReplyLayout::pieces`].
pub fn reassemble_reply(reply: &Header<'_>, call: &ChunkLists<'_>) -> Result<ReplyLayout, PlanError> {
    reassemble(reply, call.writes.len(), call.writes.iter(), call.reply)
}

/// [`reassemble_reply`] against the segments the requester advertised in its
/// Call (`writes[k]`: Write chunk `k`; `reply`: the Reply chunk), which it
/// keeps, instead of the Call's decoded chunk lists: the same checks, without
/// decoding the Call's header again.
pub fn reassemble_reply_provisioned(
    reply: &Header<'_>,
    writes: &[&[Segment]],
    reply_chunk: Option<&[Segment]>,
) -> Result<ReplyLayout, PlanError> {
    reassemble(reply, writes.len(), writes.iter().copied(), reply_chunk)
}

fn reassemble<P: Provisioned>(
    reply: &Header<'_>,
    call_writes: usize,
    call_write_chunks: impl Iterator<Item = P>,
    call_reply: Option<P>,
) -> Result<ReplyLayout, PlanError> {
    let (chunks, payload_len, long) = match &reply.body {
        Body::Msg { chunks, payload, .. } => (chunks, payload.len(), false),
        Body::NoMsg { chunks, .. } => (chunks, 0, true),
        _ => {
            return Err(PlanError::NotAMessage {
                htype: reply.header_type().code(),
            })
        }
    };
    if !chunks.reads.is_empty() {
        return Err(PlanError::BadReply {
            what: "read list in a reply",
        });
    }
    if chunks.writes.len() != call_writes {
        return Err(PlanError::BadReply {
            what: "write chunk count changed",
        });
    }
    let mut out = ReplyLayout::default();
    for (g, s) in chunks.writes.iter().zip(call_write_chunks) {
        let n = check_echo(&g, &s)?;
        if !out.write_lens.push(n) {
            return Err(PlanError::BadReply {
                what: "too many write chunks",
            });
        }
    }
    let in_reply_chunk = match (chunks.reply, call_reply) {
        (Some(g), Some(s)) => Some(check_echo(&g, &s)?),
        (Some(_), None) => {
            return Err(PlanError::BadReply {
                what: "reply chunk not provisioned",
            })
        }
        (None, _) => None,
    };
    if long {
        out.kind = ReplyKind::Long;
        out.reduced_len = in_reply_chunk.ok_or(PlanError::BadReply {
            what: "RDMA_NOMSG without the reply chunk",
        })?;
    } else {
        if in_reply_chunk.unwrap_or(0) != 0 {
            return Err(PlanError::BadReply {
                what: "RDMA_MSG with data in the reply chunk",
            });
        }
        out.kind = ReplyKind::Short;
        out.reduced_len = to_u32(payload_len as u64)?;
    }
    Ok(out)
}

impl ReplyLayout {
    /// The layout of a Reply that arrived as an RDMA_MSG / RDMA2_MSG with
    /// three empty chunk lists to a Call that provisioned no Write chunk:
    /// Short, the `payload_len` inline bytes being the whole reply (what
    /// [`reassemble_reply_provisioned`] returns for it, whether or not the
    /// Call provisioned a Reply chunk, which such a Reply leaves unused).
    ///
    /// May be called from any core.
    #[inline]
    pub fn short_inline(payload_len: u32) -> ReplyLayout {
        ReplyLayout {
            kind: ReplyKind::Short,
            reduced_len: payload_len,
            write_lens: FixedVec::new(),
        }
    }

    /// The reply's pieces in stream order, given where each reduced result
    /// belongs: `positions[k]` is the offset in the *reduced* reply at which
    /// Write chunk `k`'s data is reinserted (just after the item's XDR length
    /// word, s3.4.4.1). Each chunk piece has the XDR padding the responder left
    /// out (s3.4.6.2). `positions` may be shorter than the Write list (a result
    /// absent from this reply, e.g. an error status) and must be non-decreasing
    /// and within the reduced reply.
    pub fn pieces(&self, positions: &[u32]) -> Result<Pieces, PlanError> {
        if positions.len() > self.write_lens.len() {
            return Err(PlanError::ChunkMismatch {
                what: "more positions than write chunks",
            });
        }
        let mut out = Pieces::new();
        let mut cursor = 0u32;
        for (k, (&pos, &len)) in positions.iter().zip(self.write_lens.iter()).enumerate() {
            if pos < cursor || pos > self.reduced_len {
                return Err(PlanError::ChunkMismatch { what: "position" });
            }
            let ok = (pos == cursor
                || out.push(Piece::Inline {
                    start: cursor,
                    len: pos - cursor,
                }))
                && out.push(Piece::Chunk {
                    index: k as u32,
                    len,
                    pad: pad4(len as u64) as u32,
                });
            if !ok {
                return Err(PlanError::ChunkMismatch { what: "piece capacity" });
            }
            cursor = pos;
        }
        if cursor < self.reduced_len
            && !out.push(Piece::Inline {
                start: cursor,
                len: self.reduced_len - cursor,
            })
        {
            return Err(PlanError::ChunkMismatch { what: "piece capacity" });
        }
        Ok(out)
    }
}

// ================================================================== responder

/// A responder's bounds on what it reads for one Call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadLimits {
    /// Most bytes of Read chunks (all together) it pulls for one Call: the ULP's
    /// largest argument (wsize) plus the largest Call for a Position-Zero chunk
    /// (RFC 8166 s3.4.4, s8). It bounds the whole chunk data area
    /// ([`ReadPlan::data_area_len`]), the room for each chunk's XDR padding
    /// included (s3.4.5.2), so a caller that pulls the chunks into one buffer
    /// passes at most that buffer's size.
    pub max_total_bytes: u64,
    /// Most Read chunks it processes (capped at [`PLAN_READ_CHUNKS`]); more is
    /// RDMA2_ERR_READ_CHUNKS (draft s5.3.3).
    pub max_chunks: u32,
    /// Most Read segments it processes; more is RDMA2_ERR_SEGMENTS.
    pub max_segments: u32,
}

impl ReadLimits {
    /// `max_total_bytes` with the header decoder's default chunk and segment limits.
    pub const fn new(max_total_bytes: u64) -> Self {
        Self {
            max_total_bytes,
            max_chunks: MAX_READ_CHUNKS,
            max_segments: MAX_READ_SEGMENTS,
        }
    }
}

/// One RDMA Read to issue: pull `segment` into the chunk data area at
/// `dest_offset`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ReadOp {
    /// Index of the Read chunk (in Position order).
    pub chunk: u32,
    /// The requester's memory to read (handle, length, remote offset).
    pub segment: Segment,
    /// Where the data goes in the local chunk data area.
    pub dest_offset: u32,
}

/// The responder's plan for receiving one Call. See [`plan_reads`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct ReadPlan {
    pub kind: CallKind,
    pieces: Pieces,
    chunk_offsets: FixedVec<u32, PLAN_READ_CHUNKS>,
    /// Bytes to pull with RDMA Read (sum of every Read segment's length).
    pub read_bytes: u64,
    /// Size of the chunk data area: every chunk placed at a 4-byte aligned
    /// offset ([`ReadPlan::chunk_offset`]), each followed by room for its padding.
    pub data_area_len: u32,
    /// Length of the received inline payload (0 for RDMA_NOMSG).
    pub inline_len: u32,
    /// Length of the reassembled (unreduced) Call.
    pub stream_len: u32,
}

impl ReadPlan {
    /// The reassembled Call, in stream order: inline payload ranges and chunk data.
    pub fn pieces(&self) -> &[Piece] {
        &self.pieces
    }
    /// Number of Read chunks.
    pub fn chunk_count(&self) -> usize {
        self.chunk_offsets.len()
    }
    /// Offset of chunk `index` in the chunk data area. Chunks sit at offsets that
    /// are multiples of 4, with room after each for its padding, so if the area
    /// is zeroed, chunk data plus padding is one contiguous slice.
    pub fn chunk_offset(&self, index: u32) -> Option<u32> {
        self.chunk_offsets.get(index as usize).copied()
    }
    /// The RDMA Reads to issue, lazily, from the same Read list the plan was
    /// made from: every non-empty segment, in list order, with its destination
    /// in the chunk data area (segments of a chunk are concatenated, s3.4.5).
    pub fn read_ops<'a>(&self, reads: &ReadList<'a>) -> impl Iterator<Item = ReadOp> + 'a {
        let offsets = self.chunk_offsets;
        let mut chunk: Option<(u32, u32)> = None; // (index, position)
        let mut dest = 0u64;
        reads
            .segments()
            .map_while(move |rs| {
                let idx = match chunk {
                    Some((i, p)) if p == rs.position => i,
                    Some((i, _)) => i.checked_add(1)?,
                    None => 0,
                };
                if chunk.map(|c| c.0) != Some(idx) {
                    dest = *offsets.get(idx as usize)? as u64;
                    chunk = Some((idx, rs.position));
                }
                let op = ReadOp {
                    chunk: idx,
                    segment: rs.target,
                    dest_offset: u32::try_from(dest).ok()?,
                };
                dest += rs.target.length as u64;
                Some(op)
            })
            .filter(|op| op.segment.length != 0)
    }
}

/// Responder side: validate a received Call's Read list and plan the RDMA Reads
/// and the reassembly, before acting on any of it (as Linux svcrdma does).
///
/// Rules applied:
/// - RDMA_MSG: no Position-Zero Read chunk (s3.5.3); each Read chunk's Position
///   lies in the unreduced stream: Position minus the chunk bytes (with padding)
///   already reinserted before it is at most the inline payload length, and not
///   inside the previous chunk (s3.4.5). Positions are multiples of 4 and
///   increasing (checked by the header decoder).
/// - RDMA_NOMSG: exactly one Read chunk, at Position zero, holding the whole
///   Call (s3.5.3); a NOMSG Call without it has no message.
/// - RDMA_MSGP is refused (s4.6).
/// - At most `limits.max_chunks` chunks and `limits.max_segments` segments, and
///   the chunk data area, every chunk placed after the previous one and its
///   XDR padding (s3.4.5.2), at most `limits.max_total_bytes` (s3.4.4: the
///   ULP's wsize bounds what a responder reads). So `data_area_len` never
///   exceeds the limit, and every RDMA Read lands inside a buffer of that size.
/// - A chunk whose length is not a multiple of 4 did not include its roundup;
///   the piece says how much padding to insert (s3.4.5.2: the requester may or
///   may not include it).
///
/// Errors map to the reply with [`PlanError::v1`] / [`PlanError::v2`].
pub fn plan_reads(h: &Header<'_>, limits: &ReadLimits) -> Result<ReadPlan, PlanError> {
    let mut plan = ReadPlan::default();
    plan_reads_into(h, limits, &mut plan)?;
    Ok(plan)
}

/// The plan of a Call without Read chunks whose `inline_len` bytes of RPC
/// message arrived inline (an RDMA_MSG with an empty Read list): a Short
/// Call, the stream being the inline payload alone, nothing to pull. What
/// [`plan_reads_into`] writes for such a header, for a caller that has
/// already seen the Read list empty (the one-step decoders).
///
/// May be called from any core.
#[inline]
pub fn plan_inline_call_into(inline_len: u32, plan: &mut ReadPlan) {
    plan.kind = CallKind::Short;
    plan.pieces.clear();
    plan.chunk_offsets.clear();
    plan.read_bytes = 0;
    plan.data_area_len = 0;
    plan.inline_len = inline_len;
    plan.stream_len = inline_len;
    if inline_len > 0 {
        // Capacity: a cleared vector takes one piece.
        let _ = plan.pieces.push(Piece::Inline {
            start: 0,
            len: inline_len,
        });
    }
}

/// [`plan_reads`] into a plan the caller keeps (e.g. in a request slot),
/// without building and moving a new one. `plan` is overwritten; after an
/// error its contents are unspecified.
pub fn plan_reads_into(h: &Header<'_>, limits: &ReadLimits, plan: &mut ReadPlan) -> Result<(), PlanError> {
    let (chunks, payload, nomsg) = match &h.body {
        Body::Msg { chunks, payload, .. } => (chunks, *payload, false),
        Body::NoMsg { chunks, .. } => (chunks, &[][..], true),
        Body::MsgP { .. } => return Err(PlanError::MsgPUnsupported),
        _ => {
            return Err(PlanError::NotAMessage {
                htype: h.header_type().code(),
            })
        }
    };
    let reads = &chunks.reads;
    if reads.is_empty() && !nomsg {
        // No Read chunk (most Calls): the Call is the inline payload alone.
        plan_inline_call_into(to_u32(payload.len() as u64)?, plan);
        return Ok(());
    }
    let max_chunks = limits.max_chunks.min(PLAN_READ_CHUNKS as u32);
    if reads.chunk_count() > max_chunks as usize {
        return Err(PlanError::TooManyReadChunks { max: max_chunks });
    }
    if reads.segment_count() > limits.max_segments as usize {
        return Err(PlanError::TooManyReadSegments {
            max: limits.max_segments,
        });
    }
    let total: u64 = reads.segments().map(|s| s.target.length as u64).sum();
    if total > limits.max_total_bytes {
        return Err(PlanError::ReadTooLarge {
            total,
            max: limits.max_total_bytes,
        });
    }
    let inline_len = to_u32(payload.len() as u64)?;
    plan.kind = CallKind::default();
    plan.pieces.clear();
    plan.chunk_offsets.clear();
    plan.read_bytes = total;
    plan.data_area_len = 0;
    plan.inline_len = inline_len;
    plan.stream_len = 0;
    let overflow = PlanError::TooManyReadChunks { max: max_chunks };

    if nomsg {
        let pz = reads.position_zero().ok_or(PlanError::NoCallMessage)?;
        if reads.chunk_count() != 1 {
            return Err(PlanError::PositionZeroNotAlone);
        }
        let len = pz.total_len();
        let pad = pad4(len);
        plan.kind = CallKind::Long;
        if !plan.chunk_offsets.push(0)
            || !plan.pieces.push(Piece::Chunk {
                index: 0,
                len: to_u32(len)?,
                pad: pad as u32,
            })
        {
            return Err(overflow);
        }
        check_area(len + pad, limits)?;
        plan.data_area_len = to_u32(len + pad)?;
        plan.stream_len = plan.data_area_len;
        return Ok(());
    }

    let inline = inline_len as u64;
    let mut cursor = 0u64; // next unconsumed inline byte
    let mut spliced = 0u64; // chunk bytes (with padding) reinserted so far
    let mut area = 0u64;
    for (i, c) in reads.chunks().enumerate() {
        if c.position == 0 {
            return Err(PlanError::PositionZeroInMsg);
        }
        let pos = c.position as u64;
        if pos < spliced + cursor {
            return Err(PlanError::ChunkOverlap { position: c.position });
        }
        let at = pos - spliced;
        if at > inline {
            return Err(PlanError::PositionBeyondPayload {
                position: c.position,
                inline_len,
            });
        }
        let len = c.total_len();
        let pad = pad4(len);
        let ok = (at == cursor
            || plan.pieces.push(Piece::Inline {
                start: cursor as u32,
                len: (at - cursor) as u32,
            }))
            && plan.pieces.push(Piece::Chunk {
                index: i as u32,
                len: to_u32(len)?,
                pad: pad as u32,
            })
            && plan.chunk_offsets.push(to_u32(area)?);
        if !ok {
            return Err(overflow);
        }
        area += len + pad;
        spliced += len + pad;
        cursor = at;
    }
    if cursor < inline
        && !plan.pieces.push(Piece::Inline {
            start: cursor as u32,
            len: (inline - cursor) as u32,
        })
    {
        return Err(overflow);
    }
    check_area(area, limits)?;
    plan.kind = if reads.is_empty() {
        CallKind::Short
    } else {
        CallKind::Chunked
    };
    plan.data_area_len = to_u32(area)?;
    plan.stream_len = to_u32(inline + spliced)?;
    Ok(())
}

/// The placed chunk data area, padding included, within the limit: the
/// segment lengths alone may fit while chunk k, placed after the earlier
/// chunks and their XDR padding (RFC 8166 s3.4.5.2), ends past it (chunks of
/// 1 and D-1 bytes need D+3).
fn check_area(area: u64, limits: &ReadLimits) -> Result<(), PlanError> {
    if area > limits.max_total_bytes {
        return Err(PlanError::ReadTooLarge {
            total: area,
            max: limits.max_total_bytes,
        });
    }
    Ok(())
}

/// Which chunk an RDMA Write targets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WriteTarget {
    /// Write chunk `k` (0-based, Write list order).
    Write(u32),
    /// The Reply chunk.
    Reply,
}

/// One RDMA Write to issue: `src` bytes of the unreduced reply to `target`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct WriteOp {
    /// Bytes of the unreduced reply stream to send.
    pub src: ByteRange,
    /// Remote memory: the segment's handle, the remote offset to write at, and
    /// `length == src.len`.
    pub target: Segment,
    pub chunk: WriteTarget,
}

/// The responder's plan for one Reply. See [`plan_reply`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplyPlan {
    pub vers: u32,
    pub kind: ReplyKind,
    /// Length of the unreduced reply.
    pub reply_len: u32,
    /// Length of the reduced reply (inline payload, or Reply chunk contents).
    pub reduced_len: u32,
    /// Length of the reply's transport header.
    pub header_len: u32,
    /// Items reduced: item `k` goes in Write chunk `k`.
    pub(crate) items: FixedVec<DdpItem, PLAN_WRITE_CHUNKS>,
    /// Write chunks in the Call (all echoed).
    pub(crate) write_chunks: u32,
}

impl ReplyPlan {
    /// The DDP-eligible items moved to Write chunks; item `k` in chunk `k`.
    pub fn reduced_items(&self) -> &[DdpItem] {
        &self.items
    }
    /// Bytes of the Send: the header, plus the reduced reply when it is inline.
    pub fn send_len(&self) -> u64 {
        self.header_len as u64
            + match self.kind {
                ReplyKind::Short => self.reduced_len as u64,
                ReplyKind::Long => 0,
            }
    }
    /// The reduced reply as ranges of the unreduced reply: what follows the
    /// header inline ([`ReplyKind::Short`]) or goes in the Reply chunk
    /// ([`ReplyKind::Long`]). It keeps all XDR padding except that of the items
    /// moved to Write chunks (s3.4.4.4, s3.5.3).
    pub fn reduced_ranges(&self) -> ReducedRanges<'_> {
        ReducedRanges::new(&self.items, self.reply_len)
    }
    /// The RDMA Writes to issue before the Send, lazily: each reduced item into
    /// its Write chunk, filling segments in array order with no roundup padding
    /// (s3.4.6, s3.4.6.2), then for a Long reply the reduced reply into the Reply
    /// chunk's segments (s3.5.3). `call` must be the chunk lists the plan was
    /// made from.
    pub fn write_ops<'a, 'p>(&'p self, call: &ChunkLists<'a>) -> WriteOps<'a, 'p> {
        WriteOps {
            items: &self.items,
            k: 0,
            chunks: call.writes.iter(),
            cur: None,
            seg: 0,
            done: 0,
            reply: if self.kind == ReplyKind::Long { call.reply } else { None },
            ranges: self.reduced_ranges(),
            range: None,
            rseg: 0,
            rseg_used: 0,
        }
    }
}

/// Iterator of [`WriteOp`]s. See [`ReplyPlan::write_ops`].
#[derive(Clone, Debug)]
pub struct WriteOps<'a, 'p> {
    items: &'p [DdpItem],
    k: usize,
    chunks: WriteChunks<'a>,
    cur: Option<SegmentArray<'a>>,
    seg: usize,
    done: u32,
    reply: Option<SegmentArray<'a>>,
    ranges: ReducedRanges<'p>,
    range: Option<ByteRange>,
    rseg: usize,
    rseg_used: u32,
}

impl Iterator for WriteOps<'_, '_> {
    type Item = WriteOp;
    fn next(&mut self) -> Option<WriteOp> {
        // Write chunks.
        while let Some(item) = self.items.get(self.k) {
            let chunk = match self.cur {
                Some(c) => c,
                None => {
                    let Some(c) = self.chunks.next() else {
                        self.k = self.items.len();
                        break;
                    };
                    self.cur = Some(c);
                    self.seg = 0;
                    self.done = 0;
                    c
                }
            };
            let left = item.len - self.done.min(item.len);
            match chunk.get(self.seg) {
                Some(s) if left > 0 => {
                    self.seg += 1;
                    let take = left.min(s.length);
                    if take == 0 {
                        continue;
                    }
                    let op = WriteOp {
                        src: ByteRange {
                            start: item.offset.wrapping_add(self.done),
                            len: take,
                        },
                        target: Segment {
                            handle: s.handle,
                            length: take,
                            offset: s.offset,
                        },
                        chunk: WriteTarget::Write(self.k as u32),
                    };
                    self.done += take;
                    return Some(op);
                }
                _ => {
                    self.k += 1;
                    self.cur = None;
                }
            }
        }
        // Reply chunk.
        let rc = self.reply?;
        loop {
            let mut r = match self.range {
                Some(r) => r,
                None => self.ranges.next()?,
            };
            let s = rc.get(self.rseg)?;
            let avail = s.length.saturating_sub(self.rseg_used);
            if avail == 0 {
                self.range = Some(r);
                self.rseg += 1;
                self.rseg_used = 0;
                continue;
            }
            let take = avail.min(r.len);
            let op = WriteOp {
                src: ByteRange {
                    start: r.start,
                    len: take,
                },
                target: Segment {
                    handle: s.handle,
                    length: take,
                    offset: s.offset.wrapping_add(self.rseg_used as u64),
                },
                chunk: WriteTarget::Reply,
            };
            r.start += take;
            r.len -= take;
            self.range = (r.len > 0).then_some(r);
            self.rseg_used += take;
            return Some(op);
        }
    }
}

/// Responder side: plan a Reply of `reply_len` bytes (unreduced, from its XID)
/// whose DDP-eligible items are `items` (from
/// [`UpperLayerBinding::reply_items`], in stream order), given the Call's chunk
/// lists `call` and the reply inline threshold `reply_inline_max` (the largest
/// Send the requester accepts, capped by our own Send buffer: RFC 8166 s3.3.2,
/// RFC 8797, draft s4.2.1 RBSIZ).
///
/// Rules applied (RFC 8166 s3.5.3, "A Responder chooses which form of reply to
/// use based on the chunks provided by the Requester"):
/// - With Write chunks and DDP-eligible items, item `k` is reduced into Write
///   chunk `k` (s3.4.6); items beyond the Write list stay inline. The chunk's
///   returned length is the item's length exactly, padding is not written
///   (s3.4.6.2), and the item's padding leaves the payload (s3.4.4.4). A chunk
///   too short for its item is RDMA2_ERR_WRITE_RESOURCE with the 1-based index
///   of the first such chunk and the length needed (draft s5.3.3), ERR_CHUNK
///   in v1. Every Write chunk is echoed; unused ones with zero lengths (s3.4.6).
/// - If the header plus reduced reply fit `reply_inline_max`: RDMA_MSG with the
///   reply inline (s3.5.1, s3.5.2); the Reply chunk, if any, is not echoed
///   (the Linux client rejects an RDMA_MSG reply that carries one).
/// - Otherwise, if the Reply chunk holds the reduced reply: RDMA_NOMSG, the
///   reduced reply (with its XDR padding) written into the Reply chunk, which is
///   echoed with updated lengths (s3.5.3).
/// - Otherwise RDMA2_ERR_REPLY_RESOURCE with the reduced length as
///   `length_needed` (draft s5.3.3), ERR_CHUNK in v1 (s4.5).
pub fn plan_reply(
    reply_len: usize,
    items: &[DdpItem],
    call: &ChunkLists<'_>,
    vers: u32,
    reply_inline_max: u32,
) -> Result<ReplyPlan, PlanError> {
    let fixed = fixed_len(vers)?;
    let reply_len32 = u32::try_from(reply_len).map_err(|_| PlanError::MessageTooLong)?;
    check_items(items, reply_len32 as u64)?;
    let mut plan = ReplyPlan {
        vers,
        kind: ReplyKind::Short,
        reply_len: reply_len32,
        reduced_len: reply_len32,
        header_len: 0,
        items: FixedVec::new(),
        write_chunks: 0,
    };
    let mut hdr = fixed + 4; // empty Read list
    let mut removed = 0u64;
    let mut nchunks = 0u32;
    for (k, chunk) in call.writes.iter().enumerate() {
        hdr += write_entry_len(chunk.len() as u64);
        nchunks += 1;
        if let Some(it) = items.get(k) {
            if plan.items.len() == k && plan.items.capacity() > k {
                if it.len as u64 > chunk.total_len() {
                    return Err(PlanError::WriteResource {
                        chunk_index: nchunks,
                        length_needed: it.len,
                    });
                }
                removed += it.len as u64 + pad4(it.len as u64);
                // Capacity checked just above.
                let _ = plan.items.push(*it);
            }
        }
    }
    hdr += 4; // end of Write list
    plan.write_chunks = nchunks;
    let reduced = reply_len32 as u64 - removed;
    plan.reduced_len = reduced as u32;
    let max = reply_inline_max as u64;

    if hdr + 4 + reduced <= max {
        plan.header_len = to_u32(hdr + 4)?;
        return Ok(plan);
    }
    match call.reply {
        Some(rc) if rc.total_len() >= reduced => {
            let h = hdr + write_entry_len(rc.len() as u64);
            if h > max {
                return Err(PlanError::HeaderTooLarge {
                    needed: h,
                    max: reply_inline_max,
                });
            }
            plan.kind = ReplyKind::Long;
            plan.header_len = h as u32;
            Ok(plan)
        }
        _ => Err(PlanError::ReplyResource {
            length_needed: plan.reduced_len,
        }),
    }
}

/// Whether [`plan_call`] would convey this Call as a Short message with no
/// chunk at all (RFC 8166 s3.5.1): no Read chunk, no Write chunk to
/// provision and no Reply chunk, because the Call and the largest reply both
/// fit inline with the 28-byte (v1) or 36-byte (v2) chunk-free header. Such
/// a Call's header is [`encode_chunk_free_call_header`]'s. Tested against
/// `plan_call` in `chunk_free_call_agrees_with_plan_call`.
///
/// May be called from any core.
#[inline]
pub fn is_chunk_free_call(call_len: usize, items: &[DdpItem], needs: &ReplyNeeds, p: &CallParams) -> bool {
    let Ok(fixed) = fixed_len(p.vers) else { return false };
    let Ok(len) = u32::try_from(call_len) else { return false };
    // Every Write chunk the reply needs would be provisioned with DDP on;
    // with it off, the results count in the reply (padded).
    let mut reply_bound = needs.max_reply_size as u64;
    if !needs.write_chunks.is_empty() {
        if p.ddp {
            return false;
        }
        reply_bound += needs
            .write_chunks
            .iter()
            .map(|&n| n as u64 + pad4(n as u64))
            .sum::<u64>();
    }
    // Prefix, then three empty lists (one word each).
    let hdr = fixed + 12;
    hdr + reply_bound <= p.reply_inline_max as u64
        && hdr + len as u64 <= p.call_inline_max as u64
        && check_items(items, len as u64).is_ok()
}

/// Requester side, the READ shape: whether [`plan_call`] would convey this
/// Call as a Short message whose only chunk is one Write chunk (DDP on, one
/// DDP-eligible result in the reply, no Read chunk, no Reply chunk: RFC 8166
/// s3.5.1, s3.4.6), and if so the Write chunk's length. Such a Call's header
/// is [`encode_one_write_call_header`]'s for the one segment provisioned.
/// Tested against `plan_call` in `one_write_call_agrees_with_plan_call`.
///
/// May be called from any core.
#[inline]
pub fn one_write_call(call_len: usize, items: &[DdpItem], needs: &ReplyNeeds, p: &CallParams) -> Option<u32> {
    let [w] = needs.write_chunks[..] else { return None };
    if !p.ddp {
        return None;
    }
    let fixed = fixed_len(p.vers).ok()?;
    let len = u32::try_from(call_len).ok()? as u64;
    if !items_valid(items, len) {
        return None;
    }
    // plan_call's sizes: the echoed Write list with the segments it assumes
    // per chunk; no Reply chunk when the largest reply fits inline.
    let writes_len = write_entry_len(p.max_segments_per_chunk.max(1) as u64) + 4;
    let hdr = fixed + 4 + writes_len + 4;
    if hdr + needs.max_reply_size as u64 > p.reply_inline_max as u64 {
        return None;
    }
    (hdr + len <= p.call_inline_max as u64).then_some(w)
}

/// Responder side, the READ shape: whether [`plan_reply`] would answer a
/// Call whose only chunk is one Write chunk of the one segment `seg`
/// ([`ChunkLists::one_write_segment`]) with a Short reply that reduces the
/// reply's one DDP item into that chunk, and if so the reduced length (the
/// inline payload after [`one_write_header_len`] bytes of header). `None`
/// for anything else, errors included: the caller then plans the general
/// way. The reply is then one RDMA Write of the item to `seg` and the Send
/// of [`encode_one_write_reply_header`] followed by the reply without the
/// item and its XDR padding (RFC 8166 s3.4.6, s3.4.4.4, s3.5.2). Tested
/// against `plan_reply` and `encode_reply_header` in
/// `one_write_reply_agrees_with_plan_reply`.
///
/// May be called from any core.
#[inline]
pub fn one_write_short_reply(
    reply_len: usize,
    items: &[DdpItem],
    seg: Segment,
    vers: u32,
    reply_inline_max: u32,
) -> Option<u32> {
    let hdr = one_write_header_len(vers)? as u64;
    let [it] = items else { return None };
    let reply_len = u32::try_from(reply_len).ok()?;
    // plan_reply: valid items, and a chunk long enough for its item.
    if !items_valid(items, reply_len as u64) || it.len > seg.length {
        return None;
    }
    let reduced = reply_len as u64 - (it.len as u64 + pad4(it.len as u64));
    (hdr + reduced <= reply_inline_max as u64).then_some(reduced as u32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::header::encode_call_header_general;

    /// `one_write_short_reply` says yes exactly when `plan_reply` makes a
    /// Short plan reducing the one item into the one Write chunk, with the
    /// same reduced length, and the one-step header is `encode_reply_header`'s
    /// byte for byte.
    #[test]
    fn one_write_reply_agrees_with_plan_reply() {
        use proptest::prelude::*;
        let case = (
            0usize..6000,
            prop_oneof![
                3 => proptest::collection::vec((0u32..1500, 0u32..5000), 1..2),
                1 => proptest::collection::vec((0u32..1500, 0u32..5000), 0..3),
            ],
            (any::<u32>(), 0u32..6000, any::<u64>()),
            prop_oneof![Just(1u32), Just(2u32), Just(3u32)],
            0u32..6000,
            (any::<u32>(), 0u32..64, any::<u32>()),
            // Edges: the segment exactly the item's length (or one byte
            // either side), the threshold exactly header + reduced reply.
            (0u32..6, 0u32..6),
        );
        let mut runner = proptest::test_runner::TestRunner::new(proptest::test_runner::Config {
            cases: 20_000,
            ..Default::default()
        });
        let hits = std::cell::Cell::new(0u32);
        runner
            .run(
                &case,
                |(len, raw_items, (handle, length, offset), vers, max, (xid, credits, flags), (es, em))| {
                    // Items at aligned offsets, mostly valid.
                    let items: Vec<DdpItem> = raw_items
                        .iter()
                        .map(|&(o, l)| DdpItem { offset: o * 4, len: l })
                        .collect();
                    let edge = |base: u64, e: u32, other: u32| match e {
                        0 => base.saturating_sub(1) as u32,
                        1 => base as u32,
                        2 => base as u32 + 1,
                        _ => other,
                    };
                    let first_len = items.first().map_or(0, |it| it.len as u64);
                    let length = edge(first_len, es, length);
                    let removed = first_len + pad4(first_len);
                    let threshold =
                        one_write_header_len(vers).unwrap_or(0) as u64 + (len as u64).saturating_sub(removed);
                    let max = edge(threshold, em, max);
                    let seg = Segment { handle, length, offset };
                    let mut wire = Vec::new();
                    for w in [0, 1, 1, handle, length, (offset >> 32) as u32, offset as u32, 0, 0] {
                        wire.extend_from_slice(&w.to_be_bytes());
                    }
                    // The Call's lists as the decoder sees them (after the prefix).
                    let mut msg = vec![0u8; 16];
                    msg[..4].copy_from_slice(&7u32.to_be_bytes());
                    msg[4..8].copy_from_slice(&1u32.to_be_bytes());
                    msg.extend_from_slice(&wire);
                    msg.extend_from_slice(&7u32.to_be_bytes());
                    let h = crate::header::decode(&msg, &crate::header::Limits::DEFAULT).expect("valid Call");
                    let chunks = *h.chunks().expect("MSG");
                    prop_assert_eq!(chunks.one_write_segment(), Some(seg));
                    let general = plan_reply(len, &items, &chunks, vers, max);
                    let fast = one_write_short_reply(len, &items, seg, vers, max);
                    match (fast, general) {
                        (Some(reduced), Ok(p)) => {
                            hits.set(hits.get() + 1);
                            prop_assert_eq!(p.kind, ReplyKind::Short);
                            prop_assert_eq!(p.reduced_items(), &items[..]);
                            prop_assert_eq!(p.reduced_len, reduced);
                            prop_assert_eq!(Some(p.header_len as usize), one_write_header_len(vers));
                            let mut a = [0u8; 64];
                            let mut b = [0u8; 64];
                            let n = encode_reply_header(&p, &chunks, xid, credits, flags, &mut a).expect("encodes");
                            let m = encode_one_write_reply_header(vers, xid, credits, flags, seg, items[0].len, &mut b);
                            prop_assert_eq!(Some(n), m);
                            prop_assert_eq!(&a[..n], &b[..n]);
                            // The one RDMA Write goes where the general plan puts it.
                            let ops: Vec<WriteOp> = p.write_ops(&chunks).collect();
                            if items[0].len == 0 {
                                prop_assert!(ops.is_empty());
                            } else {
                                prop_assert_eq!(ops.len(), 1);
                                prop_assert_eq!(
                                    ops[0].src,
                                    ByteRange {
                                        start: items[0].offset,
                                        len: items[0].len
                                    }
                                );
                                prop_assert_eq!(
                                    ops[0].target,
                                    Segment {
                                        length: items[0].len,
                                        ..seg
                                    }
                                );
                            }
                        }
                        (None, Ok(p)) => {
                            let reduces_one =
                                p.kind == ReplyKind::Short && p.reduced_items().len() == 1 && items.len() == 1;
                            prop_assert!(!reduces_one, "plan_reply reduced the one item, the short cut refused");
                        }
                        (Some(_), Err(e)) => prop_assert!(false, "short cut accepted what plan_reply refuses: {e:?}"),
                        (None, Err(_)) => {}
                    }
                    Ok(())
                },
            )
            .unwrap();
        assert!(hits.get() > 500, "the short cut was rarely taken: {}", hits.get());
    }

    /// `is_chunk_free_call` says yes exactly when `plan_call` makes a Short
    /// plan without chunks, and the one-step Call header is the planner's.
    #[test]
    fn chunk_free_call_agrees_with_plan_call() {
        use proptest::prelude::*;
        let case = (
            0usize..3000,
            proptest::collection::vec((0u32..3000, 0u32..600), 0..2),
            proptest::collection::vec(0u32..5000, 0..2),
            0u32..5000,
            prop_oneof![Just(1u32), Just(2u32), Just(3u32)],
            (0u32..4200, 0u32..4200, any::<bool>()),
        );
        let mut runner = proptest::test_runner::TestRunner::new(proptest::test_runner::Config {
            cases: 20_000,
            ..Default::default()
        });
        let hits = std::cell::Cell::new([0u32; 2]);
        runner
            .run(
                &(case, 0u32..6, 0u32..6),
                |((len, items, writes, max_reply, vers, (cmax, rmax, ddp)), cb, rb)| {
                    // Thresholds at the edges half of the time: exactly the
                    // chunk-free header plus the Call (or the reply), or one off.
                    let hdr = if vers == 2 { 36 } else { 28 };
                    let edge = |sel: u32, need: u32, random: u32| if sel < 3 { need + sel - 1 } else { random };
                    let cmax = edge(cb, hdr + len as u32, cmax);
                    let rmax = edge(rb, hdr + max_reply, rmax);
                    let items: Vec<DdpItem> = items.iter().map(|&(offset, len)| DdpItem { offset, len }).collect();
                    let needs = ReplyNeeds::new(&writes, max_reply).expect("at most 2");
                    let p = CallParams {
                        vers,
                        call_inline_max: cmax,
                        reply_inline_max: rmax,
                        ddp,
                        max_segments_per_chunk: 1,
                        pad_read_chunks: false,
                    };
                    let fast = is_chunk_free_call(len, &items, &needs, &p);
                    let planned = plan_call(len, &items, &needs, &p);
                    let chunk_free = planned.as_ref().is_ok_and(|c| {
                        c.kind == CallKind::Short
                            && c.reads.is_empty()
                            && c.write_chunks.is_empty()
                            && c.reply_chunk.is_none()
                    });
                    prop_assert_eq!(fast, chunk_free, "{:?}", planned);
                    let mut h = hits.get();
                    h[fast as usize] += 1;
                    hits.set(h);
                    if let (true, Ok(plan)) = (fast, planned) {
                        let (mut a, mut b) = ([0xeeu8; 64], [0xeeu8; 64]);
                        let n = encode_call_header(&plan, 9, 5, 0, &[], &[], None, &mut a).expect("planned header");
                        let m = encode_chunk_free_call_header(vers, 9, 5, &mut b).expect("one step");
                        prop_assert_eq!((n, &a[..]), (m, &b[..]));
                    }
                    Ok(())
                },
            )
            .unwrap();
        let h = hits.get();
        assert!(h[0] > 1000 && h[1] > 1000, "both answers exercised: {h:?}");
        assert_eq!(encode_chunk_free_call_header(1, 1, 1, &mut [0u8; 27]), None);
    }

    /// `one_write_call` says yes exactly when `plan_call` makes a Short plan
    /// whose only chunk is one Write chunk, with its length, and the one-step
    /// header is `encode_call_header`'s for that plan.
    #[test]
    fn one_write_call_agrees_with_plan_call() {
        use proptest::prelude::*;
        let case = (
            0usize..3000,
            proptest::collection::vec((0u32..3000, 0u32..600), 0..2),
            prop_oneof![
                3 => proptest::collection::vec(0u32..5000, 1..2),
                1 => proptest::collection::vec(0u32..5000, 0..3),
            ],
            0u32..5000,
            prop_oneof![Just(1u32), Just(2u32), Just(3u32)],
            (
                0u32..4200,
                0u32..4200,
                prop_oneof![3 => Just(true), 1 => Just(false)],
                1u32..3,
            ),
        );
        let mut runner = proptest::test_runner::TestRunner::new(proptest::test_runner::Config {
            cases: 20_000,
            ..Default::default()
        });
        let hits = std::cell::Cell::new([0u32; 2]);
        runner
            .run(
                &(case, 0u32..6, 0u32..6),
                |((len, items, writes, max_reply, vers, (cmax, rmax, ddp, segs)), cb, rb)| {
                    // Thresholds at the edges half of the time.
                    let hdr = (if vers == 2 { 24 } else { 16 }) + 4 + (8 + 16 * segs) + 4 + 4;
                    let edge = |sel: u32, need: u32, random: u32| if sel < 3 { need + sel - 1 } else { random };
                    let cmax = edge(cb, hdr + len as u32, cmax);
                    let rmax = edge(rb, hdr + max_reply, rmax);
                    let items: Vec<DdpItem> = items.iter().map(|&(offset, len)| DdpItem { offset, len }).collect();
                    let needs = ReplyNeeds::new(&writes, max_reply).expect("at most 2");
                    let p = CallParams {
                        vers,
                        call_inline_max: cmax,
                        reply_inline_max: rmax,
                        ddp,
                        max_segments_per_chunk: segs,
                        pad_read_chunks: false,
                    };
                    let fast = one_write_call(len, &items, &needs, &p);
                    let planned = plan_call(len, &items, &needs, &p);
                    let one_write = planned.as_ref().ok().and_then(|c| {
                        (c.kind == CallKind::Short
                            && c.reads.is_empty()
                            && c.write_chunks.len() == 1
                            && c.reply_chunk.is_none())
                        .then(|| c.write_chunks[0])
                    });
                    prop_assert_eq!(fast, one_write, "{:?}", planned);
                    let mut h = hits.get();
                    h[fast.is_some() as usize] += 1;
                    hits.set(h);
                    if let (Some(w), Ok(plan)) = (fast, planned) {
                        let seg = Segment {
                            handle: 0x1234_5678,
                            length: w,
                            offset: 0xfeed_0000_1000,
                        };
                        let (mut a, mut b) = ([0xeeu8; 64], [0xeeu8; 64]);
                        let n = encode_call_header(&plan, 9, 5, 0, &[], &[&[seg]], None, &mut a);
                        let m = encode_one_write_call_header(vers, 9, 5, seg, &mut b);
                        prop_assert_eq!(n.ok(), m);
                        prop_assert_eq!(&a[..], &b[..]);
                        // And the word-by-word writer agrees too.
                        let mut c = [0xeeu8; 64];
                        let g = encode_call_header_general(&plan, 9, 5, 0, &[], &[&[seg]], None, &mut c);
                        prop_assert_eq!(g.ok(), m);
                        prop_assert_eq!(&a[..], &c[..]);
                    }
                    Ok(())
                },
            )
            .unwrap();
        let h = hits.get();
        assert!(h[0] > 1000 && h[1] > 1000, "both answers exercised: {h:?}");
    }

    /// A plan reused for Calls of every form (as a responder's request slot
    /// reuses it) comes out equal to a fresh one.
    #[test]
    fn plan_reads_into_a_used_plan_equals_a_fresh_plan() {
        use crate::header::{encode, BodyOut, ChunksOut, HeaderOut, ReadSegment};
        let seg = |handle: u32, length: u32| Segment {
            handle,
            length,
            offset: 0x1000 * handle as u64,
        };
        let rs = |position: u32, handle: u32, length: u32| ReadSegment {
            position,
            target: seg(handle, length),
        };
        let two_chunks = [rs(8, 1, 6), rs(8, 2, 3), rs(24, 3, 4)];
        let one_chunk = [rs(12, 4, 4096)];
        let pzrc = [rs(0, 5, 130), rs(0, 6, 7)];
        let forms: [(&[ReadSegment], bool); 4] =
            [(&[], false), (&two_chunks, false), (&pzrc, true), (&one_chunk, false)];
        let mut msgs = Vec::new();
        for (reads, nomsg) in forms {
            let chunks = ChunksOut {
                reads,
                writes: &[],
                reply: None,
            };
            let body = if nomsg {
                BodyOut::NoMsg { inv_handle: 0, chunks }
            } else {
                BodyOut::Msg { inv_handle: 0, chunks }
            };
            let mut buf = vec![0u8; 512];
            let n = encode(
                &HeaderOut {
                    xid: 7,
                    vers: 1,
                    credits: 4,
                    flags: 0,
                    body,
                },
                &mut buf,
            )
            .unwrap();
            buf.truncate(n);
            if !nomsg {
                // The RPC message: its XID, then 20 more bytes.
                buf.extend_from_slice(&7u32.to_be_bytes());
                buf.extend_from_slice(&[0xab; 20]);
            }
            msgs.push(buf);
        }
        let limits = ReadLimits::new(1 << 20);
        let mut reused = ReadPlan::default();
        for order in [[0usize, 1, 2, 3], [3, 2, 1, 0], [1, 2, 0, 3]] {
            for k in order {
                let h = crate::header::decode(&msgs[k], &crate::header::Limits::DEFAULT).unwrap();
                let fresh = plan_reads(&h, &limits).unwrap();
                plan_reads_into(&h, &limits, &mut reused).unwrap();
                assert_eq!(reused, fresh, "form {k}");
                assert_eq!(reused.pieces(), fresh.pieces());
                assert_eq!(reused.chunk_count(), fresh.chunk_count());
            }
        }
    }

    /// Checking a Reply against the advertised segments gives what checking
    /// it against the Call's decoded chunk lists gives, for good and bad echoes.
    #[test]
    fn reassemble_against_provisioned_segments_matches_decoded_lists() {
        use crate::header::{decode, encode, BodyOut, ChunksOut, HeaderOut, Limits};
        let seg = |handle: u32, length: u32, offset: u64| Segment { handle, length, offset };
        let w0 = [seg(1, 4096, 0x1000)];
        let w1 = [seg(2, 100, 0x9000), seg(3, 50, 0xa000)];
        let rc = [seg(4, 2048, 0x20000)];
        let msg = |xid: u32, writes: &[&[Segment]], reply: Option<&[Segment]>, nomsg: bool| {
            let chunks = ChunksOut {
                reads: &[],
                writes,
                reply,
            };
            let body = if nomsg {
                BodyOut::NoMsg { inv_handle: 0, chunks }
            } else {
                BodyOut::Msg { inv_handle: 0, chunks }
            };
            let mut buf = vec![0u8; 1024];
            let n = encode(
                &HeaderOut {
                    xid,
                    vers: 1,
                    credits: 8,
                    flags: 0,
                    body,
                },
                &mut buf,
            )
            .unwrap();
            buf.truncate(n);
            if !nomsg {
                buf.extend_from_slice(&xid.to_be_bytes());
                buf.extend_from_slice(&[0; 24]);
            }
            buf
        };
        type Advertised<'s> = (&'s [&'s [Segment]], Option<&'s [Segment]>);
        let calls: [Advertised; 4] = [(&[], None), (&[&w0], None), (&[&w0, &w1], Some(&rc)), (&[], Some(&rc))];
        let (mut compared, mut oks) = (0, 0);
        for (cw, cr) in calls {
            let call = msg(5, cw, cr, cr.is_some() && cw.is_empty());
            let ch = decode(&call, &Limits::DEFAULT).unwrap();
            let lists = *ch.chunks().unwrap();
            let mut short0 = w0;
            short0[0].length = 17;
            let mut moved = w1;
            moved[1].offset += 4;
            let mut over = rc;
            over[0].length += 1;
            let mut gap = w1;
            gap[0].length = 0;
            let replies: Vec<Vec<u8>> = vec![
                msg(5, cw, None, false),
                msg(5, cw, cr, false),
                msg(5, cw, cr, true),
                msg(5, &[&short0], None, false),
                msg(5, &[&w0, &moved], Some(&rc), false),
                msg(5, &[&w0, &w1], Some(&over), true),
                msg(5, &[&w0, &gap], Some(&rc), true),
                msg(5, &[], Some(&rc), true),
                msg(5, &[], None, false),
            ];
            for (k, r) in replies.iter().enumerate() {
                // (RDMA_NOMSG without a Reply chunk does not even decode.)
                let Ok(rh) = decode(r, &Limits::DEFAULT) else { continue };
                compared += 1;
                oks += reassemble_reply(&rh, &lists).is_ok() as u32;
                assert_eq!(
                    reassemble_reply_provisioned(&rh, cw, cr),
                    reassemble_reply(&rh, &lists),
                    "call {cw:?} {cr:?}, reply {k}"
                );
            }
        }
        assert!(
            compared >= 30 && oks >= 6 && oks < compared,
            "{compared} compared, {oks} good"
        );
    }

    #[test]
    fn fixed_vec_capacity_and_equality() {
        let mut v: FixedVec<u32, 2> = FixedVec::new();
        assert!(v.push(1));
        assert!(v.push(2));
        assert!(!v.push(3));
        assert_eq!(&v[..], &[1, 2]);
        assert_eq!(FixedVec::<u32, 2>::from_slice(&[1, 2]).unwrap(), v);
        assert!(FixedVec::<u32, 2>::from_slice(&[1, 2, 3]).is_none());
        assert_eq!(format!("{v:?}"), "[1, 2]");
    }

    #[test]
    fn reduced_ranges_drop_items_and_padding() {
        let items = [DdpItem { offset: 8, len: 5 }, DdpItem { offset: 20, len: 4 }];
        let r: Vec<_> = ReducedRanges::new(&items, 32).collect();
        assert_eq!(
            r,
            vec![
                ByteRange { start: 0, len: 8 },
                ByteRange { start: 16, len: 4 },
                ByteRange { start: 24, len: 8 }
            ]
        );
        // An item running to the end leaves no trailing range.
        let items = [DdpItem { offset: 4, len: 3 }];
        let r: Vec<_> = ReducedRanges::new(&items, 8).collect();
        assert_eq!(r, vec![ByteRange { start: 0, len: 4 }]);
    }

    #[test]
    fn check_items_rules() {
        let ok = [DdpItem { offset: 4, len: 3 }, DdpItem { offset: 8, len: 0 }];
        assert_eq!(check_items(&ok, 12), Ok(4));
        for (bad, idx) in [
            (vec![DdpItem { offset: 0, len: 4 }], 0),
            (vec![DdpItem { offset: 6, len: 4 }], 0),
            (vec![DdpItem { offset: 4, len: 9 }], 0),
            (vec![DdpItem { offset: 4, len: 5 }, DdpItem { offset: 8, len: 0 }], 1),
        ] {
            assert_eq!(check_items(&bad, 12), Err(PlanError::BadItem { index: idx }));
        }
    }

    #[test]
    fn error_mapping() {
        assert_eq!(
            PlanError::WriteResource {
                chunk_index: 2,
                length_needed: 9
            }
            .v2(),
            V2Error::WriteResource {
                chunk_index: 2,
                length_needed: 9
            }
        );
        assert_eq!(
            PlanError::ReplyResource { length_needed: 7 }.v2(),
            V2Error::ReplyResource { length_needed: 7 }
        );
        assert_eq!(
            PlanError::TooManyReadChunks { max: 3 }.v2(),
            V2Error::ReadChunks { max_chunks: 3 }
        );
        assert_eq!(
            PlanError::TooManyReadSegments { max: 5 }.v2(),
            V2Error::Segments { max_segments: 5 }
        );
        assert_eq!(PlanError::PositionZeroInMsg.v2(), V2Error::BadXdr);
        assert_eq!(PlanError::MsgPUnsupported.v2(), V2Error::InvalHtype);
        assert_eq!(PlanError::ReplyResource { length_needed: 7 }.v1(), V1Error::Chunk);
    }
}
