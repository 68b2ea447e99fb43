//! Memory exposure over a real RDMA device (issue 20 item 1; RFC 8166 s8.1),
//! run by tests/verbs/run.sh inside the Soft-RoCE VM:
//!
//! 1. a raw peer RDMA-Writes, then (on a new connection) RDMA-Reads, a
//!    responder's region with the region's real rkey: both fail with a remote
//!    access error and neither side's bytes change (the responder registers
//!    its regions for local access only);
//! 2. a requester exposes a chunk buffer to one connection (a Memory Window
//!    bound on that QP) and announces it with a Send, as a Call does: the
//!    peer's Write through that connection lands; the same rkey on another
//!    connection of the same two processes fails with a remote access error;
//!    after the requester hides the window (and says so with a Send), the
//!    rkey fails on its own connection too;
//! 3. the window is bound again (as the next Call's chunk would be, right
//!    after the invalidation) with a new rkey: a Write through it lands, and
//!    the earlier rkey fails with a remote access error.
//!
//! Usage: `verbs_exposure [IP:PORT]` (default `$VMLAB_IP:7491`). Prints
//! `verbs_exposure: PASS (N ms)` and exits 0 only when every check held.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dataplane::verbs::{VerbsConfig, VerbsFabric};
use dataplane::*;
use mempool::region::{Region, RegionConfig};

const REGION_LEN: usize = 1 << 20;
const DEADLINE: Duration = Duration::from_secs(60);
const LEN: u32 = 4096;

/// One fabric, its region and CQ, and what it has seen.
struct End {
    f: VerbsFabric,
    cq: CqId,
    region: Arc<Region>,
    keys: MrKeys,
    wcs: Vec<Completion>,
    events: Vec<CmEvent>,
}

impl End {
    fn new(id: u16, access: RegionAccess) -> Result<End, String> {
        let mut f = VerbsFabric::new(VerbsConfig::default()).map_err(|e| e.to_string())?;
        let rcfg = RegionConfig {
            lock: false,
            ..RegionConfig::default()
        };
        let region = Arc::new(Region::create(id, REGION_LEN, &rcfg).map_err(|e| e.to_string())?);
        let keys = f
            .register_region(&region, access)
            .map_err(|e| format!("register: {e}"))?;
        let cq = f.create_cq(256).map_err(|e| format!("cq: {e}"))?;
        Ok(End {
            f,
            cq,
            region,
            keys,
            wcs: Vec::new(),
            events: Vec::new(),
        })
    }
    fn poll(&mut self) {
        while let Some(ev) = self.f.poll_cm() {
            self.events.push(ev);
        }
        let mut out = [Completion::EMPTY; 16];
        let n = self.f.poll_cq(self.cq, &mut out);
        self.wcs.extend_from_slice(&out[..n]);
    }
    fn buf(&self, off: u64, len: u32) -> LocalBuf {
        LocalBuf {
            region: self.region.id(),
            offset: off,
            len,
        }
    }
    fn fill(&self, off: u64, byte: u8, len: u32) {
        // SAFETY: inside the region's mapping; no work request covers the range.
        unsafe { std::ptr::write_bytes(self.region.as_ptr().add(off as usize), byte, len as usize) }
    }
    fn bytes(&self, off: u64, len: u32) -> Vec<u8> {
        // SAFETY: as in `fill`; read after the completion that ends the
        // device's access.
        unsafe { std::slice::from_raw_parts(self.region.as_ptr().add(off as usize), len as usize) }.to_vec()
    }
    fn take_wc(&mut self, id: WrId) -> Option<Completion> {
        let i = self.wcs.iter().position(|c| c.wr_id == id)?;
        Some(self.wcs.remove(i))
    }
}

/// Poll every end until `done` holds.
fn wait(ends: &mut [&mut End], what: &str, mut done: impl FnMut(&mut [&mut End]) -> bool) -> Result<(), String> {
    let t0 = Instant::now();
    loop {
        for e in ends.iter_mut() {
            e.poll();
        }
        if done(ends) {
            println!("  ok: {what} ({} ms)", t0.elapsed().as_millis());
            return Ok(());
        }
        if t0.elapsed() > DEADLINE {
            return Err(format!("timed out waiting for {what}"));
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

fn check(cond: bool, what: &str) -> Result<(), String> {
    if cond {
        println!("  ok: {what}");
        Ok(())
    } else {
        Err(format!("check failed: {what}"))
    }
}

fn qp(cq: CqId) -> QpConfig {
    QpConfig {
        cq,
        send_depth: 16,
        recv_depth: 8,
        ..QpConfig::default()
    }
}

/// Connect `a` to `b` (listening on `addr`); both post 4 receives. Returns
/// (a's conn, b's conn).
fn connect(a: &mut End, b: &mut End, addr: &str) -> Result<(ConnId, ConnId), String> {
    let ca =
        a.f.connect(addr, &qp(a.cq), b"x")
            .map_err(|e| format!("connect: {e}"))?;
    for k in 0..4 {
        let wr = RecvWr {
            wr_id: WrId::new(1, k),
            buf: a.buf(0x8_0000 + k * 4096, 4096),
        };
        a.f.post_recv(ca, &wr).map_err(|e| format!("post_recv: {e}"))?;
    }
    let mut req = None;
    wait(&mut [a, b], "connect request", |e| {
        if let Some(i) = e[1]
            .events
            .iter()
            .position(|v| matches!(v, CmEvent::ConnectRequest { .. }))
        {
            if let CmEvent::ConnectRequest { req: r, .. } = e[1].events.remove(i) {
                req = Some(r);
            }
        }
        req.is_some()
    })?;
    let cb =
        b.f.accept(req.ok_or("request")?, &qp(b.cq), b"")
            .map_err(|e| format!("accept: {e}"))?;
    for k in 0..4 {
        let wr = RecvWr {
            wr_id: WrId::new(1, k),
            buf: b.buf(0x8_0000 + k * 4096, 4096),
        };
        b.f.post_recv(cb, &wr).map_err(|e| format!("post_recv: {e}"))?;
    }
    let (mut up_a, mut up_b) = (false, false);
    wait(&mut [a, b], "Established on both sides", |e| {
        up_a |= take_event(e[0], |v| matches!(v, CmEvent::Established { conn, .. } if *conn == ca));
        up_b |= take_event(e[1], |v| matches!(v, CmEvent::Established { conn, .. } if *conn == cb));
        up_a && up_b
    })?;
    Ok((ca, cb))
}

fn take_event(e: &mut End, f: impl Fn(&CmEvent) -> bool) -> bool {
    match e.events.iter().position(f) {
        Some(i) => {
            e.events.remove(i);
            true
        }
        None => false,
    }
}

/// Post `op` of LEN bytes at local offset `at` against `remote` on `conn` of
/// `who` and wait for its completion; returns its status.
fn rdma(
    who: &mut End,
    other: &mut End,
    conn: ConnId,
    op: SendOp,
    at: u64,
    remote: RemoteBuf,
    tag: u64,
) -> Result<WcStatus, String> {
    let id = WrId::new(5, tag);
    let wr = SendWr::new(id, op, who.buf(at, LEN), remote);
    who.f.post_send(conn, &wr).map_err(|e| format!("post {op:?}: {e}"))?;
    let mut got = None;
    wait(&mut [who, other], &format!("{op:?} completion"), |e| {
        got = e[0].take_wc(id);
        got.is_some()
    })?;
    Ok(got.ok_or("completion")?.status)
}

/// `from` Sends 8 bytes on `conn` and `to` receives them: orders what
/// `from` posted before (a window bind or invalidation) before what `to`
/// does next, as a Call's Send does.
fn announce(from: &mut End, to: &mut End, conn: ConnId, tag: u64) -> Result<(), String> {
    let wr = SendWr::new(
        WrId::new(6, tag),
        SendOp::Send,
        from.buf(0x7_0000, 8),
        RemoteBuf::default(),
    );
    from.f.post_send(conn, &wr).map_err(|e| format!("post send: {e}"))?;
    wait(&mut [from, to], "the announcing Send received", |e| {
        e[1].wcs
            .iter()
            .position(|c| c.opcode == WcOpcode::Recv && c.status == WcStatus::Success)
            .map(|i| e[1].wcs.remove(i))
            .is_some()
    })
}

fn run(addr: &str) -> Result<(), String> {
    let mut rsp = End::new(0, RegionAccess::Local)?;
    let mut raw = End::new(2, RegionAccess::Local)?;
    rsp.f.listen(addr).map_err(|e| format!("listen {addr}: {e}"))?;
    let theirs_at = 0x1_0000u64;
    let raddr = rsp.f.remote_addr(0, theirs_at).map_err(|e| e.to_string())?;
    let real = RemoteBuf {
        handle: rsp.keys.rkey,
        length: LEN,
        offset: raddr,
    };
    println!("[1] the responder's region with its real rkey {:#x}", rsp.keys.rkey);
    rsp.fill(theirs_at, 0x11, LEN);
    raw.fill(0, 0xa5, LEN);
    let (c1, _) = connect(&mut raw, &mut rsp, addr)?;
    let st = rdma(&mut raw, &mut rsp, c1, SendOp::RdmaWrite, 0, real, 1)?;
    check(st == WcStatus::RemoteAccess, &format!("RDMA Write: {st:?}"))?;
    check(
        rsp.bytes(theirs_at, LEN) == vec![0x11; LEN as usize],
        "the responder's bytes are untouched",
    )?;
    let (c2, _) = connect(&mut raw, &mut rsp, addr)?;
    let st = rdma(&mut raw, &mut rsp, c2, SendOp::RdmaRead, 0, real, 2)?;
    check(st == WcStatus::RemoteAccess, &format!("RDMA Read: {st:?}"))?;
    check(raw.bytes(0, LEN) == vec![0xa5; LEN as usize], "nothing was read")?;

    println!("[2] a requester's chunk window: its connection, while exposed, only");
    let mut req = End::new(1, RegionAccess::Exposable)?;
    let (qa, ra) = connect(&mut req, &mut rsp, addr)?;
    let (_qb, rb) = connect(&mut req, &mut rsp, addr)?;
    let chunk_at = 0x2_0000u64;
    req.fill(chunk_at, 0x22, LEN);
    let seg = req
        .f
        .expose(qa, req.buf(chunk_at, LEN), Access::Write)
        .map_err(|e| format!("expose: {e}"))?;
    announce(&mut req, &mut rsp, qa, 1)?;
    rsp.fill(0x3_0000, 0x33, LEN);
    let st = rdma(&mut rsp, &mut req, rb, SendOp::RdmaWrite, 0x3_0000, seg, 3)?;
    check(
        st == WcStatus::RemoteAccess,
        &format!(
            "Write with connection A's window rkey {:#x} on connection B: {st:?}",
            seg.handle
        ),
    )?;
    check(
        req.bytes(chunk_at, LEN) == vec![0x22; LEN as usize],
        "A's chunk is untouched",
    )?;
    rsp.fill(0x4_0000, 0x44, LEN);
    let st = rdma(&mut rsp, &mut req, ra, SendOp::RdmaWrite, 0x4_0000, seg, 4)?;
    check(
        st == WcStatus::Success,
        &format!("Write through A's window on A's connection: {st:?}"),
    )?;
    check(
        req.bytes(chunk_at, LEN) == vec![0x44; LEN as usize],
        "the Write landed in A's chunk",
    )?;
    req.f.hide(qa, seg.handle);
    announce(&mut req, &mut rsp, qa, 2)?;

    println!("[3] the window bound again after its invalidation, as the next Call's chunk");
    // The same Memory Window, rebound right after the Local Invalidate with
    // the next rkey (the bind must name the key the window has now).
    let seg2 = req
        .f
        .expose(qa, req.buf(chunk_at, LEN), Access::Write)
        .map_err(|e| format!("expose again: {e}"))?;
    check(
        seg2.handle != seg.handle,
        &format!("a new rkey {:#x} (was {:#x})", seg2.handle, seg.handle),
    )?;
    announce(&mut req, &mut rsp, qa, 3)?;
    rsp.fill(0x6_0000, 0x66, LEN);
    let st = rdma(&mut rsp, &mut req, ra, SendOp::RdmaWrite, 0x6_0000, seg2, 6)?;
    check(
        st == WcStatus::Success,
        &format!(
            "Write through the rebound window: {st:?}; requester's last error completion: {:?}",
            req.f.last_wc_error().map(|e| e.to_string())
        ),
    )?;
    check(
        req.bytes(chunk_at, LEN) == vec![0x66; LEN as usize],
        "the Write landed in A's chunk",
    )?;

    rsp.fill(0x5_0000, 0x55, LEN);
    let st = rdma(&mut rsp, &mut req, ra, SendOp::RdmaWrite, 0x5_0000, seg, 5)?;
    check(
        st == WcStatus::RemoteAccess,
        &format!("Write with the window's earlier rkey (hidden): {st:?}"),
    )?;
    check(
        req.bytes(chunk_at, LEN) == vec![0x66; LEN as usize],
        "A's chunk is untouched since",
    )?;
    Ok(())
}

fn main() -> ExitCode {
    let addr = std::env::args().nth(1).unwrap_or_else(|| {
        let ip = std::env::var("VMLAB_IP").unwrap_or_else(|_| "10.0.2.15".into());
        format!("{ip}:7491")
    });
    let t0 = Instant::now();
    match run(&addr) {
        Ok(()) => {
            println!("verbs_exposure: PASS ({} ms)", t0.elapsed().as_millis());
            ExitCode::SUCCESS
        }
        Err(e) => {
            println!("verbs_exposure: FAIL: {e}");
            ExitCode::FAILURE
        }
    }
}
