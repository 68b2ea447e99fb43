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
//! - `engine/v{1,2}_*`: the transport engine, requester on core 0 and
//!   responder on core 1, one Call at a time.
//! - `engine_one_thread/v{1,2}_*`: the same Calls (NULL, 4 KiB READ and
//!   WRITE, 1 MiB WRITE) with one thread polling both engines: their software cost without
//!   cross-core transfers. For instruction counts run the bench binary under
//!   `valgrind --tool=callgrind --toggle-collect='*one_thread_call*'` with
//!   `--bench engine_one_thread/v1_null --profile-time 5` and divide by the
//!   calls of `one_thread_call`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput};
use dataplane::shm::{ShmConfig, ShmFabric};
use dataplane::{
    CmEvent, Completion, ConnId, CqId, Fabric, LocalBuf, QpConfig, RecvWr, RemoteBuf, SendOp, SendWr, WcOpcode,
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
}

fn side(id: u16) -> Side {
    let mut f = ShmFabric::new(ShmConfig::default()).expect("fabric");
    let region = Arc::new(Region::create(id, 4 << 20, &RegionConfig::default()).expect("region"));
    f.register_region(&region, dataplane::RegionAccess::Exposable)
        .expect("register");
    let cq = f.create_cq(1024).expect("cq");
    Side { f, cq, region }
}

fn wc0() -> Completion {
    Completion::EMPTY
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

/// Pin the calling thread to CPU `core` (absolute id). Not through
/// `core_affinity::get_core_ids()`: that lists the CPUs of the calling thread's
/// *current* mask, so a thread spawned by an already pinned thread would map
/// every core number onto its parent's CPU and the two spinning threads would
/// share one core.
fn pin(core: usize) {
    let ok = core_affinity::set_for_current(core_affinity::CoreId { id: core });
    assert!(ok, "could not pin to CPU {core}");
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

/// The echo side's one poll: answer every received message with `wr` and
/// repost its receive.
fn echo_once(a: &mut Side, ca: ConnId, wr: &SendWr, wc: &mut [Completion]) {
    let n = a.f.poll_cq(a.cq, wc);
    for w in &wc[..n] {
        assert_eq!(w.status, WcStatus::Success, "{w:?}");
        if w.opcode == WcOpcode::Recv {
            let r = RecvWr {
                wr_id: w.wr_id,
                buf: buf(a, w.wr_id.index() * 256, 256),
            };
            a.f.post_recv(ca, &r).expect("repost");
            a.f.post_send(ca, wr).expect("echo");
        }
    }
}

/// One timed-side round trip: send `wr`, wait for the echo, repost.
fn ping_once(b: &mut Side, cb: ConnId, wr: &SendWr, wc: &mut [Completion]) {
    b.f.post_send(cb, wr).expect("send");
    loop {
        let n = b.f.poll_cq(b.cq, wc);
        if n == 1 {
            let w = wc[0];
            assert_eq!((w.status, w.opcode), (WcStatus::Success, WcOpcode::Recv));
            let r = RecvWr {
                wr_id: w.wr_id,
                buf: buf(b, w.wr_id.index() * 256, 256),
            };
            b.f.post_recv(cb, &r).expect("repost");
            return;
        }
        assert_eq!(n, 0);
    }
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
            echo_once(&mut a, ca, &wr, &mut wc);
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
                ping_once(&mut b, cb, &wr, &mut wc);
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
    let (mut a, ca, mut b, cb) = pair();
    pin(0);
    let src_off = 2 * MIB as u64;
    let dst_off = 2 * MIB as u64;
    let remote =
        a.f.expose(ca, buf(&a, dst_off, MIB as u32), dataplane::Access::Write)
            .expect("expose");
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

/// The pool and engine configurations the engine benches share.
struct EngineSetup {
    pool: &'static mempool::pool::Mempool,
    regions: Vec<Arc<Region>>,
    srv: dataplane::responder::ResponderConfig,
    recv: mempool::pool::ClassId,
    send: mempool::pool::ClassId,
    data: mempool::pool::ClassId,
}

const ENGINE_CREDITS: u32 = 8;

fn engine_setup() -> EngineSetup {
    use dataplane::responder::ResponderConfig;
    use mempool::pool::{Mempool, PoolPlan};
    use proto::header::Limits;
    use proto::negotiate::VersionRange;

    const CONNS: u32 = 2;
    let credits = ENGINE_CREDITS;
    let mut plan = PoolPlan::new(2);
    let recv = plan.add_class("recv", 4096, 16).unwrap();
    let send = plan.add_class("send", 8192, 16).unwrap();
    let data = plan.add_class("data", MIB + 4096, 4).unwrap();
    let srq = (credits * CONNS) as u64;
    plan.reserve("responder-recv", recv, 2 * srq)
        .reserve("responder-send", send, 2 * srq)
        .reserve("responder-data", data, 2 * srq)
        .reserve("requester-recv", recv, 2 * (credits as u64 + 2) * CONNS as u64)
        .reserve("requester-send", send, (credits as u64 + 2) * CONNS as u64)
        .reserve("requester-data", data, 3 * credits as u64 * CONNS as u64);
    let pool: &'static Mempool = Box::leak(Box::new(
        Mempool::new(
            &plan,
            &RegionConfig {
                lock: false,
                ..RegionConfig::default()
            },
        )
        .unwrap(),
    ));
    let regions = pool.regions().to_vec();
    let srv = ResponderConfig {
        versions: VersionRange::ALL,
        credits,
        max_conns: CONNS,
        send_depth: 64,
        max_rdma_reads: 8,
        limits: Limits::DEFAULT,
        max_read_bytes: (MIB + 4096) as u64,
        recv_class: recv,
        send_class: send,
        data_class: data,
        remote_invalidation: false,
        backward_credits: 0,
    };
    EngineSetup {
        pool,
        regions,
        srv,
        recv,
        send,
        data,
    }
}

impl EngineSetup {
    fn requester_config(&self, vers: u32) -> dataplane::requester::RequesterConfig {
        use proto::negotiate::VersionRange;
        dataplane::requester::RequesterConfig {
            versions: if vers == 1 {
                VersionRange::only(1).unwrap()
            } else {
                VersionRange::ALL
            },
            credits: ENGINE_CREDITS,
            send_depth: 64,
            limits: proto::header::Limits::DEFAULT,
            recv_class: self.recv,
            send_class: self.send,
            data_class: self.data,
            ddp: true,
            backward_credits: 0,
            pad_read_chunks: false,
        }
    }
}

/// The engine bench cases: (name, procedure, size).
const ENGINE_CASES: [(&str, u32, u32); 7] = [
    ("null", dataplane::testprog::P_NULL, 0),
    ("read_4KiB", dataplane::testprog::P_READ, 4096),
    ("read_64KiB", dataplane::testprog::P_READ, 65536),
    ("read_1MiB", dataplane::testprog::P_READ, MIB as u32),
    ("write_4KiB", dataplane::testprog::P_WRITE, 4096),
    ("write_64KiB", dataplane::testprog::P_WRITE, 65536),
    ("write_1MiB", dataplane::testprog::P_WRITE, MIB as u32),
];

/// Encode and submit one Call of `proc_` (READ/WRITE of `size` bytes).
fn submit_call(
    cli: &mut dataplane::requester::Requester<'static, ShmFabric>,
    proc_: u32,
    size: u32,
    needs: &proto::plan::ReplyNeeds,
) -> dataplane::requester::CallId {
    use dataplane::testprog::{self, TestUlb};
    use proto::ulb::{DdpItem, UpperLayerBinding};
    let mut cb = cli.call_buf().expect("call buffer");
    let len = if proc_ == testprog::P_WRITE {
        testprog::encode_write_in_place(cb.bytes_mut(), size)
    } else {
        testprog::encode_call(cb.bytes_mut(), proc_, &[], size, 0)
    }
    .expect("encode");
    // Of the procedures benched only WRITE has a DDP-eligible argument; the
    // others are not parsed for items (as `perf` does).
    let mut items = [DdpItem::default(); 1];
    let k = if proc_ == testprog::P_WRITE {
        TestUlb.call_items(&cb.bytes_mut()[..len], &mut items).expect("items")
    } else {
        0
    };
    cli.submit(cb, len, &items[..k], needs)
        .map_err(|(e, _)| e)
        .expect("submit")
}

/// The transport engine over shm: a responder on core 1 serving the test
/// program, a requester on core 0 doing one Call at a time (queue depth 1).
/// NULL and READ/WRITE of 4 KiB, 64 KiB and 1 MiB, for v1 and v2. Compare
/// with `pingpong_64B` (the floor) and `memcpy_1MiB` from the same run.
fn engine(c: &mut Criterion) {
    use dataplane::requester::{CallOutcome, LinkState, Requester};
    use dataplane::responder::Responder;
    use dataplane::testprog::{TestService, TestUlb};
    use proto::plan::ReplyNeeds;

    let setup = engine_setup();
    let pool = setup.pool;
    let addr = format!("@rpcrdma-bench-engine-{}", std::process::id());
    let stop = Arc::new(AtomicBool::new(false));
    let ready = Arc::new(AtomicBool::new(false));
    let srv_thread = {
        let (stop, ready, regions, addr) = (
            Arc::clone(&stop),
            Arc::clone(&ready),
            setup.regions.clone(),
            addr.clone(),
        );
        let cfg = setup.srv.clone();
        std::thread::spawn(move || {
            pin(1);
            let fab = ShmFabric::new(ShmConfig::for_rpc_engine()).expect("shm");
            let mut srv =
                Responder::new(cfg, fab, TestService::default(), pool, &regions, 1, Some(&addr)).expect("responder");
            ready.store(true, Ordering::Release); // pairs with the Acquire load below
            while !stop.load(Ordering::Relaxed) {
                srv.poll();
            }
            srv.shutdown(100_000);
        })
    };
    pin(0);
    while !ready.load(Ordering::Acquire) {
        std::thread::yield_now();
    }
    let mut g = c.benchmark_group("engine");
    for vers in [1u32, 2] {
        let fab = ShmFabric::new(ShmConfig::for_rpc_engine()).expect("shm");
        let mut cli = Requester::new(setup.requester_config(vers), fab, pool, &setup.regions, 0).expect("requester");
        cli.connect(&addr).expect("connect");
        let t0 = Instant::now();
        while cli.link() != LinkState::Ready {
            cli.poll();
            assert!(t0.elapsed().as_secs() < 10, "connect timed out: {:?}", cli.link());
        }
        assert_eq!(cli.version(), vers);
        for (name, proc_, size) in ENGINE_CASES {
            g.throughput(if size == 0 {
                Throughput::Elements(1)
            } else {
                Throughput::Bytes(size as u64)
            });
            let needs = ReplyNeeds::from_ulb(&TestUlb, dataplane::testprog::VERS, proc_);
            g.bench_function(format!("v{vers}_{name}"), |bench| {
                bench.iter_custom(|iters| {
                    let start = Instant::now();
                    for _ in 0..iters {
                        let id = submit_call(&mut cli, proc_, size, &needs);
                        loop {
                            cli.poll();
                            if let Some(done) = cli.poll_completion() {
                                assert_eq!((done.id, done.outcome), (id, CallOutcome::Reply));
                                cli.release(id);
                                break;
                            }
                        }
                    }
                    start.elapsed()
                })
            });
        }
        cli.shutdown(100_000);
    }
    g.finish();
    stop.store(true, Ordering::Relaxed);
    srv_thread.join().expect("responder thread");
}

/// One Call with one thread polling both engines until its Reply is in.
/// Returns the poll turns it took (each turn polls the responder, then the
/// requester). Not inlined, so a profiler can count one round trip
/// (`valgrind --tool=callgrind --toggle-collect='*one_thread_call*'`).
#[inline(never)]
fn one_thread_call<S: dataplane::service::Service>(
    cli: &mut dataplane::requester::Requester<'static, ShmFabric>,
    srv: &mut dataplane::responder::Responder<'static, ShmFabric, S>,
    proc_: u32,
    size: u32,
    needs: &proto::plan::ReplyNeeds,
) -> u32 {
    use dataplane::requester::CallOutcome;
    let id = submit_call(cli, proc_, size, needs);
    let mut turns = 0;
    loop {
        turns += 1;
        srv.poll();
        cli.poll();
        if let Some(done) = cli.poll_completion() {
            assert_eq!((done.id, done.outcome), (id, CallOutcome::Reply));
            cli.release(id);
            return turns;
        }
        assert!(turns < 1_000_000, "no reply");
    }
}

/// The engine's software cost alone: responder and requester over shm in one
/// thread (no cross-core cache-line transfers, no waiting on the other core),
/// NULL, 4 KiB READ/WRITE and 1 MiB WRITE (the cost of a large Read chunk,
/// which shm copies in slices over several polls), v1 and v2. Compare with
/// `pingpong_64B_one_thread` (the provider alone).
fn engine_one_thread(c: &mut Criterion) {
    use dataplane::requester::{LinkState, Requester};
    use dataplane::responder::Responder;
    use dataplane::testprog::{TestService, TestUlb};
    use proto::plan::ReplyNeeds;

    let setup = engine_setup();
    let pool = setup.pool;
    pin(0);
    let mut g = c.benchmark_group("engine_one_thread");
    for vers in [1u32, 2] {
        let addr = format!("@rpcrdma-bench-engine1-{vers}-{}", std::process::id());
        let fab = ShmFabric::new(ShmConfig::for_rpc_engine()).expect("shm");
        let mut srv = Responder::new(
            setup.srv.clone(),
            fab,
            TestService::default(),
            pool,
            &setup.regions,
            1,
            Some(&addr),
        )
        .expect("responder");
        let fab = ShmFabric::new(ShmConfig::for_rpc_engine()).expect("shm");
        let mut cli = Requester::new(setup.requester_config(vers), fab, pool, &setup.regions, 0).expect("requester");
        cli.connect(&addr).expect("connect");
        let t0 = Instant::now();
        while cli.link() != LinkState::Ready {
            srv.poll();
            cli.poll();
            assert!(t0.elapsed().as_secs() < 10, "connect timed out: {:?}", cli.link());
        }
        assert_eq!(cli.version(), vers);
        for (name, proc_, size) in ENGINE_CASES.into_iter().filter(|c| c.2 <= 4096 || c.0 == "write_1MiB") {
            g.throughput(if size == 0 {
                Throughput::Elements(1)
            } else {
                Throughput::Bytes(size as u64)
            });
            let needs = ReplyNeeds::from_ulb(&TestUlb, dataplane::testprog::VERS, proc_);
            g.bench_function(format!("v{vers}_{name}"), |bench| {
                bench.iter(|| one_thread_call(&mut cli, &mut srv, proc_, size, &needs))
            });
        }
        cli.shutdown(100_000);
        srv.shutdown(100_000);
    }
    g.finish();
}

/// What the server thread of [`paired`] polls.
const PAIRED_STOP: u32 = 0;
const PAIRED_RAW: u32 = 1;
const PAIRED_ENGINE: u32 = 2;

/// The floor and the engine's NULL round trip measured interleaved, in
/// batches of `PAIRED_BATCH` calls: raw ping-pong, v1 NULL, v2 NULL, raw,
/// ... Criterion measures each bench for seconds at a time, and on a shared
/// host the same ping-pong's latency moves by 3x from one second to the next
/// (the host moves the vCPUs), so a ratio of two benches measured seconds
/// apart carries that noise; here every batch of one kind sits within
/// microseconds of a batch of the others. One thread on CPU 1 serves
/// whichever the client asks for (the raw echo or the responder, never both
/// in one loop, so neither pays for polling the other); the client on CPU 0
/// times each batch with one pair of clock reads. Prints the median over
/// batches of the per-call time, its 10th and 90th percentiles, and the
/// ratio of the medians. Run: `cargo bench -p rpcrdma-dataplane --bench shm
/// -- paired` (`PAIRED_ROUNDS`, default 20000 batches of each).
fn paired() {
    use dataplane::requester::{CallOutcome, LinkState, Requester};
    use dataplane::responder::Responder;
    use dataplane::testprog::{TestService, TestUlb};
    use proto::plan::ReplyNeeds;
    use std::sync::atomic::AtomicU32;

    const PAIRED_BATCH: usize = 32;
    let rounds: usize = std::env::var("PAIRED_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    let setup = engine_setup();
    let pool = setup.pool;
    let (mut a, ca, mut b, cb) = pair();
    let addr = format!("@rpcrdma-bench-paired-{}", std::process::id());
    let mode = Arc::new(AtomicU32::new(PAIRED_ENGINE));
    let ready = Arc::new(AtomicBool::new(false));
    let server = {
        let (mode, ready, regions, addr, cfg) = (
            Arc::clone(&mode),
            Arc::clone(&ready),
            setup.regions.clone(),
            addr.clone(),
            setup.srv.clone(),
        );
        std::thread::spawn(move || {
            pin(1);
            let fab = ShmFabric::new(ShmConfig::for_rpc_engine()).expect("shm");
            let mut srv =
                Responder::new(cfg, fab, TestService::default(), pool, &regions, 1, Some(&addr)).expect("responder");
            ready.store(true, Ordering::Release); // pairs with the Acquire load below
            let wr = unsignaled_send(&a);
            let mut wc = [wc0(); 16];
            loop {
                match mode.load(Ordering::Relaxed) {
                    PAIRED_RAW => echo_once(&mut a, ca, &wr, &mut wc),
                    PAIRED_ENGINE => {
                        srv.poll();
                    }
                    _ => break,
                }
            }
            srv.shutdown(100_000);
        })
    };
    pin(0);
    while !ready.load(Ordering::Acquire) {
        std::thread::yield_now();
    }
    let needs = ReplyNeeds::from_ulb(&TestUlb, dataplane::testprog::VERS, dataplane::testprog::P_NULL);
    let wr = unsignaled_send(&b);
    let mut wc = [wc0(); 16];
    let mut raw_once = |b: &mut Side| ping_once(b, cb, &wr, &mut wc);
    let null_once = |cli: &mut Requester<'static, ShmFabric>| {
        let id = submit_call(cli, dataplane::testprog::P_NULL, 0, &needs);
        loop {
            cli.poll();
            if let Some(done) = cli.poll_completion() {
                assert_eq!((done.id, done.outcome), (id, CallOutcome::Reply));
                cli.release(id);
                return;
            }
        }
    };
    let pct = |v: &mut Vec<f64>, q: f64| {
        v.sort_by(|x, y| x.partial_cmp(y).expect("no NaN"));
        v[((v.len() - 1) as f64 * q).round() as usize]
    };
    println!("paired: {rounds} interleaved batches of {PAIRED_BATCH} calls each; per-call time over batches");
    println!(
        "{:26} {:>9} {:>9} {:>9} {:>9}",
        "", "p10 ns", "median ns", "p90 ns", "/ floor"
    );
    // One requester at a time (each claims core 0's pool caches): v1 against
    // the floor, then v2 against the floor.
    for vers in [1u32, 2] {
        let fab = ShmFabric::new(ShmConfig::for_rpc_engine()).expect("shm");
        let mut cli = Requester::new(setup.requester_config(vers), fab, pool, &setup.regions, 0).expect("requester");
        cli.connect(&addr).expect("connect");
        let t0 = Instant::now();
        while cli.link() != LinkState::Ready {
            cli.poll();
            assert!(t0.elapsed().as_secs() < 10, "connect timed out");
        }
        assert_eq!(cli.version(), vers);
        // Per-call ns of each batch: [floor, engine].
        let mut per_call: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
        for round in 0..rounds + 100 {
            for (kind, m) in [PAIRED_RAW, PAIRED_ENGINE].into_iter().enumerate() {
                if mode.load(Ordering::Relaxed) != m {
                    mode.store(m, Ordering::Relaxed);
                    // One untimed call: the server thread has switched by its end.
                    match kind {
                        0 => raw_once(&mut b),
                        _ => null_once(&mut cli),
                    }
                }
                let t0 = Instant::now();
                for _ in 0..PAIRED_BATCH {
                    match kind {
                        0 => raw_once(&mut b),
                        _ => null_once(&mut cli),
                    }
                }
                if round >= 100 {
                    // The first 100 rounds warm up.
                    per_call[kind].push(t0.elapsed().as_nanos() as f64 / PAIRED_BATCH as f64);
                }
            }
        }
        cli.shutdown(100_000);
        let names = ["shm/pingpong_64B (floor)".to_string(), format!("engine v{vers} NULL")];
        let mut floor = 0.0;
        for k in 0..2 {
            let (p10, p50, p90) = (
                pct(&mut per_call[k], 0.1),
                pct(&mut per_call[k], 0.5),
                pct(&mut per_call[k], 0.9),
            );
            if k == 0 {
                floor = p50;
            }
            println!(
                "{:26} {:9.1} {:9.1} {:9.1} {:8.2}x",
                names[k],
                p10,
                p50,
                p90,
                p50 / floor
            );
        }
    }
    mode.store(PAIRED_STOP, Ordering::Relaxed);
    server.join().expect("server thread");
}

/// A criterion bench group.
type Group = fn(&mut Criterion);

/// The criterion bench groups, by the name `SHM_BENCH_GROUPS` selects them.
const GROUPS: [(&str, Group); 5] = [
    ("pingpong", pingpong),
    ("pingpong_one_thread", pingpong_one_thread),
    ("write_vs_memcpy", write_vs_memcpy),
    ("engine", engine),
    ("engine_one_thread", engine_one_thread),
];

/// Criterion's benches, or with the filter `paired` only [`paired`] (which
/// is not a criterion bench: it prints its own table).
///
/// `SHM_BENCH_GROUPS=engine_one_thread,pingpong_one_thread` runs only the
/// named groups' set-up as well as their benches. A criterion filter alone
/// skips benches but still sets every group up, and under valgrind the
/// two-thread groups' handshakes can time out (valgrind runs one thread at a
/// time), which aborts the run before the one-thread groups are reached.
fn main() {
    if std::env::args().skip(1).any(|a| a == "paired") {
        paired();
        return;
    }
    let only = std::env::var("SHM_BENCH_GROUPS").ok();
    let selected: Vec<&str> = only
        .as_deref()
        .map(|s| s.split(',').map(str::trim).collect())
        .unwrap_or_default();
    for name in &selected {
        assert!(
            GROUPS.iter().any(|(g, _)| g == name),
            "SHM_BENCH_GROUPS: no group {name:?} (groups: {:?})",
            GROUPS.map(|(g, _)| g)
        );
    }
    let mut c = Criterion::default().configure_from_args();
    for (name, group) in GROUPS {
        if selected.is_empty() || selected.contains(&name) {
            group(&mut c);
        }
    }
    c.final_summary();
}
