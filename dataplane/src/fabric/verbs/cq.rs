//! Completion queues and shared receive queues: creating them, and polling the
//! two hardware CQs behind a [`CqId`] into [`Completion`]s.

use super::*;

pub(super) fn wc_zero() -> sys::ibv_wc {
    // SAFETY: ibv_wc is plain old data (integers and a union of integers).
    unsafe { std::mem::zeroed() }
}

impl VerbsFabric {
    /// Turn one hardware completion into a fabric completion; `None` when it
    /// is the success of an unsignaled send.
    fn translate(&mut self, wc: &sys::ibv_wc, send_side: bool, reap: &mut Vec<usize>) -> Option<Completion> {
        let st = status::wc_status(wc.status);
        let ci = self.by_qp.get(&wc.qp_num).copied();
        let conn = ci.map_or(ConnId(u32::MAX), |i| ConnId(self.conns.id_of(i)));
        let mut opcode = if send_side { WcOpcode::Send } else { WcOpcode::Recv };
        let mut report = true;
        if let Some(i) = ci {
            if let Some(c) = self.conns.get_mut(i) {
                let mut posted = None;
                if send_side {
                    if let Some(e) = c.sq.pop_front() {
                        opcode = e.opcode;
                        report = e.signaled || !st.is_success();
                        if e.internal {
                            c.sq_internal -= 1;
                        }
                        posted = Some(e);
                    }
                } else {
                    if c.srq.is_none() {
                        c.rq_out = c.rq_out.saturating_sub(1);
                    }
                    // A window the peer invalidated (Send with Invalidate)
                    // is free to bind again on this QP.
                    if st.is_success() && wc.wc_flags & self.inv_flags != 0 {
                        // SAFETY: both members of the union are u32.
                        let k = unsafe { wc.imm_data_invalidated_rkey_union.invalidated_rkey };
                        if let Some(p) = c.windows.iter().position(|w| w.0 == k) {
                            let (k, mw) = c.windows.swap_remove(p);
                            c.free_mws.push((mw, k));
                        }
                    }
                }
                let dead = c.state == State::Error;
                if !st.is_success() && !dead {
                    self.last_wc_error = Some(WcError {
                        qp_num: wc.qp_num,
                        status: wc.status,
                        vendor_err: wc.vendor_err,
                        internal: posted.is_some_and(|e| e.internal),
                        opcode: Some(opcode),
                    });
                    // Any error (a flush too: the QP went to error on its own)
                    // ends the connection.
                    self.fail(i, CmEvent::Disconnected { conn });
                }
                if self
                    .conns
                    .get(i)
                    .is_some_and(|c| c.state == State::Error && c.terminal_delivered)
                {
                    reap.push(i);
                }
            }
        }
        if st.is_success() {
            if let Some(o) = status::wc_opcode(wc.opcode) {
                opcode = o;
            }
        }
        let with_inv = !send_side && wc.wc_flags & self.inv_flags != 0;
        // SAFETY: both members of the union are u32 (any bit pattern is
        // valid); it holds the invalidated rkey when WITH_INV is set.
        let inv_rkey = unsafe { wc.imm_data_invalidated_rkey_union.invalidated_rkey };
        report.then_some(Completion {
            wr_id: WrId(wc.wr_id),
            status: st,
            opcode,
            conn,
            byte_len: wc.byte_len,
            invalidated_rkey: (st.is_success() && with_inv).then_some(inv_rkey),
        })
    }

    /// Poll one hardware CQ into `out`; returns how many were written.
    fn poll_hw(&mut self, qi: usize, send_side: bool, out: &mut [Completion], reap: &mut Vec<usize>) -> usize {
        let mut n = 0;
        while n < out.len() {
            let want = (out.len() - n).min(WC_BATCH);
            let cq = if send_side {
                self.cqs[qi].send
            } else {
                self.cqs[qi].recv
            };
            // SAFETY: `cq` is a live CQ of ours; `self.wcs` has room for
            // WC_BATCH >= `want` entries.
            let got = unsafe { sys::ibv_poll_cq(cq, want as c_int, self.wcs.as_mut_ptr()) };
            if got <= 0 {
                break;
            }
            self.note_polled(qi, send_side);
            for k in 0..got as usize {
                let wc = self.wcs[k];
                if let Some(c) = self.translate(&wc, send_side, reap) {
                    out[n] = c;
                    n += 1;
                }
            }
            if (got as usize) < want {
                break;
            }
        }
        n
    }

    /// [`Fabric::create_cq`] for this provider.
    pub(super) fn do_create_cq(&mut self, depth: u32) -> Result<CqId, FabricError> {
        let max = self.limits.max_cqe.min(MAX_QUEUE_DEPTH);
        if depth == 0 || depth > max {
            return Err(FabricError::Other(format!("CQ depth must be in 1..={max}")));
        }
        // The send CQ also takes the completions of the provider's own
        // window binds and invalidations (reported to no one, but they
        // occupy entries until polled).
        let send_depth = depth.saturating_mul(INTERNAL_SQ_FACTOR).min(max).max(depth);
        // SAFETY: `self.ctx` is open; `self.comp` is our completion channel
        // (interrupt mode, `wake`); vector 0.
        let send = unsafe { sys::ibv_create_cq(self.ctx, send_depth as c_int, ptr::null_mut(), self.comp, 0) };
        if send.is_null() {
            return Err(errno("ibv_create_cq"));
        }
        // SAFETY: as above.
        let recv = unsafe { sys::ibv_create_cq(self.ctx, depth as c_int, ptr::null_mut(), self.comp, 0) };
        if recv.is_null() {
            let e = errno("ibv_create_cq");
            // SAFETY: `send` was just created and has no QP.
            unsafe { sys::ibv_destroy_cq(send) };
            return Err(e);
        }
        self.cqs.push(Cq {
            send,
            recv,
            soft: VecDeque::new(),
            turn: false,
        });
        Ok(CqId(self.cqs.len() as u32 - 1))
    }

    /// [`Fabric::create_srq`] for this provider.
    pub(super) fn do_create_srq(&mut self, depth: u32) -> Result<SrqId, FabricError> {
        let max = self.limits.max_srq_wr.min(MAX_QUEUE_DEPTH);
        if depth == 0 || depth > max {
            return Err(FabricError::Other(format!("SRQ depth must be in 1..={max}")));
        }
        let mut attr = sys::ibv_srq_init_attr {
            srq_context: ptr::null_mut(),
            attr: sys::ibv_srq_attr {
                max_wr: depth,
                max_sge: 1,
                srq_limit: 0,
            },
        };
        // SAFETY: `self.pd` is our PD; `attr` is a valid init structure.
        let srq = unsafe { sys::ibv_create_srq(self.pd, &mut attr) };
        if srq.is_null() {
            return Err(errno("ibv_create_srq"));
        }
        self.srqs.push(Srq { srq });
        Ok(SrqId(self.srqs.len() as u32 - 1))
    }

    /// [`Fabric::poll_cq`] for this provider.
    pub(super) fn do_poll_cq(&mut self, cq: CqId, out: &mut [Completion]) -> usize {
        let qi = cq.0 as usize;
        if qi >= self.cqs.len() || out.is_empty() {
            return 0;
        }
        // Staged sends go out before their completions are looked for.
        self.flush_all();
        let mut n = 0;
        while n < out.len() {
            let Some(c) = self.cqs[qi].soft.pop_front() else { break };
            out[n] = c;
            n += 1;
        }
        let mut reap = Vec::new();
        let recv_first = self.cqs[qi].turn;
        self.cqs[qi].turn = !recv_first;
        for send_side in [!recv_first, recv_first] {
            if n < out.len() {
                n += self.poll_hw(qi, send_side, &mut out[n..], &mut reap);
            }
        }
        for ci in reap {
            self.try_reap(ci);
        }
        n
    }
}
