//! perf's NFSv4.1 delegation holder ([`perf::deleg::Holder`]) against the
//! in-process target on shm (issue 23): the holder binds its backchannel
//! with CREATE_SESSION, answers the CB_NULL probe, opens a file for
//! reading and holds a read delegation; another client's OPEN for writing
//! is NFS4ERR_DELAY and recalls it; the holder answers CB_RECALL and sends
//! DELEGRETURN, and the other client's retry opens. Round after round, the
//! time from the conflicting OPEN to the holder's DELEGRETURN is collected
//! (printed, not asserted beyond a bound: `RPCRDMA_RECALL_ROUNDS` sets the
//! rounds for a measurement run). A holder that never answers loses its
//! delegation to the revocation timer a lease after the recall.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use perf::deleg::{Holder, HOLDER_BACKWARD_CREDITS};
use perf::engine::{self, Pools, Session, ShmMaker};
use perf::nfs::Cred;
use perf::PerfError;
use proto::nfs4::*;
use rpcrdma_apps::server::Target;

mod target_common;
use target_common::*;

fn holder<'p>(pools: &'p Pools, sock: &str, slot: usize, v: u32, owner: &str) -> Holder<'p, dataplane::shm::ShmFabric> {
    let timeout = Duration::from_secs(20);
    let req = engine::connect_with(
        &ShmMaker::default(),
        pools,
        slot,
        sock,
        v,
        engine::SESSION_DEPTH,
        true,
        timeout,
        HOLDER_BACKWARD_CREDITS,
    )
    .expect("connect");
    Holder::new(Session { req, timeout }, Cred::sys("perf", 0, 0).unwrap(), owner).expect("session with a backchannel")
}

fn pools() -> Pools {
    Pools::new(&[engine::SESSION_DEPTH; 2], Pools::data_bytes_for(4096)).unwrap()
}

/// The conflicting writer's OPEN: for reading and writing, and no
/// delegation (it has a backchannel too, and a write delegation it kept
/// would make the holder's next OPEN wait for its recall).
const WRITER_ACCESS: u32 = OPEN4_SHARE_ACCESS_BOTH | OPEN4_SHARE_ACCESS_WANT_NO_DELEG;

/// OPEN for writing until it is not NFS4ERR_DELAY.
fn open_for_writing<F: dataplane::Fabric>(
    c: &mut Holder<'_, F>,
    name: &str,
) -> (Instant, proto::nfs4::Stateid, Vec<u8>) {
    let t0 = Instant::now();
    let mut delayed = 0;
    loop {
        match c.open("/export", name, WRITER_ACCESS, false) {
            Ok(o) => {
                assert!(delayed > 0, "the first conflicting OPEN was not delayed");
                return (t0, o.stateid, o.fh);
            }
            Err(PerfError::Nfs {
                status: NFS4ERR_DELAY, ..
            }) => {
                delayed += 1;
                assert!(t0.elapsed() < Duration::from_secs(30), "still delayed");
                std::thread::sleep(Duration::from_micros(200));
            }
            Err(e) => panic!("OPEN for writing: {e}"),
        }
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

/// The holder (its own thread) answers every recall; the conflicting
/// client (this thread) opens for writing, is delayed, retries until the
/// delegation is back, closes, and lets the holder open again.
#[test]
fn backchannel_perf_answers_recalls() {
    let rounds: usize = std::env::var("RPCRDMA_RECALL_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    let dir = tmpdir("bc-answer");
    let (mut cfg, _) = target_config(&dir);
    // Recalled again and again on one file: no cool-down before a regrant.
    cfg.nfs4.regrant_after_recall_ms = 0;
    let t = Target::start(cfg).expect("target starts");
    let sock = dir.join("fabric.sock").to_str().unwrap().to_string();
    for v in [1, 2] {
        let name = format!("deleg-v{v}");
        let (held_tx, held_rx) = mpsc::channel::<()>();
        let (go_tx, go_rx) = mpsc::channel::<Instant>();
        let lat = std::thread::scope(|s| {
            let sock2 = sock.clone();
            let name2 = name.clone();
            let h = s.spawn(move || {
                let p = pools();
                let mut h = holder(&p, &sock2, 0, v, &format!("perf-holder-v{v}"));
                let mut lat = Vec::with_capacity(rounds);
                let mut create = true;
                for _ in 0..rounds {
                    let o = h
                        .open("/export", &name2, OPEN4_SHARE_ACCESS_READ, create)
                        .expect("OPEN");
                    create = false;
                    let (kind, ds) = o.deleg.expect("a read delegation");
                    assert_eq!(kind, OPEN_DELEGATE_READ);
                    held_tx.send(()).unwrap();
                    let (ok, r) = h
                        .serve_until(Duration::from_secs(30), |r, _| !r.is_empty())
                        .expect("serve");
                    assert!(ok, "no recall");
                    assert_eq!((r.len(), r[0].stateid, r[0].status), (1, ds, NFS4_OK));
                    assert_eq!(h.fh_stateid_op(&o.fh, OP_CLOSE, &o.stateid).unwrap(), NFS4_OK);
                    let t0 = go_rx.recv().unwrap();
                    lat.push(r[0].returned_at.saturating_duration_since(t0));
                }
                assert_eq!(
                    (h.stats.recalls, h.stats.returned, h.stats.ignored, h.stats.malformed),
                    (rounds as u64, rounds as u64, 0, 0)
                );
                assert_eq!(h.status_flags().unwrap(), 0);
                h.close();
                lat
            });
            let p = pools();
            let mut c = holder(&p, &sock, 1, v, &format!("perf-writer-v{v}"));
            for _ in 0..rounds {
                held_rx.recv().unwrap();
                let (t0, sid, fh) = open_for_writing(&mut c, &name);
                assert_eq!(c.fh_stateid_op(&fh, OP_CLOSE, &sid).unwrap(), NFS4_OK);
                go_tx.send(t0).unwrap();
            }
            let lat = h.join().unwrap();
            c.close();
            lat
        });
        let mut sorted = lat.clone();
        sorted.sort();
        let (p50, p99) = (percentile(&sorted, 0.5), percentile(&sorted, 0.99));
        eprintln!(
            "v{v}: conflicting OPEN to DELEGRETURN over {} recalls: p50 {:?}, p99 {:?}, max {:?}",
            sorted.len(),
            p50,
            p99,
            sorted[sorted.len() - 1]
        );
        assert!(p50 < Duration::from_secs(5), "v{v}: p50 {p50:?}");
    }
    t.shutdown().expect("clean shutdown");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A holder that never answers: the recall stays unanswered, the
/// conflicting client is delayed until the target's revocation timer
/// revokes the delegation a lease after the recall, then opens; the
/// holder's SEQUENCE says RECALLABLE_STATE_REVOKED and its DELEGRETURN is
/// NFS4ERR_DELEG_REVOKED.
#[test]
fn backchannel_perf_ignoring_recalls_is_revoked() {
    let dir = tmpdir("bc-ignore");
    let (mut cfg, _) = target_config(&dir);
    // Recalled again and again on one file: no cool-down before a regrant.
    cfg.nfs4.regrant_after_recall_ms = 0;
    let t = Target::start(cfg).expect("target starts");
    let lease = Duration::from_millis(400);
    t.shared().v4().set_lease(lease);
    let sock = dir.join("fabric.sock").to_str().unwrap().to_string();
    let p = pools();
    let mut h = holder(&p, &sock, 0, 1, "perf-deaf-holder");
    h.ignore_recalls = true;
    let mut c = holder(&p, &sock, 1, 1, "perf-writer");
    let o = h.open("/export", "deaf", OPEN4_SHARE_ACCESS_READ, true).expect("OPEN");
    let (_, ds) = o.deleg.expect("a read delegation");
    let t0 = Instant::now();
    match c.open("/export", "deaf", WRITER_ACCESS, false) {
        Err(PerfError::Nfs {
            status: NFS4ERR_DELAY, ..
        }) => {}
        r => panic!("conflicting OPEN: {r:?}"),
    }
    let (ok, _) = h.serve_until(Duration::from_secs(10), |_, s| s.ignored == 1).unwrap();
    assert!(ok, "no recall to ignore");
    // The holder renews its lease meanwhile; the writer retries.
    let opened = loop {
        h.serve().unwrap();
        assert_ne!(
            h.status_flags().unwrap() & SEQ4_STATUS_CB_PATH_DOWN,
            SEQ4_STATUS_CB_PATH_DOWN
        );
        match c.open("/export", "deaf", WRITER_ACCESS, false) {
            Ok(w) => break w,
            Err(PerfError::Nfs {
                status: NFS4ERR_DELAY, ..
            }) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => panic!("{e}"),
        }
        assert!(t0.elapsed() < 10 * lease, "never revoked");
    };
    let waited = t0.elapsed();
    assert!(waited >= lease, "opened after {waited:?}, before the lease");
    assert_eq!(h.status_flags().unwrap(), SEQ4_STATUS_RECALLABLE_STATE_REVOKED);
    assert_eq!(
        h.fh_stateid_op(&o.fh, OP_DELEGRETURN, &ds).unwrap(),
        NFS4ERR_DELEG_REVOKED
    );
    assert_eq!((h.stats.recalls, h.stats.returned), (1, 0));
    eprintln!("a recall never answered: the writer opened {waited:?} after its first OPEN (lease {lease:?})");
    c.fh_stateid_op(&opened.fh, OP_CLOSE, &opened.stateid).unwrap();
    h.close();
    c.close();
    t.shutdown().expect("clean shutdown");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `perf deleg` ([`perf::deleg::hold`]) on its own thread holds the
/// delegation; a writer's OPEN recalls it, the holder returns it and takes
/// a new one; twice; the report counts the recalls, each answered.
#[test]
fn backchannel_perf_hold_answers_recalls() {
    let dir = tmpdir("bc-hold");
    let (mut cfg, _) = target_config(&dir);
    // Recalled again and again on one file: no cool-down before a regrant.
    cfg.nfs4.regrant_after_recall_ms = 0;
    let t = Target::start(cfg).expect("target starts");
    let sock = dir.join("fabric.sock").to_str().unwrap().to_string();
    let hc = perf::deleg::HoldConfig {
        target: sock.clone(),
        version: 2,
        cred: Cred::sys("perf", 0, 0).unwrap(),
        export: "/export".into(),
        file: "held".into(),
        create: true,
        duration: Duration::from_secs(3),
        timeout: Duration::from_secs(20),
        ignore_recalls: false,
    };
    let v4 = t.shared().v4();
    let rep = std::thread::scope(|s| {
        let h = s.spawn(|| perf::deleg::hold(&ShmMaker::default(), &hc).expect("hold"));
        let p = pools();
        let mut c = holder(&p, &sock, 1, 2, "perf-hold-writer");
        for _ in 0..2 {
            let t0 = Instant::now();
            while v4.delegations() == 0 {
                assert!(t0.elapsed() < Duration::from_secs(10), "no delegation held");
                std::thread::sleep(Duration::from_millis(1));
            }
            let (_, sid, fh) = open_for_writing(&mut c, "held");
            assert_eq!(c.fh_stateid_op(&fh, OP_CLOSE, &sid).unwrap(), NFS4_OK);
        }
        c.close();
        h.join().unwrap()
    });
    // At least the two conflicts recalled; perf may take a new delegation
    // between a return and the writer's retry (the target does not hold
    // back delegations on a file recently recalled), which is recalled too.
    assert!(rep.granted >= 2, "{rep:?}");
    assert!(rep.stats.recalls >= 2, "{rep:?}");
    assert_eq!(
        (rep.stats.returned, rep.stats.ignored),
        (rep.stats.recalls, 0),
        "{rep:?}"
    );
    assert_eq!(rep.recall_to_return.len() as u64, rep.stats.recalls);
    assert_eq!(rep.final_flags, 0);
    t.shutdown().expect("clean shutdown");
    let _ = std::fs::remove_dir_all(&dir);
}
