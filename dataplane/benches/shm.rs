//! shm fabric benches.
//!
//! - `shm/pingpong_64B`: round trip of a 64-byte Send answered by a 64-byte
//!   Send, between two `ShmFabric` endpoints polled by two threads pinned to
//!   two cores (core 0: the requester, timed; core 1: the echo). The floor
//!   every later transport benchmark is measured against.
//! - `shm/pingpong_64B_one_thread`: the same round trip with one thread
//!   polling both endpoints (provider software cost alone).
//! - `shm/rdma_write_1MiB` vs `shm/memcpy_1MiB`: a 1 MiB RDMA Write (post +
//!   poll its completion) and a plain `memcpy` of 1 MiB between the same two
//!   regions, in the same run, so their ratio is the provider's overhead.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use dataplane::shm::{ShmConfig, ShmFabric};
use dataplane::{
    CmEvent, Completion, ConnId, CqId, Fabric, LocalBuf, MrKeys, QpConfig, RecvWr, RemoteBuf, SendOp, SendWr, WcOpcode,
    WcStatus, WrId,
};
use mempool::region::{Region, RegionConfig};

const MSG: u32 = 64;
const MIB: usize = 1 << 20;
const RECVS: u64 = 32;

struct Side {
    f: ShmFabric,
    cq: CqId,
    region: Arc<Region>,
    keys: MrKeys,
}

fn side(id: u16) -> Side {
    let mut f = ShmFabric::new(ShmConfig::default()).expect("fabric");
    let region = Arc::new(Region::create(id, 4 << 20, &RegionConfig::default()).expect("region"));
    let keys = f.register_region(&region).expect("register");
    let cq = f.create_cq(1024).expect("cq");
    Side { f, cq, region, keys }
}

fn wc0() -> Completion {
    Completion {
        wr_id: WrId(0),
        status: WcStatus::General,
        opcode: WcOpcode::Recv,
        conn: ConnId(0),
        byte_len: 0,
        invalidated_rkey: None,
    }
}

fn buf(s: &Side, offset: u64, len: u32) -> LocalBuf {
    LocalBuf {
        region: s.region.id(),
        offset,
        len,
    }
}

/// Connect `b` to `a`, post `RECVS` receives on each side.
fn pair() -> (Side, ConnId, Side, ConnId) {
    let (mut a, mut b) = (side(1), side(2));
    let addr = format!("@rpcrdma-shm-bench-{}", std::process::id());
    a.f.listen(&addr).expect("listen");
    let qa = QpConfig {
        cq: a.cq,
        ..QpConfig::default()
    };
    let qb = QpConfig {
        cq: b.cq,
        ..QpConfig::default()
    };
    let cb = b.f.connect(&addr, &qb, b"").expect("connect");
    let start = Instant::now();
    let mut ca = None;
    let (mut est_a, mut est_b) = (false, false);
    while !(est_a && est_b) {
        assert!(start.elapsed() < Duration::from_secs(10), "connection setup timed out");
        match a.f.poll_cm() {
            Some(CmEvent::ConnectRequest { req, .. }) => ca = Some(a.f.accept(req, &qa, b"").expect("accept")),
            Some(CmEvent::Established { .. }) => est_a = true,
            Some(e) => panic!("{e:?}"),
            None => {}
        }
        match b.f.poll_cm() {
            Some(CmEvent::Established { .. }) => est_b = true,
            Some(e) => panic!("{e:?}"),
            None => {}
        }
    }
    let ca = ca.expect("accepted");
    for i in 0..RECVS {
        let r = RecvWr {
            wr_id: WrId::new(1, i),
            buf: buf(&a, i * 256, 256),
        };
        a.f.post_recv(ca, &r).expect("recv");
        let r = RecvWr {
            wr_id: WrId::new(1, i),
            buf: buf(&b, i * 256, 256),
        };
        b.f.post_recv(cb, &r).expect("recv");
    }
    (a, ca, b, cb)
}

fn pin(core: usize) {
    if let Some(ids) = core_affinity::get_core_ids() {
        if let Some(id) = ids.get(core % ids.len().max(1)) {
            core_affinity::set_for_current(*id);
        }
    }
}

fn unsignaled_send(s: &Side) -> SendWr {
    let mut wr = SendWr::new(
        WrId::new(2, 0),
        SendOp::Send,
        buf(s, 1 << 20, MSG),
        RemoteBuf::default(),
    );
    wr.signaled = false;
    wr
}

fn pingpong(c: &mut Criterion) {
    let (mut a, ca, mut b, cb) = pair();
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = Arc::clone(&stop);
    // Echo: every received message is answered with a 64-byte Send.
    let echo = std::thread::spawn(move || {
        pin(1);
        let wr = unsignaled_send(&a);
        let mut wc = [wc0(); 16];
        while !stop2.load(Ordering::Relaxed) {
            let n = a.f.poll_cq(a.cq, &mut wc);
            for w in &wc[..n] {
                assert_eq!(w.status, WcStatus::Success, "{w:?}");
                if w.opcode == WcOpcode::Recv {
                    let r = RecvWr {
                        wr_id: w.wr_id,
                        buf: buf(&a, w.wr_id.index() * 256, 256),
                    };
                    a.f.post_recv(ca, &r).expect("repost");
                    a.f.post_send(ca, &wr).expect("echo");
                }
            }
        }
    });
    pin(0);
    let wr = unsignaled_send(&b);
    let mut wc = [wc0(); 16];
    let mut g = c.benchmark_group("shm");
    g.throughput(Throughput::Elements(1));
    g.bench_function("pingpong_64B", |bench| {
        bench.iter_custom(|iters| {
            let start = Instant::now();
            for _ in 0..iters {
                b.f.post_send(cb, &wr).expect("send");
                loop {
                    let n = b.f.poll_cq(b.cq, &mut wc);
                    if n == 1 {
                        let w = wc[0];
                        assert_eq!((w.status, w.opcode), (WcStatus::Success, WcOpcode::Recv));
                        let r = RecvWr {
                            wr_id: w.wr_id,
                            buf: buf(&b, w.wr_id.index() * 256, 256),
                        };
                        b.f.post_recv(cb, &r).expect("repost");
                        break;
                    }
                    assert_eq!(n, 0);
                }
            }
            start.elapsed()
        })
    });
    g.finish();
    stop.store(true, Ordering::Relaxed);
    echo.join().expect("echo thread");
}

/// The same round trip with one thread polling both endpoints: the software
/// cost of the provider without cross-core cache-line transfers or scheduling.
fn pingpong_one_thread(c: &mut Criterion) {
    let (mut a, ca, mut b, cb) = pair();
    pin(0);
    let (wa, wb) = (unsignaled_send(&a), unsignaled_send(&b));
    let mut wc = [wc0(); 4];
    let mut g = c.benchmark_group("shm");
    g.throughput(Throughput::Elements(1));
    g.bench_function("pingpong_64B_one_thread", |bench| {
        bench.iter(|| {
            b.f.post_send(cb, &wb).expect("send");
            assert_eq!(a.f.poll_cq(a.cq, &mut wc), 1);
            let r = RecvWr {
                wr_id: wc[0].wr_id,
                buf: buf(&a, wc[0].wr_id.index() * 256, 256),
            };
            a.f.post_recv(ca, &r).expect("repost");
            a.f.post_send(ca, &wa).expect("echo");
            assert_eq!(b.f.poll_cq(b.cq, &mut wc), 1);
            let r = RecvWr {
                wr_id: wc[0].wr_id,
                buf: buf(&b, wc[0].wr_id.index() * 256, 256),
            };
            b.f.post_recv(cb, &r).expect("repost");
        })
    });
    g.finish();
}

fn write_vs_memcpy(c: &mut Criterion) {
    let (a, _ca, mut b, cb) = pair();
    pin(0);
    let src_off = 2 * MIB as u64;
    let dst_off = 2 * MIB as u64;
    let remote = RemoteBuf {
        handle: a.keys.rkey,
        length: MIB as u32,
        offset: a.f.remote_addr(a.region.id(), dst_off).expect("addr"),
    };
    let wr = SendWr::new(WrId::new(3, 0), SendOp::RdmaWrite, buf(&b, src_off, MIB as u32), remote);
    let mut wc = [wc0(); 4];
    let mut g = c.benchmark_group("shm");
    g.throughput(Throughput::Bytes(MIB as u64));
    g.bench_function("rdma_write_1MiB", |bench| {
        bench.iter(|| {
            b.f.post_send(cb, &wr).expect("write");
            let n = b.f.poll_cq(b.cq, &mut wc);
            assert!(n == 1 && wc[0].status == WcStatus::Success);
        })
    });
    let (src, dst) = (b.region.as_ptr(), a.region.as_ptr());
    g.bench_function("memcpy_1MiB", |bench| {
        bench.iter(|| {
            // SAFETY: both ranges lie inside 4 MiB regions (offset 2 MiB,
            // length 1 MiB), in two different mappings; nothing else touches
            // them during the bench.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    std::hint::black_box(src.add(src_off as usize)),
                    dst.add(dst_off as usize),
                    MIB,
                )
            };
        })
    });
    g.finish();
    drop(a);
}

criterion_group!(benches, pingpong, pingpong_one_thread, write_vs_memcpy);
criterion_main!(benches);
