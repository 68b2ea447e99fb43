#![forbid(unsafe_code)]
//! The JSON form of RPC-over-RDMA transport headers and RFC 8797 CM Private Data,
//! as printed and read back by `rpcrdma-dump`.
//!
//! [`decode_header`] turns raw bytes into a [`HeaderJson`]; [`encode_header`] turns
//! a [`HeaderJson`] (usually parsed from the tool's own output, possibly edited)
//! back into bytes. For every header that decodes, `encode_header(&decode_header(b)?)`
//! reproduces `b` byte for byte, except that XDR padding inside RDMA2_CONNPROP
//! property data is re-encoded as zeros (RFC 4506 section 3 makes it zero).
//! [`decode_private_data`] / [`encode_private_data`] do the same for the 8-byte
//! RFC 8797 message.
//!
//! # Field names (fixed: scripts rely on them)
//!
//! | field | present for | meaning |
//! |---|---|---|
//! | `version`, `xid`, `credits`, `type` | all | prefix words; `type` is the spec's name (`RDMA_MSG` ... `RDMA2_CONNPROP`) |
//! | `flags` | version 2 | `rdma_flags` (draft-cel-nfsv4-rpcrdma-version-two-09 s3.2) |
//! | `inv_handle` | RDMA2_MSG, RDMA2_NOMSG | `rdma_inv_handle` (draft s3.3) |
//! | `align`, `thresh` | RDMA_MSGP | RFC 8166 s4.3 |
//! | `reads` | MSG, NOMSG, MSGP | flat Read list in wire order: `{position, handle, length, offset}` |
//! | `writes` | MSG, NOMSG, MSGP | Write list: a list of chunks, each a list of `{handle, length, offset}` |
//! | `reply` | MSG, NOMSG, MSGP | `null`, or the Reply chunk's segments |
//! | `payload_offset`, `payload_length` | MSG, MSGP | where the inline RPC message starts and its size in bytes |
//! | `payload` | MSG, MSGP | the inline RPC message in lowercase hex (so that `--encode` is byte-exact) |
//! | `error` | RDMA_ERROR, RDMA2_ERROR | `{code, name, ...}`, see below |
//! | `properties` | RDMA2_CONNPROP | `{id, name, value, data}` per property |
//! | `trailing` | NOMSG, DONE, ERROR, CONNPROP | only when bytes follow the header (decoders ignore them); lowercase hex |
//!
//! The `error` object carries the error's arm next to `code` and `name`:
//! `vers_low`/`vers_high` (ERR_VERS, RDMA2_ERR_VERS), `max_chunks`
//! (RDMA2_ERR_READ_CHUNKS, RDMA2_ERR_WRITE_CHUNKS), `max_segments`
//! (RDMA2_ERR_SEGMENTS), `chunk_index` and `length_needed`
//! (RDMA2_ERR_WRITE_RESOURCE), `length_needed` (RDMA2_ERR_REPLY_RESOURCE). `name` is
//! the spec's name, or `null` for a version 2 code this implementation does not know
//! (such codes have a void arm, draft s5.3.3).
//!
//! Numbers are JSON integers; `offset` fields are full 64-bit values.
//!
//! Everything here is pure and may be called from any thread.

use proto::header::{
    self, Body, BodyOut, ChunkLists, ChunksOut, Header, HeaderOut, HeaderType, Limits, Property, ReadSegment, Segment,
    V1Error, V2Error, RPCRDMA2_F_RESPONSE,
};
use proto::private_data::{self, PrivateData};
use proto::{DecodeError, EncodeError};
use serde::{Deserialize, Serialize};

/// The limits `rpcrdma-dump` decodes with: the engine's defaults, so that what the
/// tool accepts is what a default-configured endpoint accepts.
pub const LIMITS: Limits = Limits::DEFAULT;

/// A plain segment: `{handle, length, offset}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SegmentJson {
    pub handle: u32,
    pub length: u32,
    pub offset: u64,
}

/// One Read list entry: `{position, handle, length, offset}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReadSegmentJson {
    pub position: u32,
    pub handle: u32,
    pub length: u32,
    pub offset: u64,
}

/// The `error` object of RDMA_ERROR / RDMA2_ERROR.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ErrorJson {
    /// The error code word. May be omitted on input when `name` is given.
    #[serde(default)]
    pub code: Option<u32>,
    /// The spec's name; `null` for an unknown version 2 code.
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vers_low: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vers_high: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_chunks: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_segments: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chunk_index: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub length_needed: Option<u32>,
}

/// One RDMA2_CONNPROP property: `{id, name, value, data}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PropertyJson {
    /// `rdma_which`. May be omitted on input when `name` is given.
    #[serde(default)]
    pub id: Option<u32>,
    /// `RBSIZ`, `BRS`, or `null` for a property this implementation does not know.
    #[serde(default)]
    pub name: Option<String>,
    /// The decoded value of a known property with 4 bytes of data, else `null`.
    #[serde(default)]
    pub value: Option<u32>,
    /// `rdma_data` in lowercase hex (without XDR padding). On input it may be
    /// omitted when `value` is given.
    #[serde(default)]
    pub data: Option<String>,
}

/// A transport header in its JSON form. `None` fields are left out of the output,
/// except `reply`, which is `null` for a header without a Reply chunk.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HeaderJson {
    pub version: u32,
    pub xid: u32,
    pub credits: u32,
    #[serde(rename = "type")]
    pub header_type: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flags: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inv_handle: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub align: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thresh: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reads: Option<Vec<ReadSegmentJson>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub writes: Option<Vec<Vec<SegmentJson>>>,
    /// Outer `None`: no such field (non-chunk header types). `Some(None)`: `null`.
    /// On input, `null` and absent both mean "no Reply chunk" (but stay distinct
    /// in the parsed value, so that parsing is the inverse of printing).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present_nullable"
    )]
    pub reply: Option<Option<Vec<SegmentJson>>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload_offset: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload_length: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorJson>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub properties: Option<Vec<PropertyJson>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trailing: Option<String>,
}

/// RFC 8797 Private Data in its JSON form. Sizes are in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrivateDataJson {
    /// Whether a valid message was found (RFC 8797 section 5.2). On input,
    /// `false` encodes to no bytes at all; absent means `true`.
    #[serde(default = "default_true")]
    pub present: bool,
    /// Byte offset of the Format Identifier in the input, `null` when absent.
    /// Ignored on input.
    #[serde(default)]
    pub offset: Option<usize>,
    #[serde(default = "default_pd_version")]
    pub version: u8,
    #[serde(default)]
    pub remote_invalidation: bool,
    #[serde(default = "default_size")]
    pub send_size: u32,
    #[serde(default = "default_size")]
    pub receive_size: u32,
}

/// A field that is present (possibly `null`) deserialises to `Some(..)`; an absent
/// one takes the `default` (`None`).
fn present_nullable<'de, D, T>(d: D) -> Result<Option<Option<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(d).map(Some)
}

fn default_true() -> bool {
    true
}
fn default_pd_version() -> u8 {
    private_data::FORMAT_VERSION
}
fn default_size() -> u32 {
    private_data::MIN_SIZE_BYTES
}

/// Bad hex text (`--hex` input, or a hex field of the JSON form).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HexError {
    /// A character that is neither a hex digit nor whitespace (nor a `0x` prefix).
    #[error("invalid character {ch:?} at input byte offset {offset}")]
    BadChar { ch: char, offset: usize },
    /// The digits do not make whole bytes.
    #[error("odd number of hex digits ({digits})")]
    OddDigits { digits: usize },
}

/// Why a JSON form could not be turned into bytes.
#[derive(Debug, thiserror::Error)]
pub enum JsonError {
    /// Not JSON, or not the expected shape (serde's message names the line/column).
    #[error("JSON input: {0}")]
    Syntax(#[from] serde_json::Error),
    /// A field holds a value that cannot be encoded or contradicts another field.
    #[error("JSON input: {field}: {reason}")]
    Field { field: &'static str, reason: String },
    /// A hex field is not valid hex.
    #[error("JSON input: {field}: {source}")]
    Hex {
        field: &'static str,
        #[source]
        source: HexError,
    },
    /// The encoder refused the value.
    #[error("encode: {0}")]
    Encode(#[from] EncodeError),
}

fn field_err(field: &'static str, reason: impl Into<String>) -> JsonError {
    JsonError::Field {
        field,
        reason: reason.into(),
    }
}

// ------------------------------------------------------------------------ hex

fn hex_val(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Parse hex text: ASCII whitespace (including newlines) is ignored anywhere, and
/// each whitespace-separated token may start with `0x` or `0X`. Digits of
/// consecutive tokens are concatenated, so `"f6ab 0e18"` is four bytes.
pub fn parse_hex(text: &[u8]) -> Result<Vec<u8>, HexError> {
    let mut out = Vec::with_capacity(text.len() / 2);
    let mut high: Option<u8> = None;
    let mut digits = 0usize;
    let mut at_token_start = true;
    let mut i = 0;
    while i < text.len() {
        let b = text[i];
        if b.is_ascii_whitespace() {
            at_token_start = true;
            i += 1;
            continue;
        }
        if at_token_start && b == b'0' && matches!(text.get(i + 1), Some(b'x' | b'X')) {
            at_token_start = false;
            i += 2;
            continue;
        }
        at_token_start = false;
        let Some(v) = hex_val(b) else {
            // Name the whole character when the input is UTF-8 text.
            let end = (i + 4).min(text.len());
            let ch = String::from_utf8_lossy(&text[i..end])
                .chars()
                .next()
                .unwrap_or(char::REPLACEMENT_CHARACTER);
            return Err(HexError::BadChar { ch, offset: i });
        };
        digits += 1;
        match high.take() {
            None => high = Some(v),
            Some(h) => out.push(h << 4 | v),
        }
        i += 1;
    }
    if high.is_some() {
        return Err(HexError::OddDigits { digits });
    }
    Ok(out)
}

/// Lowercase hex, no separators.
pub fn to_hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for &b in bytes {
        s.push(DIGITS[(b >> 4) as usize] as char);
        s.push(DIGITS[(b & 0xf) as usize] as char);
    }
    s
}

// --------------------------------------------------------------- bytes → JSON

fn seg_json(s: Segment) -> SegmentJson {
    SegmentJson {
        handle: s.handle,
        length: s.length,
        offset: s.offset,
    }
}

fn error_v1_json(e: V1Error) -> ErrorJson {
    let mut j = ErrorJson {
        code: Some(e.code()),
        name: Some(e.name().to_owned()),
        vers_low: None,
        vers_high: None,
        max_chunks: None,
        max_segments: None,
        chunk_index: None,
        length_needed: None,
    };
    if let V1Error::Vers { low, high } = e {
        j.vers_low = Some(low);
        j.vers_high = Some(high);
    }
    j
}

fn error_v2_json(e: V2Error) -> ErrorJson {
    let mut j = ErrorJson {
        code: Some(e.code()),
        name: e.name().map(str::to_owned),
        vers_low: None,
        vers_high: None,
        max_chunks: None,
        max_segments: None,
        chunk_index: None,
        length_needed: None,
    };
    match e {
        V2Error::Vers { low, high } => {
            j.vers_low = Some(low);
            j.vers_high = Some(high);
        }
        V2Error::ReadChunks { max_chunks } | V2Error::WriteChunks { max_chunks } => j.max_chunks = Some(max_chunks),
        V2Error::Segments { max_segments } => j.max_segments = Some(max_segments),
        V2Error::WriteResource {
            chunk_index,
            length_needed,
        } => {
            j.chunk_index = Some(chunk_index);
            j.length_needed = Some(length_needed);
        }
        V2Error::ReplyResource { length_needed } => j.length_needed = Some(length_needed),
        V2Error::BadXdr | V2Error::InvalHtype | V2Error::System | V2Error::Other { .. } => {}
    }
    j
}

fn property_json(p: Property<'_>) -> PropertyJson {
    PropertyJson {
        id: Some(p.id),
        name: p.name().map(str::to_owned),
        value: p.value(),
        data: Some(to_hex(p.data)),
    }
}

fn fill_chunks(j: &mut HeaderJson, c: &ChunkLists<'_>) {
    j.reads = Some(
        c.reads
            .segments()
            .map(|r| ReadSegmentJson {
                position: r.position,
                handle: r.target.handle,
                length: r.target.length,
                offset: r.target.offset,
            })
            .collect(),
    );
    j.writes = Some(c.writes.iter().map(|w| w.iter().map(seg_json).collect()).collect());
    j.reply = Some(c.reply.map(|r| r.iter().map(seg_json).collect()));
}

/// The JSON form of a decoded header. `buf` must be the buffer `h` was decoded
/// from (it supplies the bytes after the header: `payload` or `trailing`).
pub fn header_json(h: &Header<'_>, buf: &[u8]) -> HeaderJson {
    let v2 = h.vers != proto::header::RPCRDMA_VERSION_1;
    let mut j = HeaderJson {
        version: h.vers,
        xid: h.xid,
        credits: h.credits,
        header_type: h.header_type().name().to_owned(),
        flags: v2.then_some(h.flags),
        inv_handle: None,
        align: None,
        thresh: None,
        reads: None,
        writes: None,
        reply: None,
        payload_offset: None,
        payload_length: None,
        payload: None,
        error: None,
        properties: None,
        trailing: None,
    };
    match h.body {
        Body::Msg {
            inv_handle,
            ref chunks,
            payload_offset,
            payload,
        } => {
            j.inv_handle = v2.then_some(inv_handle);
            fill_chunks(&mut j, chunks);
            j.payload_offset = Some(payload_offset);
            j.payload_length = Some(payload.len());
            j.payload = Some(to_hex(payload));
        }
        Body::NoMsg { inv_handle, ref chunks } => {
            j.inv_handle = v2.then_some(inv_handle);
            fill_chunks(&mut j, chunks);
        }
        Body::MsgP {
            align,
            thresh,
            ref chunks,
            payload_offset,
            payload,
        } => {
            j.align = Some(align);
            j.thresh = Some(thresh);
            fill_chunks(&mut j, chunks);
            j.payload_offset = Some(payload_offset);
            j.payload_length = Some(payload.len());
            j.payload = Some(to_hex(payload));
        }
        Body::Done => {}
        Body::ErrorV1(e) => j.error = Some(error_v1_json(e)),
        Body::ErrorV2(e) => j.error = Some(error_v2_json(e)),
        Body::ConnProp(props) => j.properties = Some(props.iter().map(property_json).collect()),
    }
    if h.payload().is_none() {
        let rest = buf.get(h.header_len..).unwrap_or(&[]);
        if !rest.is_empty() {
            j.trailing = Some(to_hex(rest));
        }
    }
    j
}

/// Decode one transport header (with [`LIMITS`]) and return its JSON form.
pub fn decode_header(buf: &[u8]) -> Result<HeaderJson, DecodeError> {
    let h = header::decode(buf, &LIMITS)?;
    Ok(header_json(&h, buf))
}

/// The JSON form of whatever RFC 8797 Private Data `buf` holds (never fails:
/// absent data gives the section 5.1 defaults with `present: false`).
pub fn decode_private_data(buf: &[u8]) -> PrivateDataJson {
    let p = private_data::decode(buf);
    let d = p.data();
    PrivateDataJson {
        present: p.present(),
        offset: p.offset(),
        version: d.version,
        remote_invalidation: d.remote_invalidation,
        send_size: d.send_size_bytes,
        receive_size: d.receive_size_bytes,
    }
}

// --------------------------------------------------------------- JSON → bytes

/// Parse the JSON form of a header (the tool's own output, possibly edited).
pub fn parse_header_json(text: &[u8]) -> Result<HeaderJson, JsonError> {
    Ok(serde_json::from_slice(text)?)
}

/// Parse the JSON form of Private Data.
pub fn parse_private_data_json(text: &[u8]) -> Result<PrivateDataJson, JsonError> {
    Ok(serde_json::from_slice(text)?)
}

fn hex_field(field: &'static str, s: &str) -> Result<Vec<u8>, JsonError> {
    parse_hex(s.as_bytes()).map_err(|source| JsonError::Hex { field, source })
}

/// Refuse a field the header type does not have.
fn forbid<T>(v: &Option<T>, field: &'static str, ty: HeaderType) -> Result<(), JsonError> {
    match v {
        Some(_) => Err(field_err(field, format!("not a field of {}", ty.name()))),
        None => Ok(()),
    }
}

fn require<T: Copy>(v: Option<T>, field: &'static str, what: &str) -> Result<T, JsonError> {
    v.ok_or_else(|| field_err(field, format!("required for {what}")))
}

/// Owned chunk lists, borrowed into a [`ChunksOut`] for encoding.
struct OwnedChunks {
    reads: Vec<ReadSegment>,
    writes: Vec<Vec<Segment>>,
    reply: Option<Vec<Segment>>,
}

fn seg_out(s: &SegmentJson) -> Segment {
    Segment {
        handle: s.handle,
        length: s.length,
        offset: s.offset,
    }
}

fn owned_chunks(j: &HeaderJson) -> OwnedChunks {
    OwnedChunks {
        reads: j
            .reads
            .iter()
            .flatten()
            .map(|r| ReadSegment {
                position: r.position,
                target: Segment {
                    handle: r.handle,
                    length: r.length,
                    offset: r.offset,
                },
            })
            .collect(),
        writes: j
            .writes
            .iter()
            .flatten()
            .map(|c| c.iter().map(seg_out).collect())
            .collect(),
        reply: j.reply.clone().flatten().map(|r| r.iter().map(seg_out).collect()),
    }
}

/// The error code an `error` object names, from `code` and/or `name`.
fn error_code(e: &ErrorJson, v2: bool) -> Result<u32, JsonError> {
    let by_name = match e.name.as_deref() {
        None => None,
        Some(n) => {
            let code = if v2 {
                (1..=header::RDMA2_ERR_SYSTEM).find(|&c| V2Error::from_code(c, 0, 0).name() == Some(n))
            } else {
                [V1Error::Vers { low: 0, high: 0 }, V1Error::Chunk]
                    .into_iter()
                    .find(|e| e.name() == n)
                    .map(|e| e.code())
            };
            Some(code.ok_or_else(|| field_err("error.name", format!("unknown error name {n:?}")))?)
        }
    };
    match (e.code, by_name) {
        (Some(c), Some(n)) if c != n => Err(field_err(
            "error.name",
            format!("names code {n}, but error.code is {c}"),
        )),
        (Some(c), _) => Ok(c),
        (None, Some(n)) => Ok(n),
        (None, None) => Err(field_err("error.code", "required (or error.name)")),
    }
}

/// Check that exactly the arm fields `allowed` are present in `e`.
fn check_arm(e: &ErrorJson, name: &str, allowed: &[&'static str]) -> Result<(), JsonError> {
    let fields: [(&'static str, bool); 6] = [
        ("error.vers_low", e.vers_low.is_some()),
        ("error.vers_high", e.vers_high.is_some()),
        ("error.max_chunks", e.max_chunks.is_some()),
        ("error.max_segments", e.max_segments.is_some()),
        ("error.chunk_index", e.chunk_index.is_some()),
        ("error.length_needed", e.length_needed.is_some()),
    ];
    for (f, present) in fields {
        let wanted = allowed.contains(&f);
        if present && !wanted {
            return Err(field_err(f, format!("not part of {name}")));
        }
        if !present && wanted {
            return Err(field_err(f, format!("required for {name}")));
        }
    }
    Ok(())
}

fn error_v1_out(e: &ErrorJson) -> Result<V1Error, JsonError> {
    match error_code(e, false)? {
        header::ERR_VERS => {
            check_arm(e, "ERR_VERS", &["error.vers_low", "error.vers_high"])?;
            Ok(V1Error::Vers {
                low: e.vers_low.unwrap_or(0),
                high: e.vers_high.unwrap_or(0),
            })
        }
        header::ERR_CHUNK => {
            check_arm(e, "ERR_CHUNK", &[])?;
            Ok(V1Error::Chunk)
        }
        c => Err(field_err(
            "error.code",
            format!("{c} is not a version 1 error code (1 = ERR_VERS, 2 = ERR_CHUNK)"),
        )),
    }
}

fn error_v2_out(e: &ErrorJson) -> Result<V2Error, JsonError> {
    let code = error_code(e, true)?;
    let (allowed, a, b): (&[&'static str], _, _) = match code {
        header::RDMA2_ERR_VERS => (&["error.vers_low", "error.vers_high"], e.vers_low, e.vers_high),
        header::RDMA2_ERR_READ_CHUNKS | header::RDMA2_ERR_WRITE_CHUNKS => (&["error.max_chunks"], e.max_chunks, None),
        header::RDMA2_ERR_SEGMENTS => (&["error.max_segments"], e.max_segments, None),
        header::RDMA2_ERR_WRITE_RESOURCE => (
            &["error.chunk_index", "error.length_needed"],
            e.chunk_index,
            e.length_needed,
        ),
        header::RDMA2_ERR_REPLY_RESOURCE => (&["error.length_needed"], e.length_needed, None),
        _ => (&[], None, None),
    };
    let err = V2Error::from_code(code, a.unwrap_or(0), b.unwrap_or(0));
    check_arm(e, err.name().unwrap_or("an unknown error code"), allowed)?;
    Ok(err)
}

/// Owned property list for encoding.
fn properties_out(props: &[PropertyJson]) -> Result<Vec<(u32, Vec<u8>)>, JsonError> {
    let mut out = Vec::with_capacity(props.len());
    for p in props {
        let by_name = match p.name.as_deref() {
            None => None,
            Some("RBSIZ") => Some(header::RDMA2_PROPID_RBSIZ),
            Some("BRS") => Some(header::RDMA2_PROPID_BRS),
            Some(n) => return Err(field_err("properties.name", format!("unknown property name {n:?}"))),
        };
        let id = match (p.id, by_name) {
            (Some(i), Some(n)) if i != n => {
                return Err(field_err(
                    "properties.name",
                    format!("names property {n}, but properties.id is {i}"),
                ))
            }
            (Some(i), _) => i,
            (None, Some(n)) => n,
            (None, None) => return Err(field_err("properties.id", "required (or properties.name)")),
        };
        let known = matches!(id, header::RDMA2_PROPID_RBSIZ | header::RDMA2_PROPID_BRS);
        let data = match (&p.data, p.value) {
            (Some(d), v) => {
                let data = hex_field("properties.data", d)?;
                if let Some(v) = v {
                    let decoded = Property { id, data: &data }.value();
                    if decoded != Some(v) {
                        return Err(field_err(
                            "properties.value",
                            format!("{v} does not match properties.data {d:?}"),
                        ));
                    }
                }
                data
            }
            (None, Some(v)) if known => v.to_be_bytes().to_vec(),
            (None, Some(_)) => {
                return Err(field_err(
                    "properties.value",
                    format!("property {id} is not known; give its data in hex"),
                ))
            }
            (None, None) => Vec::new(),
        };
        out.push((id, data));
    }
    Ok(out)
}

/// Encode the JSON form of a header into bytes: the header, then `payload`
/// (MSG, MSGP) or `trailing` (other types) when given.
///
/// Fields a header type does not have are refused, as are contradictions
/// (`version` vs `type`, `code` vs `name`, `payload_length` vs `payload`,
/// `payload_offset` vs the encoded header length). For version 2, an absent
/// `flags` defaults to RPCRDMA2_F_RESPONSE for RDMA2_ERROR and for an RDMA2_MSG
/// whose payload is an RPC reply, else 0 (draft s3.2).
pub fn encode_header(j: &HeaderJson) -> Result<Vec<u8>, JsonError> {
    let ty = HeaderType::from_name(&j.header_type)
        .ok_or_else(|| field_err("type", format!("unknown header type {:?}", j.header_type)))?;
    if j.version != ty.version() {
        return Err(field_err(
            "version",
            format!(
                "{} is a version {} header type, not version {}",
                ty.name(),
                ty.version(),
                j.version
            ),
        ));
    }
    let v2 = ty.version() == header::RPCRDMA_VERSION_2;
    let has_chunks = matches!(
        ty,
        HeaderType::RdmaMsg
            | HeaderType::RdmaNomsg
            | HeaderType::RdmaMsgp
            | HeaderType::Rdma2Msg
            | HeaderType::Rdma2Nomsg
    );
    let has_payload = matches!(ty, HeaderType::RdmaMsg | HeaderType::RdmaMsgp | HeaderType::Rdma2Msg);
    let is_error = matches!(ty, HeaderType::RdmaError | HeaderType::Rdma2Error);
    if !v2 {
        forbid(&j.flags, "flags", ty)?;
    }
    if !(v2 && has_chunks) {
        forbid(&j.inv_handle, "inv_handle", ty)?;
    }
    if ty != HeaderType::RdmaMsgp {
        forbid(&j.align, "align", ty)?;
        forbid(&j.thresh, "thresh", ty)?;
    }
    if !has_chunks {
        forbid(&j.reads, "reads", ty)?;
        forbid(&j.writes, "writes", ty)?;
        forbid(&j.reply, "reply", ty)?;
    }
    if has_payload {
        forbid(&j.trailing, "trailing", ty)?;
    } else {
        forbid(&j.payload, "payload", ty)?;
        forbid(&j.payload_offset, "payload_offset", ty)?;
        forbid(&j.payload_length, "payload_length", ty)?;
    }
    if !is_error {
        forbid(&j.error, "error", ty)?;
    }
    if ty != HeaderType::Rdma2Connprop {
        forbid(&j.properties, "properties", ty)?;
    }

    let after = match (has_payload, &j.payload, &j.trailing) {
        (true, Some(p), _) => hex_field("payload", p)?,
        (false, _, Some(t)) => hex_field("trailing", t)?,
        _ => Vec::new(),
    };
    if let (Some(n), Some(_)) = (j.payload_length, &j.payload) {
        if n != after.len() {
            return Err(field_err(
                "payload_length",
                format!("{n}, but payload holds {} bytes", after.len()),
            ));
        }
    }

    let chunks = owned_chunks(j);
    let writes: Vec<&[Segment]> = chunks.writes.iter().map(Vec::as_slice).collect();
    let chunks_out = ChunksOut {
        reads: &chunks.reads,
        writes: &writes,
        reply: chunks.reply.as_deref(),
    };
    let props = match &j.properties {
        Some(p) => properties_out(p)?,
        None => Vec::new(),
    };
    let props_out: Vec<Property<'_>> = props.iter().map(|(id, data)| Property { id: *id, data }).collect();
    let inv_handle = j.inv_handle.unwrap_or(0);
    let body = match ty {
        HeaderType::RdmaMsg | HeaderType::Rdma2Msg => BodyOut::Msg {
            inv_handle,
            chunks: chunks_out,
        },
        HeaderType::RdmaNomsg | HeaderType::Rdma2Nomsg => BodyOut::NoMsg {
            inv_handle,
            chunks: chunks_out,
        },
        HeaderType::RdmaMsgp => BodyOut::MsgP {
            align: require(j.align, "align", "RDMA_MSGP")?,
            thresh: require(j.thresh, "thresh", "RDMA_MSGP")?,
            chunks: chunks_out,
        },
        HeaderType::RdmaDone => BodyOut::Done,
        HeaderType::RdmaError => BodyOut::ErrorV1(error_v1_out(
            j.error
                .as_ref()
                .ok_or_else(|| field_err("error", "required for RDMA_ERROR"))?,
        )?),
        HeaderType::Rdma2Error => BodyOut::ErrorV2(error_v2_out(
            j.error
                .as_ref()
                .ok_or_else(|| field_err("error", "required for RDMA2_ERROR"))?,
        )?),
        HeaderType::Rdma2Connprop => BodyOut::ConnProp(&props_out),
    };
    let flags = match (v2, j.flags) {
        (false, _) => 0,
        (true, Some(f)) => f,
        (true, None) => {
            // draft s3.2: RESPONSE for errors and for messages carrying an RPC reply.
            let rpc_reply = has_payload && after.len() >= 8 && after[4..8] == 1u32.to_be_bytes();
            if is_error || rpc_reply {
                RPCRDMA2_F_RESPONSE
            } else {
                0
            }
        }
    };
    let out = HeaderOut {
        xid: j.xid,
        vers: j.version,
        credits: j.credits,
        flags,
        body,
    };
    let header_len = out.encoded_len();
    if let Some(off) = j.payload_offset {
        if off != header_len {
            return Err(field_err(
                "payload_offset",
                format!("{off}, but the encoded header is {header_len} bytes"),
            ));
        }
    }
    let mut buf = vec![0u8; header_len + after.len()];
    let n = header::encode(&out, &mut buf)?;
    debug_assert_eq!(n, header_len);
    buf[n..].copy_from_slice(&after);
    Ok(buf)
}

/// Encode the JSON form of Private Data: the 8-byte RFC 8797 message, or nothing
/// when `present` is false. Sizes must be exactly representable (a multiple of
/// 1024 in 1024..=262144, RFC 8797 section 4.2): the tool does not round.
pub fn encode_private_data(j: &PrivateDataJson) -> Result<Vec<u8>, JsonError> {
    if !j.present {
        return Ok(Vec::new());
    }
    for (field, v) in [("send_size", j.send_size), ("receive_size", j.receive_size)] {
        if private_data::decode_size(private_data::encode_size(v)) != v {
            return Err(field_err(
                field,
                format!(
                    "{v} is not a multiple of {} in {}..={}",
                    private_data::SIZE_UNIT_BYTES,
                    private_data::MIN_SIZE_BYTES,
                    private_data::MAX_SIZE_BYTES
                ),
            ));
        }
    }
    let pd = PrivateData {
        version: j.version,
        remote_invalidation: j.remote_invalidation,
        send_size_bytes: j.send_size,
        receive_size_bytes: j.receive_size,
    };
    match pd.to_bytes() {
        Ok(b) => Ok(b.to_vec()),
        Err(EncodeError::Unrepresentable { .. }) => Err(field_err(
            "version",
            format!(
                "{} is not a known format version (only {})",
                j.version,
                private_data::FORMAT_VERSION
            ),
        )),
        Err(e) => Err(e.into()),
    }
}

/// Render a JSON form: pretty-printed, or on one line when `compact`.
pub fn render<T: Serialize>(v: &T, compact: bool) -> Result<String, serde_json::Error> {
    if compact {
        serde_json::to_string(v)
    } else {
        serde_json::to_string_pretty(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dump_samples::{self, words};

    fn json_of(buf: &[u8]) -> serde_json::Value {
        serde_json::to_value(decode_header(buf).unwrap()).unwrap()
    }

    fn encode_value(v: serde_json::Value) -> Result<Vec<u8>, JsonError> {
        encode_header(&serde_json::from_value(v).map_err(JsonError::Syntax)?)
    }

    fn field_of(e: JsonError) -> &'static str {
        match e {
            JsonError::Field { field, .. } | JsonError::Hex { field, .. } => field,
            other => panic!("expected a field error, got {other}"),
        }
    }

    #[test]
    fn hex_parsing() {
        assert_eq!(parse_hex(b"").unwrap(), Vec::<u8>::new());
        assert_eq!(parse_hex(b"0x").unwrap(), Vec::<u8>::new());
        assert_eq!(
            parse_hex(b"0xF6ab 0e18\n01\t0X01 0307\r\n").unwrap(),
            [0xf6, 0xab, 0x0e, 0x18, 1, 1, 3, 7]
        );
        // digits of separate tokens join up
        assert_eq!(parse_hex(b"f 6").unwrap(), [0xf6]);
        assert_eq!(parse_hex(b"abc"), Err(HexError::OddDigits { digits: 3 }));
        assert_eq!(parse_hex(b"ab zz"), Err(HexError::BadChar { ch: 'z', offset: 3 }));
        // 0x only counts at the start of a token
        assert_eq!(parse_hex(b"00x1"), Err(HexError::BadChar { ch: 'x', offset: 2 }));
        assert_eq!(
            parse_hex("aé".as_bytes()),
            Err(HexError::BadChar { ch: 'é', offset: 1 })
        );
        assert_eq!(
            parse_hex(&[b'a', 0xff]),
            Err(HexError::BadChar {
                ch: char::REPLACEMENT_CHARACTER,
                offset: 1
            })
        );
        assert_eq!(to_hex(&[0x00, 0x0f, 0xab, 0xff]), "000fabff");
        let all: Vec<u8> = (0..=255).collect();
        assert_eq!(parse_hex(to_hex(&all).as_bytes()).unwrap(), all);
    }

    #[test]
    fn every_sample_round_trips_byte_exactly() {
        for s in dump_samples::all() {
            if s.private_data {
                let j = decode_private_data(&s.bytes);
                assert!(j.present, "{}", s.file);
                assert_eq!(encode_private_data(&j).unwrap(), s.bytes, "{}", s.file);
                continue;
            }
            let j = decode_header(&s.bytes).unwrap_or_else(|e| panic!("{}: {e}", s.file));
            assert_eq!(encode_header(&j).unwrap(), s.bytes, "{}", s.file);
            // and through the text form
            let text = render(&j, true).unwrap();
            assert!(!text.contains('\n'));
            let back = parse_header_json(text.as_bytes()).unwrap();
            assert_eq!(back, j, "{}", s.file);
        }
    }

    #[test]
    fn v1_msg_fields() {
        let s = dump_samples::by_file("v1-msg-write-chunk.bin").unwrap();
        let j = decode_header(&s.bytes).unwrap();
        assert_eq!(j.header_type, "RDMA_MSG");
        assert_eq!((j.version, j.xid, j.credits), (1, dump_samples::XID_V1_MSG_WRITE, 32));
        assert_eq!(j.flags, None);
        assert_eq!(j.inv_handle, None);
        assert_eq!(j.reads, Some(vec![]));
        assert_eq!(
            j.writes,
            Some(vec![vec![
                SegmentJson {
                    handle: 0x1001,
                    length: 4096,
                    offset: 0x7f00_0000_1000
                },
                SegmentJson {
                    handle: 0x1002,
                    length: 4096,
                    offset: 0x7f00_0000_2000
                },
            ]])
        );
        assert_eq!(j.reply, Some(None));
        assert_eq!(j.payload_offset, Some(68));
        assert_eq!(j.payload_length, Some(64));
        assert_eq!(j.payload.as_deref().map(str::len), Some(128));
        // reply: null is printed, not left out
        let v = json_of(&s.bytes);
        assert!(v.get("reply").unwrap().is_null());
        assert!(v.get("error").is_none() && v.get("trailing").is_none());
    }

    #[test]
    fn trailing_bytes_are_shown_and_restored() {
        let b = words(&[7, 1, 0, 3, 0xabcd, 0x1234]);
        let j = decode_header(&b).unwrap();
        assert_eq!(j.header_type, "RDMA_DONE");
        assert_eq!(j.trailing.as_deref(), Some("0000abcd00001234"));
        assert_eq!(encode_header(&j).unwrap(), b);
    }

    #[test]
    fn connprop_padding_reencodes_as_zero() {
        // unknown property 99 with 1 byte of data and non-zero padding
        let b = words(&[9, 2, 0, 5, 0, 1, 99, 1, 0x41ff_ffff]);
        let j = decode_header(&b).unwrap();
        let props = j.properties.as_ref().unwrap();
        assert_eq!(props[0].data.as_deref(), Some("41"));
        assert_eq!((props[0].name.as_deref(), props[0].value), (None, None));
        let out = encode_header(&j).unwrap();
        assert_eq!(out, words(&[9, 2, 0, 5, 0, 1, 99, 1, 0x4100_0000]));
        assert_eq!(decode_header(&out).unwrap(), j);
    }

    #[test]
    fn unknown_v2_error_code_has_null_name() {
        let b = words(&[5, 2, 1, 4, 1, 77]);
        let v = json_of(&b);
        assert_eq!(v["error"], serde_json::json!({"code": 77, "name": null}));
        assert_eq!(encode_value(v).unwrap(), b);
    }

    #[test]
    fn encode_by_names_and_defaults() {
        // error by name only; v2 flags default to RESPONSE for RDMA2_ERROR
        let b = encode_value(serde_json::json!({
            "version": 2, "xid": 1, "credits": 3, "type": "RDMA2_ERROR",
            "error": {"name": "RDMA2_ERR_SEGMENTS", "max_segments": 16}
        }))
        .unwrap();
        assert_eq!(b, words(&[1, 2, 3, 4, 1, 6, 16]));
        let b = encode_value(serde_json::json!({
            "version": 1, "xid": 1, "credits": 3, "type": "RDMA_ERROR",
            "error": {"name": "ERR_CHUNK"}
        }))
        .unwrap();
        assert_eq!(b, words(&[1, 1, 3, 4, 2]));
        // property by name and value; missing lists default to empty
        let b = encode_value(serde_json::json!({
            "version": 2, "xid": 1, "credits": 0, "type": "RDMA2_CONNPROP",
            "properties": [{"name": "RBSIZ", "value": 16384}, {"id": 7}]
        }))
        .unwrap();
        assert_eq!(b, words(&[1, 2, 0, 5, 0, 2, 1, 4, 16384, 7, 0]));
        // RDMA2_MSG carrying an RPC reply gets RESPONSE; a call gets 0
        let reply = to_hex(&words(&dump_samples::rpc_reply(4, &[])));
        let b = encode_value(serde_json::json!({
            "version": 2, "xid": 4, "credits": 1, "type": "RDMA2_MSG", "payload": reply
        }))
        .unwrap();
        assert_eq!(b[16..20], 1u32.to_be_bytes());
        assert!(decode_header(&b).is_ok());
        let call = to_hex(&words(&dump_samples::rpc_call(4, 0, &[])));
        let b = encode_value(serde_json::json!({
            "version": 2, "xid": 4, "credits": 1, "type": "RDMA2_MSG", "payload": call
        }))
        .unwrap();
        assert_eq!(b[16..20], 0u32.to_be_bytes());
        // MSG without payload: the header alone
        let b = encode_value(serde_json::json!({"version": 1, "xid": 4, "credits": 1, "type": "RDMA_MSG"})).unwrap();
        assert_eq!(b, words(&[4, 1, 1, 0, 0, 0, 0]));
    }

    #[test]
    fn encode_refuses_bad_json() {
        let base = |extra: serde_json::Value| {
            let mut v = serde_json::json!({"version": 1, "xid": 1, "credits": 1, "type": "RDMA_DONE"});
            for (k, x) in extra.as_object().unwrap() {
                v[k] = x.clone();
            }
            encode_value(v)
        };
        assert_eq!(
            field_of(base(serde_json::json!({"type": "RDMA_NOPE"})).unwrap_err()),
            "type"
        );
        assert_eq!(
            field_of(base(serde_json::json!({"version": 2})).unwrap_err()),
            "version"
        );
        assert_eq!(field_of(base(serde_json::json!({"flags": 0})).unwrap_err()), "flags");
        assert_eq!(field_of(base(serde_json::json!({"reads": []})).unwrap_err()), "reads");
        assert_eq!(
            field_of(base(serde_json::json!({"payload": "00"})).unwrap_err()),
            "payload"
        );
        assert_eq!(
            field_of(base(serde_json::json!({"trailing": "0"})).unwrap_err()),
            "trailing"
        );
        assert_eq!(
            field_of(base(serde_json::json!({"type": "RDMA_MSGP", "thresh": 1})).unwrap_err()),
            "align"
        );
        assert_eq!(
            field_of(base(serde_json::json!({"type": "RDMA_MSG", "inv_handle": 1})).unwrap_err()),
            "inv_handle"
        );
        assert_eq!(
            field_of(base(serde_json::json!({"type": "RDMA_MSG", "payload": "2a", "payload_length": 2})).unwrap_err()),
            "payload_length"
        );
        assert_eq!(
            field_of(base(serde_json::json!({"type": "RDMA_MSG", "payload_offset": 16})).unwrap_err()),
            "payload_offset"
        );
        assert_eq!(
            field_of(base(serde_json::json!({"type": "RDMA_MSG", "payload": "xyz"})).unwrap_err()),
            "payload"
        );
        let err = |e: serde_json::Value| base(serde_json::json!({"type": "RDMA_ERROR", "error": e}));
        assert_eq!(
            field_of(base(serde_json::json!({"type": "RDMA_ERROR"})).unwrap_err()),
            "error"
        );
        assert_eq!(field_of(err(serde_json::json!({})).unwrap_err()), "error.code");
        assert_eq!(field_of(err(serde_json::json!({"code": 3})).unwrap_err()), "error.code");
        assert_eq!(
            field_of(err(serde_json::json!({"code": 1})).unwrap_err()),
            "error.vers_low"
        );
        assert_eq!(
            field_of(err(serde_json::json!({"code": 2, "max_chunks": 1})).unwrap_err()),
            "error.max_chunks"
        );
        assert_eq!(
            field_of(err(serde_json::json!({"code": 2, "name": "ERR_VERS"})).unwrap_err()),
            "error.name"
        );
        assert_eq!(
            field_of(err(serde_json::json!({"name": "RDMA2_ERR_SYSTEM"})).unwrap_err()),
            "error.name"
        );
        let prop = |p: serde_json::Value| {
            encode_value(serde_json::json!({
                "version": 2, "xid": 1, "credits": 0, "type": "RDMA2_CONNPROP", "properties": [p]
            }))
        };
        assert_eq!(field_of(prop(serde_json::json!({})).unwrap_err()), "properties.id");
        assert_eq!(
            field_of(prop(serde_json::json!({"name": "XX"})).unwrap_err()),
            "properties.name"
        );
        assert_eq!(
            field_of(prop(serde_json::json!({"id": 2, "name": "RBSIZ"})).unwrap_err()),
            "properties.name"
        );
        assert_eq!(
            field_of(prop(serde_json::json!({"id": 1, "value": 5, "data": "00000006"})).unwrap_err()),
            "properties.value"
        );
        assert_eq!(
            field_of(prop(serde_json::json!({"id": 50, "value": 5})).unwrap_err()),
            "properties.value"
        );
        // unknown fields and wrong shapes are syntax errors
        assert!(matches!(
            base(serde_json::json!({"colour": 1})).unwrap_err(),
            JsonError::Syntax(_)
        ));
        assert!(matches!(parse_header_json(b"{"), Err(JsonError::Syntax(_))));
        assert!(matches!(
            parse_header_json(br#"{"version":1,"xid":-1,"credits":0,"type":"RDMA_DONE"}"#),
            Err(JsonError::Syntax(_))
        ));
    }

    #[test]
    fn private_data_both_ways() {
        let j = decode_private_data(&[0xf6, 0xab, 0x0e, 0x18, 0x01, 0x01, 0x03, 0x07]);
        assert_eq!(
            j,
            PrivateDataJson {
                present: true,
                offset: Some(0),
                version: 1,
                remote_invalidation: true,
                send_size: 4096,
                receive_size: 8192
            }
        );
        // found after leading garbage
        let j = decode_private_data(&[0, 0, 0xf6, 0xab, 0x0e, 0x18, 0x01, 0x00, 0xff, 0x00]);
        assert_eq!(
            (j.present, j.offset, j.send_size, j.receive_size),
            (true, Some(2), 262_144, 1024)
        );
        // absent: defaults
        let j = decode_private_data(b"nothing here");
        assert_eq!(
            j,
            PrivateDataJson {
                present: false,
                offset: None,
                version: 1,
                remote_invalidation: false,
                send_size: 1024,
                receive_size: 1024
            }
        );
        assert_eq!(encode_private_data(&j).unwrap(), Vec::<u8>::new());
        let pj: PrivateDataJson = serde_json::from_str(r#"{"send_size": 2048, "remote_invalidation": true}"#).unwrap();
        assert_eq!(encode_private_data(&pj).unwrap(), [0xf6, 0xab, 0x0e, 0x18, 1, 1, 1, 0]);
        for bad in [
            r#"{"send_size": 5000}"#,
            r#"{"receive_size": 0}"#,
            r#"{"receive_size": 263168}"#,
        ] {
            let pj: PrivateDataJson = serde_json::from_str(bad).unwrap();
            let f = field_of(encode_private_data(&pj).unwrap_err());
            assert!(f == "send_size" || f == "receive_size", "{bad}");
        }
        let pj: PrivateDataJson = serde_json::from_str(r#"{"version": 2}"#).unwrap();
        assert_eq!(field_of(encode_private_data(&pj).unwrap_err()), "version");
    }

    #[test]
    fn decode_errors_name_field_and_offset() {
        // unaligned Read position at byte 20
        let e = decode_header(&words(&[1, 1, 0, 0, 1, 6, 1, 1, 0, 0, 0, 0, 0, 1])).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("rdma_position") && msg.contains("offset 20"), "{msg}");
    }
}
