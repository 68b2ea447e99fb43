//! The transport engine over the `verbs` provider on a real RDMA device (run
//! by tests/verbs/run.sh inside a Soft-RoCE VM; any host with a device works).
//!
//! A responder and a requester, each on its own [`VerbsFabric`], run in one
//! thread (the requester connects to the responder through the device). For
//! RPC-over-RDMA version 1 and then version 2 it makes the test program's
//! calls (the program and its service are the engine tests' own,
//! dataplane/tests/engine_common): NULL, inline ECHO, ECHO through a Read
//! chunk and a Write chunk, a Long reply through a Reply chunk, a Long call
//! through a Position-Zero Read chunk, Read list + Reply chunk, two Write
//! chunks, Write list + Reply chunk — checking every reply byte for byte and
//! that each chunk pattern was really used. Then both sides shut down and
//! every pool buffer must be back. After each version, several connections
//! write at once (Read chunks on every connection, all credits in use) and
//! every Call must be answered ([`run_writers`]).
//!
//! Usage: `verbs_engine [IP:PORT]` (default `$VMLAB_IP:7480`; version 2 uses
//! PORT + 1, the writers PORT + 2 and PORT + 3). Prints `verbs_engine: PASS` and exits 0 only when all held.

#[path = "../tests/engine_common/mod.rs"]
mod engine_common;

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use dataplane::requester::{CallId, LinkState, Requester};
use dataplane::responder::Responder;
use dataplane::verbs::{VerbsConfig, VerbsFabric};
use engine_common::*;
use proto::negotiate::VersionRange;

const CREDITS: u32 = 8;
const MAX_CONNS: u32 = 2;
const DEADLINE: Duration = Duration::from_secs(120);

/// The calls: every chunk pattern, three rounds with different sizes.
fn workload() -> Vec<(&'static str, Expect)> {
    let mut w = Vec::new();
    for round in 0..3u32 {
        let s = round * 101;
        let e = |proc_, arg, big_n, b| Expect { proc_, arg, big_n, b };
        w.push(("NULL", e(P_NULL, vec![], 0, 0)));
        w.push((
            "ECHO inline",
            e(P_ECHO, pattern(s + 1, 100 + 37 * round as usize), 0, 0),
        ));
        w.push((
            "ECHO Read+Write chunk",
            e(P_ECHO, pattern(s + 2, 20_000 + 1001 * round as usize), 0, 0),
        ));
        w.push((
            "ECHO odd length",
            e(P_ECHO, pattern(s + 3, 5_003 + round as usize), 0, 0),
        ));
        w.push(("BIG Reply chunk", e(P_BIG, vec![], 6_000 + 333 * round, 0)));
        w.push(("BIG inline reply", e(P_BIG, vec![], 300 + round, 0)));
        w.push((
            "SUM Position-Zero",
            e(P_SUM, pattern(s + 4, 9_000 + 7 * round as usize), 0, 0),
        ));
        w.push((
            "RDLONG Read list+Reply chunk",
            e(P_RDLONG, pattern(s + 5, 4_000 + round as usize), 2_500 + round, 0),
        ));
        w.push(("TWO Write chunks", e(P_TWO, vec![], 3_000 + round, 1_500 + round)));
        w.push((
            "WRLONG Write list+Reply chunk",
            e(P_WRLONG, vec![], 2_000 + round, 3_000 + round),
        ));
    }
    w
}

fn fabric() -> Result<VerbsFabric, String> {
    VerbsFabric::new(VerbsConfig::default()).map_err(|e| e.to_string())
}

/// The versions a requester offers to get RPC-over-RDMA version
/// `want_vers`, and a responder (both versions) listening at `addr`.
fn responder_for(
    p: &Pools,
    addr: &str,
    want_vers: u32,
) -> Result<(VersionRange, Responder<'static, VerbsFabric, TestService>), String> {
    let client_versions = if want_vers == 1 {
        VersionRange::only(1)
    } else {
        Ok(VersionRange::ALL)
    }
    .map_err(|e| e.to_string())?;
    let srv = Responder::new(
        responder_cfg(p, VersionRange::ALL, CREDITS, MAX_CONNS),
        fabric()?,
        TestService::default(),
        p.pool,
        &p.regions,
        0,
        Some(addr),
    )
    .map_err(|e| format!("responder: {e}"))?;
    Ok((client_versions, srv))
}

/// What the devices said of the last failed work request on either side
/// (status and vendor error), to append to a failure.
fn wc_errors<S: dataplane::service::Service>(
    cli: &mut Requester<'_, VerbsFabric>,
    srv: &mut Responder<'_, VerbsFabric, S>,
) -> String {
    format!(
        "; requester's last error completion: {:?}; responder's: {:?}",
        cli.fabric().last_wc_error().map(|e| e.to_string()),
        srv.fabric().last_wc_error().map(|e| e.to_string())
    )
}

fn run_version(p: &Pools, addr: &str, want_vers: u32) -> Result<(), String> {
    let t0 = Instant::now();
    let (client_versions, mut srv) = responder_for(p, addr, want_vers)?;
    let mut cli = Requester::new(
        requester_cfg(p, client_versions, CREDITS),
        fabric()?,
        p.pool,
        &p.regions,
        1,
    )
    .map_err(|e| format!("requester: {e}"))?;
    println!(
        "v{want_vers}: responder listening on {addr} ({})",
        srv.fabric().device_name()
    );
    cli.connect(addr).map_err(|e| format!("connect: {e}"))?;

    let work = workload();
    let mut next = 0usize;
    let mut done = 0usize;
    let mut inflight: Vec<(CallId, usize)> = Vec::new();
    while done < work.len() {
        if t0.elapsed() > DEADLINE {
            return Err(format!(
                "stuck: {done}/{} done, link {:?}, {:?}",
                work.len(),
                cli.link(),
                cli.stats()
            ));
        }
        let busy = srv.poll() + cli.poll();
        while next < work.len() && cli.can_submit() {
            let id = submit(&mut cli, &work[next].1)?;
            inflight.push((id, next));
            next += 1;
        }
        while let Some(c) = cli.poll_completion() {
            let pos = inflight
                .iter()
                .position(|(id, _)| *id == c.id)
                .ok_or("unknown completion")?;
            let (id, k) = inflight.swap_remove(pos);
            let (name, e) = &work[k];
            outcome_ok(c.outcome)
                .map_err(|err| format!("call {k} ({name}): {err}{}", wc_errors(&mut cli, &mut srv)))?;
            check_reply(&cli, id, e).map_err(|err| format!("call {k} ({name}): {err}"))?;
            cli.release(id);
            done += 1;
            println!("  v{want_vers} call {k:2} {name:<30} ok");
        }
        if cli.link() == LinkState::Failed {
            return Err(format!(
                "link failed after {done} calls: {:?}{}",
                cli.stats(),
                wc_errors(&mut cli, &mut srv)
            ));
        }
        if busy == 0 {
            std::thread::sleep(Duration::from_micros(50));
        }
    }
    let vers = cli.version();
    if vers != want_vers {
        return Err(format!("negotiated v{vers}, wanted v{want_vers}"));
    }
    let s = srv.stats();
    let c = cli.stats();
    println!("  v{want_vers} requester {c:?}");
    println!("  v{want_vers} responder {s:?}");
    let n = work.len() as u64;
    let checks = [
        (s.calls == n && s.replies == n, "responder answered every call"),
        (c.short_calls > 0, "short (inline) calls"),
        (c.chunked_calls > 0, "calls with Read chunks"),
        (c.long_calls > 0, "Long calls (Position-Zero Read chunk)"),
        (s.rdma_reads > 0, "RDMA Reads by the responder"),
        (s.replies_inline > 0, "inline replies"),
        (s.replies_write_chunks > 0, "replies through Write chunks"),
        (s.replies_long > 0, "Long replies (Reply chunk)"),
        (s.replies_write_and_long > 0, "Write chunks + Reply chunk"),
        (s.wc_errors == 0 && c.wc_errors == 0, "no completion errors"),
    ];
    for (ok, what) in checks {
        if !ok {
            return Err(format!("v{want_vers}: not seen: {what}"));
        }
    }

    // Teardown: every buffer must come back.
    let t = Instant::now();
    let mut left = usize::MAX;
    while t.elapsed() < Duration::from_secs(30) {
        left = cli.shutdown(1000);
        srv.poll();
        if left == 0 && cli.recvs_posted() == 0 {
            break;
        }
    }
    let mut held = srv.shutdown(1000);
    while t.elapsed() < Duration::from_secs(60) && held != Default::default() {
        held = srv.shutdown(1000);
        cli.poll();
    }
    println!(
        "  v{want_vers} teardown {} ms: requester calls held {left}, receives posted {}, responder {held:?}",
        t.elapsed().as_millis(),
        cli.recvs_posted()
    );
    if left != 0 || cli.recvs_posted() != 0 || held != Default::default() {
        return Err(format!("v{want_vers}: buffers held after teardown"));
    }
    drop(cli);
    drop(srv);
    for class in [p.recv, p.send, p.data] {
        let st = p.pool.stats(class).ok_or("stats")?;
        if st.in_use != 0 {
            return Err(format!(
                "v{want_vers}: class {class:?}: {} buffers still in use",
                st.in_use
            ));
        }
    }
    println!(
        "v{want_vers}: {} calls checked, every buffer back ({} ms)",
        work.len(),
        t0.elapsed().as_millis()
    );
    Ok(())
}

/// Several connections writing at once: `MAX_CONNS` requesters, each with
/// all its credits in use, send ECHO Calls whose argument goes in a Read
/// chunk (and comes back in a Write chunk) and SUM Calls through a
/// Position-Zero Read chunk, more of them than the responder has data
/// buffers for at once. Every Call must be answered, byte for byte, and the
/// responder's totals must account for each (calls = replies, nothing
/// unanswered).
fn run_writers(p: &Pools, addr: &str, want_vers: u32) -> Result<(), String> {
    const PER_CONN: usize = 48;
    let t0 = Instant::now();
    let (client_versions, mut srv) = responder_for(p, addr, want_vers)?;
    let mut clis = Vec::new();
    for k in 0..MAX_CONNS as usize {
        let mut cli = Requester::new(
            requester_cfg(p, client_versions, CREDITS),
            fabric()?,
            p.pool,
            &p.regions,
            1 + k,
        )
        .map_err(|e| format!("requester {k}: {e}"))?;
        cli.connect(addr).map_err(|e| format!("connect {k}: {e}"))?;
        clis.push(cli);
    }
    let work: Vec<Expect> = (0..PER_CONN)
        .map(|i| {
            let (proc_, n) = if i % 3 == 2 {
                (P_SUM, 9_000 + 13 * i)
            } else {
                (P_ECHO, 8_000 + 811 * i)
            };
            Expect {
                proc_,
                arg: pattern(want_vers * 1000 + i as u32, n),
                big_n: 0,
                b: 0,
            }
        })
        .collect();
    let mut next = vec![0usize; clis.len()];
    let mut done = vec![0usize; clis.len()];
    let mut inflight: Vec<Vec<(CallId, usize)>> = vec![Vec::new(); clis.len()];
    while done.iter().any(|&d| d < work.len()) {
        if t0.elapsed() > DEADLINE {
            return Err(format!(
                "v{want_vers} writers stuck: done {done:?} of {} each; responder {:?}, live {:?}",
                work.len(),
                srv.stats(),
                srv.live_by_state()
            ));
        }
        let mut busy = srv.poll();
        for (k, cli) in clis.iter_mut().enumerate() {
            busy += cli.poll();
            while next[k] < work.len() && cli.can_submit() {
                let id = submit(cli, &work[next[k]])?;
                inflight[k].push((id, next[k]));
                next[k] += 1;
            }
            while let Some(c) = cli.poll_completion() {
                let pos = inflight[k]
                    .iter()
                    .position(|(id, _)| *id == c.id)
                    .ok_or("unknown completion")?;
                let (id, i) = inflight[k].swap_remove(pos);
                outcome_ok(c.outcome)
                    .map_err(|err| format!("writer {k} call {i}: {err}{}", wc_errors(cli, &mut srv)))?;
                check_reply(cli, id, &work[i]).map_err(|err| format!("writer {k} call {i}: {err}"))?;
                cli.release(id);
                done[k] += 1;
            }
            if cli.link() == LinkState::Failed {
                return Err(format!("writer {k}: link failed after {} calls", done[k]));
            }
        }
        if busy == 0 {
            std::thread::sleep(Duration::from_micros(50));
        }
    }
    let s = srv.stats();
    println!("  v{want_vers} writers: responder {s:?}");
    let n = (work.len() * clis.len()) as u64;
    if s.calls != n || s.replies != n || s.unanswered() != 0 || s.unaccounted(srv.calls_awaiting_answer()) != 0 {
        return Err(format!("v{want_vers} writers: not every Call answered: {s:?}"));
    }
    if s.wc_errors != 0 {
        return Err(format!("v{want_vers} writers: completion errors: {s:?}"));
    }
    let t = Instant::now();
    let mut left = 0;
    for cli in clis.iter_mut() {
        while t.elapsed() < Duration::from_secs(30) {
            left = cli.shutdown(1000);
            srv.poll();
            if left == 0 && cli.recvs_posted() == 0 {
                break;
            }
        }
    }
    let mut held = srv.shutdown(1000);
    while t.elapsed() < Duration::from_secs(60) && held != Default::default() {
        held = srv.shutdown(1000);
        for cli in clis.iter_mut() {
            cli.poll();
        }
    }
    if left != 0 || held != Default::default() {
        return Err(format!(
            "v{want_vers} writers: buffers held after teardown: {left}, {held:?}"
        ));
    }
    println!(
        "v{want_vers}: {} connections, {n} Calls with Read chunks at once, every one answered ({} ms, data-buffer waits {})",
        clis.len(),
        t0.elapsed().as_millis(),
        s.chunk_buf_waits
    );
    Ok(())
}

fn main() -> ExitCode {
    let addr = std::env::args().nth(1).unwrap_or_else(|| {
        let ip = std::env::var("VMLAB_IP").unwrap_or_else(|_| "10.0.2.15".into());
        format!("{ip}:7480")
    });
    let Some(base) = dataplane::verbs::addr::parse(&addr) else {
        println!("verbs_engine: FAIL: bad address {addr:?}");
        return ExitCode::FAILURE;
    };
    let t0 = Instant::now();
    let p = pools(1024, CREDITS, MAX_CONNS);
    for v in [1u32, 2] {
        let a = SocketAddr::new(base.ip(), base.port().wrapping_add(v as u16 - 1)).to_string();
        if let Err(e) = run_version(&p, &a, v) {
            println!("verbs_engine: FAIL: {e}");
            return ExitCode::FAILURE;
        }
        let a = SocketAddr::new(base.ip(), base.port().wrapping_add(v as u16 + 1)).to_string();
        if let Err(e) = run_writers(&p, &a, v) {
            println!("verbs_engine: FAIL: {e}");
            return ExitCode::FAILURE;
        }
    }
    println!("verbs_engine: PASS ({} ms)", t0.elapsed().as_millis());
    ExitCode::SUCCESS
}
