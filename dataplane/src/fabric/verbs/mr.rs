//! Memory: registering regions as MRs, turning `(region, offset)` into
//! addresses and scatter/gather entries, and the Memory Windows that expose
//! a requester's chunk buffers to one connection ([`Fabric::expose`]).

use super::*;

impl VerbsFabric {
    /// [`Fabric::expose`] for this provider: a type-2 Memory Window bound
    /// over `buf` with a work request staged on `conn`'s send queue (posted
    /// in the same chain as, and ordered before, the Send that advertises
    /// it), for remote Read or remote Write only. A
    /// type-2 window is bound to the QP: a peer on another connection using
    /// its rkey gets a remote access error. A window of this QP freed by an
    /// earlier invalidation is rebound with the next rkey (its low byte
    /// bumped); only a QP's first windows cost an `ibv_alloc_mw`.
    pub(super) fn do_expose(&mut self, conn: ConnId, buf: LocalBuf, access: Access) -> Result<RemoteBuf, FabricError> {
        let ci = self.conns.index(conn.0).ok_or(FabricError::NotConnected(conn))?;
        let (mr, addr) = self.resolve(&buf)?;
        if !self.mrs[buf.region as usize].as_ref().is_some_and(|m| m.exposable) {
            return Err(FabricError::Unsupported(
                "exposing a region registered for local access",
            ));
        }
        let c = self.conns.get_mut(ci).ok_or(FabricError::NotConnected(conn))?;
        if !matches!(c.state, State::Established | State::Accepting) || c.qp.is_null() {
            return Err(FabricError::NotConnected(conn));
        }
        if c.sq.len() >= (c.cfg.send_depth.saturating_mul(INTERNAL_SQ_FACTOR)) as usize {
            return Err(FabricError::QueueFull { what: "send queue" });
        }
        let (mw, old) = match c.free_mws.pop() {
            Some(w) => w,
            None => {
                // SAFETY: `self.pd` is a valid PD; returns NULL or a window we own.
                let mw = unsafe { sys::ibv_alloc_mw(self.pd, sys::ibv_mw_type::IBV_MW_TYPE_2) };
                if mw.is_null() {
                    return Err(errno("ibv_alloc_mw"));
                }
                self.mws.push(mw);
                // SAFETY: `mw` was just allocated and is valid.
                (mw, unsafe { (*mw).rkey })
            }
        };
        // The provider reads a bind's current key from `mw->rkey` when the
        // chain is posted, and `flush_conn` updates it after: a window with
        // a bind still staged is posted before it is bound again.
        if self
            .conns
            .get(ci)
            .is_some_and(|c| c.staged.iter().any(|st| st.binds(mw)))
        {
            self.flush_conn(ci);
        }
        let c = self.conns.get_mut(ci).ok_or(FabricError::NotConnected(conn))?;
        if !matches!(c.state, State::Established | State::Accepting) || c.qp.is_null() {
            c.free_mws.push((mw, old));
            return Err(FabricError::NotConnected(conn));
        }
        let rkey = (old & !0xff) | (old.wrapping_add(1) & 0xff);
        use sys::ibv_access_flags as a;
        let flags = match access {
            Access::Read => a::IBV_ACCESS_REMOTE_READ.0,
            Access::Write => a::IBV_ACCESS_REMOTE_WRITE.0,
            Access::ReadWrite => a::IBV_ACCESS_REMOTE_READ.0 | a::IBV_ACCESS_REMOTE_WRITE.0,
        };
        // SAFETY: ibv_send_wr is plain old data (integers, pointers, unions of
        // those); zero is valid and the fields used are set below.
        let mut wr: sys::ibv_send_wr = unsafe { std::mem::zeroed() };
        wr.wr_id = INTERNAL_WR_ID.0;
        wr.opcode = sys::ibv_wr_opcode::IBV_WR_BIND_MW;
        wr.send_flags = sys::ibv_send_flags::IBV_SEND_SIGNALED.0;
        wr.bind_mw_tso_union.bind_mw = sys::bind_mw_t {
            mw,
            rkey,
            bind_info: sys::ibv_mw_bind_info {
                mr,
                addr,
                length: buf.len as u64,
                mw_access_flags: flags,
            },
        };
        // Staged with the Sends (one doorbell); the window's key in
        // `mw->rkey` is brought up to date when the chain is posted
        // (`flush_conn`).
        self.stage_internal(ci, wr);
        let c = self.conns.get_mut(ci).ok_or(FabricError::NotConnected(conn))?;
        c.windows.push((rkey, mw));
        Ok(RemoteBuf {
            handle: rkey,
            length: buf.len,
            offset: addr,
        })
    }

    /// [`Fabric::hide`] for this provider: a Local Invalidate staged on the
    /// window's QP (the window then waits on that QP's free list, so its
    /// next bind is ordered after the invalidation in the send queue). A window the peer
    /// invalidated was freed when its receive completed; one of a QP that is
    /// no longer usable is left for the QP's teardown.
    pub(super) fn do_hide(&mut self, conn: ConnId, handle: u32) {
        let Some(ci) = self.conns.index(conn.0) else { return };
        let Some(c) = self.conns.get_mut(ci) else { return };
        let Some(p) = c.windows.iter().position(|w| w.0 == handle) else {
            return;
        };
        if !matches!(c.state, State::Established | State::Accepting) || c.qp.is_null() {
            return;
        }
        let (rkey, mw) = c.windows.swap_remove(p);
        // SAFETY: as in `do_expose`.
        let mut wr: sys::ibv_send_wr = unsafe { std::mem::zeroed() };
        wr.wr_id = INTERNAL_WR_ID.0;
        wr.opcode = sys::ibv_wr_opcode::IBV_WR_LOCAL_INV;
        wr.send_flags = sys::ibv_send_flags::IBV_SEND_SIGNALED.0;
        wr.imm_data_invalidated_rkey_union.invalidated_rkey = rkey;
        c.free_mws.push((mw, rkey));
        // Staged, in order after what this QP has staged (the device
        // invalidates before it binds the window again).
        self.stage_internal(ci, wr);
    }

    /// Address and MR of a local buffer, checked against its registration.
    pub(super) fn resolve(&self, b: &LocalBuf) -> Result<(*mut sys::ibv_mr, u64), FabricError> {
        let m = self
            .mrs
            .get(b.region as usize)
            .and_then(Option::as_ref)
            .ok_or(FabricError::NotRegistered { region: b.region })?;
        let end = b.offset.checked_add(b.len as u64);
        if end.is_none() || end > Some(m.len) {
            return Err(FabricError::BadAddress(format!("{b:?} is outside its region")));
        }
        Ok((m.mr, m.base + b.offset))
    }

    pub(super) fn sge(&self, b: &LocalBuf) -> Result<sys::ibv_sge, FabricError> {
        self.resolve(b)?;
        let m = self.mrs[b.region as usize]
            .as_ref()
            .ok_or(FabricError::NotRegistered { region: b.region })?;
        Ok(sys::ibv_sge {
            addr: m.base + b.offset,
            length: b.len,
            lkey: m.lkey,
        })
    }

    /// [`Fabric::register_region`] for this provider.
    pub(super) fn do_register_region(
        &mut self,
        region: &Arc<mempool::region::Region>,
        region_access: RegionAccess,
    ) -> Result<MrKeys, FabricError> {
        let id = region.id() as usize;
        if self.mrs.get(id).is_some_and(Option::is_some) {
            return Err(FabricError::Other(format!("region {id} is already registered")));
        }
        use sys::ibv_access_flags as a;
        // No remote access through the MR itself: only windows open memory
        // to a peer (RFC 8166 s8.1).
        let exposable = region_access == RegionAccess::Exposable;
        let mut access = a::IBV_ACCESS_LOCAL_WRITE.0;
        if exposable {
            access |= a::IBV_ACCESS_MW_BIND.0;
        }
        // SAFETY: `self.pd` is our PD; the region's memory is mapped for
        // `len` bytes and stays mapped while we hold the Arc (kept in `Mr`).
        let mr = unsafe { sys::ibv_reg_mr(self.pd, region.as_ptr() as *mut c_void, region.len(), access as c_int) };
        if mr.is_null() {
            return Err(errno("ibv_reg_mr"));
        }
        // SAFETY: `mr` is the MR just registered.
        let (lkey, rkey) = unsafe { ((*mr).lkey, (*mr).rkey) };
        if self.mrs.len() <= id {
            self.mrs.resize_with(id + 1, || None);
        }
        self.mrs[id] = Some(Mr {
            mr,
            base: region.as_ptr() as u64,
            len: region.len() as u64,
            lkey,
            exposable,
            _region: Arc::clone(region),
        });
        Ok(MrKeys { lkey, rkey })
    }

    /// [`Fabric::remote_addr`] for this provider.
    pub(super) fn do_remote_addr(&self, region: u16, offset: u64) -> Result<u64, FabricError> {
        let m = self
            .mrs
            .get(region as usize)
            .and_then(Option::as_ref)
            .ok_or(FabricError::NotRegistered { region })?;
        if offset > m.len {
            return Err(FabricError::BadAddress(format!(
                "offset {offset} beyond region {region}"
            )));
        }
        Ok(m.base + offset)
    }
}
