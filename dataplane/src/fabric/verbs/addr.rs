//! Address syntax of the verbs provider: `IP:PORT` (`10.0.2.15:20049`),
//! `[IPv6]:PORT`, or a bare IP address (port [`DEFAULT_PORT`]), turned into
//! the `sockaddr` RDMA-CM takes. Pure code: no device needed.

use std::net::{IpAddr, SocketAddr};

/// Port used when an address names none: the NFS/RDMA port (RFC 5666 s10,
/// kept by RFC 8267).
pub const DEFAULT_PORT: u16 = 20049;

/// Parse a verbs address. Host names are not resolved (no blocking DNS look-up
/// on a reactor core).
/// The peer IP of a connected or accepted cm_id.
///
/// # Safety
/// `id` must be a live cm_id.
pub unsafe fn peer_ip(id: &rdma_mummy_sys::rdma_cm_id) -> Option<std::net::IpAddr> {
    // SAFETY: the caller guarantees `id` is live; its route address union
    // holds a sockaddr of the family it names.
    unsafe {
        SockAddr::from_raw(rdma_mummy_sys::rdma_get_peer_addr(id))
            .to_std()
            .map(|a| a.ip())
    }
}

pub fn parse(s: &str) -> Option<SocketAddr> {
    let s = s.trim();
    if let Ok(a) = s.parse::<SocketAddr>() {
        return Some(a);
    }
    // A bare address: "10.0.2.15", "fe80::1" or "[fe80::1]".
    let bare = s.strip_prefix('[').and_then(|r| r.strip_suffix(']')).unwrap_or(s);
    bare.parse::<IpAddr>().ok().map(|ip| SocketAddr::new(ip, DEFAULT_PORT))
}

/// A socket address in the C layout RDMA-CM reads (`struct sockaddr_in` or
/// `sockaddr_in6` inside a `sockaddr_storage`).
#[derive(Clone, Copy)]
pub struct SockAddr {
    storage: libc::sockaddr_storage,
}

impl std::fmt::Debug for SockAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SockAddr({:?})", self.to_std())
    }
}

impl SockAddr {
    pub fn new(a: SocketAddr) -> SockAddr {
        // SAFETY: sockaddr_storage is plain old data; all-zero is a valid value
        // (family AF_UNSPEC) that is overwritten below.
        let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
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
                // SAFETY: sockaddr_storage is larger than and aligned at least
                // as strictly as sockaddr_in (POSIX guarantees both).
                unsafe { std::ptr::write(&mut storage as *mut _ as *mut libc::sockaddr_in, sin) };
            }
            SocketAddr::V6(v6) => {
                let sin6 = libc::sockaddr_in6 {
                    sin6_family: libc::AF_INET6 as libc::sa_family_t,
                    sin6_port: v6.port().to_be(),
                    sin6_flowinfo: v6.flowinfo().to_be(),
                    sin6_addr: libc::in6_addr {
                        s6_addr: v6.ip().octets(),
                    },
                    sin6_scope_id: v6.scope_id(),
                };
                // SAFETY: as above, for sockaddr_in6.
                unsafe { std::ptr::write(&mut storage as *mut _ as *mut libc::sockaddr_in6, sin6) };
            }
        }
        SockAddr { storage }
    }

    /// Copy a `sockaddr` that RDMA-CM filled in.
    ///
    /// # Safety
    /// `sa` must point to a valid `sockaddr_in` or `sockaddr_in6` when its
    /// family says so (RDMA-CM route addresses are a union large enough).
    pub unsafe fn from_raw(sa: &libc::sockaddr) -> SockAddr {
        // SAFETY: zeroed storage is a valid sockaddr_storage.
        let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        let len = match sa.sa_family as libc::c_int {
            libc::AF_INET => std::mem::size_of::<libc::sockaddr_in>(),
            libc::AF_INET6 => std::mem::size_of::<libc::sockaddr_in6>(),
            _ => 0,
        };
        // SAFETY: the caller guarantees `sa` holds `len` bytes for its family;
        // the storage is larger than either.
        unsafe { std::ptr::copy_nonoverlapping(sa as *const _ as *const u8, &mut storage as *mut _ as *mut u8, len) };
        SockAddr { storage }
    }

    /// Pointer for RDMA-CM calls (which only read it).
    pub fn as_mut_ptr(&mut self) -> *mut libc::sockaddr {
        &mut self.storage as *mut _ as *mut libc::sockaddr
    }

    /// Back to the standard type (what the C structure holds).
    pub fn to_std(&self) -> Option<SocketAddr> {
        match self.storage.ss_family as libc::c_int {
            libc::AF_INET => {
                // SAFETY: the family says the storage holds a sockaddr_in.
                let sin = unsafe { &*(&self.storage as *const _ as *const libc::sockaddr_in) };
                let ip = std::net::Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes());
                Some(SocketAddr::new(ip.into(), u16::from_be(sin.sin_port)))
            }
            libc::AF_INET6 => {
                // SAFETY: the family says the storage holds a sockaddr_in6.
                let sin6 = unsafe { &*(&self.storage as *const _ as *const libc::sockaddr_in6) };
                let ip = std::net::Ipv6Addr::from(sin6.sin6_addr.s6_addr);
                Some(SocketAddr::V6(std::net::SocketAddrV6::new(
                    ip,
                    u16::from_be(sin6.sin6_port),
                    u32::from_be(sin6.sin6_flowinfo),
                    sin6.sin6_scope_id,
                )))
            }
            _ => None,
        }
    }

    /// The address family (`AF_INET` / `AF_INET6`).
    pub fn family(&self) -> libc::c_int {
        self.storage.ss_family as libc::c_int
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_ip_port_and_bare_forms() {
        assert_eq!(parse("10.0.2.15:7471"), Some("10.0.2.15:7471".parse().unwrap()));
        assert_eq!(
            parse(" 10.0.2.15 "),
            Some(SocketAddr::new("10.0.2.15".parse().unwrap(), DEFAULT_PORT))
        );
        assert_eq!(parse("[fe80::1]:9"), Some("[fe80::1]:9".parse().unwrap()));
        assert_eq!(
            parse("[::1]"),
            Some(SocketAddr::new("::1".parse().unwrap(), DEFAULT_PORT))
        );
        assert_eq!(
            parse("::1"),
            Some(SocketAddr::new("::1".parse().unwrap(), DEFAULT_PORT))
        );
        assert_eq!(parse("0.0.0.0:1"), Some("0.0.0.0:1".parse().unwrap()));
    }

    #[test]
    fn rejects_garbage_and_host_names() {
        for bad in [
            "",
            "host:20049",
            "10.0.2.15:",
            "10.0.2.15:70000",
            "10.0.2:1",
            "[::1",
            "/tmp/sock",
            "@name",
        ] {
            assert_eq!(parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn sockaddr_v4_has_network_byte_order() {
        let mut s = SockAddr::new("10.0.2.15:20049".parse().unwrap());
        assert_eq!(s.family(), libc::AF_INET);
        // SAFETY: AF_INET storage holds a sockaddr_in.
        let sin = unsafe { &*(s.as_mut_ptr() as *const libc::sockaddr_in) };
        assert_eq!(sin.sin_port.to_ne_bytes(), 20049u16.to_be_bytes());
        assert_eq!(sin.sin_addr.s_addr.to_ne_bytes(), [10, 0, 2, 15]);
        assert_eq!(s.to_std(), Some("10.0.2.15:20049".parse().unwrap()));
    }

    #[test]
    fn sockaddr_v6_round_trips() {
        let a: SocketAddr = "[fe80::1:2]:4791".parse().unwrap();
        let s = SockAddr::new(a);
        assert_eq!(s.family(), libc::AF_INET6);
        assert_eq!(s.to_std(), Some(a));
    }
}
