//! Queue pairs: checking a [`QpConfig`] against the device, creating the QP,
//! posting send-queue and receive work requests, moving a connection to the
//! error state and reaping it once everything it had outstanding completed.

use super::*;

pub(super) fn post_err(op: &'static str, rc: c_int) -> FabricError {
    if rc == libc::ENOMEM {
        FabricError::QueueFull { what: "work queue" }
    } else {
        rc_err(op, rc)
    }
}

/// Destroy a connection's QP (when it has one) and its CM id.
pub(super) fn destroy_conn_id(id: *mut sys::rdma_cm_id, has_qp: bool) {
    // SAFETY: `id` is a live CM id owned by the caller, which forgets it; its
    // QP (if any) was created with rdma_create_qp on it; every event of it was
    // acknowledged (pump_cm acks at once), so rdma_destroy_id does not wait.
    unsafe {
        if has_qp {
            sys::rdma_destroy_qp(id);
        }
        sys::rdma_destroy_id(id);
    }
}

impl VerbsFabric {
    /// The QP number of a connection (for diagnostics), once its QP exists.
    pub fn qp_num(&self, conn: ConnId) -> Option<u32> {
        let c = self.conns.get(self.conns.index(conn.0)?)?;
        (!c.qp.is_null()).then_some(c.qp_num)
    }

    /// The first error completion (other than a flush) of the connection
    /// that failed last: status and vendor error as the device gave them.
    /// For diagnostics: the engine sees only [`WcStatus`].
    pub fn last_wc_error(&self) -> Option<WcError> {
        self.last_wc_error
    }

    /// The transport retry settings of the connection's QP as the device
    /// holds them (for diagnostics), once its QP exists and the query works.
    pub fn qp_transport(&self, conn: ConnId) -> Option<QpTransport> {
        let c = self.conns.get(self.conns.index(conn.0)?)?;
        if c.qp.is_null() {
            return None;
        }
        // SAFETY: plain C structs, all-zero is a valid value of each.
        let mut attr: sys::ibv_qp_attr = unsafe { std::mem::zeroed() };
        let mut init: sys::ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        let mask = sys::ibv_qp_attr_mask::IBV_QP_TIMEOUT
            | sys::ibv_qp_attr_mask::IBV_QP_RETRY_CNT
            | sys::ibv_qp_attr_mask::IBV_QP_RNR_RETRY
            | sys::ibv_qp_attr_mask::IBV_QP_MIN_RNR_TIMER;
        // SAFETY: `c.qp` is a live QP (non-null, destroyed only with its
        // slot); `attr` and `init` are valid for writes for the call.
        let rc = unsafe { sys::ibv_query_qp(c.qp, &mut attr, mask.0 as c_int, &mut init) };
        (rc == 0).then_some(QpTransport {
            ack_timeout: attr.timeout,
            retry_cnt: attr.retry_cnt,
            rnr_retry: attr.rnr_retry,
            min_rnr_timer: attr.min_rnr_timer,
        })
    }

    /// Inline bytes the connection's QP was created with.
    pub fn max_inline(&self, conn: ConnId) -> Option<u32> {
        let c = self.conns.get(self.conns.index(conn.0)?)?;
        (!c.qp.is_null()).then_some(c.max_inline)
    }

    pub(super) fn check_qp(&self, qp: &QpConfig) -> Result<(usize, Option<usize>), FabricError> {
        let (cq, srq) = qp.check_ids(self.cqs.len(), self.srqs.len())?;
        let max = self.limits.max_qp_wr.min(MAX_QUEUE_DEPTH);
        if qp.send_depth == 0 || qp.send_depth > max {
            return Err(FabricError::Other(format!("send_depth must be in 1..={max}")));
        }
        if srq.is_none() && (qp.recv_depth == 0 || qp.recv_depth > max) {
            return Err(FabricError::Other(format!("recv_depth must be in 1..={max}")));
        }
        Ok((cq, srq))
    }

    /// Create the RC QP of connection slot `ci` on its CM id.
    pub(super) fn create_qp(&mut self, ci: usize) -> Result<(), FabricError> {
        let Some(c) = self.conns.get(ci) else {
            return Err(FabricError::Other("connection vanished".into()));
        };
        let cq = &self.cqs[c.cq];
        let want_inline = if c.cfg.max_inline > 0 {
            c.cfg.max_inline
        } else {
            self.cfg.max_inline
        };
        let mut attr_out = None;
        for inline in [want_inline, 0] {
            // SAFETY: ibv_qp_init_attr is plain old data; zero is valid.
            let mut attr: sys::ibv_qp_init_attr = unsafe { std::mem::zeroed() };
            attr.send_cq = cq.send;
            attr.recv_cq = cq.recv;
            attr.srq = c.srq.map_or(ptr::null_mut(), |s| self.srqs[s].srq);
            // Room for the provider's window binds and invalidations too.
            attr.cap.max_send_wr = c
                .cfg
                .send_depth
                .saturating_mul(INTERNAL_SQ_FACTOR)
                .min(self.limits.max_qp_wr.max(c.cfg.send_depth));
            attr.cap.max_recv_wr = if c.srq.is_some() { 0 } else { c.cfg.recv_depth };
            attr.cap.max_send_sge = (MAX_SGE as u32).min(self.limits.max_sge.max(1));
            attr.cap.max_recv_sge = 1;
            attr.cap.max_inline_data = inline;
            attr.qp_type = sys::ibv_qp_type::IBV_QPT_RC;
            attr.sq_sig_all = 0;
            // SAFETY: `c.id` is a live CM id bound to our device (checked by
            // the caller), `self.pd` our PD, `attr` a valid init structure
            // naming our CQs / SRQ; rdma_create_qp stores the QP in `id->qp`.
            let rc = unsafe { sys::rdma_create_qp(c.id, self.pd, &mut attr) };
            if rc == 0 {
                attr_out = Some(attr);
                break;
            }
            if inline == 0 {
                break;
            }
        }
        let Some(attr) = attr_out else {
            return Err(errno("rdma_create_qp"));
        };
        // SAFETY: rdma_create_qp succeeded, so `id->qp` is the new QP.
        let (qp, qp_num) = unsafe {
            let qp = (*c.id).qp;
            (qp, (*qp).qp_num)
        };
        let Some(c) = self.conns.get_mut(ci) else {
            return Err(FabricError::Other("connection vanished".into()));
        };
        c.qp = qp;
        c.qp_num = qp_num;
        c.max_inline = attr.cap.max_inline_data;
        self.by_qp.insert(qp_num, ci);
        Ok(())
    }

    /// Post receives kept while the QP did not exist.
    pub(super) fn post_early_recvs(&mut self, ci: usize) {
        let Some(c) = self.conns.get_mut(ci) else { return };
        let early = std::mem::take(&mut c.early_recvs);
        let mut failed = Vec::new();
        for wr in early {
            if self.post_recv_raw(ci, &wr).is_err() {
                failed.push(wr);
            }
        }
        // What could not be posted completes as flushed (the connection fails).
        if !failed.is_empty() {
            let id = ConnId(self.conns.id_of(ci));
            if let Some(c) = self.conns.get_mut(ci) {
                c.early_recvs = failed;
            }
            self.fail(ci, CmEvent::Disconnected { conn: id });
        }
    }

    fn post_recv_raw(&mut self, ci: usize, wr: &RecvWr) -> Result<(), FabricError> {
        let mut sge = self.sge(&wr.buf)?;
        let c = self
            .conns
            .get_mut(ci)
            .ok_or(FabricError::Other("connection vanished".into()))?;
        let mut rwr = sys::ibv_recv_wr {
            wr_id: wr.wr_id.0,
            next: ptr::null_mut(),
            sg_list: &mut sge,
            num_sge: 1,
        };
        let mut bad: *mut sys::ibv_recv_wr = ptr::null_mut();
        // SAFETY: `c.qp` is a live QP of ours; `rwr` and `sge` are valid for
        // the call (the provider copies them).
        let rc = unsafe { sys::ibv_post_recv(c.qp, &mut rwr, &mut bad) };
        if rc != 0 {
            return Err(post_err("ibv_post_recv", rc));
        }
        c.rq_out += 1;
        Ok(())
    }

    /// Move a connection to the error state (once): QP to ERR so everything
    /// posted flushes, tell the peer, flush early receives, queue `terminal`
    /// (rewritten to the right kind for the connection's state).
    pub(super) fn fail(&mut self, ci: usize, terminal: CmEvent) {
        let id = ConnId(self.conns.id_of(ci));
        // What was staged goes out first, as it would have before the
        // failure without batching (a reply posted just before a local
        // disconnect); a refused chain fails the connection in there.
        if self
            .conns
            .get(ci)
            .is_some_and(|c| !c.staged.is_empty() && !c.terminal_queued)
        {
            self.flush_conn(ci);
        }
        let Some(c) = self.conns.get_mut(ci) else { return };
        if c.terminal_queued {
            return;
        }
        let was = c.state;
        c.state = State::Error;
        c.terminal_queued = true;
        if !c.qp.is_null() {
            // SAFETY: ibv_qp_attr is plain old data; zero is valid.
            let mut a: sys::ibv_qp_attr = unsafe { std::mem::zeroed() };
            a.qp_state = sys::ibv_qp_state::IBV_QPS_ERR;
            // SAFETY: `c.qp` is a live QP; only the state is modified.
            unsafe { sys::ibv_modify_qp(c.qp, &mut a, sys::ibv_qp_attr_mask::IBV_QP_STATE.0 as c_int) };
        }
        if matches!(was, State::Established | State::Accepting | State::Connecting) {
            // SAFETY: `c.id` is a live CM id; on one not connected yet this
            // fails harmlessly (the result is not needed).
            unsafe { sys::rdma_disconnect(c.id) };
        }
        let cq = c.cq;
        for wr in c.early_recvs.drain(..) {
            self.cqs[cq].soft.push_back(Completion {
                wr_id: wr.wr_id,
                status: WcStatus::Flushed,
                opcode: WcOpcode::Recv,
                conn: id,
                byte_len: 0,
                invalidated_rkey: None,
            });
        }
        let ev = match (was, terminal) {
            (State::Established, _) => CmEvent::Disconnected { conn: id },
            (_, CmEvent::Rejected { private_data, .. }) => CmEvent::Rejected { conn: id, private_data },
            (State::Connecting, _) => CmEvent::Unreachable { conn: id },
            (_, CmEvent::Disconnected { .. }) => CmEvent::Disconnected { conn: id },
            _ => CmEvent::Unreachable { conn: id },
        };
        self.events.push_back(ev);
    }

    /// Destroy a dead connection's QP and id once its terminal event was
    /// polled and all its work completed.
    pub(super) fn try_reap(&mut self, ci: usize) {
        let Some(c) = self.conns.get(ci) else { return };
        if !(c.state == State::Error && c.terminal_delivered && c.drained()) {
            return;
        }
        let Some(c) = self.conns.remove(ci) else { return };
        if !c.qp.is_null() {
            self.by_qp.remove(&c.qp_num);
        }
        destroy_conn_id(c.id, !c.qp.is_null());
        // The QP's windows go with it.
        let dead: Vec<*mut sys::ibv_mw> = c
            .windows
            .iter()
            .map(|w| w.1)
            .chain(c.free_mws.iter().map(|w| w.0))
            .collect();
        if !dead.is_empty() {
            self.mws.retain(|m| !dead.contains(m));
            for mw in dead {
                // SAFETY: a window this fabric allocated, still listed
                // nowhere else; its QP was destroyed above.
                unsafe { sys::ibv_dealloc_mw(mw) };
            }
        }
    }

    /// [`Fabric::post_send`] for this provider: checks the request and
    /// stages it on the connection (see [`VerbsFabric::flush_conn`]); a
    /// connection with [`STAGE_MAX`] staged is flushed at once.
    pub(super) fn do_post_send(&mut self, conn: ConnId, wr: &SendWr) -> Result<(), FabricError> {
        let ci = self.conns.index(conn.0).ok_or(FabricError::NotConnected(conn))?;
        if wr.num_sge as usize > MAX_SGE {
            return Err(FabricError::Other(format!("num_sge {} > {MAX_SGE}", wr.num_sge)));
        }
        let mut sges = [sys::ibv_sge {
            addr: 0,
            length: 0,
            lkey: 0,
        }; MAX_SGE];
        let mut n = 0;
        let mut total: u64 = 0;
        for b in wr.sges() {
            let s = self.sge(b)?;
            // A zero-length SGE means 2^31 bytes on some devices: leave it out.
            if s.length > 0 {
                sges[n] = s;
                n += 1;
                total += s.length as u64;
            }
        }
        let c = self.conns.get_mut(ci).ok_or(FabricError::NotConnected(conn))?;
        // After rdma_accept the QP is ready to send: the first Call may arrive
        // (and be answered) before the passive side sees ESTABLISHED.
        if !matches!(c.state, State::Established | State::Accepting) || c.qp.is_null() {
            return Err(FabricError::NotConnected(conn));
        }
        if c.sq.len() - c.sq_internal as usize >= c.cfg.send_depth as usize {
            return Err(FabricError::QueueFull { what: "send queue" });
        }
        use sys::ibv_wr_opcode as o;
        let (opcode, wc_op) = match wr.op {
            SendOp::Send => (o::IBV_WR_SEND, WcOpcode::Send),
            SendOp::SendWithInv { .. } => (o::IBV_WR_SEND_WITH_INV, WcOpcode::Send),
            SendOp::RdmaWrite => (o::IBV_WR_RDMA_WRITE, WcOpcode::RdmaWrite),
            SendOp::RdmaRead => (o::IBV_WR_RDMA_READ, WcOpcode::RdmaRead),
        };
        // SAFETY: ibv_send_wr is plain old data; zero is valid and every field
        // the opcode uses is set below (`next` and `sg_list` when the chain
        // is linked).
        let mut w: sys::ibv_send_wr = unsafe { std::mem::zeroed() };
        w.wr_id = wr.wr_id.0;
        w.num_sge = n as c_int;
        w.opcode = opcode;
        let is_send = matches!(wr.op, SendOp::Send | SendOp::SendWithInv { .. });
        let inline = is_send && total > 0 && total <= c.max_inline as u64;
        if inline {
            w.send_flags = sys::ibv_send_flags::IBV_SEND_INLINE.0;
        }
        match wr.op {
            SendOp::SendWithInv { rkey } => w.imm_data_invalidated_rkey_union.invalidated_rkey = rkey,
            SendOp::RdmaWrite | SendOp::RdmaRead => {
                w.wr.rdma = sys::rdma_t {
                    remote_addr: wr.remote.offset,
                    rkey: wr.remote.handle,
                }
            }
            SendOp::Send => {}
        }
        let mut st = Staged {
            wr: w,
            sges,
            inline: [0; STAGE_INLINE],
            inline_len: 0,
            internal: false,
        };
        // An inline Send's bytes are the ones at post time: copied now.
        let copied = inline && total as usize <= STAGE_INLINE;
        if copied {
            let mut at = 0usize;
            for sg in &sges[..n] {
                let len = sg.length as usize;
                // SAFETY: `sge` checked the buffer lies inside a region
                // registered with this fabric (mapped for its lifetime); the
                // total is at most STAGE_INLINE, the room in `st.inline`.
                unsafe { ptr::copy_nonoverlapping(sg.addr as *const u8, st.inline.as_mut_ptr().add(at), len) };
                at += len;
            }
            st.inline_len = at as u16;
        }
        c.staged.push(st);
        c.sq.push_back(SqEntry {
            signaled: wr.signaled,
            opcode: wc_op,
            internal: false,
            wr_id: wr.wr_id.0,
        });
        let full = c.staged.len() >= STAGE_MAX || (inline && !copied);
        if !c.dirty {
            c.dirty = true;
            self.dirty.push(ci);
        }
        if full {
            self.flush_conn(ci);
        }
        Ok(())
    }

    /// Stages the provider's own request `wr` (a window bind or
    /// invalidation, signaled, `INTERNAL_WR_ID`) on connection slot `ci`,
    /// in order with the consumer's staged requests; posted with them (see
    /// [`VerbsFabric::flush_conn`]). The caller checked the connection is
    /// ready and the send queue has room.
    pub(super) fn stage_internal(&mut self, ci: usize, wr: sys::ibv_send_wr) {
        let Some(c) = self.conns.get_mut(ci) else { return };
        c.staged.push(Staged {
            wr,
            sges: [sys::ibv_sge {
                addr: 0,
                length: 0,
                lkey: 0,
            }; MAX_SGE],
            inline: [0; STAGE_INLINE],
            inline_len: 0,
            internal: true,
        });
        c.sq.push_back(SqEntry {
            signaled: false,
            opcode: WcOpcode::Send,
            internal: true,
            wr_id: INTERNAL_WR_ID.0,
        });
        c.sq_internal += 1;
        let full = c.staged.len() >= STAGE_MAX;
        if !c.dirty {
            c.dirty = true;
            self.dirty.push(ci);
        }
        if full {
            self.flush_conn(ci);
        }
    }

    /// Posts every connection's staged send work requests.
    pub(super) fn flush_all(&mut self) {
        while let Some(ci) = self.dirty.pop() {
            self.flush_conn(ci);
        }
    }

    /// Posts connection slot `ci`'s staged send work requests as one chain
    /// (one `ibv_post_send`, one doorbell: on rxe and siw one system call
    /// instead of one per request), every request signaled (see the module
    /// documentation). Requests the device refuses (and those after
    /// them) complete Flushed through the CQ's provider-made completions and
    /// the connection fails, as a refused post of one would have made the
    /// consumer end it.
    pub(super) fn flush_conn(&mut self, ci: usize) {
        let Some(c) = self.conns.get_mut(ci) else { return };
        c.dirty = false;
        let n = c.staged.len();
        if n == 0 {
            return;
        }
        let base = c.sq.len() - n;
        let signaled = sys::ibv_send_flags::IBV_SEND_SIGNALED.0;
        for k in 0..n {
            let last = k + 1 == n;
            let next: *mut sys::ibv_send_wr = if last { ptr::null_mut() } else { &mut c.staged[k + 1].wr };
            let st = &mut c.staged[k];
            st.wr.next = next;
            if st.inline_len > 0 {
                // The provider copies inline data from the SGE's address
                // (no key is checked).
                st.sges[0] = sys::ibv_sge {
                    addr: st.inline.as_ptr() as u64,
                    length: u32::from(st.inline_len),
                    lkey: 0,
                };
                st.wr.num_sge = 1;
            }
            st.wr.sg_list = st.sges.as_mut_ptr();
            st.wr.send_flags |= signaled;
            debug_assert_eq!(
                c.sq[base + k].internal,
                st.internal,
                "staged requests are the tail of sq, in order"
            );
        }
        let mut bad: *mut sys::ibv_send_wr = ptr::null_mut();
        // SAFETY: `c.qp` is a live QP (a request is staged only on a QP that
        // exists, and a failing connection flushes or discards before it
        // leaves the ready states); the chain's `next` and `sg_list`
        // pointers point into `c.staged`, which is not touched until the
        // call returns (the provider copies requests and inline data).
        let rc = unsafe { sys::ibv_post_send(c.qp, &mut c.staged[0].wr, &mut bad) };
        self.counts.post_send_calls += 1;
        let c = self.conns.get_mut(ci).expect("live");
        let posted = if rc == 0 {
            n
        } else {
            // The requests before `bad` were posted.
            let first: *const sys::ibv_send_wr = &c.staged[0].wr;
            (0..n)
                .find(|&k| ptr::eq(&c.staged[k].wr, bad.cast_const()))
                .unwrap_or_else(|| if bad.is_null() || ptr::eq(first, bad) { 0 } else { n })
        };
        self.counts.send_wrs += posted as u64;
        // A posted type-2 bind gave its window the key it names: record it
        // where the provider reads the window's current key for the next
        // bind (see `do_expose`).
        for st in c.staged[..posted].iter().filter(|st| st.internal) {
            if st.wr.opcode == sys::ibv_wr_opcode::IBV_WR_BIND_MW {
                // SAFETY: the union holds `bind_mw` for a BIND_MW request;
                // its window was allocated by this fabric and is live (a
                // connection's windows are freed when it is reaped, after
                // its staged requests were posted or discarded), and no
                // other thread uses it.
                unsafe {
                    let b = st.wr.bind_mw_tso_union.bind_mw;
                    (*b.mw).rkey = b.rkey;
                }
            }
        }
        c.staged.clear();
        if posted < n {
            let conn = ConnId(self.conns.id_of(ci));
            self.discard_tail(ci, n - posted, conn);
            self.fail(ci, CmEvent::Disconnected { conn });
        }
    }

    /// The last `k` entries of slot `ci`'s send queue were never posted:
    /// remove them, each reported Flushed through the CQ's provider-made
    /// completions (in posting order).
    fn discard_tail(&mut self, ci: usize, k: usize, conn: ConnId) {
        let Some(c) = self.conns.get_mut(ci) else { return };
        let cq = c.cq;
        let at = c.sq.len() - k;
        let tail: Vec<SqEntry> = c.sq.drain(at..).collect();
        for e in tail {
            if e.internal {
                debug_assert!(c.sq_internal > 0, "internal requests counted");
                c.sq_internal -= 1;
            }
            self.cqs[cq].soft.push_back(Completion {
                wr_id: WrId(e.wr_id),
                status: WcStatus::Flushed,
                opcode: e.opcode,
                conn,
                byte_len: 0,
                invalidated_rkey: None,
            });
        }
    }

    /// [`Fabric::post_recv`] for this provider.
    pub(super) fn do_post_recv(&mut self, conn: ConnId, wr: &RecvWr) -> Result<(), FabricError> {
        self.resolve(&wr.buf)?;
        let ci = self.conns.index(conn.0).ok_or(FabricError::NotConnected(conn))?;
        let c = self.conns.get_mut(ci).ok_or(FabricError::NotConnected(conn))?;
        if c.srq.is_some() {
            return Err(FabricError::Other("this connection receives from an SRQ".into()));
        }
        if c.state == State::Error {
            return Err(FabricError::NotConnected(conn));
        }
        if c.rq_out as usize + c.early_recvs.len() >= c.cfg.recv_depth as usize {
            return Err(FabricError::QueueFull { what: "receive queue" });
        }
        if c.qp.is_null() {
            c.early_recvs.push(*wr);
            return Ok(());
        }
        self.post_recv_raw(ci, wr)
    }

    /// [`Fabric::post_srq_recv`] for this provider.
    pub(super) fn do_post_srq_recv(&mut self, srq: SrqId, wr: &RecvWr) -> Result<(), FabricError> {
        let s = self
            .srqs
            .get(srq.0 as usize)
            .ok_or(FabricError::UnknownId { what: "srq", id: srq.0 })?
            .srq;
        let mut sge = self.sge(&wr.buf)?;
        let mut rwr = sys::ibv_recv_wr {
            wr_id: wr.wr_id.0,
            next: ptr::null_mut(),
            sg_list: &mut sge,
            num_sge: 1,
        };
        let mut bad: *mut sys::ibv_recv_wr = ptr::null_mut();
        // SAFETY: `s` is a live SRQ of ours; `rwr` and `sge` are valid for the
        // call (copied by the provider).
        let rc = unsafe { sys::ibv_post_srq_recv(s, &mut rwr, &mut bad) };
        if rc != 0 {
            return Err(post_err("ibv_post_srq_recv", rc));
        }
        Ok(())
    }
}
