//! The backward direction, client side (RFC 8167; draft -09 s3.2, s4.2.2):
//! an opt-in backchannel ([`RequesterConfig::backward_credits`]) on which
//! the responder calls this requester. Owning core only.
//!
//! # Rules followed
//!
//! - Receives (RFC 8167 s4.3.1): beside one receive per forward credit,
//!   the requester posts one per backward credit, and reposts each as it
//!   is consumed; a Call held until its user answers holds its receive
//!   buffer, not a posted receive. Reconnecting is a new requester.
//! - Direction (RFC 8167 s3, s5.1; draft -09 s3.2): a message conveying an
//!   RPC Call (v1: `msg_type` CALL in the inline RPC message; v2: the
//!   RPCRDMA2_F_RESPONSE flag clear on RDMA2_MSG / RDMA2_NOMSG) is a
//!   backward Call. It is told apart before any XID lookup, so a backward
//!   Call whose XID equals a forward Call's never completes that Call, and
//!   its `rdma_credit` (the server's backward credit request) never changes
//!   the forward credit limit.
//! - Credits (RFC 8167 s4.1): this side is the backward responder. Every
//!   backward Reply grants [`RequesterConfig::backward_credits`], the
//!   receives kept for backward Calls. A Call beyond them (more held and
//!   unanswered than that) is a backward credit overrun: dropped and
//!   counted (`backward_overruns`), never held.
//! - Inline only (RFC 8167 s5.1, s5.2; draft -09 s4.2.2, advertised as
//!   RDMA2_RVREQSUP_INLINE in our RDMA2_CONNPROP, NONE when the backchannel
//!   is off): a backward Call with chunks is refused with RDMA_ERROR
//!   ERR_CHUNK (v1, RFC 8166 s4.5) or RDMA2_ERROR RDMA2_ERR_BAD_XDR (v2,
//!   draft s5.3.3) for its XID; a Reply is sent inline with the chunk-free
//!   header, and one larger than the responder's inline threshold is not
//!   sent ([`SubmitError::TooLarge`]).
//! - Without a backchannel (`backward_credits` 0), a backward Call is
//!   dropped and counted (`backward_unsupported`).
//! - Loss: held Calls are dropped with the connection (their buffers back,
//!   `backward_lost`); the server's ULP retransmits on a new one (s5.4).

use super::*;

/// A backward Call received and not yet answered: the receive buffer that
/// holds it and where its RPC message is.
#[derive(Clone, Copy, Debug)]
pub(super) struct HeldCall {
    xid: u32,
    buf: BufRef,
    at: u32,
    len: u32,
}

/// Whether transport header `h` conveys an RPC Call: in v2 an
/// RDMA2_MSG / RDMA2_NOMSG without RPCRDMA2_F_RESPONSE (draft -09 s3.2),
/// in v1 an RDMA_MSG whose RPC message has `msg_type` CALL (RFC 8167 s5.1).
/// Forward Replies never do.
#[inline(always)]
pub(super) fn carries_rpc_call(h: &header::Header<'_>) -> bool {
    h.rpc_direction() == Some(header::RpcDirection::Call)
}

impl<'p, F: Fabric> Requester<'p, F> {
    /// Take a received backward Call (`h`, decoded from receive buffer `b`
    /// of `len` bytes): held for the user, refused, or dropped, by the
    /// rules above. The receive buffer is held or given back here.
    #[cold]
    #[inline(never)]
    pub(super) fn take_backward_call(&mut self, b: BufRef, h: &header::Header<'_>) {
        if self.cfg.backward_credits == 0 {
            self.stats.backward_unsupported += 1;
            self.bufs.put(b);
            return;
        }
        let inline = match h.body {
            Body::Msg {
                chunks,
                payload,
                payload_offset,
                ..
            } if chunks.is_empty() => Some((payload_offset as u32, payload.len() as u32)),
            _ => None,
        };
        let Some((at, len)) = inline else {
            self.stats.backward_calls_refused += 1;
            self.bufs.put(b);
            let err = if h.vers == RPCRDMA_VERSION_2 {
                BodyOut::ErrorV2(header::V2Error::BadXdr)
            } else {
                BodyOut::ErrorV1(header::V1Error::Chunk)
            };
            let (xid, vers) = (h.xid, h.vers);
            // Best effort: without a buffer or a connection the refusal is
            // only counted.
            let _ = self.send_backward(vers, xid, err, &[]);
            return;
        };
        if self.bc_held.len() >= self.cfg.backward_credits as usize {
            self.stats.backward_overruns += 1;
            self.bufs.put(b);
            return;
        }
        self.stats.backward_calls += 1;
        self.bc_held.push(HeldCall {
            xid: h.xid,
            buf: b,
            at,
            len,
        });
        debug_assert!(
            self.bc_held.len() <= self.cfg.backward_credits as usize,
            "backward Calls held beyond the backward credits"
        );
    }

    /// Backward-direction Calls received and not yet answered, oldest
    /// first: each one's XID and whole RPC Call message. Answer each with
    /// [`Requester::reply_backward`].
    pub fn backward_calls(&self) -> impl Iterator<Item = (u32, &[u8])> + '_ {
        self.bc_held.iter().map(|c| {
            let bytes = self.bufs.bytes(c.buf);
            (c.xid, bytes.get(c.at as usize..(c.at + c.len) as usize).unwrap_or(&[]))
        })
    }

    /// Answer backward Call `xid` with the RPC Reply `msg` (the whole
    /// message, its XID included), inline (RFC 8167 s5.2): the Call's
    /// buffer goes back. `UnknownXid` when no such Call is held;
    /// `TooLarge` (the Call stays held) when the Reply does not fit the
    /// responder's inline threshold; `NotConnected` / `NoBuffers` when it
    /// cannot be sent now (the Call stays held).
    pub fn reply_backward(&mut self, xid: u32, msg: &[u8]) -> Result<(), SubmitError> {
        let Some(k) = self.bc_held.iter().position(|c| c.xid == xid) else {
            return Err(SubmitError::UnknownXid);
        };
        if self.link != LinkState::Ready {
            return Err(SubmitError::NotConnected);
        }
        let hdr = plan::chunk_free_header_len(self.vers).ok_or(SubmitError::NotConnected)?;
        if hdr + msg.len() > self.call_inline_max as usize {
            return Err(SubmitError::TooLarge);
        }
        let vers = self.vers;
        let body = BodyOut::Msg {
            chunks: header::ChunksOut::default(),
            inv_handle: 0,
        };
        self.send_backward(vers, xid, body, msg)?;
        let held = self.bc_held.remove(k);
        self.bufs.put(held.buf);
        self.stats.backward_replies += 1;
        Ok(())
    }

    /// Send a backward-direction answer with `xid` in version `vers`: the
    /// header `body` (a chunk-free RDMA_MSG, or an error), then `msg`,
    /// granting the backward credits (RFC 8167 s4.1), RPCRDMA2_F_RESPONSE
    /// set in v2 (draft s3.2). The buffer goes back when its Send completes.
    fn send_backward(&mut self, vers: u32, xid: u32, body: BodyOut<'_>, msg: &[u8]) -> Result<(), SubmitError> {
        let conn = self.conn.ok_or(SubmitError::NotConnected)?;
        let b = self.bufs.get(Class::Send).ok_or(SubmitError::NoBuffers)?;
        let flags = if vers == RPCRDMA_VERSION_2 {
            header::RPCRDMA2_F_RESPONSE
        } else {
            0
        };
        let h = HeaderOut {
            xid,
            vers,
            credits: self.cfg.backward_credits.max(1),
            flags,
            body,
        };
        let out = self.bufs.bytes_mut(b);
        let Some(n) = header::encode(&h, out)
            .ok()
            .and_then(|n| out.get_mut(n..n + msg.len()).map(|o| (n, o)))
            .map(|(n, o)| {
                o.copy_from_slice(msg);
                n + msg.len()
            })
        else {
            self.bufs.put(b);
            return Err(SubmitError::TooLarge);
        };
        let wr = SendWr::new(
            WrId::new(TAG_BACK, b.to_u64()),
            SendOp::Send,
            self.bufs.local(b, n as u32),
            Segment::default(),
        );
        if self.fabric.post_send(conn, &wr).is_err() {
            self.bufs.put(b);
            return Err(SubmitError::NotConnected);
        }
        self.bc_sends_out += 1;
        Ok(())
    }

    /// The Send of a backward answer completed: its buffer goes back.
    #[cold]
    #[inline(never)]
    pub(super) fn backward_send_done(&mut self, wc: Completion) {
        crate::count::dec(&mut self.bc_sends_out, "backward Sends outstanding");
        if let Some(b) = BufRef::from_u64(wc.wr_id.index()) {
            self.bufs.put(b);
        }
        if !wc.status.is_success() {
            self.on_wc_error(wc.status);
        }
    }

    /// The connection is gone: held backward Calls are dropped.
    #[cold]
    #[inline(never)]
    pub(super) fn drop_backward_calls(&mut self) {
        while let Some(c) = self.bc_held.pop() {
            self.stats.backward_lost += 1;
            self.bufs.put(c.buf);
        }
    }

    /// Backward Calls held and not yet answered.
    pub fn backward_held(&self) -> usize {
        self.bc_held.len()
    }
}
