//! Two processes over the shm fabric: this test (the responder) spawns its own
//! test binary again as the requester (the ignored test `requester_child`,
//! selected with `--exact --ignored` and an environment variable carrying the
//! listen address).
//!
//! Requester: connects with private data, receives the responder's advert
//! (rkey and offsets), Sends (gathering two buffers), RDMA-Writes 64 KiB into
//! the responder, RDMA-Reads 64 KiB from it, SendWithInv, receives the reply,
//! disconnects. Responder: checks the private data, every received byte, the
//! written bytes, the invalidated rkey, and that it sees Disconnected with its
//! remaining receives flushed. Both processes verify what they received.

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dataplane::shm::{ShmConfig, ShmFabric};
use dataplane::{
    Access, CmEvent, Completion, ConnId, CqId, Fabric, LocalBuf, QpConfig, RecvWr, RegionAccess, RemoteBuf, SendOp,
    SendWr, WcOpcode, WcStatus, WrId,
};
use mempool::region::{Region, RegionConfig};

const ENV_ADDR: &str = "RPCRDMA_SHM_TWO_PROCESS_ADDR";
const DEADLINE: Duration = Duration::from_secs(20);
const REQ_PD: &[u8] = b"requester hello";
const REP_PD: &[u8] = b"responder welcome";
const PING: &[u8] = b"ping from the requester process";
const REPLY: &[u8] = b"ok from the responder process";
const BULK: usize = 64 * 1024;
/// Responder's area the requester Writes into, and the one it Reads from.
const WRITE_OFF: u64 = 1 << 20;
const READ_OFF: u64 = 3 << 19;
/// Where each side keeps messages to send.
const OUT_OFF: u64 = 1 << 19;

fn pattern(seed: u32) -> Vec<u8> {
    (0..BULK as u32)
        .map(|i| (i.wrapping_mul(seed) >> 3) as u8 ^ seed as u8)
        .collect()
}

struct Side {
    f: ShmFabric,
    cq: CqId,
    region: Arc<Region>,
}

impl Side {
    fn new() -> Side {
        let mut f = ShmFabric::new(ShmConfig::default()).unwrap();
        let region = Arc::new(Region::create(1, 2 << 20, &RegionConfig::default()).unwrap());
        f.register_region(&region, RegionAccess::Exposable).unwrap();
        let cq = f.create_cq(256).unwrap();
        Side { f, cq, region }
    }
    fn buf(&self, offset: u64, len: usize) -> LocalBuf {
        LocalBuf {
            region: 1,
            offset,
            len: len as u32,
        }
    }
    fn write(&self, offset: u64, bytes: &[u8]) {
        assert!(offset as usize + bytes.len() <= self.region.len());
        // SAFETY: inside the region's mapping (checked); no work request
        // targets these bytes while the test writes them.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.region.as_ptr().add(offset as usize), bytes.len()) }
    }
    fn read(&self, offset: u64, len: usize) -> Vec<u8> {
        assert!(offset as usize + len <= self.region.len());
        let mut v = vec![0; len];
        // SAFETY: as in `write`.
        unsafe { std::ptr::copy_nonoverlapping(self.region.as_ptr().add(offset as usize), v.as_mut_ptr(), len) }
        v
    }
    fn cm(&mut self) -> CmEvent {
        let start = Instant::now();
        loop {
            if let Some(e) = self.f.poll_cm() {
                return e;
            }
            assert!(start.elapsed() < DEADLINE, "no CM event");
            std::thread::sleep(Duration::from_micros(100));
        }
    }
    fn wait(&mut self, n: usize) -> Vec<Completion> {
        let start = Instant::now();
        let mut got = Vec::new();
        let mut wc = [Completion {
            wr_id: WrId(0),
            status: WcStatus::General,
            opcode: WcOpcode::Recv,
            conn: ConnId(0),
            byte_len: 0,
            invalidated_rkey: None,
        }; 16];
        while got.len() < n {
            let k = self.f.poll_cq(self.cq, &mut wc[..(n - got.len()).min(16)]);
            got.extend_from_slice(&wc[..k]);
            assert!(start.elapsed() < DEADLINE, "timed out: {got:?}");
            if k == 0 {
                std::thread::yield_now();
            }
        }
        got
    }
    fn post_recvs(&mut self, conn: ConnId, n: u64) {
        for i in 0..n {
            let wr = RecvWr {
                wr_id: WrId::new(1, i),
                buf: self.buf(i * 4096, 4096),
            };
            self.f.post_recv(conn, &wr).unwrap();
        }
    }
}

#[test]
fn two_processes_send_write_read_and_disconnect() {
    let mut s = Side::new();
    let addr = format!("@rpcrdma-shm-two-process-{}", std::process::id());
    s.f.listen(&addr).unwrap();
    s.write(READ_OFF, &pattern(0x51));

    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "requester_child",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(ENV_ADDR, &addr)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    // Kill the child if anything below panics, so no process is left behind.
    struct Reap(Option<std::process::Child>);
    impl Drop for Reap {
        fn drop(&mut self) {
            if let Some(c) = self.0.as_mut() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
    let stdout = child.stdout.take().unwrap();
    let mut guard = Reap(Some(child));

    let req = match s.cm() {
        CmEvent::ConnectRequest { req, private_data, .. } => {
            assert_eq!(private_data.as_bytes(), REQ_PD);
            req
        }
        e => panic!("{e:?}"),
    };
    let qp = QpConfig {
        cq: s.cq,
        ..QpConfig::default()
    };
    let conn = s.f.accept(req, &qp, REP_PD).unwrap();
    s.post_recvs(conn, 8);
    assert!(matches!(s.cm(), CmEvent::Established { conn: c, .. } if c == conn));

    // Advert: the window's key, where to Write, where to Read.
    let whole = s.buf(0, s.region.len());
    let window = s.f.expose(conn, whole, Access::ReadWrite).unwrap().handle;
    let mut advert = Vec::new();
    advert.extend_from_slice(&window.to_le_bytes());
    advert.extend_from_slice(&s.f.remote_addr(1, WRITE_OFF).unwrap().to_le_bytes());
    advert.extend_from_slice(&s.f.remote_addr(1, READ_OFF).unwrap().to_le_bytes());
    s.write(OUT_OFF, &advert);
    let wr = SendWr::new(
        WrId::new(2, 0),
        SendOp::Send,
        s.buf(OUT_OFF, advert.len()),
        RemoteBuf::default(),
    );
    s.f.post_send(conn, &wr).unwrap();
    assert_eq!(s.wait(1)[0].status, WcStatus::Success);

    // The ping, then the SendWithInv (after the Write, so the Write landed).
    let got = s.wait(2);
    assert_eq!(
        (got[0].status, got[0].byte_len as usize),
        (WcStatus::Success, PING.len())
    );
    assert_eq!(s.read(got[0].wr_id.index() * 4096, PING.len()), PING);
    assert_eq!(got[0].invalidated_rkey, None);
    assert_eq!(got[1].status, WcStatus::Success);
    assert_eq!(got[1].invalidated_rkey, Some(window));
    assert_eq!(s.read(got[1].wr_id.index() * 4096, got[1].byte_len as usize), b"done");
    assert_eq!(s.read(WRITE_OFF, BULK), pattern(0x2b), "RDMA Write bytes");

    s.write(OUT_OFF, REPLY);
    let wr = SendWr::new(
        WrId::new(2, 1),
        SendOp::Send,
        s.buf(OUT_OFF, REPLY.len()),
        RemoteBuf::default(),
    );
    s.f.post_send(conn, &wr).unwrap();
    assert_eq!(s.wait(1)[0].status, WcStatus::Success);

    // The requester disconnects: Disconnected, and the 6 unused receives flush.
    assert_eq!(s.cm(), CmEvent::Disconnected { conn });
    let flushed = s.wait(6);
    assert!(flushed
        .iter()
        .all(|c| c.status == WcStatus::Flushed && c.opcode == WcOpcode::Recv));

    let mut child = guard.0.take().unwrap();
    let start = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        assert!(start.elapsed() < DEADLINE, "child did not exit");
        std::thread::sleep(Duration::from_millis(5));
    };
    let out = std::io::read_to_string(stdout).unwrap();
    assert!(status.success(), "child failed: {out}");
    assert!(out.contains("requester_child ... ok"), "the child test ran: {out}");
}

/// The requester role; run only as the child of the test above.
#[test]
#[ignore = "child process of two_processes_send_write_read_and_disconnect"]
fn requester_child() {
    let Ok(addr) = std::env::var(ENV_ADDR) else {
        // Run with --ignored but not by the parent: there is no responder.
        eprintln!("requester_child: {ENV_ADDR} not set; this role only runs under the parent test");
        return;
    };
    let mut s = Side::new();
    let qp = QpConfig {
        cq: s.cq,
        ..QpConfig::default()
    };
    let conn = s.f.connect(&addr, &qp, REQ_PD).unwrap();
    s.post_recvs(conn, 4);
    match s.cm() {
        CmEvent::Established { conn: c, private_data } => {
            assert_eq!(c, conn);
            assert_eq!(private_data.as_bytes(), REP_PD);
        }
        e => panic!("{e:?}"),
    }
    let adv = s.wait(1);
    assert_eq!((adv[0].status, adv[0].byte_len), (WcStatus::Success, 20));
    let a = s.read(adv[0].wr_id.index() * 4096, 20);
    let rkey = u32::from_le_bytes(a[0..4].try_into().unwrap());
    let write_at = u64::from_le_bytes(a[4..12].try_into().unwrap());
    let read_at = u64::from_le_bytes(a[12..20].try_into().unwrap());

    // Send gathering two buffers.
    let (head, tail) = PING.split_at(10);
    s.write(OUT_OFF, head);
    s.write(OUT_OFF + 1000, tail);
    let mut wr = SendWr::new(
        WrId::new(2, 0),
        SendOp::Send,
        s.buf(OUT_OFF, head.len()),
        RemoteBuf::default(),
    );
    wr.sge[1] = s.buf(OUT_OFF + 1000, tail.len());
    wr.num_sge = 2;
    s.f.post_send(conn, &wr).unwrap();
    // RDMA Write into the responder.
    s.write(WRITE_OFF, &pattern(0x2b));
    let remote = RemoteBuf {
        handle: rkey,
        length: BULK as u32,
        offset: write_at,
    };
    let wr = SendWr::new(WrId::new(2, 1), SendOp::RdmaWrite, s.buf(WRITE_OFF, BULK), remote);
    s.f.post_send(conn, &wr).unwrap();
    // RDMA Read from the responder.
    let remote = RemoteBuf {
        handle: rkey,
        length: BULK as u32,
        offset: read_at,
    };
    let wr = SendWr::new(WrId::new(2, 2), SendOp::RdmaRead, s.buf(READ_OFF, BULK), remote);
    s.f.post_send(conn, &wr).unwrap();
    // SendWithInv.
    s.write(OUT_OFF + 2000, b"done");
    let wr = SendWr::new(
        WrId::new(2, 3),
        SendOp::SendWithInv { rkey },
        s.buf(OUT_OFF + 2000, 4),
        RemoteBuf::default(),
    );
    s.f.post_send(conn, &wr).unwrap();
    let got = s.wait(4);
    for (i, c) in got.iter().enumerate() {
        assert_eq!((c.wr_id, c.status), (WrId::new(2, i as u64), WcStatus::Success));
    }
    assert_eq!(got[2].opcode, WcOpcode::RdmaRead);
    assert_eq!(s.read(READ_OFF, BULK), pattern(0x51), "RDMA Read bytes");

    let reply = s.wait(1);
    assert_eq!(reply[0].status, WcStatus::Success);
    assert_eq!(s.read(reply[0].wr_id.index() * 4096, reply[0].byte_len as usize), REPLY);

    s.f.disconnect(conn).unwrap();
    assert_eq!(s.cm(), CmEvent::Disconnected { conn });
    let flushed = s.wait(2);
    assert!(flushed.iter().all(|c| c.status == WcStatus::Flushed));
}
