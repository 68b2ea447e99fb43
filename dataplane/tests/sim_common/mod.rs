//! Helpers shared by the `sim_*` integration tests.
#![allow(dead_code)]

use std::sync::Arc;

use dataplane::sim::{self, SimFabric, SimNetwork};
use dataplane::{
    Access, CmEvent, Completion, ConnId, CqId, Fabric, LocalBuf, MrKeys, QpConfig, RegionAccess, RemoteBuf, WcOpcode,
    WcStatus, WrId, NO_WINDOW,
};
use mempool::region::{Region, RegionConfig};

/// Bytes of each test region actually used (regions round up to 2 MiB).
pub const REGION_LEN: usize = 1 << 16;

/// A fresh region (not locked: tests must not depend on RLIMIT_MEMLOCK).
pub fn fresh_region(id: u16) -> Arc<Region> {
    let cfg = RegionConfig {
        lock: false,
        ..RegionConfig::default()
    };
    Arc::new(Region::create(id, REGION_LEN, &cfg).expect("create test region"))
}

thread_local! {
    static REGIONS: std::cell::RefCell<Vec<Arc<Region>>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Region `id` of this test thread, made once per thread (creating a region maps
/// and populates 2 MiB). Contents persist between uses: tests write what they
/// check. Each test runs on its own thread, so tests never share one.
pub fn region(id: u16) -> Arc<Region> {
    REGIONS.with(|r| {
        let mut v = r.borrow_mut();
        if let Some(x) = v.iter().find(|x| x.id() == id) {
            return x.clone();
        }
        let x = fresh_region(id);
        v.push(x.clone());
        x
    })
}

/// Write `data` at `offset` of `r`.
pub fn write(r: &Region, offset: u64, data: &[u8]) {
    // SAFETY: tests hold no references into regions; the sim only touches them
    // inside `step`, on this thread.
    assert!(unsafe { sim::poke(r, offset, data) }, "poke out of range");
}

/// Read `len` bytes at `offset` of `r`.
pub fn read(r: &Region, offset: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    // SAFETY: as in `write`.
    assert!(unsafe { sim::peek(r, offset, &mut v) }, "peek out of range");
    v
}

/// A recognisable pattern for `len` bytes, different for each `salt`.
pub fn pattern(salt: u64, len: usize) -> Vec<u8> {
    let mut r = sim::SimRng::new(salt ^ 0x5eed);
    (0..len).map(|_| r.next_u64() as u8).collect()
}

/// One endpoint with one registered region and one CQ.
pub struct Host {
    pub fab: SimFabric,
    pub region: Arc<Region>,
    pub keys: MrKeys,
    pub cq: CqId,
    /// A window over the whole region (Read and Write) exposed to the last
    /// connection [`connect_with`] made; [`NO_WINDOW`] before.
    pub window: u32,
}

impl Host {
    pub fn new(net: &SimNetwork, region: Arc<Region>) -> Host {
        let mut fab = net.endpoint();
        let keys = fab.register_region(&region, RegionAccess::Exposable).expect("register");
        let cq = fab.create_cq(4096).expect("cq");
        Host {
            fab,
            region,
            keys,
            cq,
            window: NO_WINDOW,
        }
    }

    /// Expose the whole region to `conn`'s peer for Reads and Writes; the
    /// window [`Host::segment`] names.
    pub fn expose_region(&mut self, conn: ConnId) {
        let whole = self.buf(0, self.region.len() as u32);
        self.window = self.fab.expose(conn, whole, Access::ReadWrite).expect("expose").handle;
    }

    pub fn buf(&self, offset: u64, len: u32) -> LocalBuf {
        LocalBuf {
            region: self.region.id(),
            offset,
            len,
        }
    }

    /// The segment a peer uses to reach `len` bytes at `offset` of our
    /// region, through the window [`Host::expose_region`] opened.
    pub fn segment(&self, offset: u64, len: u32) -> RemoteBuf {
        RemoteBuf {
            handle: self.window,
            length: len,
            offset: self.fab.remote_addr(self.region.id(), offset).expect("remote_addr"),
        }
    }

    pub fn qp(&self) -> QpConfig {
        QpConfig {
            cq: self.cq,
            ..QpConfig::default()
        }
    }

    pub fn drain(&mut self) -> Vec<Completion> {
        let mut out = Vec::new();
        let mut buf = [Completion {
            wr_id: WrId(0),
            status: WcStatus::General,
            opcode: WcOpcode::Recv,
            conn: ConnId(0),
            byte_len: 0,
            invalidated_rkey: None,
        }; 16];
        loop {
            let n = self.fab.poll_cq(self.cq, &mut buf);
            out.extend_from_slice(&buf[..n]);
            if n < buf.len() {
                return out;
            }
        }
    }

    pub fn cm_events(&mut self) -> Vec<CmEvent> {
        std::iter::from_fn(|| self.fab.poll_cm()).collect()
    }
}

/// Connect `client` to `server` through listener `name` with the given QP
/// configurations; runs the network until both sides are established.
/// Returns (client conn, server conn).
pub fn connect_with(
    net: &SimNetwork,
    client: &mut Host,
    server: &mut Host,
    name: &str,
    cqp: QpConfig,
    sqp: QpConfig,
) -> (ConnId, ConnId) {
    server.fab.listen(name).expect("listen");
    let c = client.fab.connect(name, &cqp, b"hi").expect("connect");
    let s = loop {
        assert!(net.step(), "network went idle before the connect request");
        if let Some(ev) = server.fab.poll_cm() {
            match ev {
                CmEvent::ConnectRequest { req, .. } => break server.fab.accept(req, &sqp, b"ok").expect("accept"),
                other => panic!("unexpected {other:?}"),
            }
        }
    };
    net.run_until_idle(10_000).expect("idle after connect");
    assert!(matches!(client.fab.poll_cm(), Some(CmEvent::Established { conn, .. }) if conn == c));
    assert!(matches!(server.fab.poll_cm(), Some(CmEvent::Established { conn, .. }) if conn == s));
    client.expose_region(c);
    server.expose_region(s);
    (c, s)
}

pub fn connect(net: &SimNetwork, client: &mut Host, server: &mut Host) -> (ConnId, ConnId) {
    let (cq, sq) = (client.qp(), server.qp());
    connect_with(net, client, server, "server", cq, sq)
}

pub fn wr(tag: u8, index: u64) -> WrId {
    WrId::new(tag, index)
}

pub mod workload;
