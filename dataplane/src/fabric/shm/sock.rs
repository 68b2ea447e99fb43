//! Non-blocking `AF_UNIX` `SOCK_SEQPACKET` sockets for the shm connection
//! manager: message boundaries are kept by the kernel (no framing), and
//! descriptors travel with a message as `SCM_RIGHTS` (unix(7)).
//!
//! Addresses: a filesystem path, or `@name` for the Linux abstract namespace
//! (no file to clean up).
//!
//! Control path only; every function is one or two non-blocking system calls.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::path::PathBuf;

/// Most descriptors one message may carry (the kernel's `SCM_MAX_FD` is 253).
pub const MAX_FDS: usize = 160;

const _: () = assert!(MAX_FDS <= 253);

/// A parsed socket address.
pub struct UnixAddr {
    addr: libc::sockaddr_un,
    len: libc::socklen_t,
    /// The filesystem path, for path (not abstract) addresses.
    pub path: Option<PathBuf>,
}

impl std::fmt::Debug for UnixAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UnixAddr")
            .field("path", &self.path)
            .field("len", &self.len)
            .finish()
    }
}

impl UnixAddr {
    /// Parse `addr`: `@name` (abstract) or a path. `None` if empty, too long
    /// for `sun_path`, or containing NUL.
    pub fn parse(addr: &str) -> Option<UnixAddr> {
        // SAFETY: all-zero is a valid sockaddr_un.
        let mut sa: libc::sockaddr_un = unsafe { std::mem::zeroed() };
        sa.sun_family = libc::AF_UNIX as libc::sa_family_t;
        let bytes = addr.as_bytes();
        if bytes.is_empty() || bytes.contains(&0) {
            return None;
        }
        let (abstract_ns, name) = match bytes.strip_prefix(b"@") {
            Some(rest) if !rest.is_empty() => (true, rest),
            Some(_) => return None,
            None => (false, bytes),
        };
        // Abstract: a leading NUL then the name. Path: the name then a NUL.
        let need = name.len() + 1;
        if need > sa.sun_path.len() {
            return None;
        }
        let start = usize::from(abstract_ns);
        for (d, s) in sa.sun_path[start..].iter_mut().zip(name) {
            *d = *s as libc::c_char;
        }
        let path_off = std::mem::size_of::<libc::sa_family_t>();
        // Abstract: NUL + name; path: name + NUL. Either way name + 1 bytes.
        let used = name.len() + 1;
        Some(UnixAddr {
            addr: sa,
            len: (path_off + used) as libc::socklen_t,
            path: (!abstract_ns).then(|| PathBuf::from(addr)),
        })
    }
}

fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn new_socket() -> io::Result<OwnedFd> {
    // SAFETY: plain socket(2) call.
    let fd = cvt(unsafe {
        libc::socket(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    })?;
    // SAFETY: fresh descriptor nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn sockaddr_ptr(a: &UnixAddr) -> *const libc::sockaddr {
    (&a.addr as *const libc::sockaddr_un).cast()
}

/// Bind and listen at `a`. A stale socket file at a path address (one nobody
/// listens on any more) is removed and the bind retried; a live one is
/// `AddrInUse`.
pub fn listen(a: &UnixAddr) -> io::Result<OwnedFd> {
    let fd = new_socket()?;
    // SAFETY: valid descriptor and a sockaddr_un of `len` bytes.
    let mut r = unsafe { libc::bind(fd.as_raw_fd(), sockaddr_ptr(a), a.len) };
    if r != 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EADDRINUSE) {
        if let Some(path) = &a.path {
            let is_socket = std::fs::symlink_metadata(path)
                .map(|m| std::os::unix::fs::FileTypeExt::is_socket(&m.file_type()))
                .unwrap_or(false);
            let refused = matches!(connect(a), Err(e) if e.raw_os_error() == Some(libc::ECONNREFUSED));
            if is_socket && refused {
                std::fs::remove_file(path)?;
                // SAFETY: as above.
                r = unsafe { libc::bind(fd.as_raw_fd(), sockaddr_ptr(a), a.len) };
            }
        }
    }
    cvt(r)?;
    // SAFETY: valid bound descriptor.
    cvt(unsafe { libc::listen(fd.as_raw_fd(), 128) })?;
    Ok(fd)
}

/// Accept one pending connection; `Ok(None)` when there is none.
pub fn accept(listener: BorrowedFd<'_>) -> io::Result<Option<OwnedFd>> {
    // SAFETY: valid listening descriptor; address out-parameters may be NULL.
    let r = unsafe {
        libc::accept4(
            listener.as_raw_fd(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
        )
    };
    if r < 0 {
        let e = io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::EAGAIN) | Some(libc::EINTR) | Some(libc::ECONNABORTED) => Ok(None),
            _ => Err(e),
        };
    }
    // SAFETY: fresh descriptor nothing else owns.
    Ok(Some(unsafe { OwnedFd::from_raw_fd(r) }))
}

/// Start a connection to `a`. `EAGAIN` (the listener's backlog is full) is an
/// error the caller may retry with [`connect_again`].
pub fn connect(a: &UnixAddr) -> io::Result<OwnedFd> {
    let fd = new_socket()?;
    connect_again(fd.as_raw_fd(), a)?;
    Ok(fd)
}

/// Retry `connect` on an unconnected socket.
pub fn connect_again(fd: RawFd, a: &UnixAddr) -> io::Result<()> {
    // SAFETY: valid descriptor and a sockaddr_un of `len` bytes.
    cvt(unsafe { libc::connect(fd, sockaddr_ptr(a), a.len) }).map(|_| ())
}

/// A fresh unconnected socket (for a connect to retry later).
pub fn unconnected() -> io::Result<OwnedFd> {
    new_socket()
}

/// Space for a control message carrying [`MAX_FDS`] descriptors.
const CMSG_SPACE_MAX: usize = {
    // CMSG_SPACE(n * 4) = CMSG_ALIGN(sizeof(cmsghdr)) + CMSG_ALIGN(n * 4).
    let hdr = (std::mem::size_of::<libc::cmsghdr>() + 7) & !7;
    hdr + ((MAX_FDS * 4 + 7) & !7)
};

/// `cmsghdr`-aligned control buffer.
#[repr(C, align(8))]
struct CmsgBuf([u8; CMSG_SPACE_MAX]);

/// Send one message with `fds` attached (non-blocking, no `SIGPIPE`).
pub fn send_msg(sock: BorrowedFd<'_>, data: &[u8], fds: &[BorrowedFd<'_>]) -> io::Result<()> {
    if fds.len() > MAX_FDS {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "too many descriptors"));
    }
    let mut iov = libc::iovec {
        iov_base: data.as_ptr() as *mut libc::c_void,
        iov_len: data.len(),
    };
    let mut cbuf = CmsgBuf([0; CMSG_SPACE_MAX]);
    // SAFETY: all-zero is a valid msghdr.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if !fds.is_empty() {
        let payload = std::mem::size_of_val(fds) as u32;
        // SAFETY: CMSG_SPACE is a pure computation.
        let space = unsafe { libc::CMSG_SPACE(payload) } as usize;
        debug_assert!(space <= CMSG_SPACE_MAX);
        msg.msg_control = cbuf.0.as_mut_ptr().cast();
        msg.msg_controllen = space as _;
        // SAFETY: msg_control points at `space` bytes of aligned, zeroed
        // buffer, enough for one header plus `fds.len()` descriptors, so
        // CMSG_FIRSTHDR is non-NULL and CMSG_DATA has room for the copy.
        unsafe {
            let c = libc::CMSG_FIRSTHDR(&msg);
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_RIGHTS;
            (*c).cmsg_len = libc::CMSG_LEN(payload) as _;
            let dst = libc::CMSG_DATA(c).cast::<RawFd>();
            for (i, fd) in fds.iter().enumerate() {
                dst.add(i).write_unaligned(fd.as_raw_fd());
            }
        }
    }
    // SAFETY: msg points at live iovec and control buffers for the call.
    let n = unsafe { libc::sendmsg(sock.as_raw_fd(), &msg, libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    if n as usize != data.len() {
        return Err(io::Error::new(io::ErrorKind::WriteZero, "short send"));
    }
    Ok(())
}

/// What a non-blocking receive found.
#[derive(Debug)]
pub enum Recv {
    /// A message of this many bytes (descriptors, if any, appended to the
    /// caller's vector).
    Msg(usize),
    /// Nothing to read yet.
    WouldBlock,
    /// The peer closed its end.
    Eof,
}

/// Receive one message into `buf`, taking ownership of any descriptors it
/// carried (appended to `fds`, at most [`MAX_FDS`]). A message that does not
/// fit `buf`, or whose descriptors were truncated, is an `InvalidData` error
/// (its descriptors are closed).
pub fn recv_msg(sock: BorrowedFd<'_>, buf: &mut [u8], fds: &mut Vec<OwnedFd>) -> io::Result<Recv> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let mut cbuf = CmsgBuf([0; CMSG_SPACE_MAX]);
    // SAFETY: all-zero is a valid msghdr.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.0.as_mut_ptr().cast();
    msg.msg_controllen = CMSG_SPACE_MAX as _;
    // SAFETY: msg points at live buffers of the stated sizes.
    let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_DONTWAIT | libc::MSG_CMSG_CLOEXEC) };
    if n < 0 {
        let e = io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::EAGAIN) | Some(libc::EINTR) => Ok(Recv::WouldBlock),
            Some(libc::ECONNRESET) => Ok(Recv::Eof),
            _ => Err(e),
        };
    }
    // Take ownership of every descriptor first, so that any error path below
    // closes them.
    let start = fds.len();
    // SAFETY: the kernel filled msg_control/msg_controllen; the CMSG macros
    // walk only within that buffer, and each SCM_RIGHTS payload holds
    // (cmsg_len - CMSG_LEN(0)) / 4 descriptors that are now ours.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let data_len = ((*c).cmsg_len as usize).saturating_sub(libc::CMSG_LEN(0) as usize);
                let count = data_len / std::mem::size_of::<RawFd>();
                let src = libc::CMSG_DATA(c).cast::<RawFd>();
                for i in 0..count {
                    let raw = src.add(i).read_unaligned();
                    if raw >= 0 {
                        fds.push(OwnedFd::from_raw_fd(raw));
                    }
                }
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    if msg.msg_flags & (libc::MSG_TRUNC | libc::MSG_CTRUNC) != 0 || fds.len() - start > MAX_FDS {
        fds.truncate(start);
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "message or descriptors truncated",
        ));
    }
    if n == 0 && fds.len() == start {
        return Ok(Recv::Eof);
    }
    Ok(Recv::Msg(n as usize))
}

/// Shut a connected socket down both ways (the peer sees end-of-file).
pub fn shutdown(sock: BorrowedFd<'_>) {
    // SAFETY: shutdown on a valid descriptor; errors (ENOTCONN) are ignored:
    // the descriptor is closed right after anyway.
    unsafe {
        libc::shutdown(sock.as_raw_fd(), libc::SHUT_RDWR);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn parse_addresses() {
        assert!(UnixAddr::parse("").is_none());
        assert!(UnixAddr::parse("@").is_none());
        assert!(UnixAddr::parse("a\0b").is_none());
        assert!(UnixAddr::parse(&"x".repeat(200)).is_none());
        let a = UnixAddr::parse("@abc").unwrap();
        assert!(a.path.is_none());
        let p = UnixAddr::parse("/tmp/x.sock").unwrap();
        assert_eq!(p.path.as_deref(), Some(std::path::Path::new("/tmp/x.sock")));
    }

    #[test]
    fn message_with_descriptors_round_trips() {
        let name = format!("@rpcrdma-sock-test-{}", std::process::id());
        let a = UnixAddr::parse(&name).unwrap();
        let l = listen(&a).unwrap();
        let c = connect(&a).unwrap();
        let s = loop {
            if let Some(s) = accept(l.as_fd()).unwrap() {
                break s;
            }
        };
        let f = super::super::mapping::SharedFile::create("sock-test", 4096).unwrap();
        send_msg(c.as_fd(), b"hello", &[f.fd(), f.fd()]).unwrap();
        let mut buf = [0u8; 64];
        let mut fds = Vec::new();
        let n = loop {
            match recv_msg(s.as_fd(), &mut buf, &mut fds).unwrap() {
                Recv::Msg(n) => break n,
                Recv::WouldBlock => std::thread::yield_now(),
                Recv::Eof => panic!("eof"),
            }
        };
        assert_eq!(&buf[..n], b"hello");
        assert_eq!(fds.len(), 2);
        assert!(matches!(
            recv_msg(s.as_fd(), &mut buf, &mut fds).unwrap(),
            Recv::WouldBlock
        ));
        // A message that does not fit is refused, not truncated silently.
        send_msg(c.as_fd(), &[1u8; 100], &[]).unwrap();
        assert!(recv_msg(s.as_fd(), &mut buf, &mut fds).is_err());
        drop(c);
        assert!(matches!(recv_msg(s.as_fd(), &mut buf, &mut fds).unwrap(), Recv::Eof));
    }
}
