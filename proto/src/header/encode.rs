//! Every encoder of RPC-over-RDMA transport headers (RFC 8166 s4.1-s4.3 for
//! version 1; draft-cel-nfsv4-rpcrdma-version-two-09 s3.1-s3.3 and s5.3 for
//! version 2), in the grammar of [`super`]'s module doc:
//!
//! - [`encode`]: any header, from a typed [`HeaderOut`]; [`encode_error_reply`]
//!   the RDMA_ERROR / RDMA2_ERROR answering a header that failed to decode
//!   (RFC 8166 s4.5; draft s5.3.3, s7.2).
//! - [`encode_call_header`]: a planned Call ([`crate::plan::plan_call`]), with
//!   its one-step writes of the chunk-free and one-Write-segment shapes inside.
//! - [`encode_reply_header`]: any Reply ([`ReplyHeaderOut`]): a plan of
//!   [`crate::plan::plan_reply`], or the chunk-free and one-Write-segment
//!   shapes engines answer without planning, each written in one step
//!   inside.
//! - One-step encoders of the two common Call shapes, for engines that skip
//!   planning: [`encode_chunk_free_call_header`] (three empty chunk lists)
//!   and [`encode_one_write_call_header`] (one Write chunk of one segment).
//!
//! Every one-step write is proven equal to the general (word-by-word)
//! encoders by property tests in `encode_tests.rs`.
//!
//! The lower-level [`put_segment`], [`put_prefix`] and friends write single
//! productions of the grammar. Nothing here allocates.

use super::*;
use crate::error::{DecodeError, EncodeError};
use crate::plan::{fixed_len, write_entry_len, CallKind, CallPlan, PlanError, ReplyKind, ReplyPlan};
use crate::xdr::Writer;

/// Chunk lists to encode, as typed slices.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ChunksOut<'s> {
    pub reads: &'s [ReadSegment],
    pub writes: &'s [&'s [Segment]],
    pub reply: Option<&'s [Segment]>,
}

impl ChunksOut<'_> {
    /// Encoded size in bytes.
    pub fn encoded_len(&self) -> usize {
        let reads = self.reads.len() * READ_ENTRY_LEN + 4;
        let writes: usize = self.writes.iter().map(|c| 8 + c.len() * SEGMENT_LEN).sum::<usize>() + 4;
        let reply = self.reply.map_or(4, |c| 8 + c.len() * SEGMENT_LEN);
        reads + writes + reply
    }
}

/// A header body to encode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyOut<'s> {
    /// RDMA_MSG / RDMA2_MSG; the caller appends the payload after the header.
    Msg {
        inv_handle: u32,
        chunks: ChunksOut<'s>,
    },
    NoMsg {
        inv_handle: u32,
        chunks: ChunksOut<'s>,
    },
    MsgP {
        align: u32,
        thresh: u32,
        chunks: ChunksOut<'s>,
    },
    Done,
    ErrorV1(V1Error),
    ErrorV2(V2Error),
    ConnProp(&'s [Property<'s>]),
}

/// A header to encode. For v2, `flags` is written as given; use
/// [`HeaderOut::v2_flags_for`] to compute the RESPONSE flag from the rules of
/// draft s3.2.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeaderOut<'s> {
    pub xid: u32,
    pub vers: u32,
    pub credits: u32,
    pub flags: u32,
    pub body: BodyOut<'s>,
}

impl HeaderOut<'_> {
    /// The v2 flags for a message: RESPONSE set for errors and for messages
    /// carrying an RPC Reply (draft s3.2).
    pub const fn v2_flags_for(is_rpc_reply: bool, is_error: bool) -> u32 {
        if is_rpc_reply || is_error {
            RPCRDMA2_F_RESPONSE
        } else {
            0
        }
    }

    /// Encoded size of the transport header in bytes.
    pub fn encoded_len(&self) -> usize {
        let prefix = if self.vers == RPCRDMA_VERSION_1 {
            V1_PREFIX_LEN
        } else {
            V2_PREFIX_LEN
        };
        let inv = if self.vers == RPCRDMA_VERSION_1 { 0 } else { 4 };
        prefix
            + match self.body {
                BodyOut::Msg { chunks, .. } | BodyOut::NoMsg { chunks, .. } => inv + chunks.encoded_len(),
                BodyOut::MsgP { chunks, .. } => 8 + chunks.encoded_len(),
                BodyOut::Done => 0,
                BodyOut::ErrorV1(e) => 4 + if matches!(e, V1Error::Vers { .. }) { 8 } else { 0 },
                BodyOut::ErrorV2(e) => 4 + 4 * V2Error::arm_words(e.code()),
                BodyOut::ConnProp(props) => {
                    4 + props
                        .iter()
                        .map(|p| 8 + crate::xdr::roundup(p.data.len()))
                        .sum::<usize>()
                }
            }
    }
}

/// Write a plain segment.
#[inline]
pub fn put_segment(w: &mut Writer<'_>, s: &Segment) -> Result<(), EncodeError> {
    w.put_u32(s.handle)?;
    w.put_u32(s.length)?;
    w.put_u64(s.offset)
}

/// Write the common prefix: v1 `xid vers credit proc`, v2 `xid vers credit htype flags`.
#[inline]
pub fn put_prefix(
    w: &mut Writer<'_>,
    xid: u32,
    vers: u32,
    credits: u32,
    htype: u32,
    flags: u32,
) -> Result<(), EncodeError> {
    w.put_u32(xid)?;
    w.put_u32(vers)?;
    w.put_u32(credits)?;
    w.put_u32(htype)?;
    if vers != RPCRDMA_VERSION_1 {
        w.put_u32(flags)?;
    }
    Ok(())
}

/// Write a Read list.
pub fn put_read_list(w: &mut Writer<'_>, reads: &[ReadSegment]) -> Result<(), EncodeError> {
    for rs in reads {
        w.put_u32(1)?;
        w.put_u32(rs.position)?;
        put_segment(w, &rs.target)?;
    }
    w.put_u32(0)
}

/// Write a counted segment array (a Write chunk or the Reply chunk body).
pub fn put_segment_array(w: &mut Writer<'_>, segs: &[Segment]) -> Result<(), EncodeError> {
    let n = u32::try_from(segs.len()).map_err(|_| EncodeError::Unrepresentable { field: "rdma_target" })?;
    w.put_u32(n)?;
    segs.iter().try_for_each(|s| put_segment(w, s))
}

/// Write the three chunk lists.
pub fn put_chunk_lists(w: &mut Writer<'_>, c: &ChunksOut<'_>) -> Result<(), EncodeError> {
    put_read_list(w, c.reads)?;
    for chunk in c.writes {
        w.put_u32(1)?;
        put_segment_array(w, chunk)?;
    }
    w.put_u32(0)?;
    match c.reply {
        Some(segs) => {
            w.put_u32(1)?;
            put_segment_array(w, segs)
        }
        None => w.put_u32(0),
    }
}

/// Encode `h` into `buf`, returning the header length. The words are the
/// grammar's: `xid vers credit proc body` (v1, RFC 8166 s4.1) or `xid vers
/// credit htype flags body` (v2, draft s3.1), the body by header type
/// (`chunk_lists` before an RDMA_MSG's payload, `err` and its arm for an
/// error, `count { which data<> }` for RDMA2_CONNPROP).
/// For MSG/MSGP the caller
/// appends the RPC message at that offset.
///
/// May be called from any core.
pub fn encode(h: &HeaderOut<'_>, buf: &mut [u8]) -> Result<usize, EncodeError> {
    let needed = h.encoded_len();
    if needed > buf.len() {
        return Err(EncodeError::BufferTooSmall { needed });
    }
    let v1 = h.vers == RPCRDMA_VERSION_1;
    let mut w = Writer::new(buf);
    let htype = match h.body {
        BodyOut::Msg { .. } => RDMA_MSG,
        BodyOut::NoMsg { .. } => RDMA_NOMSG,
        BodyOut::MsgP { .. } => RDMA_MSGP,
        BodyOut::Done => RDMA_DONE,
        BodyOut::ErrorV1(_) | BodyOut::ErrorV2(_) => RDMA_ERROR,
        BodyOut::ConnProp(_) => RDMA2_CONNPROP,
    };
    put_prefix(&mut w, h.xid, h.vers, h.credits, htype, h.flags)?;
    match h.body {
        BodyOut::Msg { inv_handle, chunks } | BodyOut::NoMsg { inv_handle, chunks } => {
            if !v1 {
                w.put_u32(inv_handle)?;
            }
            put_chunk_lists(&mut w, &chunks)?;
        }
        BodyOut::MsgP { align, thresh, chunks } => {
            w.put_u32(align)?;
            w.put_u32(thresh)?;
            put_chunk_lists(&mut w, &chunks)?;
        }
        BodyOut::Done => {}
        BodyOut::ErrorV1(e) => {
            w.put_u32(e.code())?;
            if let V1Error::Vers { low, high } = e {
                w.put_u32(low)?;
                w.put_u32(high)?;
            }
        }
        BodyOut::ErrorV2(e) => {
            let code = e.code();
            w.put_u32(code)?;
            let (a, b) = e.arm();
            match V2Error::arm_words(code) {
                2 => {
                    w.put_u32(a)?;
                    w.put_u32(b)?;
                }
                1 => w.put_u32(a)?,
                _ => {}
            }
        }
        BodyOut::ConnProp(props) => {
            let n = u32::try_from(props.len()).map_err(|_| EncodeError::Unrepresentable { field: "rdma_props" })?;
            w.put_u32(n)?;
            for p in props {
                w.put_u32(p.id)?;
                w.put_opaque_var(p.data)?;
            }
        }
    }
    debug_assert_eq!(w.len(), needed);
    Ok(w.len())
}

/// Encode an error reply to a message whose prefix is `p` (RFC 8166 s4.5; draft
/// s5.3.3: copy XID and version from the offending header; v2 sets RESPONSE).
/// `credits` is the connection's current grant.
pub fn encode_error_reply(
    p: &Prefix,
    credits: u32,
    err: &DecodeError,
    supported: (u32, u32),
    buf: &mut [u8],
) -> Result<usize, EncodeError> {
    let body = match p.vers {
        RPCRDMA_VERSION_2 => BodyOut::ErrorV2(err.v2_reply(supported.0, supported.1)),
        RPCRDMA_VERSION_1 => BodyOut::ErrorV1(err.v1_reply(supported.0, supported.1)),
        // An unknown version: ERR_VERS in the v1 layout, which every version's
        // prefix shares, under the version word the peer used (RFC 8166 s4.5;
        // draft s7.2 "with the same XID").
        vers => {
            let mut w = Writer::new(buf);
            put_prefix(&mut w, p.xid, RPCRDMA_VERSION_1, credits, RDMA_ERROR, 0)?;
            w.put_u32(ERR_VERS)?;
            w.put_u32(supported.0)?;
            w.put_u32(supported.1)?;
            w.patch_u32(4, vers)?;
            return Ok(w.len());
        }
    };
    let h = HeaderOut {
        xid: p.xid,
        vers: p.vers,
        credits,
        flags: RPCRDMA2_F_RESPONSE,
        body,
    };
    encode(&h, buf)
}
fn seg_sum(segs: &[Segment]) -> u64 {
    segs.iter().map(|s| s.length as u64).sum()
}

/// Encode the transport header of a planned Call into `buf`; returns its length:
///
/// ```text
/// v1: xid 1 credit (RDMA_MSG | RDMA_NOMSG for a Long Call)            read_list write_list reply_chunk
/// v2: xid 2 credit (RDMA2_MSG | RDMA2_NOMSG) flags=0 inv_handle       read_list write_list reply_chunk
/// ```
///
/// with one Read list entry per segment of each planned Read chunk (at the
/// chunk's Position, RFC 8166 s3.4.5), every provisioned Write chunk, and the
/// Reply chunk when planned. The chunk-free shape (three empty lists) and the
/// one-Write-segment shape are written in one step inside (tested against the
/// word-by-word writer in `one_write_call_header_agrees_with_the_general_encoder`).
///
/// For [`CallKind::Short`] and [`CallKind::Chunked`] the Send is this header
/// followed by the plan's [`CallPlan::inline`] ranges of the Call.
///
/// - `reads[i]`: the segments of Read chunk `i` of the plan; their lengths must
///   add up to exactly `plan.reads[i].range.len` (s3.4.5.2).
/// - `writes[i]`: the segments of Write chunk `i`, at least as long as planned.
/// - `reply`: the Reply chunk's segments, present exactly when planned.
/// - `inv_handle`: v2 `rdma_inv_handle` (0 = do not invalidate remotely); ignored
///   in v1. v2 Calls carry no flags (draft s3.2).
///
/// Fails with [`PlanError::ChunkMismatch`] when the segments do not match the
/// plan, and [`PlanError::HeaderTooLarge`] when the header plus inline payload
/// exceed the plan's call inline threshold (more segments than planned for).
#[allow(clippy::too_many_arguments)]
pub fn encode_call_header(
    plan: &CallPlan,
    xid: u32,
    credits: u32,
    inv_handle: u32,
    reads: &[&[Segment]],
    writes: &[&[Segment]],
    reply: Option<&[Segment]>,
    buf: &mut [u8],
) -> Result<usize, PlanError> {
    let fixed = fixed_len(plan.vers)?;
    // Most Calls carry no chunks: the prefix and three empty lists, written
    // at once (a buffer too small takes the general path, for its error).
    if reads.is_empty()
        && writes.is_empty()
        && reply.is_none()
        && plan.reads.is_empty()
        && plan.write_chunks.is_empty()
        && plan.reply_chunk.is_none()
        && plan.kind != CallKind::Long
    {
        let hdr_len = fixed as usize + 12;
        let send = hdr_len as u64 + plan.inline_len as u64;
        if send > plan.call_inline_max as u64 {
            return Err(PlanError::HeaderTooLarge {
                needed: send,
                max: plan.call_inline_max,
            });
        }
        if let Some(out) = buf.get_mut(..hdr_len) {
            let mut w = Writer::new(out);
            if plan.vers == RPCRDMA_VERSION_2 {
                w.put_u32s([xid, plan.vers, credits, RDMA_MSG, 0, inv_handle, 0, 0, 0])?;
            } else {
                w.put_u32s([xid, plan.vers, credits, RDMA_MSG, 0, 0, 0])?;
            }
            return Ok(hdr_len);
        }
    }
    // The READ shape: one Write chunk of one segment, nothing else, written
    // at once (`one_write_header_len`). Anything the checks below would
    // refuse takes the general path, for its error.
    if let ([[seg]], [want], true) = (writes, &plan.write_chunks[..], reads.is_empty()) {
        if reply.is_none()
            && plan.reads.is_empty()
            && plan.reply_chunk.is_none()
            && plan.kind != CallKind::Long
            && seg.length >= *want
        {
            if let Some(hdr_len) = one_write_header_len(plan.vers) {
                let send = hdr_len as u64 + plan.inline_len as u64;
                if send > plan.call_inline_max as u64 {
                    return Err(PlanError::HeaderTooLarge {
                        needed: send,
                        max: plan.call_inline_max,
                    });
                }
                if encode_one_write_header(plan.vers, xid, credits, 0, inv_handle, *seg, buf).is_some() {
                    return Ok(hdr_len);
                }
            }
        }
    }
    encode_call_header_general(plan, xid, credits, inv_handle, reads, writes, reply, buf)
}

/// [`encode_call_header`] word by word, for every shape (the one-step cases
/// above are checked against it in tests).
#[allow(clippy::too_many_arguments)]
pub(crate) fn encode_call_header_general(
    plan: &CallPlan,
    xid: u32,
    credits: u32,
    inv_handle: u32,
    reads: &[&[Segment]],
    writes: &[&[Segment]],
    reply: Option<&[Segment]>,
    buf: &mut [u8],
) -> Result<usize, PlanError> {
    let fixed = fixed_len(plan.vers)?;
    if reads.len() != plan.reads.len() {
        return Err(PlanError::ChunkMismatch {
            what: "read chunk count",
        });
    }
    if writes.len() != plan.write_chunks.len() {
        return Err(PlanError::ChunkMismatch {
            what: "write chunk count",
        });
    }
    if reply.is_some() != plan.reply_chunk.is_some() {
        return Err(PlanError::ChunkMismatch {
            what: "reply chunk presence",
        });
    }
    let mut read_segs = 0usize;
    for (segs, want) in reads.iter().zip(plan.reads.iter()) {
        if segs.is_empty() || seg_sum(segs) != want.range.len as u64 {
            return Err(PlanError::ChunkMismatch {
                what: "read chunk length",
            });
        }
        read_segs += segs.len();
    }
    if read_segs > MAX_READ_SEGMENTS as usize {
        return Err(PlanError::ChunkMismatch {
            what: "read segment count",
        });
    }
    for (segs, &want) in writes.iter().zip(plan.write_chunks.iter()) {
        if segs.len() > MAX_CHUNK_SEGMENTS as usize || seg_sum(segs) < want as u64 {
            return Err(PlanError::ChunkMismatch {
                what: "write chunk length",
            });
        }
    }
    if let (Some(segs), Some(want)) = (reply, plan.reply_chunk) {
        if segs.len() > MAX_CHUNK_SEGMENTS as usize || seg_sum(segs) < want as u64 {
            return Err(PlanError::ChunkMismatch {
                what: "reply chunk length",
            });
        }
    }

    let hdr_len = fixed
        + read_segs as u64 * READ_ENTRY_LEN as u64
        + 4
        + writes.iter().map(|s| write_entry_len(s.len() as u64)).sum::<u64>()
        + 4
        + reply.map_or(4, |s| write_entry_len(s.len() as u64));
    let send = hdr_len + plan.inline_len as u64;
    if send > plan.call_inline_max as u64 {
        return Err(PlanError::HeaderTooLarge {
            needed: send,
            max: plan.call_inline_max,
        });
    }

    let htype = if plan.kind == CallKind::Long {
        RDMA_NOMSG
    } else {
        RDMA_MSG
    };
    let mut w = Writer::new(buf);
    put_prefix(&mut w, xid, plan.vers, credits, htype, 0)?;
    if plan.vers == RPCRDMA_VERSION_2 {
        w.put_u32(inv_handle)?;
    }
    for (segs, rx) in reads.iter().zip(plan.reads.iter()) {
        for s in segs.iter() {
            w.put_u32(1)?;
            w.put_u32(rx.position)?;
            put_segment(&mut w, s)?;
        }
    }
    w.put_u32(0)?;
    for segs in writes {
        w.put_u32(1)?;
        w.put_u32(segs.len() as u32)?;
        for s in segs.iter() {
            put_segment(&mut w, s)?;
        }
    }
    w.put_u32(0)?;
    match reply {
        Some(segs) => {
            w.put_u32(1)?;
            w.put_u32(segs.len() as u32)?;
            for s in segs {
                put_segment(&mut w, s)?;
            }
        }
        None => w.put_u32(0)?,
    }
    debug_assert_eq!(w.len() as u64, hdr_len);
    Ok(w.len())
}

/// A word writer over a slice whose size was checked up front: no `Result` per
/// word. Writes past the end are dropped and counted, so the caller's final
/// length check catches any disagreement between plan and chunks.
struct Words<'b> {
    buf: &'b mut [u8],
    pos: usize,
}

impl Words<'_> {
    #[inline(always)]
    fn put(&mut self, v: u32) {
        if let Some(d) = self.buf.get_mut(self.pos..self.pos + 4) {
            d.copy_from_slice(&v.to_be_bytes());
        }
        self.pos += 4;
    }
    #[inline(always)]
    fn put_segment(&mut self, handle: u32, length: u32, offset: u64) {
        if let Some(d) = self.buf.get_mut(self.pos..self.pos + SEGMENT_LEN) {
            d[..4].copy_from_slice(&handle.to_be_bytes());
            d[4..8].copy_from_slice(&length.to_be_bytes());
            d[8..].copy_from_slice(&offset.to_be_bytes());
        }
        self.pos += SEGMENT_LEN;
    }
    /// `segs` as a counted array with their lengths replaced by a contiguous
    /// fill of `fill` bytes in array order (RFC 8166 s3.4.6). Returns the bytes
    /// that did not fit (0 when the chunk holds `fill`).
    #[inline]
    fn put_filled(&mut self, segs: &SegmentArray<'_>, fill: u32) -> u32 {
        self.put(1);
        self.put(segs.len() as u32);
        let mut left = fill;
        for s in segs.iter() {
            let l = left.min(s.length);
            left -= l;
            self.put_segment(s.handle, l, s.offset);
        }
        left
    }
}

/// The reply whose transport header [`encode_reply_header`] writes (RFC
/// 8166 s3.5; draft s5.3.1): a plan against the Call's chunk lists, or one
/// of the two shapes an engine answers without planning (each the header
/// the planner's plan for that shape would give; proven equal by the
/// property tests in `encode_tests.rs` and `plan/tests.rs`).
#[derive(Clone, Copy, Debug)]
pub enum ReplyHeaderOut<'a> {
    /// A Short reply to a Call of version `vers` that carried no chunks:
    /// v1 `xid 1 credit RDMA_MSG 0 0 0` (28 bytes), v2 `xid 2 credit
    /// RDMA2_MSG flags|RESPONSE 0 0 0 0` (36 bytes: prefix, `rdma_inv_handle`
    /// 0 and three empty lists). What the Short plan
    /// [`plan_reply`](crate::plan::plan_reply) makes against empty chunk
    /// lists is encoded as.
    ChunkFree { vers: u32 },
    /// A Short reply to a Call whose only chunk is one Write chunk of the
    /// one segment `seg`, into which `written` bytes of the reply's one DDP
    /// item went ([`one_write_short_reply`](crate::plan::one_write_short_reply)):
    /// the Write chunk echoed with the segment's length set to `written`
    /// (RFC 8166 s3.4.6), no Reply chunk.
    OneWrite { vers: u32, seg: Segment, written: u32 },
    /// Any plan of [`plan_reply`](crate::plan::plan_reply), against the
    /// chunk lists `call` it was made from.
    Planned {
        plan: &'a ReplyPlan,
        call: &'a ChunkLists<'a>,
    },
}

/// Encode the transport header of a Reply (RFC 8166 s3.5; draft s5.3.1)
/// into `buf`; returns its length (for a plan, `plan.header_len`):
///
/// ```text
/// v1: xid 1 credit (RDMA_MSG | RDMA_NOMSG for a Long reply)                  0 write_list reply_chunk
/// v2: xid 2 credit (RDMA2_MSG | RDMA2_NOMSG) flags|RESPONSE inv_handle=0     0 write_list reply_chunk
/// ```
///
/// For a Short reply the Send is this header followed by the reduced reply
/// ([`ReplyPlan::reduced_ranges`]; the whole reply for `ChunkFree`, the
/// reply without its one item for `OneWrite`).
///
/// Writes: the Call's XID, the version, `credits` (the grant), RDMA_MSG or
/// RDMA_NOMSG; in v2 `flags | RPCRDMA2_F_RESPONSE` (draft s3.2) and
/// `rdma_inv_handle` 0; an empty Read list; every Write chunk of the Call with
/// segment lengths updated to the bytes written (s3.4.6); the Reply chunk with
/// updated lengths for a Long reply, absent otherwise. For `Planned`, `call`
/// must be the chunk lists the plan was made from
/// ([`PlanError::ChunkMismatch`] otherwise).
///
/// The two common shapes are written in one step (like
/// [`decode`](super::decode)'s one-step decoders), a plan of either shape
/// included; everything else word by word. On error the contents of `buf`
/// are unspecified.
///
/// May be called from any core.
#[inline(always)]
pub fn encode_reply_header(
    reply: ReplyHeaderOut<'_>,
    xid: u32,
    credits: u32,
    flags: u32,
    buf: &mut [u8],
) -> Result<usize, PlanError> {
    let flags = flags | RPCRDMA2_F_RESPONSE;
    match reply {
        ReplyHeaderOut::ChunkFree { vers } => chunk_free_reply_header(vers, xid, credits, flags, buf),
        ReplyHeaderOut::OneWrite { vers, seg, written } => {
            one_write_reply_header(vers, xid, credits, flags, seg, written, buf)
        }
        ReplyHeaderOut::Planned { plan, call } => planned_reply_header(plan, call, xid, credits, flags, buf),
    }
}

/// [`encode_reply_header`] of `ReplyHeaderOut::ChunkFree`; `flags` includes
/// RESPONSE.
#[inline(always)]
fn chunk_free_reply_header(vers: u32, xid: u32, credits: u32, flags: u32, buf: &mut [u8]) -> Result<usize, PlanError> {
    let len = chunk_free_header_len(vers).ok_or(PlanError::UnsupportedVersion { vers })?;
    encode_chunk_free_header(vers, xid, credits, flags, buf).ok_or(too_small(len))
}

/// [`encode_reply_header`] of `ReplyHeaderOut::OneWrite`; `flags` includes
/// RESPONSE.
#[inline(always)]
fn one_write_reply_header(
    vers: u32,
    xid: u32,
    credits: u32,
    flags: u32,
    seg: Segment,
    written: u32,
    buf: &mut [u8],
) -> Result<usize, PlanError> {
    let len = one_write_header_len(vers).ok_or(PlanError::UnsupportedVersion { vers })?;
    let seg = Segment {
        length: written.min(seg.length),
        ..seg
    };
    encode_one_write_header(vers, xid, credits, flags, 0, seg, buf).ok_or(too_small(len))
}

/// [`encode_reply_header`] of a plan: a plan of one of the one-step shapes
/// in one step (anything the word-by-word writer would refuse takes it, for
/// its error), the rest word by word. `flags` includes RESPONSE.
fn planned_reply_header(
    plan: &ReplyPlan,
    call: &ChunkLists<'_>,
    xid: u32,
    credits: u32,
    flags: u32,
    buf: &mut [u8],
) -> Result<usize, PlanError> {
    let hdr_len = Some(plan.header_len as usize);
    if plan.kind == ReplyKind::Short {
        if call.is_empty() && plan.write_chunks == 0 && hdr_len == chunk_free_header_len(plan.vers) {
            if let Ok(n) = chunk_free_reply_header(plan.vers, xid, credits, flags, buf) {
                return Ok(n);
            }
        }
        let written = plan.items.first().map_or(0, |it| it.len);
        if let Some(seg) = call.one_write_segment() {
            if plan.write_chunks == 1
                && plan.items.len() <= 1
                && written <= seg.length
                && hdr_len == one_write_header_len(plan.vers)
            {
                if let Ok(n) = one_write_reply_header(plan.vers, xid, credits, flags, seg, written, buf) {
                    return Ok(n);
                }
            }
        }
    }
    encode_reply_header_general(plan, call, xid, credits, flags, buf)
}

/// The error of a header of `needed` bytes that does not fit its buffer.
fn too_small(needed: usize) -> PlanError {
    PlanError::Encode(EncodeError::BufferTooSmall { needed })
}

/// [`encode_reply_header`] of a plan, word by word, for every shape (the
/// one-step shapes are checked against it in tests). `flags` includes
/// RESPONSE.
pub(crate) fn encode_reply_header_general(
    plan: &ReplyPlan,
    call: &ChunkLists<'_>,
    xid: u32,
    credits: u32,
    flags: u32,
    buf: &mut [u8],
) -> Result<usize, PlanError> {
    let len = plan.header_len as usize;
    let Some(buf) = buf.get_mut(..len) else {
        return Err(PlanError::Encode(EncodeError::BufferTooSmall { needed: len }));
    };
    let htype = match plan.kind {
        ReplyKind::Short => RDMA_MSG,
        ReplyKind::Long => RDMA_NOMSG,
    };
    // Prefix and empty Read list in one copy: v1 xid vers credit proc 0;
    // v2 xid vers credit htype flags inv_handle(0) 0.
    let mut head = [0u8; 28];
    head[..4].copy_from_slice(&xid.to_be_bytes());
    head[4..8].copy_from_slice(&plan.vers.to_be_bytes());
    head[8..12].copy_from_slice(&credits.to_be_bytes());
    head[12..16].copy_from_slice(&htype.to_be_bytes());
    let head_len = if plan.vers == RPCRDMA_VERSION_2 {
        head[16..20].copy_from_slice(&flags.to_be_bytes());
        if let Some(d) = buf.get_mut(..28) {
            d.copy_from_slice(&head);
        }
        28
    } else {
        if let Some(d) = buf.get_mut(..20) {
            d.copy_from_slice(&head[..20]);
        }
        20
    };
    let mut w = Words { buf, pos: head_len };
    let mut short = 0u32;
    let mut n = 0u32;
    for chunk in call.writes.iter() {
        let fill = plan.items.get(n as usize).map_or(0, |it| it.len);
        short |= w.put_filled(&chunk, fill);
        n += 1;
    }
    w.put(0); // end of Write list
    match (plan.kind, call.reply) {
        (ReplyKind::Long, Some(rc)) => short |= w.put_filled(&rc, plan.reduced_len),
        (ReplyKind::Long, None) => short = 1,
        (ReplyKind::Short, _) => w.put(0),
    }
    if short != 0 || n != plan.write_chunks || w.pos != len {
        return Err(PlanError::ChunkMismatch {
            what: "chunks differ from the plan",
        });
    }
    Ok(len)
}

/// The transport header of a chunk-free Call ([`is_chunk_free_call`](crate::plan::is_chunk_free_call)) in one
/// step: v1 `xid 1 credit RDMA_MSG 0 0 0` (28 bytes), v2 `xid 2 credit
/// RDMA2_MSG 0 0 0 0 0` (36 bytes: flags 0, `rdma_inv_handle` 0, three empty
/// lists). The bytes [`encode_call_header`] writes for such a Call with
/// `inv_handle` 0. `None` for another version or a buffer too short.
///
/// May be called from any core.
#[inline]
pub fn encode_chunk_free_call_header(vers: u32, xid: u32, credits: u32, buf: &mut [u8]) -> Option<usize> {
    encode_chunk_free_header(vers, xid, credits, 0, buf)
}

/// Length of an RDMA_MSG / RDMA2_MSG header with three empty chunk lists:
/// 28 bytes in v1 (prefix, three list words), 36 in v2 (prefix with
/// `rdma_htype` and `rdma_flags`, `rdma_inv_handle`, three list words);
/// `None` for another version.
///
/// May be called from any core.
pub const fn chunk_free_header_len(vers: u32) -> Option<usize> {
    match vers {
        RPCRDMA_VERSION_1 => Some(V1_PREFIX_LEN + 12),
        RPCRDMA_VERSION_2 => Some(V2_PREFIX_LEN + 16),
        _ => None,
    }
}

/// An RDMA_MSG / RDMA2_MSG header with three empty chunk lists: v1 `xid 1
/// credit RDMA_MSG 0 0 0`; v2 `xid 2 credit RDMA2_MSG flags 0 0 0 0`
/// (`rdma_inv_handle` 0). `flags` is ignored in v1, which has none.
#[inline(always)]
fn encode_chunk_free_header(vers: u32, xid: u32, credits: u32, flags: u32, buf: &mut [u8]) -> Option<usize> {
    let len = chunk_free_header_len(vers)?;
    let mut w = Writer::new(buf.get_mut(..len)?);
    let done = if vers == RPCRDMA_VERSION_2 {
        w.put_u32s([xid, vers, credits, RDMA_MSG, flags, 0, 0, 0, 0])
    } else {
        w.put_u32s([xid, vers, credits, RDMA_MSG, 0, 0, 0])
    };
    done.ok().map(|()| len)
}

/// Length of an RDMA_MSG / RDMA2_MSG header whose only chunk is one Write
/// chunk of one segment (the READ shape, [`ChunkLists::one_write_segment`]):
/// 52 bytes in v1, 60 in v2; `None` for another version.
///
/// May be called from any core.
pub const fn one_write_header_len(vers: u32) -> Option<usize> {
    match vers {
        RPCRDMA_VERSION_1 => Some(V1_PREFIX_LEN + 36),
        RPCRDMA_VERSION_2 => Some(V2_PREFIX_LEN + 4 + 36),
        _ => None,
    }
}

/// An RDMA_MSG / RDMA2_MSG header with an empty Read list, one Write chunk
/// holding the one segment `seg`, and no Reply chunk (RFC 8166 s4.1; draft
/// s5.3.1):
///
/// ```text
/// v1: xid 1 credit RDMA_MSG                  0  1 1 handle length offset(2)  0  0
/// v2: xid 2 credit RDMA2_MSG flags inv_handle 0  1 1 handle length offset(2)  0  0
/// ```
///
/// `flags` and `inv_handle` are ignored in v1. `None` when `buf` is shorter
/// than [`one_write_header_len`] or the version is unknown.
#[inline(always)]
fn encode_one_write_header(
    vers: u32,
    xid: u32,
    credits: u32,
    flags: u32,
    inv_handle: u32,
    seg: Segment,
    buf: &mut [u8],
) -> Option<usize> {
    let len = one_write_header_len(vers)?;
    let mut w = Writer::new(buf.get_mut(..len)?);
    let off = seg.offset;
    let (hi, lo) = ((off >> 32) as u32, off as u32);
    let done = if vers == RPCRDMA_VERSION_2 {
        w.put_u32s([
            xid, vers, credits, RDMA_MSG, flags, inv_handle, 0, 1, 1, seg.handle, seg.length, hi, lo, 0, 0,
        ])
    } else {
        w.put_u32s([
            xid, vers, credits, RDMA_MSG, 0, 1, 1, seg.handle, seg.length, hi, lo, 0, 0,
        ])
    };
    done.ok().map(|()| len)
}

/// The header of a [`one_write_call`](crate::plan::one_write_call) Call with the one segment `seg`
/// provisioned: v1 `xid 1 credit RDMA_MSG 0 1 1 seg 0 0`, v2 `xid 2 credit
/// RDMA2_MSG 0 0 0 1 1 seg 0 0` (no flags, `rdma_inv_handle` 0). `None` when
/// `buf` is shorter than [`one_write_header_len`] or the version is unknown.
///
/// May be called from any core.
#[inline]
pub fn encode_one_write_call_header(vers: u32, xid: u32, credits: u32, seg: Segment, buf: &mut [u8]) -> Option<usize> {
    encode_one_write_header(vers, xid, credits, 0, 0, seg, buf)
}
