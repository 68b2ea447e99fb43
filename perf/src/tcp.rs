//! RPC over TCP with record marking (RFC 5531 section 11), for the control
//! plane only: MOUNT v3 (the export's root handle) and portmap GETPORT (where
//! the kernel's mountd listens). Blocking, with timeouts. Main thread, before
//! and after a run.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

use proto::nfs3::{MOUNT_PROGRAM, MOUNT_V3};
use proto::rpc::{RecordMark, RecordReassembler, RM_BYTES};

use crate::nfs::{self, Cred, ReplyError};
use crate::PerfError;

/// Largest reply record accepted (MOUNT and portmap replies are tiny).
pub const MAX_REPLY_BYTES: usize = 64 * 1024;
/// The MOUNT port of rpcrdma-target (configs/cores.json `mount_tcp_port`).
pub const DEFAULT_MOUNT_PORT: u16 = 20048;
/// The portmap / rpcbind port.
pub const PORTMAP_PORT: u16 = 111;

/// One TCP connection carrying record-marked RPC messages.
#[derive(Debug)]
pub struct TcpRpc {
    stream: TcpStream,
    next_xid: u32,
}

fn rpc_err(what: &'static str, e: impl std::fmt::Display) -> PerfError {
    PerfError::Rpc {
        what,
        detail: e.to_string(),
    }
}

/// Connect from a reserved source port (below 1024), as the kernel's mountd
/// wants from clients of exports with the `secure` option. Needs
/// CAP_NET_BIND_SERVICE; `Err(PermissionDenied)` without it.
pub fn connect_reserved(addr: SocketAddr, timeout: Duration) -> std::io::Result<TcpStream> {
    let domain = if addr.is_ipv4() { libc::AF_INET } else { libc::AF_INET6 };
    let mut last = std::io::Error::from(std::io::ErrorKind::AddrInUse);
    for port in (512u16..1024).rev() {
        // SAFETY: plain socket(2) call; the result is checked before use.
        let fd = unsafe { libc::socket(domain, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `fd` is a fresh descriptor owned by nobody else.
        let owned = unsafe { OwnedFd::from_raw_fd(fd) };
        let tv = libc::timeval {
            tv_sec: timeout.as_secs() as libc::time_t,
            tv_usec: timeout.subsec_micros() as libc::suseconds_t,
        };
        // SAFETY: `tv` is a valid timeval of the size passed; on Linux
        // SO_SNDTIMEO also bounds a blocking connect(2).
        unsafe {
            libc::setsockopt(
                owned.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_SNDTIMEO,
                (&tv as *const libc::timeval).cast(),
                std::mem::size_of::<libc::timeval>() as libc::socklen_t,
            );
        }
        let local = match addr {
            SocketAddr::V4(_) => SocketAddr::new(IpAddr::from([0u8; 4]), port),
            SocketAddr::V6(_) => SocketAddr::new(IpAddr::from([0u16; 8]), port),
        };
        let (sa, len) = sockaddr(&local);
        // SAFETY: `sa` holds a sockaddr of `len` bytes for the socket's family.
        if unsafe { libc::bind(owned.as_raw_fd(), (&sa as *const libc::sockaddr_storage).cast(), len) } != 0 {
            let e = std::io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EADDRINUSE) => {
                    last = e;
                    continue;
                }
                _ => return Err(e),
            }
        }
        let (sa, len) = sockaddr(&addr);
        // SAFETY: as above, for the peer's address.
        if unsafe { libc::connect(owned.as_raw_fd(), (&sa as *const libc::sockaddr_storage).cast(), len) } != 0 {
            let e = std::io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EADDRINUSE) | Some(libc::EADDRNOTAVAIL) => {
                    last = e;
                    continue;
                }
                _ => return Err(e),
            }
        }
        return Ok(TcpStream::from(owned));
    }
    Err(last)
}

fn sockaddr(a: &SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: sockaddr_storage is plain data; all-zero is a valid value.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    match a {
        SocketAddr::V4(v4) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: v4.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(v4.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in.
            unsafe { std::ptr::write((&mut ss as *mut libc::sockaddr_storage).cast(), sin) };
            (ss, std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t)
        }
        SocketAddr::V6(v6) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: v6.port().to_be(),
                sin6_flowinfo: v6.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: v6.ip().octets(),
                },
                sin6_scope_id: v6.scope_id(),
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in6.
            unsafe { std::ptr::write((&mut ss as *mut libc::sockaddr_storage).cast(), sin6) };
            (ss, std::mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t)
        }
    }
}

impl TcpRpc {
    /// Connect to `addr`; `reserved`: from a source port below 1024 when
    /// allowed (falls back to any port when not permitted).
    pub fn connect(addr: SocketAddr, timeout: Duration, reserved: bool) -> std::io::Result<Self> {
        let stream = if reserved {
            match connect_reserved(addr, timeout) {
                Ok(s) => s,
                Err(e) if matches!(e.raw_os_error(), Some(libc::EACCES) | Some(libc::EPERM)) => {
                    TcpStream::connect_timeout(&addr, timeout)?
                }
                Err(e) => return Err(e),
            }
        } else {
            TcpStream::connect_timeout(&addr, timeout)?
        };
        stream.set_read_timeout(Some(timeout))?;
        stream.set_write_timeout(Some(timeout))?;
        stream.set_nodelay(true)?;
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.subsec_nanos());
        Ok(TcpRpc {
            stream,
            next_xid: seed | 1,
        })
    }

    /// A fresh XID.
    pub fn xid(&mut self) -> u32 {
        self.next_xid = self.next_xid.wrapping_add(1);
        self.next_xid
    }

    /// Send one Call as a single-fragment record and read one Reply record.
    pub fn call(&mut self, msg: &[u8]) -> Result<Vec<u8>, PerfError> {
        self.call_max(msg, MAX_REPLY_BYTES)
    }

    /// [`TcpRpc::call`] accepting a reply record of up to `max` bytes (an
    /// NFS READ reply).
    pub fn call_max(&mut self, msg: &[u8], max: usize) -> Result<Vec<u8>, PerfError> {
        let mark = RecordMark::new(true, msg.len() as u32).map_err(|e| rpc_err("record mark", e))?;
        let mut out = Vec::with_capacity(RM_BYTES + msg.len());
        out.extend_from_slice(&mark.to_bytes());
        out.extend_from_slice(msg);
        self.stream
            .write_all(&out)
            .map_err(|e| PerfError::io("sending an RPC over TCP", e))?;
        read_record_max(&mut self.stream, max)
    }
}

/// Read one record-marked message (at most [`MAX_REPLY_BYTES`]).
pub fn read_record<R: Read>(r: &mut R) -> Result<Vec<u8>, PerfError> {
    read_record_max(r, MAX_REPLY_BYTES)
}

/// Read one record-marked message of at most `max` bytes.
pub fn read_record_max<R: Read>(r: &mut R, max: usize) -> Result<Vec<u8>, PerfError> {
    let mut re = RecordReassembler::new(max);
    let mut record = vec![0u8; max];
    // Read exactly: each fragment's mark, then its body, never past the record.
    let mut mark = [0u8; RM_BYTES];
    loop {
        r.read_exact(&mut mark)
            .map_err(|e| PerfError::io("reading an RPC record mark", e))?;
        let p = re.feed(&mark, &mut record).map_err(|e| rpc_err("record", e))?;
        if let Some(n) = p.record_len {
            record.truncate(n);
            return Ok(record);
        }
        let m = RecordMark::from_bytes(mark);
        // The reassembler checked the announced length against `max` when
        // it took the mark: the allocation is bounded by `max`.
        if m.len() as usize > max {
            return Err(rpc_err("record", format!("fragment of {} bytes over {max}", m.len())));
        }
        let mut body = vec![0u8; m.len() as usize];
        r.read_exact(&mut body)
            .map_err(|e| PerfError::io("reading an RPC record", e))?;
        let p = re.feed(&body, &mut record).map_err(|e| rpc_err("record", e))?;
        if let Some(n) = p.record_len {
            record.truncate(n);
            return Ok(record);
        }
    }
}

/// Where to send MOUNT.
#[derive(Clone, Debug)]
pub struct MountTarget {
    pub host: IpAddr,
    /// An explicit port: no portmap fallback.
    pub port: Option<u16>,
    pub timeout: Duration,
    /// Connect from a reserved port when running with the privilege to.
    pub reserved_port: bool,
    /// Tried first when `port` is not given ([`DEFAULT_MOUNT_PORT`]).
    pub default_port: u16,
    /// Where portmap is asked when `default_port` refuses ([`PORTMAP_PORT`]).
    pub portmap_port: u16,
}

impl MountTarget {
    /// MOUNT on `host`: at `port` when given, else at [`DEFAULT_MOUNT_PORT`]
    /// or where portmap says; 10 s timeout; no reserved port.
    pub fn new(host: IpAddr, port: Option<u16>) -> Self {
        MountTarget {
            host,
            port,
            timeout: Duration::from_secs(10),
            reserved_port: false,
            default_port: DEFAULT_MOUNT_PORT,
            portmap_port: PORTMAP_PORT,
        }
    }
}

fn decode_err(what: &'static str) -> impl Fn(ReplyError) -> PerfError {
    move |e| rpc_err(what, e)
}

/// Ask portmap at `addr` where `prog`/`vers` listens over TCP.
pub fn getport(addr: SocketAddr, prog: u32, vers: u32, timeout: Duration) -> Result<u16, PerfError> {
    let mut c = TcpRpc::connect(addr, timeout, false).map_err(|e| PerfError::io(format!("portmap at {addr}"), e))?;
    let xid = c.xid();
    let mut b = [0u8; 128];
    let n = nfs::encode_getport(&mut b, xid, prog, vers, nfs::IPPROTO_TCP).map_err(|e| rpc_err("GETPORT", e))?;
    let reply = c.call(&b[..n])?;
    nfs::parse_getport(&reply, Some(xid)).map_err(decode_err("GETPORT"))
}

/// Connect to the MOUNT service: the explicit port, else the default port
/// (20048), else (connection refused there) the port portmap gives for MOUNT
/// v3 over TCP.
pub fn connect_mount(t: &MountTarget) -> Result<TcpRpc, PerfError> {
    let at = |port| SocketAddr::new(t.host, port);
    if let Some(p) = t.port {
        return TcpRpc::connect(at(p), t.timeout, t.reserved_port)
            .map_err(|e| PerfError::io(format!("MOUNT at {}", at(p)), e));
    }
    match TcpRpc::connect(at(t.default_port), t.timeout, t.reserved_port) {
        Ok(c) => Ok(c),
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
            let p = getport(at(t.portmap_port), MOUNT_PROGRAM, MOUNT_V3, t.timeout)?;
            TcpRpc::connect(at(p), t.timeout, t.reserved_port)
                .map_err(|e| PerfError::io(format!("MOUNT at {} (from portmap)", at(p)), e))
        }
        Err(e) => Err(PerfError::io(format!("MOUNT at {}", at(t.default_port)), e)),
    }
}

/// MNT `export`: the root file handle.
pub fn mount(t: &MountTarget, export: &str, cred: &Cred) -> Result<Vec<u8>, PerfError> {
    let mut c = connect_mount(t)?;
    let xid = c.xid();
    let mut b = vec![0u8; 2048];
    let n = nfs::encode_mnt(&mut b, xid, cred, export).map_err(|e| rpc_err("MNT", e))?;
    let reply = c.call(&b[..n])?;
    match nfs::parse_mnt(&reply, Some(xid)) {
        Ok(fh) => Ok(fh),
        Err(ReplyError::Mount(status)) => Err(PerfError::Mount {
            export: export.into(),
            status,
        }),
        Err(e) => Err(rpc_err("MNT", e)),
    }
}

/// UMNT `export` (best effort: the mount table entry is informational).
pub fn unmount(t: &MountTarget, export: &str, cred: &Cred) -> Result<(), PerfError> {
    let mut c = connect_mount(t)?;
    let xid = c.xid();
    let mut b = vec![0u8; 2048];
    let n = nfs::encode_umnt(&mut b, xid, cred, export).map_err(|e| rpc_err("UMNT", e))?;
    let reply = c.call(&b[..n])?;
    nfs::rpc_results(&reply, Some(xid))
        .map(|_| ())
        .map_err(decode_err("UMNT"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proto::nfs3::{MNT3ERR_NOENT, MNT3_OK};
    use proto::rpc::{encode_reply_header, CallHeader, OpaqueAuth, ReplyHeader};
    use proto::xdr::{Reader, Writer};
    use std::net::TcpListener;

    /// A one-shot record-marked server: answers each Call with `answer(call)`.
    fn serve(
        answer: impl Fn(&[u8]) -> Vec<u8> + Send + 'static,
        calls: usize,
    ) -> (SocketAddr, std::thread::JoinHandle<()>) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let h = std::thread::spawn(move || {
            for _ in 0..calls {
                let (mut s, _) = l.accept().unwrap();
                let call = read_record(&mut s).unwrap();
                let rep = answer(&call);
                // Reply in two fragments to exercise reassembly.
                let half = rep.len() / 2;
                for (last, part) in [(false, &rep[..half]), (true, &rep[half..])] {
                    s.write_all(&RecordMark::new(last, part.len() as u32).unwrap().to_bytes())
                        .unwrap();
                    s.write_all(part).unwrap();
                }
            }
        });
        (addr, h)
    }

    fn reply(xid: u32, results: &[u32]) -> Vec<u8> {
        let mut b = vec![0u8; 64];
        let mut w = Writer::new(&mut b);
        encode_reply_header(&mut w, &ReplyHeader::success(xid, OpaqueAuth::NONE)).unwrap();
        let n = w.len();
        b.truncate(n);
        for r in results {
            b.extend_from_slice(&r.to_be_bytes());
        }
        b
    }

    fn target(addr: SocketAddr) -> MountTarget {
        MountTarget::new(addr.ip(), Some(addr.port()))
    }

    #[test]
    fn portmap_fallback_when_the_default_port_refuses() {
        // MOUNT on some port, announced by a portmap on another; the default
        // port is closed.
        let (mnt, h1) = serve(
            |call| reply(CallHeader::decode(call).unwrap().0.xid, &[MNT3_OK, 4, 0x0a0b_0c0d, 0]),
            1,
        );
        let mport = mnt.port();
        let (pm, h2) = serve(
            move |call| {
                let (c, at) = CallHeader::decode(call).unwrap();
                assert_eq!((c.prog, c.vers, c.proc_), (nfs::PMAP_PROGRAM, 2, nfs::PMAPPROC_GETPORT));
                let mut r = Reader::new(&call[at..]);
                let args: Vec<u32> = (0..4).map(|_| r.u32("a").unwrap()).collect();
                assert_eq!(args, vec![MOUNT_PROGRAM, 3, nfs::IPPROTO_TCP, 0]);
                reply(c.xid, &[mport as u32])
            },
            1,
        );
        let closed = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let t = MountTarget {
            default_port: closed,
            portmap_port: pm.port(),
            ..MountTarget::new(pm.ip(), None)
        };
        assert_eq!(
            mount(&t, "/export", &Cred::none()).unwrap(),
            vec![0x0a, 0x0b, 0x0c, 0x0d]
        );
        h1.join().unwrap();
        h2.join().unwrap();
        // Portmap that does not know MOUNT: port 0 is an error.
        let (pm, h3) = serve(|call| reply(CallHeader::decode(call).unwrap().0.xid, &[0]), 1);
        let t = MountTarget {
            default_port: closed,
            portmap_port: pm.port(),
            ..MountTarget::new(pm.ip(), None)
        };
        assert!(mount(&t, "/export", &Cred::none()).is_err());
        h3.join().unwrap();
    }

    #[test]
    fn mnt_over_tcp_returns_the_handle() {
        let (addr, h) = serve(
            |call| {
                let (c, at) = CallHeader::decode(call).unwrap();
                assert_eq!((c.prog, c.vers, c.proc_), (MOUNT_PROGRAM, 3, 1));
                assert_eq!(Reader::new(&call[at..]).string(1024, "p").unwrap(), b"/export");
                reply(c.xid, &[MNT3_OK, 8, 0x0102_0304, 0x0506_0708, 1, 1])
            },
            1,
        );
        let cred = Cred::sys("t", 0, 0).unwrap();
        let fh = mount(&target(addr), "/export", &cred).unwrap();
        assert_eq!(fh, vec![1, 2, 3, 4, 5, 6, 7, 8]);
        h.join().unwrap();
    }

    #[test]
    fn mnt_refusal_is_reported() {
        let (addr, h) = serve(
            |call| reply(CallHeader::decode(call).unwrap().0.xid, &[MNT3ERR_NOENT]),
            1,
        );
        let e = mount(&target(addr), "/nope", &Cred::none()).unwrap_err();
        assert!(
            matches!(
                e,
                PerfError::Mount {
                    status: MNT3ERR_NOENT,
                    ..
                }
            ),
            "{e}"
        );
        h.join().unwrap();
    }

    #[test]
    fn wrong_xid_and_oversized_records_are_refused() {
        let (addr, h) = serve(
            |call| reply(CallHeader::decode(call).unwrap().0.xid ^ 1, &[MNT3_OK, 0, 0]),
            1,
        );
        assert!(mount(&target(addr), "/export", &Cred::none()).is_err());
        h.join().unwrap();
        // A record mark announcing more than the limit: refused before reading it.
        let mut input = RecordMark::new(true, (MAX_REPLY_BYTES + 1) as u32)
            .unwrap()
            .to_bytes()
            .to_vec();
        input.extend_from_slice(&[0u8; 16]);
        assert!(read_record(&mut &input[..]).is_err());
        // Truncated stream.
        let input = RecordMark::new(true, 100).unwrap().to_bytes();
        assert!(read_record(&mut &input[..]).is_err());
    }

    #[test]
    fn reserved_port_when_privileged() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        match connect_reserved(addr, Duration::from_secs(2)) {
            Ok(s) => {
                assert!(s.local_addr().unwrap().port() < 1024);
                let (_, peer) = l.accept().unwrap();
                assert_eq!(peer, s.local_addr().unwrap());
            }
            // Without CAP_NET_BIND_SERVICE the bind is refused, and `connect`
            // falls back to an ordinary port.
            Err(e) => {
                assert!(
                    matches!(e.raw_os_error(), Some(libc::EACCES) | Some(libc::EPERM)),
                    "{e}"
                );
                let c = TcpRpc::connect(addr, Duration::from_secs(2), true).unwrap();
                assert!(c.stream.local_addr().unwrap().port() >= 1024);
            }
        }
    }
}
