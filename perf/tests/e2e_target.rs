//! End to end against the real target (`rpcrdma_apps::server::Target`,
//! started in-process on the shm fabric with a RAM backend, MOUNT over TCP on
//! a free port): NULL, and READ / WRITE / mixed with `--verify` at 4 KiB and
//! 1 MiB, versions 1 and 2, with and without DDP. Figures are not asserted;
//! errors, counts and the read-back check are.

use perf::engine::{OpKind, ShmMaker};
use perf::run::{self, Auth, Mode};
use rpcrdma_apps::server::Target;

mod target_common;
use target_common::*;

#[test]
fn null_read_write_mixed_against_the_target() {
    let dir = tmpdir("rw");
    let (cfg, mount_port) = target_config(&dir);
    let t = Target::start(cfg).expect("target starts");
    let sock = dir.join("fabric.sock");
    for version in [1, 2] {
        let mut c = run_cfg(&sock, mount_port, Mode::Rpc(run::NULL_DEFAULT), version, 0);
        c.nfs = None;
        c.auth = Auth::None;
        c.count = Some(200);
        let out = run::run_with(&ShmMaker::default(), &c).expect("null");
        assert_eq!(
            (out.result.errors, out.result.version),
            (0, version),
            "{:?}",
            out.result
        );
        assert_eq!(Some(out.result.ops), c.count);
    }
    for (kind, version, size, ddp) in [
        (OpKind::Write, 1, 4096, true),
        (OpKind::Read, 1, 4096, true),
        (OpKind::Write, 2, MIB as u32, true),
        (OpKind::Read, 2, MIB as u32, true),
        (OpKind::Mixed { read_pct: 70 }, 2, 4096, true),
        (OpKind::Write, 1, 65536, false),
        (OpKind::Read, 2, 65536, false),
    ] {
        let mut c = run_cfg(&sock, mount_port, Mode::Rpc(kind), version, size);
        c.ddp = ddp;
        // A count, not a time: a loaded host once finished no 1 MiB WRITE
        // inside the one-second window after the warm-up.
        c.count = Some(if size >= MIB as u32 { 16 } else { 200 });
        let out = run::run_with(&ShmMaker::default(), &c).expect("run");
        let r = &out.result;
        let what = format!("{kind:?} v{version} {size} ddp={ddp}: {r:?} {:?}", out.transport);
        assert_eq!(r.errors, 0, "{what}");
        assert_eq!(Some(r.ops), c.count, "{what}");
        assert_eq!(out.transport.transport_errors + out.transport.bad_replies, 0, "{what}");
        if kind == OpKind::Write {
            assert!(out.verified_blocks.unwrap_or(0) > 0, "{what}");
        }
        if kind == OpKind::Write && ddp {
            assert!(out.transport.chunked_calls > 0, "{what}");
        }
    }
    t.shutdown().expect("clean shutdown");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--nfs 4.1` against the target: the NULL COMPOUND (SEQUENCE only), and
/// READ / WRITE / mixed with `--verify` at 4 KiB and 1 MiB on both
/// RPC-over-RDMA versions: a session per connection, SEQUENCE + PUTFH +
/// READ/WRITE per Call, no errors, WRITE data in Read chunks, and the
/// target counted the COMPOUNDs.
#[test]
fn nfs41_null_read_write_mixed_against_the_target() {
    let dir = tmpdir("v41");
    let (cfg, mount_port) = target_config(&dir);
    let t = Target::start(cfg).expect("target starts");
    let sock = dir.join("fabric.sock");
    for version in [1, 2] {
        let mut c = run_cfg(&sock, mount_port, Mode::Rpc(run::NULL_DEFAULT), version, 0);
        c.nfs = None;
        c.nfs41 = true;
        c.count = Some(200);
        let out = run::run_with(&ShmMaker::default(), &c).expect("null COMPOUND");
        assert_eq!(out.result.errors, 0, "{:?}", out.result);
        assert_eq!(Some(out.result.ops), c.count);
    }
    for (kind, version, size) in [
        (OpKind::Write, 1, 4096),
        (OpKind::Read, 1, 4096),
        (OpKind::Write, 2, MIB as u32),
        (OpKind::Read, 2, MIB as u32),
        (OpKind::Mixed { read_pct: 70 }, 2, 4096),
    ] {
        let mut c = run_cfg(&sock, mount_port, Mode::Rpc(kind), version, size);
        c.nfs41 = true;
        c.count = Some(if size >= MIB as u32 { 16 } else { 200 });
        if let Some(n) = c.nfs.as_mut() {
            n.file = format!("v41-{size}.dat");
        }
        let out = run::run_with(&ShmMaker::default(), &c).expect("run");
        let r = &out.result;
        let what = format!("v4.1 {kind:?} v{version} {size}: {r:?} {:?}", out.transport);
        assert_eq!(r.errors, 0, "{what}");
        assert_eq!(Some(r.ops), c.count, "{what}");
        assert_eq!(out.transport.transport_errors + out.transport.bad_replies, 0, "{what}");
        if kind == OpKind::Write {
            assert!(out.verified_blocks.unwrap_or(0) > 0, "{what}");
            assert!(out.transport.chunked_calls > 0, "{what}");
        }
    }
    t.shutdown().expect("clean shutdown");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--nfs 4.1 --transport tcp` against the target's NFS TCP port: the
/// session set-up (EXCHANGE_ID, CREATE_SESSION per connection, OPEN) and
/// NULL (SEQUENCE alone), READ, WRITE (read back with `--verify`) and
/// mixed COMPOUNDs over record-marked TCP, qd 1 and 4, with no error. Before,
/// `--nfs 4.1` refused `--transport tcp`.
#[test]
fn nfs41_null_read_write_mixed_over_tcp_against_the_target() {
    use perf::run::FabricKind;
    let dir = tmpdir("v41tcp");
    let (cfg, mount_port) = target_config(&dir);
    let t = Target::start(cfg).expect("target starts");
    let nfs = t.tcp_addrs()[0];
    let sock = dir.join("fabric.sock");
    let tcp_cfg = |mode, size, qd| {
        let mut c = run_cfg(&sock, mount_port, mode, 1, size);
        c.fabric = FabricKind::Tcp;
        c.target = nfs.to_string();
        c.qd = qd;
        c.nfs41 = true;
        c.count = Some(if size >= MIB as u32 { 16 } else { 200 });
        c
    };
    let mut c = tcp_cfg(Mode::Rpc(run::NULL_DEFAULT), 0, 4);
    c.nfs = None;
    let out = run::run(&c).expect("null COMPOUND over tcp");
    assert_eq!(
        (out.result.errors, out.result.ops, out.result.fabric.as_str()),
        (0, 200, "tcp"),
        "{:?}",
        out.result
    );
    for (kind, size, qd) in [
        (OpKind::Write, 4096, 4),
        (OpKind::Read, 4096, 1),
        (OpKind::Write, MIB as u32, 4),
        (OpKind::Read, MIB as u32, 4),
        (OpKind::Mixed { read_pct: 50 }, 65536, 4),
    ] {
        let mut c = tcp_cfg(Mode::Rpc(kind), size, qd);
        if let Some(n) = c.nfs.as_mut() {
            n.file = format!("v41tcp-{size}.dat");
        }
        let out = run::run(&c).expect("v4.1 run over tcp");
        let r = &out.result;
        let what = format!("v4.1 tcp {kind:?} {size} qd{qd}: {r:?}");
        assert_eq!(r.errors, 0, "{what}");
        assert_eq!(Some(r.ops), c.count, "{what}");
        if kind == OpKind::Write {
            assert!(out.verified_blocks.unwrap_or(0) > 0, "{what}");
        }
    }
    let v4 = t.tcp_counts();
    assert!(v4.calls > 0 && v4.bad_records == 0, "{v4:?}");
    t.shutdown().expect("clean shutdown");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--transport tcp` against the same target's NFS TCP port: NULL, and
/// READ / WRITE / mixed with `--verify` at 4 KiB and 1 MiB, qd 1 and 4, with
/// the CPU of both sides measured (the target is this process).
#[test]
fn tcp_transport_against_the_target() {
    use perf::run::FabricKind;
    let dir = tmpdir("tcp");
    let (cfg, mount_port) = target_config(&dir);
    let t = Target::start(cfg).expect("target starts");
    let nfs = t.tcp_addrs()[0];
    let sock = dir.join("fabric.sock");
    // Count mode: on a loaded machine (other tests, guests) a debug build's
    // 1 MiB Calls may not finish one within a measured second.
    let tcp_cfg = |mode, size, qd| {
        let mut c = run_cfg(&sock, mount_port, mode, 1, size);
        c.fabric = FabricKind::Tcp;
        c.target = nfs.to_string();
        c.qd = qd;
        c.target_pid = Some(std::process::id());
        c.count = Some(if size >= MIB as u32 { 16 } else { 200 });
        c
    };
    let mut c = tcp_cfg(Mode::Rpc(run::NULL_DEFAULT), 0, 4);
    c.nfs = None;
    c.auth = Auth::None;
    let out = run::run(&c).expect("null over tcp");
    assert_eq!(
        (out.result.errors, out.result.fabric.as_str()),
        (0, "tcp"),
        "{:?}",
        out.result
    );
    assert_eq!(out.result.ops, 200);
    let cpu = out.result.cpu.as_ref().expect("cpu measured");
    assert!(cpu.client_us_per_op > 0.0 && cpu.target_us_per_op.is_some(), "{cpu:?}");
    for (kind, size, qd) in [
        (OpKind::Write, 4096, 4),
        (OpKind::Read, 4096, 1),
        (OpKind::Write, MIB as u32, 4),
        (OpKind::Read, MIB as u32, 4),
        (OpKind::Mixed { read_pct: 50 }, 65536, 4),
    ] {
        let c = tcp_cfg(Mode::Rpc(kind), size, qd);
        let out = run::run(&c).expect("run over tcp");
        let r = &out.result;
        let what = format!("{kind:?} {size} qd{qd}: {r:?}");
        assert_eq!(r.errors, 0, "{what}");
        assert_eq!(Some(r.ops), c.count, "{what}");
        if kind == OpKind::Write {
            assert!(out.verified_blocks.unwrap_or(0) > 0, "{what}");
        }
    }
    // Written over TCP, read back over the fabric: one backend, two paths.
    let mut c = run_cfg(&sock, mount_port, Mode::Rpc(OpKind::Read), 1, 4096);
    c.verify = false;
    c.verify_only = true;
    let out = run::run_with(&ShmMaker::default(), &c).expect("read back over shm");
    assert_eq!(out.result.errors, 0, "{:?}", out.result);
    let counts = t.tcp_counts();
    assert!(counts.calls > 0 && counts.bad_records == 0, "{counts:?}");
    t.shutdown().expect("clean shutdown");
    let _ = std::fs::remove_dir_all(&dir);
}

/// What held perf back: asking for more Calls per connection (32) than the
/// target grants (its `credits.max_per_connection`, 16 here) leaves about
/// half of the offered load waiting for credits, and the report says so;
/// within the grant nothing is held back for credits.
#[test]
fn held_back_by_the_credit_grant_is_reported() {
    let dir = tmpdir("held");
    let (cfg, mount_port) = target_config(&dir);
    let granted = cfg.credits.max_per_connection;
    let t = Target::start(cfg).expect("target starts");
    let sock = dir.join("fabric.sock");
    let mut held = Vec::new();
    for qd in [2 * granted, granted] {
        let mut c = run_cfg(&sock, mount_port, Mode::Rpc(run::NULL_DEFAULT), 1, 0);
        c.nfs = None;
        c.auth = Auth::None;
        c.verify = false;
        c.qd = qd;
        c.conns = 1;
        let out = run::run_with(&ShmMaker::default(), &c).expect("null");
        assert_eq!(out.result.errors, 0, "{:?}", out.result);
        let h = out
            .result
            .held_back_pct
            .clone()
            .expect("a closed-loop run reports what held it back");
        // The JSON keeps it.
        let back = perf::stats::RunResult::from_json(&out.result.to_json()).unwrap();
        assert_eq!(back.held_back_pct.as_ref(), Some(&h));
        held.push((qd, h));
    }
    let (over, within) = (&held[0].1, &held[1].1);
    assert!(
        (40.0..=55.0).contains(&over.credits),
        "qd {} against {granted} credits: {over:?}",
        held[0].0
    );
    assert!(within.credits < 1.0, "qd {granted}: {within:?}");
    t.shutdown().expect("clean shutdown");
    let _ = std::fs::remove_dir_all(&dir);
}
