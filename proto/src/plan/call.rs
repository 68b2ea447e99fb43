//! Requester side, the Call: how an unreduced RPC Call travels and what it
//! provisions for its Reply (RFC 8166 s3.5.1 Short, s3.5.2 Chunked, s3.5.3
//! Long; Read chunks s3.4.5, Write chunks s3.4.6, reply size s6.2; the same
//! rules in v2, draft-cel-nfsv4-rpcrdma-version-two-09 s4.2.1 and s5.3.1).
//!
//! [`plan_call`] is the general planner; [`is_chunk_free_call`] and
//! [`one_write_call`] say in one step whether it would plan the chunk-free or
//! the one-Write-chunk shape (each tested against [`plan_call`]). The Call's
//! transport header is written by the encoders in [`crate::header`].

use super::*;

use crate::header::READ_ENTRY_LEN;
use crate::ulb::{DdpItem, UpperLayerBinding};

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
