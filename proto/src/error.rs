//! Typed decode and encode errors shared by every decoder in `proto`.
//!
//! Every decoder in this crate returns [`DecodeError`]: a small `Copy` value naming
//! *what* went wrong ([`DecodeErrorKind`]), *which* field ([`DecodeError::field`]) and
//! *where* (byte offset from the start of the buffer handed to the decoder).
//! [`DecodeError::v1_reply`] and [`DecodeError::v2_reply`] map it to the error a
//! responder sends back (RFC 8166 section 4.5; draft-cel-nfsv4-rpcrdma-version-two-09
//! section 5.3.3), so the engine never has to invent error codes.

use core::fmt;

/// What went wrong while decoding peer input.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DecodeErrorKind {
    /// The buffer ended before the field did.
    Truncated,
    /// A counted item (opaque, string, array) is longer than its bound.
    TooLong { len: u32, max: u32 },
    /// An enum, union arm, boolean or optional-data word holds a value the grammar
    /// does not allow.
    BadDiscriminant { value: u32 },
    /// `rdma_vers` is not a version this endpoint speaks (answered with ERR_VERS /
    /// RDMA2_ERR_VERS).
    BadVersion { vers: u32 },
    /// `rdma_proc` / `rdma_htype` is unknown or unsupported (ERR_CHUNK in v1,
    /// RDMA2_ERR_INVAL_HTYPE in v2).
    BadHeaderType { htype: u32 },
    /// More Read chunks than the configured limit (RDMA2_ERR_READ_CHUNKS).
    TooManyReadChunks { max: u32 },
    /// More Write chunks than the configured limit (RDMA2_ERR_WRITE_CHUNKS).
    TooManyWriteChunks { max: u32 },
    /// A chunk (or the Read list as a whole) has more segments than the configured
    /// limit (RDMA2_ERR_SEGMENTS).
    TooManySegments { max: u32 },
    /// A Read segment's Position is not a multiple of four (RFC 8166 section 3.4.5).
    UnalignedPosition { position: u32 },
    /// Read segments sharing one Position are not adjacent in the Read list, or
    /// Positions go backwards: the list does not describe a sequence of chunks.
    ReadListOrder { position: u32 },
    /// An RDMA_NOMSG carries neither a Position-Zero Read chunk nor a Reply chunk,
    /// so no RPC message can be found (RFC 8166 section 4.5).
    NoMsgWithoutChunks,
    /// The XID in the transport header differs from the RPC message's XID.
    XidMismatch { header: u32, rpc: u32 },
    /// A value is well formed but violates a protocol rule (the field names which).
    Invalid { value: u32 },
    /// The header type is recognised but this endpoint refuses it (RDMA_MSGP at a
    /// responder, RFC 8166 section 4.6).
    Unsupported { htype: u32 },
}

/// A decode failure: what, in which field, at which byte offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DecodeError {
    pub kind: DecodeErrorKind,
    /// The name of the XDR field (as the specs spell it) being decoded.
    pub field: &'static str,
    /// Byte offset of that field from the start of the decoded buffer.
    pub offset: usize,
}

impl DecodeError {
    pub const fn new(kind: DecodeErrorKind, field: &'static str, offset: usize) -> Self {
        Self { kind, field, offset }
    }

    /// The RPC-over-RDMA version 1 error a responder answers with (RFC 8166
    /// section 4.5): ERR_VERS for an unsupported version (the caller supplies the
    /// supported range), ERR_CHUNK for everything else.
    pub fn v1_reply(&self, vers_low: u32, vers_high: u32) -> crate::header::V1Error {
        match self.kind {
            DecodeErrorKind::BadVersion { .. } => crate::header::V1Error::Vers {
                low: vers_low,
                high: vers_high,
            },
            _ => crate::header::V1Error::Chunk,
        }
    }

    /// The RPC-over-RDMA version 2 error a responder answers with
    /// (draft-cel-nfsv4-rpcrdma-version-two-09 section 5.3.3).
    pub fn v2_reply(&self, vers_low: u32, vers_high: u32) -> crate::header::V2Error {
        use crate::header::V2Error;
        match self.kind {
            DecodeErrorKind::BadVersion { .. } => V2Error::Vers {
                low: vers_low,
                high: vers_high,
            },
            DecodeErrorKind::BadHeaderType { .. } | DecodeErrorKind::Unsupported { .. } => V2Error::InvalHtype,
            DecodeErrorKind::TooManyReadChunks { max } => V2Error::ReadChunks { max_chunks: max },
            DecodeErrorKind::TooManyWriteChunks { max } => V2Error::WriteChunks { max_chunks: max },
            DecodeErrorKind::TooManySegments { max } => V2Error::Segments { max_segments: max },
            _ => V2Error::BadXdr,
        }
    }
}

impl fmt::Display for DecodeErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::Truncated => write!(f, "truncated"),
            Self::TooLong { len, max } => write!(f, "length {len} exceeds limit {max}"),
            Self::BadDiscriminant { value } => write!(f, "invalid discriminant {value}"),
            Self::BadVersion { vers } => write!(f, "unsupported version {vers}"),
            Self::BadHeaderType { htype } => write!(f, "unknown header type {htype}"),
            Self::TooManyReadChunks { max } => write!(f, "more than {max} read chunks"),
            Self::TooManyWriteChunks { max } => write!(f, "more than {max} write chunks"),
            Self::TooManySegments { max } => write!(f, "more than {max} segments"),
            Self::UnalignedPosition { position } => {
                write!(f, "read position {position} is not a multiple of 4")
            }
            Self::ReadListOrder { position } => {
                write!(f, "read segments at position {position} are out of order")
            }
            Self::NoMsgWithoutChunks => {
                write!(f, "RDMA_NOMSG without a position-zero read chunk or reply chunk")
            }
            Self::XidMismatch { header, rpc } => {
                write!(f, "transport xid {header:#x} differs from rpc xid {rpc:#x}")
            }
            Self::Invalid { value } => write!(f, "invalid value {value}"),
            Self::Unsupported { htype } => write!(f, "header type {htype} not supported"),
        }
    }
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {} at byte offset {}", self.field, self.kind, self.offset)
    }
}

impl std::error::Error for DecodeError {}

/// An encode failure. Encoders write into caller buffers and never allocate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EncodeError {
    /// The caller's buffer is too small; `needed` is the total size required when
    /// the encoder can tell, otherwise the size at the point of failure.
    BufferTooSmall { needed: usize },
    /// A value cannot be represented on the wire (e.g. a length above u32::MAX or a
    /// list longer than the protocol limit).
    Unrepresentable { field: &'static str },
}

impl fmt::Display for EncodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::BufferTooSmall { needed } => write!(f, "buffer too small ({needed} bytes needed)"),
            Self::Unrepresentable { field } => write!(f, "{field}: value cannot be encoded"),
        }
    }
}

impl std::error::Error for EncodeError {}
