//! Memory: registering regions as MRs, turning `(region, offset)` into
//! addresses and scatter/gather entries, and binding memory windows
//! ([`VerbsFabric::bind_window`]) for remote invalidation.

use super::qp::post_err;
use super::*;

impl VerbsFabric {
    /// Bind a fresh type-2 Memory Window over `buf` (remote Read and Write)
    /// with a work request on `conn`'s send queue; returns the window's rkey,
    /// usable by the peer once the bind completes (as a [`WcOpcode::Send`]
    /// completion with `wr_id`). A peer's Send with Invalidate of that rkey
    /// invalidates the window — unlike the persistent MRs' rkeys, which
    /// devices refuse to invalidate remotely. Needs [`VerbsConfig::mw_bind`].
    /// Called from the owning core.
    pub fn bind_window(&mut self, conn: ConnId, wr_id: WrId, buf: LocalBuf) -> Result<u32, FabricError> {
        if !self.cfg.mw_bind {
            return Err(FabricError::Unsupported("memory windows without VerbsConfig::mw_bind"));
        }
        let ci = self.conns.index(conn.0).ok_or(FabricError::NotConnected(conn))?;
        let (mr, addr) = self.resolve(&buf)?;
        let c = self.conns.get(ci).ok_or(FabricError::NotConnected(conn))?;
        if c.state != State::Established {
            return Err(FabricError::NotConnected(conn));
        }
        if c.sq.len() >= c.cfg.send_depth as usize {
            return Err(FabricError::QueueFull { what: "send queue" });
        }
        // SAFETY: `self.pd` is a valid PD; returns NULL or a window we own.
        let mw = unsafe { sys::ibv_alloc_mw(self.pd, sys::ibv_mw_type::IBV_MW_TYPE_2) };
        if mw.is_null() {
            return Err(errno("ibv_alloc_mw"));
        }
        self.mws.push(mw);
        // SAFETY: `mw` was just allocated and is valid.
        let old = unsafe { (*mw).rkey };
        let rkey = (old & !0xff) | (old.wrapping_add(1) & 0xff);
        // SAFETY: ibv_send_wr is plain old data (integers, pointers, unions of
        // those); zero is valid and the fields used are set below.
        let mut wr: sys::ibv_send_wr = unsafe { std::mem::zeroed() };
        wr.wr_id = wr_id.0;
        wr.opcode = sys::ibv_wr_opcode::IBV_WR_BIND_MW;
        wr.send_flags = sys::ibv_send_flags::IBV_SEND_SIGNALED.0;
        wr.bind_mw_tso_union.bind_mw = sys::bind_mw_t {
            mw,
            rkey,
            bind_info: sys::ibv_mw_bind_info {
                mr,
                addr,
                length: buf.len as u64,
                mw_access_flags: sys::ibv_access_flags::IBV_ACCESS_REMOTE_READ.0
                    | sys::ibv_access_flags::IBV_ACCESS_REMOTE_WRITE.0,
            },
        };
        let mut bad: *mut sys::ibv_send_wr = ptr::null_mut();
        // SAFETY: `c.qp` is a live QP (state Established); `wr` and the MR / MW
        // it names are valid for the call; the provider copies the request.
        let rc = unsafe { sys::ibv_post_send(c.qp, &mut wr, &mut bad) };
        if rc != 0 {
            return Err(post_err("ibv_post_send(BIND_MW)", rc));
        }
        if let Some(c) = self.conns.get_mut(ci) {
            c.sq.push_back(SqEntry {
                signaled: true,
                opcode: WcOpcode::Send,
            });
        }
        Ok(rkey)
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
    pub(super) fn do_register_region(&mut self, region: &Arc<mempool::region::Region>) -> Result<MrKeys, FabricError> {
        let id = region.id() as usize;
        if self.mrs.get(id).is_some_and(Option::is_some) {
            return Err(FabricError::Other(format!("region {id} is already registered")));
        }
        use sys::ibv_access_flags as a;
        let mut access = a::IBV_ACCESS_LOCAL_WRITE.0 | a::IBV_ACCESS_REMOTE_READ.0 | a::IBV_ACCESS_REMOTE_WRITE.0;
        if self.cfg.mw_bind {
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
