//! Decoding transport headers (RFC 8166 s4.1-s4.3 for version 1;
//! draft-cel-nfsv4-rpcrdma-version-two-09 s3.1-s3.3, s4.1 and s5.3 for
//! version 2), in the grammar of [`super`]'s module doc.
//!
//! [`decode`] validates a whole header at once: the one-step decoders of the
//! chunk-free and one-Write-segment RDMA_MSG shapes first, then the
//! word-by-word walk for everything else (each one-step decoder tested
//! against the walk in `tests.rs`). [`peek_prefix`] and
//! [`peek_err_vers_v1_layout`] read the fixed prefix of a header that may not
//! decode (RFC 8166 s4.2, s4.5; draft s7.2).

use super::*;
use crate::error::{DecodeError, DecodeErrorKind};
use crate::xdr::Reader;

/// An ERR_VERS in the version 1 layout (`xid vers credit RDMA_ERROR ERR_VERS low
/// high`) whatever its `rdma_vers` word says. A responder that does not know the
/// version a requester used cannot use that version's layout, so it answers in
/// the layout every version shares (RFC 8166 s4.5; draft s7.2); Linux svcrdma
/// copies the requester's version word into it. Returns `(low, high)`.
pub fn peek_err_vers_v1_layout(buf: &[u8]) -> Option<(u32, u32)> {
    (buf.len() >= 28 && be32(buf, 12) == RDMA_ERROR && be32(buf, 16) == ERR_VERS)
        .then(|| (be32(buf, 20), be32(buf, 24)))
}

/// Read the common prefix; `None` if fewer than 12 bytes (such a message cannot be
/// answered at all and is dropped).
pub fn peek_prefix(buf: &[u8]) -> Option<Prefix> {
    (buf.len() >= 12).then(|| Prefix {
        xid: be32(buf, 0),
        vers: be32(buf, 4),
        credits: be32(buf, 8),
    })
}

fn decode_segment_array<'a>(
    r: &mut Reader<'a>,
    max: u32,
    field: &'static str,
) -> Result<SegmentArray<'a>, DecodeError> {
    let at = r.offset();
    let n = r.u32(field)?;
    if n > max {
        return Err(DecodeError::new(DecodeErrorKind::TooManySegments { max }, field, at));
    }
    let raw = r.bytes(n as usize * SEGMENT_LEN, "rdma_segment")?;
    Ok(SegmentArray { raw })
}

/// Decode an optional-data word: 0 or 1.
fn decode_present(r: &mut Reader<'_>, field: &'static str) -> Result<bool, DecodeError> {
    r.bool(field)
}

fn decode_read_list<'a>(r: &mut Reader<'a>, limits: &Limits) -> Result<ReadList<'a>, DecodeError> {
    let start = r.pos();
    let buf = r.buffer();
    let mut segments = 0u32;
    let mut chunks = 0u32;
    let mut last_position: Option<u32> = None;
    loop {
        let at = r.offset();
        if !decode_present(r, "rdma_reads")? {
            break;
        }
        if segments == limits.max_read_segments {
            return Err(DecodeError::new(
                DecodeErrorKind::TooManySegments {
                    max: limits.max_read_segments,
                },
                "rdma_reads",
                at,
            ));
        }
        let pos_at = r.offset();
        let position = r.u32("rdma_position")?;
        r.skip(SEGMENT_LEN, "rdma_target")?;
        if position % 4 != 0 {
            return Err(DecodeError::new(
                DecodeErrorKind::UnalignedPosition { position },
                "rdma_position",
                pos_at,
            ));
        }
        match last_position {
            Some(p) if p == position => {}
            Some(p) if p > position => {
                return Err(DecodeError::new(
                    DecodeErrorKind::ReadListOrder { position },
                    "rdma_position",
                    pos_at,
                ))
            }
            _ => {
                if chunks == limits.max_read_chunks {
                    return Err(DecodeError::new(
                        DecodeErrorKind::TooManyReadChunks {
                            max: limits.max_read_chunks,
                        },
                        "rdma_reads",
                        at,
                    ));
                }
                chunks += 1;
                last_position = Some(position);
            }
        }
        segments += 1;
    }
    let end = r.pos() - 4; // exclude the terminating zero
    Ok(ReadList {
        raw: &buf[start..end],
        chunks,
    })
}

fn decode_write_list<'a>(r: &mut Reader<'a>, limits: &Limits) -> Result<WriteList<'a>, DecodeError> {
    let start = r.pos();
    let buf = r.buffer();
    let mut chunks = 0u32;
    loop {
        let at = r.offset();
        if !decode_present(r, "rdma_writes")? {
            break;
        }
        if chunks == limits.max_write_chunks {
            return Err(DecodeError::new(
                DecodeErrorKind::TooManyWriteChunks {
                    max: limits.max_write_chunks,
                },
                "rdma_writes",
                at,
            ));
        }
        decode_segment_array(r, limits.max_chunk_segments, "rdma_target")?;
        chunks += 1;
    }
    let end = r.pos() - 4;
    Ok(WriteList {
        raw: &buf[start..end],
        chunks,
    })
}

fn decode_chunk_lists<'a>(r: &mut Reader<'a>, limits: &Limits) -> Result<ChunkLists<'a>, DecodeError> {
    // Most messages carry no chunks at all: three zero words.
    if r.rest().first_chunk::<12>() == Some(&[0; 12]) {
        let at = r.pos();
        let empty = &r.buffer()[at..at];
        r.skip(12, "rdma_reply")?;
        return Ok(ChunkLists {
            reads: ReadList { raw: empty, chunks: 0 },
            writes: WriteList { raw: empty, chunks: 0 },
            reply: None,
        });
    }
    let reads = decode_read_list(r, limits)?;
    let writes = decode_write_list(r, limits)?;
    let reply = if decode_present(r, "rdma_reply")? {
        Some(decode_segment_array(r, limits.max_chunk_segments, "rdma_reply")?)
    } else {
        None
    };
    Ok(ChunkLists { reads, writes, reply })
}

/// For MSG/MSGP: the RPC message must be present (at least its XID) and its XID
/// must equal the transport header's (RFC 8166 section 4.2.1; draft s5.3.1
/// `rdma_rpc_first_word`).
fn check_payload(xid: u32, payload: &[u8], offset: usize) -> Result<(), DecodeError> {
    if payload.len() < 4 {
        return Err(DecodeError::new(
            DecodeErrorKind::Truncated,
            "rdma_rpc_first_word",
            offset,
        ));
    }
    let rpc = be32(payload, 0);
    if rpc != xid {
        return Err(DecodeError::new(
            DecodeErrorKind::XidMismatch { header: xid, rpc },
            "rdma_xid",
            0,
        ));
    }
    Ok(())
}

fn check_nomsg(chunks: &ChunkLists<'_>, at: usize) -> Result<(), DecodeError> {
    if chunks.reads.position_zero().is_none() && chunks.reply.is_none() {
        return Err(DecodeError::new(DecodeErrorKind::NoMsgWithoutChunks, "rdma_nomsg", at));
    }
    Ok(())
}

fn decode_v1<'a>(mut r: Reader<'a>, p: Prefix, limits: &Limits) -> Result<Header<'a>, DecodeError> {
    let proc_at = r.offset();
    let proc_ = r.u32("rdma_proc")?;
    let body = match proc_ {
        RDMA_MSG | RDMA_NOMSG => {
            let chunks = decode_chunk_lists(&mut r, limits)?;
            if proc_ == RDMA_MSG {
                let payload_offset = r.pos();
                let payload = r.rest();
                check_payload(p.xid, payload, payload_offset)?;
                Body::Msg {
                    inv_handle: 0,
                    chunks,
                    payload_offset,
                    payload,
                }
            } else {
                check_nomsg(&chunks, proc_at)?;
                Body::NoMsg { inv_handle: 0, chunks }
            }
        }
        RDMA_MSGP => {
            let align = r.u32("rdma_align")?;
            let thresh = r.u32("rdma_thresh")?;
            let chunks = decode_chunk_lists(&mut r, limits)?;
            let payload_offset = r.pos();
            let payload = r.rest();
            check_payload(p.xid, payload, payload_offset)?;
            Body::MsgP {
                align,
                thresh,
                chunks,
                payload_offset,
                payload,
            }
        }
        RDMA_DONE => Body::Done,
        RDMA_ERROR => {
            let at = r.offset();
            match r.u32("rdma_err")? {
                ERR_VERS => {
                    let low = r.u32("rdma_vers_low")?;
                    let high = r.u32("rdma_vers_high")?;
                    Body::ErrorV1(V1Error::Vers { low, high })
                }
                ERR_CHUNK => Body::ErrorV1(V1Error::Chunk),
                value => {
                    return Err(DecodeError::new(
                        DecodeErrorKind::BadDiscriminant { value },
                        "rdma_err",
                        at,
                    ))
                }
            }
        }
        htype => {
            return Err(DecodeError::new(
                DecodeErrorKind::BadHeaderType { htype },
                "rdma_proc",
                proc_at,
            ))
        }
    };
    let header_len = match body {
        Body::Msg { payload_offset, .. } | Body::MsgP { payload_offset, .. } => payload_offset,
        _ => r.pos(),
    };
    Ok(Header {
        xid: p.xid,
        vers: p.vers,
        credits: p.credits,
        flags: 0,
        body,
        header_len,
    })
}

fn decode_props<'a>(r: &mut Reader<'a>, limits: &Limits) -> Result<PropList<'a>, DecodeError> {
    // Each property takes at least 8 bytes (id + zero-length data).
    let count = r.count(limits.max_properties, 8, "rdma_props")?;
    let start = r.pos();
    let buf = r.buffer();
    for _ in 0..count {
        let id = r.u32("rdma_which")?;
        let data_at = r.offset();
        let data = r.opaque_var(limits.max_property_len, "rdma_data")?;
        // Known properties must match their typedef (draft s4.1): zero-length data
        // means the default; otherwise exactly one XDR uint32/enum.
        let known = matches!(id, RDMA2_PROPID_RBSIZ | RDMA2_PROPID_BRS);
        if known && !data.is_empty() {
            if data.len() != 4 {
                return Err(DecodeError::new(
                    DecodeErrorKind::Invalid {
                        value: data.len() as u32,
                    },
                    "rdma_data",
                    data_at,
                ));
            }
            let v = be32(data, 0);
            if id == RDMA2_PROPID_BRS && v > RDMA2_RVREQSUP_GENL {
                return Err(DecodeError::new(
                    DecodeErrorKind::BadDiscriminant { value: v },
                    "rdma_data",
                    data_at + 4,
                ));
            }
        }
    }
    Ok(PropList {
        raw: &buf[start..r.pos()],
        count,
    })
}

fn decode_v2<'a>(mut r: Reader<'a>, p: Prefix, limits: &Limits) -> Result<Header<'a>, DecodeError> {
    let htype_at = r.offset();
    let htype = r.u32("rdma_htype")?;
    let flags_at = r.offset();
    let flags = r.u32("rdma_flags")?;
    let response = flags & RPCRDMA2_F_RESPONSE != 0;
    let body = match htype {
        RDMA2_MSG | RDMA2_NOMSG => {
            let inv_handle = r.u32("rdma_inv_handle")?;
            let chunks = decode_chunk_lists(&mut r, limits)?;
            if htype == RDMA2_MSG {
                let payload_offset = r.pos();
                let payload = r.rest();
                check_payload(p.xid, payload, payload_offset)?;
                // s3.2: for RDMA2_MSG the RESPONSE flag equals the RPC msg_type.
                if payload.len() >= 8 {
                    let msg_type = be32(payload, 4);
                    if msg_type > 1 || (msg_type == 1) != response {
                        return Err(DecodeError::new(
                            DecodeErrorKind::Invalid { value: flags },
                            "rdma_flags",
                            flags_at,
                        ));
                    }
                }
                Body::Msg {
                    inv_handle,
                    chunks,
                    payload_offset,
                    payload,
                }
            } else {
                check_nomsg(&chunks, htype_at)?;
                Body::NoMsg { inv_handle, chunks }
            }
        }
        RDMA2_ERROR => {
            // s3.2: "When the rdma_start.rdma_htype field has the value RDMA2_ERROR,
            // the RPCRDMA2_F_RESPONSE flag MUST be set."
            if !response {
                return Err(DecodeError::new(
                    DecodeErrorKind::Invalid { value: flags },
                    "rdma_flags",
                    flags_at,
                ));
            }
            let code = r.u32("rdma_err")?;
            let (a, b) = match V2Error::arm_words(code) {
                2 => {
                    let (fa, fb) = if code == RDMA2_ERR_VERS {
                        ("rdma_vers_low", "rdma_vers_high")
                    } else {
                        ("rdma_chunk_index", "rdma_length_needed")
                    };
                    (r.u32(fa)?, r.u32(fb)?)
                }
                1 => {
                    let f = match code {
                        RDMA2_ERR_SEGMENTS => "rdma_max_segments",
                        RDMA2_ERR_REPLY_RESOURCE => "rdma_length_needed",
                        _ => "rdma_max_chunks",
                    };
                    (r.u32(f)?, 0)
                }
                _ => (0, 0),
            };
            Body::ErrorV2(V2Error::from_code(code, a, b))
        }
        RDMA2_CONNPROP => Body::ConnProp(decode_props(&mut r, limits)?),
        htype => {
            return Err(DecodeError::new(
                DecodeErrorKind::BadHeaderType { htype },
                "rdma_htype",
                htype_at,
            ))
        }
    };
    let header_len = match body {
        Body::Msg { payload_offset, .. } => payload_offset,
        _ => r.pos(),
    };
    Ok(Header {
        xid: p.xid,
        vers: p.vers,
        credits: p.credits,
        flags,
        body,
        header_len,
    })
}

/// Decode one transport header (and locate the inline payload that follows it).
///
/// The whole header is validated against `limits` before this returns. Versions
/// other than 1 and 2 give [`DecodeErrorKind::BadVersion`] (answer with ERR_VERS);
/// see [`DecodeError::v1_reply`] / [`DecodeError::v2_reply`] for the answer to the
/// other errors. Trailing bytes after a NOMSG, DONE, ERROR or CONNPROP body are
/// ignored (Sends may be padded).
///
/// May be called from any core.
pub fn decode<'a>(buf: &'a [u8], limits: &Limits) -> Result<Header<'a>, DecodeError> {
    if let Some(h) = decode_msg_without_chunks(buf) {
        return Ok(h);
    }
    if let Some(h) = decode_msg_one_write_segment(buf, limits) {
        return Ok(h);
    }
    decode_walk(buf, limits)
}

/// The MSG payload checks of the walk, for the one-step decoders: the RPC
/// message opens with the header's XID (RFC 8166 s4.2.1; draft s5.3.1
/// `rdma_rpc_first_word`), and in v2 the RESPONSE flag equals the RPC
/// msg_type (draft s3.2). `false` where the walk would return an error.
#[inline]
fn msg_payload_ok(vers: u32, xid: u32, flags: u32, payload: &[u8]) -> bool {
    if payload.len() < 4 || be32(payload, 0) != xid {
        return false;
    }
    if vers == RPCRDMA_VERSION_2 && payload.len() >= 8 {
        let msg_type = be32(payload, 4);
        if msg_type > 1 || (msg_type == 1) != (flags & RPCRDMA2_F_RESPONSE != 0) {
            return false;
        }
    }
    true
}

/// The chunked shape NFS READ travels in, in one step: an RDMA_MSG /
/// RDMA2_MSG whose Read list is empty, whose Write list is one Write chunk
/// of one segment, and which has no Reply chunk. The Linux client sends a
/// READ Call like this, and the Reply that answers it has the same shape
/// (the segment's length updated to the bytes written):
///
/// ```text
/// v1: xid 1 credit RDMA_MSG                  0  1 1 handle length offset(2)  0  0  payload  (52-byte header)
/// v2: xid 2 credit RDMA2_MSG flags inv_handle 0  1 1 handle length offset(2)  0  0  payload  (60-byte header)
///                                            |  |   '- the one segment -'    |  '- no Reply chunk
///                                            |  '- a Write chunk, 1 segment  '- no more Write chunks
///                                            '- no Read list
/// ```
///
/// `Some` only when [`decode_walk`] would return `Ok` with the identical
/// header: the limits must allow one Write chunk of one segment, as the walk
/// checks. Tested against the walk in `fast_decode_agrees_with_the_walk`.
#[inline]
pub(super) fn decode_msg_one_write_segment<'a>(buf: &'a [u8], limits: &Limits) -> Option<Header<'a>> {
    if buf.len() < 16 || limits.max_write_chunks == 0 || limits.max_chunk_segments == 0 {
        return None;
    }
    let w = |i: usize| be32(buf, 4 * i);
    let (xid, vers, credits) = (w(0), w(1), w(2));
    // Offset of the Read list's first word.
    let (lists_at, flags, inv_handle) = match vers {
        RPCRDMA_VERSION_1 if w(3) == RDMA_MSG => (16, 0, 0),
        RPCRDMA_VERSION_2 if w(3) == RDMA2_MSG => (24, w(4), w(5)),
        _ => return None,
    };
    let header_len = lists_at + 36;
    if buf.len() < header_len {
        return None;
    }
    let l = |k: usize| be32(buf, lists_at + 4 * k);
    if l(0) != 0 || l(1) != 1 || l(2) != 1 || l(7) != 0 || l(8) != 0 {
        return None;
    }
    let chunks = ChunkLists {
        reads: ReadList {
            raw: &buf[lists_at..lists_at],
            chunks: 0,
        },
        // The entry: present word, count, segment (the walk's `raw`, without
        // the terminating zero word).
        writes: WriteList {
            raw: &buf[lists_at + 4..lists_at + 28],
            chunks: 1,
        },
        reply: None,
    };
    fast_msg(
        buf,
        Prefix { xid, vers, credits },
        flags,
        inv_handle,
        chunks,
        header_len,
    )
}

/// [`decode`] of the chunk-free shape alone: `Some` exactly when the
/// message is an RDMA_MSG / RDMA2_MSG with three empty chunk lists that
/// [`decode`] accepts, with the header [`decode`] returns for it; `None`
/// for anything else, which the caller hands to [`decode`] (malformed
/// messages included, so their errors are the walk's). No limit can apply
/// to empty lists, so none is taken. For an engine's path for chunk-free
/// Calls and Replies, which skips the planning a chunked message needs.
///
/// May be called from any core.
#[inline]
pub fn decode_chunk_free_msg(buf: &[u8]) -> Option<Header<'_>> {
    decode_msg_without_chunks(buf)
}

/// The common case of [`decode`] in one step: an RDMA_MSG (RFC 8166 s4.2) or
/// RDMA2_MSG (draft s5.3.1) with three empty chunk lists, which is how most
/// Calls and Replies travel:
///
/// ```text
/// v1: xid 1 credit RDMA_MSG       0 0 0             payload   (28-byte header)
/// v2: xid 2 credit RDMA2_MSG flags inv_handle 0 0 0 payload   (36-byte header)
/// ```
///
/// `Some` only when [`decode_walk`] would return `Ok` with the identical
/// header (no list can exceed a limit: all three are empty); anything else,
/// errors included, is left to the walk. Tested against it in
/// `fast_decode_agrees_with_the_walk`.
#[inline]
pub(super) fn decode_msg_without_chunks(buf: &[u8]) -> Option<Header<'_>> {
    let w = |i: usize| be32(buf, 4 * i);
    let (xid, vers, credits) = (w(0), w(1), w(2));
    let (flags, inv_handle, header_len) = match vers {
        RPCRDMA_VERSION_1 if buf.len() >= 28 && w(3) == RDMA_MSG && (w(4) | w(5) | w(6)) == 0 => (0, 0, 28),
        RPCRDMA_VERSION_2 if buf.len() >= 36 && w(3) == RDMA2_MSG && (w(6) | w(7) | w(8)) == 0 => (w(4), w(5), 36),
        _ => return None,
    };
    let p = Prefix { xid, vers, credits };
    fast_msg(buf, p, flags, inv_handle, ChunkLists::default(), header_len)
}

/// The header the one-step decoders return: an RDMA_MSG / RDMA2_MSG with
/// `chunks`, the payload after `header_len` bytes, once the payload passes
/// the walk's checks ([`msg_payload_ok`]).
#[inline(always)]
fn fast_msg<'a>(
    buf: &'a [u8],
    p: Prefix,
    flags: u32,
    inv_handle: u32,
    chunks: ChunkLists<'a>,
    header_len: usize,
) -> Option<Header<'a>> {
    let payload = buf.get(header_len..)?;
    if !msg_payload_ok(p.vers, p.xid, flags, payload) {
        return None;
    }
    Some(Header {
        xid: p.xid,
        vers: p.vers,
        credits: p.credits,
        flags,
        body: Body::Msg {
            inv_handle,
            chunks,
            payload_offset: header_len,
            payload,
        },
        header_len,
    })
}

/// [`decode`] by walking the header word by word (every header type).
pub(super) fn decode_walk<'a>(buf: &'a [u8], limits: &Limits) -> Result<Header<'a>, DecodeError> {
    let mut r = Reader::new(buf);
    let xid = r.u32("rdma_xid")?;
    let vers_at = r.offset();
    let vers = r.u32("rdma_vers")?;
    let credits = r.u32("rdma_credit")?;
    let p = Prefix { xid, vers, credits };
    match vers {
        RPCRDMA_VERSION_1 => decode_v1(r, p, limits),
        RPCRDMA_VERSION_2 => decode_v2(r, p, limits),
        vers => Err(DecodeError::new(
            DecodeErrorKind::BadVersion { vers },
            "rdma_vers",
            vers_at,
        )),
    }
}
