//! Encoding transport headers.

use super::*;
use crate::error::{DecodeError, EncodeError};
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

/// Encode `h` into `buf`, returning the header length. For MSG/MSGP the caller
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
