//! Opening the device: the verbs context, the protection domain, the CM event
//! channel and the device's limits ([`VerbsFabric::new`]), and releasing every
//! rdma-core object the fabric owns ([`Drop`]).

use super::cq::wc_zero;
use super::qp::destroy_conn_id;
use super::*;

/// `ibv_device_attr::vendor_id` of Soft-RoCE (`RXE_VENDOR_ID` in the kernel).
const RXE_VENDOR_ID: u32 = 0xff_ffff;

/// The `wc_flags` bit(s) that say a receive completed a Send with Invalidate.
/// rxe (kernel 6.1, rdma-core 44) writes the *kernel's* `IB_WC_WITH_INVALIDATE`
/// (bit 2) into the user CQ instead of `IBV_WC_WITH_INV` (bit 3); bit 2 is
/// `IBV_WC_IP_CSUM_OK` for user space, which rxe never sets, so on rxe either
/// bit is taken to mean an invalidation.
fn invalidate_flags(vendor_id: u32) -> u32 {
    let inv = sys::ibv_wc_flags::IBV_WC_WITH_INV.0;
    if vendor_id == RXE_VENDOR_ID {
        inv | 1 << 2
    } else {
        inv
    }
}

impl Drop for VerbsFabric {
    fn drop(&mut self) {
        // SAFETY: every pointer below was created by this fabric, is destroyed
        // exactly once, and dependents go first (QPs and ids before SRQs and
        // CQs, windows before MRs, MRs before the PD, ids before the channel).
        unsafe {
            for i in self.conns.used().collect::<Vec<_>>() {
                if let Some(c) = self.conns.remove(i) {
                    destroy_conn_id(c.id, !c.qp.is_null());
                }
            }
            for i in self.requests.used().collect::<Vec<_>>() {
                if let Some(r) = self.requests.remove(i) {
                    sys::rdma_reject(r.id, ptr::null(), 0);
                    sys::rdma_destroy_id(r.id);
                }
            }
            for l in self.listeners.drain(..) {
                sys::rdma_destroy_id(l.id);
            }
            for s in self.srqs.drain(..) {
                sys::ibv_destroy_srq(s.srq);
            }
            // A CQ with unacknowledged events cannot be destroyed.
            self.ack_cq_events(true);
            for q in self.cqs.drain(..) {
                sys::ibv_destroy_cq(q.send);
                sys::ibv_destroy_cq(q.recv);
            }
            if !self.comp.is_null() {
                sys::ibv_destroy_comp_channel(self.comp);
            }
            for mw in self.mws.drain(..) {
                sys::ibv_dealloc_mw(mw);
            }
            for m in self.mrs.drain(..).flatten() {
                sys::ibv_dereg_mr(m.mr);
            }
            if !self.pd.is_null() {
                sys::ibv_dealloc_pd(self.pd);
            }
            if !self.channel.is_null() {
                sys::rdma_destroy_event_channel(self.channel);
            }
            if !self.dev_list.is_null() {
                sys::rdma_free_devices(self.dev_list);
            }
        }
    }
}

impl VerbsFabric {
    /// Open the device, allocate the protection domain and the CM event
    /// channel. Start-up; any thread (then owned by one core). Fails with
    /// [`NO_DEVICE`] (as `FabricError::Other`) when there is no RDMA device.
    pub fn new(cfg: VerbsConfig) -> Result<VerbsFabric, FabricError> {
        if cfg.max_conns == 0 || cfg.max_pending_requests == 0 {
            return Err(FabricError::Other(
                "max_conns and max_pending_requests must be positive".into(),
            ));
        }
        let mut n: c_int = 0;
        // SAFETY: rdma_get_devices writes `n` and returns NULL or a
        // NULL-terminated array of `n` open contexts, owned by librdmacm until
        // rdma_free_devices (called in Drop or below).
        let list = unsafe { sys::rdma_get_devices(&mut n) };
        if list.is_null() {
            return Err(FabricError::Other(NO_DEVICE.into()));
        }
        let mut me = VerbsFabric {
            dev_list: list,
            ctx: ptr::null_mut(),
            dev_name: String::new(),
            limits: DevLimits::default(),
            inv_flags: 0,
            pd: ptr::null_mut(),
            channel: ptr::null_mut(),
            comp: ptr::null_mut(),
            mrs: Vec::new(),
            mws: Vec::new(),
            cqs: Vec::new(),
            srqs: Vec::new(),
            listeners: Vec::new(),
            requests: Slab::with_capacity(cfg.max_pending_requests),
            conns: Slab::with_capacity(cfg.max_conns),
            by_qp: HashMap::with_capacity(cfg.max_conns as usize),
            events: VecDeque::with_capacity(2 * cfg.max_conns as usize + cfg.max_pending_requests as usize),
            wcs: Box::new([wc_zero(); WC_BATCH]),
            last_wc_error: None,
            dirty: Vec::new(),
            armed: Vec::new(),
            counts: VerbsCounts::default(),
            cfg,
        };
        let mut names = Vec::new();
        for i in 0..n.max(0) as usize {
            // SAFETY: `list` has `n` valid entries (see above).
            let ctx = unsafe { *list.add(i) };
            if ctx.is_null() {
                break;
            }
            // SAFETY: `ctx` is an open context; its device pointer is valid for
            // its life, and the name is a NUL-terminated string owned by it.
            let name = unsafe {
                let p = sys::ibv_get_device_name((*ctx).device);
                if p.is_null() {
                    String::new()
                } else {
                    CStr::from_ptr(p).to_string_lossy().into_owned()
                }
            };
            let wanted = match me.cfg.device.as_deref() {
                None => true,
                Some(d) => d == name,
            };
            if wanted && me.ctx.is_null() {
                me.ctx = ctx;
                me.dev_name = name.clone();
            }
            names.push(name);
        }
        if me.ctx.is_null() {
            return Err(FabricError::Other(match &me.cfg.device {
                Some(d) if !names.is_empty() => format!("no RDMA device {d:?} (have {})", names.join(", ")),
                _ => NO_DEVICE.into(),
            }));
        }
        me.limits = me.query_limits()?;
        me.inv_flags = invalidate_flags(me.limits.vendor_id);
        // SAFETY: `me.ctx` is an open context.
        me.pd = unsafe { sys::ibv_alloc_pd(me.ctx) };
        if me.pd.is_null() {
            return Err(errno("ibv_alloc_pd"));
        }
        // SAFETY: no arguments; returns NULL or a channel we own.
        me.channel = unsafe { sys::rdma_create_event_channel() };
        if me.channel.is_null() {
            return Err(errno("rdma_create_event_channel"));
        }
        // SAFETY: `channel` is valid; `fd` is its open descriptor. O_NONBLOCK
        // makes rdma_get_cm_event return EAGAIN instead of blocking.
        let fd = unsafe { (*me.channel).fd };
        // SAFETY: fcntl on a descriptor we own, with integer arguments only.
        let rc = unsafe {
            let fl = libc::fcntl(fd, libc::F_GETFL);
            if fl < 0 {
                fl
            } else {
                libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK)
            }
        };
        if rc < 0 {
            return Err(errno("fcntl(O_NONBLOCK) on the CM event channel"));
        }
        me.open_comp_channel()?;
        Ok(me)
    }

    fn query_limits(&self) -> Result<DevLimits, FabricError> {
        // SAFETY: ibv_device_attr / ibv_port_attr are plain old data; zero is a
        // valid initial value that the queries overwrite.
        let mut a: sys::ibv_device_attr = unsafe { std::mem::zeroed() };
        // SAFETY: `self.ctx` is an open context; `a` is a valid out pointer.
        let rc = unsafe { sys::ibv_query_device(self.ctx, &mut a) };
        if rc != 0 {
            return Err(rc_err("ibv_query_device", rc));
        }
        // SAFETY: as above.
        let mut p: sys::ibv_port_attr = unsafe { std::mem::zeroed() };
        // SAFETY: `self.ctx` is open, port 1 exists on every device (RDMA-CM
        // picks the port per connection; this is only for the message size).
        let prc = unsafe { sys::ibv_query_port(self.ctx, 1, &mut p) };
        let pos = |v: c_int| v.max(0) as u32;
        Ok(DevLimits {
            max_qp_wr: pos(a.max_qp_wr),
            max_sge: pos(a.max_sge),
            max_cqe: pos(a.max_cqe),
            max_srq_wr: pos(a.max_srq_wr),
            max_qp_rd_atom: a.max_qp_rd_atom.clamp(0, 255) as u8,
            max_qp_init_rd_atom: a.max_qp_init_rd_atom.clamp(0, 255) as u8,
            max_msg_size: if prc == 0 && p.max_msg_sz > 0 {
                p.max_msg_sz
            } else {
                1 << 30
            },
            vendor_id: a.vendor_id,
        })
    }

    /// Name of the device in use (e.g. "rxe0"). Any time.
    pub fn device_name(&self) -> &str {
        &self.dev_name
    }

    /// Connections currently held (live or waiting to be reaped). Any time.
    pub fn conn_count(&self) -> usize {
        self.conns.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalidation_flag_quirk_is_limited_to_rxe() {
        let inv = sys::ibv_wc_flags::IBV_WC_WITH_INV.0;
        assert_eq!(inv, 1 << 3);
        assert_eq!(invalidate_flags(0x02c9), inv, "Mellanox: the documented flag only");
        assert_eq!(invalidate_flags(RXE_VENDOR_ID), inv | 4, "rxe: the kernel's bit too");
        // What rxe was seen to report for a Send with Invalidate: GRH | bit 2.
        assert_ne!(0x5 & invalidate_flags(RXE_VENDOR_ID), 0);
        assert_eq!(0x5 & invalidate_flags(0x02c9), 0);
    }

    /// This runs wherever the tests run: on a host without RDMA (CI, this
    /// machine) creation must fail with the documented message, not panic; on
    /// a host with a device it must succeed and name it.
    #[test]
    fn creation_reports_no_device_or_names_one() {
        match VerbsFabric::new(VerbsConfig::default()) {
            Err(FabricError::Other(m)) => assert_eq!(m, NO_DEVICE),
            Err(e) => panic!("unexpected error: {e}"),
            Ok(f) => assert!(!f.device_name().is_empty()),
        }
    }

    #[test]
    fn unknown_device_is_an_error() {
        let cfg = VerbsConfig {
            device: Some("no-such-device-0".into()),
            ..VerbsConfig::default()
        };
        match VerbsFabric::new(cfg) {
            Err(FabricError::Other(m)) => assert!(m == NO_DEVICE || m.contains("no-such-device-0"), "{m}"),
            Err(e) => panic!("unexpected error: {e}"),
            Ok(_) => panic!("a device that does not exist was opened"),
        }
    }

    #[test]
    fn bad_config_is_refused_before_touching_rdma_core() {
        let cfg = VerbsConfig {
            max_conns: 0,
            ..VerbsConfig::default()
        };
        assert!(matches!(VerbsFabric::new(cfg), Err(FabricError::Other(m)) if m.contains("max_conns")));
    }
}
