//! The data path of the simulated network: posting work requests, polling
//! completion queues, and executing a queue pair's send-queue head against its
//! peer (Sends into posted receives, RDMA Writes and Reads with key and bounds
//! checks, RNR retries, error state and flushing).

use super::*;

impl Net {
    pub(in crate::fabric::sim) fn post_send(
        &mut self,
        ep: usize,
        conn: ConnId,
        wr: &SendWr,
    ) -> Result<(), FabricError> {
        let q = self.qp_of(ep, conn)?;
        if wr.num_sge as usize > MAX_SGE {
            return Err(invalid_input("post_send", "num_sge > MAX_SGE"));
        }
        if wr.op == SendOp::RdmaRead && self.qps[q].cfg.max_rdma_reads == 0 {
            return Err(FabricError::Unsupported("RDMA Read on a QP with max_rdma_reads = 0"));
        }
        match self.qps[q].state {
            ConnState::Connecting => Err(FabricError::NotConnected(conn)),
            ConnState::Error => {
                // As verbs: posting to a QP in the error state succeeds and the
                // work request completes at once, flushed.
                let cq = self.qps[q].cfg.cq;
                self.push_wc(
                    ep,
                    cq,
                    Completion {
                        wr_id: wr.wr_id,
                        status: WcStatus::Flushed,
                        opcode: opcode(wr.op),
                        conn,
                        byte_len: 0,
                        invalidated_rkey: None,
                    },
                );
                Ok(())
            }
            ConnState::Ready => {
                let qp = &self.qps[q];
                if qp.sq_used() >= qp.cfg.send_depth as usize {
                    return Err(FabricError::QueueFull { what: "send queue" });
                }
                let inline = self.snapshot_inline(ep, q, wr);
                self.qps[q].pending.push_back(SqEntry { wr: *wr, inline });
                self.kick(q);
                Ok(())
            }
        }
    }

    /// For a Send or Write no longer than the QP's `max_inline`: the data, copied
    /// now (the consumer may reuse the buffers as soon as `post_send` returns).
    /// `None` when not inline or when a buffer is invalid (execution then reports
    /// LocalProtection).
    fn snapshot_inline(&self, ep: usize, q: usize, wr: &SendWr) -> Option<Vec<u8>> {
        let max = u64::from(self.qps[q].cfg.max_inline);
        if wr.op == SendOp::RdmaRead || max == 0 || wr.len() > max {
            return None;
        }
        let mut data = Vec::with_capacity(wr.len() as usize);
        for s in wr.sges() {
            let p = self.resolve(ep, s)?;
            // SAFETY: `resolve` checked that `[p, p + len)` lies in a live
            // registered region. The consumer handed these bytes to the
            // provider by posting them (verbs contract), so nothing writes them
            // concurrently; the network runs on this thread only.
            let src = unsafe { std::slice::from_raw_parts(p, s.len as usize) };
            data.extend_from_slice(src);
        }
        Some(data)
    }

    pub(in crate::fabric::sim) fn post_recv(
        &mut self,
        ep: usize,
        conn: ConnId,
        wr: &RecvWr,
    ) -> Result<(), FabricError> {
        let q = self.qp_of(ep, conn)?;
        if self.qps[q].cfg.srq.is_some() {
            return Err(FabricError::Unsupported("post_recv on a connection that uses an SRQ"));
        }
        if self.qps[q].state == ConnState::Error {
            let cq = self.qps[q].cfg.cq;
            self.push_wc(ep, cq, flushed_recv(wr, conn));
            return Ok(());
        }
        if self.qps[q].rq.len() >= self.qps[q].cfg.recv_depth as usize {
            return Err(FabricError::QueueFull { what: "receive queue" });
        }
        let visible_at_ns = self.recv_visibility(ep, Some(conn));
        self.qps[q].rq.push_back(PostedRecv { wr: *wr, visible_at_ns });
        Ok(())
    }

    pub(in crate::fabric::sim) fn post_srq_recv(
        &mut self,
        ep: usize,
        srq: SrqId,
        wr: &RecvWr,
    ) -> Result<(), FabricError> {
        let s = self.eps[ep]
            .srqs
            .get(srq.0 as usize)
            .ok_or(FabricError::UnknownId { what: "srq", id: srq.0 })?;
        if s.q.len() >= s.depth {
            return Err(FabricError::QueueFull {
                what: "shared receive queue",
            });
        }
        let visible_at_ns = self.recv_visibility(ep, None);
        self.eps[ep].srqs[srq.0 as usize]
            .q
            .push_back(PostedRecv { wr: *wr, visible_at_ns });
        Ok(())
    }

    /// When a receive posted now becomes usable: now, or later under injected
    /// receive starvation.
    fn recv_visibility(&mut self, ep: usize, conn: Option<ConnId>) -> u64 {
        let f = self.cfg.faults;
        if self.fault_rng.chance(f.recv_starvation) {
            let d = self.fault_rng.range_inclusive(1, f.recv_starvation_ns.max(1));
            self.fault(ep, conn, FaultKind::RecvStarvation);
            self.now_ns.saturating_add(d)
        } else {
            self.now_ns
        }
    }

    pub(in crate::fabric::sim) fn poll_cq(&mut self, ep: usize, cq: CqId, out: &mut [Completion]) -> usize {
        self.auto_step();
        let Some(c) = self.eps[ep].cqs.get_mut(cq.0 as usize) else {
            return 0;
        };
        let n = out.len().min(c.q.len());
        for (slot, wc) in out.iter_mut().zip(c.q.drain(..n)) {
            *slot = wc;
        }
        n
    }

    pub(super) fn auto_step(&mut self) {
        for _ in 0..self.cfg.steps_per_poll {
            if !self.step() {
                break;
            }
        }
    }

    /// Schedule execution of `q`'s send-queue head if it can run: the QP and its
    /// peer are ready and no execution is already scheduled.
    pub(super) fn kick(&mut self, q: usize) {
        let qp = &self.qps[q];
        if qp.state != ConnState::Ready || qp.exec_scheduled || qp.pending.is_empty() {
            return;
        }
        let Some(p) = qp.peer else { return };
        if self.qps[p].state != ConnState::Ready {
            return;
        }
        let (a, b) = (qp.ep, self.qps[p].ep);
        self.qps[q].exec_scheduled = true;
        let at = self.now_ns + self.wire_delay(a, b);
        self.schedule(at, Event::Exec { qp: q });
    }

    pub(super) fn exec(&mut self, q: usize) {
        self.qps[q].exec_scheduled = false;
        if self.qps[q].state != ConnState::Ready {
            return;
        }
        let Some(p) = self.qps[q].peer else { return };
        // Connecting: the accept's arrival kicks us. Error: a PeerDown for `q`
        // is already scheduled and will flush this work request.
        if self.qps[p].state != ConnState::Ready {
            return;
        }
        let Some(entry) = self.qps[q].pending.front().cloned() else {
            return;
        };
        let (ep, pep) = (self.qps[q].ep, self.qps[p].ep);
        let wr = entry.wr;

        if self.fault_rng.chance(self.cfg.faults.wr_error) {
            let conn = self.qps[q].conn;
            self.fault(ep, Some(conn), FaultKind::WrError);
            if self.fault_rng.below(2) == 0 {
                // As a real remote access error: the responder fails too.
                self.enter_error(p);
                self.fail_send(q, WcStatus::RemoteAccess);
            } else {
                self.fail_send(q, WcStatus::RetryExceeded);
            }
            return;
        }

        let total = wr.len();
        if total > u64::from(SIM_MAX_MSG_SIZE) {
            self.fail_send(q, WcStatus::LocalLength);
            return;
        }

        // Local buffers: the inline copy, or every SGE inside a registered region.
        let mut bufs: [(*mut u8, usize); MAX_SGE] = [(std::ptr::null_mut(), 0); MAX_SGE];
        let mut nbufs = 0;
        if let Some(data) = entry.inline.as_ref().filter(|_| wr.op != SendOp::RdmaRead) {
            bufs[0] = (data.as_ptr().cast_mut(), data.len());
            nbufs = 1;
        } else {
            for s in wr.sges() {
                match self.resolve(ep, s) {
                    Some(ptr) => {
                        bufs[nbufs] = (ptr, s.len as usize);
                        nbufs += 1;
                    }
                    None => {
                        self.fail_send(q, WcStatus::LocalProtection);
                        return;
                    }
                }
            }
        }
        let bufs = &bufs[..nbufs];

        match wr.op {
            SendOp::Send | SendOp::SendWithInv { .. } => {
                if self.fault_rng.chance(self.cfg.faults.rnr) {
                    let conn = self.qps[q].conn;
                    self.fault(ep, Some(conn), FaultKind::Rnr);
                    self.rnr(q);
                    return;
                }
                let srq = self.qps[p].cfg.srq;
                let head = match srq {
                    Some(s) => self.eps[pep].srqs[s.0 as usize].q.front().copied(),
                    None => self.qps[p].rq.front().copied(),
                };
                let r = match head {
                    Some(r) if r.visible_at_ns <= self.now_ns => r,
                    _ => {
                        self.rnr(q);
                        return;
                    }
                };
                match srq {
                    Some(s) => self.eps[pep].srqs[s.0 as usize].q.pop_front(),
                    None => self.qps[p].rq.pop_front(),
                };
                let Some(dst) = self.resolve(pep, &r.wr.buf) else {
                    // IB would report Remote Operation Error to the requester;
                    // this trait's nearest status is RemoteInvalidRequest.
                    self.fail_at_receiver(q, p, &r.wr, WcStatus::LocalProtection);
                    return;
                };
                if total > u64::from(r.wr.buf.len) {
                    self.fail_at_receiver(q, p, &r.wr, WcStatus::LocalLength);
                    return;
                }
                let inv = match wr.op {
                    SendOp::SendWithInv { rkey } => match self.window_index(pep, p, rkey) {
                        Some(i) => Some((i, rkey)),
                        None => {
                            self.fail_at_receiver(q, p, &r.wr, WcStatus::RemoteInvalidRequest);
                            return;
                        }
                    },
                    _ => None,
                };
                let mut at = 0usize;
                for &(src, len) in bufs {
                    // SAFETY: `src` is `len` readable bytes (a checked SGE or the
                    // inline copy); `dst + at .. dst + at + len` lies in the
                    // receive buffer, which `resolve` checked is inside a live
                    // region and which is at least `total >= at + len` bytes long.
                    // Posting handed both buffers to the provider (verbs
                    // contract), and the network is single-threaded. `copy`
                    // (memmove) tolerates overlap when both lie in one region.
                    unsafe { std::ptr::copy(src, dst.add(at), len) };
                    at += len;
                }
                if let Some((i, _)) = inv {
                    if let Some(w) = self.eps[pep].windows[i].as_mut() {
                        w.valid = false;
                    }
                }
                let (pcq, pconn) = (self.qps[p].cfg.cq, self.qps[p].conn);
                self.push_wc(
                    pep,
                    pcq,
                    Completion {
                        wr_id: r.wr.wr_id,
                        status: WcStatus::Success,
                        opcode: WcOpcode::Recv,
                        conn: pconn,
                        byte_len: total as u32,
                        invalidated_rkey: inv.map(|(_, k)| k),
                    },
                );
                self.stats.sends += 1;
                self.succeed(q, total);
            }
            SendOp::RdmaWrite => {
                let Some(dst) = self.remote_range(pep, p, &wr.remote, total, Access::Write) else {
                    self.enter_error(p);
                    self.fail_send(q, WcStatus::RemoteAccess);
                    return;
                };
                let mut at = 0usize;
                for &(src, len) in bufs {
                    // SAFETY: `src` is `len` readable bytes (checked SGE or
                    // inline copy); `remote_range` checked `total` bytes from
                    // `dst` lie in a live region the peer exposed for remote
                    // write (hardware DMA has the same contract).
                    unsafe { std::ptr::copy(src, dst.add(at), len) };
                    at += len;
                }
                self.stats.writes += 1;
                self.succeed(q, total);
            }
            SendOp::RdmaRead => {
                let Some(src) = self.remote_range(pep, p, &wr.remote, total, Access::Read) else {
                    self.enter_error(p);
                    self.fail_send(q, WcStatus::RemoteAccess);
                    return;
                };
                let mut at = 0usize;
                for &(dst, len) in bufs {
                    // SAFETY: as for the Write, with the roles swapped: `total`
                    // bytes from `src` are inside the peer's region, each `dst`
                    // is `len` writable bytes of a checked local SGE.
                    unsafe { std::ptr::copy(src.add(at), dst, len) };
                    at += len;
                }
                self.stats.reads += 1;
                self.succeed(q, total);
            }
        }
    }

    /// The head of `q`'s send queue executed: it waits for its ACK, the next one
    /// is scheduled.
    fn succeed(&mut self, q: usize, total: u64) {
        let Some(entry) = self.qps[q].pending.pop_front() else {
            return;
        };
        let p = self.qps[q].peer.unwrap_or(q);
        let (ep, pep) = (self.qps[q].ep, self.qps[p].ep);
        self.record(TraceEvent::Executed {
            time_ns: self.now_ns,
            endpoint: ep as u32,
            conn: self.qps[q].conn,
            wr_id: entry.wr.wr_id,
            op: entry.wr.op,
            status: WcStatus::Success,
        });
        self.qps[q].rnr_used = 0;
        let ack = self.now_ns + self.wire_delay(pep, ep);
        // Completions of one send queue are reported in posting order.
        let at = ack.max(self.qps[q].last_ack_ns);
        self.qps[q].last_ack_ns = at;
        self.qps[q].inflight.push_back((entry, total as u32));
        self.schedule(at, Event::Ack { qp: q });
        if !self.qps[q].pending.is_empty() {
            self.qps[q].exec_scheduled = true;
            let next = self.now_ns + self.wire_delay(ep, pep);
            self.schedule(next, Event::Exec { qp: q });
        }
    }

    /// Receiver not ready: retry after the RNR timer, or give up.
    fn rnr(&mut self, q: usize) {
        self.stats.rnr_naks += 1;
        let qp = &mut self.qps[q];
        qp.rnr_used += 1;
        if qp.cfg.rnr_retry < RNR_RETRY_INFINITE && qp.rnr_used > u32::from(qp.cfg.rnr_retry) {
            self.fail_send(q, WcStatus::RnrRetryExceeded);
            return;
        }
        qp.exec_scheduled = true;
        let p = qp.peer.unwrap_or(q);
        let at = self.now_ns + self.cfg.rnr_timer_ns + self.slow(self.qps[q].ep, self.qps[p].ep);
        self.schedule(at, Event::Exec { qp: q });
    }

    /// A Send failed at the receiver: the receive it consumed completes with
    /// `recv_status`, both QPs go to error, the sender's work request completes
    /// with RemoteInvalidRequest (the NAK an IB responder sends for these).
    fn fail_at_receiver(&mut self, q: usize, p: usize, recv: &RecvWr, recv_status: WcStatus) {
        let (pep, pcq, pconn) = (self.qps[p].ep, self.qps[p].cfg.cq, self.qps[p].conn);
        self.push_wc(
            pep,
            pcq,
            Completion {
                wr_id: recv.wr_id,
                status: recv_status,
                opcode: WcOpcode::Recv,
                conn: pconn,
                byte_len: 0,
                invalidated_rkey: None,
            },
        );
        self.enter_error(p);
        self.fail_send(q, WcStatus::RemoteInvalidRequest);
    }

    /// The head of `q`'s send queue failed with `status`: earlier executed work
    /// requests complete successfully (the NAK acknowledges them), this one with
    /// `status`, everything else is flushed and the QP goes to error.
    fn fail_send(&mut self, q: usize, status: WcStatus) {
        let Some(entry) = self.qps[q].pending.pop_front() else {
            return;
        };
        while let Some((e, n)) = self.qps[q].inflight.pop_front() {
            self.complete_send(q, &e.wr, WcStatus::Success, n);
        }
        self.record(TraceEvent::Executed {
            time_ns: self.now_ns,
            endpoint: self.qps[q].ep as u32,
            conn: self.qps[q].conn,
            wr_id: entry.wr.wr_id,
            op: entry.wr.op,
            status,
        });
        self.complete_send(q, &entry.wr, status, 0);
        self.stats.conn_errors += 1;
        self.enter_error(q);
    }

    pub(super) fn complete_send(&mut self, q: usize, wr: &SendWr, status: WcStatus, byte_len: u32) {
        let qp = &mut self.qps[q];
        if status.is_success() && !wr.signaled {
            qp.unsignaled_done += 1;
            return;
        }
        qp.unsignaled_done = 0;
        let (ep, cq, conn) = (qp.ep, qp.cfg.cq, qp.conn);
        self.push_wc(
            ep,
            cq,
            Completion {
                wr_id: wr.wr_id,
                status,
                opcode: opcode(wr.op),
                conn,
                byte_len: if status.is_success() { byte_len } else { 0 },
                invalidated_rkey: None,
            },
        );
    }

    /// Move `q` to the error state: flush its send queue (oldest first) and its
    /// own receives (SRQ receives stay posted), report Disconnected once, and
    /// let the peer learn of it after a CM latency.
    pub(super) fn enter_error(&mut self, q: usize) {
        if self.qps[q].state == ConnState::Error {
            return;
        }
        self.qps[q].state = ConnState::Error;
        self.flush(q);
        let (ep, conn) = (self.qps[q].ep, self.qps[q].conn);
        if !self.qps[q].terminal_reported {
            self.qps[q].terminal_reported = true;
            self.push_cm(ep, CmEvent::Disconnected { conn });
        }
        if let Some(p) = self.qps[q].peer {
            if self.qps[p].state != ConnState::Error {
                let at = self.now_ns + self.cm_delay(ep, self.qps[p].ep);
                self.schedule(at, Event::PeerDown { qp: p });
            }
        }
    }

    /// A connect that never got established ends with `ev` (Rejected or
    /// Unreachable); receives posted meanwhile are flushed.
    pub(super) fn close_unconnected(&mut self, q: usize, ev: CmEvent) {
        self.qps[q].state = ConnState::Error;
        self.flush(q);
        self.qps[q].terminal_reported = true;
        let ep = self.qps[q].ep;
        self.push_cm(ep, ev);
    }

    fn flush(&mut self, q: usize) {
        let inflight = std::mem::take(&mut self.qps[q].inflight);
        for (e, _) in &inflight {
            self.complete_send(q, &e.wr, WcStatus::Flushed, 0);
        }
        let pending = std::mem::take(&mut self.qps[q].pending);
        for e in &pending {
            self.complete_send(q, &e.wr, WcStatus::Flushed, 0);
        }
        let rq = std::mem::take(&mut self.qps[q].rq);
        let (ep, cq, conn) = (self.qps[q].ep, self.qps[q].cfg.cq, self.qps[q].conn);
        for r in &rq {
            self.push_wc(ep, cq, flushed_recv(&r.wr, conn));
        }
        self.qps[q].unsignaled_done = 0;
    }
}

fn flushed_recv(wr: &RecvWr, conn: ConnId) -> Completion {
    Completion {
        wr_id: wr.wr_id,
        status: WcStatus::Flushed,
        opcode: WcOpcode::Recv,
        conn,
        byte_len: 0,
        invalidated_rkey: None,
    }
}
