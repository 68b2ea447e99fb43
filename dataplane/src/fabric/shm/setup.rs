//! Connection setup over the `AF_UNIX` socket: listening, the REQ / ACCEPT /
//! REJECT / RTU exchange with the ring file and region descriptors, the
//! periodic socket sweep that notices a closed peer, and handing out CM events.
//! Called from the core that owns the [`ShmFabric`], inside [`Fabric::poll_cm`]
//! and the connection calls; nothing here runs on the data path.

use super::*;

impl ShmFabric {
    fn hello(&self, private_data: &[u8], conn: &Conn) -> Hello {
        let regions = self
            .regions
            .by_id
            .iter()
            .flatten()
            .filter(|r| r.exposable)
            .map(|r| RegionInfo {
                id: r.region.id(),
                rkey: r.rkey,
                len: r.region.len() as u64,
            })
            .collect();
        Hello {
            private_data: PrivateData::new(private_data),
            ring_cap: conn.ring_cap,
            file_len: conn.file_len(),
            regions,
        }
    }

    /// Send REQ or ACCEPT with our ring file and region descriptors.
    fn send_hello(&mut self, ci: usize, msg: &Msg) -> std::io::Result<()> {
        let n = wire::encode(msg, &mut self.msg);
        let Some(c) = self.conns.get(ci) else {
            return Err(std::io::Error::other("connection gone"));
        };
        let Some(s) = c.sock.as_ref() else {
            return Err(std::io::Error::other("socket closed"));
        };
        let mut fds: Vec<BorrowedFd<'_>> = Vec::with_capacity(1 + self.regions.count);
        fds.push(c.file.fd());
        // Only exposable regions: a responder's memory is never mapped by a
        // peer (RFC 8166 s8.1).
        fds.extend(
            self.regions
                .by_id
                .iter()
                .flatten()
                .filter(|r| r.exposable)
                .map(|r| r.region.fd()),
        );
        // Our doorbell last (shm::doorbell); a peer that expects none sees
        // one descriptor too many only if it is older than the doorbell.
        if let Some(b) = &self.bell {
            fds.push(b.fd());
        }
        sock::send_msg(s.as_fd(), &self.msg[..n], &fds)
    }

    fn attach_conn(&mut self, ci: usize) {
        if let Some(c) = self.conns.get(ci) {
            let (cq, srq) = (c.cq, c.srq);
            self.cqs[cq].conns.push(ci);
            if let Some(s) = srq {
                self.srqs[s].conns.push(ci);
            }
        }
    }

    fn cm_progress(&mut self, now: Instant) {
        self.accept_incoming(now);
        self.read_requests(now);
        for ci in 0..self.conns.capacity() {
            if self.conns.get(ci).is_some() {
                self.cm_conn(ci, now);
            }
        }
    }

    fn accept_incoming(&mut self, now: Instant) {
        let before = self.incoming.len();
        for (li, l) in self.listeners.iter().enumerate() {
            while self.incoming.len() < self.cfg.max_pending_requests as usize {
                match sock::accept(l.fd.as_fd()) {
                    Ok(Some(s)) => self.incoming.push(Incoming {
                        listener: ListenerId(li as u32),
                        sock: s,
                        deadline: now + self.cfg.connect_timeout,
                    }),
                    Ok(None) | Err(_) => break,
                }
            }
        }
        // An accepted socket whose REQ has not arrived yet is watched by no
        // one: once accepted, the listener is no longer readable, and its
        // REQ makes nothing readable that the core's wait watches. If this
        // sweep is the core's re-check after arming (`arm_wakeup` saw no
        // `incoming` and said yes), it would block for a whole wait with the
        // REQ unread, and the peer's connect times out. Ringing our own bell
        // ends that wait at once; the next arm refuses while the socket is
        // in `incoming`. One write per accepted connection, not per message.
        if self.incoming.len() > before {
            if let Some(b) = &self.bell {
                b.ring();
            }
        }
    }

    fn read_requests(&mut self, now: Instant) {
        let mut i = 0;
        while i < self.incoming.len() {
            self.fds_in.clear();
            let r = sock::recv_msg(self.incoming[i].sock.as_fd(), &mut self.msg[..], &mut self.fds_in);
            match r {
                Ok(Recv::WouldBlock) if now < self.incoming[i].deadline => {
                    i += 1;
                    continue;
                }
                Ok(Recv::Msg(n)) => {
                    let inc = self.incoming.swap_remove(i);
                    if let Ok(Msg::Req(hello)) = wire::decode(&self.msg[..n]) {
                        // The ring file, the regions, maybe a doorbell.
                        let extra = self.fds_in.len().checked_sub(hello.regions.len());
                        if matches!(extra, Some(1 | 2)) {
                            let pd = hello.private_data;
                            let req = Request {
                                sock: inc.sock,
                                hello,
                                fds: std::mem::take(&mut self.fds_in),
                            };
                            // A full table drops the request: the peer sees
                            // end-of-file (Unreachable).
                            if let Some(id) = self.requests.insert(req) {
                                self.events.push_back(CmEvent::ConnectRequest {
                                    listener: inc.listener,
                                    req: ConnReqId(id),
                                    private_data: pd,
                                });
                            }
                            self.fds_in = Vec::with_capacity(sock::MAX_FDS);
                        }
                    }
                }
                // Timed out, closed, or garbage: drop it.
                _ => {
                    self.incoming.swap_remove(i);
                }
            }
        }
        self.fds_in.clear();
    }

    fn cm_conn(&mut self, ci: usize, now: Instant) {
        let id = ConnId(self.conns.id_of(ci));
        let Some(c) = self.conns.get_mut(ci) else { return };
        match c.state {
            State::Error => {}
            State::Connecting { connected: false } => {
                let (Some(s), Some(a)) = (c.sock.as_ref(), c.addr.as_ref()) else {
                    return c.fail(CmEvent::Unreachable { conn: id }, &mut self.events, false);
                };
                use std::os::fd::AsRawFd;
                match sock::connect_again(s.as_raw_fd(), a) {
                    Ok(()) => {
                        c.state = State::Connecting { connected: true };
                        self.send_req(ci, id);
                    }
                    Err(e) if e.raw_os_error() == Some(libc::EAGAIN) && now < c.deadline => {}
                    Err(_) => c.fail(CmEvent::Unreachable { conn: id }, &mut self.events, false),
                }
            }
            State::Connecting { connected: true } | State::AcceptWait | State::Established => {
                let Some(s) = c.sock.as_ref() else { return };
                self.fds_in.clear();
                let r = sock::recv_msg(s.as_fd(), &mut self.msg[..], &mut self.fds_in);
                let state = c.state;
                let msg = match r {
                    Ok(Recv::Msg(n)) => wire::decode(&self.msg[..n]).ok(),
                    Ok(Recv::WouldBlock) => {
                        if state == State::Established {
                            if c.peer_closed() {
                                c.fail(CmEvent::Disconnected { conn: id }, &mut self.events, true);
                            }
                        } else if now >= c.deadline {
                            c.fail(CmEvent::Unreachable { conn: id }, &mut self.events, false);
                        }
                        return;
                    }
                    Ok(Recv::Eof) | Err(_) => None,
                };
                let fds = std::mem::take(&mut self.fds_in);
                self.fds_in = Vec::with_capacity(sock::MAX_FDS);
                self.on_cm_msg(ci, id, state, msg, fds);
            }
        }
    }

    fn on_cm_msg(&mut self, ci: usize, id: ConnId, state: State, msg: Option<Msg>, fds: Vec<OwnedFd>) {
        let cfg = &self.cfg;
        let Some(c) = self.conns.get_mut(ci) else { return };
        let events = &mut self.events;
        match (state, msg) {
            (State::Connecting { .. }, Some(Msg::Accept(hello))) => match Peer::attach(&hello, fds, cfg) {
                Ok(peer) => {
                    c.peer = Some(peer);
                    let n = wire::encode(&Msg::Rtu, &mut self.msg);
                    let sent = c
                        .sock
                        .as_ref()
                        .is_some_and(|s| sock::send_msg(s.as_fd(), &self.msg[..n], &[]).is_ok());
                    if sent {
                        c.state = State::Established;
                        events.push_back(CmEvent::Established {
                            conn: id,
                            private_data: hello.private_data,
                        });
                    } else {
                        c.fail(CmEvent::Unreachable { conn: id }, events, false);
                    }
                }
                Err(_) => c.fail(CmEvent::Unreachable { conn: id }, events, false),
            },
            (State::Connecting { .. }, Some(Msg::Reject(pd))) => c.fail(
                CmEvent::Rejected {
                    conn: id,
                    private_data: pd,
                },
                events,
                false,
            ),
            (State::AcceptWait, Some(Msg::Rtu)) => {
                c.state = State::Established;
                events.push_back(CmEvent::Established {
                    conn: id,
                    private_data: PrivateData::EMPTY,
                });
            }
            // End-of-file, garbage, or a message out of turn.
            (State::Established, _) => c.fail(CmEvent::Disconnected { conn: id }, events, true),
            _ => c.fail(CmEvent::Unreachable { conn: id }, events, false),
        }
    }

    fn send_req(&mut self, ci: usize, id: ConnId) {
        let Some(c) = self.conns.get(ci) else { return };
        let msg = Msg::Req(self.hello(c.pending_pd.as_bytes(), c));
        if self.send_hello(ci, &msg).is_err() {
            if let Some(c) = self.conns.get_mut(ci) {
                c.fail(CmEvent::Unreachable { conn: id }, &mut self.events, false);
            }
        }
    }

    /// [`Fabric::listen`] for this provider.
    pub(super) fn do_listen(&mut self, addr: &str) -> Result<ListenerId, FabricError> {
        let a = UnixAddr::parse(addr).ok_or_else(|| FabricError::BadAddress(addr.to_string()))?;
        let fd = sock::listen(&a).map_err(io_err("listen"))?;
        self.listeners.push(Listener { fd, path: a.path });
        Ok(ListenerId(self.listeners.len() as u32 - 1))
    }

    /// [`Fabric::connect`] for this provider.
    pub(super) fn do_connect(&mut self, addr: &str, qp: &QpConfig, private_data: &[u8]) -> Result<ConnId, FabricError> {
        let a = UnixAddr::parse(addr).ok_or_else(|| FabricError::BadAddress(addr.to_string()))?;
        let (cq, srq) = self.check_qp(qp)?;
        let now = Instant::now();
        let mut c = Conn::new(qp, cq, srq, &self.cfg, now).map_err(FabricError::Other)?;
        c.pending_pd = PrivateData::new(private_data);
        let s = sock::unconnected().map_err(io_err("socket"))?;
        use std::os::fd::AsRawFd;
        let r = sock::connect_again(s.as_raw_fd(), &a);
        c.sock = Some(s);
        let raw = self
            .conns
            .insert(c)
            .ok_or(FabricError::QueueFull { what: "connections" })?;
        let id = ConnId(raw);
        let ci = (raw & 0xffff) as usize;
        self.attach_conn(ci);
        let Some(c) = self.conns.get_mut(ci) else {
            return Err(FabricError::NotConnected(id));
        };
        match r {
            Ok(()) => {
                c.state = State::Connecting { connected: true };
                self.send_req(ci, id);
            }
            // The listener's backlog is full: retried by poll_cm.
            Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => c.addr = Some(a),
            Err(_) => c.fail(CmEvent::Unreachable { conn: id }, &mut self.events, false),
        }
        if let Some(s) = srq {
            self.distribute_srq(s);
        }
        Ok(id)
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
        let Some(r) = self.requests.remove(ri) else {
            return Err(FabricError::UnknownId {
                what: "connection request",
                id: req.0,
            });
        };
        let peer = Peer::attach(&r.hello, r.fds, &self.cfg).map_err(FabricError::Other)?;
        let now = Instant::now();
        let mut c = Conn::new(qp, cq, srq, &self.cfg, now).map_err(FabricError::Other)?;
        c.peer = Some(peer);
        c.sock = Some(r.sock);
        c.state = State::AcceptWait;
        let raw = self
            .conns
            .insert(c)
            .ok_or(FabricError::QueueFull { what: "connections" })?;
        let id = ConnId(raw);
        let ci = (raw & 0xffff) as usize;
        self.attach_conn(ci);
        let msg = {
            let c = self.conns.get(ci).ok_or(FabricError::NotConnected(id))?;
            Msg::Accept(self.hello(private_data, c))
        };
        if self.send_hello(ci, &msg).is_err() {
            if let Some(c) = self.conns.get_mut(ci) {
                c.fail(CmEvent::Unreachable { conn: id }, &mut self.events, false);
            }
        }
        if let Some(s) = srq {
            self.distribute_srq(s);
        }
        Ok(id)
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
        let n = wire::encode(&Msg::Reject(PrivateData::new(private_data)), &mut self.msg);
        // The requester may already be gone; nothing to do about it.
        let _ = sock::send_msg(r.sock.as_fd(), &self.msg[..n], &[]);
        Ok(())
    }

    /// [`Fabric::disconnect`] for this provider.
    pub(super) fn do_disconnect(&mut self, conn: ConnId) -> Result<(), FabricError> {
        let i = (conn.0 & 0xffff) as usize;
        if i >= self.conns.capacity() {
            return Err(FabricError::UnknownId {
                what: "connection",
                id: conn.0,
            });
        }
        let Some(ci) = self.conns.index(conn.0) else {
            return Ok(());
        };
        if let Some(c) = self.conns.get_mut(ci) {
            c.fail(CmEvent::Disconnected { conn }, &mut self.events, true);
        }
        Ok(())
    }

    /// [`Fabric::poll_cm`] for this provider.
    pub(super) fn do_poll_cm(&mut self) -> Option<CmEvent> {
        if self.events.is_empty() {
            let now = Instant::now();
            if now >= self.next_cm_sweep {
                self.next_cm_sweep = now + self.cfg.cm_sweep_period;
                self.cm_progress(now);
            }
        }
        let ev = self.events.pop_front()?;
        if let CmEvent::Disconnected { conn } | CmEvent::Rejected { conn, .. } | CmEvent::Unreachable { conn } = ev {
            if let Some(ci) = self.conns.index(conn.0) {
                if let Some(c) = self.conns.get_mut(ci) {
                    c.terminal_delivered = true;
                }
                // Flush what can be flushed now; reaped when everything is.
                let cq = self.conns.get(ci).map(|c| c.cq);
                if let Some(cq) = cq {
                    self.progress_cq(cq);
                }
                self.try_reap(ci);
            }
        }
        Some(ev)
    }
}
