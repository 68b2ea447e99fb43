//! ONC RPC version 2 (RFC 5531): call and reply headers, AUTH_SYS credentials,
//! the RPCSEC_GSS credential (RFC 2203 section 5) as far as a transport needs it,
//! and TCP record marking (RFC 5531 section 11).
//!
//! Decoders return zero-copy views borrowed from the input and the byte offset at
//! which the procedure arguments (calls) or results (replies) start. Encoders write
//! into a caller-supplied [`Writer`] and check the whole length first, so a failed
//! encode writes nothing. Nothing here allocates; everything may be called from any
//! core.
//!
//! Error field names are the RFC's XDR field names (`xid`, `mtype`, `rpcvers`,
//! `cred.flavor`, `machinename`, ...). Where RFC 5531 reuses the field name `stat`
//! for four different enums, the error names the enum type instead
//! (`reply_stat`, `accept_stat`, `reject_stat`, `auth_stat`).

use crate::error::{DecodeError, DecodeErrorKind, EncodeError};
use crate::xdr::{roundup, Reader, Writer};

// ---------------------------------------------------------------------------
// Constants (RFC 5531 section 9 and appendix A; RFC 2203 section 5)
// ---------------------------------------------------------------------------

/// The only RPC protocol version (RFC 5531 section 9, `rpcvers`).
pub const RPC_VERSION: u32 = 2;

/// `msg_type` CALL.
pub const CALL: u32 = 0;
/// `msg_type` REPLY.
pub const REPLY: u32 = 1;

/// `reply_stat` MSG_ACCEPTED.
pub const MSG_ACCEPTED: u32 = 0;
/// `reply_stat` MSG_DENIED.
pub const MSG_DENIED: u32 = 1;

/// `accept_stat`: the call executed successfully; results follow.
pub const SUCCESS: u32 = 0;
/// `accept_stat`: the program is not exported here.
pub const PROG_UNAVAIL: u32 = 1;
/// `accept_stat`: the program version is not supported; low/high follow.
pub const PROG_MISMATCH: u32 = 2;
/// `accept_stat`: the procedure is not supported.
pub const PROC_UNAVAIL: u32 = 3;
/// `accept_stat`: the arguments could not be decoded.
pub const GARBAGE_ARGS: u32 = 4;
/// `accept_stat`: memory allocation failure or similar.
pub const SYSTEM_ERR: u32 = 5;

/// `reject_stat`: RPC version is not 2; low/high follow.
pub const RPC_MISMATCH: u32 = 0;
/// `reject_stat`: authentication failed; an `auth_stat` follows.
pub const AUTH_ERROR: u32 = 1;

/// `auth_flavor` AUTH_NONE (RFC 5531 section 10.1).
pub const AUTH_NONE: u32 = 0;
/// `auth_flavor` AUTH_SYS (RFC 5531 section 10.2; formerly AUTH_UNIX).
pub const AUTH_SYS: u32 = 1;
/// `auth_flavor` AUTH_SHORT (RFC 5531 section 10.3).
pub const AUTH_SHORT: u32 = 2;
/// `auth_flavor` AUTH_DH (RFC 5531 section 10.4).
pub const AUTH_DH: u32 = 3;
/// `auth_flavor` RPCSEC_GSS (RFC 2203).
pub const RPCSEC_GSS: u32 = 6;

/// Bound on an `opaque_auth` body (RFC 5531 section 8.2: `opaque body<400>`).
pub const MAX_AUTH_BYTES: u32 = 400;
/// Bound on AUTH_SYS `machinename` (RFC 5531 appendix A: `string machinename<255>`).
pub const AUTH_SYS_MAX_MACHINENAME: u32 = 255;
/// Bound on AUTH_SYS `gids` (RFC 5531 appendix A: `unsigned int gids<16>`).
pub const AUTH_SYS_MAX_GIDS: usize = 16;

/// `rpc_gss_cred_t` version 1 (RFC 2203 section 5).
pub const RPCSEC_GSS_VERS_1: u32 = 1;
/// `rpc_gss_proc_t` RPCSEC_GSS_DATA: a normal call carrying program arguments.
pub const RPCSEC_GSS_DATA: u32 = 0;
/// `rpc_gss_proc_t` RPCSEC_GSS_INIT.
pub const RPCSEC_GSS_INIT: u32 = 1;
/// `rpc_gss_proc_t` RPCSEC_GSS_CONTINUE_INIT.
pub const RPCSEC_GSS_CONTINUE_INIT: u32 = 2;
/// `rpc_gss_proc_t` RPCSEC_GSS_DESTROY.
pub const RPCSEC_GSS_DESTROY: u32 = 3;
/// `rpc_gss_service_t` rpc_gss_svc_none: arguments and results are not wrapped.
pub const RPC_GSS_SVC_NONE: u32 = 1;
/// `rpc_gss_service_t` rpc_gss_svc_integrity: arguments/results are checksummed.
pub const RPC_GSS_SVC_INTEGRITY: u32 = 2;
/// `rpc_gss_service_t` rpc_gss_svc_privacy: arguments/results are encrypted.
pub const RPC_GSS_SVC_PRIVACY: u32 = 3;

/// Bytes of a call header before `cred`: xid, mtype, rpcvers, prog, vers, proc.
pub const CALL_FIXED_BYTES: usize = 24;
/// Offset of the credential body in a call (after `cred.flavor` and its length).
pub const CALL_CRED_BODY_OFFSET: usize = CALL_FIXED_BYTES + 8;
/// Smallest call header: AUTH_NONE credential and verifier with empty bodies.
pub const CALL_HEADER_MIN_BYTES: usize = CALL_FIXED_BYTES + 16;
/// Largest call header: both `opaque_auth` bodies at their 400-byte bound.
pub const CALL_HEADER_MAX_BYTES: usize = CALL_FIXED_BYTES + 2 * (8 + MAX_AUTH_BYTES as usize);
/// Smallest reply header (MSG_DENIED / AUTH_ERROR or an accepted reply with an
/// empty verifier): xid, mtype, reply_stat and two more words.
pub const REPLY_HEADER_MIN_BYTES: usize = 20;
/// Largest reply header: MSG_ACCEPTED with a 400-byte verifier and PROG_MISMATCH
/// (xid, mtype, reply_stat, verf flavor+len+400, accept_stat, low, high).
pub const REPLY_HEADER_MAX_BYTES: usize = 12 + 8 + MAX_AUTH_BYTES as usize + 4 + 8;
/// Largest header in front of SUCCESS results (no mismatch info).
pub const REPLY_SUCCESS_HEADER_MAX_BYTES: usize = REPLY_HEADER_MAX_BYTES - 8;

const _: () = assert!(MAX_AUTH_BYTES & 3 == 0);
const _: () = assert!(CALL_HEADER_MAX_BYTES == 840);
const _: () = assert!(REPLY_SUCCESS_HEADER_MAX_BYTES == 424);
// The largest AUTH_SYS body fits in an opaque_auth body (RFC 5531 section 8.2).
const _: () = assert!(AuthSysParms::MAX_ENCODED_BYTES <= MAX_AUTH_BYTES as usize);

#[inline]
fn check_room(w: &Writer<'_>, len: usize) -> Result<(), EncodeError> {
    if len > w.remaining() {
        Err(EncodeError::BufferTooSmall { needed: w.len() + len })
    } else {
        Ok(())
    }
}

/// A message's `xid` and `mtype` without decoding the rest: lets a receiver of a
/// bidirectional stream (RFC 8167) route a message to the call or reply path, and
/// lets a server echo the XID of a call it cannot decode.
pub fn peek_msg(buf: &[u8]) -> Result<(u32, u32), DecodeError> {
    let mut r = Reader::new(buf);
    let xid = r.u32("xid")?;
    let mtype = r.u32("mtype")?;
    Ok((xid, mtype))
}

// ---------------------------------------------------------------------------
// opaque_auth
// ---------------------------------------------------------------------------

/// `opaque_auth` (RFC 5531 section 8.2): a flavor and a body of at most 400 bytes.
///
/// Unknown flavors decode fine; it is the server's job to answer them with
/// AUTH_ERROR / AUTH_BADCRED.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpaqueAuth<'a> {
    pub flavor: u32,
    pub body: &'a [u8],
}

impl<'a> OpaqueAuth<'a> {
    /// AUTH_NONE with an empty body: the usual verifier.
    pub const NONE: OpaqueAuth<'static> = OpaqueAuth {
        flavor: AUTH_NONE,
        body: &[],
    };

    /// Encoded size: flavor, length word, body and its padding.
    #[inline]
    pub const fn encoded_len(&self) -> usize {
        8 + roundup(self.body.len())
    }

    fn decode(r: &mut Reader<'a>, flavor_field: &'static str, body_field: &'static str) -> Result<Self, DecodeError> {
        let flavor = r.u32(flavor_field)?;
        let body = r.opaque_var(MAX_AUTH_BYTES, body_field)?;
        Ok(Self { flavor, body })
    }
}

// ---------------------------------------------------------------------------
// Call header
// ---------------------------------------------------------------------------

/// A decoded call header (RFC 5531 section 9, `rpc_msg` with `mtype` CALL).
///
/// `cred` and `verf` borrow from the decoded buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CallHeader<'a> {
    pub xid: u32,
    pub rpcvers: u32,
    pub prog: u32,
    pub vers: u32,
    pub proc_: u32,
    pub cred: OpaqueAuth<'a>,
    pub verf: OpaqueAuth<'a>,
}

impl<'a> CallHeader<'a> {
    /// A version-2 call header.
    pub const fn new(xid: u32, prog: u32, vers: u32, proc_: u32, cred: OpaqueAuth<'a>, verf: OpaqueAuth<'a>) -> Self {
        Self {
            xid,
            rpcvers: RPC_VERSION,
            prog,
            vers,
            proc_,
            cred,
            verf,
        }
    }

    /// Decode a call header from the start of `buf` (which starts at the XID).
    ///
    /// Returns the header and the offset at which the procedure arguments start.
    ///
    /// Errors: `mtype` other than CALL is `BadDiscriminant` on `mtype`;
    /// `rpcvers` other than 2 is `BadVersion { vers }` on `rpcvers`, which a server
    /// answers with MSG_DENIED / RPC_MISMATCH (low = high = 2, RFC 5531 section 9)
    /// using the XID from [`peek_msg`]; `opaque_auth` bodies over 400 bytes are
    /// `TooLong`.
    pub fn decode(buf: &'a [u8]) -> Result<(Self, usize), DecodeError> {
        let mut r = Reader::new(buf);
        let hdr = Self::decode_from(&mut r)?;
        Ok((hdr, r.pos()))
    }

    /// Decode from a reader positioned at the XID; leaves it at the arguments.
    pub fn decode_from(r: &mut Reader<'a>) -> Result<Self, DecodeError> {
        if let Some((hdr, len)) = Self::decode_whole(r.rest()) {
            r.skip(len, "verf.body")?;
            return Ok(hdr);
        }
        Self::decode_by_words(r)
    }

    /// Word by word, reporting the first field that is wrong.
    fn decode_by_words(r: &mut Reader<'a>) -> Result<Self, DecodeError> {
        let xid = r.u32("xid")?;
        let at = r.offset();
        let mtype = r.u32("mtype")?;
        if mtype != CALL {
            return Err(DecodeError::new(
                DecodeErrorKind::BadDiscriminant { value: mtype },
                "mtype",
                at,
            ));
        }
        let at = r.offset();
        let rpcvers = r.u32("rpcvers")?;
        if rpcvers != RPC_VERSION {
            return Err(DecodeError::new(
                DecodeErrorKind::BadVersion { vers: rpcvers },
                "rpcvers",
                at,
            ));
        }
        let prog = r.u32("prog")?;
        let vers = r.u32("vers")?;
        let proc_ = r.u32("proc")?;
        let cred = OpaqueAuth::decode(r, "cred.flavor", "cred.body")?;
        let verf = OpaqueAuth::decode(r, "verf.flavor", "verf.body")?;
        Ok(Self {
            xid,
            rpcvers,
            prog,
            vers,
            proc_,
            cred,
            verf,
        })
    }

    /// The common case in one pass: every word present, `mtype` CALL, RPC
    /// version 2, both auth bodies within bounds and present with their
    /// padding. Returns the header and its length; `None` for anything else,
    /// which [`CallHeader::decode_from`] then decodes word by word to report
    /// the exact error.
    #[inline]
    fn decode_whole(b: &'a [u8]) -> Option<(Self, usize)> {
        let w = |at: usize| -> Option<u32> { b.get(at..at + 4).map(|x| u32::from_be_bytes([x[0], x[1], x[2], x[3]])) };
        // xid, mtype, rpcvers, prog, vers, proc, cred flavor, cred length.
        let fixed: &[u8; 32] = b.first_chunk()?;
        let word = |i: usize| u32::from_be_bytes([fixed[4 * i], fixed[4 * i + 1], fixed[4 * i + 2], fixed[4 * i + 3]]);
        if word(1) != CALL || word(2) != RPC_VERSION {
            return None;
        }
        let cred_len = word(7);
        if cred_len > MAX_AUTH_BYTES {
            return None;
        }
        let cred_at = CALL_CRED_BODY_OFFSET;
        let verf_at = cred_at + roundup(cred_len as usize);
        let (verf_flavor, verf_len) = (w(verf_at)?, w(verf_at + 4)?);
        if verf_len > MAX_AUTH_BYTES {
            return None;
        }
        let end = verf_at + 8 + roundup(verf_len as usize);
        if end > b.len() {
            return None;
        }
        let hdr = Self {
            xid: word(0),
            rpcvers: RPC_VERSION,
            prog: word(3),
            vers: word(4),
            proc_: word(5),
            cred: OpaqueAuth {
                flavor: word(6),
                body: &b[cred_at..cred_at + cred_len as usize],
            },
            verf: OpaqueAuth {
                flavor: verf_flavor,
                body: &b[verf_at + 8..verf_at + 8 + verf_len as usize],
            },
        };
        Some((hdr, end))
    }

    /// Encoded size of this header.
    #[inline]
    pub const fn encoded_len(&self) -> usize {
        CALL_FIXED_BYTES + self.cred.encoded_len() + self.verf.encoded_len()
    }

    /// The AUTH_SYS parameters, if the credential is AUTH_SYS. Error offsets are
    /// relative to the start of the call message.
    pub fn auth_sys(&self) -> Option<Result<AuthSysParms<'a>, DecodeError>> {
        (self.cred.flavor == AUTH_SYS).then(|| AuthSysParms::decode_with_base(self.cred.body, CALL_CRED_BODY_OFFSET))
    }

    /// The RPCSEC_GSS credential, if the credential is RPCSEC_GSS. Error offsets
    /// are relative to the start of the call message.
    pub fn rpcsec_gss(&self) -> Option<Result<RpcGssCred<'a>, DecodeError>> {
        (self.cred.flavor == RPCSEC_GSS).then(|| RpcGssCred::decode_with_base(self.cred.body, CALL_CRED_BODY_OFFSET))
    }
}

/// [`CallHeader::decode`] as a free function.
pub fn decode_call(buf: &[u8]) -> Result<(CallHeader<'_>, usize), DecodeError> {
    CallHeader::decode(buf)
}

/// Encode a call header (the requester side). Writes `hdr.rpcvers` as given
/// (normally [`RPC_VERSION`], which [`CallHeader::new`] sets). On error nothing
/// is written.
pub fn encode_call_header(w: &mut Writer<'_>, hdr: &CallHeader<'_>) -> Result<(), EncodeError> {
    check_room(w, hdr.encoded_len())?;
    if hdr.cred.body.len() > MAX_AUTH_BYTES as usize {
        return Err(EncodeError::Unrepresentable { field: "cred.body" });
    }
    if hdr.verf.body.len() > MAX_AUTH_BYTES as usize {
        return Err(EncodeError::Unrepresentable { field: "verf.body" });
    }
    // The room for all of it was checked above.
    w.put_u32s([
        hdr.xid,
        CALL,
        hdr.rpcvers,
        hdr.prog,
        hdr.vers,
        hdr.proc_,
        hdr.cred.flavor,
        hdr.cred.body.len() as u32,
    ])?;
    // Empty bodies (AUTH_NONE) write nothing: skip the calls.
    if !hdr.cred.body.is_empty() {
        w.put_opaque_fixed(hdr.cred.body)?;
    }
    w.put_u32s([hdr.verf.flavor, hdr.verf.body.len() as u32])?;
    if !hdr.verf.body.is_empty() {
        w.put_opaque_fixed(hdr.verf.body)?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// AUTH_SYS
// ---------------------------------------------------------------------------

/// `authsys_parms` (RFC 5531 appendix A), decoded without allocation: the group
/// list lives in a fixed array, `machinename` borrows from the credential body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AuthSysParms<'a> {
    pub stamp: u32,
    /// Undecoded bytes (ASCII by convention, not guaranteed by the wire).
    pub machinename: &'a [u8],
    pub uid: u32,
    pub gid: u32,
    gids: [u32; AUTH_SYS_MAX_GIDS],
    ngids: u8,
}

impl<'a> AuthSysParms<'a> {
    /// Largest encoding: stamp, machinename<255> (4 + 256), uid, gid, gids<16>.
    pub const MAX_ENCODED_BYTES: usize =
        4 + 4 + roundup(AUTH_SYS_MAX_MACHINENAME as usize) + 4 + 4 + 4 + 4 * AUTH_SYS_MAX_GIDS;

    /// Build parameters; fails if `machinename` exceeds 255 bytes or `gids` more
    /// than 16 entries.
    pub fn new(stamp: u32, machinename: &'a [u8], uid: u32, gid: u32, gids: &[u32]) -> Result<Self, EncodeError> {
        if machinename.len() > AUTH_SYS_MAX_MACHINENAME as usize {
            return Err(EncodeError::Unrepresentable { field: "machinename" });
        }
        if gids.len() > AUTH_SYS_MAX_GIDS {
            return Err(EncodeError::Unrepresentable { field: "gids" });
        }
        let mut arr = [0u32; AUTH_SYS_MAX_GIDS];
        arr[..gids.len()].copy_from_slice(gids);
        Ok(Self {
            stamp,
            machinename,
            uid,
            gid,
            gids: arr,
            ngids: gids.len() as u8,
        })
    }

    /// The supplementary groups.
    #[inline]
    pub fn gids(&self) -> &[u32] {
        // ngids <= AUTH_SYS_MAX_GIDS is established by `new` and `decode_with_base`.
        &self.gids[..usize::from(self.ngids).min(AUTH_SYS_MAX_GIDS)]
    }

    /// Decode a credential body. The body must hold exactly one `authsys_parms`;
    /// trailing bytes are `Invalid` on `authsys_parms` (value = number of extra
    /// bytes). Offsets are relative to the body.
    pub fn decode(body: &'a [u8]) -> Result<Self, DecodeError> {
        Self::decode_with_base(body, 0)
    }

    /// Like [`decode`](Self::decode) with error offsets starting at `base`.
    pub fn decode_with_base(body: &'a [u8], base: usize) -> Result<Self, DecodeError> {
        let mut r = Reader::with_base(body, base);
        let stamp = r.u32("stamp")?;
        let machinename = r.string(AUTH_SYS_MAX_MACHINENAME, "machinename")?;
        let uid = r.u32("uid")?;
        let gid = r.u32("gid")?;
        let n = r.count(AUTH_SYS_MAX_GIDS as u32, 4, "gids")? as usize;
        let mut gids = [0u32; AUTH_SYS_MAX_GIDS];
        for g in gids.iter_mut().take(n) {
            *g = r.u32("gids")?;
        }
        if r.remaining() != 0 {
            return Err(r.error(
                DecodeErrorKind::Invalid {
                    value: r.remaining() as u32,
                },
                "authsys_parms",
            ));
        }
        Ok(Self {
            stamp,
            machinename,
            uid,
            gid,
            gids,
            ngids: n as u8,
        })
    }

    /// Encoded size.
    #[inline]
    pub fn encoded_len(&self) -> usize {
        4 + 4 + roundup(self.machinename.len()) + 4 + 4 + 4 + 4 * self.gids().len()
    }

    /// Encode as an `authsys_parms` (the credential *body*; wrap it in an
    /// [`OpaqueAuth`] with flavor [`AUTH_SYS`]). On error nothing is written.
    pub fn encode(&self, w: &mut Writer<'_>) -> Result<(), EncodeError> {
        if self.machinename.len() > AUTH_SYS_MAX_MACHINENAME as usize {
            return Err(EncodeError::Unrepresentable { field: "machinename" });
        }
        check_room(w, self.encoded_len())?;
        w.put_u32(self.stamp)?;
        w.put_opaque_var(self.machinename)?;
        w.put_u32(self.uid)?;
        w.put_u32(self.gid)?;
        let gids = self.gids();
        w.put_u32(gids.len() as u32)?;
        for &g in gids {
            w.put_u32(g)?;
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------
// RPCSEC_GSS credential
// ---------------------------------------------------------------------------

/// `rpc_gss_cred_vers_1_t` (RFC 2203 section 5): enough of an RPCSEC_GSS
/// credential for a transport to know whether the arguments and results are
/// wrapped (integrity/privacy) and therefore cannot be located by a ULB.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RpcGssCred<'a> {
    pub gss_proc: u32,
    pub seq_num: u32,
    pub service: u32,
    pub handle: &'a [u8],
}

impl<'a> RpcGssCred<'a> {
    /// Decode a credential body (offsets in errors start at `base`). A `version`
    /// other than 1 is `BadVersion`; unknown `gss_proc` or `service` values are
    /// `BadDiscriminant`.
    pub fn decode_with_base(body: &'a [u8], base: usize) -> Result<Self, DecodeError> {
        let mut r = Reader::with_base(body, base);
        let at = r.offset();
        let version = r.u32("version")?;
        if version != RPCSEC_GSS_VERS_1 {
            return Err(DecodeError::new(
                DecodeErrorKind::BadVersion { vers: version },
                "version",
                at,
            ));
        }
        let at = r.offset();
        let gss_proc = r.u32("gss_proc")?;
        if gss_proc > RPCSEC_GSS_DESTROY {
            return Err(DecodeError::new(
                DecodeErrorKind::BadDiscriminant { value: gss_proc },
                "gss_proc",
                at,
            ));
        }
        let seq_num = r.u32("seq_num")?;
        let at = r.offset();
        let service = r.u32("service")?;
        if !(RPC_GSS_SVC_NONE..=RPC_GSS_SVC_PRIVACY).contains(&service) {
            return Err(DecodeError::new(
                DecodeErrorKind::BadDiscriminant { value: service },
                "service",
                at,
            ));
        }
        let handle = r.opaque_var(MAX_AUTH_BYTES, "handle")?;
        Ok(Self {
            gss_proc,
            seq_num,
            service,
            handle,
        })
    }

    /// Whether program arguments and results travel unwrapped, i.e. this is an
    /// RPCSEC_GSS_DATA call with service none.
    #[inline]
    pub const fn args_unwrapped(&self) -> bool {
        self.gss_proc == RPCSEC_GSS_DATA && self.service == RPC_GSS_SVC_NONE
    }
}

// ---------------------------------------------------------------------------
// Reply header
// ---------------------------------------------------------------------------

/// `auth_stat` (RFC 5531 section 9, including the RPCSEC_GSS values of RFC 2203
/// section 5.3.3.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum AuthStat {
    Ok = 0,
    BadCred = 1,
    RejectedCred = 2,
    BadVerf = 3,
    RejectedVerf = 4,
    TooWeak = 5,
    InvalidResp = 6,
    Failed = 7,
    KerbGeneric = 8,
    TimeExpire = 9,
    TktFile = 10,
    Decode = 11,
    NetAddr = 12,
    RpcsecGssCredProblem = 13,
    RpcsecGssCtxProblem = 14,
}

impl AuthStat {
    /// All values, in wire order.
    pub const ALL: [AuthStat; 15] = [
        Self::Ok,
        Self::BadCred,
        Self::RejectedCred,
        Self::BadVerf,
        Self::RejectedVerf,
        Self::TooWeak,
        Self::InvalidResp,
        Self::Failed,
        Self::KerbGeneric,
        Self::TimeExpire,
        Self::TktFile,
        Self::Decode,
        Self::NetAddr,
        Self::RpcsecGssCredProblem,
        Self::RpcsecGssCtxProblem,
    ];

    #[inline]
    pub const fn from_u32(v: u32) -> Option<Self> {
        if (v as usize) < Self::ALL.len() {
            Some(Self::ALL[v as usize])
        } else {
            None
        }
    }

    #[inline]
    pub const fn as_u32(self) -> u32 {
        self as u32
    }
}

/// The `reply_data` of an accepted reply (RFC 5531 section 9, `accepted_reply`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AcceptedReply {
    /// SUCCESS: the procedure's results follow the header.
    Success,
    ProgUnavail,
    /// PROG_MISMATCH with the lowest and highest supported program versions.
    ProgMismatch {
        low: u32,
        high: u32,
    },
    ProcUnavail,
    GarbageArgs,
    SystemErr,
}

impl AcceptedReply {
    /// The `accept_stat` value.
    #[inline]
    pub const fn accept_stat(&self) -> u32 {
        match self {
            Self::Success => SUCCESS,
            Self::ProgUnavail => PROG_UNAVAIL,
            Self::ProgMismatch { .. } => PROG_MISMATCH,
            Self::ProcUnavail => PROC_UNAVAIL,
            Self::GarbageArgs => GARBAGE_ARGS,
            Self::SystemErr => SYSTEM_ERR,
        }
    }
}

/// `rejected_reply` (RFC 5531 section 9).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RejectedReply {
    /// RPC_MISMATCH with the lowest and highest supported RPC versions.
    RpcMismatch { low: u32, high: u32 },
    /// AUTH_ERROR with the reason.
    AuthError(AuthStat),
}

/// `reply_body` (RFC 5531 section 9).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplyBody<'a> {
    /// MSG_ACCEPTED: a verifier and the `accept_stat` arm.
    Accepted { verf: OpaqueAuth<'a>, data: AcceptedReply },
    /// MSG_DENIED.
    Denied(RejectedReply),
}

/// A reply header (`rpc_msg` with `mtype` REPLY), everything before the results.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplyHeader<'a> {
    pub xid: u32,
    pub body: ReplyBody<'a>,
}

impl<'a> ReplyHeader<'a> {
    /// MSG_ACCEPTED / SUCCESS with the given verifier; results follow.
    pub const fn success(xid: u32, verf: OpaqueAuth<'a>) -> Self {
        Self::accepted(xid, verf, AcceptedReply::Success)
    }

    /// MSG_ACCEPTED with any `accept_stat` arm.
    pub const fn accepted(xid: u32, verf: OpaqueAuth<'a>, data: AcceptedReply) -> Self {
        Self {
            xid,
            body: ReplyBody::Accepted { verf, data },
        }
    }

    /// MSG_DENIED.
    pub const fn denied(xid: u32, why: RejectedReply) -> Self {
        Self {
            xid,
            body: ReplyBody::Denied(why),
        }
    }

    /// MSG_DENIED / RPC_MISMATCH advertising version 2 only: the answer to a call
    /// whose decode failed with `BadVersion` on `rpcvers`.
    pub const fn rpc_mismatch(xid: u32) -> Self {
        Self::denied(
            xid,
            RejectedReply::RpcMismatch {
                low: RPC_VERSION,
                high: RPC_VERSION,
            },
        )
    }

    /// Whether this is MSG_ACCEPTED / SUCCESS (results follow).
    #[inline]
    pub const fn is_success(&self) -> bool {
        matches!(
            self.body,
            ReplyBody::Accepted {
                data: AcceptedReply::Success,
                ..
            }
        )
    }

    /// Encoded size of this header.
    pub const fn encoded_len(&self) -> usize {
        12 + match &self.body {
            ReplyBody::Accepted { verf, data } => {
                verf.encoded_len()
                    + 4
                    + match data {
                        AcceptedReply::ProgMismatch { .. } => 8,
                        _ => 0,
                    }
            }
            ReplyBody::Denied(RejectedReply::RpcMismatch { .. }) => 12,
            ReplyBody::Denied(RejectedReply::AuthError(_)) => 8,
        }
    }

    /// Decode a reply header from the start of `buf` (which starts at the XID).
    /// Returns the header and the offset just past it, where the results start if
    /// [`is_success`](Self::is_success).
    pub fn decode(buf: &'a [u8]) -> Result<(Self, usize), DecodeError> {
        let mut r = Reader::new(buf);
        let hdr = Self::decode_from(&mut r)?;
        Ok((hdr, r.pos()))
    }

    /// Decode from a reader positioned at the XID; leaves it after the header.
    pub fn decode_from(r: &mut Reader<'a>) -> Result<Self, DecodeError> {
        let bad = |value: u32, field: &'static str, at: usize| {
            DecodeError::new(DecodeErrorKind::BadDiscriminant { value }, field, at)
        };
        let xid = r.u32("xid")?;
        let at = r.offset();
        let mtype = r.u32("mtype")?;
        if mtype != REPLY {
            return Err(bad(mtype, "mtype", at));
        }
        let at = r.offset();
        let body = match r.u32("reply_stat")? {
            MSG_ACCEPTED => {
                let verf = OpaqueAuth::decode(r, "verf.flavor", "verf.body")?;
                let at = r.offset();
                let data = match r.u32("accept_stat")? {
                    SUCCESS => AcceptedReply::Success,
                    PROG_UNAVAIL => AcceptedReply::ProgUnavail,
                    PROG_MISMATCH => AcceptedReply::ProgMismatch {
                        low: r.u32("mismatch_info.low")?,
                        high: r.u32("mismatch_info.high")?,
                    },
                    PROC_UNAVAIL => AcceptedReply::ProcUnavail,
                    GARBAGE_ARGS => AcceptedReply::GarbageArgs,
                    SYSTEM_ERR => AcceptedReply::SystemErr,
                    v => return Err(bad(v, "accept_stat", at)),
                };
                ReplyBody::Accepted { verf, data }
            }
            MSG_DENIED => {
                let at = r.offset();
                match r.u32("reject_stat")? {
                    RPC_MISMATCH => ReplyBody::Denied(RejectedReply::RpcMismatch {
                        low: r.u32("mismatch_info.low")?,
                        high: r.u32("mismatch_info.high")?,
                    }),
                    AUTH_ERROR => {
                        let at = r.offset();
                        let v = r.u32("auth_stat")?;
                        match AuthStat::from_u32(v) {
                            Some(s) => ReplyBody::Denied(RejectedReply::AuthError(s)),
                            None => return Err(bad(v, "auth_stat", at)),
                        }
                    }
                    v => return Err(bad(v, "reject_stat", at)),
                }
            }
            v => return Err(bad(v, "reply_stat", at)),
        };
        Ok(Self { xid, body })
    }
}

/// [`ReplyHeader::decode`] as a free function.
pub fn decode_reply(buf: &[u8]) -> Result<(ReplyHeader<'_>, usize), DecodeError> {
    ReplyHeader::decode(buf)
}

/// Encode a reply header (the responder side); for SUCCESS the caller appends
/// the results. On error nothing is written.
pub fn encode_reply_header(w: &mut Writer<'_>, hdr: &ReplyHeader<'_>) -> Result<(), EncodeError> {
    check_room(w, hdr.encoded_len())?;
    if let ReplyBody::Accepted { verf, .. } = &hdr.body {
        if verf.body.len() > MAX_AUTH_BYTES as usize {
            return Err(EncodeError::Unrepresentable { field: "verf.body" });
        }
    }
    // The room for all of it was checked above.
    match &hdr.body {
        ReplyBody::Accepted { verf, data } => {
            w.put_u32s([hdr.xid, REPLY, MSG_ACCEPTED, verf.flavor, verf.body.len() as u32])?;
            w.put_opaque_fixed(verf.body)?;
            w.put_u32(data.accept_stat())?;
            if let AcceptedReply::ProgMismatch { low, high } = *data {
                w.put_u32(low)?;
                w.put_u32(high)?;
            }
        }
        ReplyBody::Denied(RejectedReply::RpcMismatch { low, high }) => {
            w.put_u32s([hdr.xid, REPLY, MSG_DENIED])?;
            w.put_u32(RPC_MISMATCH)?;
            w.put_u32(*low)?;
            w.put_u32(*high)?;
        }
        ReplyBody::Denied(RejectedReply::AuthError(s)) => {
            w.put_u32s([hdr.xid, REPLY, MSG_DENIED])?;
            w.put_u32(AUTH_ERROR)?;
            w.put_u32(s.as_u32())?;
        }
    }
    Ok(())
}

/// Bytes of the reply header [`encode_success_reply_none`] writes.
pub const SUCCESS_REPLY_NONE_BYTES: usize = 24;

/// The reply header of an accepted, successful Call with an empty AUTH_NONE
/// verifier, which nearly every reply starts with, in one step. RFC 5531
/// section 9: `xid, REPLY, MSG_ACCEPTED, verf {AUTH_NONE, length 0},
/// SUCCESS`; the results follow. The same bytes as [`encode_reply_header`]
/// of `ReplyHeader::success(xid, OpaqueAuth::NONE)` (property test below).
/// Returns [`SUCCESS_REPLY_NONE_BYTES`], or `None` (nothing written) when
/// `out` is shorter.
#[inline]
pub fn encode_success_reply_none(xid: u32, out: &mut [u8]) -> Option<usize> {
    let out: &mut [u8; SUCCESS_REPLY_NONE_BYTES] = out.first_chunk_mut()?;
    let words = [xid, REPLY, MSG_ACCEPTED, AUTH_NONE, 0, SUCCESS];
    for (dst, w) in out.chunks_exact_mut(4).zip(words) {
        dst.copy_from_slice(&w.to_be_bytes());
    }
    Some(SUCCESS_REPLY_NONE_BYTES)
}

// ---------------------------------------------------------------------------
// Record marking (RFC 5531 section 11)
// ---------------------------------------------------------------------------

/// The last-fragment bit of a record mark.
pub const RM_LAST_FRAGMENT: u32 = 0x8000_0000;
/// Largest fragment length a record mark can carry (31 bits).
pub const RM_MAX_FRAGMENT_BYTES: u32 = 0x7fff_ffff;
/// Size of a record mark on the wire.
pub const RM_BYTES: usize = 4;

/// A record mark: the 4-byte fragment header used on byte streams (TCP).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RecordMark {
    last: bool,
    len: u32,
}

impl RecordMark {
    /// A mark for a fragment of `len` bytes; fails if `len` does not fit in 31 bits.
    pub const fn new(last: bool, len: u32) -> Result<Self, EncodeError> {
        if len > RM_MAX_FRAGMENT_BYTES {
            Err(EncodeError::Unrepresentable {
                field: "fragment length",
            })
        } else {
            Ok(Self { last, len })
        }
    }

    /// Whether this fragment ends the record.
    #[inline]
    pub const fn last(&self) -> bool {
        self.last
    }

    /// Fragment length in bytes (not counting the mark).
    #[inline]
    pub const fn len(&self) -> u32 {
        self.len
    }

    #[inline]
    pub const fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Every 32-bit word is a valid record mark.
    #[inline]
    pub const fn from_word(w: u32) -> Self {
        Self {
            last: w & RM_LAST_FRAGMENT != 0,
            len: w & RM_MAX_FRAGMENT_BYTES,
        }
    }

    #[inline]
    pub const fn to_word(self) -> u32 {
        (if self.last { RM_LAST_FRAGMENT } else { 0 }) | self.len
    }

    #[inline]
    pub const fn from_bytes(b: [u8; 4]) -> Self {
        Self::from_word(u32::from_be_bytes(b))
    }

    #[inline]
    pub const fn to_bytes(self) -> [u8; 4] {
        self.to_word().to_be_bytes()
    }

    /// Write the mark.
    #[inline]
    pub fn encode(self, w: &mut Writer<'_>) -> Result<(), EncodeError> {
        w.put_u32(self.to_word())
    }
}

/// A failure of the record reassembler.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RecordError {
    /// The peer announced a record larger than the configured maximum. The
    /// stream cannot be resynchronised: close the connection. `len_bytes` is the
    /// record length so far including the announced fragment.
    TooLarge { len_bytes: u64, max_bytes: usize },
    /// The caller's record buffer is shorter than the configured maximum (a
    /// caller bug; the reassembler state is unchanged).
    BufferTooSmall { needed_bytes: usize },
}

impl core::fmt::Display for RecordError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            Self::TooLarge { len_bytes, max_bytes } => {
                write!(f, "record of {len_bytes} bytes exceeds limit {max_bytes}")
            }
            Self::BufferTooSmall { needed_bytes } => {
                write!(f, "record buffer too small ({needed_bytes} bytes needed)")
            }
        }
    }
}

impl std::error::Error for RecordError {}

/// What one [`RecordReassembler::feed`] call did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Progress {
    /// Input bytes consumed; feed the rest in the next call.
    pub consumed: usize,
    /// `Some(n)`: a complete record occupies the first `n` bytes of the record
    /// buffer. It stays valid until the next `feed`, which starts a new record at
    /// offset 0 of the buffer.
    pub record_len: Option<usize>,
}

/// Sans-IO reassembler for record-marked streams (RFC 5531 section 11).
///
/// Feed it byte chunks of any size as they arrive; it strips the record marks and
/// copies fragment bodies into a caller-provided record buffer, returning when a
/// record is complete. Peer-announced lengths are checked against
/// `max_record_bytes` *before* any byte of the fragment is copied, and nothing is
/// allocated. Once a record exceeds the limit the reassembler stays failed
/// (framing is lost) until [`reset`](Self::reset).
///
/// One reassembler per connection; it is owned by the core that reads that
/// connection.
#[derive(Clone, Debug)]
pub struct RecordReassembler {
    max_record_bytes: usize,
    mark: [u8; RM_BYTES],
    /// Bytes of the current record mark collected so far (0..4), only meaningful
    /// when not inside a fragment body.
    mark_have: usize,
    /// Bytes of the current fragment body still to copy; `None` = reading a mark.
    frag_left: Option<u32>,
    frag_last: bool,
    record_len: usize,
    failed: Option<RecordError>,
}

impl RecordReassembler {
    /// A reassembler accepting records of up to `max_record_bytes` (the sum of
    /// all fragment bodies of one record).
    pub const fn new(max_record_bytes: usize) -> Self {
        Self {
            max_record_bytes,
            mark: [0; RM_BYTES],
            mark_have: 0,
            frag_left: None,
            frag_last: false,
            record_len: 0,
            failed: None,
        }
    }

    /// The configured record limit.
    #[inline]
    pub const fn max_record_bytes(&self) -> usize {
        self.max_record_bytes
    }

    /// Whether a record (or a record mark) has been partly received: at
    /// end-of-stream this means the peer closed mid-record.
    #[inline]
    pub const fn mid_record(&self) -> bool {
        self.record_len != 0 || self.mark_have != 0 || self.frag_left.is_some() || self.frag_last
    }

    /// Forget all state (e.g. for a new connection).
    pub fn reset(&mut self) {
        *self = Self::new(self.max_record_bytes);
    }

    /// Consume bytes from `input`, assembling the current record in `record`
    /// (which must be at least `max_record_bytes` long and must be the same
    /// buffer, unmodified, across calls until a record completes). Stops right
    /// after the first complete record.
    pub fn feed(&mut self, input: &[u8], record: &mut [u8]) -> Result<Progress, RecordError> {
        if let Some(e) = self.failed {
            return Err(e);
        }
        if record.len() < self.max_record_bytes {
            return Err(RecordError::BufferTooSmall {
                needed_bytes: self.max_record_bytes,
            });
        }
        let mut pos = 0;
        loop {
            match self.frag_left {
                None => {
                    // Collect the record mark.
                    let take = (RM_BYTES - self.mark_have).min(input.len() - pos);
                    self.mark[self.mark_have..self.mark_have + take].copy_from_slice(&input[pos..pos + take]);
                    self.mark_have += take;
                    pos += take;
                    if self.mark_have < RM_BYTES {
                        return Ok(Progress {
                            consumed: pos,
                            record_len: None,
                        });
                    }
                    self.mark_have = 0;
                    let m = RecordMark::from_bytes(self.mark);
                    let total = self.record_len as u64 + u64::from(m.len());
                    if total > self.max_record_bytes as u64 {
                        let e = RecordError::TooLarge {
                            len_bytes: total,
                            max_bytes: self.max_record_bytes,
                        };
                        self.failed = Some(e);
                        return Err(e);
                    }
                    self.frag_left = Some(m.len());
                    self.frag_last = m.last();
                }
                Some(left) => {
                    let take = (left as usize).min(input.len() - pos);
                    // record_len + left <= max_record_bytes <= record.len(),
                    // checked when the mark was read.
                    record[self.record_len..self.record_len + take].copy_from_slice(&input[pos..pos + take]);
                    self.record_len += take;
                    pos += take;
                    let left = left - take as u32;
                    if left > 0 {
                        self.frag_left = Some(left);
                        return Ok(Progress {
                            consumed: pos,
                            record_len: None,
                        });
                    }
                    self.frag_left = None;
                    if self.frag_last {
                        let n = self.record_len;
                        self.record_len = 0;
                        self.frag_last = false;
                        return Ok(Progress {
                            consumed: pos,
                            record_len: Some(n),
                        });
                    }
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------

#[cfg(test)]
mod tests {
    use super::*;

    /// Big-endian words to bytes.
    fn words(ws: &[u32]) -> Vec<u8> {
        ws.iter().flat_map(|w| w.to_be_bytes()).collect()
    }

    // A call: xid 0x01020304, CALL, rpcvers 2, prog 100003, vers 3, proc 1
    // (GETATTR), AUTH_NONE cred, AUTH_NONE verf, no args.
    const CALL_AUTH_NONE: [u8; 40] = [
        0x01, 0x02, 0x03, 0x04, // xid
        0, 0, 0, 0, // mtype CALL
        0, 0, 0, 2, // rpcvers
        0x00, 0x01, 0x86, 0xa3, // prog 100003
        0, 0, 0, 3, // vers
        0, 0, 0, 1, // proc
        0, 0, 0, 0, 0, 0, 0, 0, // cred AUTH_NONE, len 0
        0, 0, 0, 0, 0, 0, 0, 0, // verf AUTH_NONE, len 0
    ];

    // A call with AUTH_SYS: stamp 0x11, machinename "box" (3 bytes + 1 pad),
    // uid 1000, gid 100, gids [100, 10, 4].
    fn call_auth_sys() -> Vec<u8> {
        let mut v = vec![
            0xde, 0xad, 0xbe, 0xef, // xid
            0, 0, 0, 0, // CALL
            0, 0, 0, 2, // rpcvers
            0x00, 0x01, 0x86, 0xa5, // prog 100005 (MOUNT)
            0, 0, 0, 3, // vers
            0, 0, 0, 1, // proc MNT
            0, 0, 0, 1, // cred flavor AUTH_SYS
            0, 0, 0, 36, // cred body length
            0, 0, 0, 0x11, // stamp
            0, 0, 0, 3, b'b', b'o', b'x', 0, // machinename
            0, 0, 0x03, 0xe8, // uid 1000
            0, 0, 0, 100, // gid
            0, 0, 0, 3, // gids count
            0, 0, 0, 100, 0, 0, 0, 10, 0, 0, 0, 4, // gids
            0, 0, 0, 0, 0, 0, 0, 0, // verf AUTH_NONE
        ];
        // arguments: dirpath "/x"
        v.extend_from_slice(&[0, 0, 0, 2, b'/', b'x', 0, 0]);
        v
    }

    #[test]
    fn call_auth_none_decodes() {
        let (h, off) = decode_call(&CALL_AUTH_NONE).unwrap();
        assert_eq!(off, 40);
        assert_eq!(h.xid, 0x0102_0304);
        assert_eq!(h.rpcvers, 2);
        assert_eq!(h.prog, 100_003);
        assert_eq!(h.vers, 3);
        assert_eq!(h.proc_, 1);
        assert_eq!(h.cred, OpaqueAuth::NONE);
        assert_eq!(h.verf, OpaqueAuth::NONE);
        assert!(h.auth_sys().is_none());
        assert_eq!(h.encoded_len(), 40);
        assert_eq!(peek_msg(&CALL_AUTH_NONE).unwrap(), (0x0102_0304, CALL));

        let mut buf = [0u8; 40];
        let mut w = Writer::new(&mut buf);
        encode_call_header(&mut w, &h).unwrap();
        assert_eq!(w.written(), &CALL_AUTH_NONE[..]);
    }

    #[test]
    fn call_auth_sys_decodes() {
        let v = call_auth_sys();
        let (h, off) = decode_call(&v).unwrap();
        assert_eq!(off, 76);
        assert_eq!(h.prog, 100_005);
        assert_eq!(h.cred.flavor, AUTH_SYS);
        assert_eq!(h.cred.body.len(), 36);
        let p = h.auth_sys().unwrap().unwrap();
        assert_eq!(p.stamp, 0x11);
        assert_eq!(p.machinename, b"box");
        assert_eq!(p.uid, 1000);
        assert_eq!(p.gid, 100);
        assert_eq!(p.gids(), &[100, 10, 4]);
        assert_eq!(p.encoded_len(), 36);
        assert_eq!(&v[off..], &[0, 0, 0, 2, b'/', b'x', 0, 0]);

        // Re-encode byte-exactly.
        let mut body = [0u8; MAX_AUTH_BYTES as usize];
        let mut bw = Writer::new(&mut body);
        p.encode(&mut bw).unwrap();
        let n = bw.len();
        let hdr = CallHeader::new(
            0xdead_beef,
            100_005,
            3,
            1,
            OpaqueAuth {
                flavor: AUTH_SYS,
                body: &body[..n],
            },
            OpaqueAuth::NONE,
        );
        let mut out = [0u8; 76];
        let mut w = Writer::new(&mut out);
        encode_call_header(&mut w, &hdr).unwrap();
        assert_eq!(w.written(), &v[..76]);
    }

    /// The one-pass decoder agrees with the word-by-word one on every input
    /// it accepts, and leaves every other input to it.
    #[test]
    fn call_header_fast_path_agrees_with_word_by_word() {
        let lens = [0usize, 1, 3, 4, 5, 8, 396, 397, 400, 401, 404];
        let mut checked = 0;
        for &cl in &lens {
            for &vl in &lens {
                let mut m = Vec::new();
                for wd in [0x1234_5678u32, CALL, RPC_VERSION, 100_003, 3, 6, AUTH_SYS, cl as u32] {
                    m.extend_from_slice(&wd.to_be_bytes());
                }
                m.extend((0..roundup(cl)).map(|i| i as u8 | 1));
                m.extend_from_slice(&7u32.to_be_bytes());
                m.extend_from_slice(&(vl as u32).to_be_bytes());
                m.extend((0..roundup(vl)).map(|i| i as u8 | 2));
                m.extend_from_slice(&[9, 9, 9, 9]);
                let full = m.len();
                // Every truncation, and the message with each fixed word broken.
                let mut inputs: Vec<Vec<u8>> = (0..=full).map(|n| m[..n].to_vec()).collect();
                for at in [4usize, 8] {
                    let mut bad = m.clone();
                    bad[at + 3] ^= 3;
                    inputs.push(bad);
                }
                for input in inputs {
                    let whole = CallHeader::decode_whole(&input);
                    let mut r = Reader::new(&input);
                    let words = CallHeader::decode_by_words(&mut r);
                    match (whole, words) {
                        (Some((h, n)), Ok(h2)) => {
                            assert_eq!((h, n), (h2, r.pos()), "cred {cl} verf {vl}");
                            assert_eq!((h.cred.body.len(), h.verf.body.len()), (cl, vl));
                            checked += 1;
                        }
                        (Some(_), Err(e)) => panic!("fast path accepted what is wrong: {e:?}"),
                        (None, Ok(h)) => panic!("a valid header left to the slow path: {h:?}"),
                        (None, Err(_)) => {}
                    }
                    let via_api = decode_call(&input);
                    let mut r = Reader::new(&input);
                    assert_eq!(via_api.map(|(h, _)| h), CallHeader::decode_by_words(&mut r));
                }
            }
        }
        assert!(checked >= 49, "valid headers checked: {checked}");
    }

    #[test]
    fn call_errors_are_typed() {
        let mut v = CALL_AUTH_NONE;
        v[11] = 3; // rpcvers 3
        let e = decode_call(&v).unwrap_err();
        assert_eq!(e.kind, DecodeErrorKind::BadVersion { vers: 3 });
        assert_eq!((e.field, e.offset), ("rpcvers", 8));

        let mut v = CALL_AUTH_NONE;
        v[7] = 1; // a REPLY
        let e = decode_call(&v).unwrap_err();
        assert_eq!(e.kind, DecodeErrorKind::BadDiscriminant { value: 1 });
        assert_eq!((e.field, e.offset), ("mtype", 4));

        // cred body of 404 bytes: over the 400-byte bound.
        let mut v = CALL_AUTH_NONE.to_vec();
        v[28..32].copy_from_slice(&404u32.to_be_bytes());
        v.resize(40 + 404, 0);
        let e = decode_call(&v).unwrap_err();
        assert_eq!(e.kind, DecodeErrorKind::TooLong { len: 404, max: 400 });
        assert_eq!((e.field, e.offset), ("cred.body", 28));
    }

    #[test]
    fn auth_sys_errors() {
        let v = call_auth_sys();
        let body = &v[32..68];
        // 17 gids
        let mut b = body.to_vec();
        b[20..24].copy_from_slice(&17u32.to_be_bytes());
        let e = AuthSysParms::decode(&b).unwrap_err();
        assert_eq!(e.kind, DecodeErrorKind::TooLong { len: 17, max: 16 });
        assert_eq!((e.field, e.offset), ("gids", 20));
        // machinename of 256 bytes
        let mut b = body.to_vec();
        b[4..8].copy_from_slice(&256u32.to_be_bytes());
        let e = AuthSysParms::decode(&b).unwrap_err();
        assert_eq!(e.kind, DecodeErrorKind::TooLong { len: 256, max: 255 });
        // trailing bytes
        let mut b = body.to_vec();
        b.extend_from_slice(&[0; 4]);
        let e = AuthSysParms::decode(&b).unwrap_err();
        assert_eq!(e.kind, DecodeErrorKind::Invalid { value: 4 });
        assert_eq!(e.offset, 36);
        // errors through the call header carry message offsets
        let mut m = v.clone();
        m[32 + 20..32 + 24].copy_from_slice(&17u32.to_be_bytes());
        let (h, _) = decode_call(&m).unwrap();
        let e = h.auth_sys().unwrap().unwrap_err();
        assert_eq!(e.offset, 32 + 20);
        // builder bounds
        assert!(AuthSysParms::new(0, &[b'a'; 256], 0, 0, &[]).is_err());
        assert!(AuthSysParms::new(0, b"a", 0, 0, &[0; 17]).is_err());
        assert_eq!(AuthSysParms::MAX_ENCODED_BYTES, 340);
    }

    #[test]
    fn rpcsec_gss_cred() {
        let body = words(&[1, RPCSEC_GSS_DATA, 7, RPC_GSS_SVC_INTEGRITY, 4, 0xaabb_ccdd]);
        let c = RpcGssCred::decode_with_base(&body, 0).unwrap();
        assert_eq!(c.seq_num, 7);
        assert_eq!(c.service, RPC_GSS_SVC_INTEGRITY);
        assert_eq!(c.handle, &[0xaa, 0xbb, 0xcc, 0xdd]);
        assert!(!c.args_unwrapped());
        let body = words(&[1, RPCSEC_GSS_DATA, 7, RPC_GSS_SVC_NONE, 0]);
        assert!(RpcGssCred::decode_with_base(&body, 0).unwrap().args_unwrapped());
        let body = words(&[2, 0, 0, 1, 0]);
        let e = RpcGssCred::decode_with_base(&body, 32).unwrap_err();
        assert_eq!(e.kind, DecodeErrorKind::BadVersion { vers: 2 });
        assert_eq!(e.offset, 32);
        let body = words(&[1, 0, 0, 4, 0]);
        let e = RpcGssCred::decode_with_base(&body, 0).unwrap_err();
        assert_eq!(
            (e.field, e.kind),
            ("service", DecodeErrorKind::BadDiscriminant { value: 4 })
        );
    }

    /// Every reply variant, byte-exact.
    fn reply_vectors() -> Vec<(ReplyHeader<'static>, Vec<u8>)> {
        const VERF: &[u8] = &[9, 8, 7, 6, 5];
        vec![
            (
                ReplyHeader::success(0x0102_0304, OpaqueAuth::NONE),
                vec![1, 2, 3, 4, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
            ),
            (
                // a 5-byte verifier of flavor 6 with 3 pad bytes
                ReplyHeader::success(
                    7,
                    OpaqueAuth {
                        flavor: RPCSEC_GSS,
                        body: VERF,
                    },
                ),
                vec![
                    0, 0, 0, 7, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 6, 0, 0, 0, 5, 9, 8, 7, 6, 5, 0, 0, 0, 0, 0, 0, 0,
                ],
            ),
            (
                ReplyHeader::accepted(8, OpaqueAuth::NONE, AcceptedReply::ProgUnavail),
                words(&[8, 1, 0, 0, 0, 1]),
            ),
            (
                ReplyHeader::accepted(9, OpaqueAuth::NONE, AcceptedReply::ProgMismatch { low: 2, high: 4 }),
                words(&[9, 1, 0, 0, 0, 2, 2, 4]),
            ),
            (
                ReplyHeader::accepted(10, OpaqueAuth::NONE, AcceptedReply::ProcUnavail),
                words(&[10, 1, 0, 0, 0, 3]),
            ),
            (
                ReplyHeader::accepted(11, OpaqueAuth::NONE, AcceptedReply::GarbageArgs),
                words(&[11, 1, 0, 0, 0, 4]),
            ),
            (
                ReplyHeader::accepted(12, OpaqueAuth::NONE, AcceptedReply::SystemErr),
                words(&[12, 1, 0, 0, 0, 5]),
            ),
            (ReplyHeader::rpc_mismatch(13), words(&[13, 1, 1, 0, 2, 2])),
            (
                ReplyHeader::denied(14, RejectedReply::AuthError(AuthStat::TooWeak)),
                words(&[14, 1, 1, 1, 5]),
            ),
            (
                ReplyHeader::denied(15, RejectedReply::AuthError(AuthStat::RpcsecGssCtxProblem)),
                words(&[15, 1, 1, 1, 14]),
            ),
        ]
    }

    #[test]
    fn reply_variants_byte_exact() {
        for (hdr, bytes) in reply_vectors() {
            let (d, off) = decode_reply(&bytes).unwrap();
            assert_eq!(d, hdr);
            assert_eq!(off, bytes.len());
            assert_eq!(hdr.encoded_len(), bytes.len());
            let mut buf = [0u8; 64];
            let mut w = Writer::new(&mut buf);
            encode_reply_header(&mut w, &hdr).unwrap();
            assert_eq!(w.written(), &bytes[..]);
            // too small a buffer: error, and nothing written
            let mut small = vec![0u8; bytes.len() - 1];
            let mut w = Writer::new(&mut small);
            assert_eq!(
                encode_reply_header(&mut w, &hdr),
                Err(EncodeError::BufferTooSmall { needed: bytes.len() })
            );
            assert_eq!(w.len(), 0);
        }
    }

    #[test]
    fn reply_results_offset_and_bad_values() {
        let mut v = words(&[5, 1, 0, 0, 0, 0]);
        v.extend_from_slice(&[0xaa; 8]);
        let (h, off) = decode_reply(&v).unwrap();
        assert!(h.is_success());
        assert_eq!(off, 24);

        let cases: [(Vec<u8>, &str, u32, usize); 5] = [
            (words(&[1, 0, 0, 0, 0, 0]), "mtype", 0, 4),
            (words(&[1, 1, 2, 0, 0, 0]), "reply_stat", 2, 8),
            (words(&[1, 1, 0, 0, 0, 6]), "accept_stat", 6, 20),
            (words(&[1, 1, 1, 2, 0]), "reject_stat", 2, 12),
            (words(&[1, 1, 1, 1, 15]), "auth_stat", 15, 16),
        ];
        for (b, field, value, offset) in cases {
            let e = decode_reply(&b).unwrap_err();
            assert_eq!(e.kind, DecodeErrorKind::BadDiscriminant { value }, "{field}");
            assert_eq!((e.field, e.offset), (field, offset));
        }
    }

    #[test]
    fn truncation_never_panics() {
        let calls: [Vec<u8>; 2] = [CALL_AUTH_NONE.to_vec(), call_auth_sys()[..76].to_vec()];
        for v in &calls {
            for n in 0..v.len() {
                assert!(decode_call(&v[..n]).is_err(), "call prefix {n}");
            }
        }
        for (_, bytes) in reply_vectors() {
            for n in 0..bytes.len() {
                let e = decode_reply(&bytes[..n]).unwrap_err();
                assert_eq!(e.kind, DecodeErrorKind::Truncated);
            }
        }
        let body = &call_auth_sys()[32..68];
        for n in 0..body.len() {
            assert!(AuthSysParms::decode(&body[..n]).is_err());
        }
    }

    #[test]
    fn auth_stat_values() {
        for (i, s) in AuthStat::ALL.iter().enumerate() {
            assert_eq!(s.as_u32(), i as u32);
            assert_eq!(AuthStat::from_u32(i as u32), Some(*s));
        }
        assert_eq!(AuthStat::from_u32(15), None);
        assert_eq!(AuthStat::RpcsecGssCredProblem as u32, 13);
    }

    #[test]
    fn record_mark_words() {
        let m = RecordMark::new(true, 0x1234).unwrap();
        assert_eq!(m.to_bytes(), [0x80, 0x00, 0x12, 0x34]);
        assert_eq!(RecordMark::from_bytes([0x80, 0, 0x12, 0x34]), m);
        let m = RecordMark::from_word(0x7fff_ffff);
        assert!(!m.last());
        assert_eq!(m.len(), RM_MAX_FRAGMENT_BYTES);
        assert!(RecordMark::new(false, 0x8000_0000).is_err());
        let mut b = [0u8; 4];
        let mut w = Writer::new(&mut b);
        RecordMark::new(false, 5).unwrap().encode(&mut w).unwrap();
        assert_eq!(b, [0, 0, 0, 5]);
    }

    /// Two records: the first in two fragments ("abc" + "defg"), the second a
    /// single last fragment "xy", then an empty record.
    const STREAM: &[u8] = &[
        0x00, 0, 0, 3, b'a', b'b', b'c', // not last, 3
        0x80, 0, 0, 4, b'd', b'e', b'f', b'g', // last, 4
        0x80, 0, 0, 2, b'x', b'y', // last, 2
        0x80, 0, 0, 0, // last, 0: empty record
    ];

    fn drain(ra: &mut RecordReassembler, chunks: &[&[u8]]) -> Vec<Vec<u8>> {
        let mut buf = [0u8; 16];
        let mut out = Vec::new();
        for chunk in chunks {
            let mut input = *chunk;
            loop {
                let p = ra.feed(input, &mut buf).unwrap();
                input = &input[p.consumed..];
                match p.record_len {
                    Some(n) => out.push(buf[..n].to_vec()),
                    None => {
                        assert!(input.is_empty(), "input left without a record");
                        break;
                    }
                }
            }
        }
        out
    }

    #[test]
    fn reassembles_whole_and_byte_by_byte() {
        let want: Vec<Vec<u8>> = vec![b"abcdefg".to_vec(), b"xy".to_vec(), vec![]];
        let mut ra = RecordReassembler::new(16);
        assert_eq!(drain(&mut ra, &[STREAM]), want);
        assert!(!ra.mid_record());
        let bytes: Vec<&[u8]> = STREAM.chunks(1).collect();
        let mut ra = RecordReassembler::new(16);
        assert_eq!(drain(&mut ra, &bytes), want);
        // every two-way split
        for cut in 0..=STREAM.len() {
            let mut ra = RecordReassembler::new(16);
            assert_eq!(drain(&mut ra, &[&STREAM[..cut], &STREAM[cut..]]), want, "cut {cut}");
        }
        // mid-record detection
        let mut ra = RecordReassembler::new(16);
        let mut buf = [0u8; 16];
        let p = ra.feed(&STREAM[..9], &mut buf).unwrap();
        assert_eq!(
            p,
            Progress {
                consumed: 9,
                record_len: None
            }
        );
        assert!(ra.mid_record());
        ra.reset();
        assert!(!ra.mid_record());
    }

    #[test]
    fn oversize_is_an_error_before_copying() {
        // One fragment larger than the limit.
        let mut ra = RecordReassembler::new(8);
        let mut buf = [0u8; 8];
        let e = ra.feed(&[0x80, 0, 0, 9, 1, 2], &mut buf).unwrap_err();
        assert_eq!(
            e,
            RecordError::TooLarge {
                len_bytes: 9,
                max_bytes: 8
            }
        );
        assert_eq!(buf, [0; 8], "nothing copied");
        // stays failed
        assert_eq!(ra.feed(&[0x80, 0, 0, 0], &mut buf), Err(e));
        // Fragments that add up past the limit: 5 + 4 > 8.
        let mut ra = RecordReassembler::new(8);
        let e = ra
            .feed(&[0, 0, 0, 5, 1, 2, 3, 4, 5, 0x80, 0, 0, 4], &mut buf)
            .unwrap_err();
        assert_eq!(
            e,
            RecordError::TooLarge {
                len_bytes: 9,
                max_bytes: 8
            }
        );
        // Largest possible announced length.
        let mut ra = RecordReassembler::new(8);
        let e = ra.feed(&[0xff, 0xff, 0xff, 0xff], &mut buf).unwrap_err();
        assert_eq!(
            e,
            RecordError::TooLarge {
                len_bytes: u64::from(RM_MAX_FRAGMENT_BYTES),
                max_bytes: 8
            }
        );
        // Exactly the limit is fine.
        let mut ra = RecordReassembler::new(8);
        let p = ra.feed(&[0x80, 0, 0, 8, 1, 2, 3, 4, 5, 6, 7, 8], &mut buf).unwrap();
        assert_eq!(p.record_len, Some(8));
        // A buffer shorter than the limit is a caller error.
        let mut ra = RecordReassembler::new(32);
        assert_eq!(
            ra.feed(STREAM, &mut buf),
            Err(RecordError::BufferTooSmall { needed_bytes: 32 })
        );
    }

    mod props {
        use super::super::*;
        use proptest::prelude::*;

        fn accepted() -> impl Strategy<Value = AcceptedReply> {
            prop_oneof![
                Just(AcceptedReply::Success),
                Just(AcceptedReply::ProgUnavail),
                (any::<u32>(), any::<u32>()).prop_map(|(low, high)| AcceptedReply::ProgMismatch { low, high }),
                Just(AcceptedReply::ProcUnavail),
                Just(AcceptedReply::GarbageArgs),
                Just(AcceptedReply::SystemErr),
            ]
        }

        #[derive(Debug, Clone)]
        enum Shape {
            Accepted(u32, Vec<u8>, AcceptedReply),
            Mismatch(u32, u32),
            Auth(u32),
        }

        fn shape() -> impl Strategy<Value = Shape> {
            prop_oneof![
                (any::<u32>(), prop::collection::vec(any::<u8>(), 0..=400), accepted())
                    .prop_map(|(f, b, a)| Shape::Accepted(f, b, a)),
                (any::<u32>(), any::<u32>()).prop_map(|(l, h)| Shape::Mismatch(l, h)),
                (0u32..15).prop_map(Shape::Auth),
            ]
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(256))]

            /// The one-step SUCCESS header is the general encoder's, and
            /// writes nothing into a buffer too short for it.
            #[test]
            fn success_reply_none_agrees_with_the_encoder(xid in any::<u32>(), len in 0usize..40) {
                let mut general = [0u8; 64];
                let mut w = Writer::new(&mut general);
                encode_reply_header(&mut w, &ReplyHeader::success(xid, OpaqueAuth::NONE)).unwrap();
                let n = w.len();
                prop_assert_eq!(n, SUCCESS_REPLY_NONE_BYTES);
                let mut out = vec![0xa5u8; len];
                match encode_success_reply_none(xid, &mut out) {
                    Some(m) => {
                        prop_assert!(len >= n);
                        prop_assert_eq!(m, n);
                        prop_assert_eq!(&out[..n], &general[..n]);
                        prop_assert!(out[n..].iter().all(|&b| b == 0xa5));
                    }
                    None => {
                        prop_assert!(len < n);
                        prop_assert!(out.iter().all(|&b| b == 0xa5));
                    }
                }
            }

            #[test]
            fn reply_header_roundtrip(xid in any::<u32>(), s in shape(), tail in 0usize..8) {
                let hdr = match &s {
                    Shape::Accepted(f, b, a) => ReplyHeader::accepted(
                        xid, OpaqueAuth { flavor: *f, body: b }, *a),
                    Shape::Mismatch(l, h) => ReplyHeader::denied(
                        xid, RejectedReply::RpcMismatch { low: *l, high: *h }),
                    Shape::Auth(a) => ReplyHeader::denied(
                        xid, RejectedReply::AuthError(AuthStat::from_u32(*a).unwrap())),
                };
                let mut buf = vec![0u8; REPLY_HEADER_MAX_BYTES + tail];
                let mut w = Writer::new(&mut buf);
                encode_reply_header(&mut w, &hdr).unwrap();
                let n = w.len();
                prop_assert_eq!(n, hdr.encoded_len());
                prop_assert!(n <= REPLY_HEADER_MAX_BYTES);
                let (d, off) = decode_reply(&buf[..n + tail]).unwrap();
                prop_assert_eq!(d, hdr);
                prop_assert_eq!(off, n);
                for cut in [0, n / 2, n - 1] {
                    prop_assert!(decode_reply(&buf[..cut]).is_err());
                }
            }

            #[test]
            fn auth_sys_roundtrip(
                stamp in any::<u32>(),
                name in prop::collection::vec(any::<u8>(), 0..=255),
                uid in any::<u32>(),
                gid in any::<u32>(),
                gids in prop::collection::vec(any::<u32>(), 0..=16),
            ) {
                let p = AuthSysParms::new(stamp, &name, uid, gid, &gids).unwrap();
                let mut body = [0u8; MAX_AUTH_BYTES as usize];
                let mut w = Writer::new(&mut body);
                p.encode(&mut w).unwrap();
                let n = w.len();
                prop_assert_eq!(n, p.encoded_len());
                let d = AuthSysParms::decode(&body[..n]).unwrap();
                prop_assert_eq!(d, p);
                prop_assert_eq!(d.gids(), &gids[..]);
                // and inside a call header
                let hdr = CallHeader::new(1, 2, 3, 4,
                    OpaqueAuth { flavor: AUTH_SYS, body: &body[..n] }, OpaqueAuth::NONE);
                let mut msg = vec![0u8; CALL_HEADER_MAX_BYTES];
                let mut w = Writer::new(&mut msg);
                encode_call_header(&mut w, &hdr).unwrap();
                let m = w.len();
                let (h, off) = decode_call(&msg[..m]).unwrap();
                prop_assert_eq!(off, m);
                prop_assert_eq!(h, hdr);
                prop_assert_eq!(h.auth_sys().unwrap().unwrap(), p);
            }

            #[test]
            fn reassembler_any_chunking(
                records in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..40), 1..5),
                frag in 1usize..16,
                cuts in prop::collection::vec(1usize..32, 1..20),
            ) {
                // Encode each record in fragments of at most `frag` bytes.
                let mut stream = Vec::new();
                for r in &records {
                    let chunks: Vec<&[u8]> = if r.is_empty() { vec![&[][..]] } else { r.chunks(frag).collect() };
                    for (i, c) in chunks.iter().enumerate() {
                        let m = RecordMark::new(i + 1 == chunks.len(), c.len() as u32).unwrap();
                        stream.extend_from_slice(&m.to_bytes());
                        stream.extend_from_slice(c);
                    }
                }
                let mut ra = RecordReassembler::new(64);
                let mut buf = [0u8; 64];
                let mut got = Vec::new();
                let mut input = &stream[..];
                let mut ci = 0;
                while !input.is_empty() {
                    let take = cuts[ci % cuts.len()].min(input.len());
                    ci += 1;
                    let mut piece = &input[..take];
                    input = &input[take..];
                    loop {
                        let p = ra.feed(piece, &mut buf).unwrap();
                        piece = &piece[p.consumed..];
                        match p.record_len {
                            Some(n) => got.push(buf[..n].to_vec()),
                            None => break,
                        }
                    }
                    prop_assert!(piece.is_empty());
                }
                prop_assert_eq!(got, records);
                prop_assert!(!ra.mid_record());
            }
        }
    }
}
