//! `--nfs 4.1`: the NFSv4.1 set-up before a load, one COMPOUND at a time
//! over the set-up connection (RFC 8881 s18.35, s18.36, s18.51): a client
//! id (EXCHANGE_ID), a session for the set-up and one per load connection
//! (CREATE_SESSION, as many slots as the queue depth, the server may grant
//! fewer), RECLAIM_COMPLETE, then the file opened read-write (PUTROOTFH,
//! LOOKUP per export path component, OPEN, GETFH, GETATTR) and, for reads,
//! filled with FILE_SYNC WRITEs. Main thread. Over RPC-over-RDMA
//! ([`Session`]) or TCP ([`crate::tcpload::TcpSession`]).

use dataplane::Fabric;
use proto::plan::ReplyNeeds;
use proto::ulb::Nfs3Binding;
use proto::EncodeError;

use crate::engine::{NfsCaller, NfsFile, Session, V4Load, Workload};
use crate::nfs::ReplyError;
use crate::nfs4::{self, Slot};
use crate::run::RunConfig;
use crate::PerfError;

/// One set-up COMPOUND at a time: encode (XID 0: the caller sets it), send,
/// wait, and hand `parse` the reply (reduced, over RPC-over-RDMA) and the
/// XID. Replies are small (a Reply chunk of 4 KiB where one is needed).
pub trait CompoundCaller {
    fn compound<T>(
        &mut self,
        binding: &Nfs3Binding,
        encode: impl FnOnce(&mut [u8]) -> Result<usize, EncodeError>,
        parse: impl FnOnce(&[u8], u32) -> Result<T, ReplyError>,
    ) -> Result<T, PerfError>;
}

impl<F: Fabric> CompoundCaller for Session<'_, F> {
    fn compound<T>(
        &mut self,
        binding: &Nfs3Binding,
        encode: impl FnOnce(&mut [u8]) -> Result<usize, EncodeError>,
        parse: impl FnOnce(&[u8], u32) -> Result<T, ReplyError>,
    ) -> Result<T, PerfError> {
        let small = ReplyNeeds::new(&[], 4096).unwrap_or_default();
        self.call(binding, &small, encode, |v, xid| parse(v.reduced, xid))
    }
}

impl CompoundCaller for crate::tcpload::TcpSession {
    fn compound<T>(
        &mut self,
        binding: &Nfs3Binding,
        encode: impl FnOnce(&mut [u8]) -> Result<usize, EncodeError>,
        parse: impl FnOnce(&[u8], u32) -> Result<T, ReplyError>,
    ) -> Result<T, PerfError> {
        self.nfs_call(binding, 0, encode, |reply, _, xid| parse(reply, xid))
    }
}

/// A session slot used one Call at a time (slot 0 of the set-up session).
struct SetupSlot {
    session: [u8; proto::nfs4::NFS4_SESSIONID_SIZE],
    seq: u32,
}

impl SetupSlot {
    fn next(&mut self) -> Slot {
        self.seq += 1;
        Slot {
            session: self.session,
            slot: 0,
            seq: self.seq,
            highest: 0,
        }
    }
}

fn nfs_err(what: &'static str) -> impl Fn(PerfError) -> PerfError {
    move |e| match e {
        PerfError::Nfs { status, .. } => PerfError::Nfs { what, status },
        e => e,
    }
}

/// Set up sessions (and the file, for READ and WRITE loads) into `wl`.
pub fn setup<C: CompoundCaller>(s: &mut C, wl: &mut Workload, cfg: &RunConfig) -> Result<(), PerfError> {
    let b = wl.binding;
    let cred = wl.cred.clone();
    let owner = format!("perf-{}-{}", std::process::id(), clock_nonce());
    let (clientid, mut cs_seq) = s
        .compound(
            &b,
            |buf| nfs4::encode_exchange_id(buf, 0, &cred, owner.as_bytes()),
            |v, xid| nfs4::parse_exchange_id(v, Some(xid)),
        )
        .map_err(nfs_err("EXCHANGE_ID"))?;
    let max_bytes = (wl.io_size + 4096).max(8192);
    let mut create = |s: &mut C, slots: u32| {
        let r = s
            .compound(
                &b,
                |buf| nfs4::encode_create_session(buf, 0, &cred, clientid, cs_seq, slots, max_bytes, 0),
                |v, xid| nfs4::parse_create_session(v, Some(xid)),
            )
            .map_err(nfs_err("CREATE_SESSION"));
        cs_seq = cs_seq.wrapping_add(1);
        r
    };
    let (sid, _) = create(s, 1)?;
    let mut loads = V4Load {
        sessions: Vec::with_capacity(cfg.conns as usize),
        slots: Vec::with_capacity(cfg.conns as usize),
        stateid: proto::nfs4::Stateid::default(),
    };
    for _ in 0..cfg.conns {
        let (sid, slots) = create(s, cfg.qd)?;
        loads.sessions.push(sid);
        loads.slots.push(slots);
    }
    let mut slot = SetupSlot { session: sid, seq: 0 };
    let sl = slot.next();
    s.compound(
        &b,
        |buf| nfs4::encode_reclaim_complete(buf, 0, &cred, &sl),
        |v, xid| nfs4::parse_status(v, Some(xid)),
    )
    .map_err(nfs_err("RECLAIM_COMPLETE"))?;
    if let Some(n) = cfg.nfs.as_ref() {
        let sl = slot.next();
        let parts = n.export.split('/').filter(|c| !c.is_empty()).count();
        let o = s
            .compound(
                &b,
                |buf| {
                    let both = proto::nfs4::OPEN4_SHARE_ACCESS_BOTH;
                    nfs4::encode_open(buf, 0, &cred, &sl, clientid, &n.export, &n.file, n.create, both)
                },
                |v, xid| nfs4::parse_open(v, Some(xid), parts),
            )
            .map_err(|e| match e {
                PerfError::Nfs {
                    status: proto::nfs4::NFS4ERR_NOENT,
                    ..
                } => PerfError::Other(format!("{}/{} does not exist (use --create)", n.export, n.file)),
                e => nfs_err("OPEN")(e),
            })?;
        if o.ftype != proto::nfs4::NF4REG {
            return Err(PerfError::Other(format!("{} is not a regular file", n.file)));
        }
        loads.stateid = o.stateid;
        let size = n.file_size - n.file_size % u64::from(cfg.size);
        if wl.kind.reads() && (o.size < size || cfg.verify) {
            fill(s, wl, &mut slot, &o, size)?;
        }
        wl.file = Some(NfsFile { fh: o.fh, size });
    }
    wl.v4 = Some(loads);
    Ok(())
}

/// Write `[0, size)` with the --verify pattern, FILE_SYNC, `io_size` at a
/// time.
fn fill<C: CompoundCaller>(
    s: &mut C,
    wl: &Workload,
    slot: &mut SetupSlot,
    o: &nfs4::Opened,
    size: u64,
) -> Result<(), PerfError> {
    let n = wl.io_size;
    let mut off = 0u64;
    while off < size {
        let sl = slot.next();
        let got = s
            .compound(
                &wl.binding,
                |buf| {
                    let at = nfs4::encode_write_head(
                        buf,
                        0,
                        &wl.cred,
                        &sl,
                        &o.fh,
                        &o.stateid,
                        off,
                        n,
                        proto::nfs4::FILE_SYNC4,
                    )?;
                    crate::pattern::fill(&mut buf[at..at + n as usize], off, wl.salt);
                    Ok(crate::nfs::write_call_len(at, n))
                },
                |v, xid| nfs4::parse_write(v, Some(xid)),
            )
            .map_err(nfs_err("WRITE"))?;
        if got != n {
            return Err(PerfError::Other("short WRITE filling the file".into()));
        }
        off += u64::from(n);
    }
    Ok(())
}

/// A number that differs between runs (client owner).
fn clock_nonce() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}
