//! rpcbind's wire format, sans-IO: the PMAP v2 (RFC 1833 section 3) and
//! RPCB v3/v4 (RFC 1833 section 2) Calls the gateway answers and sends.
//!
//! [`answer`] is the whole responder: one Call in, one reply out (or
//! nothing). [`encode_rpcb_call`] and [`decode_bool_reply`] are the
//! registration client's half (RPCB SET and UNSET to the host's rpcbind).
//! Every decoder bounds-checks: netid and address strings are at most
//! [`MAX_STRING_BYTES`], lists are never sized from the peer.

use std::net::IpAddr;

use proto::rpc::{self, AcceptedReply, CallHeader, OpaqueAuth, ReplyHeader};
use proto::xdr::{Reader, Writer};

/// rpcbind's program number (PMAP and RPCB alike).
pub const RPCBIND_PROGRAM: u32 = 100_000;
/// Portmapper version (RFC 1833 section 3).
pub const PMAP_V2: u32 = 2;
/// RPCBIND versions 3 and 4 (RFC 1833 section 2).
pub const RPCB_V3: u32 = 3;
pub const RPCB_V4: u32 = 4;

/// Procedures of PMAP v2 (RFC 1833 section 3.2).
pub const PMAPPROC_NULL: u32 = 0;
pub const PMAPPROC_SET: u32 = 1;
pub const PMAPPROC_UNSET: u32 = 2;
pub const PMAPPROC_GETPORT: u32 = 3;
pub const PMAPPROC_DUMP: u32 = 4;

/// Procedures of RPCB v3 and v4 (RFC 1833 section 2.2) that the responder
/// answers or the client sends.
pub const RPCBPROC_NULL: u32 = 0;
pub const RPCBPROC_SET: u32 = 1;
pub const RPCBPROC_UNSET: u32 = 2;
pub const RPCBPROC_GETADDR: u32 = 3;
pub const RPCBPROC_DUMP: u32 = 4;
pub const RPCBPROC_GETTIME: u32 = 6;
/// v4 only: GETADDR for exactly the version asked.
pub const RPCBPROC_GETVERSADDR: u32 = 9;

/// `IPPROTO_TCP` and `IPPROTO_UDP`, the `prot` of a PMAP mapping.
pub const IPPROTO_TCP: u32 = 6;
pub const IPPROTO_UDP: u32 = 17;

/// Longest netid, universal address or owner string taken from a peer
/// (rpcbind's own strings are far shorter: "rdma6", an IPv6 address and a
/// port, a uid).
pub const MAX_STRING_BYTES: u32 = 128;

/// A transport's netid (the `r_netid` of RFC 1833 section 2.1; "rdma" and
/// "rdma6" are the names the Linux kernel gives RPC-over-RDMA,
/// `RPCBIND_NETID_RDMA`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Netid {
    Tcp,
    Tcp6,
    Udp,
    Udp6,
    Rdma,
    Rdma6,
}

impl Netid {
    pub fn as_str(self) -> &'static str {
        match self {
            Netid::Tcp => "tcp",
            Netid::Tcp6 => "tcp6",
            Netid::Udp => "udp",
            Netid::Udp6 => "udp6",
            Netid::Rdma => "rdma",
            Netid::Rdma6 => "rdma6",
        }
    }

    /// The netid of a stream socket (TCP) at `ip`'s family.
    pub fn tcp_for(ip: IpAddr) -> Netid {
        if ip.is_ipv4() {
            Netid::Tcp
        } else {
            Netid::Tcp6
        }
    }

    /// The netid of RPC-over-RDMA at `ip`'s family.
    pub fn rdma_for(ip: IpAddr) -> Netid {
        if ip.is_ipv4() {
            Netid::Rdma
        } else {
            Netid::Rdma6
        }
    }

    /// The PMAP v2 protocol number: only IPv4 TCP and UDP have one.
    pub fn pmap_prot(self) -> Option<u32> {
        match self {
            Netid::Tcp => Some(IPPROTO_TCP),
            Netid::Udp => Some(IPPROTO_UDP),
            _ => None,
        }
    }
}

/// One service the gateway offers: program, version, transport, address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mapping {
    pub prog: u32,
    pub vers: u32,
    pub netid: Netid,
    /// The listener's address; unspecified (`0.0.0.0`, `::`) when it
    /// listens on all, which the responder replaces with the address the
    /// caller reached.
    pub ip: IpAddr,
    pub port: u16,
}

/// The universal address of `ip` and `port` (RFC 1833 section 2.1 and
/// RFC 5665 section 5.2.3.4: the address, then the port as two decimal
/// bytes, high first: `10.0.2.15.78.81` is port 20049).
pub fn uaddr(ip: IpAddr, port: u16) -> String {
    format!("{ip}.{}.{}", port >> 8, port & 0xff)
}

/// The address and port of a universal address; `None` when malformed.
pub fn parse_uaddr(s: &str) -> Option<(IpAddr, u16)> {
    let (rest, lo) = s.rsplit_once('.')?;
    let (host, hi) = rest.rsplit_once('.')?;
    let hi: u8 = hi.parse().ok()?;
    let lo: u8 = lo.parse().ok()?;
    Some((host.parse().ok()?, u16::from(hi) << 8 | u16::from(lo)))
}

/// The mapping the caller asks for: the exact version when `exact`, else
/// (RPCB GETADDR, as rpcbind does) that version or, failing it, any version
/// of the program on that netid, so the caller learns the port and then gets
/// PROG_MISMATCH from the service itself.
fn find<'m>(maps: &'m [Mapping], prog: u32, vers: u32, netid: &[u8], exact: bool) -> Option<&'m Mapping> {
    let on = |m: &&Mapping| m.prog == prog && m.netid.as_str().as_bytes() == netid;
    maps.iter()
        .filter(on)
        .find(|m| m.vers == vers)
        .or_else(|| if exact { None } else { maps.iter().find(on) })
}

/// The address a mapping is reached at by a caller that reached us at
/// `local`: the mapping's own, or `local` when the listener takes all.
fn reached_at(m: &Mapping, local: IpAddr) -> IpAddr {
    if m.ip.is_unspecified() {
        local
    } else {
        m.ip
    }
}

/// `struct rpcb` (RFC 1833 section 2.1): program, version, netid, address,
/// owner.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rpcb<'a> {
    pub prog: u32,
    pub vers: u32,
    pub netid: &'a [u8],
    pub addr: &'a [u8],
    pub owner: &'a [u8],
}

impl<'a> Rpcb<'a> {
    pub fn decode(r: &mut Reader<'a>) -> Result<Self, proto::error::DecodeError> {
        Ok(Rpcb {
            prog: r.u32("r_prog")?,
            vers: r.u32("r_vers")?,
            netid: r.string(MAX_STRING_BYTES, "r_netid")?,
            addr: r.string(MAX_STRING_BYTES, "r_addr")?,
            owner: r.string(MAX_STRING_BYTES, "r_owner")?,
        })
    }

    pub fn encode(&self, w: &mut Writer<'_>) -> Result<(), proto::error::EncodeError> {
        w.put_u32(self.prog)?;
        w.put_u32(self.vers)?;
        w.put_opaque_var(self.netid)?;
        w.put_opaque_var(self.addr)?;
        w.put_opaque_var(self.owner)
    }
}

/// Answer one rpcbind Call (the record of a TCP connection or one UDP
/// datagram) from `maps`, reached by the caller at `local`; the reply is
/// written to `out` (cleared first). Returns `false` when nothing is to be
/// sent (not a Call, or a header that does not decode).
///
/// | Call | answer |
/// |---|---|
/// | PMAP v2 NULL, RPCB v3/v4 NULL | void |
/// | PMAP GETPORT (prog, vers, prot) | the port of that exact version, 0 if none (s3.2) |
/// | PMAP DUMP | every IPv4 TCP/UDP mapping |
/// | RPCB GETADDR (v3, v4) | the universal address of that version, else of any version of the program on that netid, "" if none (s2.2) |
/// | RPCB GETVERSADDR (v4) | that exact version only |
/// | RPCB DUMP | every mapping, owner "superuser" |
/// | RPCB GETTIME | the server's time in seconds |
/// | SET, UNSET (any version) | FALSE: the table is the gateway's own, not a registry |
/// | other procedures (CALLIT, BCAST, INDIRECT, GETADDRLIST, GETSTAT, UADDR2TADDR, TADDR2UADDR) | PROC_UNAVAIL |
/// | another program | PROG_UNAVAIL; another version: PROG_MISMATCH (2, 4) |
/// | arguments that do not decode | GARBAGE_ARGS |
pub fn answer(maps: &[Mapping], local: IpAddr, call: &[u8], out: &mut Vec<u8>) -> bool {
    out.clear();
    let Ok((xid, mtype)) = rpc::peek_msg(call) else {
        return false;
    };
    if mtype != rpc::CALL {
        return false;
    }
    let Ok((hdr, at)) = CallHeader::decode(call) else {
        return false;
    };
    // Room for the largest reply: a DUMP of every mapping (each at most
    // 4 * 5 + three strings of MAX_STRING_BYTES + 8), and a header.
    out.resize(64 + maps.len() * (28 + 3 * (4 + MAX_STRING_BYTES as usize)), 0);
    let why = match results(maps, local, &hdr, &call[at..], &mut Writer::new(out)) {
        Ok(n) => {
            out.truncate(n);
            return true;
        }
        Err(NotServed::Unknown) => unreachable_reply(&hdr),
        Err(NotServed::Garbage) => AcceptedReply::GarbageArgs,
        Err(NotServed::NoRoom) => AcceptedReply::SystemErr,
    };
    let mut w = Writer::new(out);
    if rpc::encode_reply_header(&mut w, &ReplyHeader::accepted(xid, OpaqueAuth::NONE, why)).is_err() {
        return false;
    }
    let n = w.len();
    out.truncate(n);
    true
}

/// Why [`results`] gave no reply of its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum NotServed {
    /// Another program, version or procedure.
    Unknown,
    /// Arguments that do not decode.
    Garbage,
    /// The reply does not fit (not with [`answer`]'s sizing).
    NoRoom,
}

/// The RPC-level error for a Call `results` does not serve.
fn unreachable_reply(hdr: &CallHeader<'_>) -> AcceptedReply {
    if hdr.prog != RPCBIND_PROGRAM {
        AcceptedReply::ProgUnavail
    } else if !(PMAP_V2..=RPCB_V4).contains(&hdr.vers) {
        AcceptedReply::ProgMismatch {
            low: PMAP_V2,
            high: RPCB_V4,
        }
    } else {
        AcceptedReply::ProcUnavail
    }
}

/// The whole reply of a served Call into `w`; its length.
fn results(
    maps: &[Mapping],
    local: IpAddr,
    hdr: &CallHeader<'_>,
    args: &[u8],
    w: &mut Writer<'_>,
) -> Result<usize, NotServed> {
    if hdr.prog != RPCBIND_PROGRAM || !(PMAP_V2..=RPCB_V4).contains(&hdr.vers) {
        return Err(NotServed::Unknown);
    }
    let mut r = Reader::new(args);
    let e = |_| NotServed::NoRoom;
    let g = |_| NotServed::Garbage;
    rpc::encode_reply_header(w, &ReplyHeader::success(hdr.xid, OpaqueAuth::NONE)).map_err(e)?;
    match (hdr.vers, hdr.proc_) {
        (_, 0) => {}
        (PMAP_V2, PMAPPROC_SET | PMAPPROC_UNSET) => {
            // struct mapping: prog, vers, prot, port.
            r.skip(16, "mapping").map_err(g)?;
            w.put_bool(false).map_err(e)?;
        }
        (PMAP_V2, PMAPPROC_GETPORT) => {
            let prog = r.u32("prog").map_err(g)?;
            let vers = r.u32("vers").map_err(g)?;
            let prot = r.u32("prot").map_err(g)?;
            let _port = r.u32("port").map_err(g)?;
            let port = maps
                .iter()
                .find(|m| m.prog == prog && m.vers == vers && m.netid.pmap_prot() == Some(prot))
                .map_or(0, |m| u32::from(m.port));
            w.put_u32(port).map_err(e)?;
        }
        (PMAP_V2, PMAPPROC_DUMP) => {
            for m in maps {
                if let Some(prot) = m.netid.pmap_prot() {
                    w.put_bool(true).map_err(e)?;
                    w.put_u32s([m.prog, m.vers, prot, u32::from(m.port)]).map_err(e)?;
                }
            }
            w.put_bool(false).map_err(e)?;
        }
        (RPCB_V3 | RPCB_V4, RPCBPROC_SET | RPCBPROC_UNSET) => {
            Rpcb::decode(&mut r).map_err(g)?;
            w.put_bool(false).map_err(e)?;
        }
        (RPCB_V3 | RPCB_V4, RPCBPROC_GETADDR) | (RPCB_V4, RPCBPROC_GETVERSADDR) => {
            let a = Rpcb::decode(&mut r).map_err(g)?;
            let exact = hdr.proc_ == RPCBPROC_GETVERSADDR;
            let addr = find(maps, a.prog, a.vers, a.netid, exact).map(|m| uaddr(reached_at(m, local), m.port));
            w.put_opaque_var(addr.as_deref().unwrap_or("").as_bytes()).map_err(e)?;
        }
        (RPCB_V3 | RPCB_V4, RPCBPROC_DUMP) => {
            for m in maps {
                w.put_bool(true).map_err(e)?;
                let addr = uaddr(m.ip, m.port);
                Rpcb {
                    prog: m.prog,
                    vers: m.vers,
                    netid: m.netid.as_str().as_bytes(),
                    addr: addr.as_bytes(),
                    owner: b"superuser",
                }
                .encode(w)
                .map_err(e)?;
            }
            w.put_bool(false).map_err(e)?;
        }
        (RPCB_V3 | RPCB_V4, RPCBPROC_GETTIME) => {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs() as u32);
            w.put_u32(now).map_err(e)?;
        }
        _ => return Err(NotServed::Unknown),
    }
    Ok(w.len())
}

/// An RPCB SET or UNSET Call (`proc_`) of version `vers` (3 or 4) for
/// `m`, the address given as `uaddr(m.ip, m.port)` and owner `owner`, with
/// an AUTH_NONE credential (rpcbind takes the owner from the local socket's
/// credentials).
pub fn encode_rpcb_call(xid: u32, vers: u32, proc_: u32, m: &Mapping, owner: &str) -> Vec<u8> {
    let addr = if proc_ == RPCBPROC_UNSET {
        String::new()
    } else {
        uaddr(m.ip, m.port)
    };
    let mut buf = vec![0u8; 512];
    let n = {
        let mut w = Writer::new(&mut buf);
        let hdr = CallHeader::new(xid, RPCBIND_PROGRAM, vers, proc_, OpaqueAuth::NONE, OpaqueAuth::NONE);
        // A Call of a few hundred bytes always fits.
        let ok = rpc::encode_call_header(&mut w, &hdr).is_ok()
            && Rpcb {
                prog: m.prog,
                vers: m.vers,
                netid: m.netid.as_str().as_bytes(),
                addr: addr.as_bytes(),
                owner: owner.as_bytes(),
            }
            .encode(&mut w)
            .is_ok();
        debug_assert!(ok, "an RPCB Call fits 512 bytes");
        w.len()
    };
    buf.truncate(n);
    buf
}

/// Why an rpcbind reply was not a boolean result.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReplyError {
    #[error("reply to another XID")]
    Xid,
    #[error("reply does not decode")]
    Garbage,
    #[error("rpcbind does not speak this version (PROG_MISMATCH)")]
    Version,
    #[error("rpcbind refused the call: {0}")]
    Refused(&'static str),
}

/// The `bool` result of a reply to Call `xid` (SET, UNSET).
pub fn decode_bool_reply(xid: u32, reply: &[u8]) -> Result<bool, ReplyError> {
    let (h, at) = ReplyHeader::decode(reply).map_err(|_| ReplyError::Garbage)?;
    if h.xid != xid {
        return Err(ReplyError::Xid);
    }
    match h.body {
        rpc::ReplyBody::Accepted {
            data: AcceptedReply::Success,
            ..
        } => Reader::new(&reply[at..])
            .bool("result")
            .map_err(|_| ReplyError::Garbage),
        rpc::ReplyBody::Accepted {
            data: AcceptedReply::ProgMismatch { .. },
            ..
        } => Err(ReplyError::Version),
        rpc::ReplyBody::Accepted { .. } => Err(ReplyError::Refused("not accepted")),
        rpc::ReplyBody::Denied(_) => Err(ReplyError::Refused("denied")),
    }
}
