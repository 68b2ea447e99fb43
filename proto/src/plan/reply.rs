//! Responder side, the Reply: reduce DDP-eligible results into the Call's
//! Write chunks and choose Short (RDMA_MSG) or Long (RDMA_NOMSG, Reply chunk)
//! or the error to answer with (RFC 8166 s3.4.4.4 reduction, s3.4.6 and
//! s3.4.6.2 Write chunks, s3.5.1-s3.5.3 reply forms, s4.5 ERR_CHUNK; draft -09
//! s5.3.3 RDMA2_ERR_WRITE_RESOURCE / REPLY_RESOURCE).
//!
//! [`plan_reply`] is the general planner and [`WriteOps`] the RDMA Writes it
//! implies; [`one_write_short_reply`] is its one-step answer for the READ
//! shape (tested against it). The Reply's transport header is written by
//! [`crate::header::encode_reply_header`] and its one-step variants.

use super::*;

use crate::header::{ChunkLists, Segment, SegmentArray, WriteChunks};
use crate::ulb::DdpItem;

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
/// [`UpperLayerBinding::reply_items`](crate::ulb::UpperLayerBinding::reply_items), in stream order), given the Call's chunk
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
///   in v1. An empty Write chunk (zero segments) takes none of its item,
///   which stays in the reply. Every Write chunk is echoed; unused ones with
///   zero lengths, empty ones empty (s3.4.6).
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
                // An empty Write chunk (a zero segment count; its length is
                // zero by definition, RFC 8166 s3.4.6) takes nothing of its
                // item: the item stays in the reply (inline, or in the Reply
                // chunk of a Long reply) and the chunk is echoed empty, its
                // segment count copied (s3.4.6: "MUST copy the segment count
                // and all segments"). It is not a chunk too short for its item.
                let it = &if chunk.is_empty() {
                    DdpItem { len: 0, ..*it }
                } else {
                    *it
                };
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

/// Responder side, the READ shape: whether [`plan_reply`] would answer a
/// Call whose only chunk is one Write chunk of the one segment `seg`
/// ([`ChunkLists::one_write_segment`]) with a Short reply that reduces the
/// reply's one DDP item into that chunk, and if so the reduced length (the
/// inline payload after [`one_write_header_len`] bytes of header). `None`
/// for anything else, errors included: the caller then plans the general
/// way. The reply is then one RDMA Write of the item to `seg` and the Send
/// of [`encode_reply_header`]'s `ReplyHeaderOut::OneWrite` header followed by the reply without the
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
