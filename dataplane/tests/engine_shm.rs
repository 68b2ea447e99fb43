//! The transport engine over the shm fabric: in one process (one thread polling
//! both ends), and between two processes (this test binary re-executes itself as
//! the requester), for v1 and v2, every chunk pattern, byte-checked, with buffer
//! accounting at the end.

mod engine_common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use dataplane::requester::{CallId, CallOutcome, LinkState, Requester};
use dataplane::responder::Responder;
use dataplane::shm::{ShmConfig, ShmFabric};
use engine_common::*;
use proto::negotiate::VersionRange;

const CREDITS: u32 = 8;
const MAX_CONNS: u32 = 2;
const ENV_ADDR: &str = "RPCRDMA_ENGINE_SHM_ADDR";
const ENV_VERS: &str = "RPCRDMA_ENGINE_SHM_VERS";

fn workload() -> Vec<Expect> {
    let e = |proc_, arg, big_n, b| Expect { proc_, arg, big_n, b };
    vec![
        e(P_NULL, vec![], 0, 0),
        e(P_ECHO, pattern(1, 100), 0, 0),
        e(P_ECHO, pattern(2, 30_001), 0, 0),
        e(P_BIG, vec![], 5000, 0),
        e(P_SUM, pattern(3, 9000), 0, 0),
        e(P_RDLONG, pattern(4, 7000), 3000, 0),
        e(P_TWO, vec![], 2000, 1234),
        e(P_WRLONG, vec![], 1500, 2500),
        e(P_WRTAIL, vec![], 1501, 37),
        e(P_BIG, vec![], 10, 0),
    ]
}

/// Drive `cli` through the workload `rounds` times; `pump` runs the other side.
fn run_client(cli: &mut Requester<'_, ShmFabric>, rounds: usize, mut pump: impl FnMut()) -> Result<(), String> {
    let t0 = Instant::now();
    while cli.link() != LinkState::Ready {
        cli.poll();
        pump();
        if cli.link() == LinkState::Failed || t0.elapsed() > Duration::from_secs(20) {
            return Err(format!("connect: {:?}", cli.link()));
        }
    }
    let work = workload();
    let total = work.len() * rounds;
    let (mut next, mut done) = (0usize, 0usize);
    let mut inflight: Vec<(CallId, usize)> = Vec::new();
    while done < total {
        cli.poll();
        pump();
        while next < total && cli.can_submit() {
            let id = submit(cli, &work[next % work.len()])?;
            inflight.push((id, next % work.len()));
            next += 1;
        }
        while let Some(c) = cli.poll_completion() {
            let pos = inflight
                .iter()
                .position(|(id, _)| *id == c.id)
                .ok_or("unknown completion")?;
            let (id, k) = inflight.swap_remove(pos);
            if c.outcome != CallOutcome::Reply {
                return Err(format!("call {k}: {:?}", c.outcome));
            }
            check_reply(cli, id, &work[k]).map_err(|e| format!("call {k}: {e}"))?;
            cli.release(id);
            done += 1;
        }
        if t0.elapsed() > Duration::from_secs(60) {
            return Err(format!("timed out: {done}/{total}, {:?}", cli.stats()));
        }
    }
    Ok(())
}

fn versions(v: u32) -> VersionRange {
    if v == 1 {
        VersionRange::only(1).unwrap()
    } else {
        VersionRange::ALL
    }
}

#[test]
fn one_process_v1_and_v2() {
    let p = pools(1024, CREDITS, MAX_CONNS);
    let addr = format!("@rpcrdma-engine-shm-inproc-{}", std::process::id());
    let fab = ShmFabric::new(ShmConfig::for_rpc_engine()).unwrap();
    let mut srv = Responder::new(
        responder_cfg(&p, VersionRange::ALL, CREDITS, MAX_CONNS),
        fab,
        TestService::default(),
        p.pool,
        &p.regions,
        0,
        Some(&addr),
    )
    .unwrap();
    for v in [1, 2] {
        let fab = ShmFabric::new(ShmConfig::for_rpc_engine()).unwrap();
        let mut cli = Requester::new(requester_cfg(&p, versions(v), CREDITS), fab, p.pool, &p.regions, 1).unwrap();
        cli.connect(&addr).unwrap();
        run_client(&mut cli, 3, || {
            srv.poll();
        })
        .unwrap_or_else(|e| panic!("v{v}: {e}"));
        assert_eq!(cli.version(), v);
        assert_eq!(cli.shutdown(100_000), 0);
        drop(cli);
    }
    // Wait for the responder to see both connections go, then account.
    let t0 = Instant::now();
    while srv.connections() > 0 && t0.elapsed() < Duration::from_secs(10) {
        srv.poll();
    }
    assert_eq!(srv.shutdown(100_000), Default::default());
    assert_eq!(srv.stats().calls, 2 * 3 * workload().len() as u64);
    drop(srv);
    for class in [p.recv, p.send, p.data] {
        assert_eq!(p.pool.stats(class).unwrap().in_use, 0, "class {class:?} leaked");
    }
}

/// [`v1_pair`], connected, with the workload run `rounds` times (the
/// connection's version is fixed and its receives are posted).
fn ready_v1_pair<'p>(
    p: &'p Pools,
    tag: &str,
    rounds: usize,
) -> (Responder<'p, ShmFabric, TestService>, Requester<'p, ShmFabric>) {
    let (mut srv, mut cli) = v1_pair(p, tag);
    run_client(&mut cli, rounds, || {
        srv.poll();
    })
    .unwrap();
    (srv, cli)
}

/// An ECHO of `len` bytes of pattern `salt`.
fn echo(salt: u32, len: usize) -> Expect {
    Expect {
        proc_: P_ECHO,
        arg: pattern(salt, len),
        big_n: 0,
        b: 0,
    }
}

/// Poll `cli` (and `pump`, the other side) until Call `id` completes, and
/// check that it got the Reply `e` asks for (the caller releases it).
fn wait_reply(cli: &mut Requester<'_, ShmFabric>, id: CallId, e: &Expect, pump: impl FnMut()) -> Result<(), String> {
    wait_done(cli, id, pump)?;
    check_reply(cli, id, e)
}

/// Poll `cli` (and `pump`) until Call `id` completes with a Reply.
fn wait_done(cli: &mut Requester<'_, ShmFabric>, id: CallId, mut pump: impl FnMut()) -> Result<(), String> {
    let t0 = Instant::now();
    let done = loop {
        pump();
        cli.poll();
        if let Some(c) = cli.poll_completion() {
            break c;
        }
        if t0.elapsed() > Duration::from_secs(10) {
            return Err("no reply".into());
        }
    };
    if (done.id, done.outcome) != (id, CallOutcome::Reply) {
        return Err(format!("completion {:?}: {:?}", done.id, done.outcome));
    }
    Ok(())
}

/// A responder listening at an address named by `tag`, and a v1 requester
/// connecting to it (not yet connected: `run_client` finishes that).
fn v1_pair<'p>(p: &'p Pools, tag: &str) -> (Responder<'p, ShmFabric, TestService>, Requester<'p, ShmFabric>) {
    let addr = format!("@rpcrdma-engine-shm-{tag}-{}", std::process::id());
    let fab = ShmFabric::new(ShmConfig::for_rpc_engine()).unwrap();
    let cfg = responder_cfg(p, VersionRange::ALL, CREDITS, MAX_CONNS);
    let srv = Responder::new(cfg, fab, TestService::default(), p.pool, &p.regions, 0, Some(&addr)).unwrap();
    let fab = ShmFabric::new(ShmConfig::for_rpc_engine()).unwrap();
    let mut cli = Requester::new(requester_cfg(p, versions(1), CREDITS), fab, p.pool, &p.regions, 1).unwrap();
    cli.connect(&addr).unwrap();
    (srv, cli)
}

/// Over shm an RDMA Read of up to a copy slice (64 KiB) completes when it is
/// posted, so a Call with such a Read chunk is answered in the same turn of the responder's loop that
/// received it: `poll` polls the CQ once more after posting Reads, instead of
/// leaving their completions for the next turn.
#[test]
fn a_read_chunk_call_is_answered_in_the_turn_that_received_it() {
    let p = pools(1024, CREDITS, MAX_CONNS);
    let (mut srv, mut cli) = v1_pair(&p, "oneturn");
    // Connected, with the workload run once (the connection's version is
    // fixed and its receives are posted).
    run_client(&mut cli, 1, || {
        srv.poll();
    })
    .unwrap();
    for (k, e) in [
        Expect {
            proc_: P_ECHO,
            arg: pattern(5, 30_001),
            big_n: 0,
            b: 0,
        },
        Expect {
            proc_: P_SUM,
            arg: pattern(6, 9000),
            big_n: 0,
            b: 0,
        },
    ]
    .iter()
    .enumerate()
    {
        let before = srv.stats();
        let id = submit(&mut cli, e).unwrap();
        // The Call is in the responder's receive queue (shm copies at post).
        srv.poll();
        let after = srv.stats();
        assert_eq!(after.calls - before.calls, 1, "call {k}");
        assert!(after.rdma_reads > before.rdma_reads, "call {k}: has a Read chunk");
        assert_eq!(after.replies - before.replies, 1, "call {k}: answered in one turn");
        wait_reply(&mut cli, id, e, || {}).unwrap_or_else(|err| panic!("call {k}: {err}"));
        cli.release(id);
    }
    assert_eq!(cli.shutdown(100_000), 0);
}

/// Over shm the service writes a Write chunk's data item straight into the
/// requester's memory (`Fabric::remote_window`) when the Call's only chunk is
/// that one Write chunk (the READ shape): those ECHO replies arrive
/// byte-exact with no RDMA Write posted. An ECHO whose Call also carries a
/// Read chunk takes the general plan and its RDMA Write.
#[test]
fn write_chunk_data_is_placed_in_the_requesters_memory() {
    let p = pools(1024, CREDITS, MAX_CONNS);
    let (mut srv, mut cli) = ready_v1_pair(&p, "placed", 1);
    // (ECHO length, placed): up to 700 bytes the Call is inline.
    for (k, (len, placed)) in [(1usize, true), (100, true), (700, true), (30_001, false)]
        .into_iter()
        .enumerate()
    {
        let before = srv.stats();
        let e = echo(7 + k as u32, len);
        let id = submit(&mut cli, &e).unwrap();
        wait_reply(&mut cli, id, &e, || {
            srv.poll();
        })
        .unwrap_or_else(|err| panic!("echo {len}: {err}"));
        let v = cli.reply(id).unwrap();
        assert_eq!(
            v.write_chunk(0).map(|d| d.len()),
            Some(len),
            "echo {len}: in the Write chunk"
        );
        cli.release(id);
        let after = srv.stats();
        let (wrote, put) = (
            after.rdma_writes - before.rdma_writes,
            after.writes_placed - before.writes_placed,
        );
        assert_eq!((wrote, put), if placed { (0, 1) } else { (1, 0) }, "echo {len}");
    }
    assert_eq!(cli.shutdown(100_000), 0);
}

/// ECHO answered with the data twice: first as a DDP item in the head, then
/// as the data item (an NFS-like reply whose Write chunk takes something
/// other than the data item). The engine hands it the requester's Write
/// chunk as its data buffer, so the data item must be copied back into the
/// Call's own data buffer before the reply is built.
#[derive(Default)]
struct HeadItemThenData(TestService);

impl dataplane::service::Service for HeadItemThenData {
    fn fills_data_in_call(&self) -> bool {
        true
    }
    fn reply_data_hint(&mut self, call: &dataplane::service::CallView<'_>) -> usize {
        self.0.reply_data_hint(call)
    }
    fn handle_call(
        &mut self,
        call: &dataplane::service::CallView<'_>,
        reply: &mut dataplane::service::ReplyBuilder<'_>,
    ) -> Result<(), dataplane::service::ServiceError> {
        use dataplane::service::ServiceError::Reject;
        use proto::rpc::{self, CallHeader, OpaqueAuth, ReplyHeader};
        use proto::xdr::{Reader, Writer};
        let head = call.head();
        let (h, at) = CallHeader::decode(head).map_err(|_| Reject)?;
        if h.proc_ != P_ECHO {
            return self.0.handle_call(call, reply);
        }
        let d = Reader::new(&head[at..])
            .opaque_var(MAX_DATA, "data")
            .map_err(|_| Reject)?
            .to_vec();
        let mut w = Writer::new(reply.head_mut());
        rpc::encode_reply_header(&mut w, &ReplyHeader::success(h.xid, OpaqueAuth::NONE)).map_err(|_| Reject)?;
        w.put_u32(d.len() as u32).map_err(|_| Reject)?;
        let x_at = w.len();
        w.put_opaque_fixed(&d).map_err(|_| Reject)?;
        w.put_u32(d.len() as u32).map_err(|_| Reject)?;
        let n = w.len();
        reply.set_head_len(n);
        if !reply.add_head_item(x_at, d.len()) {
            return Err(Reject);
        }
        reply
            .data_mut()
            .and_then(|b| b.get_mut(..d.len()))
            .ok_or(Reject)?
            .copy_from_slice(&d);
        reply.set_data(d.len(), true);
        Ok(())
    }
}

#[test]
fn a_data_item_outside_the_write_chunk_is_copied_back_from_the_window() {
    let p = pools(1024, CREDITS, MAX_CONNS);
    let addr = format!("@rpcrdma-engine-shm-copyback-{}", std::process::id());
    let fab = ShmFabric::new(ShmConfig::for_rpc_engine()).unwrap();
    let cfg = responder_cfg(&p, VersionRange::ALL, CREDITS, MAX_CONNS);
    let mut srv = Responder::new(
        cfg,
        fab,
        HeadItemThenData::default(),
        p.pool,
        &p.regions,
        0,
        Some(&addr),
    )
    .unwrap();
    let fab = ShmFabric::new(ShmConfig::for_rpc_engine()).unwrap();
    let mut cli = Requester::new(requester_cfg(&p, versions(1), CREDITS), fab, p.pool, &p.regions, 1).unwrap();
    cli.connect(&addr).unwrap();
    let t0 = Instant::now();
    while cli.link() != LinkState::Ready {
        cli.poll();
        srv.poll();
        assert!(t0.elapsed() < Duration::from_secs(10), "connect: {:?}", cli.link());
    }
    for (k, len) in [100usize, 300].into_iter().enumerate() {
        let before = srv.stats();
        let e = echo(40 + k as u32, len);
        let id = submit(&mut cli, &e).unwrap();
        wait_done(&mut cli, id, || {
            srv.poll();
        })
        .unwrap_or_else(|err| panic!("echo {len}: {err}"));
        let v = cli.reply(id).unwrap();
        assert_eq!(
            v.write_chunk(0),
            Some(&e.arg[..]),
            "echo {len}: the head item in the Write chunk"
        );
        let mut out = vec![0u8; 4096];
        let n = v.reassemble(&[RPC_REPLY_HDR as u32 + 4], &mut out).expect("reassembly");
        let mut r = proto::xdr::Reader::new(&out[RPC_REPLY_HDR..n]);
        let x = r.opaque_var(MAX_DATA, "x").unwrap();
        let y = r.opaque_var(MAX_DATA, "y").unwrap();
        assert_eq!((x, y), (&e.arg[..], &e.arg[..]), "echo {len}: both copies");
        cli.release(id);
        let after = srv.stats();
        assert_eq!(after.writes_placed, before.writes_placed, "echo {len}: nothing placed");
        assert_eq!(after.replies - before.replies, 1);
    }
    assert_eq!(cli.shutdown(100_000), 0);
}

/// With the `stage-timing` feature the engines time every Call's stages:
/// each lap counts every Call that reached it, and a Call's laps come in
/// their order (scripts/test.sh runs this with the feature; without it the
/// timers are empty and the test checks that).
#[test]
fn stage_timing_laps_every_call_in_order() {
    use dataplane::{requester, responder};
    let p = pools(1024, CREDITS, MAX_CONNS);
    let (srv, mut cli) = ready_v1_pair(&p, "stages", 2);
    let calls = 2 * workload().len() as u64;
    let lap = |t: &dataplane::stages::StageTimer, k| t.summary(k).map(|s| (s.samples, s.p50_ns));
    if !dataplane::stages::ENABLED {
        assert_eq!(lap(srv.stages(), responder::LAP_REPLY_POSTED), None);
        assert_eq!(lap(cli.stages(), requester::LAP_CALL_POSTED), None);
        return;
    }
    let sv: Vec<_> = (0..responder::LAPS.len())
        .map(|k| lap(srv.stages(), k).unwrap())
        .collect();
    for (k, (n, _)) in sv.iter().enumerate() {
        assert_eq!(*n, calls, "responder lap {}", responder::LAPS[k]);
    }
    // Medians of laps from one origin cannot go backwards.
    for w in sv.windows(2) {
        assert!(w[0].1 <= w[1].1, "{sv:?}");
    }
    for k in 0..requester::LAPS.len() {
        // Every Call of the workload is timed on the requester's side too.
        assert_eq!(
            lap(cli.stages(), k).map(|l| l.0),
            Some(calls),
            "requester lap {}",
            requester::LAPS[k]
        );
    }
    assert_eq!(cli.shutdown(100_000), 0);
}

/// The requester process (run by `two_processes_v1_and_v2`).
#[test]
#[ignore = "run as the child of two_processes_v1_and_v2"]
fn requester_child() {
    let (Ok(addr), Ok(v)) = (std::env::var(ENV_ADDR), std::env::var(ENV_VERS)) else {
        return;
    };
    let v: u32 = v.parse().unwrap();
    let p = pools(1024, CREDITS, MAX_CONNS);
    let fab = ShmFabric::new(ShmConfig::default()).unwrap();
    let mut cli = Requester::new(requester_cfg(&p, versions(v), CREDITS), fab, p.pool, &p.regions, 1).unwrap();
    cli.connect(&addr).unwrap();
    run_client(&mut cli, 5, std::thread::yield_now).unwrap_or_else(|e| panic!("child v{v}: {e}"));
    assert_eq!(cli.version(), v);
    assert_eq!(cli.shutdown(100_000), 0);
    drop(cli);
    for class in [p.recv, p.send, p.data] {
        assert_eq!(p.pool.stats(class).unwrap().in_use, 0, "child class {class:?} leaked");
    }
    println!("requester_child v{v}: ok");
}

#[test]
fn two_processes_v1_and_v2() {
    let p = pools(1024, CREDITS, MAX_CONNS);
    let addr = format!("@rpcrdma-engine-shm-2p-{}", std::process::id());
    let fab = ShmFabric::new(ShmConfig::default()).unwrap();
    let mut srv = Responder::new(
        responder_cfg(&p, VersionRange::ALL, CREDITS, MAX_CONNS),
        fab,
        TestService::default(),
        p.pool,
        &p.regions,
        0,
        Some(&addr),
    )
    .unwrap();
    let exe = std::env::current_exe().unwrap();
    for v in [1u32, 2] {
        let mut child = Command::new(&exe)
            .args(["--exact", "requester_child", "--ignored", "--nocapture"])
            .env(ENV_ADDR, &addr)
            .env(ENV_VERS, v.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let t0 = Instant::now();
        let status = loop {
            srv.poll();
            if let Some(st) = child.try_wait().unwrap() {
                break st;
            }
            assert!(t0.elapsed() < Duration::from_secs(120), "child v{v} hung");
        };
        let out = child.wait_with_output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
        assert!(
            status.success() && text.contains(&format!("requester_child v{v}: ok")),
            "child v{v} failed (responder {:?}):\n{text}",
            srv.stats()
        );
    }
    let t0 = Instant::now();
    while srv.connections() > 0 && t0.elapsed() < Duration::from_secs(10) {
        srv.poll();
    }
    assert_eq!(srv.stats().calls, 2 * 5 * workload().len() as u64);
    assert_eq!(srv.shutdown(100_000), Default::default());
}

/// A WRITE of `len` bytes (the data in a Read chunk).
fn submit_write(cli: &mut Requester<'_, ShmFabric>, len: u32) -> CallId {
    use proto::ulb::{DdpItem, UpperLayerBinding};
    let mut cb = cli.call_buf().expect("call buffer");
    let n = encode_write_in_place(cb.bytes_mut(), len).expect("encode");
    let mut items = [DdpItem::default(); 1];
    let k = TestUlb.call_items(&cb.bytes_mut()[..n], &mut items).expect("items");
    let needs = proto::plan::ReplyNeeds::from_ulb(&TestUlb, VERS, P_WRITE);
    cli.submit(cb, n, &items[..k], &needs)
        .map_err(|(e, _)| e)
        .expect("submit")
}

/// A responder whose data buffers take a 1 MiB WRITE, and `n` v1
/// requesters connected to it.
fn one_mib_setup<'p>(
    p: &'p Pools,
    tag: &str,
    n: usize,
) -> (Responder<'p, ShmFabric, TestService>, Vec<Requester<'p, ShmFabric>>) {
    let addr = format!("@rpcrdma-engine-shm-{tag}-{}", std::process::id());
    // Each connection's share of the SRQ's receives (its credits), so
    // the first connection does not hold them all.
    let fab = ShmFabric::new(ShmConfig {
        srq_window: CREDITS,
        ..ShmConfig::for_rpc_engine()
    })
    .unwrap();
    let cfg = dataplane::responder::ResponderConfig {
        max_read_bytes: u64::from(MAX_IO) + 4096,
        ..responder_cfg(p, VersionRange::ALL, CREDITS, MAX_CONNS)
    };
    let mut srv = Responder::new(cfg, fab, TestService::default(), p.pool, &p.regions, 0, Some(&addr)).unwrap();
    let mut clis: Vec<_> = (0..n)
        .map(|k| {
            let fab = ShmFabric::new(ShmConfig::for_rpc_engine()).unwrap();
            let mut cli =
                Requester::new(requester_cfg(p, versions(1), CREDITS), fab, p.pool, &p.regions, 1 + k).unwrap();
            cli.connect(&addr).unwrap();
            cli
        })
        .collect();
    let t0 = Instant::now();
    while clis.iter().any(|c| c.link() != LinkState::Ready) {
        srv.poll();
        for c in &mut clis {
            c.poll();
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "connect");
    }
    (srv, clis)
}

/// Issue 21 item 5: client A's 1 MiB WRITE (its data in a Read chunk,
/// which over shm the responder's core copies itself) and client B's NULL
/// arrive together. B is answered while A's chunk is still being copied,
/// and A some turns of the loop later; before, the 1 MiB copy ran in one go
/// and both were answered in the same turn, B after it.
#[test]
fn nfs_safety_a_large_read_chunk_does_not_hold_up_another_clients_call() {
    let p = pools_with_data(1024, CREDITS, MAX_CONNS, MAX_IO as usize + 4096);
    let (mut srv, mut clis) = one_mib_setup(&p, "hol", 2);
    let (a, rest) = clis.split_first_mut().unwrap();
    let b = &mut rest[0];
    let write = submit_write(a, MAX_IO);
    let null = submit(
        b,
        &Expect {
            proc_: P_NULL,
            arg: vec![],
            big_n: 0,
            b: 0,
        },
    )
    .unwrap();
    // One turn: the responder, then each requester; the turn each Call's
    // reply came in.
    let (mut turn, mut a_at, mut b_at) = (0u32, None, None);
    while a_at.is_none() || b_at.is_none() {
        turn += 1;
        let work = srv.poll();
        // While A's chunk is copied the responder's turns are busy ones
        // (its core keeps polling instead of spinning down to sleep).
        assert!(
            work > 0 || b_at.is_none() || a_at.is_some(),
            "turn {turn} idle mid-copy"
        );
        a.poll();
        b.poll();
        if let Some(c) = a.poll_completion() {
            assert_eq!((c.id, c.outcome), (write, CallOutcome::Reply));
            a_at = Some(turn);
        }
        if let Some(c) = b.poll_completion() {
            assert_eq!((c.id, c.outcome), (null, CallOutcome::Reply));
            b_at = Some(turn);
        }
        assert!(
            turn < 100_000,
            "no replies: {:?} {:?} {:?}",
            srv.stats(),
            a.stats(),
            b.stats()
        );
    }
    let (a_at, b_at) = (a_at.unwrap(), b_at.unwrap());
    assert!(
        b_at < a_at,
        "B's NULL answered in turn {b_at}, A's 1 MiB WRITE in turn {a_at}: B must not wait for A's copy"
    );
    let slices = MAX_IO / dataplane::shm::COPY_SLICE_BYTES;
    assert!(
        a_at - b_at >= slices / 2,
        "A's chunk copied over the turns after B's reply"
    );
    a.release(write);
    b.release(null);
    for c in clis.iter_mut() {
        assert_eq!(c.shutdown(100_000), 0);
    }
}

/// A client that goes away while the responder copies its 1 MiB Read
/// chunk: the Read is flushed and both sides get every buffer back.
#[test]
fn nfs_safety_a_client_gone_mid_copy_leaves_no_buffer_held() {
    let p = pools_with_data(1024, CREDITS, MAX_CONNS, MAX_IO as usize + 4096);
    {
        let (mut srv, mut clis) = one_mib_setup(&p, "gone", 1);
        let before = srv.stats();
        submit_write(&mut clis[0], MAX_IO);
        // (The responder may still have to see its side established.)
        let t0 = Instant::now();
        while srv.stats().rdma_reads == before.rdma_reads {
            clis[0].poll();
            srv.poll();
            assert!(t0.elapsed() < Duration::from_secs(10), "the Call's Read was not posted");
        }
        let mid = srv.stats();
        assert_eq!(mid.rdma_reads - before.rdma_reads, 1, "the chunk's Read was posted");
        assert_eq!(mid.replies, before.replies, "and is still being copied");
        // The client disconnects (its side of the Call fails) and goes.
        assert_eq!(clis[0].shutdown(100_000), 0);
        drop(clis);
        let t0 = Instant::now();
        while srv.connections() > 0 {
            srv.poll();
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "the responder saw no disconnect"
            );
        }
        assert_eq!(srv.shutdown(100_000), Default::default());
    }
    pool_idle(&p).unwrap();
}
