//! Requester side, the Reply: check what a reply header echoes against the
//! chunks the Call provisioned and lay the reply out as [`Piece`]s (RFC 8166
//! s3.4.6 Write chunk echo and fill order, s3.4.4.1 and s3.4.6.1 where the data
//! of a Write chunk belongs, s3.4.6.2 padding left out, s3.5.3 Reply chunk).

use super::*;

use crate::header::{Body, ChunkLists, Header, Segment, SegmentArray};

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
