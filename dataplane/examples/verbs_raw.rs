//! Raw test of the `verbs` provider on a real RDMA device (run by
//! tests/verbs/run.sh inside a Soft-RoCE VM; any host with a device works).
//!
//! Two fabrics in one process, a "server" that listens and a "client" that
//! connects to it through the device (loopback through rxe works for RDMA-CM):
//!
//! 1. connect with private data and a reject carrying private data;
//! 2. connect with private data both ways; receives posted before the QP exists;
//! 3. Send/Recv with a two-SGE gather, an inline Send, and a Send back;
//! 4. RDMA Write and RDMA Read, checked byte for byte; three Writes posted
//!    as one chain (one `ibv_post_send`), only the signaled ones reported,
//!    in order;
//!    4c. interrupt mode: an armed receive CQ makes the completion channel
//!    readable when a Send arrives; arming again reads the channel only
//!    after a poll returned a completion (no read that finds it empty);
//! 5. Send with Invalidate of a Memory Window's rkey, seen by the receiver;
//! 6. an RDMA Write with that (now invalid) rkey: RemoteAccess, then every
//!    outstanding work request flushed and `Disconnected` on both sides, and
//!    every connection reaped;
//! 7. RNR: a Send to a peer with no receive posted fails with
//!    RnrRetryExceeded once the retries the peer allowed are spent.
//!
//! Usage: `verbs_raw [IP:PORT]` (default `$VMLAB_IP:7471`). Prints
//! `verbs_raw: PASS` and exits 0 only when every check held.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dataplane::verbs::{VerbsConfig, VerbsFabric};
use dataplane::*;
use mempool::region::{Region, RegionConfig};

const REGION_LEN: usize = 1 << 20;
const DEADLINE: Duration = Duration::from_secs(60);

/// One fabric with its CQ, region, and what it has seen so far.
struct Side {
    name: &'static str,
    f: VerbsFabric,
    cq: CqId,
    region: Arc<Region>,
    keys: MrKeys,
    wcs: Vec<Completion>,
    events: Vec<CmEvent>,
}

impl Side {
    fn new(name: &'static str, region_id: u16) -> Result<Side, String> {
        let cfg = VerbsConfig::default();
        let mut f = VerbsFabric::new(cfg).map_err(|e| format!("{name}: {e}"))?;
        let rcfg = RegionConfig {
            lock: false,
            ..RegionConfig::default()
        };
        let region = Arc::new(Region::create(region_id, REGION_LEN, &rcfg).map_err(|e| e.to_string())?);
        let keys = f
            .register_region(&region, RegionAccess::Exposable)
            .map_err(|e| format!("{name}: register: {e}"))?;
        let cq = f.create_cq(256).map_err(|e| format!("{name}: cq: {e}"))?;
        Ok(Side {
            name,
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
            println!("  {}: cm {:?}", self.name, ev);
            self.events.push(ev);
        }
        let mut out = [Completion::EMPTY; 16];
        let n = self.f.poll_cq(self.cq, &mut out);
        self.wcs.extend_from_slice(&out[..n]);
    }

    fn bytes(&self, off: usize, len: usize) -> &[u8] {
        // SAFETY: the region is mapped for REGION_LEN bytes; callers read only
        // after the completion that ends the device's access to the range.
        unsafe { std::slice::from_raw_parts(self.region.as_ptr().add(off), len) }
    }

    fn fill(&mut self, off: usize, data: &[u8]) {
        // SAFETY: as above; no work request touching this range is posted.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.region.as_ptr().add(off), data.len()) }
    }

    fn buf(&self, off: u64, len: u32) -> LocalBuf {
        LocalBuf {
            region: self.region.id(),
            offset: off,
            len,
        }
    }

    /// Take the completion with `wr_id`, if it arrived.
    fn take_wc(&mut self, wr_id: WrId) -> Option<Completion> {
        let i = self.wcs.iter().position(|c| c.wr_id == wr_id)?;
        Some(self.wcs.remove(i))
    }
}

fn pattern(salt: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(13).wrapping_add(salt))
        .collect()
}

/// Poll both sides until `done` holds (or the deadline passes).
fn wait(
    a: &mut Side,
    b: &mut Side,
    what: &str,
    mut done: impl FnMut(&mut Side, &mut Side) -> bool,
) -> Result<(), String> {
    let t0 = Instant::now();
    loop {
        a.poll();
        b.poll();
        if done(a, b) {
            println!("  ok: {what} ({} ms)", t0.elapsed().as_millis());
            return Ok(());
        }
        if t0.elapsed() > DEADLINE {
            return Err(format!(
                "timed out waiting for {what}; {} events {:?} wcs {:?}; {} events {:?} wcs {:?}",
                a.name, a.events, a.wcs, b.name, b.events, b.wcs
            ));
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

fn take_request(s: &mut Side) -> Option<(ConnReqId, PrivateData)> {
    let i = s
        .events
        .iter()
        .position(|e| matches!(e, CmEvent::ConnectRequest { .. }))?;
    match s.events.remove(i) {
        CmEvent::ConnectRequest { req, private_data, .. } => Some((req, private_data)),
        _ => None,
    }
}

fn take_event(s: &mut Side, f: impl Fn(&CmEvent) -> bool) -> Option<CmEvent> {
    let i = s.events.iter().position(f)?;
    Some(s.events.remove(i))
}

fn run(addr: &str) -> Result<(), String> {
    let mut srv = Side::new("server", 0)?;
    let mut cli = Side::new("client", 1)?;
    println!(
        "device {} caps {:?}; server rkey {:#x}, client rkey {:#x}",
        srv.f.device_name(),
        srv.f.caps(),
        srv.keys.rkey,
        cli.keys.rkey
    );
    srv.f.listen(addr).map_err(|e| format!("listen {addr}: {e}"))?;
    let qp = QpConfig {
        cq: cli.cq,
        send_depth: 32,
        recv_depth: 16,
        max_inline: 64,
        ..QpConfig::default()
    };

    println!("[1] reject with private data");
    let c0 = cli.f.connect(addr, &qp, b"please").map_err(|e| e.to_string())?;
    let mut req = None;
    wait(&mut srv, &mut cli, "connect request", |s, _| {
        req = take_request(s);
        req.is_some()
    })?;
    let (r0, pd) = req.take().ok_or("no request")?;
    check(
        pd.as_bytes().starts_with(b"please"),
        "REQ private data reached the listener",
    )?;
    srv.f.reject(r0, b"go away").map_err(|e| e.to_string())?;
    let mut rej = None;
    wait(&mut srv, &mut cli, "Rejected", |_, c| {
        rej = take_event(c, |e| matches!(e, CmEvent::Rejected { conn, .. } if *conn == c0));
        rej.is_some()
    })?;
    match rej {
        Some(CmEvent::Rejected { private_data, .. }) => check(
            private_data.as_bytes().starts_with(b"go away"),
            "REJ private data reached the client",
        )?,
        other => return Err(format!("expected Rejected, got {other:?}")),
    }

    println!("[2] connect with private data; receives posted before the QP exists");
    let conn_c = cli.f.connect(addr, &qp, b"hello-req").map_err(|e| e.to_string())?;
    const RECVS: u64 = 4;
    for k in 0..RECVS {
        let wr = RecvWr {
            wr_id: WrId::new(1, k),
            buf: cli.buf(0x8_0000 + k * 4096, 4096),
        };
        cli.f
            .post_recv(conn_c, &wr)
            .map_err(|e| format!("early post_recv: {e}"))?;
    }
    wait(&mut srv, &mut cli, "connect request", |s, _| {
        req = take_request(s);
        req.is_some()
    })?;
    let (r1, pd) = req.take().ok_or("no request")?;
    check(pd.as_bytes().starts_with(b"hello-req"), "REQ private data")?;
    let sqp = QpConfig { cq: srv.cq, ..qp };
    let conn_s = srv
        .f
        .accept(r1, &sqp, b"hello-rep")
        .map_err(|e| format!("accept: {e}"))?;
    for k in 0..RECVS {
        let wr = RecvWr {
            wr_id: WrId::new(1, k),
            buf: srv.buf(0x8_0000 + k * 4096, 4096),
        };
        srv.f.post_recv(conn_s, &wr).map_err(|e| format!("post_recv: {e}"))?;
    }
    let mut est_c = None;
    let mut est_s = false;
    wait(&mut srv, &mut cli, "Established on both sides", |s, c| {
        if est_c.is_none() {
            est_c = take_event(c, |e| matches!(e, CmEvent::Established { conn, .. } if *conn == conn_c));
        }
        est_s |= take_event(s, |e| matches!(e, CmEvent::Established { conn, .. } if *conn == conn_s)).is_some();
        est_c.is_some() && est_s
    })?;
    match est_c {
        Some(CmEvent::Established { private_data, .. }) => check(
            private_data.as_bytes().starts_with(b"hello-rep"),
            "REP private data reached the client",
        )?,
        other => return Err(format!("expected Established, got {other:?}")),
    }
    println!(
        "  client qp {:?} inline {:?}; server qp {:?}",
        cli.f.qp_num(conn_c),
        cli.f.max_inline(conn_c),
        srv.f.qp_num(conn_s)
    );
    // The transport retries both QPs use come from the active side's
    // retry_count (REQ), as the module docs say; the ACK timeouts are the
    // CM's from the path (printed: a retransmission waits that long).
    let (tc, ts) = (cli.f.qp_transport(conn_c), srv.f.qp_transport(conn_s));
    println!(
        "  client QP transport {tc:?} (ACK timeout {:?} us); server QP {ts:?} (ACK timeout {:?} us)",
        tc.and_then(|t| t.ack_timeout_us()),
        ts.and_then(|t| t.ack_timeout_us())
    );
    let want = qp.retry_count.min(7);
    check(
        tc.map(|t| t.retry_cnt) == Some(want) && ts.map(|t| t.retry_cnt) == Some(want),
        "both QPs hold the client's retry_count (ibv_query_qp)",
    )?;

    println!("[3] Send/Recv: two-SGE gather, inline, and back");
    let head = pattern(1, 100);
    let body = pattern(2, 3000);
    cli.fill(0, &head);
    cli.fill(4096, &body);
    let mut wr = SendWr::new(WrId::new(2, 1), SendOp::Send, cli.buf(0, 100), RemoteBuf::default());
    wr.sge[1] = cli.buf(4096, 3000);
    wr.num_sge = 2;
    cli.f.post_send(conn_c, &wr).map_err(|e| format!("post_send: {e}"))?;
    let small = pattern(3, 40);
    cli.fill(8192, &small);
    let inline_ok = cli.f.max_inline(conn_c).unwrap_or(0) >= 40;
    check(inline_ok, "the client QP takes 40-byte sends inline")?;
    let wr2 = SendWr::new(WrId::new(2, 2), SendOp::Send, cli.buf(8192, 40), RemoteBuf::default());
    cli.f
        .post_send(conn_c, &wr2)
        .map_err(|e| format!("post_send inline: {e}"))?;
    // Overwrite the inline source at once: the bytes were copied at post time.
    cli.fill(8192, &[0xee; 40]);
    let (mut r_a, mut r_b) = (None, None);
    wait(&mut srv, &mut cli, "two receives on the server", |s, _| {
        if r_a.is_none() {
            r_a = s.take_wc(WrId::new(1, 0));
        }
        if r_b.is_none() {
            r_b = s.take_wc(WrId::new(1, 1));
        }
        r_a.is_some() && r_b.is_some()
    })?;
    let (ra, rb) = (r_a.ok_or("r_a")?, r_b.ok_or("r_b")?);
    check(
        ra.status == WcStatus::Success && ra.opcode == WcOpcode::Recv && ra.byte_len == 3100 && ra.conn == conn_s,
        &format!("gathered Send received: {ra:?}"),
    )?;
    let mut joined = head.clone();
    joined.extend_from_slice(&body);
    check(srv.bytes(0x8_0000, 3100) == &joined[..], "gathered bytes match")?;
    check(
        rb.status == WcStatus::Success && rb.byte_len == 40,
        "inline Send received",
    )?;
    check(
        srv.bytes(0x8_1000, 40) == &small[..],
        "inline bytes are the ones at post time",
    )?;
    wait(&mut srv, &mut cli, "client send completions", |_, c| {
        c.wcs
            .iter()
            .filter(|w| w.wr_id.tag() == 2 && w.status == WcStatus::Success)
            .count()
            == 2
    })?;
    cli.wcs.retain(|w| w.wr_id.tag() != 2);
    let back = pattern(4, 777);
    srv.fill(0x1000, &back);
    let wr = SendWr::new(
        WrId::new(2, 3),
        SendOp::Send,
        srv.buf(0x1000, 777),
        RemoteBuf::default(),
    );
    srv.f
        .post_send(conn_s, &wr)
        .map_err(|e| format!("server post_send: {e}"))?;
    let mut rc0 = None;
    wait(
        &mut srv,
        &mut cli,
        "client receive (posted before the QP existed)",
        |_, c| {
            rc0 = c.take_wc(WrId::new(1, 0));
            rc0.is_some()
        },
    )?;
    let rc0 = rc0.ok_or("rc0")?;
    check(
        rc0.status == WcStatus::Success && rc0.byte_len == 777,
        "server-to-client Send",
    )?;
    check(cli.bytes(0x8_0000, 777) == &back[..], "server-to-client bytes match")?;
    let mut sc = None;
    wait(&mut srv, &mut cli, "server send completion", |s, _| {
        sc = s.take_wc(WrId::new(2, 3));
        sc.is_some()
    })?;
    check(
        sc.is_some_and(|w| w.status == WcStatus::Success && w.opcode == WcOpcode::Send && w.conn == conn_s),
        "server send completed",
    )?;

    println!("[4] RDMA Write and RDMA Read");
    let wdata = pattern(5, 8192);
    cli.fill(0x1_0000, &wdata);
    let target = srv
        .f
        .expose(conn_s, srv.buf(0x2_0000, 8192), Access::Write)
        .map_err(|e| format!("expose: {e}"))?;
    let wr = SendWr::new(WrId::new(3, 1), SendOp::RdmaWrite, cli.buf(0x1_0000, 8192), target);
    cli.f.post_send(conn_c, &wr).map_err(|e| format!("post write: {e}"))?;
    let mut w = None;
    wait(&mut srv, &mut cli, "RDMA Write completion", |_, c| {
        w = c.take_wc(WrId::new(3, 1));
        w.is_some()
    })?;
    let w = w.ok_or("w")?;
    check(
        w.status == WcStatus::Success && w.opcode == WcOpcode::RdmaWrite,
        &format!("write: {w:?}"),
    )?;
    check(
        srv.bytes(0x2_0000, 8192) == &wdata[..],
        "written bytes landed in the server region",
    )?;
    let rdata = pattern(6, 8192);
    srv.fill(0x4_0000, &rdata);
    let source = srv
        .f
        .expose(conn_s, srv.buf(0x4_0000, 8192), Access::Read)
        .map_err(|e| format!("expose: {e}"))?;
    let wr = SendWr::new(WrId::new(3, 2), SendOp::RdmaRead, cli.buf(0x5_0000, 8192), source);
    cli.f.post_send(conn_c, &wr).map_err(|e| format!("post read: {e}"))?;
    let mut r = None;
    wait(&mut srv, &mut cli, "RDMA Read completion", |_, c| {
        r = c.take_wc(WrId::new(3, 2));
        r.is_some()
    })?;
    let r = r.ok_or("r")?;
    check(
        r.status == WcStatus::Success && r.opcode == WcOpcode::RdmaRead,
        &format!("read: {r:?}"),
    )?;
    check(
        cli.bytes(0x5_0000, 8192) == &rdata[..],
        "read bytes match the server region",
    )?;

    println!("[4b] doorbell batching: three RDMA Writes staged, posted as one chain");
    // Into the window of step 4 (8192 bytes): a signaled Write, an
    // unsignaled one, a signaled one; one flush, one ibv_post_send. The
    // signaled ones are reported, in order; the unsignaled one is not.
    let before = cli.f.counts();
    let chunks = [pattern(8, 2048), pattern(9, 2048), pattern(10, 4096)];
    let mut at = 0u64;
    for (k, data) in chunks.iter().enumerate() {
        cli.fill(0x1_8000 + at as usize, data);
        let mut t = target;
        t.offset += at;
        t.length = data.len() as u32;
        let mut wr = SendWr::new(
            WrId::new(4, k as u64 + 1),
            SendOp::RdmaWrite,
            cli.buf(0x1_8000 + at, data.len() as u32),
            t,
        );
        wr.signaled = k != 1;
        cli.f
            .post_send(conn_c, &wr)
            .map_err(|e| format!("post chained write: {e}"))?;
        at += data.len() as u64;
    }
    check(
        cli.f.counts().post_send_calls == before.post_send_calls,
        "nothing posted before the flush",
    )?;
    cli.f.flush();
    let after = cli.f.counts();
    check(
        after.post_send_calls == before.post_send_calls + 1 && after.send_wrs == before.send_wrs + 3,
        &format!("one ibv_post_send for three Writes: {before:?} -> {after:?}"),
    )?;
    wait(&mut srv, &mut cli, "the chain's completions", |_, c| {
        c.wcs.iter().any(|w| w.wr_id == WrId::new(4, 3))
    })?;
    let order: Vec<WrId> = cli.wcs.iter().filter(|w| w.wr_id.tag() == 4).map(|w| w.wr_id).collect();
    check(
        order == [WrId::new(4, 1), WrId::new(4, 3)],
        &format!("the signaled Writes complete, in order, the unsignaled one not: {order:?}"),
    )?;
    check(
        cli.wcs
            .iter()
            .filter(|w| w.wr_id.tag() == 4)
            .all(|w| w.status == WcStatus::Success && w.opcode == WcOpcode::RdmaWrite && w.conn == conn_c),
        "chained Writes succeeded",
    )?;
    cli.wcs.retain(|w| w.wr_id.tag() != 4);
    let joined: Vec<u8> = chunks.concat();
    check(srv.bytes(0x2_0000, 8192) == &joined[..], "the chain's bytes landed")?;

    println!("[4c] interrupt mode: the channel wakes a receiver; arming reads it only after a completion");
    // The client is the receiver here; its receive 1 is re-posted after, so
    // the later steps find the queues as they were.
    cli.poll();
    check(cli.f.arm_wakeup_receives(), "the client arms its receive CQ")?;
    let armed = cli.f.counts();
    check(cli.f.arm_wakeup_receives(), "and arms again, nothing polled since")?;
    let again = cli.f.counts();
    check(
        again.event_reads == armed.event_reads && again.notify_requests == armed.notify_requests,
        &format!("arming again with no completion since: no channel read, no request ({armed:?} -> {again:?})"),
    )?;
    let comp_fd = *cli.f.wake_fds().first().ok_or("no wake descriptor")?;
    let readable = |timeout_ms: i32| {
        let mut p = libc::pollfd {
            fd: comp_fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one live pollfd.
        unsafe { libc::poll(&mut p, 1, timeout_ms) > 0 }
    };
    check(!readable(0), "the completion channel is quiet while nothing arrives")?;
    let ping = pattern(11, 64);
    srv.fill(0xa_0000, &ping);
    let wr = SendWr::new(
        WrId::new(9, 1),
        SendOp::Send,
        srv.buf(0xa_0000, 64),
        RemoteBuf::default(),
    );
    srv.f.post_send(conn_s, &wr).map_err(|e| format!("post ping: {e}"))?;
    srv.f.flush();
    // Nothing polls the client: the channel alone says a Receive completed.
    check(
        readable(5_000),
        "the Send made the client's completion channel readable",
    )?;
    let mut got = None;
    wait(&mut srv, &mut cli, "the Receive that fired the event", |_, c| {
        got = c.take_wc(WrId::new(1, 1));
        got.is_some()
    })?;
    check(
        got.is_some_and(|w| w.status == WcStatus::Success && w.byte_len == 64 && w.conn == conn_c),
        "the Receive completed",
    )?;
    check(cli.bytes(0x8_1000, 64) == &ping[..], "the ping's bytes landed")?;
    let before = cli.f.counts();
    check(cli.f.arm_wakeup_receives(), "the client arms once more")?;
    let after = cli.f.counts();
    check(
        after.event_reads == before.event_reads + 1
            && after.empty_event_reads == before.empty_event_reads
            && after.notify_requests == before.notify_requests + 1,
        &format!("one channel read that found the event, one new request ({before:?} -> {after:?})"),
    )?;
    check(!readable(0), "the event was consumed: the channel is quiet again")?;
    wait(&mut srv, &mut cli, "the ping's send completion", |s, _| {
        s.take_wc(WrId::new(9, 1)).is_some()
    })?;
    let wr = RecvWr {
        wr_id: WrId::new(1, 1),
        buf: cli.buf(0x8_1000, 4096),
    };
    cli.f
        .post_recv(conn_c, &wr)
        .map_err(|e| format!("re-post receive 1: {e}"))?;

    println!("[5] Send with Invalidate of a Memory Window rkey");
    let window = srv.buf(0x6_0000, 4096);
    let through_window = srv
        .f
        .expose(conn_s, window, Access::Write)
        .map_err(|e| format!("expose: {e}"))?;
    let mw_rkey = through_window.handle;
    let mwdata = pattern(7, 4096);
    cli.fill(0x7_0000, &mwdata);
    let wr = SendWr::new(
        WrId::new(5, 1),
        SendOp::RdmaWrite,
        cli.buf(0x7_0000, 4096),
        through_window,
    );
    cli.f
        .post_send(conn_c, &wr)
        .map_err(|e| format!("post write via window: {e}"))?;
    let mut w = None;
    wait(&mut srv, &mut cli, "write through the window", |_, c| {
        w = c.take_wc(WrId::new(5, 1));
        w.is_some()
    })?;
    check(
        w.is_some_and(|w| w.status == WcStatus::Success),
        "write through the window succeeded",
    )?;
    check(srv.bytes(0x6_0000, 4096) == &mwdata[..], "window bytes landed")?;
    cli.fill(0x7_8000, b"invalidate-this!");
    let wr = SendWr::new(
        WrId::new(5, 2),
        SendOp::SendWithInv { rkey: mw_rkey },
        cli.buf(0x7_8000, 16),
        RemoteBuf::default(),
    );
    cli.f
        .post_send(conn_c, &wr)
        .map_err(|e| format!("post send-with-inv: {e}"))?;
    let mut ri = None;
    wait(&mut srv, &mut cli, "receive of the Send with Invalidate", |s, _| {
        ri = s.take_wc(WrId::new(1, 2));
        ri.is_some()
    })?;
    let ri = ri.ok_or("ri")?;
    check(
        ri.status == WcStatus::Success && ri.byte_len == 16 && ri.invalidated_rkey == Some(mw_rkey),
        &format!("receiver saw the invalidated rkey: {ri:?}"),
    )?;
    check(
        srv.bytes(0x8_2000, 16) == b"invalidate-this!",
        "Send-with-Invalidate payload",
    )?;

    println!("[6] bad rkey: remote access error, flush, Disconnected");
    wait(&mut srv, &mut cli, "send-with-inv completion", |_, c| {
        c.take_wc(WrId::new(5, 2)).is_some()
    })?;
    let wr = SendWr::new(
        WrId::new(6, 1),
        SendOp::RdmaWrite,
        cli.buf(0x7_0000, 64),
        through_window,
    );
    cli.f
        .post_send(conn_c, &wr)
        .map_err(|e| format!("post bad write: {e}"))?;
    // Posted behind the failing Write: must come back Flushed.
    let wr = SendWr::new(WrId::new(6, 2), SendOp::Send, cli.buf(0, 8), RemoteBuf::default());
    cli.f
        .post_send(conn_c, &wr)
        .map_err(|e| format!("post send after bad write: {e}"))?;
    let mut bad = None;
    wait(&mut srv, &mut cli, "error completion", |_, c| {
        if bad.is_none() {
            bad = c.take_wc(WrId::new(6, 1));
        }
        bad.is_some()
    })?;
    let bad = bad.ok_or("bad")?;
    check(
        bad.status == WcStatus::RemoteAccess,
        &format!("bad rkey gives RemoteAccess: {bad:?}"),
    )?;
    // Client: the Send behind it and receives 1..RECVS flush; Disconnected.
    // Server: receive 3 flushes (0..=2 were consumed); Disconnected.
    let (mut dc, mut ds) = (false, false);
    wait(&mut srv, &mut cli, "flushes and Disconnected on both sides", |s, c| {
        dc |= take_event(c, |e| *e == CmEvent::Disconnected { conn: conn_c }).is_some();
        ds |= take_event(s, |e| *e == CmEvent::Disconnected { conn: conn_s }).is_some();
        let cf = c.wcs.iter().filter(|w| w.status == WcStatus::Flushed).count();
        let sf = s.wcs.iter().filter(|w| w.status == WcStatus::Flushed).count();
        dc && ds && cf == RECVS as usize && sf == 1
    })?;
    let flushed_send = cli.take_wc(WrId::new(6, 2));
    check(
        flushed_send.is_some_and(|w| w.status == WcStatus::Flushed && w.opcode == WcOpcode::Send),
        "the Send posted after the failure was flushed (opcode from the provider's record)",
    )?;
    for k in 1..RECVS {
        let w = cli.take_wc(WrId::new(1, k));
        check(
            w.is_some_and(|w| w.status == WcStatus::Flushed && w.opcode == WcOpcode::Recv && w.conn == conn_c),
            &format!("client receive {k} flushed"),
        )?;
    }
    let w = srv.take_wc(WrId::new(1, 3));
    check(
        w.is_some_and(|w| w.status == WcStatus::Flushed),
        "server receive 3 flushed",
    )?;
    check(
        cli.wcs.is_empty() && srv.wcs.is_empty(),
        &format!(
            "no completion left unexplained (client {:?}, server {:?})",
            cli.wcs, srv.wcs
        ),
    )?;
    check(
        cli.f.post_send(conn_c, &wr).is_err(),
        "posting on a dead connection is refused",
    )?;
    wait(&mut srv, &mut cli, "both connections reaped", |s, c| {
        s.f.conn_count() == 0 && c.f.conn_count() == 0
    })?;
    check(
        cli.events.is_empty() && srv.events.is_empty(),
        &format!(
            "no unexpected CM event (client {:?}, server {:?})",
            cli.events, srv.events
        ),
    )?;

    println!("[7] RNR: the server accepts with rnr_retry 1 and posts no receive");
    // By IB CM rules the RNR retry count a side passes (REQ / REP) is the one
    // its *peer's* QP uses: the server's accept sets the client's retries.
    let c7 = cli.f.connect(addr, &qp, b"rnr").map_err(|e| e.to_string())?;
    wait(&mut srv, &mut cli, "connect request", |s, _| {
        req = take_request(s);
        req.is_some()
    })?;
    let (r7, _) = req.take().ok_or("no request")?;
    let rnr_qp = QpConfig {
        cq: srv.cq,
        rnr_retry: 1,
        ..qp
    };
    let s7 = srv.f.accept(r7, &rnr_qp, b"").map_err(|e| format!("accept: {e}"))?;
    let mut up = (false, false);
    wait(&mut srv, &mut cli, "Established", |s, c| {
        up.0 |= take_event(c, |e| matches!(e, CmEvent::Established { conn, .. } if *conn == c7)).is_some();
        up.1 |= take_event(s, |e| matches!(e, CmEvent::Established { conn, .. } if *conn == s7)).is_some();
        up.0 && up.1
    })?;
    let wr = SendWr::new(WrId::new(7, 1), SendOp::Send, cli.buf(0, 64), RemoteBuf::default());
    cli.f.post_send(c7, &wr).map_err(|e| format!("post_send: {e}"))?;
    let mut rnr = None;
    wait(&mut srv, &mut cli, "RNR retries exhausted", |_, c| {
        rnr = c.take_wc(WrId::new(7, 1));
        rnr.is_some()
    })?;
    let rnr = rnr.ok_or("rnr")?;
    check(
        rnr.status == WcStatus::RnrRetryExceeded && rnr.opcode == WcOpcode::Send,
        &format!("Send to a peer with no receive: {rnr:?}"),
    )?;
    let (mut dc, mut ds) = (false, false);
    wait(
        &mut srv,
        &mut cli,
        "Disconnected on both sides, connections reaped",
        |s, c| {
            dc |= take_event(c, |e| *e == CmEvent::Disconnected { conn: c7 }).is_some();
            ds |= take_event(s, |e| *e == CmEvent::Disconnected { conn: s7 }).is_some();
            dc && ds && s.f.conn_count() == 0 && c.f.conn_count() == 0
        },
    )?;
    check(
        cli.wcs.is_empty() && srv.wcs.is_empty() && cli.events.is_empty() && srv.events.is_empty(),
        "nothing else happened",
    )?;
    Ok(())
}

fn main() -> ExitCode {
    let addr = std::env::args().nth(1).unwrap_or_else(|| {
        let ip = std::env::var("VMLAB_IP").unwrap_or_else(|_| "10.0.2.15".into());
        format!("{ip}:7471")
    });
    let t0 = Instant::now();
    match run(&addr) {
        Ok(()) => {
            println!("verbs_raw: PASS ({} ms)", t0.elapsed().as_millis());
            ExitCode::SUCCESS
        }
        Err(e) => {
            println!("verbs_raw: FAIL: {e}");
            ExitCode::FAILURE
        }
    }
}
