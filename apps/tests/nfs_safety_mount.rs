//! Issue 21 items 9 to 11: a plain mount works.
//!
//! - rpcbind (item 9): the responder's answers as byte vectors written from
//!   RFC 1833's XDR (PMAP v2 section 3, RPCB v3/v4 section 2), the same over
//!   UDP and TCP sockets, registration with a host rpcbind (a fake one on a
//!   Unix socket that records what it is sent), and the whole target
//!   answering PMAP GETPORT for MOUNT so a client needs no `mountport=`.
//! - subdirectory mounts and several exports per backend (item 10).
//! - the `nvme` backend's FSINFO, FSSTAT and truncate-to-size (item 11).

mod nfs4_common;
mod nfs_common;

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream, UdpSocket};
use std::os::unix::net::UnixListener;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nfs_common::*;
use rpcrdma_apps::config::{Config, RpcbindConfig, RpcbindMode};
use rpcrdma_apps::server::rpcbind::wire::{self, Mapping, Netid};
use rpcrdma_apps::server::rpcbind::{Rpcbind, RpcbindState};
use rpcrdma_apps::server::Target;

fn hex(s: &str) -> Vec<u8> {
    let s: String = s.split_whitespace().collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// The table of a gateway at 10.0.2.15 whose MOUNT listens on all
/// addresses.
fn table() -> Vec<Mapping> {
    let at = |ip: [u8; 4]| IpAddr::from(ip);
    vec![
        Mapping {
            prog: 100_003,
            vers: 3,
            netid: Netid::Tcp,
            ip: at([10, 0, 2, 15]),
            port: 2049,
        },
        Mapping {
            prog: 100_003,
            vers: 3,
            netid: Netid::Rdma,
            ip: at([10, 0, 2, 15]),
            port: 20049,
        },
        Mapping {
            prog: 100_005,
            vers: 1,
            netid: Netid::Tcp,
            ip: at([0, 0, 0, 0]),
            port: 20048,
        },
        Mapping {
            prog: 100_005,
            vers: 3,
            netid: Netid::Tcp,
            ip: at([0, 0, 0, 0]),
            port: 20048,
        },
    ]
}

fn answer(call: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    wire::answer(&table(), "192.0.2.1".parse().unwrap(), call, &mut out).then_some(out)
}

/// RPC call header: xid 0x01020304, CALL, RPC version 2, program 100000
/// (0x186a0), `vers`, `proc_`, AUTH_NONE credential and verifier.
fn rpcb_header(vers: u32, proc_: u32) -> String {
    format!("01020304 00000000 00000002 000186a0 {vers:08x} {proc_:08x} 00000000 00000000 00000000 00000000")
}

/// Accepted SUCCESS reply header to xid 0x01020304 (AUTH_NONE verifier).
const OK_REPLY: &str = "01020304 00000001 00000000 00000000 00000000 00000000";

#[test]
fn nfs_safety_rpcbind_pmap_getport_byte_vectors() {
    // PMAPPROC_GETPORT (3), struct mapping { prog, vers, prot, port }:
    // MOUNT (100005 = 0x186a5) v3 over TCP (6): port 20048 = 0x4e50.
    let call = hex(&format!("{} 000186a5 00000003 00000006 00000000", rpcb_header(2, 3)));
    assert_eq!(answer(&call).unwrap(), hex(&format!("{OK_REPLY} 00004e50")));
    // The same over UDP (17): not offered, port 0.
    let call = hex(&format!("{} 000186a5 00000003 00000011 00000000", rpcb_header(2, 3)));
    assert_eq!(answer(&call).unwrap(), hex(&format!("{OK_REPLY} 00000000")));
    // NFS (0x186a3) v4 over TCP: GETPORT wants the exact version: 0.
    let call = hex(&format!("{} 000186a3 00000004 00000006 00000000", rpcb_header(2, 3)));
    assert_eq!(answer(&call).unwrap(), hex(&format!("{OK_REPLY} 00000000")));
    // NFS v3 over TCP: 2049 = 0x801.
    let call = hex(&format!("{} 000186a3 00000003 00000006 00000000", rpcb_header(2, 3)));
    assert_eq!(answer(&call).unwrap(), hex(&format!("{OK_REPLY} 00000801")));
    // PMAPPROC_NULL: a void result.
    assert_eq!(answer(&hex(&rpcb_header(2, 0))).unwrap(), hex(OK_REPLY));
    // PMAPPROC_DUMP (4): pmaplist of the TCP/UDP mappings (not rdma), each
    // `TRUE, mapping`, then FALSE.
    let want = format!(
        "{OK_REPLY} 00000001 000186a3 00000003 00000006 00000801 \
         00000001 000186a5 00000001 00000006 00004e50 \
         00000001 000186a5 00000003 00000006 00004e50 00000000"
    );
    assert_eq!(answer(&hex(&rpcb_header(2, 4))).unwrap(), hex(&want));
    // PMAPPROC_SET from a peer: FALSE, nothing changes.
    let call = hex(&format!("{} 000186a5 00000003 00000006 00000001", rpcb_header(2, 1)));
    assert_eq!(answer(&call).unwrap(), hex(&format!("{OK_REPLY} 00000000")));
}

#[test]
fn nfs_safety_rpcbind_rpcb_getaddr_byte_vectors() {
    // RPCBPROC_GETADDR (3) v4, struct rpcb { prog, vers, netid, addr, owner }:
    // NFS v3 on "rdma" (72646d61) with empty addr and owner. The universal
    // address "10.0.2.15.78.81" (15 bytes, padded): port 78 * 256 + 81 = 20049.
    let call = hex(&format!(
        "{} 000186a3 00000003 00000004 72646d61 00000000 00000000",
        rpcb_header(4, 3)
    ));
    let want = format!("{OK_REPLY} 0000000f 31302e30 2e322e31 352e3738 2e383100");
    assert_eq!(answer(&call).unwrap(), hex(&want));
    // v3, MOUNT v3 on "tcp" (746370): the listener takes every address, so
    // the answer is the address the caller reached (192.0.2.1) and 20048.
    let call = hex(&format!(
        "{} 000186a5 00000003 00000003 74637000 00000000 00000000",
        rpcb_header(3, 3)
    ));
    let want = format!("{OK_REPLY} 0000000f 3139322e 302e322e 312e3738 2e383000");
    assert_eq!(answer(&call).unwrap(), hex(&want));
    // GETADDR of NFS v4 on tcp: rpcbind gives a version of the program it
    // has (the service then answers PROG_MISMATCH): "10.0.2.15.8.1".
    let call = hex(&format!(
        "{} 000186a3 00000004 00000003 74637000 00000000 00000000",
        rpcb_header(4, 3)
    ));
    let want = format!("{OK_REPLY} 0000000d 31302e30 2e322e31 352e382e 31000000");
    assert_eq!(answer(&call).unwrap(), hex(&want));
    // RPCBPROC_GETVERSADDR (9, v4 only) wants that version: "".
    let call = hex(&format!(
        "{} 000186a3 00000004 00000003 74637000 00000000 00000000",
        rpcb_header(4, 9)
    ));
    assert_eq!(answer(&call).unwrap(), hex(&format!("{OK_REPLY} 00000000")));
    // An unknown netid: "".
    let call = hex(&format!(
        "{} 000186a3 00000003 00000003 75647000 00000000 00000000",
        rpcb_header(4, 3)
    ));
    assert_eq!(answer(&call).unwrap(), hex(&format!("{OK_REPLY} 00000000")));
    // RPCBPROC_SET from a peer: FALSE.
    let call = hex(&format!(
        "{} 000186a3 00000003 00000003 74637000 00000000 00000000",
        rpcb_header(4, 1)
    ));
    assert_eq!(answer(&call).unwrap(), hex(&format!("{OK_REPLY} 00000000")));
}

#[test]
fn nfs_safety_rpcbind_rpc_errors_and_hostile_calls() {
    let reply = |accept_stat: u32, extra: &str| {
        hex(&format!(
            "01020304 00000001 00000000 00000000 00000000 {accept_stat:08x} {extra}"
        ))
    };
    // Another program: PROG_UNAVAIL (1).
    let call = hex("01020304 00000000 00000002 000186a1 00000002 00000000 00000000 00000000 00000000 00000000");
    assert_eq!(answer(&call).unwrap(), reply(1, ""));
    // Version 5 (and 1): PROG_MISMATCH (2), low 2, high 4.
    for v in [1, 5] {
        assert_eq!(answer(&hex(&rpcb_header(v, 0))).unwrap(), reply(2, "00000002 00000004"));
    }
    // CALLIT (5), GETADDRLIST (11), GETSTAT (12): PROC_UNAVAIL (3).
    for (v, p) in [(2, 5), (2, 6), (2, 9), (4, 11), (4, 12), (3, 9), (4, 99)] {
        assert_eq!(answer(&hex(&rpcb_header(v, p))).unwrap(), reply(3, ""), "v{v} proc {p}");
    }
    // Truncated arguments: GARBAGE_ARGS (4).
    let call = hex(&format!("{} 000186a3 00000003", rpcb_header(2, 3)));
    assert_eq!(answer(&call).unwrap(), reply(4, ""));
    // A netid longer than any rpcbind string: GARBAGE_ARGS, nothing taken
    // from the length word.
    let call = hex(&format!("{} 000186a3 00000003 7fffffff 72646d61", rpcb_header(4, 3)));
    assert_eq!(answer(&call).unwrap(), reply(4, ""));
    // Not a Call, or too short for a header: no answer.
    assert!(answer(&hex("01020304 00000001 00000000")).is_none());
    assert!(answer(&hex("0102")).is_none());
    // Every prefix of a valid Call is answered or dropped, never a panic.
    let call = hex(&format!(
        "{} 000186a3 00000003 00000004 72646d61 00000000 00000000",
        rpcb_header(4, 3)
    ));
    for n in 0..call.len() {
        let _ = answer(&call[..n]);
    }
}

/// Universal addresses: RFC 1833 section 2.1's dotted form, IPv6 too.
#[test]
fn nfs_safety_rpcbind_universal_addresses() {
    assert_eq!(wire::uaddr("10.0.2.15".parse().unwrap(), 20049), "10.0.2.15.78.81");
    assert_eq!(wire::uaddr("fe80::1".parse().unwrap(), 2049), "fe80::1.8.1");
    assert_eq!(
        wire::parse_uaddr("10.0.2.15.78.81"),
        Some(("10.0.2.15".parse().unwrap(), 20049))
    );
    assert_eq!(wire::parse_uaddr("::1.0.111"), Some(("::1".parse().unwrap(), 111)));
    for bad in ["", "10.0.2.15", "10.0.2.15.256.1", "x.1.2", "10.0.2.15.-1.0"] {
        assert_eq!(wire::parse_uaddr(bad), None, "{bad:?}");
    }
}

/// A free port for both UDP and TCP on the loopback.
fn free_port() -> u16 {
    loop {
        let t = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let p = t.local_addr().unwrap().port();
        if UdpSocket::bind(("127.0.0.1", p)).is_ok() {
            return p;
        }
    }
}

fn call_bytes(xid: u32, vers: u32, proc_: u32, args: impl FnOnce(&mut Enc)) -> Vec<u8> {
    let mut e = call_header(xid, 100_000, vers, proc_, &Auth::None);
    args(&mut e);
    e.b
}

fn udp_call(port: u16, call: &[u8]) -> Reply {
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.send_to(call, ("127.0.0.1", port)).unwrap();
    let mut buf = [0u8; 2048];
    let (n, _) = s.recv_from(&mut buf).expect("rpcbind answers over UDP");
    Reply::parse(&buf[..n])
}

fn getport(port: u16, prog: u32, vers: u32, prot: u32) -> u32 {
    let r = udp_call(
        port,
        &call_bytes(7, 2, 3, |e| {
            e.u32(prog).u32(vers).u32(prot).u32(0);
        }),
    );
    let mut d = r.dec();
    let p = d.u32();
    d.end();
    p
}

#[test]
fn nfs_safety_rpcbind_serves_over_udp_and_tcp_when_no_rpcbind_runs() {
    let port = free_port();
    let cfg = RpcbindConfig {
        mode: RpcbindMode::Auto,
        port,
    };
    let dir = TempDir::new("rpcbind-none");
    // No rpcbind at this socket nor on the port: auto serves.
    let mut rb = Rpcbind::start_with_sockets(
        &cfg,
        table(),
        &["127.0.0.1".parse().unwrap()],
        &[dir.0.join("none.sock")],
    );
    assert_eq!(
        rb.state(),
        RpcbindState::Serving(vec![SocketAddr::from(([127, 0, 0, 1], port))])
    );
    assert_eq!(
        getport(port, 100_005, 3, 6),
        20048,
        "PMAP GETPORT of MOUNT v3/TCP over UDP"
    );
    assert_eq!(getport(port, 100_005, 1, 6), 20048, "MOUNT v1 (showmount)");
    assert_eq!(getport(port, 100_005, 3, 17), 0, "no MOUNT over UDP");
    // rpcbind itself is listed, as rpcbind does (rpcinfo -p looks it up).
    assert_eq!(getport(port, 100_000, 2, 6), u32::from(port), "PMAP over TCP");
    assert_eq!(getport(port, 100_000, 2, 17), u32::from(port), "PMAP over UDP");
    // RPCB v4 GETADDR over TCP, two Calls on one connection.
    let mut t = Tcp(TcpStream::connect(("127.0.0.1", port)).unwrap());
    t.0.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let me = wire::uaddr("127.0.0.1".parse().unwrap(), port);
    for (prog, netid, want) in [
        (100_003, "rdma", "10.0.2.15.78.81"),
        (100_005, "tcp", "127.0.0.1.78.80"),
        (100_000, "tcp", me.as_str()),
    ] {
        let call = call_bytes(9, 4, 3, |e| {
            e.u32(prog).u32(3).opaque(netid.as_bytes()).opaque(b"").opaque(b"");
        });
        let r = Reply::parse(&t.roundtrip(&call).expect("a reply over TCP"));
        let mut d = r.dec();
        assert_eq!(String::from_utf8(d.opaque()).unwrap(), want, "{netid}");
        d.end();
    }
    // A record larger than any rpcbind Call closes the connection.
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(&(0x8000_0000u32 | 1 << 20).to_be_bytes()).unwrap();
    let mut b = [0u8; 4];
    assert_eq!(s.read(&mut b).unwrap_or(0), 0, "closed");
    rb.stop();
    assert_eq!(rb.state(), RpcbindState::Idle);
    // The port is free again.
    UdpSocket::bind(("127.0.0.1", port)).expect("UDP port released");
    std::net::TcpListener::bind(("127.0.0.1", port)).expect("TCP port released");
}

#[test]
fn nfs_safety_rpcbind_port_taken_means_off() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let cfg = RpcbindConfig {
        mode: RpcbindMode::Serve,
        port,
    };
    let rb = Rpcbind::start_with_sockets(&cfg, table(), &["127.0.0.1".parse().unwrap()], &[]);
    assert_eq!(rb.state(), RpcbindState::Idle);
    let off = RpcbindConfig {
        mode: RpcbindMode::Off,
        port: free_port(),
    };
    let rb = Rpcbind::start_with_sockets(&off, table(), &["127.0.0.1".parse().unwrap()], &[]);
    assert_eq!(rb.state(), RpcbindState::Idle);
}

/// What a fake host rpcbind was sent: (version, procedure, prog, vers,
/// netid, addr).
type Seen = Arc<Mutex<Vec<(u32, u32, u32, u32, String, String)>>>;

/// A host rpcbind on a Unix socket that takes every SET and UNSET, or
/// answers PROG_MISMATCH for RPCB v4 when `v3_only`.
fn fake_rpcbind(path: PathBuf, v3_only: bool) -> Seen {
    let l = UnixListener::bind(&path).unwrap();
    let seen: Seen = Arc::default();
    let s2 = seen.clone();
    std::thread::spawn(move || {
        for conn in l.incoming() {
            let Ok(mut c) = conn else { return };
            let seen = s2.clone();
            std::thread::spawn(move || loop {
                let mut m = [0u8; 4];
                if c.read_exact(&mut m).is_err() {
                    return;
                }
                let n = (u32::from_be_bytes(m) & 0x7fff_ffff) as usize;
                let mut b = vec![0u8; n];
                c.read_exact(&mut b).unwrap();
                let w = |i: usize| u32::from_be_bytes(b[i..i + 4].try_into().unwrap());
                let (xid, vers, proc_) = (w(0), w(16), w(20));
                let mut e = Enc::default();
                e.u32(xid).u32(1).u32(0).u32(0).u32(0);
                if v3_only && vers == 4 {
                    e.u32(2).u32(2).u32(3);
                } else {
                    // args after the 40-byte AUTH_NONE header
                    let mut d = proto::xdr::Reader::new(&b[40..]);
                    let (prog, pv) = (d.u32("p").unwrap(), d.u32("v").unwrap());
                    let netid = String::from_utf8(d.string(64, "n").unwrap().to_vec()).unwrap();
                    let addr = String::from_utf8(d.string(64, "a").unwrap().to_vec()).unwrap();
                    seen.lock().unwrap().push((vers, proc_, prog, pv, netid, addr));
                    e.u32(0).u32(1);
                }
                let mut out = (0x8000_0000u32 | e.b.len() as u32).to_be_bytes().to_vec();
                out.extend_from_slice(&e.b);
                c.write_all(&out).unwrap();
            });
        }
    });
    seen
}

#[test]
fn nfs_safety_rpcbind_registers_with_the_host_rpcbind_and_unsets_at_stop() {
    for v3_only in [false, true] {
        let dir = TempDir::new("rpcbind-host");
        let sock = dir.0.join("rpcbind.sock");
        let seen = fake_rpcbind(sock.clone(), v3_only);
        let cfg = RpcbindConfig::default();
        let mut rb = Rpcbind::start_with_sockets(&cfg, table(), &["127.0.0.1".parse().unwrap()], &[sock]);
        assert_eq!(rb.state(), RpcbindState::Registered);
        let vers = if v3_only { 3 } else { 4 };
        let n = table().len();
        {
            let s = seen.lock().unwrap();
            assert_eq!(s.len(), 2 * n, "UNSET then SET of each mapping: {s:?}");
            assert!(
                s[..n].iter().all(|c| c.0 == vers && c.1 == 2 && c.5.is_empty()),
                "{s:?}"
            );
            let sets: Vec<_> = s[n..]
                .iter()
                .map(|c| (c.0, c.1, c.2, c.3, c.4.as_str(), c.5.as_str()))
                .collect();
            assert_eq!(
                sets,
                vec![
                    (vers, 1, 100_003, 3, "tcp", "10.0.2.15.8.1"),
                    (vers, 1, 100_003, 3, "rdma", "10.0.2.15.78.81"),
                    (vers, 1, 100_005, 1, "tcp", "0.0.0.0.78.80"),
                    (vers, 1, 100_005, 3, "tcp", "0.0.0.0.78.80"),
                ]
            );
        }
        rb.stop();
        let s = seen.lock().unwrap();
        assert_eq!(s.len(), 3 * n, "UNSET of each at stop");
        assert!(s[2 * n..].iter().all(|c| c.0 == vers && c.1 == 2), "{s:?}");
    }
}

/// The whole target, rpcbind served on a free port: PMAP GETPORT gives the
/// MOUNT port, and MNT over it works; without the responder nothing
/// answers there.
#[test]
fn nfs_safety_rpcbind_target_tells_clients_the_mount_port() {
    let dir = TempDir::new("rpcbind-target");
    let rb_port = free_port();
    let (nfs, mnt) = (free_port(), free_port());
    let v = serde_json::json!({
        "cores": [{ "cpu": 0, "role": "admin" }, { "cpu": 1, "role": "io" }],
        "reactor": { "idle": { "policy": "spin_then_sleep", "idle_loops": 1000, "max_sleep_us": 100 } },
        "listeners": { "fabric": [{ "address": "127.0.0.1", "port": 20049, "versions": [1] }],
                       "nfs_tcp_port": nfs, "mount_tcp_port": mnt,
                       "rpcbind": { "mode": "serve", "port": rb_port } },
        "fabric": { "provider": "shm", "socket_path": dir.0.join("fabric.sock").to_str().unwrap() },
        "pools": [
            { "name": "recv", "usage": "receive", "buffer_size_bytes": 4096, "count": 256,
              "page_size": "4K", "per_core_cache": 16 },
            { "name": "send", "usage": "send", "buffer_size_bytes": 8192, "count": 256,
              "page_size": "4K", "per_core_cache": 16 },
            { "name": "data", "usage": "data", "buffer_size_bytes": 65536, "count": 16,
              "page_size": "4K", "per_core_cache": 2 }
        ],
        "credits": { "max_per_connection": 16 },
        "backends": [{ "type": "mem", "name": "b0", "size_bytes": 16 << 20 }],
        "exports": [{ "path": "/export", "backend": "b0", "clients": ["127.0.0.0/8"] }],
    });
    let cfg = Config::from_json_value(&v).expect("config");
    let t = Target::start(cfg).expect("target");
    assert_eq!(
        t.rpcbind_state(),
        RpcbindState::Serving(vec![SocketAddr::from(([127, 0, 0, 1], rb_port))])
    );
    // The mount helper's question for proto=rdma: MOUNT v3 over TCP.
    let port = getport(rb_port, 100_005, 3, 6);
    assert_eq!(port, u32::from(mnt));
    assert_eq!(getport(rb_port, 100_003, 3, 6), u32::from(nfs));
    let mut m = Client::new(Tcp::connect(port as u16));
    m.mnt("/export").expect("MNT at the port rpcbind gave");
    // showmount -e: EXPORT of MOUNT v1 at the v1 port.
    let p1 = getport(rb_port, 100_005, 1, 6) as u16;
    let mut s = Client::new(Tcp::connect(p1));
    let r = s.call(MOUNT, 1, 5, |_| {});
    let mut d = r.dec();
    assert!(d.bool());
    assert_eq!(d.opaque(), b"/export");
    t.shutdown().expect("shutdown");
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    s.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
    s.send_to(&call_bytes(1, 2, 0, |_| {}), ("127.0.0.1", rb_port)).unwrap();
    assert!(s.recv_from(&mut [0u8; 64]).is_err(), "no answer after shutdown");
}

// ---------------------------------------------------------------------------
// Item 10: subdirectory mounts, several exports per backend
// ---------------------------------------------------------------------------

/// A client acting as root on `sh` (the exports here do not squash root).
fn root_on(sh: &Arc<rpcrdma_apps::nfs::NfsShared>) -> Client<Direct> {
    let mut c = Client::new(Direct::new(sh));
    c.auth = Auth::root();
    c
}

fn open_ex(path: &'static str) -> Ex {
    Ex {
        root_squash: false,
        ..Ex::new(path, "b0")
    }
}

/// `NfsShared` over one backend with these (export path, backend dir).
fn shared_dirs(s: &Store, exports: &[(&'static str, &str)]) -> Arc<rpcrdma_apps::nfs::NfsShared> {
    let ex: Vec<Ex> = exports.iter().map(|(p, _)| open_ex(p)).collect();
    let mut cfg = config(&["b0"], &ex, 1 << 20);
    for (c, (_, d)) in cfg.exports.iter_mut().zip(exports) {
        c.dir = d.to_string();
    }
    rpcrdma_apps::nfs::NfsShared::new(&cfg, vec![("b0".into(), s.backend.clone())]).expect("exports")
}

#[test]
fn nfs_safety_mnt_of_a_subdirectory_returns_its_handle() {
    for kind in KINDS {
        let s = store(kind, "mnt-sub");
        let sh = shared(&[&s], &[open_ex("/export")], 1 << 20);
        let mut c = root_on(&sh);
        let (root, _) = c.mnt("/export").unwrap();
        let (sub, _) = c.mkdir(&root, "sub", 0o755).unwrap();
        let (deeper, _) = c.mkdir(&sub, "deeper", 0o755).unwrap();
        c.mkfile(&sub, "f", 0o644).unwrap();
        c.symlink(&root, "link", b"sub").unwrap();
        for (path, want) in [
            ("/export/sub", &sub),
            ("/export/sub/", &sub),
            ("/export//sub/./deeper", &deeper),
            ("/export/sub/deeper", &deeper),
            ("/export/.", &root),
        ] {
            let (fh, flavors) = c.mnt(path).unwrap_or_else(|e| panic!("{kind:?}: MNT {path}: {e}"));
            assert_eq!(&fh, want, "{kind:?}: MNT {path} gives that directory's handle");
            assert_eq!(flavors, vec![1], "AUTH_SYS");
        }
        // Its handle works like any other: LOOKUP `..` goes up within the export.
        let (fh, _) = c.mnt("/export/sub/deeper").unwrap();
        assert_eq!(c.lookup(&fh, b"..").unwrap().0, sub);
        assert!(c.dump().contains(&("127.0.0.1".into(), "/export/sub/deeper".into())));
        for (path, err) in [
            ("/export/sub/f", 20), // MNT3ERR_NOTDIR
            ("/export/link", 20),  // a symbolic link is not followed
            ("/export/nope", 2),   // MNT3ERR_NOENT
            ("/export/sub/nope/x", 2),
            ("/export/sub/..", 13), // MNT3ERR_ACCES: never above the path
            ("/export/../etc", 13),
            ("/exportx", 2), // not below /export
            ("/", 2),
        ] {
            assert_eq!(c.mnt(path).unwrap_err(), err, "{kind:?}: MNT {path}");
        }
    }
}

#[test]
fn nfs_safety_two_exports_on_one_backend_show_their_own_subtree() {
    for kind in KINDS {
        let s = store(kind, "two-exports");
        let sh = shared_dirs(&s, &[("/a", "/tree/a"), ("/b", "/tree/b"), ("/all", "/")]);
        let mut c = root_on(&sh);
        let (a, _) = c.mnt("/a").unwrap();
        let (b, _) = c.mnt("/b").unwrap();
        let (all, _) = c.mnt("/all").unwrap();
        assert_ne!(a, b);
        c.mkfile(&a, "only-in-a", 0o644).unwrap();
        let (asub, _) = c.mkdir(&a, "d", 0o755).unwrap();
        c.mkfile(&b, "only-in-b", 0o644).unwrap();
        let sorted = |mut v: Vec<String>| {
            v.sort();
            v
        };
        assert_eq!(sorted(c.list_all(&a, 4096)), [".", "..", "d", "only-in-a"], "{kind:?}");
        assert_eq!(sorted(c.list_all(&b, 4096)), [".", "..", "only-in-b"], "{kind:?}");
        let (tree, _) = c.lookup(&all, b"tree").unwrap();
        assert_eq!(sorted(c.list_all(&tree, 4096)), [".", "..", "a", "b"]);
        // LOOKUP `..` at an export's root is that root, not the backend
        // directory above it (which another export serves).
        let root_attr = c.getattr(&a).unwrap();
        let (up, up_attr) = c.lookup(&a, b"..").unwrap();
        assert_eq!(up, a, "{kind:?}: LOOKUP .. at /a's root stays there");
        assert_eq!(up_attr.fileid, root_attr.fileid);
        assert_eq!(
            c.lookup(&asub, b"..").unwrap().0,
            a,
            "below the root, `..` is the parent"
        );
        // READDIRPLUS's `..` at the root: the root's handle and attributes,
        // and READDIR's `..` its fileid.
        let l = c.readdirplus(&a, 0, 0, 4096, 8192).unwrap();
        let dotdot = l.entries.iter().find(|e| e.1 == b"..").expect("`..` listed");
        assert_eq!(dotdot.0, root_attr.fileid, "{kind:?}: fileid of `..`");
        assert_eq!(dotdot.3.as_ref().map(|f| f.fileid), Some(root_attr.fileid));
        assert_eq!(
            dotdot.4.as_ref(),
            Some(&a),
            "{kind:?}: READDIRPLUS `..` handle at the root"
        );
        let l = c.readdir(&a, 0, 0, 4096).unwrap();
        assert_eq!(l.entries.iter().find(|e| e.1 == b"..").unwrap().0, root_attr.fileid);
        // In a subdirectory `..` is its parent.
        let l = c.readdirplus(&asub, 0, 0, 4096, 8192).unwrap();
        assert_eq!(l.entries.iter().find(|e| e.1 == b"..").unwrap().4.as_ref(), Some(&a));
        // The whole-backend export still goes up to its own root only.
        assert_eq!(c.lookup(&all, b"..").unwrap().0, all);
        // The same directory through two exports: two handles (their
        // prefixes differ), one file.
        let (via_all, _) = c.lookup(&tree, b"a").unwrap();
        assert_ne!(via_all, a);
        assert_eq!(c.getattr(&via_all).unwrap().fileid, root_attr.fileid);
        // A backend path that is a file cannot be exported.
        c.mkfile(&all, "plain", 0o644).unwrap();
        let ex = [open_ex("/p")];
        let mut cfg = config(&["b0"], &ex, 1 << 20);
        cfg.exports[0].dir = "/plain".into();
        let e = rpcrdma_apps::nfs::NfsShared::new(&cfg, vec![("b0".into(), s.backend.clone())]).unwrap_err();
        assert!(e.contains("not a directory"), "{e}");
    }
}

// ---------------------------------------------------------------------------
// Item 11: the nvme backend's FSINFO, FSSTAT and cp
// ---------------------------------------------------------------------------

const FSF3_LINK: u32 = 1;
const FSF3_SYMLINK: u32 = 2;
const FSF3_HOMOGENEOUS: u32 = 8;
const FSF3_CANSETTIME: u32 = 16;

/// Image files standing in for namespaces (tests/nvme/run.sh has the real
/// devices): `sparse.img` of 4 MiB with no block allocated, `full.img` of
/// 1 MiB written whole.
fn nvme_images(dir: &TempDir) -> Vec<PathBuf> {
    let sparse = dir.0.join("sparse.img");
    std::fs::File::create(&sparse).unwrap().set_len(4 * MIB as u64).unwrap();
    let full = dir.0.join("full.img");
    std::fs::write(&full, vec![0x5au8; MIB]).unwrap();
    vec![sparse, full]
}

fn nvme_shared(imgs: &[PathBuf]) -> Arc<rpcrdma_apps::nfs::NfsShared> {
    let backend: Arc<dyn rpcrdma_apps::backend::Backend> =
        Arc::new(rpcrdma_apps::backend::nvme::NvmeBackend::open("b0", imgs, 32, true).unwrap());
    let s = Store {
        kind: Kind::Mem,
        backend,
        dir: None,
    };
    shared(&[&s], &[open_ex("/nvme")], 1 << 20)
}

#[test]
fn nfs_safety_nvme_fsinfo_advertises_only_what_it_supports() {
    let dir = TempDir::new("nvme-fsinfo");
    let sh = nvme_shared(&nvme_images(&dir));
    let mut c = root_on(&sh);
    let (root, _) = c.mnt("/nvme").unwrap();
    let (file, _) = c.lookup(&root, b"sparse.img").unwrap();
    for fh in [&root, &file] {
        let (_, _, props) = c.fsinfo(fh).unwrap();
        assert_eq!(
            props & (FSF3_LINK | FSF3_SYMLINK),
            0,
            "no links on a fixed namespace: {props:#x}"
        );
        assert_eq!(
            props & (FSF3_HOMOGENEOUS | FSF3_CANSETTIME),
            FSF3_HOMOGENEOUS | FSF3_CANSETTIME
        );
        assert_eq!(c.pathconf(fh).unwrap().0, 1, "PATHCONF linkmax");
    }
    // What it does not advertise it refuses.
    assert_ne!(c.symlink(&root, "l", b"sparse.img").unwrap_err(), 0);
    // A POSIX backend still advertises everything.
    let m = store(Kind::Mem, "fsinfo-mem");
    let sh = shared(&[&m], &[open_ex("/m")], 1 << 20);
    let mut c = root_on(&sh);
    let (root, _) = c.mnt("/m").unwrap();
    let (_, _, props) = c.fsinfo(&root).unwrap();
    assert_eq!(props, FSF3_LINK | FSF3_SYMLINK | FSF3_HOMOGENEOUS | FSF3_CANSETTIME);
    assert!(c.pathconf(&root).unwrap().0 > 1);
}

#[test]
fn nfs_safety_nvme_fsstat_reports_real_free_space() {
    let dir = TempDir::new("nvme-fsstat");
    let imgs = nvme_images(&dir);
    let sh = nvme_shared(&imgs);
    let mut c = root_on(&sh);
    let (root, _) = c.mnt("/nvme").unwrap();
    let [tbytes, fbytes, abytes, ..] = c.fsstat(&root).unwrap();
    assert_eq!(tbytes, 5 * MIB as u64);
    // The sparse image's 4 MiB are unallocated, the full one's none.
    assert_eq!(
        (fbytes, abytes),
        (4 * MIB as u64, 4 * MIB as u64),
        "free space of the devices"
    );
    // Writing 1 MiB into the sparse image allocates it: 1 MiB less free.
    let (fh, _) = c.lookup(&root, b"sparse.img").unwrap();
    c.write(&fh, 0, &vec![7u8; MIB], proto::nfs3::FILE_SYNC).unwrap();
    let [_, fbytes, ..] = c.fsstat(&root).unwrap();
    assert_eq!(fbytes, 3 * MIB as u64, "after 1 MiB written");
}

/// `cp data /mnt/full.img`: the Linux client opens the existing file with
/// O_TRUNC, which is SETATTR size 0, then writes, then reads back.
#[test]
fn nfs_safety_nvme_cp_onto_a_device_file_works() {
    let dir = TempDir::new("nvme-cp");
    let imgs = nvme_images(&dir);
    let sh = nvme_shared(&imgs);
    let mut c = root_on(&sh);
    let (root, _) = c.mnt("/nvme").unwrap();
    let (fh, _) = c.lookup(&root, b"full.img").unwrap();
    let trunc = |size| rpcrdma_apps::backend::SetAttr {
        size: Some(size),
        mtime: rpcrdma_apps::backend::SetTime::ServerTime,
        ..Default::default()
    };
    for size in [0, 4096, MIB as u64] {
        let (st, (_, post)) = c.setattr(&fh, &trunc(size), None);
        assert_eq!(st, 0, "SETATTR size {size} (open O_TRUNC, ftruncate) is accepted");
        assert_eq!(post.unwrap().size, MIB as u64, "the size stays the capacity");
    }
    let (st, _) = c.setattr(&fh, &trunc(MIB as u64 + 1), None);
    assert_eq!(st, 27, "NFS3ERR_FBIG beyond the capacity");
    // UNCHECKED CREATE of the existing name with size 0 (open O_CREAT|O_TRUNC).
    let how = rpcrdma_apps::backend::CreateHow::Unchecked(trunc(0));
    assert_eq!(c.create(&root, b"full.img", how).unwrap().0, fh);
    let data: Vec<u8> = (0..100_000u32).map(|i| (i * 7) as u8).collect();
    c.write(&fh, 0, &data, proto::nfs3::UNSTABLE).unwrap();
    c.commit(&fh).unwrap();
    let (got, _, _) = c.read(&fh, 0, data.len() as u32).unwrap();
    assert_eq!(got, data);
    assert_eq!(&std::fs::read(&imgs[1]).unwrap()[..data.len()], &data[..]);
}

// ---------------------------------------------------------------------------
// Item 8: SETATTR's guard and pre-operation attributes, read with the change
// ---------------------------------------------------------------------------

use rpcrdma_apps::backend::{
    Attr, Backend, CreateHow, DirChange, DirChanged, DirEntry, DirPre, FileHandle, FsResult, FsStat, IoChannel, IoDesc,
    IoDone, IoOp, NodeKind, Owner, SetAttr, SetTime, Stable,
};

/// A backend with another client's change (chmod 0600) landing right after
/// the next attribute read of the armed handle is returned, or at the start
/// of a checked change of it: the moment between a separate read and the
/// change. `seen` keeps the attributes the other change left.
#[derive(Debug)]
struct Racer {
    inner: Arc<dyn Backend>,
    armed: Mutex<Option<FileHandle>>,
    seen: Mutex<Option<Attr>>,
}

impl Racer {
    fn new(inner: Arc<dyn Backend>) -> Racer {
        Racer {
            inner,
            armed: Mutex::new(None),
            seen: Mutex::new(None),
        }
    }

    fn other_client(&self, fh: &FileHandle) {
        // A later ctime, also with the kernel's coarse clock.
        std::thread::sleep(Duration::from_millis(12));
        let chmod = SetAttr {
            mode: Some(0o600),
            ..Default::default()
        };
        self.inner.setattr(fh, &chmod).unwrap();
        *self.seen.lock().unwrap() = Some(self.inner.getattr(fh).unwrap());
    }

    fn take(&self, fh: &FileHandle) -> bool {
        let mut a = self.armed.lock().unwrap();
        if a.as_ref() == Some(fh) {
            *a = None;
            true
        } else {
            false
        }
    }
}

impl Backend for Racer {
    forward_backend_plain!();
    fn lookup(&self, dir: &FileHandle, name: &[u8]) -> FsResult<(FileHandle, Attr)> {
        self.inner.lookup(dir, name)
    }
    fn getattr(&self, fh: &FileHandle) -> FsResult<Attr> {
        let a = self.inner.getattr(fh);
        if self.take(fh) {
            self.other_client(fh);
        }
        a
    }
    fn setattr_checked(
        &self,
        fh: &FileHandle,
        set: &SetAttr,
        check: &mut dyn FnMut(&Attr) -> Result<(), u32>,
    ) -> FsResult<(Attr, Result<Attr, u32>)> {
        // Read and change are one step here: the other change can only
        // land before it.
        if self.take(fh) {
            self.other_client(fh);
        }
        self.inner.setattr_checked(fh, set, check)
    }
    fn change_checked(
        &self,
        dir: &FileHandle,
        change: DirChange<'_>,
        check: &mut dyn FnMut(&DirPre<'_>) -> Result<Owner, u32>,
    ) -> FsResult<DirChanged> {
        // As for SETATTR: the other change can only land before.
        if self.take(dir) {
            self.other_client(dir);
        }
        if let DirChange::Rename { to_dir, .. } = change {
            if self.take(to_dir) {
                self.other_client(to_dir);
            }
        }
        self.inner.change_checked(dir, change, check)
    }
    forward_backend_io!();
}

#[test]
fn nfs_safety_setattr_guard_is_checked_against_the_attributes_the_change_starts_from() {
    let m = store(Kind::Mem, "guard");
    let racer = Arc::new(Racer::new(m.backend.clone()));
    let s = Store {
        kind: Kind::Mem,
        backend: racer.clone(),
        dir: None,
    };
    let sh = shared(&[&s], &[open_ex("/g")], 1 << 20);
    let mut c = root_on(&sh);
    let (root, _) = c.mnt("/g").unwrap();
    let (fh, a0) = c.mkfile(&root, "f", 0o644).unwrap();
    let t0 = (a0.ctime.0, a0.ctime.1);
    // The client checked ctime t0; another client's chmod lands while the
    // SETATTR is being served, before its change.
    *racer.armed.lock().unwrap() = Some(rpcrdma_apps::nfs::export::split_fh(&fh).unwrap().1);
    let set = SetAttr {
        mode: Some(0o640),
        ..Default::default()
    };
    let (st, (pre, post)) = c.setattr(&fh, &set, Some(t0));
    let now = c.getattr(&fh).unwrap();
    assert_ne!((now.ctime.0, now.ctime.1), t0, "the other change happened");
    assert_eq!(st, 10002, "NFS3ERR_NOT_SYNC: the file changed after the guard's ctime");
    let pre = pre.expect("pre-operation attributes");
    assert_eq!(
        (pre.ctime.0, pre.ctime.1),
        (now.ctime.0, now.ctime.1),
        "pre-op: the attributes the check saw"
    );
    assert_eq!(now.mode & 0o7777, 0o600, "the other client's change stands");
    assert_eq!(post.unwrap().mode & 0o7777, 0o600);
}

#[test]
fn nfs_safety_mem_setattr_reads_checks_and_changes_atomically() {
    let m = store(Kind::Mem, "atomic");
    let b = m.backend.clone();
    let root = b.root();
    let owner = Owner { uid: 0, gid: 0 };
    let (fh, _) = b
        .create(&root, b"f", CreateHow::Unchecked(SetAttr::default()), owner)
        .unwrap();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (b2, stop2) = (b.clone(), stop.clone());
    // Another client flips the mode as fast as it can.
    let flipper = std::thread::spawn(move || {
        let mut i = 0u32;
        while !stop2.load(std::sync::atomic::Ordering::Relaxed) {
            let set = SetAttr {
                mode: Some(0o600 | ((i & 1) * 0o044)),
                ..Default::default()
            };
            b2.setattr(&fh, &set).unwrap();
            i += 1;
        }
    });
    // SETATTR of the times only: the mode it ends with must be the one its
    // check saw, whatever the other client does around it.
    let touch = SetAttr {
        mtime: SetTime::ServerTime,
        ..Default::default()
    };
    for i in 0..300 {
        let mut check = |_: &Attr| -> Result<(), u32> {
            // A check that takes a while (a permission lookup, a slow core).
            std::thread::sleep(Duration::from_micros(200));
            Ok(())
        };
        let (pre, post) = b.setattr_checked(&fh, &touch, &mut check).unwrap();
        let post = post.unwrap();
        assert_eq!(
            pre.mode, post.mode,
            "round {i}: another change landed between the read and the change"
        );
        assert!(post.ctime >= pre.ctime);
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    flipper.join().unwrap();
}

/// A procedure returning its status and the pre-operation attributes in
/// question.
type WccOp<'a> = dyn FnMut(&mut Client<Direct>) -> (u32, Option<WccAttr>) + 'a;

/// The namespace procedures' pre-operation attributes (`wcc_data` before,
/// RFC 1813 s2.6) are those of the directory the change started from: when
/// another client changes the directory after a separate read and before the
/// change, the reply shows the directory with that other change (issue 21
/// item 8). Each procedure, RENAME's both directories, on `mem` and `uring`.
#[test]
fn nfs_safety_namespace_pre_op_attributes_are_the_ones_the_change_starts_from() {
    for kind in KINDS {
        let m = store(kind, "wcc");
        let racer = Arc::new(Racer::new(m.backend.clone()));
        let s = Store {
            kind,
            backend: racer.clone(),
            dir: None,
        };
        let sh = shared(&[&s], &[open_ex("/g")], 1 << 20);
        let mut c = root_on(&sh);
        let (root, _) = c.mnt("/g").unwrap();
        let (d1, _) = c.mkdir(&root, "d1", 0o755).unwrap();
        let (d2, _) = c.mkdir(&root, "d2", 0o755).unwrap();
        let (f, _) = c.mkfile(&d1, "f", 0o644).unwrap();
        assert_eq!(c.mkfile(&d1, "victim", 0o644).err(), None);
        assert_eq!(c.mkdir(&d1, "gone", 0o755).err(), None);
        assert_eq!(c.mkfile(&d1, "moving", 0o644).err(), None);
        assert_eq!(c.mkfile(&d1, "moving2", 0o644).err(), None);
        let raw = |fh: &[u8]| rpcrdma_apps::nfs::export::split_fh(fh).unwrap().1;
        let mut wrong = Vec::new();
        // Arm `dir`, run `op` (which returns the status and the
        // pre-operation attributes in question) and compare them with the
        // directory as the other change left it.
        let mut round = |what: &str, dir: &[u8], op: &mut WccOp<'_>| {
            *racer.armed.lock().unwrap() = Some(raw(dir));
            let (st, pre) = op(&mut c);
            assert_eq!(st, 0, "{kind:?} {what}");
            let seen = racer.seen.lock().unwrap().take().expect("the other change happened");
            let pre = pre.expect("pre-operation attributes");
            let want = (
                (seen.ctime.secs, seen.ctime.nsecs),
                (seen.mtime.secs, seen.mtime.nsecs),
                seen.size,
            );
            if (pre.ctime, pre.mtime, pre.size) != want {
                wrong.push(format!("{kind:?} {what}"));
            }
        };
        // CREATE, MKDIR, SYMLINK: status, post_op_fh3, post_op_attr, wcc_data.
        let made = |r: Reply| {
            let mut d = r.dec();
            let st = d.u32();
            if st == 0 {
                d.post_op_fh();
                d.post_op_attr();
            }
            let (pre, _) = d.wcc();
            (st, pre)
        };
        round("CREATE", &d1, &mut |c| {
            made(c.nfs(8, |e| {
                e.dirop(&d1, b"new").u32(1).sattr(&mode_attr(0o644));
            }))
        });
        round("MKDIR", &d1, &mut |c| {
            made(c.nfs(9, |e| {
                e.dirop(&d1, b"newdir").sattr(&mode_attr(0o755));
            }))
        });
        round("SYMLINK", &d1, &mut |c| {
            made(c.nfs(10, |e| {
                e.dirop(&d1, b"sym").sattr(&SetAttr::default()).opaque(b"f");
            }))
        });
        // REMOVE, RMDIR: status, wcc_data.
        let wcc = |r: Reply| {
            let mut d = r.dec();
            let st = d.u32();
            let (pre, _) = d.wcc();
            (st, pre)
        };
        round("REMOVE", &d1, &mut |c| {
            wcc(c.nfs(12, |e| {
                e.dirop(&d1, b"victim");
            }))
        });
        round("RMDIR", &d1, &mut |c| {
            wcc(c.nfs(13, |e| {
                e.dirop(&d1, b"gone");
            }))
        });
        // RENAME: status, the source directory's wcc_data, the target's.
        round("RENAME (from)", &d1, &mut |c| {
            let r = c.nfs(14, |e| {
                e.dirop(&d1, b"moving").dirop(&d2, b"moved");
            });
            let mut d = r.dec();
            let st = d.u32();
            let (pre, _) = d.wcc();
            (st, pre)
        });
        round("RENAME (to)", &d2, &mut |c| {
            let r = c.nfs(14, |e| {
                e.dirop(&d1, b"moving2").dirop(&d2, b"moved2");
            });
            let mut d = r.dec();
            let st = d.u32();
            d.wcc();
            let (pre, _) = d.wcc();
            (st, pre)
        });
        // LINK: status, the file's post_op_attr, the directory's wcc_data.
        round("LINK", &d2, &mut |c| {
            let r = c.nfs(15, |e| {
                e.opaque(&f).dirop(&d2, b"hard");
            });
            let mut d = r.dec();
            let st = d.u32();
            d.post_op_attr();
            let (pre, _) = d.wcc();
            (st, pre)
        });
        assert!(
            wrong.is_empty(),
            "pre-operation attributes not the ones the change started from: {wrong:?}"
        );
    }
}

/// NFSv4's `change_info4` (RFC 8881 s3.3.6) of CREATE (a directory, a
/// symlink), OPEN that creates, REMOVE (a file, a directory), RENAME (both
/// directories) and LINK: `before` is the directory's change attribute as
/// the change found it, with another client's change landing after a
/// separate read of the directory and before the change (as in the NFSv3
/// test above), and `atomic` says whether nothing can lie between `before`
/// and `after`: true on `mem` (both read under the change's hold of its
/// lock), false on `uring` (docs/BACKENDS.md: the window between the
/// `fstat` and the call). Before, `before` was the separate read and
/// `atomic` always false (issue 21 item 8 for NFSv4).
#[test]
fn nfs_safety_nfs4_change_info_is_the_one_the_change_starts_from() {
    use nfs4_common::*;
    use proto::nfs4::*;
    for kind in KINDS {
        let m = store(kind, "cinfo");
        let racer = Arc::new(Racer::new(m.backend.clone()));
        let s = Store {
            kind,
            backend: racer.clone(),
            dir: None,
        };
        let sh = shared(&[&s], &[open_ex("/g")], 1 << 20);
        let mut v3 = root_on(&sh);
        let (root, _) = v3.mnt("/g").unwrap();
        let (d1, _) = v3.mkdir(&root, "d1", 0o755).unwrap();
        let (d2, _) = v3.mkdir(&root, "d2", 0o755).unwrap();
        let (f, _) = v3.mkfile(&d1, "f", 0o644).unwrap();
        for name in ["victim", "moving", "moving2"] {
            assert_eq!(v3.mkfile(&d1, name, 0o644).err(), None);
        }
        assert_eq!(v3.mkdir(&d1, "gone", 0o755).err(), None);
        let mut c = V4::new(Direct::new(&sh), "cinfo");
        c.setup(4);
        let raw = |fh: &[u8]| rpcrdma_apps::nfs::export::split_fh(fh).unwrap().1;
        let mut wrong = Vec::new();
        // Arm `dir`, run the COMPOUND `ops`, take the change_info4 `pick`
        // finds in its last result, and compare it with the directory as
        // the other change left it.
        let mut round = |what: &str, dir: &[u8], ops: Vec<Vec<u8>>, pick: &dyn Fn(&mut Dec<'_>)| {
            *racer.armed.lock().unwrap() = Some(raw(dir));
            let r = c.seq(&ops);
            assert_eq!(r.status, NFS4_OK, "{kind:?} {what}");
            let mut d = r.dec();
            for o in &ops[..ops.len() - 1] {
                let n = u32::from_be_bytes([o[0], o[1], o[2], o[3]]);
                assert_eq!(res(&mut d, n), NFS4_OK);
            }
            let last = u32::from_be_bytes([
                ops[ops.len() - 1][0],
                ops[ops.len() - 1][1],
                ops[ops.len() - 1][2],
                ops[ops.len() - 1][3],
            ]);
            assert_eq!(res(&mut d, last), NFS4_OK);
            pick(&mut d);
            let (atomic, before, after) = (d.bool(), d.u64(), d.u64());
            let seen = racer.seen.lock().unwrap().take().expect("the other change happened");
            let want = u64::from(seen.ctime.secs) * 1_000_000_000 + u64::from(seen.ctime.nsecs);
            if before != want || atomic != (kind == Kind::Mem) || after < before {
                wrong.push(format!(
                    "{kind:?} {what}: atomic {atomic} before {before} after {after}, the change started from {want}"
                ));
            }
        };
        let nothing = |_: &mut Dec<'_>| {};
        let mkdir = op(|e| {
            e.u32(OP_CREATE).u32(NF4DIR).opaque(b"newdir");
            mode_attrs(e, Some(0o755));
        });
        round("CREATE dir", &d1, vec![putfh(&d1), mkdir], &nothing);
        let symlink = op(|e| {
            e.u32(OP_CREATE).u32(NF4LNK).opaque(b"f").opaque(b"sym");
            mode_attrs(e, None);
        });
        round("CREATE symlink", &d1, vec![putfh(&d1), symlink], &nothing);
        let o = open("new", 3, 0, b"o", Some((UNCHECKED4, 0o644, [0; 8])));
        round("OPEN create", &d1, vec![putfh(&d1), o], &|d: &mut Dec<'_>| {
            get_stateid(d);
        });
        let rm = |n: &[u8]| {
            op(|e| {
                e.u32(OP_REMOVE).opaque(n);
            })
        };
        round("REMOVE", &d1, vec![putfh(&d1), rm(b"victim")], &nothing);
        round("REMOVE dir", &d1, vec![putfh(&d1), rm(b"gone")], &nothing);
        let save = op(|e| {
            e.u32(OP_SAVEFH);
        });
        let ren = |a: &[u8], b: &[u8]| {
            op(|e| {
                e.u32(OP_RENAME).opaque(a).opaque(b);
            })
        };
        let ops = vec![putfh(&d1), save.clone(), putfh(&d2), ren(b"moving", b"moved")];
        round("RENAME (from)", &d1, ops, &nothing);
        let ops = vec![putfh(&d1), save.clone(), putfh(&d2), ren(b"moving2", b"moved2")];
        round("RENAME (to)", &d2, ops, &|d: &mut Dec<'_>| {
            d.bool();
            d.u64();
            d.u64();
        });
        let link = op(|e| {
            e.u32(OP_LINK).opaque(b"hard");
        });
        round("LINK", &d2, vec![putfh(&f), save, putfh(&d2), link], &nothing);
        assert!(
            wrong.is_empty(),
            "change_info4 not the one the change started from: {wrong:#?}"
        );
    }
}

/// `inner` whose channels let another client's write (4 KiB at the end of
/// the armed file) land just before the next write of that file: the moment
/// between a separate read of the attributes and the WRITE.
#[derive(Debug)]
struct WriteRacer {
    inner: Arc<dyn Backend>,
    armed: Arc<Mutex<Option<FileHandle>>>,
    seen: Arc<Mutex<Option<Attr>>>,
}

impl Backend for WriteRacer {
    forward_backend_namespace!();
    fn commit(&self, fh: &FileHandle) -> FsResult<()> {
        self.inner.commit(fh)
    }
    fn sync_all(&self) -> FsResult<()> {
        self.inner.sync_all()
    }
    fn open_channel(&self, core: usize) -> FsResult<Box<dyn IoChannel>> {
        Ok(Box::new(RacingChannel {
            inner: self.inner.open_channel(core)?,
            backend: self.inner.clone(),
            armed: self.armed.clone(),
            seen: self.seen.clone(),
        }))
    }
}

#[derive(Debug)]
struct RacingChannel {
    inner: Box<dyn IoChannel>,
    backend: Arc<dyn Backend>,
    armed: Arc<Mutex<Option<FileHandle>>>,
    seen: Arc<Mutex<Option<Attr>>>,
}

impl RacingChannel {
    fn race(&mut self, io: &IoDesc) {
        if !matches!(io.op, IoOp::Write(_)) || self.armed.lock().unwrap().take_if(|fh| *fh == io.fh).is_none() {
            return;
        }
        std::thread::sleep(Duration::from_millis(2)); // a later mtime
        let at = self.backend.getattr(&io.fh).unwrap().size;
        let other = [7u8; 4096];
        let w = IoDesc::write(&io.fh, at, &other, Stable::Unstable, 0).unwrap();
        // SAFETY: `other` outlives the call, which completes at once.
        let done = unsafe { self.inner.io_now(&w) }.expect("the other write runs now");
        assert_eq!(done.result, Ok(4096));
        *self.seen.lock().unwrap() = Some(self.backend.getattr(&io.fh).unwrap());
    }
}

impl IoChannel for RacingChannel {
    unsafe fn submit(&mut self, io: IoDesc) -> FsResult<()> {
        self.race(&io);
        // SAFETY: the caller's contract, passed on.
        unsafe { self.inner.submit(io) }
    }
    fn poll(&mut self, out: &mut [IoDone]) -> usize {
        self.inner.poll(out)
    }
    fn in_flight(&self) -> usize {
        self.inner.in_flight()
    }
    fn completes_later(&self) -> bool {
        self.inner.completes_later()
    }
    fn getattr_cached(&mut self, fh: &FileHandle) -> Option<FsResult<Attr>> {
        self.inner.getattr_cached(fh)
    }
    unsafe fn io_now(&mut self, io: &IoDesc) -> Option<IoDone> {
        self.race(io);
        // SAFETY: the caller's contract, passed on.
        unsafe { self.inner.io_now(io) }
    }
    fn take_write_pre(&mut self) -> Option<Attr> {
        self.inner.take_write_pre()
    }
}

/// WRITE's pre-operation attributes on `mem` are read with the write, under
/// the same hold of the lock: another client's write that lands after a
/// separate read shows in them (issue 21 item 8).
#[test]
fn nfs_safety_mem_write_pre_op_attributes_are_the_ones_the_write_starts_from() {
    let m = store(Kind::Mem, "wpre");
    let racer = Arc::new(WriteRacer {
        inner: m.backend.clone(),
        armed: Arc::default(),
        seen: Arc::default(),
    });
    let s = Store {
        kind: Kind::Mem,
        backend: racer.clone(),
        dir: None,
    };
    let sh = shared(&[&s], &[open_ex("/g")], 1 << 20);
    let mut c = root_on(&sh);
    let (root, _) = c.mnt("/g").unwrap();
    let (f, _) = c.mkfile(&root, "f", 0o644).unwrap();
    c.write(&f, 0, &[1u8; 100], 2).unwrap();
    for stable in [0, 2] {
        *racer.armed.lock().unwrap() = Some(rpcrdma_apps::nfs::export::split_fh(&f).unwrap().1);
        let w = c.write(&f, 0, &[2u8; 10], stable).unwrap();
        let seen = racer.seen.lock().unwrap().take().expect("the other write happened");
        let pre = w.wcc.0.expect("pre-operation attributes");
        assert_eq!(
            (pre.size, pre.mtime),
            (seen.size, (seen.mtime.secs, seen.mtime.nsecs)),
            "stable {stable}: the pre-operation attributes are not the ones the write started from"
        );
    }
}
