//! Every Call answered under pressure: several requesters write at once
//! (64 KiB and 1 MiB FILE_SYNC WRITEs, each keeping all its credits in
//! use) to one responder whose data pool holds fewer buffers than the sum
//! of their credits, so Calls wait for a buffer for their Read chunks. On
//! the sim fabric (seeded) and on shm, RPC-over-RDMA versions 1 and 2:
//! every WRITE is answered, NFS3_OK and FILE_SYNC, the data reads back, the
//! engine's totals account for every Call (calls = replies, nothing
//! unanswered) and every buffer comes back.
//!
//! This is the workload that stalled the Linux client in the kernel suite
//! ("8 concurrent writers", tests/kernel/guest/functional.sh), reproduced
//! in one process: a test named `every_call_answered_*`.

mod nfs_common;

use std::time::{Duration, Instant};

use dataplane::requester::{CallOutcome, Requester, RequesterConfig};
use dataplane::responder::{Responder, ResponderConfig};
use dataplane::shm::{ShmConfig, ShmFabric};
use dataplane::sim::{SimConfig, SimNetwork};
use dataplane::Fabric;
use mempool::pool::{ClassId, Mempool, PoolPlan};
use mempool::region::RegionConfig;
use nfs_common::*;
use proto::header::Limits;
use proto::negotiate::VersionRange;
use proto::nfs3::FILE_SYNC;
use proto::plan::ReplyNeeds;
use proto::ulb::{DdpItem, Nfs3Binding, UpperLayerBinding};
use rpcrdma_apps::nfs::{NfsService, NfsShared};
use std::sync::Arc;

/// Requesters writing at once: two write 64 KiB WRITEs to files of their
/// own, two write 1 MiB WRITEs to disjoint regions of one shared file (the
/// kernel suite's mix).
const WRITERS: usize = 4;
const CREDITS: u32 = 8;
/// Data buffers reserved for the responder (the class also keeps a
/// per-core cache's worth for each core): far fewer than the `WRITERS *
/// CREDITS` Calls with Read chunks that can be in flight, so the pool runs
/// dry.
const RESPONDER_DATA_BUFS: u64 = 6;
const SMALL: usize = 64 * 1024;
const SMALL_FILE: usize = 2 * MIB;
const BIG_REGION: usize = 4 * MIB;

fn writer_pools() -> (Pools, ClassId) {
    // Core 0 the responder's, cores 1.. one per requester.
    let mut plan = PoolPlan::new(1 + WRITERS);
    let recv = plan.add_class("recv", 1024, 4).unwrap();
    let send = plan.add_class("send", 8192, 4).unwrap();
    let data = plan.add_class("data", DATA_BUF_BYTES, 1).unwrap();
    let c = u64::from(CREDITS);
    let conns = WRITERS as u64;
    plan.reserve("responder-recv", recv, 2 * c * conns);
    plan.reserve("responder-send", send, 2 * c * conns);
    assert!(RESPONDER_DATA_BUFS < c * conns);
    plan.reserve("responder-data", data, RESPONDER_DATA_BUFS);
    plan.reserve("requester-recv", recv, 2 * (c + 2) * conns);
    plan.reserve("requester-send", send, (c + 3) * conns);
    // The requesters' data buffers are a class of their own, so the
    // responder cannot borrow them.
    let cdata = plan.add_class("client-data", DATA_BUF_BYTES, 2).unwrap();
    plan.reserve("requester-data", cdata, 3 * (c + 2) * conns);
    let cfg = RegionConfig {
        lock: false,
        ..RegionConfig::default()
    };
    let pool: &'static Mempool = Box::leak(Box::new(Mempool::new(&plan, &cfg).expect("pool")));
    let count = pool.class_info(data).unwrap().count;
    assert!(
        (count as u64) < c * conns / 2,
        "the responder's data class ({count} buffers) must be smaller than the Calls in flight"
    );
    (
        Pools {
            pool,
            regions: pool.regions().to_vec(),
            recv,
            send,
            data,
        },
        cdata,
    )
}

/// A requester's configuration: `nfs_common`'s, with the requesters' own
/// data class.
fn writer_cfg(p: &Pools, cdata: ClassId, v: u32) -> RequesterConfig {
    RequesterConfig {
        data_class: cdata,
        ..requester_cfg(p, versions(v), CREDITS)
    }
}

fn writer_responder<F: Fabric>(
    p: &Pools,
    sh: &Arc<NfsShared>,
    fab: F,
    addr: &str,
) -> Responder<'static, F, NfsService> {
    let cfg = ResponderConfig {
        versions: VersionRange::ALL,
        credits: CREDITS,
        max_conns: WRITERS as u32,
        send_depth: 64,
        max_rdma_reads: 4,
        limits: Limits::DEFAULT,
        max_read_bytes: DATA_BUF_BYTES as u64,
        recv_class: p.recv,
        send_class: p.send,
        data_class: p.data,
        remote_invalidation: false,
        backward_credits: 0,
    };
    let svc = NfsService::new(sh.clone(), 0).unwrap();
    Responder::new(cfg, fab, svc, p.pool, &p.regions, 0, Some(addr)).unwrap()
}

/// One WRITE to send: file handle, offset, pattern seed, length.
#[derive(Clone)]
struct Write {
    fh: Vec<u8>,
    off: u64,
    seed: u32,
    len: usize,
}

/// Everything the writers send, per writer, and the files to check after.
struct Plan {
    per_writer: Vec<Vec<Write>>,
    /// (handle, expected content)
    files: Vec<(Vec<u8>, Vec<u8>)>,
}

fn plan_writes(c: &mut Client<Engine<impl Fabric>>, tag: &str) -> Plan {
    let (root, _) = c.mnt("/export").expect("MNT");
    let (dir, _) = c.mkdir(&root, &format!("cw-{tag}"), 0o755).expect("MKDIR");
    let mut per_writer = Vec::new();
    let mut files = Vec::new();
    let (shared_fh, _) = c.mkfile(&dir, "shared", 0o644).expect("CREATE shared");
    let mut shared_content = vec![0u8; 2 * BIG_REGION];
    let mut big_writer = 0;
    for w in 0..WRITERS {
        let mut writes = Vec::new();
        if w % 2 == 0 {
            let (fh, _) = c.mkfile(&dir, &format!("cw{w}"), 0o644).expect("CREATE");
            let mut content = Vec::new();
            for k in 0..SMALL_FILE / SMALL {
                let seed = (w * 1000 + k) as u32;
                writes.push(Write {
                    fh: fh.clone(),
                    off: (k * SMALL) as u64,
                    seed,
                    len: SMALL,
                });
                content.extend_from_slice(&pattern(seed, SMALL));
            }
            files.push((fh, content));
        } else {
            let base = big_writer * BIG_REGION;
            big_writer += 1;
            for k in 0..BIG_REGION / MIB {
                let seed = (w * 1000 + k) as u32;
                let off = base + k * MIB;
                writes.push(Write {
                    fh: shared_fh.clone(),
                    off: off as u64,
                    seed,
                    len: MIB,
                });
                shared_content[off..off + MIB].copy_from_slice(&pattern(seed, MIB));
            }
        }
        per_writer.push(writes);
    }
    files.push((shared_fh, shared_content));
    Plan { per_writer, files }
}

/// Submit WRITE `w` on `cli` (its data in a Read chunk, as `Nfs3Binding`
/// says), FILE_SYNC.
fn submit_write<F: Fabric>(cli: &mut Requester<'static, F>, binding: &Nfs3Binding, xid: u32, w: &Write) {
    let mut e = call_header(xid, NFS, 3, 7, &Auth::root());
    let data = pattern(w.seed, w.len);
    e.opaque(&w.fh)
        .u64(w.off)
        .u32(w.len as u32)
        .u32(FILE_SYNC)
        .opaque(&data);
    let call = &e.b;
    let mut cb = cli.call_buf().expect("call buffer");
    cb.bytes_mut()[..call.len()].copy_from_slice(call);
    let mut items = [DdpItem::default(); 2];
    let k = binding.call_items(call, &mut items).unwrap();
    assert!(
        k == 1 && items[0].len as usize == w.len,
        "the data goes in a Read chunk"
    );
    let needs = ReplyNeeds::from_ulb(binding, 3, 7);
    cli.submit(cb, call.len(), &items[..k], &needs)
        .map_err(|(e, _)| e)
        .expect("submit");
}

/// Run every writer until all their WRITEs are answered (each checked:
/// NFS3_OK, the whole count, FILE_SYNC) or `budget` runs out.
fn run_writers<F: Fabric>(
    srv: &mut Responder<'static, F, NfsService>,
    net: Option<&SimNetwork>,
    clis: &mut [&mut Requester<'static, F>],
    plan: &Plan,
    budget: Duration,
) {
    let binding = Nfs3Binding::new(MIB as u32);
    let mut next = vec![0usize; clis.len()];
    let mut done = vec![0usize; clis.len()];
    let t0 = Instant::now();
    let mut xid = 0x5000_0000u32;
    let mut buf = vec![0u8; 2 * MIB];
    while done.iter().zip(&plan.per_writer).any(|(d, p)| *d < p.len()) {
        assert!(
            t0.elapsed() < budget,
            "WRITEs unanswered after {budget:?}: done {done:?} of {:?}; responder {:?}, live {:?}",
            plan.per_writer.iter().map(Vec::len).collect::<Vec<_>>(),
            srv.stats(),
            srv.live_by_state()
        );
        for (k, cli) in clis.iter_mut().enumerate() {
            while next[k] < plan.per_writer[k].len() && cli.can_submit() {
                xid += 1;
                submit_write(cli, &binding, xid, &plan.per_writer[k][next[k]]);
                next[k] += 1;
            }
            cli.poll();
            while let Some(c) = cli.poll_completion() {
                assert_eq!(c.outcome, CallOutcome::Reply, "writer {k}: transport outcome");
                let v = cli.reply(c.id).expect("reply view");
                let n = v.reassemble(&[], &mut buf).expect("reassemble");
                let r = Reply::parse(&buf[..n]);
                cli.release(c.id);
                assert_eq!(r.stat, RpcStat::Success, "writer {k}");
                let mut d = r.dec();
                assert_eq!(d.u32(), 0, "writer {k}: NFS3_OK");
                d.wcc();
                let (count, committed) = (d.u32(), d.u32());
                d.fixed(8);
                d.end();
                assert_eq!(committed, FILE_SYNC, "writer {k}");
                assert!(
                    plan.per_writer[k].iter().any(|w| w.len == count as usize),
                    "writer {k}: count {count}"
                );
                done[k] += 1;
            }
        }
        srv.poll();
        if let Some(n) = net {
            for _ in 0..4 {
                n.step();
            }
        }
    }
}

/// The whole scenario on one fabric: set up with requester 0, the writers
/// at once, read every file back, then the engine's totals and the pool.
fn scenario<F: Fabric>(
    p: &Pools,
    cdata: ClassId,
    srv: Responder<'static, F, NfsService>,
    net: Option<SimNetwork>,
    mut clis: Vec<Requester<'static, F>>,
    tag: &str,
) {
    // Connect every requester; set up files through the first.
    let mut srv = Some(srv);
    let t0 = Instant::now();
    while clis.iter().any(|c| c.link() != dataplane::requester::LinkState::Ready) {
        for c in clis.iter_mut() {
            c.poll();
        }
        srv.as_mut().unwrap().poll();
        if let Some(n) = net.as_ref() {
            n.step();
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "connect");
    }
    let first = clis.remove(0);
    let mut c = Client::new(Engine {
        cli: first,
        srv: srv.take(),
        net,
        binding: Nfs3Binding::new(MIB as u32),
        carried: Carried::default(),
    });
    c.auth = Auth::root();
    let plan = plan_writes(&mut c, tag);
    let mut srv = c.t.srv.take().unwrap();
    let net = c.t.net.take();
    let before = srv.stats();
    {
        // Requester 0 (idle between Calls) writes too.
        let mut writers: Vec<&mut Requester<'static, F>> =
            std::iter::once(&mut c.t.cli).chain(clis.iter_mut()).collect();
        run_writers(&mut srv, net.as_ref(), &mut writers, &plan, Duration::from_secs(120));
    }
    let s = srv.stats();
    assert!(
        s.chunk_buf_waits > before.chunk_buf_waits,
        "the data pool ran dry: {s:?}"
    );
    // Read back through the first requester.
    c.t.srv = Some(srv);
    c.t.net = net;
    for (fh, want) in &plan.files {
        let mut off = 0;
        while off < want.len() {
            let n = MIB.min(want.len() - off);
            let (got, _, _) = c.read(fh, off as u64, n as u32).expect("READ");
            assert!(got == want[off..off + n], "{tag}: data at {off} differs");
            off += n;
        }
    }
    // Every Call accounted: answered with an RPC reply, none unanswered.
    let mut srv = c.t.srv.take().unwrap();
    let s = srv.stats();
    assert_eq!(s.calls, s.replies, "{tag}: {s:?}");
    assert_eq!(
        (s.unanswered(), s.unaccounted(srv.calls_awaiting_answer())),
        (0, 0),
        "{tag}: {s:?}"
    );
    let net = c.t.net.take();
    let mut all = clis;
    all.push(c.t.cli);
    for cli in all.iter_mut() {
        assert_eq!(cli.shutdown(100_000), 0, "requester calls left");
    }
    if let Some(n) = net.as_ref() {
        let _ = n.run_until_idle(1_000_000);
    }
    let t0 = Instant::now();
    while srv.connections() > 0 && t0.elapsed() < Duration::from_secs(10) {
        srv.poll();
        if let Some(n) = net.as_ref() {
            n.step();
        }
    }
    assert_eq!(
        srv.shutdown(100_000),
        Default::default(),
        "{tag}: responder buffers held"
    );
    drop(srv);
    drop(all);
    for class in [p.recv, p.send, p.data, cdata] {
        assert_eq!(p.pool.stats(class).unwrap().in_use, 0, "{tag}: class {class:?} leaked");
    }
}

fn mem_shared() -> (Store, Arc<NfsShared>) {
    let s = store(Kind::Mem, "b0");
    let mut ex = Ex::new("/export", "b0");
    ex.root_squash = false;
    let sh = shared(&[&s], &[ex], DATA_BUF_BYTES as u32);
    (s, sh)
}

#[test]
fn every_call_answered_with_concurrent_writers_on_sim() {
    for v in [1, 2] {
        let (_s, sh) = mem_shared();
        let (p, cdata) = writer_pools();
        let net = SimNetwork::new(SimConfig::with_seed(40 + u64::from(v)));
        let srv = writer_responder(&p, &sh, net.endpoint(), "srv");
        let clis = (0..WRITERS)
            .map(|k| {
                let mut c =
                    Requester::new(writer_cfg(&p, cdata, v), net.endpoint(), p.pool, &p.regions, 1 + k).unwrap();
                c.connect("srv").unwrap_or_else(|e| panic!("writer {k}: {e}"));
                c
            })
            .collect();
        scenario(&p, cdata, srv, Some(net), clis, &format!("sim-v{v}"));
    }
}

#[test]
fn every_call_answered_with_concurrent_writers_on_shm() {
    for v in [1, 2] {
        let (_s, sh) = mem_shared();
        let (p, cdata) = writer_pools();
        let addr = format!("@rpcrdma-cw-{}-v{v}", std::process::id());
        // As the target sets it: each connection draws at most its credits
        // from the SRQ.
        let fab = ShmFabric::new(ShmConfig {
            srq_window: CREDITS,
            ..ShmConfig::for_rpc_engine()
        })
        .unwrap();
        let srv = writer_responder(&p, &sh, fab, &addr);
        let clis = (0..WRITERS)
            .map(|k| {
                let fab = ShmFabric::new(ShmConfig::default()).unwrap();
                let mut c = Requester::new(writer_cfg(&p, cdata, v), fab, p.pool, &p.regions, 1 + k).unwrap();
                c.connect(&addr).unwrap();
                c
            })
            .collect();
        scenario(&p, cdata, srv, None, clis, &format!("shm-v{v}"));
    }
}
