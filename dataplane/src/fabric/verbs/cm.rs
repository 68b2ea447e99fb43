//! Connection management over RDMA-CM: listening, the active side's address
//! and route resolution and `rdma_connect`, accept and reject with private
//! data, disconnect, and turning the non-blocking event channel's events into
//! [`CmEvent`]s.

use super::qp::destroy_conn_id;
use super::*;

fn tag_ctx(kind: u32, raw: u32) -> *mut c_void {
    (((kind as u64) << 32) | raw as u64) as usize as *mut c_void
}

fn untag_ctx(p: *mut c_void) -> (u32, u32) {
    let v = p as usize as u64;
    ((v >> 32) as u32, v as u32)
}

impl VerbsFabric {
    /// Read one CM event, if any, and act on it. Returns false when the
    /// channel is empty.
    fn pump_cm(&mut self) -> bool {
        let mut ev: *mut sys::rdma_cm_event = ptr::null_mut();
        // SAFETY: `self.channel` is our channel (non-blocking); on success `ev`
        // points to an event owned by librdmacm until rdma_ack_cm_event.
        let rc = unsafe { sys::rdma_get_cm_event(self.channel, &mut ev) };
        if rc != 0 || ev.is_null() {
            return false;
        }
        // SAFETY: `ev` is a valid event (above); its ids are live CM ids; for
        // connection events the private data pointer, when non-NULL, has
        // `private_data_len` bytes valid until the ack. Everything needed is
        // copied before the ack.
        let raw = unsafe {
            let e = &*ev;
            let ctx_id = if e.event == sys::rdma_cm_event_type::RDMA_CM_EVENT_CONNECT_REQUEST && !e.listen_id.is_null()
            {
                e.listen_id
            } else {
                e.id
            };
            use sys::rdma_cm_event_type as t;
            // Only connection events carry `param.conn` (librdmacm fills it
            // for them); for the others nothing in it is read.
            let has_conn = matches!(
                e.event,
                t::RDMA_CM_EVENT_CONNECT_REQUEST | t::RDMA_CM_EVENT_ESTABLISHED | t::RDMA_CM_EVENT_REJECTED
            );
            let conn = if has_conn {
                e.param.conn
            } else {
                sys::rdma_conn_param {
                    private_data: ptr::null(),
                    private_data_len: 0,
                    responder_resources: 0,
                    initiator_depth: 0,
                    flow_control: 0,
                    retry_count: 0,
                    rnr_retry_count: 0,
                    srq: 0,
                    qp_num: 0,
                }
            };
            let pd = if conn.private_data.is_null() || conn.private_data_len == 0 {
                PrivateData::EMPTY
            } else {
                let n = (conn.private_data_len as usize).min(MAX_PRIVATE_DATA);
                PrivateData::new(std::slice::from_raw_parts(conn.private_data as *const u8, n))
            };
            let raw = CmRaw {
                event: e.event,
                status: e.status,
                id: e.id,
                ctx: untag_ctx((*ctx_id).context),
                private_data: pd,
                responder_resources: conn.responder_resources,
                initiator_depth: conn.initiator_depth,
            };
            sys::rdma_ack_cm_event(ev);
            raw
        };
        self.on_cm(raw);
        true
    }

    fn on_cm(&mut self, e: CmRaw) {
        use sys::rdma_cm_event_type as t;
        match (e.event, e.ctx.0) {
            (t::RDMA_CM_EVENT_CONNECT_REQUEST, CTX_LISTENER) => {
                let listener = ListenerId(e.ctx.1);
                let req = Request {
                    id: e.id,
                    responder_resources: e.responder_resources,
                    initiator_depth: e.initiator_depth,
                };
                match self.requests.insert(req) {
                    Some(raw) => {
                        // SAFETY: `e.id` is the new, live CM id of this request.
                        unsafe { (*e.id).context = tag_ctx(CTX_REQUEST, raw) };
                        self.events.push_back(CmEvent::ConnectRequest {
                            listener,
                            req: ConnReqId(raw),
                            private_data: e.private_data,
                        });
                    }
                    None => {
                        // Too many waiting: refuse and forget it.
                        // SAFETY: `e.id` is a live CM id with an acked event.
                        unsafe {
                            sys::rdma_reject(e.id, ptr::null(), 0);
                            sys::rdma_destroy_id(e.id);
                        }
                    }
                }
            }
            (_, CTX_CONN) => {
                let Some(ci) = self.conns.index(e.ctx.1) else { return };
                self.on_conn_event(ci, e);
            }
            (t::RDMA_CM_EVENT_DEVICE_REMOVAL, _) => {
                let all: Vec<usize> = self.conns.used().collect();
                for ci in all {
                    let id = ConnId(self.conns.id_of(ci));
                    self.fail(ci, CmEvent::Disconnected { conn: id });
                }
            }
            // Events of pending requests (the requester gave up) and of
            // listeners: the consumer learns on accept, nothing to report.
            _ => {}
        }
    }

    fn on_conn_event(&mut self, ci: usize, e: CmRaw) {
        use sys::rdma_cm_event_type as t;
        let id = ConnId(self.conns.id_of(ci));
        let Some(c) = self.conns.get_mut(ci) else { return };
        if c.terminal_queued {
            // Already dead (e.g. the DISCONNECTED after our own disconnect).
            return;
        }
        match e.event {
            t::RDMA_CM_EVENT_ADDR_RESOLVED => {
                // SAFETY: `c.id` is live; after address resolution `verbs` is
                // the context of the device the address routes through.
                let verbs = unsafe { (*c.id).verbs };
                if verbs != self.ctx {
                    self.fail(ci, CmEvent::Unreachable { conn: id });
                    return;
                }
                if self.create_qp(ci).is_err() {
                    self.fail(ci, CmEvent::Unreachable { conn: id });
                    return;
                }
                self.post_early_recvs(ci);
                let Some(c) = self.conns.get(ci) else { return };
                if c.terminal_queued {
                    return;
                }
                // SAFETY: `c.id` is live with its address resolved.
                let rc = unsafe { sys::rdma_resolve_route(c.id, self.cfg.resolve_timeout_ms as c_int) };
                if rc != 0 {
                    self.fail(ci, CmEvent::Unreachable { conn: id });
                }
            }
            t::RDMA_CM_EVENT_ROUTE_RESOLVED => {
                let pd = c.connect_pd;
                let mut p = sys::rdma_conn_param {
                    private_data: pd.as_bytes().as_ptr() as *const c_void,
                    private_data_len: pd.as_bytes().len() as u8,
                    // Reads the peer may have outstanding against us.
                    responder_resources: self.limits.max_qp_rd_atom,
                    initiator_depth: c.cfg.max_rdma_reads.min(self.limits.max_qp_init_rd_atom),
                    flow_control: 1,
                    retry_count: c.cfg.retry_count.min(7),
                    rnr_retry_count: c.cfg.rnr_retry.min(7),
                    srq: 0,
                    qp_num: 0,
                };
                // SAFETY: `c.id` is live with its route resolved and its QP
                // created; `p` and the private data it points to (a copy on
                // this stack frame) are valid for the call, which copies them.
                let rc = unsafe { sys::rdma_connect(c.id, &mut p) };
                if rc != 0 {
                    self.fail(ci, CmEvent::Unreachable { conn: id });
                }
            }
            t::RDMA_CM_EVENT_ESTABLISHED => {
                c.state = State::Established;
                let private_data = if c.active { e.private_data } else { PrivateData::EMPTY };
                self.events.push_back(CmEvent::Established { conn: id, private_data });
            }
            t::RDMA_CM_EVENT_REJECTED if c.active && e.status == IB_CM_REJ_CONSUMER_DEFINED => {
                self.fail(
                    ci,
                    CmEvent::Rejected {
                        conn: id,
                        private_data: e.private_data,
                    },
                );
            }
            t::RDMA_CM_EVENT_ADDR_ERROR
            | t::RDMA_CM_EVENT_ROUTE_ERROR
            | t::RDMA_CM_EVENT_CONNECT_ERROR
            | t::RDMA_CM_EVENT_UNREACHABLE
            | t::RDMA_CM_EVENT_REJECTED => self.fail(ci, CmEvent::Unreachable { conn: id }),
            t::RDMA_CM_EVENT_DISCONNECTED | t::RDMA_CM_EVENT_DEVICE_REMOVAL => {
                self.fail(ci, CmEvent::Disconnected { conn: id })
            }
            _ => {}
        }
    }

    /// [`Fabric::listen`] for this provider.
    pub(super) fn do_listen(&mut self, addr: &str) -> Result<ListenerId, FabricError> {
        let sa = addr::parse(addr).ok_or_else(|| FabricError::BadAddress(addr.to_string()))?;
        let mut s = addr::SockAddr::new(sa);
        let lid = self.listeners.len() as u32;
        let mut id: *mut sys::rdma_cm_id = ptr::null_mut();
        // SAFETY: `self.channel` is ours; `id` is an out pointer.
        let rc = unsafe {
            sys::rdma_create_id(
                self.channel,
                &mut id,
                tag_ctx(CTX_LISTENER, lid),
                sys::rdma_port_space::RDMA_PS_TCP,
            )
        };
        if rc != 0 {
            return Err(errno("rdma_create_id"));
        }
        // SAFETY: `id` is the live id just created; `s` a valid sockaddr.
        let res = unsafe {
            if sys::rdma_bind_addr(id, s.as_mut_ptr()) != 0 {
                Err(errno("rdma_bind_addr"))
            } else if !(*id).verbs.is_null() && (*id).verbs != self.ctx {
                Err(FabricError::BadAddress(format!(
                    "{addr} is not on device {}",
                    self.dev_name
                )))
            } else if sys::rdma_listen(id, self.cfg.listen_backlog.min(i32::MAX as u32) as c_int) != 0 {
                Err(errno("rdma_listen"))
            } else {
                Ok(())
            }
        };
        if let Err(e) = res {
            // SAFETY: `id` is live and has no QP and no unacked event.
            unsafe { sys::rdma_destroy_id(id) };
            return Err(e);
        }
        self.listeners.push(Listener { id });
        Ok(ListenerId(lid))
    }

    /// [`Fabric::connect`] for this provider.
    pub(super) fn do_connect(&mut self, addr: &str, qp: &QpConfig, private_data: &[u8]) -> Result<ConnId, FabricError> {
        let sa = addr::parse(addr).ok_or_else(|| FabricError::BadAddress(addr.to_string()))?;
        let (cq, srq) = self.check_qp(qp)?;
        let conn = Conn {
            id: ptr::null_mut(),
            qp: ptr::null_mut(),
            qp_num: 0,
            cq,
            srq,
            cfg: *qp,
            max_inline: 0,
            state: State::Connecting,
            active: true,
            connect_pd: PrivateData::new(private_data),
            early_recvs: Vec::new(),
            sq: VecDeque::with_capacity(qp.send_depth as usize),
            sq_internal: 0,
            windows: Vec::new(),
            free_mws: Vec::new(),
            rq_out: 0,
            staged: Vec::with_capacity(qp.send_depth.min(STAGE_MAX as u32) as usize),
            dirty: false,
            terminal_queued: false,
            terminal_delivered: false,
        };
        let raw = self
            .conns
            .insert(conn)
            .ok_or(FabricError::QueueFull { what: "connections" })?;
        let ci = (raw & 0xffff) as usize;
        let mut id: *mut sys::rdma_cm_id = ptr::null_mut();
        // SAFETY: `self.channel` is ours; `id` is an out pointer.
        let rc = unsafe {
            sys::rdma_create_id(
                self.channel,
                &mut id,
                tag_ctx(CTX_CONN, raw),
                sys::rdma_port_space::RDMA_PS_TCP,
            )
        };
        if rc != 0 {
            let e = errno("rdma_create_id");
            self.conns.remove(ci);
            return Err(e);
        }
        if let Some(c) = self.conns.get_mut(ci) {
            c.id = id;
        }
        let mut s = addr::SockAddr::new(sa);
        // SAFETY: `id` is live; `s` a valid sockaddr; no source address.
        let rc = unsafe {
            sys::rdma_resolve_addr(
                id,
                ptr::null_mut(),
                s.as_mut_ptr(),
                self.cfg.resolve_timeout_ms as c_int,
            )
        };
        if rc != 0 {
            self.fail(ci, CmEvent::Unreachable { conn: ConnId(raw) });
        }
        Ok(ConnId(raw))
    }

    /// [`Fabric::accept`] for this provider.
    pub(super) fn do_accept(
        &mut self,
        req: ConnReqId,
        qp: &QpConfig,
        private_data: &[u8],
    ) -> Result<ConnId, FabricError> {
        let ri = self.requests.index(req.0).ok_or(FabricError::UnknownId {
            what: "connection request",
            id: req.0,
        })?;
        let (cq, srq) = self.check_qp(qp)?;
        let r = self.requests.remove(ri).ok_or(FabricError::UnknownId {
            what: "connection request",
            id: req.0,
        })?;
        let refuse = |id: *mut sys::rdma_cm_id| {
            // SAFETY: `id` is the request's live id, owned here; no QP.
            unsafe {
                sys::rdma_reject(id, ptr::null(), 0);
                sys::rdma_destroy_id(id);
            }
        };
        // SAFETY: `r.id` is live; `verbs` is the device the request came in on.
        if unsafe { (*r.id).verbs } != self.ctx {
            refuse(r.id);
            return Err(FabricError::Other(format!(
                "connection request arrived on another device than {}",
                self.dev_name
            )));
        }
        let conn = Conn {
            id: r.id,
            qp: ptr::null_mut(),
            qp_num: 0,
            cq,
            srq,
            cfg: *qp,
            max_inline: 0,
            state: State::Accepting,
            active: false,
            connect_pd: PrivateData::EMPTY,
            early_recvs: Vec::new(),
            sq: VecDeque::with_capacity(qp.send_depth as usize),
            sq_internal: 0,
            windows: Vec::new(),
            free_mws: Vec::new(),
            rq_out: 0,
            staged: Vec::with_capacity(qp.send_depth.min(STAGE_MAX as u32) as usize),
            dirty: false,
            terminal_queued: false,
            terminal_delivered: false,
        };
        let Some(raw) = self.conns.insert(conn) else {
            refuse(r.id);
            return Err(FabricError::QueueFull { what: "connections" });
        };
        let ci = (raw & 0xffff) as usize;
        // SAFETY: `r.id` is live; from now on its events belong to the conn.
        unsafe { (*r.id).context = tag_ctx(CTX_CONN, raw) };
        if let Err(e) = self.create_qp(ci) {
            self.conns.remove(ci);
            refuse(r.id);
            return Err(e);
        }
        let pd = PrivateData::new(private_data);
        let mut p = sys::rdma_conn_param {
            private_data: pd.as_bytes().as_ptr() as *const c_void,
            private_data_len: pd.as_bytes().len() as u8,
            responder_resources: r.responder_resources.min(self.limits.max_qp_rd_atom),
            initiator_depth: qp
                .max_rdma_reads
                .min(r.initiator_depth)
                .min(self.limits.max_qp_init_rd_atom),
            flow_control: 1,
            retry_count: qp.retry_count.min(7),
            rnr_retry_count: qp.rnr_retry.min(7),
            srq: srq.is_some() as u8,
            qp_num: 0,
        };
        // SAFETY: `r.id` is live with its QP created; `p` and the private
        // data (on this stack frame) are valid for the call, which copies them.
        let rc = unsafe { sys::rdma_accept(r.id, &mut p) };
        if rc != 0 {
            let e = errno("rdma_accept");
            if let Some(c) = self.conns.remove(ci) {
                self.by_qp.remove(&c.qp_num);
                // SAFETY: the QP was created on this id; nothing is posted yet.
                unsafe {
                    sys::rdma_reject(c.id, ptr::null(), 0);
                }
                destroy_conn_id(c.id, true);
            }
            return Err(e);
        }
        Ok(ConnId(raw))
    }

    /// [`Fabric::reject`] for this provider.
    pub(super) fn do_reject(&mut self, req: ConnReqId, private_data: &[u8]) -> Result<(), FabricError> {
        let ri = self.requests.index(req.0).ok_or(FabricError::UnknownId {
            what: "connection request",
            id: req.0,
        })?;
        let Some(r) = self.requests.remove(ri) else {
            return Ok(());
        };
        let pd = PrivateData::new(private_data);
        // SAFETY: `r.id` is the live request id, owned here; the private data
        // is valid for the call (copied by librdmacm).
        let rc = unsafe {
            let rc = sys::rdma_reject(r.id, pd.as_bytes().as_ptr() as *const c_void, pd.as_bytes().len() as u8);
            let e = (rc != 0).then(|| errno("rdma_reject"));
            sys::rdma_destroy_id(r.id);
            e
        };
        rc.map_or(Ok(()), Err)
    }

    /// [`Fabric::disconnect`] for this provider.
    pub(super) fn do_disconnect(&mut self, conn: ConnId) -> Result<(), FabricError> {
        if (conn.0 & 0xffff) as usize >= self.conns.capacity() {
            return Err(FabricError::UnknownId {
                what: "connection",
                id: conn.0,
            });
        }
        if let Some(ci) = self.conns.index(conn.0) {
            self.fail(ci, CmEvent::Disconnected { conn });
        }
        Ok(())
    }

    /// [`Fabric::peer_addr`] for this provider.
    pub(super) fn do_peer_addr(&self, conn: ConnId) -> Option<std::net::IpAddr> {
        let c = self.conns.get(self.conns.index(conn.0)?)?;
        if c.id.is_null() {
            return None;
        }
        // SAFETY: `c.id` is the connection's live cm_id (destroyed only when
        // the connection leaves the table); the route's destination address
        // is a sockaddr of the family it says, which `peer_sockaddr` checks.
        unsafe { addr::peer_ip(&*c.id) }
    }

    /// [`Fabric::poll_cm`] for this provider.
    pub(super) fn do_poll_cm(&mut self) -> Option<CmEvent> {
        while self.events.is_empty() {
            if !self.pump_cm() {
                return None;
            }
        }
        let ev = self.events.pop_front()?;
        if let CmEvent::Disconnected { conn } | CmEvent::Rejected { conn, .. } | CmEvent::Unreachable { conn } = ev {
            if let Some(ci) = self.conns.index(conn.0) {
                if let Some(c) = self.conns.get_mut(ci) {
                    c.terminal_delivered = true;
                }
                self.try_reap(ci);
            }
        }
        Some(ev)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn context_tags_round_trip() {
        for (k, v) in [
            (CTX_CONN, 0u32),
            (CTX_LISTENER, 7),
            (CTX_REQUEST, u32::MAX),
            (CTX_CONN, 0x0003_0001),
        ] {
            assert_eq!(untag_ctx(tag_ctx(k, v)), (k, v));
        }
        // A NULL context (an id we did not tag) is no kind of ours.
        let (k, _) = untag_ctx(ptr::null_mut());
        assert!(![CTX_CONN, CTX_LISTENER, CTX_REQUEST].contains(&k));
    }
}
