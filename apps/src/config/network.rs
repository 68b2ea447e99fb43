//! Client networks of an export (`10.0.0.0/8`, `fd00::/8`, a bare host).

use std::net::IpAddr;

/// An IP network: address plus prefix length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpNetwork {
    /// Network address (host bits zero).
    pub addr: IpAddr,
    /// Prefix length.
    pub prefix_len: u8,
}

impl IpNetwork {
    /// Whether `a` is inside the network (an IPv4 address never matches an
    /// IPv6 network and vice versa).
    pub fn contains(&self, a: IpAddr) -> bool {
        match (self.addr, a) {
            (IpAddr::V4(n), IpAddr::V4(a)) => {
                let mask = prefix_mask_32(self.prefix_len);
                u32::from(n) & mask == u32::from(a) & mask
            }
            (IpAddr::V6(n), IpAddr::V6(a)) => {
                let mask = prefix_mask_128(self.prefix_len);
                u128::from(n) & mask == u128::from(a) & mask
            }
            _ => false,
        }
    }
}

fn prefix_mask_32(len: u8) -> u32 {
    if len == 0 {
        0
    } else {
        u32::MAX << (32 - u32::from(len.min(32)))
    }
}

fn prefix_mask_128(len: u8) -> u128 {
    if len == 0 {
        0
    } else {
        u128::MAX << (128 - u32::from(len.min(128)))
    }
}

/// Parses `addr` or `addr/len`. Errors say what was wrong.
pub fn parse_network(s: &str) -> Result<IpNetwork, &'static str> {
    let (a, len) = match s.split_once('/') {
        Some((a, l)) => (a, Some(l)),
        None => (s, None),
    };
    let addr: IpAddr = a.parse().map_err(|_| "not an IP address")?;
    let max = if addr.is_ipv4() { 32 } else { 128 };
    let prefix_len = match len {
        None => max,
        Some(l) => {
            if l.is_empty() || l.len() > 3 || !l.bytes().all(|b| b.is_ascii_digit()) {
                return Err("prefix length is not a number");
            }
            let v: u8 = l.parse().map_err(|_| "prefix length too long")?;
            if v > max {
                return Err("prefix length too long");
            }
            v
        }
    };
    let host_bits_zero = match addr {
        IpAddr::V4(v) => u32::from(v) & !prefix_mask_32(prefix_len) == 0,
        IpAddr::V6(v) => u128::from(v) & !prefix_mask_128(prefix_len) == 0,
    };
    if !host_bits_zero {
        return Err("host bits set below the prefix length");
    }
    Ok(IpNetwork { addr, prefix_len })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn networks() {
        let n = parse_network("10.0.0.0/8").unwrap();
        assert!(n.contains("10.1.2.3".parse().unwrap()));
        assert!(!n.contains("11.0.0.1".parse().unwrap()));
        assert!(!n.contains("::1".parse().unwrap()));
        let any = parse_network("0.0.0.0/0").unwrap();
        assert!(any.contains("203.0.113.9".parse().unwrap()));
        let host = parse_network("192.0.2.7").unwrap();
        assert_eq!(host.prefix_len, 32);
        assert!(host.contains("192.0.2.7".parse().unwrap()));
        assert!(!host.contains("192.0.2.8".parse().unwrap()));
        let v6 = parse_network("fd00::/8").unwrap();
        assert!(v6.contains("fd12::1".parse().unwrap()));
        assert!(!v6.contains("fe80::1".parse().unwrap()));
        assert_eq!(
            parse_network("10.0.0.1/8"),
            Err("host bits set below the prefix length")
        );
        assert_eq!(parse_network("10.0.0.0/33"), Err("prefix length too long"));
        assert_eq!(parse_network("10.0.0.0/"), Err("prefix length is not a number"));
        assert_eq!(parse_network("10.0.0.0/+8"), Err("prefix length is not a number"));
        assert_eq!(parse_network("ten/8"), Err("not an IP address"));
        assert!(parse_network("::/0").is_ok());
    }
}
