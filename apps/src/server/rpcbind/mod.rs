//! rpcbind: how a plain `mount -t nfs -o vers=3,proto=rdma,port=20049` and
//! `showmount -e` find the MOUNT service (and NFS) without `mountport=`.
//!
//! Clients ask the server's rpcbind (port 111) where a program listens: the
//! mount helper asks for MOUNT v3 over TCP (for `proto=rdma` the MOUNT
//! transport is TCP), `showmount` for MOUNT v1. The gateway
//!
//! - **registers** its services with the host's rpcbind when one runs
//!   (RPCB SET, RFC 1833 section 2.2, over rpcbind's local socket, which is
//!   the one transport rpcbind accepts SET from by default; else over TCP
//!   to 127.0.0.1:111), and unregisters them (RPCB UNSET) at shutdown;
//! - otherwise **answers** PMAP v2 GETPORT / DUMP and RPCB v3/v4 GETADDR /
//!   GETVERSADDR / DUMP on port 111 itself, over UDP and TCP, from its own
//!   fixed table ([`wire::answer`]), which then lists rpcbind itself too
//!   (program 100000 v2-v4 on tcp and udp, as rpcbind does: `rpcinfo`
//!   looks it up first); if port 111 is taken, it does neither
//!   and says so.
//!
//! The table: NFS v3 on `tcp` (or `tcp6`) at `listeners.nfs_tcp_port`, on
//! `rdma` (or `rdma6`, the Linux kernel's netids for RPC-over-RDMA) at each
//! verbs fabric listener's port; MOUNT v1 and v3 on `tcp` at
//! `listeners.mount_tcp_port` (v1 for `showmount`, whose EXPORT and DUMP are
//! the same as v3's). `listeners.rpcbind.mode` picks what is done: `auto`
//! (the default: register if an rpcbind answers, else serve), `register`,
//! `serve`, `off`.
//!
//! Control path: plain threads, blocking sockets with time-outs; nothing on
//! a reactor core.

pub mod wire;

use std::io::{self, Read, Write};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::config::{RpcbindConfig, RpcbindMode};
use wire::{Mapping, Netid, RPCBPROC_SET, RPCBPROC_UNSET, RPCB_V3, RPCB_V4};

/// rpcbind's local sockets, newest path first.
pub const RPCBIND_SOCKETS: [&str; 2] = ["/run/rpcbind.sock", "/var/run/rpcbind.sock"];
/// Largest rpcbind Call the responder takes (a GETADDR is under 300 bytes).
const MAX_CALL_BYTES: usize = 1024;
/// Largest reply the registration client reads.
const MAX_REPLY_BYTES: usize = 64 * 1024;
/// Time-out of each exchange with the host's rpcbind and of each responder
/// TCP connection's reads and writes.
const IO_TIMEOUT: Duration = Duration::from_secs(3);
/// TCP connections the responder serves at once; more are closed at once.
const MAX_TCP_CONNS: usize = 16;
/// How often blocked responder threads look at the stop flag.
const STOP_POLL: Duration = Duration::from_millis(100);

/// What the gateway does about rpcbind, once started.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RpcbindState {
    /// Nothing (`off`, or nothing possible: no rpcbind and port taken).
    Idle,
    /// Its table is registered with the host's rpcbind.
    Registered,
    /// It answers on these addresses (UDP and TCP each).
    Serving(Vec<SocketAddr>),
}

/// The host's rpcbind, reached over one stream.
enum HostConn {
    Unix(UnixStream),
    Tcp(TcpStream),
}

impl HostConn {
    /// rpcbind's local socket, else TCP to 127.0.0.1:`port`; `None` when
    /// neither answers (no rpcbind runs).
    fn connect(sockets: &[PathBuf], port: u16) -> Option<HostConn> {
        for p in sockets {
            if let Ok(s) = UnixStream::connect(p) {
                let _ = s.set_read_timeout(Some(IO_TIMEOUT));
                let _ = s.set_write_timeout(Some(IO_TIMEOUT));
                return Some(HostConn::Unix(s));
            }
        }
        let at = SocketAddr::from(([127, 0, 0, 1], port));
        let s = TcpStream::connect_timeout(&at, IO_TIMEOUT).ok()?;
        let _ = s.set_read_timeout(Some(IO_TIMEOUT));
        let _ = s.set_write_timeout(Some(IO_TIMEOUT));
        Some(HostConn::Tcp(s))
    }

    fn stream(&mut self) -> &mut dyn ReadWrite {
        match self {
            HostConn::Unix(s) => s,
            HostConn::Tcp(s) => s,
        }
    }

    fn what(&self) -> &'static str {
        match self {
            HostConn::Unix(_) => "local socket",
            HostConn::Tcp(_) => "TCP 127.0.0.1",
        }
    }

    /// Send `call` as one record and read the reply record.
    fn exchange(&mut self, call: &[u8]) -> io::Result<Vec<u8>> {
        let s = self.stream();
        write_record(s, call)?;
        read_record(s, MAX_REPLY_BYTES)
    }
}

trait ReadWrite: Read + Write {}
impl<T: Read + Write> ReadWrite for T {}

/// Write `body` as one record (RFC 5531 section 11: a last-fragment mark).
fn write_record(s: &mut dyn ReadWrite, body: &[u8]) -> io::Result<()> {
    let mark = (0x8000_0000u32 | body.len() as u32).to_be_bytes();
    let mut buf = Vec::with_capacity(4 + body.len());
    buf.extend_from_slice(&mark);
    buf.extend_from_slice(body);
    s.write_all(&buf)
}

/// Read one record (all its fragments) of at most `max` bytes.
fn read_record(s: &mut dyn ReadWrite, max: usize) -> io::Result<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let mut mark = [0u8; 4];
        s.read_exact(&mut mark)?;
        let m = u32::from_be_bytes(mark);
        let len = (m & 0x7fff_ffff) as usize;
        if out.len() + len > max {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "record too large"));
        }
        let at = out.len();
        out.resize(at + len, 0);
        s.read_exact(&mut out[at..])?;
        if m & 0x8000_0000 != 0 {
            return Ok(out);
        }
    }
}

/// The registrations made with the host's rpcbind, undone by
/// [`Registered::unset`].
struct Registered {
    maps: Vec<Mapping>,
    sockets: Vec<PathBuf>,
    port: u16,
    vers: u32,
}

static XID: AtomicU32 = AtomicU32::new(0x5243_0000);

/// Why an exchange with the host's rpcbind failed.
#[derive(Debug)]
enum RpcbError {
    /// It does not speak this RPCB version (PROG_MISMATCH).
    Version,
    Other(String),
}

/// SET or UNSET (`proc_`) each of `maps` with `conn`, in RPCB version `vers`.
/// Returns the mappings rpcbind took.
fn rpcb_each(conn: &mut HostConn, vers: u32, proc_: u32, maps: &[Mapping]) -> Result<Vec<Mapping>, RpcbError> {
    let mut took = Vec::new();
    for m in maps {
        let xid = XID.fetch_add(1, Ordering::Relaxed);
        let call = wire::encode_rpcb_call(xid, vers, proc_, m, "superuser");
        let reply = conn
            .exchange(&call)
            .map_err(|e| RpcbError::Other(format!("rpcbind over its {}: {e}", conn.what())))?;
        match wire::decode_bool_reply(xid, &reply) {
            Ok(true) => took.push(*m),
            Ok(false) => {}
            Err(wire::ReplyError::Version) => return Err(RpcbError::Version),
            Err(e) => return Err(RpcbError::Other(format!("rpcbind over its {}: {e}", conn.what()))),
        }
    }
    Ok(took)
}

impl Registered {
    /// Register `maps` with the host's rpcbind: UNSET each first (a
    /// registration a killed target left behind), then SET. `Ok(None)` when
    /// no rpcbind answers.
    fn set(maps: &[Mapping], sockets: &[PathBuf], port: u16) -> Result<Option<Registered>, String> {
        let Some(mut conn) = HostConn::connect(sockets, port) else {
            return Ok(None);
        };
        for vers in [RPCB_V4, RPCB_V3] {
            match rpcb_each(&mut conn, vers, RPCBPROC_UNSET, maps) {
                Ok(_) => {}
                Err(RpcbError::Version) => continue,
                Err(RpcbError::Other(e)) => return Err(e),
            }
            let took = match rpcb_each(&mut conn, vers, RPCBPROC_SET, maps) {
                Ok(t) => t,
                Err(RpcbError::Version) => continue,
                Err(RpcbError::Other(e)) => return Err(e),
            };
            let refused: Vec<String> = maps
                .iter()
                .filter(|m| !took.contains(m))
                .map(|m| format!("{} v{} {}", m.prog, m.vers, m.netid.as_str()))
                .collect();
            if !refused.is_empty() {
                tracing::warn!(refused = ?refused, via = conn.what(), "rpcbind refused some registrations");
            }
            return Ok(Some(Registered {
                maps: took,
                sockets: sockets.to_vec(),
                port,
                vers,
            }));
        }
        Err("rpcbind speaks neither RPCB v4 nor v3".into())
    }

    /// UNSET every registration made (shutdown).
    fn unset(&mut self) {
        if self.maps.is_empty() {
            return;
        }
        let r = HostConn::connect(&self.sockets, self.port)
            .ok_or_else(|| "rpcbind no longer answers".to_string())
            .and_then(|mut c| rpcb_each(&mut c, self.vers, RPCBPROC_UNSET, &self.maps).map_err(|e| format!("{e:?}")));
        match r {
            Ok(_) => tracing::info!(count = self.maps.len(), "rpcbind registrations removed"),
            Err(e) => tracing::warn!(error = %e, "rpcbind: removing our registrations failed"),
        }
        self.maps.clear();
    }
}

/// The responder on one address: a UDP and a TCP socket, one thread each.
struct Responder {
    addr: SocketAddr,
    threads: Vec<JoinHandle<()>>,
}

/// The address a UDP caller at `peer` reached us at, when the socket is
/// bound to all addresses: the source address the host would use to answer
/// it (learned by connecting a probe socket; control path, one syscall
/// pair per Call).
fn local_for(bound: IpAddr, peer: SocketAddr) -> IpAddr {
    if !bound.is_unspecified() {
        return bound;
    }
    let probe = UdpSocket::bind(SocketAddr::new(bound, 0)).and_then(|s| {
        s.connect(peer)?;
        s.local_addr()
    });
    probe.map_or(bound, |a| a.ip())
}

fn serve_udp(sock: UdpSocket, maps: Arc<Vec<Mapping>>, stop: Arc<AtomicBool>) {
    let bound = sock.local_addr().map_or(IpAddr::from([0, 0, 0, 0]), |a| a.ip());
    let mut buf = [0u8; MAX_CALL_BYTES];
    let mut out = Vec::new();
    while !stop.load(Ordering::Acquire) {
        let Ok((n, peer)) = sock.recv_from(&mut buf) else {
            continue; // the time-out, to look at the stop flag
        };
        if wire::answer(&maps, local_for(bound, peer), &buf[..n], &mut out) {
            let _ = sock.send_to(&out, peer);
        }
    }
}

fn serve_tcp_conn(mut s: TcpStream, maps: &[Mapping]) {
    let _ = s.set_read_timeout(Some(IO_TIMEOUT));
    let _ = s.set_write_timeout(Some(IO_TIMEOUT));
    let Ok(local) = s.local_addr() else { return };
    let mut out = Vec::new();
    // One Call at a time until the client closes or stalls.
    while let Ok(call) = read_record(&mut s, MAX_CALL_BYTES) {
        if !wire::answer(maps, local.ip(), &call, &mut out) || write_record(&mut s, &out).is_err() {
            return;
        }
    }
}

fn serve_tcp(listener: TcpListener, maps: Arc<Vec<Mapping>>, stop: Arc<AtomicBool>) {
    // Each connection with another handle on its socket, to close it at stop.
    let mut conns: Vec<(TcpStream, JoinHandle<()>)> = Vec::new();
    while !stop.load(Ordering::Acquire) {
        conns.retain(|(_, t)| !t.is_finished());
        let Ok((s, _)) = listener.accept() else {
            std::thread::sleep(STOP_POLL / 2);
            continue;
        };
        let _ = s.set_nonblocking(false);
        if conns.len() >= MAX_TCP_CONNS {
            continue; // dropped: closed at once
        }
        let Ok(other) = s.try_clone() else { continue };
        let maps = maps.clone();
        if let Ok(t) = std::thread::Builder::new()
            .name("rpcbind-conn".into())
            .spawn(move || serve_tcp_conn(s, &maps))
        {
            conns.push((other, t));
        }
    }
    for (s, t) in conns {
        let _ = s.shutdown(Shutdown::Both);
        let _ = t.join();
    }
}

impl Responder {
    fn start(at: SocketAddr, maps: Arc<Vec<Mapping>>, stop: Arc<AtomicBool>) -> io::Result<Responder> {
        let tcp = TcpListener::bind(at)?;
        // UDP on the same port as TCP (the port asked may be 0 in tests).
        let addr = tcp.local_addr()?;
        let udp = UdpSocket::bind(addr)?;
        tcp.set_nonblocking(true)?;
        udp.set_read_timeout(Some(STOP_POLL))?;
        let (m2, s2) = (maps.clone(), stop.clone());
        let threads = vec![
            std::thread::Builder::new()
                .name(format!("rpcbind-udp-{}", addr.port()))
                .spawn(move || serve_udp(udp, m2, s2))?,
            std::thread::Builder::new()
                .name(format!("rpcbind-tcp-{}", addr.port()))
                .spawn(move || serve_tcp(tcp, maps, stop))?,
        ];
        Ok(Responder { addr, threads })
    }
}

/// The gateway's rpcbind part: registrations or responders, undone by
/// [`Rpcbind::stop`] (or drop).
pub struct Rpcbind {
    registered: Option<Registered>,
    responders: Vec<Responder>,
    stop: Arc<AtomicBool>,
}

impl std::fmt::Debug for Rpcbind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rpcbind").field("state", &self.state()).finish()
    }
}

impl Rpcbind {
    /// Do what `cfg.mode` says for `maps`; the responder binds `cfg.port`
    /// on each of `addrs`. Never fails: what cannot be done is logged (a
    /// client can still give `mountport=`). Call from the admin thread.
    pub fn start(cfg: &RpcbindConfig, maps: Vec<Mapping>, addrs: &[IpAddr]) -> Rpcbind {
        let sockets: Vec<PathBuf> = RPCBIND_SOCKETS.iter().map(PathBuf::from).collect();
        Rpcbind::start_with_sockets(cfg, maps, addrs, &sockets)
    }

    /// [`Rpcbind::start`], looking for the host's rpcbind at these local
    /// sockets (tests).
    pub fn start_with_sockets(
        cfg: &RpcbindConfig,
        maps: Vec<Mapping>,
        addrs: &[IpAddr],
        sockets: &[PathBuf],
    ) -> Rpcbind {
        let mut me = Rpcbind {
            registered: None,
            responders: Vec::new(),
            stop: Arc::new(AtomicBool::new(false)),
        };
        let register = matches!(cfg.mode, RpcbindMode::Auto | RpcbindMode::Register);
        if register {
            match Registered::set(&maps, sockets, cfg.port) {
                Ok(Some(r)) => {
                    tracing::info!(
                        registered = r.maps.len(),
                        of = maps.len(),
                        rpcb_version = r.vers,
                        "registered with the host's rpcbind"
                    );
                    me.registered = Some(r);
                    return me;
                }
                Ok(None) if cfg.mode == RpcbindMode::Register => {
                    tracing::warn!("no rpcbind answers on this host: nothing registered");
                    return me;
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "registering with the host's rpcbind failed");
                    return me;
                }
            }
        }
        if !matches!(cfg.mode, RpcbindMode::Auto | RpcbindMode::Serve) {
            return me;
        }
        // rpcbind lists itself, and clients look it up before they ask it
        // anything (libtirpc's `clnt_create` of PMAP in `rpcinfo -p`).
        let mut maps = maps;
        for &ip in addrs {
            let v6 = ip.is_ipv6();
            let netids = if v6 {
                [Netid::Tcp6, Netid::Udp6]
            } else {
                [Netid::Tcp, Netid::Udp]
            };
            for netid in netids {
                for vers in [wire::PMAP_V2, RPCB_V3, RPCB_V4] {
                    maps.push(Mapping {
                        prog: wire::RPCBIND_PROGRAM,
                        vers,
                        netid,
                        ip,
                        port: cfg.port,
                    });
                }
            }
        }
        let maps = Arc::new(maps);
        for ip in addrs {
            let at = SocketAddr::new(*ip, cfg.port);
            match Responder::start(at, maps.clone(), me.stop.clone()) {
                Ok(r) => {
                    tracing::info!(addr = %r.addr, "answering rpcbind (PMAP v2, RPCB v3/v4) over UDP and TCP");
                    me.responders.push(r);
                }
                Err(e) => tracing::warn!(
                    addr = %at,
                    error = %e,
                    "cannot answer rpcbind here (the port is taken or needs privilege): clients need mountport="
                ),
            }
        }
        me
    }

    /// What it does now.
    pub fn state(&self) -> RpcbindState {
        if self.registered.is_some() {
            RpcbindState::Registered
        } else if !self.responders.is_empty() {
            RpcbindState::Serving(self.responders.iter().map(|r| r.addr).collect())
        } else {
            RpcbindState::Idle
        }
    }

    /// Unregister, or stop answering. Idempotent. Call from the admin thread.
    pub fn stop(&mut self) {
        if let Some(mut r) = self.registered.take() {
            r.unset();
        }
        self.stop.store(true, Ordering::Release);
        for r in self.responders.drain(..) {
            for t in r.threads {
                let _ = t.join();
            }
        }
    }
}

impl Drop for Rpcbind {
    fn drop(&mut self) {
        self.stop();
    }
}
