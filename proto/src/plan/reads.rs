//! Responder side, the Read list of a received Call: validate it whole, then
//! plan the RDMA Reads and the reassembled Call (RFC 8166 s3.4.5 Read chunks
//! and Positions, s3.4.5.2 XDR padding, s3.5.3 Position-Zero Read chunk, s4.6
//! RDMA_MSGP refused; v2 errors RDMA2_ERR_READ_CHUNKS / SEGMENTS, draft -09
//! s5.3.3). [`plan_inline_call_into`] is the chunk-free Call's plan in one step.

use super::*;

use crate::header::{Body, Header, ReadList, Segment, MAX_READ_CHUNKS, MAX_READ_SEGMENTS};

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
