//! A small RPC program for exercising and measuring the transport engine without
//! NFS: its Upper-Layer Binding, a service, and Call encoders.
//!
//! Procedures (program [`PROG`], version [`VERS`]):
//!
//! | proc | arguments | results | transport pattern |
//! |---|---|---|---|
//! | NULL (0) | void | void | inline |
//! | ECHO (1) | `opaque data<>` DDP | `opaque data<>` DDP | Read chunk + Write chunk |
//! | BIG (2) | `uint32 n` | `opaque<n>` not DDP | Reply chunk when large |
//! | SUM (3) | `opaque data<>` not DDP | `uint32 len, uint32 sum` | Position-Zero Read chunk when large |
//! | RDLONG (4) | `opaque data<>` DDP, `uint32 n` | `uint32 sum, opaque<n>` not DDP | Read chunk + Reply chunk |
//! | TWO (5) | `uint32 a, uint32 b` | `opaque<a>` DDP, `opaque<b>` DDP | two Write chunks |
//! | WRLONG (6) | `uint32 a, uint32 m` | `opaque<a>` DDP, `opaque<m>` not DDP | Write chunk + Reply chunk |
//! | READ (7) | `uint32 count` | `opaque data<count>` DDP | Write chunk (like NFS READ) |
//! | WRITE (8) | `opaque data<>` DDP | `uint32 count` | Read chunk (like NFS WRITE) |
//!
//! READ and WRITE do not touch the data (a backend would DMA it), so they measure
//! the transport; the others fill and check patterns and favour clarity.
//!
//! Built only with the crate feature `testprog` (off by default: tests, benches
//! and examples turn it on; no release binary carries it).
//!
//! Calls run on the core that owns the connection.

use proto::rpc::{self, CallHeader, OpaqueAuth, ReplyHeader};
use proto::ulb::{DdpItem, UpperLayerBinding};
use proto::xdr::{Reader, Writer};
use proto::DecodeError;

use crate::service::{CallView, ReplyBuilder, Service, ServiceError};

/// Program number (transient range, RFC 5531 s8.3).
pub const PROG: u32 = 0x4000_0001;
pub const VERS: u32 = 1;
pub const P_NULL: u32 = 0;
pub const P_ECHO: u32 = 1;
pub const P_BIG: u32 = 2;
pub const P_SUM: u32 = 3;
pub const P_RDLONG: u32 = 4;
pub const P_TWO: u32 = 5;
pub const P_WRLONG: u32 = 6;
pub const P_READ: u32 = 7;
pub const P_WRITE: u32 = 8;
/// Like [`P_WRLONG`], but the reply after the Write chunk's item stays small
/// and inline (no Reply chunk): a Write chunk with more reply after its item.
pub const P_WRTAIL: u32 = 9;
/// Largest `b` (the inline tail) of [`P_WRTAIL`].
pub const WRTAIL_MAX_TAIL: u32 = 256;

/// Largest data item of the checking procedures.
pub const MAX_DATA: u32 = 48 * 1024;
/// Largest READ / WRITE.
pub const MAX_IO: u32 = 1 << 20;
/// Size of a Call header with AUTH_NONE (xid .. verf).
pub const RPC_CALL_HDR: usize = 40;
/// Size of an accepted-success Reply header with AUTH_NONE.
pub const RPC_REPLY_HDR: usize = 24;

/// Deterministic pattern bytes.
pub fn pattern(salt: u32, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(31).wrapping_add(salt.wrapping_mul(7)) as u8)
        .collect()
}

/// FNV-1a.
pub fn checksum(b: &[u8]) -> u32 {
    b.iter()
        .fold(0x811c_9dc5u32, |h, &x| (h ^ x as u32).wrapping_mul(0x0100_0193))
}

/// The ULB of the program (RFC 8166 section 6).
#[derive(Debug, Default, Clone, Copy)]
pub struct TestUlb;

impl UpperLayerBinding for TestUlb {
    fn program(&self) -> u32 {
        PROG
    }
    fn supports_version(&self, v: u32) -> bool {
        v == VERS
    }
    fn call_items(&self, call: &[u8], out: &mut [DdpItem]) -> Result<usize, DecodeError> {
        let (h, at) = CallHeader::decode(call)?;
        if h.prog != PROG || !matches!(h.proc_, P_ECHO | P_RDLONG | P_WRITE) || out.is_empty() {
            return Ok(0);
        }
        let max = if h.proc_ == P_WRITE { MAX_IO } else { MAX_DATA };
        let mut r = Reader::with_base(&call[at..], at);
        let d = r.opaque_var(max, "data")?;
        out[0] = DdpItem {
            offset: (at + 4) as u32,
            len: d.len() as u32,
        };
        Ok(1)
    }
    fn reply_items(&self, _v: u32, p: u32, reply: &[u8], out: &mut [DdpItem]) -> Result<usize, DecodeError> {
        if !matches!(p, P_ECHO | P_READ) || out.is_empty() {
            return Ok(0);
        }
        let (_, at) = rpc::decode_reply(reply)?;
        let mut r = Reader::with_base(&reply[at..], at);
        let d = r.opaque_var(MAX_IO, "data")?;
        out[0] = DdpItem {
            offset: (at + 4) as u32,
            len: d.len() as u32,
        };
        Ok(1)
    }
    fn reply_ddp_max(&self, _v: u32, p: u32) -> Option<u32> {
        match p {
            P_ECHO | P_WRLONG | P_WRTAIL => Some(MAX_DATA),
            P_READ => Some(MAX_IO),
            _ => None,
        }
    }
    fn max_reply_size(&self, _v: u32, p: u32) -> u32 {
        match p {
            P_BIG | P_RDLONG | P_WRLONG => RPC_REPLY_HDR as u32 + 12 + MAX_DATA,
            P_WRTAIL => RPC_REPLY_HDR as u32 + 12 + WRTAIL_MAX_TAIL,
            _ => 64,
        }
    }
}

/// The service answering the program.
#[derive(Debug, Default)]
pub struct TestService {
    pub calls: u64,
}

fn drop_on<T, E>(r: Result<T, E>) -> Result<T, ServiceError> {
    r.map_err(|_| ServiceError::Reject)
}

impl Service for TestService {
    /// Never defers: READ and ECHO write their data item in `handle_call`.
    fn fills_data_in_call(&self) -> bool {
        true
    }

    fn reply_data_hint(&mut self, call: &CallView<'_>) -> usize {
        // The procedure is word 5 of the Call (xid, mtype, rpcvers, prog, vers,
        // proc: RFC 5531 s9); only ECHO and READ want a data buffer, and only
        // those pay for a full header decode here.
        let head = call.head();
        let proc_ = Reader::new(head.get(20..).unwrap_or(&[])).u32("proc").unwrap_or(P_NULL);
        if proc_ != P_ECHO && proc_ != P_READ {
            return 0;
        }
        match CallHeader::decode(head) {
            Ok((h, _)) if h.proc_ == P_ECHO => call.len(),
            Ok((h, at)) if h.proc_ == P_READ => Reader::new(head.get(at..).unwrap_or(&[]))
                .u32("count")
                .map_or(0, |c| c as usize),
            _ => 0,
        }
    }

    fn handle_call(&mut self, call: &CallView<'_>, reply: &mut ReplyBuilder<'_>) -> Result<(), ServiceError> {
        self.calls += 1;
        let head = call.head();
        let (h, at) = drop_on(CallHeader::decode(head))?;
        // The transport-measuring procedures work on the pieces, without copies.
        match h.proc_ {
            P_NULL | P_READ | P_WRITE => {
                let count = match h.proc_ {
                    P_READ => drop_on(Reader::new(&head[at..]).u32("count"))?,
                    P_WRITE => {
                        // data<> length word inline, data in Read chunk 0 (or inline).
                        drop_on(Reader::new(&head[at..]).u32("count"))?
                    }
                    _ => 0,
                };
                let mut w = Writer::new(reply.head_mut());
                drop_on(rpc::encode_reply_header(
                    &mut w,
                    &ReplyHeader::success(h.xid, OpaqueAuth::NONE),
                ))?;
                if h.proc_ != P_NULL {
                    drop_on(w.put_u32(count))?;
                }
                let n = w.len();
                reply.set_head_len(n);
                if h.proc_ == P_READ {
                    if (count as usize) > reply.data_capacity() {
                        return Err(ServiceError::Reject);
                    }
                    reply.set_data(count as usize, true);
                }
                return Ok(());
            }
            _ => {}
        }
        // The checking procedures reassemble (clarity over speed).
        let mut msg = vec![0u8; call.len()];
        call.copy_to(&mut msg);
        let args = &msg[at..];
        let mut data_out: Option<Vec<u8>> = None;
        let mut marks: Vec<(usize, usize)> = Vec::new();
        let mut w = Writer::new(reply.head_mut());
        drop_on(rpc::encode_reply_header(
            &mut w,
            &ReplyHeader::success(h.xid, OpaqueAuth::NONE),
        ))?;
        match h.proc_ {
            P_ECHO => {
                let d = drop_on(Reader::new(args).opaque_var(MAX_DATA, "data"))?;
                drop_on(w.put_u32(d.len() as u32))?;
                data_out = Some(d.to_vec());
            }
            P_BIG => {
                let n = drop_on(Reader::new(args).u32("n"))?;
                drop_on(w.put_opaque_var(&pattern(n, n as usize)))?;
            }
            P_SUM => {
                let d = drop_on(Reader::new(args).opaque_var(MAX_DATA, "data"))?;
                drop_on(w.put_u32(d.len() as u32))?;
                drop_on(w.put_u32(checksum(d)))?;
            }
            P_RDLONG => {
                let mut r = Reader::new(args);
                let d = drop_on(r.opaque_var(MAX_DATA, "data"))?;
                let n = drop_on(r.u32("n"))?;
                drop_on(w.put_u32(checksum(d)))?;
                drop_on(w.put_opaque_var(&pattern(n, n as usize)))?;
            }
            P_TWO | P_WRLONG | P_WRTAIL => {
                let mut r = Reader::new(args);
                let a = drop_on(r.u32("a"))?;
                let b = drop_on(r.u32("b"))?;
                let x = pattern(a, a as usize);
                let y = pattern(b ^ 0x55, b as usize);
                drop_on(w.put_u32(a))?;
                let x_at = w.len();
                drop_on(w.put_opaque_fixed(&x))?;
                drop_on(w.put_u32(b))?;
                let y_at = w.len();
                drop_on(w.put_opaque_fixed(&y))?;
                marks.push((x_at, x.len()));
                if h.proc_ == P_TWO {
                    marks.push((y_at, y.len()));
                }
            }
            _ => return Err(ServiceError::Reject),
        }
        let n = w.len();
        reply.set_head_len(n);
        for (at, len) in marks {
            if !reply.add_head_item(at, len) {
                return Err(ServiceError::Reject);
            }
        }
        if let Some(d) = data_out {
            let buf = reply.data_mut().ok_or(ServiceError::Reject)?;
            buf.get_mut(..d.len()).ok_or(ServiceError::Reject)?.copy_from_slice(&d);
            reply.set_data(d.len(), true);
        }
        Ok(())
    }
}

/// Encode a Call of `proc_` into `out` (the XID is set by the requester);
/// `arg` is the data of ECHO/SUM/RDLONG/WRITE, `n` and `b` the sizes of the
/// others. Returns the length, or `None` if `out` is too small.
pub fn encode_call(out: &mut [u8], proc_: u32, arg: &[u8], n: u32, b: u32) -> Option<usize> {
    let mut w = Writer::new(out);
    rpc::encode_call_header(
        &mut w,
        &CallHeader::new(0, PROG, VERS, proc_, OpaqueAuth::NONE, OpaqueAuth::NONE),
    )
    .ok()?;
    match proc_ {
        P_ECHO | P_SUM | P_WRITE => w.put_opaque_var(arg).ok()?,
        P_BIG | P_READ => w.put_u32(n).ok()?,
        P_RDLONG => {
            w.put_opaque_var(arg).ok()?;
            w.put_u32(n).ok()?;
        }
        P_TWO | P_WRLONG | P_WRTAIL => {
            w.put_u32(n).ok()?;
            w.put_u32(b).ok()?;
        }
        _ => {}
    }
    Some(w.len())
}

/// Encode a WRITE of `len` bytes whose data is already in place after the
/// header (at [`write_data_offset`]): only the header and the length word are
/// written, the data is not copied. Returns the Call's length.
pub fn encode_write_in_place(out: &mut [u8], len: u32) -> Option<usize> {
    let mut w = Writer::new(out);
    rpc::encode_call_header(
        &mut w,
        &CallHeader::new(0, PROG, VERS, P_WRITE, OpaqueAuth::NONE, OpaqueAuth::NONE),
    )
    .ok()?;
    w.put_u32(len).ok()?;
    let total = RPC_CALL_HDR + 4 + proto::xdr::roundup(len as usize);
    (total <= out.len()).then_some(total)
}

/// Where WRITE's data starts in its Call.
pub const fn write_data_offset() -> usize {
    RPC_CALL_HDR + 4
}

// ---------------------------------------------------------------------------
// The backward direction (RFC 8167): a service that also calls the client
// ---------------------------------------------------------------------------

/// Program number of the backward Calls [`BackService`] makes (an NFSv4
/// callback program number, RFC 8881 s18.36 `cb_program`'s range).
pub const CB_PROG: u32 = 0x4000_0000;

/// A backward-direction Call with `xid` carrying `payload` as its argument
/// (`opaque<>`): the RPC header (CALL, AUTH_NONE) and the payload.
pub fn backward_call(xid: u32, payload: &[u8]) -> Vec<u8> {
    let mut out = vec![0u8; RPC_CALL_HDR + 4 + payload.len() + 4];
    let mut w = Writer::new(&mut out);
    let hdr = CallHeader::new(xid, CB_PROG, 1, 1, OpaqueAuth::NONE, OpaqueAuth::NONE);
    let ok = rpc::encode_call_header(&mut w, &hdr).and_then(|_| w.put_opaque_var(payload));
    let n = w.len();
    debug_assert!(ok.is_ok());
    out.truncate(n);
    out
}

/// The Reply a well-behaved client gives backward Call `call`: accepted,
/// SUCCESS, the Call's argument echoed (`None` when `call` does not
/// decode).
pub fn backward_reply(call: &[u8]) -> Option<Vec<u8>> {
    let (h, at) = CallHeader::decode(call).ok()?;
    let arg = Reader::new(call.get(at..)?).opaque_var(1 << 20, "arg").ok()?;
    let mut out = vec![0u8; RPC_REPLY_HDR + 4 + arg.len() + 4];
    let mut w = Writer::new(&mut out);
    rpc::encode_reply_header(&mut w, &ReplyHeader::success(h.xid, OpaqueAuth::NONE)).ok()?;
    w.put_opaque_var(arg).ok()?;
    let n = w.len();
    out.truncate(n);
    Some(out)
}

/// [`TestService`] that also makes backward-direction Calls (RFC 8167):
/// the Calls in `queue` go to the first connection whose backchannel is
/// open, in order; what the engine reports is recorded.
#[derive(Debug, Default)]
pub struct BackService {
    pub fwd: TestService,
    /// Backward Calls still to send (whole RPC messages).
    pub queue: std::collections::VecDeque<Vec<u8>>,
    /// Connections whose backchannel is open, with its limits.
    pub open: Vec<(crate::ConnId, crate::service::BackwardChannel)>,
    /// Every `backward_channel` report, in order.
    pub events: Vec<(crate::ConnId, Option<crate::service::BackwardChannel>)>,
    /// Calls handed to the engine: connection and XID.
    pub sent: Vec<(crate::ConnId, u32)>,
    /// Calls that did not fit the buffer the engine offered (failed here).
    pub too_big: Vec<Vec<u8>>,
    /// Replies received: connection and message.
    pub replies: Vec<(crate::ConnId, Vec<u8>)>,
}

impl crate::service::Service for BackService {
    fn fills_data_in_call(&self) -> bool {
        self.fwd.fills_data_in_call()
    }
    fn reply_data_hint(&mut self, call: &CallView<'_>) -> usize {
        self.fwd.reply_data_hint(call)
    }
    fn handle_call(&mut self, call: &CallView<'_>, reply: &mut ReplyBuilder<'_>) -> Result<(), ServiceError> {
        self.fwd.handle_call(call, reply)
    }
    fn has_backward_calls(&self) -> bool {
        !self.queue.is_empty()
    }
    fn poll_backward_call(&mut self, conn: crate::ConnId, buf: &mut [u8]) -> Option<usize> {
        if !self.open.iter().any(|(c, _)| *c == conn) {
            return None;
        }
        let msg = self.queue.pop_front()?;
        if msg.len() > buf.len() {
            // The service's part of "a Call that does not fit is not sent".
            self.too_big.push(msg);
            return None;
        }
        buf[..msg.len()].copy_from_slice(&msg);
        let xid = u32::from_be_bytes(msg[..4].try_into().ok()?);
        self.sent.push((conn, xid));
        Some(msg.len())
    }
    fn handle_backward_reply(&mut self, conn: crate::ConnId, msg: &[u8]) {
        self.replies.push((conn, msg.to_vec()));
    }
    fn backward_channel(&mut self, conn: crate::ConnId, chan: Option<crate::service::BackwardChannel>) {
        self.events.push((conn, chan));
        self.open.retain(|(c, _)| *c != conn);
        if let Some(ch) = chan {
            self.open.push((conn, ch));
        }
    }
}
