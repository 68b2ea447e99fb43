//! The NFSv4.1 callback program (RFC 8881 s20, s16.2's counterpart for the
//! backchannel): a CB_NULL or CB_COMPOUND4args Call written whole, RPC
//! header included, into the caller's buffer, and a bounded zero-copy
//! decoder of CB_COMPOUND4res.
//!
//! The server is the caller here: it names the program the client gave in
//! CREATE_SESSION or BACKCHANNEL_CTL (`csa_cb_program`), version 1
//! ([`NFS4_CALLBACK_VERSION`]), and the security the client offered for
//! it (`callback_sec_parms4`: AUTH_NONE or AUTH_SYS; RPCSEC_GSS is not
//! offered by us). Every CB_COMPOUND starts with CB_SEQUENCE (s20.9) and
//! carries one more operation: CB_RECALL (s20.2) or CB_NOTIFY_LOCK
//! (s20.11).
//!
//! The client's side, for perf and tests: [`decode_cb_call`] reads a
//! callback Call, [`encode_cb_compound_reply`] answers it.
//!
//! The reply is peer input: the tag is bounded by [`MAX_TAG_BYTES`], the
//! result count by [`MAX_CB_RESULTS`] (we send two operations, a client
//! answers at most as many), and an operation number we did not send is
//! malformed; nothing is allocated.

use super::*;
use crate::error::{DecodeError, DecodeErrorKind, EncodeError};
use crate::rpc::{self, AuthSysParms, CallHeader, OpaqueAuth};
use crate::xdr::{Reader, Writer};

/// The callback program's version (RFC 8881 s20: `NFS_CB` version 1).
pub const NFS4_CALLBACK_VERSION: u32 = 1;
/// CB_NULL (procedure 0 of the callback program).
pub const CB_NULL: u32 = 0;
/// CB_COMPOUND (procedure 1).
pub const CB_COMPOUND: u32 = 1;

/// Callback operation numbers (RFC 8881 s20, `nfs_cb_opnum4`).
pub const OP_CB_GETATTR: u32 = 3;
pub const OP_CB_RECALL: u32 = 4;
pub const OP_CB_LAYOUTRECALL: u32 = 5;
pub const OP_CB_NOTIFY: u32 = 6;
pub const OP_CB_PUSH_DELEG: u32 = 7;
pub const OP_CB_RECALL_ANY: u32 = 8;
pub const OP_CB_RECALLABLE_OBJ_AVAIL: u32 = 9;
pub const OP_CB_RECALL_SLOT: u32 = 10;
pub const OP_CB_SEQUENCE: u32 = 11;
pub const OP_CB_WANTS_CANCELLED: u32 = 12;
pub const OP_CB_NOTIFY_LOCK: u32 = 13;
pub const OP_CB_NOTIFY_DEVICEID: u32 = 14;
/// RFC 7862 s16.1: CB_OFFLOAD.
pub const OP_CB_OFFLOAD: u32 = 15;
pub const OP_CB_ILLEGAL: u32 = 10044;

/// Results of a CB_COMPOUND4res we accept (we send two operations).
pub const MAX_CB_RESULTS: u32 = 2;

/// The security of the callback channel (`callback_sec_parms4`, RFC 8881
/// s18.36): the first entry we can use of the client's list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CbSec<'a> {
    None,
    Sys(AuthSysParms<'a>),
}

/// CB_SEQUENCE4args (RFC 8881 s20.9.1), without referring call lists.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CbSequence {
    pub sessionid: SessionId,
    pub sequenceid: u32,
    pub slotid: u32,
    pub highest_slotid: u32,
    pub cachethis: bool,
}

/// The operation after CB_SEQUENCE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CbOp<'a> {
    /// CB_RECALL4args (s20.2.1): the delegation's stateid, whether the
    /// file is being truncated, its handle.
    Recall {
        stateid: Stateid,
        truncate: bool,
        fh: &'a [u8],
    },
    /// CB_NOTIFY_LOCK4args (s20.11.1): the file and the lock owner that
    /// waited.
    NotifyLock {
        fh: &'a [u8],
        clientid: u64,
        owner: &'a [u8],
    },
}

fn header(w: &mut Writer<'_>, xid: u32, prog: u32, proc_: u32, sec: &CbSec<'_>) -> Result<(), EncodeError> {
    let mut body = [0u8; AuthSysParms::MAX_ENCODED_BYTES];
    let cred = match sec {
        CbSec::None => OpaqueAuth::NONE,
        CbSec::Sys(p) => {
            let mut bw = Writer::new(&mut body);
            p.encode(&mut bw)?;
            let n = bw.len();
            OpaqueAuth {
                flavor: rpc::AUTH_SYS,
                body: &body[..n],
            }
        }
    };
    let h = CallHeader::new(xid, prog, NFS4_CALLBACK_VERSION, proc_, cred, OpaqueAuth::NONE);
    rpc::encode_call_header(w, &h)
}

/// CB_NULL: the RPC Call alone (the probe of a new backchannel). Returns
/// its length in `out`.
pub fn encode_cb_null(xid: u32, prog: u32, sec: &CbSec<'_>, out: &mut [u8]) -> Result<usize, EncodeError> {
    let mut w = Writer::new(out);
    header(&mut w, xid, prog, CB_NULL, sec)?;
    Ok(w.len())
}

/// CB_COMPOUND with CB_SEQUENCE and `op` (empty tag, `callback_ident` 0
/// as RFC 8881 s20.1 has it for 4.1). `minorversion` is the minor version
/// of the client's session (1 or 2): a client may refuse a callback of
/// another (the Linux client looks the session up by it and answers
/// CB_SEQUENCE of a 4.2 mount NFS4ERR_BADSESSION when it says 1). Returns
/// its length in `out`.
pub fn encode_cb_compound(
    xid: u32,
    prog: u32,
    minorversion: u32,
    sec: &CbSec<'_>,
    seq: &CbSequence,
    op: &CbOp<'_>,
    out: &mut [u8],
) -> Result<usize, EncodeError> {
    let mut w = Writer::new(out);
    header(&mut w, xid, prog, CB_COMPOUND, sec)?;
    w.put_opaque_var(b"")?;
    w.put_u32(minorversion)?;
    w.put_u32(0)?;
    w.put_u32(2)?;
    w.put_u32(OP_CB_SEQUENCE)?;
    w.put_bytes(&seq.sessionid)?;
    w.put_u32(seq.sequenceid)?;
    w.put_u32(seq.slotid)?;
    w.put_u32(seq.highest_slotid)?;
    w.put_bool(seq.cachethis)?;
    w.put_u32(0)?;
    match *op {
        CbOp::Recall { stateid, truncate, fh } => {
            w.put_u32(OP_CB_RECALL)?;
            w.put_u32(stateid.seqid)?;
            w.put_bytes(&stateid.other)?;
            w.put_bool(truncate)?;
            w.put_opaque_var(fh)?;
        }
        CbOp::NotifyLock { fh, clientid, owner } => {
            w.put_u32(OP_CB_NOTIFY_LOCK)?;
            w.put_opaque_var(fh)?;
            w.put_u64(clientid)?;
            w.put_opaque_var(owner)?;
        }
    }
    Ok(w.len())
}

/// CB_SEQUENCE4resok (s20.9.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CbSequenceRes {
    pub sessionid: SessionId,
    pub sequenceid: u32,
    pub slotid: u32,
    pub highest_slotid: u32,
    pub target_highest_slotid: u32,
}

/// A decoded CB_COMPOUND4res: the overall status, the tag, CB_SEQUENCE's
/// result (its status, and its body when that is NFS4_OK) and the second
/// operation's number and status, where the reply has them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CbCompoundRes<'a> {
    pub status: u32,
    pub tag: &'a [u8],
    pub sequence: Option<Result<CbSequenceRes, u32>>,
    pub op: Option<(u32, u32)>,
}

/// Why a CB_COMPOUND4res did not decode: where and what.
pub type CbResError = DecodeError;

impl<'a> CbCompoundRes<'a> {
    /// Decode CB_COMPOUND4res from `body` (after the RPC reply header).
    /// Bytes after the results are refused, as are more than
    /// [`MAX_CB_RESULTS`] results, a first result that is not CB_SEQUENCE
    /// (or CB_ILLEGAL), and operation numbers other than ours.
    pub fn decode(body: &'a [u8]) -> Result<Self, CbResError> {
        let mut r = Reader::new(body);
        let status = r.u32("status")?;
        let tag = r.string(MAX_TAG_BYTES, "tag")?;
        let n = r.count(MAX_CB_RESULTS, 8, "resarray")?;
        let mut out = CbCompoundRes {
            status,
            tag,
            sequence: None,
            op: None,
        };
        for i in 0..n {
            let opnum = r.u32("resop")?;
            let st = r.u32("status")?;
            match (i, opnum) {
                (0, OP_CB_SEQUENCE) => {
                    out.sequence = Some(if st == NFS4_OK {
                        let mut sid = [0u8; NFS4_SESSIONID_SIZE];
                        sid.copy_from_slice(r.bytes(NFS4_SESSIONID_SIZE, "csr_sessionid")?);
                        Ok(CbSequenceRes {
                            sessionid: sid,
                            sequenceid: r.u32("csr_sequenceid")?,
                            slotid: r.u32("csr_slotid")?,
                            highest_slotid: r.u32("csr_highest_slotid")?,
                            target_highest_slotid: r.u32("csr_target_highest_slotid")?,
                        })
                    } else {
                        Err(st)
                    });
                }
                (_, OP_CB_ILLEGAL) | (1, OP_CB_RECALL | OP_CB_NOTIFY_LOCK) => out.op = Some((opnum, st)),
                (_, v) => return Err(r.error(DecodeErrorKind::BadDiscriminant { value: v }, "resop")),
            }
            if st != NFS4_OK {
                // Processing stops at the first failure (s15.2): no more.
                break;
            }
        }
        if r.remaining() != 0 {
            return Err(r.error(
                DecodeErrorKind::Invalid {
                    value: r.remaining() as u32,
                },
                "CB_COMPOUND4res",
            ));
        }
        Ok(out)
    }
}

/// Referring call lists in a CB_SEQUENCE we read (RFC 8881 s20.9.1), and
/// calls per list: a client bound, the server sends none.
pub const MAX_REFERRING_LISTS: u32 = 16;
pub const MAX_REFERRING_CALLS: u32 = 64;

/// A callback Call as the client reads it: CB_NULL, or a CB_COMPOUND whose
/// first operation is CB_SEQUENCE and whose second, when there is one, is
/// CB_RECALL or CB_NOTIFY_LOCK (`Err(opnum)` for any other: the client
/// answers it NFS4ERR_NOTSUPP or NFS4ERR_OP_ILLEGAL).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CbCall<'a> {
    Null,
    Compound {
        /// `minorversion` of CB_COMPOUND4args.
        minorversion: u32,
        /// CB_SEQUENCE4args (its referring call lists skipped).
        seq: CbSequence,
        op: Option<Result<CbOp<'a>, u32>>,
    },
}

/// Decode a callback Call (the whole RPC message, peer input) the way a
/// client does: its XID and what it asks. Only the callback program's
/// version 1 ([`NFS4_CALLBACK_VERSION`]); the program number is the
/// client's own choice and is not checked here. At most [`MAX_CB_RESULTS`]
/// operations, lists and tags bounded, nothing allocated, trailing bytes
/// refused.
pub fn decode_cb_call(msg: &[u8]) -> Result<(u32, CbCall<'_>), DecodeError> {
    let (h, at) = CallHeader::decode(msg)?;
    let mut r = Reader::new(msg);
    r.skip(at, "call header")?;
    if h.vers != NFS4_CALLBACK_VERSION {
        return Err(r.error(DecodeErrorKind::BadDiscriminant { value: h.vers }, "vers"));
    }
    let call = match h.proc_ {
        CB_NULL => CbCall::Null,
        CB_COMPOUND => {
            r.string(MAX_TAG_BYTES, "tag")?;
            let minorversion = r.u32("minorversion")?;
            r.u32("callback_ident")?;
            let n = r.count(MAX_CB_RESULTS, 8, "argarray")?;
            if n == 0 || r.u32("argop")? != OP_CB_SEQUENCE {
                return Err(r.error(DecodeErrorKind::Invalid { value: n }, "CB_SEQUENCE first"));
            }
            let mut sessionid = [0u8; NFS4_SESSIONID_SIZE];
            sessionid.copy_from_slice(r.bytes(NFS4_SESSIONID_SIZE, "csa_sessionid")?);
            let seq = CbSequence {
                sessionid,
                sequenceid: r.u32("csa_sequenceid")?,
                slotid: r.u32("csa_slotid")?,
                highest_slotid: r.u32("csa_highest_slotid")?,
                cachethis: r.bool("csa_cachethis")?,
            };
            // referring_call_list4: a session id, then (sequence id, slot id)s.
            let lists = r.count(MAX_REFERRING_LISTS, NFS4_SESSIONID_SIZE + 4, "csa_referring_call_lists")?;
            for _ in 0..lists {
                r.skip(NFS4_SESSIONID_SIZE, "rcl_sessionid")?;
                let calls = r.count(MAX_REFERRING_CALLS, 8, "rcl_referring_calls")?;
                r.skip(8 * calls as usize, "rcl_referring_calls")?;
            }
            let op = if n > 1 {
                Some(match r.u32("argop")? {
                    OP_CB_RECALL => {
                        let seqid = r.u32("stateid")?;
                        let mut other = [0u8; NFS4_OTHER_SIZE];
                        other.copy_from_slice(r.bytes(NFS4_OTHER_SIZE, "stateid")?);
                        Ok(CbOp::Recall {
                            stateid: Stateid { seqid, other },
                            truncate: r.bool("truncate")?,
                            fh: r.opaque_var(NFS4_FHSIZE, "fh")?,
                        })
                    }
                    OP_CB_NOTIFY_LOCK => Ok(CbOp::NotifyLock {
                        fh: r.opaque_var(NFS4_FHSIZE, "cnla_fh")?,
                        clientid: r.u64("clientid")?,
                        owner: r.opaque_var(NFS4_OPAQUE_LIMIT, "owner")?,
                    }),
                    // Not ours to parse: the rest is left unread.
                    other => {
                        return Ok((
                            h.xid,
                            CbCall::Compound {
                                minorversion,
                                seq,
                                op: Some(Err(other)),
                            },
                        ))
                    }
                })
            } else {
                None
            };
            CbCall::Compound { minorversion, seq, op }
        }
        p => return Err(r.error(DecodeErrorKind::BadDiscriminant { value: p }, "proc")),
    };
    if r.remaining() != 0 {
        return Err(r.error(
            DecodeErrorKind::Invalid {
                value: r.remaining() as u32,
            },
            "CB_COMPOUND4args",
        ));
    }
    Ok((h.xid, call))
}

/// The client's Reply to CB_COMPOUND (RFC 8881 s20.9.2): CB_SEQUENCE's
/// result for `seq` (one slot, the one asked), then `op`'s number and
/// `status` when there is a second operation. The overall status is
/// `status`. Returns its length in `out`.
pub fn encode_cb_compound_reply(
    xid: u32,
    seq: &CbSequence,
    op: Option<u32>,
    status: u32,
    out: &mut [u8],
) -> Result<usize, EncodeError> {
    let n = rpc::encode_success_reply_none(xid, out).ok_or(EncodeError::BufferTooSmall { needed: 24 })?;
    let mut w = Writer::new(&mut out[n..]);
    w.put_u32(status)?;
    w.put_opaque_var(b"")?;
    w.put_u32(1 + u32::from(op.is_some()))?;
    w.put_u32(OP_CB_SEQUENCE)?;
    w.put_u32(NFS4_OK)?;
    w.put_bytes(&seq.sessionid)?;
    w.put_u32(seq.sequenceid)?;
    w.put_u32(seq.slotid)?;
    w.put_u32(seq.slotid)?;
    w.put_u32(seq.slotid)?;
    if let Some(opnum) = op {
        w.put_u32(opnum)?;
        w.put_u32(status)?;
    }
    Ok(n + w.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the server encodes, the client decodes, and its Reply decodes
    /// back on the server; every cut of the Call is refused.
    #[test]
    fn cb_call_round_trip() {
        let seq = CbSequence {
            sessionid: SID,
            sequenceid: 3,
            slotid: 0,
            highest_slotid: 0,
            cachethis: false,
        };
        let sid = Stateid {
            seqid: 1,
            other: [7; NFS4_OTHER_SIZE],
        };
        let op = CbOp::Recall {
            stateid: sid,
            truncate: false,
            fh: b"fh-bytes",
        };
        let mut b = [0u8; 512];
        let n = encode_cb_compound(9, 0x4000_0000, 2, &CbSec::None, &seq, &op, &mut b).unwrap();
        let (xid, c) = decode_cb_call(&b[..n]).unwrap();
        assert_eq!(xid, 9);
        assert_eq!(
            c,
            CbCall::Compound {
                minorversion: 2,
                seq,
                op: Some(Ok(op))
            }
        );
        for cut in 0..n {
            assert!(decode_cb_call(&b[..cut]).is_err(), "cut {cut}");
        }
        let k = encode_cb_null(10, 1, &CbSec::None, &mut b).unwrap();
        assert_eq!(decode_cb_call(&b[..k]).unwrap(), (10, CbCall::Null));
        let mut out = [0u8; 256];
        let m = encode_cb_compound_reply(9, &seq, Some(OP_CB_RECALL), NFS4_OK, &mut out).unwrap();
        let (h, at) = rpc::decode_reply(&out[..m]).unwrap();
        assert!(h.is_success());
        let r = CbCompoundRes::decode(&out[at..m]).unwrap();
        assert_eq!(r.op, Some((OP_CB_RECALL, NFS4_OK)));
        assert_eq!(r.sequence.unwrap().unwrap().sequenceid, 3);
    }

    fn words(w: &[u32]) -> Vec<u8> {
        w.iter().flat_map(|x| x.to_be_bytes()).collect()
    }

    const SID: SessionId = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16];

    #[test]
    fn cb_null_with_auth_none_and_auth_sys() {
        let mut b = [0u8; 512];
        let n = encode_cb_null(0x11, 0x4000_0000, &CbSec::None, &mut b).unwrap();
        // xid, CALL, rpcvers 2, prog, vers 1, proc 0, AUTH_NONE cred, verf.
        assert_eq!(&b[..n], &words(&[0x11, 0, 2, 0x4000_0000, 1, 0, 0, 0, 0, 0])[..]);
        let p = AuthSysParms::new(9, b"host", 0, 0, &[5]).unwrap();
        let n = encode_cb_null(0x12, 7, &CbSec::Sys(p), &mut b).unwrap();
        let mut want = words(&[0x12, 0, 2, 7, 1, 0, rpc::AUTH_SYS, 28, 9, 4]);
        want.extend_from_slice(b"host");
        want.extend(words(&[0, 0, 1, 5, 0, 0]));
        assert_eq!(&b[..n], &want[..]);
        // Every shorter buffer is refused.
        for cut in 0..n {
            assert!(encode_cb_null(0x12, 7, &CbSec::Sys(p), &mut b[..cut]).is_err());
        }
    }

    #[test]
    fn cb_recall_and_notify_lock_by_hand() {
        let seq = CbSequence {
            sessionid: SID,
            sequenceid: 3,
            slotid: 0,
            highest_slotid: 0,
            cachethis: false,
        };
        let sid = Stateid {
            seqid: 1,
            other: [0xaa; 12],
        };
        let mut b = [0u8; 512];
        let n = encode_cb_compound(
            5,
            0x4000_0000,
            1,
            &CbSec::None,
            &seq,
            &CbOp::Recall {
                stateid: sid,
                truncate: false,
                fh: &[1, 2, 3],
            },
            &mut b,
        )
        .unwrap();
        let mut want = words(&[5, 0, 2, 0x4000_0000, 1, 1, 0, 0, 0, 0]);
        // tag "", minorversion 1, callback_ident 0, two operations.
        want.extend(words(&[0, 1, 0, 2, OP_CB_SEQUENCE]));
        want.extend_from_slice(&SID);
        want.extend(words(&[3, 0, 0, 0, 0, OP_CB_RECALL, 1]));
        want.extend_from_slice(&[0xaa; 12]);
        want.extend(words(&[0, 3]));
        want.extend_from_slice(&[1, 2, 3, 0]);
        assert_eq!(&b[..n], &want[..]);
        for cut in 0..n {
            assert!(encode_cb_compound(
                5,
                1,
                1,
                &CbSec::None,
                &seq,
                &CbOp::Recall {
                    stateid: sid,
                    truncate: false,
                    fh: &[1, 2, 3]
                },
                &mut b[..cut]
            )
            .is_err());
        }
        let n = encode_cb_compound(
            6,
            9,
            2,
            &CbSec::None,
            &seq,
            &CbOp::NotifyLock {
                fh: &[7; 4],
                clientid: 0x0102_0304_0506_0708,
                owner: b"own",
            },
            &mut b,
        )
        .unwrap();
        // tag "", then the minor version asked for
        assert_eq!(&b[40..48], &words(&[0, 2])[..], "minor version 2");
        let tail = &b[n - 28..n];
        let mut want = words(&[OP_CB_NOTIFY_LOCK, 4]);
        want.extend_from_slice(&[7; 4]);
        want.extend(words(&[0x0102_0304, 0x0506_0708, 3]));
        want.extend_from_slice(b"own\0");
        assert_eq!(tail, &want[..]);
    }

    fn good_res() -> Vec<u8> {
        let mut v = words(&[NFS4_OK, 0, 2, OP_CB_SEQUENCE, NFS4_OK]);
        v.extend_from_slice(&SID);
        v.extend(words(&[3, 0, 0, 0, OP_CB_RECALL, NFS4_OK]));
        v
    }

    #[test]
    fn cb_compound_res_decodes() {
        let v = good_res();
        let r = CbCompoundRes::decode(&v).unwrap();
        assert_eq!(r.status, NFS4_OK);
        assert_eq!(r.op, Some((OP_CB_RECALL, NFS4_OK)));
        assert_eq!(r.sequence.unwrap().unwrap().sequenceid, 3);
        // Truncated at every offset: an error, never a panic.
        for cut in 0..v.len() {
            assert!(CbCompoundRes::decode(&v[..cut]).is_err(), "cut {cut}");
        }
        // A trailing word is refused.
        let mut long = v.clone();
        long.extend(words(&[0]));
        assert!(CbCompoundRes::decode(&long).is_err());
        // CB_SEQUENCE failed: processing stopped there.
        let v = words(&[NFS4ERR_BADSESSION, 0, 1, OP_CB_SEQUENCE, NFS4ERR_BADSESSION]);
        let r = CbCompoundRes::decode(&v).unwrap();
        assert_eq!(r.sequence, Some(Err(NFS4ERR_BADSESSION)));
        assert_eq!(r.op, None);
        // The recall failed.
        let mut v = words(&[NFS4ERR_BADHANDLE, 0, 2, OP_CB_SEQUENCE, NFS4_OK]);
        v.extend_from_slice(&SID);
        v.extend(words(&[3, 0, 0, 0, OP_CB_RECALL, NFS4ERR_BADHANDLE]));
        assert_eq!(
            CbCompoundRes::decode(&v).unwrap().op,
            Some((OP_CB_RECALL, NFS4ERR_BADHANDLE))
        );
        // CB_ILLEGAL.
        let v = words(&[NFS4ERR_OP_ILLEGAL, 0, 1, OP_CB_ILLEGAL, NFS4ERR_OP_ILLEGAL]);
        assert_eq!(
            CbCompoundRes::decode(&v).unwrap().op,
            Some((OP_CB_ILLEGAL, NFS4ERR_OP_ILLEGAL))
        );
    }

    #[test]
    fn cb_compound_res_bounds() {
        // Too many results (the count is checked before anything is walked).
        assert!(CbCompoundRes::decode(&words(&[0, 0, 3])).is_err());
        assert!(CbCompoundRes::decode(&words(&[0, 0, u32::MAX])).is_err());
        // A tag over the bound.
        let mut v = words(&[0, MAX_TAG_BYTES + 4]);
        v.resize(v.len() + MAX_TAG_BYTES as usize + 4, b'a');
        v.extend(words(&[0]));
        assert!(CbCompoundRes::decode(&v).is_err());
        // An operation we did not send, or not in its place.
        assert!(CbCompoundRes::decode(&words(&[0, 0, 1, OP_CB_GETATTR, 0])).is_err());
        assert!(CbCompoundRes::decode(&words(&[0, 0, 1, OP_CB_RECALL, 0])).is_err());
    }
}
