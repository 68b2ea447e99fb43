//! NFSv4.1 COMPOUNDs, requester side (RFC 8881): the session set-up perf
//! needs (EXCHANGE_ID, CREATE_SESSION, RECLAIM_COMPLETE), getting a file
//! (PUTROOTFH, LOOKUP per component, OPEN, GETFH), and the per-Call
//! COMPOUNDs of the load: SEQUENCE + PUTFH + READ or WRITE, and the NULL
//! COMPOUND (SEQUENCE only). Encoders write a whole RPC Call into a caller
//! buffer and return its length; decoders walk a reply's results and never
//! panic on malformed input. Pure; any thread.

use proto::nfs3::NFS_PROGRAM;
use proto::nfs4::*;
use proto::rpc::{self, CallHeader, OpaqueAuth};
use proto::xdr::{Reader, Writer};
use proto::EncodeError;

use crate::nfs::{rpc_results, Cred, ReplyError};

/// Bytes of a SEQUENCE4resok: session id, sequence id, slot id, highest
/// and target highest slot ids, status flags.
const SEQUENCE_RES_BYTES: usize = NFS4_SESSIONID_SIZE + 5 * 4;

/// The COMPOUND Call header: RPC header, empty tag, minor version 1, the
/// operation count.
fn compound(w: &mut Writer<'_>, xid: u32, cred: &Cred, numops: u32) -> Result<(), EncodeError> {
    let auth = OpaqueAuth {
        flavor: cred.flavor,
        body: &cred.body,
    };
    rpc::encode_call_header(
        w,
        &CallHeader::new(xid, NFS_PROGRAM, NFS_V4, NFSPROC4_COMPOUND, auth, OpaqueAuth::NONE),
    )?;
    w.put_opaque_var(b"")?;
    w.put_u32(1)?;
    w.put_u32(numops)
}

/// A session slot to send on: the session, the slot and its sequence id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slot {
    pub session: [u8; NFS4_SESSIONID_SIZE],
    pub slot: u32,
    pub seq: u32,
    /// The highest slot the requester uses.
    pub highest: u32,
}

fn sequence(w: &mut Writer<'_>, s: &Slot) -> Result<(), EncodeError> {
    w.put_u32(OP_SEQUENCE)?;
    w.put_bytes(&s.session)?;
    w.put_u32(s.seq)?;
    w.put_u32(s.slot)?;
    w.put_u32(s.highest)?;
    w.put_bool(false)
}

fn put_stateid(w: &mut Writer<'_>, s: &Stateid) -> Result<(), EncodeError> {
    w.put_u32(s.seqid)?;
    w.put_bytes(&s.other)
}

/// SEQUENCE, PUTFH and the start of READ or WRITE (`op`): its stateid and
/// offset, where both operations' arguments begin (RFC 8881 s18.22.1,
/// s18.32.1).
#[allow(clippy::too_many_arguments)]
fn io_compound(
    w: &mut Writer<'_>,
    xid: u32,
    cred: &Cred,
    s: &Slot,
    fh: &[u8],
    op: u32,
    sid: &Stateid,
    offset: u64,
) -> Result<(), EncodeError> {
    compound(w, xid, cred, 3)?;
    sequence(w, s)?;
    w.put_u32(OP_PUTFH)?;
    w.put_opaque_var(fh)?;
    w.put_u32(op)?;
    put_stateid(w, sid)?;
    w.put_u64(offset)
}

/// The NULL COMPOUND: SEQUENCE only.
pub fn encode_null(out: &mut [u8], xid: u32, cred: &Cred, s: &Slot) -> Result<usize, EncodeError> {
    let mut w = Writer::new(out);
    compound(&mut w, xid, cred, 1)?;
    sequence(&mut w, s)?;
    Ok(w.len())
}

/// SEQUENCE, PUTFH, READ.
#[allow(clippy::too_many_arguments)]
pub fn encode_read(
    out: &mut [u8],
    xid: u32,
    cred: &Cred,
    s: &Slot,
    fh: &[u8],
    sid: &Stateid,
    offset: u64,
    count: u32,
) -> Result<usize, EncodeError> {
    let mut w = Writer::new(out);
    io_compound(&mut w, xid, cred, s, fh, OP_READ, sid, offset)?;
    w.put_u32(count)?;
    Ok(w.len())
}

/// SEQUENCE, PUTFH, WRITE up to the data's length word: the data (`len`
/// bytes) goes at the returned offset, and the Call is
/// [`write_call_len`] long.
#[allow(clippy::too_many_arguments)]
pub fn encode_write_head(
    out: &mut [u8],
    xid: u32,
    cred: &Cred,
    s: &Slot,
    fh: &[u8],
    sid: &Stateid,
    offset: u64,
    len: u32,
    stable: u32,
) -> Result<usize, EncodeError> {
    let mut w = Writer::new(out);
    io_compound(&mut w, xid, cred, s, fh, OP_WRITE, sid, offset)?;
    w.put_u32(stable)?;
    w.put_u32(len)?;
    let at = w.len();
    if out.len() < crate::nfs::write_call_len(at, len) {
        return Err(EncodeError::BufferTooSmall {
            needed: crate::nfs::write_call_len(at, len),
        });
    }
    // The padding after the data.
    let pad = crate::nfs::write_call_len(at, len);
    out[at + len as usize..pad].fill(0);
    Ok(at)
}

/// EXCHANGE_ID (SP4_NONE) of `owner`.
pub fn encode_exchange_id(out: &mut [u8], xid: u32, cred: &Cred, owner: &[u8]) -> Result<usize, EncodeError> {
    let mut w = Writer::new(out);
    compound(&mut w, xid, cred, 1)?;
    w.put_u32(OP_EXCHANGE_ID)?;
    w.put_bytes(b"perf-v41")?;
    w.put_opaque_var(owner)?;
    w.put_u32(0)?;
    w.put_u32(SP4_NONE)?;
    w.put_u32(0)?;
    Ok(w.len())
}

/// The callback program perf names in CREATE_SESSION.
pub const CB_PROGRAM: u32 = 0x4000_0000;

/// CREATE_SESSION asking for `slots` fore-channel slots of `max_bytes`
/// requests and replies; with `flags` CREATE_SESSION4_FLAG_CONN_BACK_CHAN
/// the connection carries the session's callbacks too (RFC 8881
/// s18.36.3; one back-channel slot, AUTH_NONE).
#[allow(clippy::too_many_arguments)]
pub fn encode_create_session(
    out: &mut [u8],
    xid: u32,
    cred: &Cred,
    clientid: u64,
    seq: u32,
    slots: u32,
    max_bytes: u32,
    flags: u32,
) -> Result<usize, EncodeError> {
    let mut w = Writer::new(out);
    compound(&mut w, xid, cred, 1)?;
    w.put_u32(OP_CREATE_SESSION)?;
    w.put_u64(clientid)?;
    w.put_u32(seq)?;
    w.put_u32(flags)?;
    // Fore channel: headerpad, request, response, cached response, ops,
    // requests, no RDMA IRD.
    for v in [0, max_bytes, max_bytes, 4096, 8, slots, 0] {
        w.put_u32(v)?;
    }
    // Back channel.
    for v in [0, 4096, 4096, 0, 2, 1, 0] {
        w.put_u32(v)?;
    }
    // cb_program, one AUTH_NONE callback security parameter.
    w.put_u32(CB_PROGRAM)?;
    w.put_u32(1)?;
    w.put_u32(rpc::AUTH_NONE)?;
    Ok(w.len())
}

/// SEQUENCE, RECLAIM_COMPLETE (all file systems).
pub fn encode_reclaim_complete(out: &mut [u8], xid: u32, cred: &Cred, s: &Slot) -> Result<usize, EncodeError> {
    let mut w = Writer::new(out);
    compound(&mut w, xid, cred, 2)?;
    sequence(&mut w, s)?;
    w.put_u32(OP_RECLAIM_COMPLETE)?;
    w.put_bool(false)?;
    Ok(w.len())
}

/// SEQUENCE, PUTROOTFH, LOOKUP of each component of `dir`, OPEN of `name`
/// (`access`, an OPEN4_SHARE_ACCESS_* value, deny none; created UNCHECKED
/// with mode 0644 when `create`), GETFH, GETATTR of type and size.
#[allow(clippy::too_many_arguments)]
pub fn encode_open(
    out: &mut [u8],
    xid: u32,
    cred: &Cred,
    s: &Slot,
    clientid: u64,
    dir: &str,
    name: &str,
    create: bool,
    access: u32,
) -> Result<usize, EncodeError> {
    let parts: Vec<&str> = dir.split('/').filter(|c| !c.is_empty()).collect();
    let mut w = Writer::new(out);
    compound(&mut w, xid, cred, 5 + parts.len() as u32)?;
    sequence(&mut w, s)?;
    w.put_u32(OP_PUTROOTFH)?;
    for p in &parts {
        w.put_u32(OP_LOOKUP)?;
        w.put_opaque_var(p.as_bytes())?;
    }
    w.put_u32(OP_OPEN)?;
    w.put_u32(0)?;
    w.put_u32(access)?;
    w.put_u32(OPEN4_SHARE_DENY_NONE)?;
    w.put_u64(clientid)?;
    w.put_opaque_var(b"perf-open-owner")?;
    if create {
        w.put_u32(OPEN4_CREATE)?;
        w.put_u32(UNCHECKED4)?;
        // fattr4: mode.
        w.put_u32(2)?;
        w.put_u32(0)?;
        w.put_u32(1 << (FATTR4_MODE - 32))?;
        w.put_u32(4)?;
        w.put_u32(0o644)?;
    } else {
        w.put_u32(OPEN4_NOCREATE)?;
    }
    w.put_u32(CLAIM_NULL)?;
    w.put_opaque_var(name.as_bytes())?;
    w.put_u32(OP_GETFH)?;
    w.put_u32(OP_GETATTR)?;
    w.put_u32(1)?;
    w.put_u32((1 << FATTR4_TYPE) | (1 << FATTR4_SIZE))?;
    Ok(w.len())
}

/// SEQUENCE, PUTFH, then DELEGRETURN (RFC 8881 s18.6) or CLOSE (s18.2,
/// `op`) of stateid `sid`.
pub fn encode_fh_stateid_op(
    out: &mut [u8],
    xid: u32,
    cred: &Cred,
    s: &Slot,
    fh: &[u8],
    op: u32,
    sid: &Stateid,
) -> Result<usize, EncodeError> {
    let mut w = Writer::new(out);
    compound(&mut w, xid, cred, 3)?;
    sequence(&mut w, s)?;
    w.put_u32(OP_PUTFH)?;
    w.put_opaque_var(fh)?;
    w.put_u32(op)?;
    if op == OP_CLOSE {
        w.put_u32(0)?;
    }
    put_stateid(&mut w, sid)?;
    Ok(w.len())
}

/// The COMPOUND's results after the RPC header: its status and a reader at
/// the first result.
fn results(reply: &[u8], xid: Option<u32>) -> Result<(u32, Reader<'_>), ReplyError> {
    let at = rpc_results(reply, xid)?;
    let mut r = Reader::with_base(&reply[at..], at);
    let status = r.u32("status")?;
    let _tag = r.opaque_var(NFS4_OPAQUE_LIMIT, "tag")?;
    let _n = r.u32("resarray")?;
    Ok((status, r))
}

/// One result's header: its operation must be `op`; a failed one is the
/// error.
fn op_res(r: &mut Reader<'_>, op: u32) -> Result<(), ReplyError> {
    if r.u32("resop")? != op {
        return Err(ReplyError::Bad("results out of order"));
    }
    match r.u32("status")? {
        NFS4_OK => Ok(()),
        s => Err(ReplyError::Nfs(s)),
    }
}

fn seq_res(r: &mut Reader<'_>) -> Result<(), ReplyError> {
    op_res(r, OP_SEQUENCE)?;
    r.skip(SEQUENCE_RES_BYTES, "sequence")?;
    Ok(())
}

/// The NULL COMPOUND's reply.
pub fn parse_null(reply: &[u8], xid: Option<u32>) -> Result<(), ReplyError> {
    let (status, mut r) = results(reply, xid)?;
    seq_res(&mut r)?;
    match status {
        NFS4_OK => Ok(()),
        s => Err(ReplyError::Nfs(s)),
    }
}

/// READ's results: the count, after SEQUENCE and PUTFH; the data is Write
/// chunk 0 when the responder put it there, else inline.
pub fn parse_read<'a>(
    reduced: &'a [u8],
    chunk: Option<&'a [u8]>,
    xid: Option<u32>,
    max: u32,
) -> Result<&'a [u8], ReplyError> {
    let (_, mut r) = results(reduced, xid)?;
    seq_res(&mut r)?;
    op_res(&mut r, OP_PUTFH)?;
    op_res(&mut r, OP_READ)?;
    let _eof = r.bool("eof")?;
    match chunk.filter(|c| !c.is_empty()) {
        Some(c) => {
            let len = r.u32("data")?;
            if len as usize != c.len() || len > max {
                return Err(ReplyError::Bad("READ data length differs from the Write chunk's"));
            }
            Ok(c)
        }
        None => Ok(r.opaque_var(max, "data")?),
    }
}

/// WRITE's count, after SEQUENCE and PUTFH.
pub fn parse_write(reply: &[u8], xid: Option<u32>) -> Result<u32, ReplyError> {
    let (_, mut r) = results(reply, xid)?;
    seq_res(&mut r)?;
    op_res(&mut r, OP_PUTFH)?;
    op_res(&mut r, OP_WRITE)?;
    Ok(r.u32("count")?)
}

/// EXCHANGE_ID's client id and sequence id.
pub fn parse_exchange_id(reply: &[u8], xid: Option<u32>) -> Result<(u64, u32), ReplyError> {
    let (_, mut r) = results(reply, xid)?;
    op_res(&mut r, OP_EXCHANGE_ID)?;
    Ok((r.u64("clientid")?, r.u32("sequenceid")?))
}

/// CREATE_SESSION's session id and the fore-channel slots granted.
pub fn parse_create_session(reply: &[u8], xid: Option<u32>) -> Result<([u8; NFS4_SESSIONID_SIZE], u32), ReplyError> {
    let (_, mut r) = results(reply, xid)?;
    op_res(&mut r, OP_CREATE_SESSION)?;
    let mut sid = [0u8; NFS4_SESSIONID_SIZE];
    sid.copy_from_slice(r.bytes(NFS4_SESSIONID_SIZE, "sessionid")?);
    let _seq = r.u32("sequence")?;
    let _flags = r.u32("flags")?;
    // headerpad, request, response, cached, ops, then maxrequests.
    r.skip(5 * 4, "fore_chan_attrs")?;
    let slots = r.u32("maxrequests")?;
    Ok((sid, slots))
}

/// The NULL COMPOUND's `sr_status_flags` (SEQ4_STATUS_*, RFC 8881
/// s18.46.3).
pub fn parse_sequence_flags(reply: &[u8], xid: Option<u32>) -> Result<u32, ReplyError> {
    let (_, mut r) = results(reply, xid)?;
    op_res(&mut r, OP_SEQUENCE)?;
    r.skip(SEQUENCE_RES_BYTES - 4, "sequence")?;
    Ok(r.u32("sr_status_flags")?)
}

/// SEQUENCE's status alone (RECLAIM_COMPLETE and such).
pub fn parse_status(reply: &[u8], xid: Option<u32>) -> Result<(), ReplyError> {
    let (status, mut r) = results(reply, xid)?;
    seq_res(&mut r)?;
    match status {
        NFS4_OK => Ok(()),
        s => Err(ReplyError::Nfs(s)),
    }
}

/// The opened file: handle, open stateid, type and size.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Opened {
    pub fh: Vec<u8>,
    pub stateid: Stateid,
    pub ftype: u32,
    pub size: u64,
    /// The delegation granted with it (OPEN_DELEGATE_READ or _WRITE) and
    /// its type.
    pub deleg: Option<(u32, Stateid)>,
}

/// Skip an `nfsace4` (type, flag, mask, who).
fn skip_ace(r: &mut Reader<'_>) -> Result<(), ReplyError> {
    r.skip(12, "nfsace4")?;
    r.opaque_var(NFS4_OPAQUE_LIMIT, "who")?;
    Ok(())
}

/// `open_delegation4` (RFC 8881 s18.16.2): the delegation's type and
/// stateid when one was granted.
fn open_delegation(r: &mut Reader<'_>) -> Result<Option<(u32, Stateid)>, ReplyError> {
    let t = r.u32("delegation")?;
    let stateid = |r: &mut Reader<'_>| -> Result<Stateid, ReplyError> {
        let seqid = r.u32("stateid")?;
        let mut other = [0u8; NFS4_OTHER_SIZE];
        other.copy_from_slice(r.bytes(NFS4_OTHER_SIZE, "stateid")?);
        Ok(Stateid { seqid, other })
    };
    match t {
        OPEN_DELEGATE_NONE => Ok(None),
        OPEN_DELEGATE_NONE_EXT => {
            let why = r.u32("ond_why")?;
            if why == WND4_CONTENTION || why == WND4_RESOURCE {
                r.bool("ond_server_will_push_deleg")?;
            }
            Ok(None)
        }
        OPEN_DELEGATE_READ => {
            let s = stateid(r)?;
            r.bool("recall")?;
            skip_ace(r)?;
            Ok(Some((t, s)))
        }
        OPEN_DELEGATE_WRITE => {
            let s = stateid(r)?;
            r.bool("recall")?;
            // nfs_space_limit4: NFS_LIMIT_SIZE (a size) or NFS_LIMIT_BLOCKS
            // (blocks and block size): 12 bytes with the discriminant.
            r.skip(12, "space_limit")?;
            skip_ace(r)?;
            Ok(Some((t, s)))
        }
        _ => Err(ReplyError::Bad("unknown delegation type")),
    }
}

/// The results of [`encode_open`] for a `dir` of `components` components.
pub fn parse_open(reply: &[u8], xid: Option<u32>, components: usize) -> Result<Opened, ReplyError> {
    let (_, mut r) = results(reply, xid)?;
    seq_res(&mut r)?;
    op_res(&mut r, OP_PUTROOTFH)?;
    for _ in 0..components {
        op_res(&mut r, OP_LOOKUP)?;
    }
    op_res(&mut r, OP_OPEN)?;
    let seqid = r.u32("stateid")?;
    let mut other = [0u8; NFS4_OTHER_SIZE];
    other.copy_from_slice(r.bytes(NFS4_OTHER_SIZE, "stateid")?);
    // change_info4, rflags, attrset bitmap, delegation type (none).
    r.skip(4 + 16 + 4, "cinfo")?;
    let n = r.u32("attrset")?;
    if n > 8 {
        return Err(ReplyError::Bad("attrset too long"));
    }
    r.skip(4 * n as usize, "attrset")?;
    let deleg = open_delegation(&mut r)?;
    op_res(&mut r, OP_GETFH)?;
    let fh = r.opaque_var(NFS4_FHSIZE, "fh")?.to_vec();
    op_res(&mut r, OP_GETATTR)?;
    let n = r.u32("bitmap")?;
    if n > 8 {
        return Err(ReplyError::Bad("bitmap too long"));
    }
    r.skip(4 * n as usize, "bitmap")?;
    let _len = r.u32("attr_vals")?;
    let ftype = r.u32("type")?;
    let size = r.u64("size")?;
    Ok(Opened {
        fh,
        stateid: Stateid { seqid, other },
        ftype,
        size,
        deleg,
    })
}
