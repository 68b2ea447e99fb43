//! An NFSv4.1 test client over the transports of `nfs_common`: COMPOUNDs
//! built by hand from the XDR of RFC 8881, replies decoded field by field.

#![allow(dead_code)]

use super::nfs_common::*;
use dataplane::requester::CallOutcome;
use dataplane::Fabric;
use proto::nfs4::*;
use proto::plan::ReplyNeeds;
use proto::ulb::DdpItem;

/// Carries one COMPOUND; `read_max`: the Write chunk a READ that ends it
/// may fill.
pub trait V4Transport {
    fn rt(&mut self, call: &[u8], read_max: Option<u32>) -> Option<Vec<u8>>;
}

impl V4Transport for Direct {
    fn rt(&mut self, call: &[u8], _read_max: Option<u32>) -> Option<Vec<u8>> {
        self.roundtrip(call)
    }
}

impl V4Transport for Tcp {
    fn rt(&mut self, call: &[u8], _read_max: Option<u32>) -> Option<Vec<u8>> {
        self.roundtrip(call)
    }
}

/// Counts of how the engine carried v4 Calls.
impl<F: Fabric> V4Transport for Engine<F> {
    fn rt(&mut self, call: &[u8], read_max: Option<u32>) -> Option<Vec<u8>> {
        let t0 = std::time::Instant::now();
        while !self.cli.can_submit() {
            self.cli.poll();
            self.pump();
            assert!(t0.elapsed().as_secs() < 30, "cannot submit");
        }
        let mut cb = self.cli.call_buf().expect("call buffer");
        cb.bytes_mut()[..call.len()].copy_from_slice(call);
        let mut items = [DdpItem::default(); 2];
        let k = proto::nfs4::ulb::call_items(call, &mut items);
        if k > 0 && items[0].len > 0 {
            self.carried.read_chunk_calls += 1;
        }
        let wc: Vec<u32> = read_max.into_iter().collect();
        // A READ's reply without its data is small (no Reply chunk, the
        // shape the engine places directly); anything else may be large.
        let max_reply = if read_max.is_some() { 1024 } else { 64 * 1024 };
        let needs = ReplyNeeds::new(&wc, max_reply).unwrap();
        let id = self
            .cli
            .submit(cb, call.len(), &items[..k], &needs)
            .map_err(|(e, _)| e)
            .expect("submit");
        let done = loop {
            self.cli.poll();
            self.pump();
            if let Some(c) = self.cli.poll_completion() {
                break c;
            }
            assert!(
                t0.elapsed().as_secs() < 60,
                "no reply: {:?} {:?}",
                self.cli.stats(),
                self.srv.as_ref().map(|s| s.stats())
            );
        };
        assert_eq!(done.id, id);
        assert_eq!(done.outcome, CallOutcome::Reply, "transport outcome");
        let v = self.cli.reply(done.id).expect("reply view");
        let used = v.write_chunk(0).is_some_and(|d| !d.is_empty());
        // READ ends the COMPOUND: its data goes at the end of the reduced
        // reply.
        let positions: Vec<u32> = if used {
            self.carried.write_chunk_replies += 1;
            vec![v.reduced.len() as u32]
        } else {
            vec![]
        };
        let mut out = vec![0u8; 2 * MIB];
        let n = v.reassemble(&positions, &mut out).expect("reassemble");
        out.truncate(n);
        self.cli.release(done.id);
        out[..4].copy_from_slice(&call[..4]);
        Some(out)
    }
}

/// The decoded top of a COMPOUND4res and a cursor over the results.
pub struct Res {
    pub reply: Reply,
    pub status: u32,
    pub numres: u32,
    pub at: usize,
}

impl Res {
    pub fn dec(&self) -> Dec<'_> {
        let mut d = self.reply.dec();
        d.r.skip(self.at, "to results").unwrap();
        d
    }
}

/// Decode the COMPOUND4res header.
pub fn parse(reply: Reply) -> Res {
    let mut d = reply.dec();
    let status = d.u32();
    let _tag = d.opaque();
    let numres = d.u32();
    let at = d.r.pos();
    Res {
        reply,
        status,
        numres,
        at,
    }
}

/// Operation arguments, encoded.
pub fn op(f: impl FnOnce(&mut Enc)) -> Vec<u8> {
    let mut e = Enc::default();
    f(&mut e);
    e.b
}

pub fn putfh(fh: &[u8]) -> Vec<u8> {
    op(|e| {
        e.u32(OP_PUTFH).opaque(fh);
    })
}
pub fn putrootfh() -> Vec<u8> {
    op(|e| {
        e.u32(OP_PUTROOTFH);
    })
}
pub fn getfh() -> Vec<u8> {
    op(|e| {
        e.u32(OP_GETFH);
    })
}
pub fn lookup(name: &str) -> Vec<u8> {
    op(|e| {
        e.u32(OP_LOOKUP).opaque(name.as_bytes());
    })
}
pub fn getattr(attrs: &[u32]) -> Vec<u8> {
    let b = Bitmap::of(attrs);
    op(|e| {
        e.u32(OP_GETATTR).u32(3);
        for w in b.words {
            e.u32(w);
        }
    })
}
pub fn stateid(e: &mut Enc, s: &Stateid) {
    e.u32(s.seqid).fixed(&s.other);
}
pub fn read(s: &Stateid, off: u64, count: u32) -> Vec<u8> {
    op(|e| {
        e.u32(OP_READ);
        stateid(e, s);
        e.u64(off).u32(count);
    })
}
pub fn write(s: &Stateid, off: u64, stable: u32, data: &[u8]) -> Vec<u8> {
    op(|e| {
        e.u32(OP_WRITE);
        stateid(e, s);
        e.u64(off).u32(stable).opaque(data);
    })
}
/// `fattr4` with mode only.
pub fn mode_attrs(e: &mut Enc, mode: Option<u32>) {
    match mode {
        Some(m) => {
            e.u32(2).u32(0).u32(1 << (FATTR4_MODE - 32)).u32(4).u32(m);
        }
        None => {
            e.u32(0).u32(0);
        }
    }
}
/// OPEN by name; `how`: None (no create), or the createmode and mode /
/// verifier.
pub fn open(name: &str, access: u32, deny: u32, owner: &[u8], how: Option<(u32, u32, [u8; 8])>) -> Vec<u8> {
    op(|e| {
        e.u32(OP_OPEN).u32(0).u32(access).u32(deny).u64(0).opaque(owner);
        match how {
            None => {
                e.u32(OPEN4_NOCREATE);
            }
            Some((mode, m, v)) => {
                e.u32(OPEN4_CREATE).u32(mode);
                match mode {
                    EXCLUSIVE4 => {
                        e.fixed(&v);
                    }
                    EXCLUSIVE4_1 => {
                        e.fixed(&v);
                        mode_attrs(e, Some(m));
                    }
                    _ => mode_attrs(e, Some(m)),
                }
            }
        }
        e.u32(CLAIM_NULL).opaque(name.as_bytes());
    })
}
pub fn close(s: &Stateid) -> Vec<u8> {
    op(|e| {
        e.u32(OP_CLOSE).u32(0);
        stateid(e, s);
    })
}

/// Skip SEQUENCE4resok; its slot count (highest slot + 1).
pub fn seq_res(d: &mut Dec<'_>) -> u32 {
    d.fixed(16);
    d.u32();
    d.u32();
    let highest = d.u32();
    d.u32();
    d.u32();
    highest + 1
}

/// Read one result's operation number and status.
pub fn res(d: &mut Dec<'_>, opnum: u32) -> u32 {
    assert_eq!(d.u32(), opnum, "result's operation");
    d.u32()
}

pub fn get_stateid(d: &mut Dec<'_>) -> Stateid {
    let seqid = d.u32();
    let mut other = [0u8; 12];
    other.copy_from_slice(&d.fixed(12));
    Stateid { seqid, other }
}

/// Skip OPEN4resok after the stateid.
pub fn open_rest(d: &mut Dec<'_>) {
    d.bool();
    d.u64();
    d.u64();
    d.u32();
    let n = d.u32();
    for _ in 0..n {
        d.u32();
    }
    assert_eq!(d.u32(), OPEN_DELEGATE_NONE);
}

/// Decoded attributes by number (u64 values; owners parsed).
pub fn attrs(d: &mut Dec<'_>) -> Vec<(u32, u64)> {
    let n = d.u32();
    let mut words = [0u32; 3];
    for i in 0..n as usize {
        let w = d.u32();
        if let Some(slot) = words.get_mut(i) {
            *slot = w;
        }
    }
    let vals = d.opaque();
    let mut r = proto::xdr::Reader::new(&vals);
    let mut out = vec![];
    for a in (Bitmap { words }).iter() {
        let v = match a {
            FATTR4_SUPPORTED_ATTRS | FATTR4_SUPPATTR_EXCLCREAT => {
                let n = r.u32("n").unwrap();
                let mut first = 0;
                for i in 0..n {
                    let w = r.u32("w").unwrap();
                    if i == 0 {
                        first = u64::from(w);
                    }
                }
                first
            }
            FATTR4_TYPE
            | FATTR4_FH_EXPIRE_TYPE
            | FATTR4_LEASE_TIME
            | FATTR4_RDATTR_ERROR
            | FATTR4_MAXLINK
            | FATTR4_MAXNAME
            | FATTR4_MODE
            | FATTR4_NUMLINKS => u64::from(r.u32("u32").unwrap()),
            FATTR4_LINK_SUPPORT
            | FATTR4_SYMLINK_SUPPORT
            | FATTR4_NAMED_ATTR
            | FATTR4_UNIQUE_HANDLES
            | FATTR4_CANSETTIME
            | FATTR4_CASE_INSENSITIVE
            | FATTR4_CASE_PRESERVING
            | FATTR4_CHOWN_RESTRICTED
            | FATTR4_HOMOGENEOUS
            | FATTR4_NO_TRUNC => u64::from(r.bool("bool").unwrap()),
            FATTR4_FSID => {
                let major = r.u64("major").unwrap();
                let _minor = r.u64("minor").unwrap();
                major
            }
            FATTR4_FILEHANDLE => r.opaque_var(128, "fh").unwrap().len() as u64,
            FATTR4_OWNER | FATTR4_OWNER_GROUP => {
                let s = r.opaque_var(1024, "owner").unwrap();
                std::str::from_utf8(s).unwrap().parse().unwrap()
            }
            FATTR4_RAWDEV => {
                let a = r.u32("major").unwrap();
                let b = r.u32("minor").unwrap();
                (u64::from(a) << 32) | u64::from(b)
            }
            FATTR4_TIME_ACCESS | FATTR4_TIME_DELTA | FATTR4_TIME_METADATA | FATTR4_TIME_MODIFY => {
                let s = r.u64("s").unwrap();
                r.u32("ns").unwrap();
                s
            }
            _ => r.u64("u64").unwrap(),
        };
        out.push((a, v));
    }
    assert_eq!(r.remaining(), 0, "attr_vals fully used");
    out
}

pub fn attr(list: &[(u32, u64)], a: u32) -> Option<u64> {
    list.iter().find(|x| x.0 == a).map(|x| x.1)
}

/// An NFSv4.1 client: one session, sequence ids per slot.
pub struct V4<T: V4Transport> {
    pub t: T,
    pub auth: Auth,
    pub xid: u32,
    pub minor: u32,
    pub owner: Vec<u8>,
    pub verifier: [u8; 8],
    pub clientid: u64,
    pub sid: [u8; 16],
    pub seq: Vec<u32>,
    pub slots: u32,
}

impl<T: V4Transport> V4<T> {
    pub fn new(t: T, owner: &str) -> Self {
        V4 {
            t,
            auth: Auth::root(),
            xid: 100,
            minor: 1,
            owner: owner.as_bytes().to_vec(),
            verifier: *b"verifier",
            clientid: 0,
            sid: [0; 16],
            seq: vec![],
            slots: 0,
        }
    }

    /// The encoded Call of a COMPOUND of `ops`.
    pub fn encode(&mut self, ops: &[Vec<u8>]) -> Vec<u8> {
        self.xid += 1;
        let mut e = call_header(self.xid, NFS, 4, 1, &self.auth);
        e.opaque(b"").u32(self.minor).u32(ops.len() as u32);
        for o in ops {
            e.b.extend_from_slice(o);
        }
        e.b
    }

    /// Send an encoded Call; the parsed reply.
    pub fn send(&mut self, call: &[u8], read_max: Option<u32>) -> Res {
        let bytes = self.t.rt(call, read_max).expect("dropped");
        parse(Reply::parse(&bytes))
    }

    pub fn compound(&mut self, ops: &[Vec<u8>]) -> Res {
        let c = self.encode(ops);
        self.send(&c, None)
    }

    /// SEQUENCE for `slot` with its next sequence id.
    pub fn sequence(&mut self, slot: u32, cachethis: bool) -> Vec<u8> {
        self.seq[slot as usize] += 1;
        let s = self.seq[slot as usize];
        let sid = self.sid;
        op(|e| {
            e.u32(OP_SEQUENCE).fixed(&sid).u32(s).u32(slot).u32(0).bool(cachethis);
        })
    }

    /// SEQUENCE on slot 0 and `ops`; the results after SEQUENCE's.
    pub fn seq(&mut self, ops: &[Vec<u8>]) -> Res {
        self.seq_read(ops, None)
    }

    pub fn seq_read(&mut self, ops: &[Vec<u8>], read_max: Option<u32>) -> Res {
        let mut all = vec![self.sequence(0, true)];
        all.extend_from_slice(ops);
        let c = self.encode(&all);
        let mut r = self.send(&c, read_max);
        let mut d = r.dec();
        assert_eq!(res(&mut d, OP_SEQUENCE), NFS4_OK, "SEQUENCE");
        seq_res(&mut d);
        r.at = d.r.pos();
        r
    }

    /// EXCHANGE_ID, CREATE_SESSION (asking for `slots`), RECLAIM_COMPLETE.
    pub fn setup(&mut self, slots: u32) {
        self.session(slots);
        let r = self.seq(&[op(|e| {
            e.u32(OP_RECLAIM_COMPLETE).bool(false);
        })]);
        assert_eq!(r.status, NFS4_OK, "RECLAIM_COMPLETE");
    }

    /// EXCHANGE_ID and CREATE_SESSION (asking for `slots`).
    pub fn session(&mut self, slots: u32) {
        let (owner, verf) = (self.owner.clone(), self.verifier);
        let r = self.compound(&[op(|e| {
            e.u32(OP_EXCHANGE_ID)
                .fixed(&verf)
                .opaque(&owner)
                .u32(0)
                .u32(SP4_NONE)
                .u32(0);
        })]);
        assert_eq!(r.status, NFS4_OK, "EXCHANGE_ID");
        let mut d = r.dec();
        assert_eq!(res(&mut d, OP_EXCHANGE_ID), NFS4_OK);
        self.clientid = d.u64();
        let seq = d.u32();
        let clientid = self.clientid;
        let r = self.compound(&[op(|e| {
            e.u32(OP_CREATE_SESSION).u64(clientid).u32(seq).u32(0);
            e.u32(0).u32(1 << 20).u32(1 << 20).u32(4096).u32(16).u32(slots).u32(0);
            e.u32(0).u32(4096).u32(4096).u32(0).u32(2).u32(1).u32(0);
            e.u32(0x4000_0000).u32(1).u32(0);
        })]);
        assert_eq!(r.status, NFS4_OK, "CREATE_SESSION");
        let mut d = r.dec();
        assert_eq!(res(&mut d, OP_CREATE_SESSION), NFS4_OK);
        self.sid.copy_from_slice(&d.fixed(16));
        assert_eq!(d.u32(), seq);
        assert_eq!(d.u32(), 0, "no back channel granted");
        let _pad = d.u32();
        let _req = d.u32();
        let _resp = d.u32();
        let _cached = d.u32();
        let _ops = d.u32();
        self.slots = d.u32();
        self.seq = vec![0; self.slots as usize];
    }

    /// The handle of `path` (from the root, component by component).
    pub fn walk(&mut self, path: &str) -> Result<Vec<u8>, u32> {
        let mut ops = vec![putrootfh()];
        for c in path.split('/').filter(|c| !c.is_empty()) {
            ops.push(lookup(c));
        }
        ops.push(getfh());
        let r = self.seq(&ops);
        if r.status != NFS4_OK {
            return Err(r.status);
        }
        let mut d = r.dec();
        for _ in 0..ops.len() - 1 {
            d.u32();
            d.u32();
        }
        assert_eq!(res(&mut d, OP_GETFH), NFS4_OK);
        Ok(d.opaque())
    }

    /// OPEN in `dir`; the stateid and the file's handle.
    pub fn open(&mut self, dir: &[u8], o: Vec<u8>) -> Result<(Stateid, Vec<u8>), u32> {
        let r = self.seq(&[putfh(dir), o, getfh()]);
        if r.status != NFS4_OK {
            return Err(r.status);
        }
        let mut d = r.dec();
        res(&mut d, OP_PUTFH);
        assert_eq!(res(&mut d, OP_OPEN), NFS4_OK);
        let s = get_stateid(&mut d);
        open_rest(&mut d);
        assert_eq!(res(&mut d, OP_GETFH), NFS4_OK);
        Ok((s, d.opaque()))
    }

    pub fn write(
        &mut self,
        fh: &[u8],
        s: &Stateid,
        off: u64,
        stable: u32,
        data: &[u8],
    ) -> Result<(u32, u32, Vec<u8>), u32> {
        let r = self.seq(&[putfh(fh), write(s, off, stable, data)]);
        if r.status != NFS4_OK {
            return Err(r.status);
        }
        let mut d = r.dec();
        res(&mut d, OP_PUTFH);
        res(&mut d, OP_WRITE);
        Ok((d.u32(), d.u32(), d.fixed(8)))
    }

    pub fn read(&mut self, fh: &[u8], s: &Stateid, off: u64, count: u32) -> Result<(bool, Vec<u8>), u32> {
        let r = self.seq_read(&[putfh(fh), read(s, off, count)], Some(count));
        if r.status != NFS4_OK {
            return Err(r.status);
        }
        let mut d = r.dec();
        res(&mut d, OP_PUTFH);
        res(&mut d, OP_READ);
        let eof = d.bool();
        let data = d.opaque();
        d.end();
        Ok((eof, data))
    }
}
