//! COMPOUND4args (RFC 8881 s16.2) decoded one operation at a time into
//! borrowed views.
//!
//! [`CompoundArgs::decode`] reads the tag, the minor version and the
//! operation count (bounded by [`MAX_OPS`] and by the bytes left);
//! [`OpDecoder::next_op`] then yields each operation's arguments as an
//! [`Op`] whose names, handles and data borrow the Call's buffer. A
//! malformed operation ends the walk with the status its result gets
//! ([`OpError`]): NFS4ERR_BADXDR for bytes that are not the operation's XDR,
//! NFS4ERR_NAMETOOLONG for a component over [`MAX_NAME_BYTES`],
//! NFS4ERR_RESOURCE for an opaque or array beyond our bounds,
//! NFS4ERR_OP_ILLEGAL for an operation number outside RFC 8881 / 7862, and
//! NFS4ERR_NOTSUPP for a known operation whose arguments we do not decode
//! (processing stops at the first failing operation, RFC 8881 s15.2, so the
//! rest of the Call need not be understood).
//!
//! WRITE data may be the DDP-eligible item a Read chunk carried (RFC 8267
//! s6): the decoder is built over the inline head, the chunk and the inline
//! rest, and WRITE takes its data from the chunk when the head ends at its
//! length word.

use super::cb::CbSec;
use super::*;
use crate::error::{DecodeError, DecodeErrorKind};
use crate::xdr::Reader;

/// Why an operation's arguments were refused: the operation number for the
/// result (OP_ILLEGAL for unknown numbers) and the status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpError {
    pub op: u32,
    pub status: u32,
}

/// The COMPOUND header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CompoundArgs<'a> {
    pub tag: &'a [u8],
    pub minorversion: u32,
    pub numops: u32,
}

/// Why a COMPOUND could not be started.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CompoundError<'a> {
    /// The header does not decode: no reply can echo a tag (GARBAGE_ARGS).
    Garbage,
    /// Answer with this status, this tag and no results.
    Status { status: u32, tag: &'a [u8] },
}

fn status_of(e: DecodeError) -> u32 {
    match e.kind {
        DecodeErrorKind::TooLong { .. } => NFS4ERR_RESOURCE,
        _ => NFS4ERR_BADXDR,
    }
}

impl<'a> CompoundArgs<'a> {
    /// Decode the header from `r` (positioned after the RPC header). A minor
    /// version other than 1 and 2 is NFS4ERR_MINOR_VERS_MISMATCH (RFC 8881
    /// s16.2.3); more than [`MAX_OPS`] operations is NFS4ERR_TOO_MANY_OPS
    /// (s15.1.3.?: the session's `ca_maxoperations`, which is ours); a count
    /// the bytes left cannot hold is NFS4ERR_BADXDR.
    pub fn decode(r: &mut Reader<'a>) -> Result<Self, CompoundError<'a>> {
        let tag = match r.string(MAX_TAG_BYTES, "tag") {
            Ok(t) => t,
            Err(e) if matches!(e.kind, DecodeErrorKind::TooLong { .. }) => {
                return Err(CompoundError::Status {
                    status: NFS4ERR_RESOURCE,
                    tag: &[],
                })
            }
            Err(_) => return Err(CompoundError::Garbage),
        };
        let minorversion = r.u32("minorversion").map_err(|_| CompoundError::Garbage)?;
        let numops = r.u32("argarray").map_err(|_| CompoundError::Garbage)?;
        if minorversion != 1 && minorversion != 2 {
            return Err(CompoundError::Status {
                status: NFS4ERR_MINOR_VERS_MISMATCH,
                tag,
            });
        }
        if numops > MAX_OPS {
            return Err(CompoundError::Status {
                status: NFS4ERR_TOO_MANY_OPS,
                tag,
            });
        }
        Ok(CompoundArgs {
            tag,
            minorversion,
            numops,
        })
    }
}

/// `fattr4` of a Call: the bitmap and the undecoded values.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Fattr<'a> {
    pub mask: Bitmap,
    pub vals: &'a [u8],
}

/// `open_claim4` arms we decode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Claim<'a> {
    Null(&'a [u8]),
    Previous(u32),
    Fh,
    /// CLAIM_DELEGATE_CUR (`name` in the current directory) and
    /// CLAIM_DELEG_CUR_FH (`name` none: the current filehandle): an open
    /// under the delegation `stateid` the client holds (RFC 8881 s18.16.3).
    DelegCur {
        stateid: Stateid,
        name: Option<&'a [u8]>,
    },
    /// CLAIM_DELEGATE_PREV, CLAIM_DELEG_PREV_FH: reclaims of a delegation
    /// after a client restart, which we do not keep (NFS4ERR_NOTSUPP).
    Deleg(u32),
}

/// `createhow4` (RFC 8881 s18.16).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CreateHow<'a> {
    Unchecked(Fattr<'a>),
    Guarded(Fattr<'a>),
    Exclusive(Verifier),
    Exclusive41(Verifier, Fattr<'a>),
}

/// `createtype4` of CREATE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CreateType<'a> {
    Link(&'a [u8]),
    Block(u32, u32),
    Char(u32, u32),
    Socket,
    Fifo,
    Dir,
    /// Any other type (NFS4ERR_BADTYPE).
    Other(u32),
}

/// `channel_attrs4` (RFC 8881 s18.36).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ChannelAttrs {
    pub headerpadsize: u32,
    pub maxrequestsize: u32,
    pub maxresponsesize: u32,
    pub maxresponsesize_cached: u32,
    pub maxoperations: u32,
    pub maxrequests: u32,
    pub rdma_ird: Option<u32>,
}

/// `lock_owner4` (RFC 8881 s3.3.12): the client id the owner names and the
/// owner's bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LockOwner<'a> {
    pub clientid: u64,
    pub owner: &'a [u8],
}

/// `locker4` of LOCK (RFC 8881 s18.10.1): a new lock owner, whose first
/// lock comes through an open stateid (`open_to_lock_owner4`), or a lock
/// stateid the owner holds (`exist_lock_owner4`). The seqids are those of
/// NFSv4.0; NFSv4.1 servers ignore them (RFC 8881 s8.13), and we keep
/// them only for completeness.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Locker<'a> {
    New {
        open_seqid: u32,
        open_stateid: Stateid,
        lock_seqid: u32,
        owner: LockOwner<'a>,
    },
    Exist {
        lock_stateid: Stateid,
        lock_seqid: u32,
    },
}

/// One decoded operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op<'a> {
    Access(u32),
    Close {
        seqid: u32,
        stateid: Stateid,
    },
    Commit {
        offset: u64,
        count: u32,
    },
    Create {
        ty: CreateType<'a>,
        name: &'a [u8],
        attrs: Fattr<'a>,
    },
    Getattr(Bitmap),
    Getfh,
    Link(&'a [u8]),
    Lookup(&'a [u8]),
    Lookupp,
    Nverify(Fattr<'a>),
    Open {
        seqid: u32,
        share_access: u32,
        share_deny: u32,
        clientid: u64,
        owner: &'a [u8],
        create: Option<CreateHow<'a>>,
        claim: Claim<'a>,
    },
    Openattr(bool),
    OpenDowngrade {
        stateid: Stateid,
        seqid: u32,
        share_access: u32,
        share_deny: u32,
    },
    Putfh(&'a [u8]),
    Putpubfh,
    Putrootfh,
    Read {
        stateid: Stateid,
        offset: u64,
        count: u32,
    },
    Readdir {
        cookie: u64,
        verf: Verifier,
        dircount: u32,
        maxcount: u32,
        attrs: Bitmap,
    },
    Readlink,
    Remove(&'a [u8]),
    Rename {
        old: &'a [u8],
        new: &'a [u8],
    },
    Restorefh,
    Savefh,
    Secinfo(&'a [u8]),
    Setattr {
        stateid: Stateid,
        attrs: Fattr<'a>,
    },
    Verify(Fattr<'a>),
    Write {
        stateid: Stateid,
        offset: u64,
        stable: u32,
        data: &'a [u8],
    },
    BindConnToSession {
        sessionid: SessionId,
        dir: u32,
        rdma_mode: bool,
    },
    ExchangeId {
        verifier: Verifier,
        ownerid: &'a [u8],
        flags: u32,
        state_protect: u32,
    },
    CreateSession {
        clientid: u64,
        sequence: u32,
        flags: u32,
        fore: ChannelAttrs,
        back: ChannelAttrs,
        cb_program: u32,
        /// The first callback security we can use (none: the client
        /// offered only flavors we do not speak).
        cb_sec: Option<CbSec<'a>>,
    },
    /// BACKCHANNEL_CTL (RFC 8881 s18.33).
    BackchannelCtl {
        cb_program: u32,
        cb_sec: Option<CbSec<'a>>,
    },
    /// DELEGRETURN (RFC 8881 s18.6).
    Delegreturn(Stateid),
    DestroySession(SessionId),
    FreeStateid(Stateid),
    SecinfoNoName(u32),
    Sequence {
        sessionid: SessionId,
        sequenceid: u32,
        slotid: u32,
        highest_slotid: u32,
        cachethis: bool,
    },
    /// TEST_STATEID: the count and the packed stateids (16 bytes each).
    TestStateid {
        count: u32,
        raw: &'a [u8],
    },
    DestroyClientid(u64),
    ReclaimComplete(bool),
    /// LOCK (RFC 8881 s18.10); `locktype` is 1..=4.
    Lock {
        locktype: u32,
        reclaim: bool,
        offset: u64,
        length: u64,
        locker: Locker<'a>,
    },
    /// LOCKT (RFC 8881 s18.11).
    Lockt {
        locktype: u32,
        offset: u64,
        length: u64,
        owner: LockOwner<'a>,
    },
    /// LOCKU (RFC 8881 s18.12).
    Locku {
        locktype: u32,
        seqid: u32,
        stateid: Stateid,
        offset: u64,
        length: u64,
    },
    /// RELEASE_LOCKOWNER (RFC 8881 s18.45: NFSv4.0 only, NFS4ERR_NOTSUPP).
    ReleaseLockowner(LockOwner<'a>),
    /// ALLOCATE (RFC 7862 s15.1).
    Allocate {
        stateid: Stateid,
        offset: u64,
        length: u64,
    },
    /// DEALLOCATE (RFC 7862 s15.4).
    Deallocate {
        stateid: Stateid,
        offset: u64,
        length: u64,
    },
    /// SEEK (RFC 7862 s15.11); `what` is NFS4_CONTENT_DATA or _HOLE.
    Seek {
        stateid: Stateid,
        offset: u64,
        what: u32,
    },
    /// COPY (RFC 7862 s15.2): SAVED_FH is the source, CURRENT_FH the
    /// destination; `source_servers` counts `ca_source_server` entries (an
    /// inter-server copy when non-zero).
    Copy {
        src_stateid: Stateid,
        dst_stateid: Stateid,
        src_offset: u64,
        dst_offset: u64,
        count: u64,
        consecutive: bool,
        synchronous: bool,
        source_servers: u32,
    },
}

impl Op<'_> {
    /// The operation number.
    pub fn opnum(&self) -> u32 {
        match self {
            Op::Access(_) => OP_ACCESS,
            Op::Close { .. } => OP_CLOSE,
            Op::Commit { .. } => OP_COMMIT,
            Op::Create { .. } => OP_CREATE,
            Op::Getattr(_) => OP_GETATTR,
            Op::Getfh => OP_GETFH,
            Op::Link(_) => OP_LINK,
            Op::Lookup(_) => OP_LOOKUP,
            Op::Lookupp => OP_LOOKUPP,
            Op::Nverify(_) => OP_NVERIFY,
            Op::Open { .. } => OP_OPEN,
            Op::Openattr(_) => OP_OPENATTR,
            Op::OpenDowngrade { .. } => OP_OPEN_DOWNGRADE,
            Op::Putfh(_) => OP_PUTFH,
            Op::Putpubfh => OP_PUTPUBFH,
            Op::Putrootfh => OP_PUTROOTFH,
            Op::Read { .. } => OP_READ,
            Op::Readdir { .. } => OP_READDIR,
            Op::Readlink => OP_READLINK,
            Op::Remove(_) => OP_REMOVE,
            Op::Rename { .. } => OP_RENAME,
            Op::Restorefh => OP_RESTOREFH,
            Op::Savefh => OP_SAVEFH,
            Op::Secinfo(_) => OP_SECINFO,
            Op::Setattr { .. } => OP_SETATTR,
            Op::Verify(_) => OP_VERIFY,
            Op::Write { .. } => OP_WRITE,
            Op::BindConnToSession { .. } => OP_BIND_CONN_TO_SESSION,
            Op::ExchangeId { .. } => OP_EXCHANGE_ID,
            Op::CreateSession { .. } => OP_CREATE_SESSION,
            Op::BackchannelCtl { .. } => OP_BACKCHANNEL_CTL,
            Op::Delegreturn(_) => OP_DELEGRETURN,
            Op::DestroySession(_) => OP_DESTROY_SESSION,
            Op::FreeStateid(_) => OP_FREE_STATEID,
            Op::SecinfoNoName(_) => OP_SECINFO_NO_NAME,
            Op::Sequence { .. } => OP_SEQUENCE,
            Op::TestStateid { .. } => OP_TEST_STATEID,
            Op::DestroyClientid(_) => OP_DESTROY_CLIENTID,
            Op::ReclaimComplete(_) => OP_RECLAIM_COMPLETE,
            Op::Lock { .. } => OP_LOCK,
            Op::Lockt { .. } => OP_LOCKT,
            Op::Locku { .. } => OP_LOCKU,
            Op::ReleaseLockowner(_) => OP_RELEASE_LOCKOWNER,
            Op::Allocate { .. } => OP_ALLOCATE,
            Op::Deallocate { .. } => OP_DEALLOCATE,
            Op::Seek { .. } => OP_SEEK,
            Op::Copy { .. } => OP_COPY,
        }
    }
}

/// Walks the operations of one COMPOUND.
#[derive(Clone, Debug)]
pub struct OpDecoder<'a> {
    r: Reader<'a>,
    /// WRITE data that travelled in a Read chunk (with its padding), and the
    /// inline bytes after it.
    chunk: Option<&'a [u8]>,
    after_chunk: &'a [u8],
    /// Further Read chunks and the inline bytes after each, alternating
    /// (a COMPOUND with several WRITEs whose data travelled in chunks).
    more: &'a [&'a [u8]],
    left: u32,
    /// Set once an operation failed to decode: no more operations.
    failed: bool,
}

impl<'a> OpDecoder<'a> {
    /// A decoder of `numops` operations from `r` (after the COMPOUND header);
    /// `chunk` is the Read chunk's data and `after_chunk` the inline bytes
    /// that follow it, when the Call came in pieces.
    pub fn new(r: Reader<'a>, numops: u32, chunk: Option<&'a [u8]>, after_chunk: &'a [u8]) -> Self {
        OpDecoder {
            r,
            chunk,
            after_chunk,
            more: &[],
            left: numops,
            failed: false,
        }
    }

    /// [`OpDecoder::new`] for a Call in any number of pieces: `rest` is
    /// what follows the head, a Read chunk's data (with its padding) and the
    /// inline bytes after it, alternating. Each WRITE whose head ends at its
    /// data's length word takes the next chunk as its data.
    pub fn with_pieces(r: Reader<'a>, numops: u32, rest: &'a [&'a [u8]]) -> Self {
        let mut d = OpDecoder::new(r, numops, None, &[]);
        d.next_chunk(rest);
        d
    }

    /// Move to the chunk and inline piece at the front of `rest`.
    fn next_chunk(&mut self, rest: &'a [&'a [u8]]) {
        self.chunk = rest.first().copied();
        self.after_chunk = rest.get(1).copied().unwrap_or(&[]);
        self.more = rest.get(2..).unwrap_or(&[]);
    }

    /// The bytes not yet decoded of the piece being decoded (before an
    /// operation and after it, they bound that operation's bytes when it
    /// did not move to another piece).
    pub fn rest(&self) -> &'a [u8] {
        self.r.rest()
    }

    /// Operations not yet yielded.
    pub fn left(&self) -> u32 {
        self.left
    }

    /// The next operation, an error for it (after which there are no more),
    /// or `None` when all were yielded.
    pub fn next_op(&mut self) -> Option<Result<Op<'a>, OpError>> {
        if self.left == 0 || self.failed {
            return None;
        }
        self.left -= 1;
        let Ok(opnum) = self.r.u32("argop") else {
            self.failed = true;
            // The count promised an operation the bytes do not hold.
            return Some(Err(OpError {
                op: OP_ILLEGAL,
                status: NFS4ERR_BADXDR,
            }));
        };
        let res = self.decode_op(opnum);
        if res.is_err() {
            self.failed = true;
        }
        Some(res)
    }

    fn decode_op(&mut self, opnum: u32) -> Result<Op<'a>, OpError> {
        let err = |status| OpError { op: opnum, status };
        let known = (OP_ACCESS..=OP_LAST).contains(&opnum);
        if !known {
            return Err(OpError {
                op: OP_ILLEGAL,
                status: NFS4ERR_OP_ILLEGAL,
            });
        }
        if opnum == OP_WRITE {
            return self.write().map_err(err);
        }
        let r = &mut self.r;
        let op = decode_args(r, opnum).map_err(|e| match e {
            Refuse::Xdr(e) => err(status_of(e)),
            Refuse::Status(s) => err(s),
        })?;
        Ok(op)
    }

    fn write(&mut self) -> Result<Op<'a>, u32> {
        let r = &mut self.r;
        let stateid = stateid(r).map_err(status_of)?;
        let offset = r.u64("offset").map_err(status_of)?;
        let stable = r.u32("stable").map_err(status_of)?;
        if stable > FILE_SYNC4 {
            return Err(NFS4ERR_BADXDR);
        }
        let len = r.u32("data").map_err(status_of)?;
        if len > MAX_DATA_BYTES {
            return Err(NFS4ERR_RESOURCE);
        }
        let data = match self.chunk {
            // The head ends at the length word: the data is the chunk.
            Some(c) if r.remaining() == 0 => {
                let d = c.get(..len as usize).ok_or(NFS4ERR_BADXDR)?;
                self.r = Reader::new(self.after_chunk);
                self.next_chunk(self.more);
                d
            }
            _ => r.opaque_fixed(len as usize, "data").map_err(status_of)?,
        };
        Ok(Op::Write {
            stateid,
            offset,
            stable,
            data,
        })
    }
}

enum Refuse {
    Xdr(DecodeError),
    Status(u32),
}

impl From<DecodeError> for Refuse {
    fn from(e: DecodeError) -> Self {
        Refuse::Xdr(e)
    }
}

/// `stateid4`.
pub fn stateid(r: &mut Reader<'_>) -> Result<Stateid, DecodeError> {
    let seqid = r.u32("stateid.seqid")?;
    let mut other = [0u8; NFS4_OTHER_SIZE];
    other.copy_from_slice(r.bytes(NFS4_OTHER_SIZE, "stateid.other")?);
    Ok(Stateid { seqid, other })
}

/// `bitmap4`: at most [`MAX_BITMAP_WORDS`] words (more is
/// NFS4ERR_RESOURCE); the words after [`BITMAP_WORDS`] name attributes no
/// minor version defines and must be zero (else NFS4ERR_ATTRNOTSUPP... in a
/// Call, which is what the caller makes of `Err(None)`).
pub fn bitmap(r: &mut Reader<'_>) -> Result<Bitmap, Refuse2> {
    let n = r.count(MAX_BITMAP_WORDS, 4, "bitmap4").map_err(Refuse2::Xdr)?;
    let mut b = Bitmap::default();
    for i in 0..n as usize {
        let w = r.u32("bitmap4 word").map_err(Refuse2::Xdr)?;
        match b.words.get_mut(i) {
            Some(slot) => *slot = w,
            None if w != 0 => return Err(Refuse2::UnknownAttr),
            None => {}
        }
    }
    Ok(b)
}

/// Why a bitmap was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refuse2 {
    Xdr(DecodeError),
    /// A bit beyond every defined attribute.
    UnknownAttr,
}

fn bitmap_r(r: &mut Reader<'_>) -> Result<Bitmap, Refuse> {
    bitmap(r).map_err(|e| match e {
        Refuse2::Xdr(e) => Refuse::Xdr(e),
        Refuse2::UnknownAttr => Refuse::Status(NFS4ERR_ATTRNOTSUPP),
    })
}

fn fattr<'a>(r: &mut Reader<'a>) -> Result<Fattr<'a>, Refuse> {
    let mask = bitmap_r(r)?;
    let vals = r.opaque_var(MAX_FATTR_BYTES, "attr_vals")?;
    Ok(Fattr { mask, vals })
}

/// `component4`: longer than [`MAX_NAME_BYTES`] is NFS4ERR_NAMETOOLONG
/// (the bytes still have to be there: a name the Call cannot hold is
/// NFS4ERR_BADXDR).
fn component<'a>(r: &mut Reader<'a>) -> Result<&'a [u8], Refuse> {
    let len = r.peek_u32("component4")?;
    if len > MAX_NAME_BYTES {
        // Skip it whole, so a truncated Call is BADXDR, not NAMETOOLONG.
        r.opaque_var(u32::MAX, "component4")?;
        return Err(Refuse::Status(NFS4ERR_NAMETOOLONG));
    }
    Ok(r.string(MAX_NAME_BYTES, "component4")?)
}

fn verifier(r: &mut Reader<'_>) -> Result<Verifier, DecodeError> {
    let mut v = [0u8; NFS4_VERIFIER_SIZE];
    v.copy_from_slice(r.bytes(NFS4_VERIFIER_SIZE, "verifier4")?);
    Ok(v)
}

fn sessionid(r: &mut Reader<'_>) -> Result<SessionId, DecodeError> {
    let mut v = [0u8; NFS4_SESSIONID_SIZE];
    v.copy_from_slice(r.bytes(NFS4_SESSIONID_SIZE, "sessionid4")?);
    Ok(v)
}

fn channel_attrs(r: &mut Reader<'_>) -> Result<ChannelAttrs, Refuse> {
    let mut c = ChannelAttrs {
        headerpadsize: r.u32("ca_headerpadsize")?,
        maxrequestsize: r.u32("ca_maxrequestsize")?,
        maxresponsesize: r.u32("ca_maxresponsesize")?,
        maxresponsesize_cached: r.u32("ca_maxresponsesize_cached")?,
        maxoperations: r.u32("ca_maxoperations")?,
        maxrequests: r.u32("ca_maxrequests")?,
        rdma_ird: None,
    };
    match r.count(1, 4, "ca_rdma_ird")? {
        0 => {}
        _ => c.rdma_ird = Some(r.u32("ca_rdma_ird")?),
    }
    Ok(c)
}

/// `callback_sec_parms4<>` (RFC 8881 s18.36.1): every entry walked, the
/// first AUTH_NONE or AUTH_SYS one kept (RPCSEC_GSS is skipped: we hold no
/// GSS context for the backchannel).
fn cb_sec_parms<'a>(r: &mut Reader<'a>) -> Result<Option<CbSec<'a>>, Refuse> {
    let n = r.count(MAX_CB_SEC_PARMS, 4, "csa_sec_parms")?;
    let mut first = None;
    for _ in 0..n {
        match r.u32("cb_secflavor")? {
            0 => {
                first = first.or(Some(CbSec::None));
            }
            1 => {
                let stamp = r.u32("stamp")?;
                let name = r.string(crate::rpc::AUTH_SYS_MAX_MACHINENAME, "machinename")?;
                let uid = r.u32("uid")?;
                let gid = r.u32("gid")?;
                let g = r.count(crate::rpc::AUTH_SYS_MAX_GIDS as u32, 4, "gids")?;
                let mut gids = [0u32; crate::rpc::AUTH_SYS_MAX_GIDS];
                for x in gids.iter_mut().take(g as usize) {
                    *x = r.u32("gids")?;
                }
                if first.is_none() {
                    // Within the bounds just checked, so `new` accepts it.
                    first = crate::rpc::AuthSysParms::new(stamp, name, uid, gid, &gids[..g as usize])
                        .ok()
                        .map(CbSec::Sys);
                }
            }
            6 => {
                r.u32("gcbp_service")?;
                r.opaque_var(NFS4_OPAQUE_LIMIT, "gcbp_handle_from_server")?;
                r.opaque_var(NFS4_OPAQUE_LIMIT, "gcbp_handle_from_client")?;
            }
            v => {
                return Err(Refuse::Xdr(
                    r.error(DecodeErrorKind::BadDiscriminant { value: v }, "cb_secflavor"),
                ))
            }
        }
    }
    Ok(first)
}

/// `lock_owner4`.
fn lock_owner<'a>(r: &mut Reader<'a>) -> Result<LockOwner<'a>, Refuse> {
    Ok(LockOwner {
        clientid: r.u64("lock_owner4.clientid")?,
        owner: r.opaque_var(NFS4_OPAQUE_LIMIT, "lock_owner4.owner")?,
    })
}

/// `nfs_lock_type4`: a value outside the enum is not its XDR.
fn lock_type(r: &mut Reader<'_>) -> Result<u32, Refuse> {
    match r.u32("locktype")? {
        t @ READ_LT..=WRITEW_LT => Ok(t),
        v => Err(bad(r, v, "locktype")),
    }
}

/// `netloc4` (RFC 7862 s15.2.1 / s4.3): stepped over.
fn netloc(r: &mut Reader<'_>) -> Result<(), Refuse> {
    match r.u32("nl_type")? {
        NL4_NAME | NL4_URL => {
            r.string(NFS4_OPAQUE_LIMIT, "nl_name")?;
        }
        NL4_NETADDR => {
            r.string(NFS4_OPAQUE_LIMIT, "na_r_netid")?;
            r.string(NFS4_OPAQUE_LIMIT, "na_r_addr")?;
        }
        v => return Err(bad(r, v, "nl_type")),
    }
    Ok(())
}

fn bad(r: &Reader<'_>, value: u32, field: &'static str) -> Refuse {
    Refuse::Xdr(r.error(DecodeErrorKind::BadDiscriminant { value }, field))
}

/// The arguments of every operation but WRITE.
#[inline(always)]
fn decode_args<'a>(r: &mut Reader<'a>, opnum: u32) -> Result<Op<'a>, Refuse> {
    Ok(match opnum {
        OP_ACCESS => Op::Access(r.u32("access")?),
        OP_CLOSE => Op::Close {
            seqid: r.u32("seqid")?,
            stateid: stateid(r)?,
        },
        OP_COMMIT => Op::Commit {
            offset: r.u64("offset")?,
            count: r.u32("count")?,
        },
        OP_CREATE => {
            let t = r.u32("objtype")?;
            let ty = match t {
                NF4LNK => CreateType::Link({
                    let len = r.peek_u32("linkdata")?;
                    if len > MAX_LINK_BYTES {
                        r.opaque_var(u32::MAX, "linkdata")?;
                        return Err(Refuse::Status(NFS4ERR_NAMETOOLONG));
                    }
                    r.string(MAX_LINK_BYTES, "linkdata")?
                }),
                NF4BLK => CreateType::Block(r.u32("specdata1")?, r.u32("specdata2")?),
                NF4CHR => CreateType::Char(r.u32("specdata1")?, r.u32("specdata2")?),
                NF4SOCK => CreateType::Socket,
                NF4FIFO => CreateType::Fifo,
                NF4DIR => CreateType::Dir,
                // Other types have no arguments in the union's default arm.
                other => CreateType::Other(other),
            };
            let name = component(r)?;
            let attrs = fattr(r)?;
            Op::Create { ty, name, attrs }
        }
        OP_GETATTR => Op::Getattr(bitmap_r(r)?),
        OP_GETFH => Op::Getfh,
        OP_LINK => Op::Link(component(r)?),
        OP_LOOKUP => Op::Lookup(component(r)?),
        OP_LOOKUPP => Op::Lookupp,
        OP_NVERIFY => Op::Nverify(fattr(r)?),
        OP_VERIFY => Op::Verify(fattr(r)?),
        OP_OPEN => {
            let seqid = r.u32("seqid")?;
            let share_access = r.u32("share_access")?;
            let share_deny = r.u32("share_deny")?;
            let clientid = r.u64("clientid")?;
            let owner = r.opaque_var(NFS4_OPAQUE_LIMIT, "owner")?;
            let create = match r.u32("opentype")? {
                OPEN4_NOCREATE => None,
                OPEN4_CREATE => Some(match r.u32("createmode")? {
                    UNCHECKED4 => CreateHow::Unchecked(fattr(r)?),
                    GUARDED4 => CreateHow::Guarded(fattr(r)?),
                    EXCLUSIVE4 => CreateHow::Exclusive(verifier(r)?),
                    EXCLUSIVE4_1 => {
                        let v = verifier(r)?;
                        CreateHow::Exclusive41(v, fattr(r)?)
                    }
                    v => return Err(bad(r, v, "createmode")),
                }),
                v => return Err(bad(r, v, "opentype")),
            };
            let claim = match r.u32("claim")? {
                CLAIM_NULL => Claim::Null(component(r)?),
                CLAIM_PREVIOUS => Claim::Previous(r.u32("delegate_type")?),
                CLAIM_DELEGATE_CUR => Claim::DelegCur {
                    stateid: stateid(r)?,
                    name: Some(component(r)?),
                },
                CLAIM_DELEGATE_PREV => {
                    component(r)?;
                    Claim::Deleg(CLAIM_DELEGATE_PREV)
                }
                CLAIM_FH => Claim::Fh,
                CLAIM_DELEG_CUR_FH => Claim::DelegCur {
                    stateid: stateid(r)?,
                    name: None,
                },
                CLAIM_DELEG_PREV_FH => Claim::Deleg(CLAIM_DELEG_PREV_FH),
                v => return Err(bad(r, v, "claim")),
            };
            Op::Open {
                seqid,
                share_access,
                share_deny,
                clientid,
                owner,
                create,
                claim,
            }
        }
        OP_OPENATTR => Op::Openattr(r.bool("createdir")?),
        OP_OPEN_DOWNGRADE => Op::OpenDowngrade {
            stateid: stateid(r)?,
            seqid: r.u32("seqid")?,
            share_access: r.u32("share_access")?,
            share_deny: r.u32("share_deny")?,
        },
        OP_PUTFH => {
            let len = r.peek_u32("object")?;
            if len > NFS4_FHSIZE {
                // RFC 8881 s16.2.3.1: a handle longer than NFS4_FHSIZE.
                return Err(Refuse::Status(NFS4ERR_BADHANDLE));
            }
            Op::Putfh(r.opaque_var(NFS4_FHSIZE, "object")?)
        }
        OP_PUTPUBFH => Op::Putpubfh,
        OP_PUTROOTFH => Op::Putrootfh,
        OP_READ => Op::Read {
            stateid: stateid(r)?,
            offset: r.u64("offset")?,
            count: r.u32("count")?,
        },
        OP_READDIR => Op::Readdir {
            cookie: r.u64("cookie")?,
            verf: verifier(r)?,
            dircount: r.u32("dircount")?,
            maxcount: r.u32("maxcount")?,
            attrs: bitmap_r(r)?,
        },
        OP_READLINK => Op::Readlink,
        OP_REMOVE => Op::Remove(component(r)?),
        OP_RENAME => Op::Rename {
            old: component(r)?,
            new: component(r)?,
        },
        OP_RESTOREFH => Op::Restorefh,
        OP_SAVEFH => Op::Savefh,
        OP_SECINFO => Op::Secinfo(component(r)?),
        OP_SETATTR => Op::Setattr {
            stateid: stateid(r)?,
            attrs: fattr(r)?,
        },
        OP_BIND_CONN_TO_SESSION => Op::BindConnToSession {
            sessionid: sessionid(r)?,
            dir: r.u32("bctsa_dir")?,
            rdma_mode: r.bool("bctsa_use_conn_in_rdma_mode")?,
        },
        OP_EXCHANGE_ID => {
            let verifier = verifier(r)?;
            let ownerid = r.opaque_var(NFS4_OPAQUE_LIMIT, "co_ownerid")?;
            let flags = r.u32("eia_flags")?;
            let state_protect = r.u32("eia_state_protect")?;
            match state_protect {
                SP4_NONE => {}
                SP4_MACH_CRED => {
                    bitmap_r(r)?;
                    bitmap_r(r)?;
                }
                SP4_SSV => {
                    bitmap_r(r)?;
                    bitmap_r(r)?;
                    for f in ["ssp_hash_algs", "ssp_encr_algs"] {
                        let n = r.count(MAX_SEC_OIDS, 4, f)?;
                        for _ in 0..n {
                            r.opaque_var(NFS4_OPAQUE_LIMIT, f)?;
                        }
                    }
                    r.u32("ssp_window")?;
                    r.u32("ssp_num_gss_handles")?;
                }
                v => return Err(bad(r, v, "eia_state_protect")),
            }
            if r.count(1, 4, "eia_client_impl_id")? == 1 {
                r.string(NFS4_OPAQUE_LIMIT, "nii_domain")?;
                r.string(NFS4_OPAQUE_LIMIT, "nii_name")?;
                r.u64("nii_date.seconds")?;
                r.u32("nii_date.nseconds")?;
            }
            Op::ExchangeId {
                verifier,
                ownerid,
                flags,
                state_protect,
            }
        }
        OP_CREATE_SESSION => {
            let clientid = r.u64("csa_clientid")?;
            let sequence = r.u32("csa_sequence")?;
            let flags = r.u32("csa_flags")?;
            let fore = channel_attrs(r)?;
            let back = channel_attrs(r)?;
            let cb_program = r.u32("csa_cb_program")?;
            let cb_sec = cb_sec_parms(r)?;
            Op::CreateSession {
                clientid,
                sequence,
                flags,
                fore,
                back,
                cb_program,
                cb_sec,
            }
        }
        OP_BACKCHANNEL_CTL => {
            let cb_program = r.u32("bca_cb_program")?;
            let cb_sec = cb_sec_parms(r)?;
            Op::BackchannelCtl { cb_program, cb_sec }
        }
        OP_DELEGRETURN => Op::Delegreturn(stateid(r)?),
        OP_DESTROY_SESSION => Op::DestroySession(sessionid(r)?),
        OP_FREE_STATEID => Op::FreeStateid(stateid(r)?),
        OP_SECINFO_NO_NAME => Op::SecinfoNoName(r.u32("secinfo_style4")?),
        OP_SEQUENCE => Op::Sequence {
            sessionid: sessionid(r)?,
            sequenceid: r.u32("sa_sequenceid")?,
            slotid: r.u32("sa_slotid")?,
            highest_slotid: r.u32("sa_highest_slotid")?,
            cachethis: r.bool("sa_cachethis")?,
        },
        OP_TEST_STATEID => {
            let count = r.count(MAX_TEST_STATEIDS, 16, "ts_stateids")?;
            let raw = r.bytes(16 * count as usize, "ts_stateids")?;
            Op::TestStateid { count, raw }
        }
        OP_DESTROY_CLIENTID => Op::DestroyClientid(r.u64("dca_clientid")?),
        OP_RECLAIM_COMPLETE => Op::ReclaimComplete(r.bool("rca_one_fs")?),
        OP_LOCK => {
            let locktype = lock_type(r)?;
            let reclaim = r.bool("reclaim")?;
            let offset = r.u64("offset")?;
            let length = r.u64("length")?;
            let locker = if r.bool("new_lock_owner")? {
                Locker::New {
                    open_seqid: r.u32("open_seqid")?,
                    open_stateid: stateid(r)?,
                    lock_seqid: r.u32("lock_seqid")?,
                    owner: lock_owner(r)?,
                }
            } else {
                Locker::Exist {
                    lock_stateid: stateid(r)?,
                    lock_seqid: r.u32("lock_seqid")?,
                }
            };
            Op::Lock {
                locktype,
                reclaim,
                offset,
                length,
                locker,
            }
        }
        OP_LOCKT => Op::Lockt {
            locktype: lock_type(r)?,
            offset: r.u64("offset")?,
            length: r.u64("length")?,
            owner: lock_owner(r)?,
        },
        OP_LOCKU => Op::Locku {
            locktype: lock_type(r)?,
            seqid: r.u32("seqid")?,
            stateid: stateid(r)?,
            offset: r.u64("offset")?,
            length: r.u64("length")?,
        },
        OP_RELEASE_LOCKOWNER => Op::ReleaseLockowner(lock_owner(r)?),
        OP_ALLOCATE => Op::Allocate {
            stateid: stateid(r)?,
            offset: r.u64("aa_offset")?,
            length: r.u64("aa_length")?,
        },
        OP_DEALLOCATE => Op::Deallocate {
            stateid: stateid(r)?,
            offset: r.u64("da_offset")?,
            length: r.u64("da_length")?,
        },
        OP_SEEK => {
            let stateid = stateid(r)?;
            let offset = r.u64("sa_offset")?;
            let what = r.u32("sa_what")?;
            if what > NFS4_CONTENT_HOLE {
                // RFC 7862 s15.11.3: an unknown arm of data_content4.
                return Err(Refuse::Status(NFS4ERR_UNION_NOTSUPP));
            }
            Op::Seek { stateid, offset, what }
        }
        OP_COPY => {
            let src_stateid = stateid(r)?;
            let dst_stateid = stateid(r)?;
            let src_offset = r.u64("ca_src_offset")?;
            let dst_offset = r.u64("ca_dst_offset")?;
            let count = r.u64("ca_count")?;
            let consecutive = r.bool("ca_consecutive")?;
            let synchronous = r.bool("ca_synchronous")?;
            let source_servers = r.count(MAX_NETLOCS, 8, "ca_source_server")?;
            for _ in 0..source_servers {
                netloc(r)?;
            }
            Op::Copy {
                src_stateid,
                dst_stateid,
                src_offset,
                dst_offset,
                count,
                consecutive,
                synchronous,
                source_servers,
            }
        }
        // Known operations whose arguments we do not decode (delegations,
        // pNFS, 4.0-only, the other 4.2 ones): NFS4ERR_NOTSUPP, and the walk
        // ends there as any failing operation ends it.
        _ => return Err(Refuse::Status(NFS4ERR_NOTSUPP)),
    })
}

/// The `count` of the READ that ends a COMPOUND whose bytes are all in
/// `args` (after the RPC header), for sizing the reply's data buffer before
/// the Call runs; `None` for anything else or anything malformed.
///
/// The Linux client's READ, `SEQUENCE, PUTFH, READ`, is read in place by
/// [`sequence_putfh_read`] with the same field readers and checks as the
/// operations' decoding, without building the operations; its WRITE,
/// `SEQUENCE, PUTFH, WRITE, GETATTR`, is answered `None` once
/// [`sequence_putfh_write_then`] has found that the operation after the
/// WRITE, the last, is not a READ. Every other COMPOUND, and one of those
/// shapes the fast paths do not accept, is walked by the [`OpDecoder`] (they
/// agree: the property tests `final_read_count_fast_path_agrees_with_the_decoder`
/// and `final_read_count_write_shortcut_agrees_with_the_decoder`).
pub fn final_read_count(args: &[u8]) -> Option<u32> {
    let mut r = Reader::new(args);
    let h = CompoundArgs::decode(&mut r).ok()?;
    match h.numops {
        3 => {
            if let Some(count) = sequence_putfh_read(r.clone()) {
                return Some(count);
            }
        }
        // The last operation's number decides alone when it is not READ:
        // whatever the earlier operations hold, the answer is then `None`.
        // The walk to it skips exactly what the decoder reads for them, so
        // for arguments the decoder accepts, this is the decoder's last
        // operation; for others the decoder answers `None` too.
        4 if sequence_putfh_write_then(r.clone()).is_some_and(|op| op != OP_READ) => return None,
        _ => {}
    }
    final_read_count_decoded(r, h.numops)
}

/// [`final_read_count`] by its definition, every operation decoded (no fast
/// path): what the property test and the `nfs4_service` fuzz target hold the
/// fast path to.
pub fn final_read_count_by_decoding(args: &[u8]) -> Option<u32> {
    let mut r = Reader::new(args);
    let h = CompoundArgs::decode(&mut r).ok()?;
    final_read_count_decoded(r, h.numops)
}

/// [`final_read_count`]'s walk of every operation through the decoder.
fn final_read_count_decoded(r: Reader<'_>, numops: u32) -> Option<u32> {
    let mut d = OpDecoder::new(r, numops, None, &[]);
    let mut last = None;
    while let Some(op) = d.next_op() {
        last = Some(op.ok()?);
    }
    match last {
        Some(Op::Read { count, .. }) => Some(count),
        _ => None,
    }
}

/// The READ `count` of the operations `SEQUENCE, PUTFH, READ` at `r`
/// (RFC 8881 s18.46.1 SEQUENCE4args: sessionid, sequenceid, slotid,
/// highest_slotid, cachethis; s18.19.1 PUTFH4args: nfs_fh4 of at most
/// NFS4_FHSIZE bytes; s18.22.1 READ4args: stateid, offset, count), read
/// with the checks [`decode_args`] makes on them; `None` for any other
/// shape or any failed check (the caller then walks the decoder).
fn sequence_putfh_read(mut r: Reader<'_>) -> Option<u32> {
    sequence_putfh(&mut r)?;
    if r.u32("argop").ok()? != OP_READ {
        return None;
    }
    stateid(&mut r).ok()?;
    r.u64("offset").ok()?;
    r.u32("count").ok()
}

/// The operation number after `SEQUENCE, PUTFH, WRITE` at `r` (s18.32.1
/// WRITE4args: stateid, offset, stable_how4, opaque data), the WRITE read
/// with the checks [`OpDecoder`] makes on one whose data is inline (as it is
/// in the bytes the hint sees); `None` for any other shape or failed check.
fn sequence_putfh_write_then(mut r: Reader<'_>) -> Option<u32> {
    sequence_putfh(&mut r)?;
    if r.u32("argop").ok()? != OP_WRITE {
        return None;
    }
    stateid(&mut r).ok()?;
    r.u64("offset").ok()?;
    if r.u32("stable").ok()? > FILE_SYNC4 {
        return None;
    }
    let len = r.u32("data").ok()?;
    if len > MAX_DATA_BYTES {
        return None;
    }
    r.opaque_fixed(len as usize, "data").ok()?;
    r.u32("argop").ok()
}

/// Reads the operations `SEQUENCE, PUTFH` at `r` (s18.46.1, s18.19.1) with
/// the checks [`decode_args`] makes on them; `None` for another shape or a
/// failed check.
fn sequence_putfh(r: &mut Reader<'_>) -> Option<()> {
    if r.u32("argop").ok()? != OP_SEQUENCE {
        return None;
    }
    sessionid(r).ok()?;
    r.u32("sa_sequenceid").ok()?;
    r.u32("sa_slotid").ok()?;
    r.u32("sa_highest_slotid").ok()?;
    r.bool("sa_cachethis").ok()?;
    if r.u32("argop").ok()? != OP_PUTFH || r.peek_u32("object").ok()? > NFS4_FHSIZE {
        return None;
    }
    r.opaque_var(NFS4_FHSIZE, "object").ok()?;
    Some(())
}
