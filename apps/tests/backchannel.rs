//! NFSv4.1 callbacks through the service's backward-direction hooks
//! (issue 23): backchannel binding by CREATE_SESSION and
//! BIND_CONN_TO_SESSION, the CB_NULL probe, SEQUENCE's CB_PATH_DOWN flags,
//! read delegations recalled with CB_RECALL (answered, unanswered and
//! revoked, lost with the connection and re-sent after a rebind, through
//! NFSv3), and CB_NOTIFY_LOCK after LOCKU.
//!
//! Each client talks to one `NfsService` (one core) over connections of its
//! own (`ConnId`s); the test plays the transport: it announces a
//! connection's backchannel with `backward_channel`, pulls the backward
//! Calls with `poll_backward_call`, decodes them by hand from RFC 8881
//! s20's XDR, and answers with `handle_backward_reply`.

mod nfs4_common;
mod nfs_common;

use std::cell::RefCell;
use std::net::IpAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use dataplane::service::{BackwardChannel, CallView, ReplyBuilder, Service};
use dataplane::ConnId;
use nfs4_common::*;
use nfs_common::*;
use proto::nfs3::{FILE_SYNC, NFS3ERR_JUKEBOX};
use proto::nfs4::*;
use proto::plan::Piece;
use proto::xdr::Reader;
use rpcrdma_apps::nfs::{NfsService, NfsShared};

const CB_PROG: u32 = 0x4000_0000;
const OP_CB_RECALL: u32 = 4;
const OP_CB_SEQUENCE: u32 = 11;
const OP_CB_NOTIFY_LOCK: u32 = 13;

type Svc = Rc<RefCell<NfsService>>;

/// One connection to the service.
struct Link {
    svc: Svc,
    conn: ConnId,
    peer: Option<IpAddr>,
}

impl Transport for Link {
    fn roundtrip(&mut self, call: &[u8]) -> Option<Vec<u8>> {
        let piece = [Piece::Inline {
            start: 0,
            len: call.len() as u32,
        }];
        let xid = Reader::new(call).u32("xid").unwrap_or(0);
        let view = CallView::contiguous(self.conn, self.peer, 1, xid, call, &piece);
        let mut svc = self.svc.borrow_mut();
        let hint = svc.reply_data_hint(&view);
        let mut head = vec![0u8; 8192];
        let mut data = vec![0u8; hint.max(1)];
        let mut rb = ReplyBuilder::new(&mut head, (hint > 0).then_some(&mut data[..]));
        svc.handle_call(&view, &mut rb).ok()?;
        let shape = rb.finish();
        let mut out = head[..shape.head_len as usize].to_vec();
        if shape.has_data {
            out.extend_from_slice(&data[..shape.data_len as usize]);
            out.resize(out.len() + shape.pad() as usize, 0);
        }
        Some(out)
    }
}

impl V4Transport for Link {
    fn rt(&mut self, call: &[u8], _read_max: Option<u32>) -> Option<Vec<u8>> {
        self.roundtrip(call)
    }
}

const CHAN: BackwardChannel = BackwardChannel {
    credits: 2,
    max_call_bytes: 1024,
    max_reply_bytes: 1024,
};

fn setup() -> (Store, Arc<NfsShared>, Svc) {
    let s = store(Kind::Mem, "b0");
    let mut b = Ex::new("/b", "b0");
    b.root_squash = false;
    let cfg = config(&["b0"], &[b], MIB as u32);
    let sh = NfsShared::new(&cfg, vec![("b0".into(), s.backend.clone())]).unwrap();
    let svc = Rc::new(RefCell::new(NfsService::new(sh.clone(), 0).unwrap()));
    (s, sh, svc)
}

fn link(svc: &Svc, conn: u32) -> Link {
    Link {
        svc: svc.clone(),
        conn: ConnId(conn),
        peer: Some("127.0.0.1".parse().unwrap()),
    }
}

/// A client without a backchannel.
fn plain(svc: &Svc, conn: u32, owner: &str) -> V4<Link> {
    let mut c = V4::new(link(svc, conn), owner);
    c.setup(8);
    c
}

/// A client whose CREATE_SESSION asks for the backchannel on its
/// connection (announced to the service first, as the transport does); the
/// CB_NULL probe is answered when `answer_probe`.
fn with_backchannel(svc: &Svc, conn: u32, owner: &str, answer_probe: bool) -> V4<Link> {
    svc.borrow_mut().backward_channel(ConnId(conn), Some(CHAN));
    let mut c = V4::new(link(svc, conn), owner);
    bc_session(&mut c);
    if answer_probe {
        let cb = pull(svc, conn).expect("CB_NULL probe");
        assert_eq!(cb.proc_, 0, "CB_NULL first");
        assert_eq!(cb.auth_flavor, proto::rpc::AUTH_SYS, "the client's callback security");
        answer(svc, conn, &cb, NFS4_OK);
    }
    c
}

/// EXCHANGE_ID, CREATE_SESSION with CREATE_SESSION4_FLAG_CONN_BACK_CHAN on
/// `c`'s connection (granted: one back-channel slot, two operations),
/// RECLAIM_COMPLETE.
fn bc_session<T: V4Transport>(c: &mut V4<T>) {
    let (o, verf) = (c.owner.clone(), c.verifier);
    let r = c.compound(&[op(|e| {
        e.u32(OP_EXCHANGE_ID)
            .fixed(&verf)
            .opaque(&o)
            .u32(0)
            .u32(SP4_NONE)
            .u32(0);
    })]);
    let mut d = r.dec();
    assert_eq!(res(&mut d, OP_EXCHANGE_ID), NFS4_OK);
    c.clientid = d.u64();
    let seq = d.u32();
    let clientid = c.clientid;
    let r = c.compound(&[op(|e| {
        e.u32(OP_CREATE_SESSION)
            .u64(clientid)
            .u32(seq)
            .u32(CREATE_SESSION4_FLAG_CONN_BACK_CHAN);
        e.u32(0).u32(1 << 20).u32(1 << 20).u32(4096).u32(16).u32(8).u32(0);
        e.u32(0).u32(4096).u32(4096).u32(0).u32(2).u32(4).u32(0);
        // cb_program, one callback_sec_parms4: AUTH_SYS.
        e.u32(CB_PROG)
            .u32(1)
            .u32(1)
            .u32(1)
            .opaque(b"client")
            .u32(0)
            .u32(0)
            .u32(0);
    })]);
    let mut d = r.dec();
    assert_eq!(res(&mut d, OP_CREATE_SESSION), NFS4_OK);
    c.sid.copy_from_slice(&d.fixed(16));
    assert_eq!(d.u32(), seq);
    assert_eq!(d.u32(), CREATE_SESSION4_FLAG_CONN_BACK_CHAN, "backchannel granted");
    for _ in 0..5 {
        d.u32();
    }
    c.slots = d.u32();
    d.u32();
    // The back channel: one slot, two operations.
    let back: Vec<u32> = (0..7).map(|_| d.u32()).collect();
    assert_eq!((back[4], back[5], back[6]), (2, 1, 0));
    c.seq = vec![0; c.slots as usize];
    let r = c.seq(&[op(|e| {
        e.u32(OP_RECLAIM_COMPLETE).bool(false);
    })]);
    assert_eq!(r.status, NFS4_OK);
}

/// A backward Call as the client sees it.
#[derive(Debug)]
struct CbCall {
    xid: u32,
    prog: u32,
    proc_: u32,
    auth_flavor: u32,
    /// CB_SEQUENCE's session and sequence id.
    seq: Option<([u8; 16], u32)>,
    /// The second operation and its arguments' bytes.
    op: Option<(u32, Vec<u8>)>,
    /// CB_COMPOUND's minor version.
    minor: u32,
}

fn pull(svc: &Svc, conn: u32) -> Option<CbCall> {
    let mut s = svc.borrow_mut();
    let mut buf = [0u8; 1024];
    let n = s.poll_backward_call(ConnId(conn), &mut buf)?;
    Some(decode_cb(&buf[..n]))
}

/// A backward Call's bytes as the client reads them (RFC 8881 s20).
fn decode_cb(buf: &[u8]) -> CbCall {
    let n = buf.len();
    let (h, at) = proto::rpc::decode_call(&buf[..n]).expect("a backward Call decodes");
    assert_eq!(h.vers, 1, "callback program version 1");
    let mut cb = CbCall {
        xid: h.xid,
        prog: h.prog,
        proc_: h.proc_,
        auth_flavor: h.cred.flavor,
        seq: None,
        op: None,
        minor: 0,
    };
    if h.proc_ == 1 {
        let mut r = Reader::new(&buf[at..n]);
        assert_eq!(r.opaque_var(64, "tag").unwrap(), b"");
        cb.minor = r.u32("minor").unwrap();
        assert_eq!(r.u32("ident").unwrap(), 0);
        assert_eq!(r.u32("numops").unwrap(), 2);
        assert_eq!(r.u32("op").unwrap(), OP_CB_SEQUENCE);
        let mut sid = [0u8; 16];
        sid.copy_from_slice(r.bytes(16, "sid").unwrap());
        let seqid = r.u32("seq").unwrap();
        assert_eq!(r.u32("slot").unwrap(), 0);
        r.u32("highest").unwrap();
        assert!(!r.bool("cachethis").unwrap());
        assert_eq!(r.u32("referring lists").unwrap(), 0);
        cb.seq = Some((sid, seqid));
        let opnum = r.u32("op").unwrap();
        cb.op = Some((opnum, r.rest().to_vec()));
    }
    assert_eq!(cb.prog, CB_PROG);
    cb
}

/// The client's Reply to `cb`: CB_NULL's empty result, or CB_COMPOUND4res
/// with CB_SEQUENCE's result and the operation's `status`.
fn reply_to(cb: &CbCall, status: u32) -> Vec<u8> {
    let mut e = Enc::default();
    e.u32(cb.xid).u32(1).u32(0).u32(0).u32(0).u32(0);
    if let (Some((sid, seqid)), Some((opnum, _))) = (cb.seq, &cb.op) {
        e.u32(status).opaque(b"").u32(2);
        e.u32(OP_CB_SEQUENCE)
            .u32(NFS4_OK)
            .fixed(&sid)
            .u32(seqid)
            .u32(0)
            .u32(0)
            .u32(0);
        e.u32(*opnum).u32(status);
    }
    e.b
}

fn answer(svc: &Svc, conn: u32, cb: &CbCall, status: u32) {
    let m = reply_to(cb, status);
    svc.borrow_mut().handle_backward_reply(ConnId(conn), &m);
}

/// SEQUENCE alone; its `sr_status_flags`.
fn status_flags<T: V4Transport>(c: &mut V4<T>) -> u32 {
    let s = c.sequence(0, false);
    let call = c.encode(&[s]);
    let r = c.send(&call, None);
    let mut d = r.dec();
    assert_eq!(res(&mut d, OP_SEQUENCE), NFS4_OK);
    d.fixed(16);
    for _ in 0..4 {
        d.u32();
    }
    d.u32()
}

/// What OPEN returned.
#[derive(Debug)]
struct Opened {
    sid: Stateid,
    fh: Vec<u8>,
    rflags: u32,
    /// `open_delegation4`: its type, the stateid of a read or write
    /// delegation, the reason of NONE_EXT.
    deleg: (u32, Option<Stateid>, Option<u32>),
    /// A write delegation's `space_limit` (NFS_LIMIT_SIZE) and its ACE's
    /// access mask.
    write_terms: Option<(u64, u32)>,
}

fn open_in<T: V4Transport>(c: &mut V4<T>, dir: &[u8], name: &str, access: u32, create: bool) -> Result<Opened, u32> {
    let how = create.then_some((UNCHECKED4, 0o666, [0u8; 8]));
    let r = c.seq(&[putfh(dir), open(name, access, 0, b"owner", how), getfh()]);
    if r.status != NFS4_OK {
        return Err(r.status);
    }
    let mut d = r.dec();
    res(&mut d, OP_PUTFH);
    assert_eq!(res(&mut d, OP_OPEN), NFS4_OK);
    let sid = get_stateid(&mut d);
    d.bool();
    d.u64();
    d.u64();
    let rflags = d.u32();
    let n = d.u32();
    for _ in 0..n {
        d.u32();
    }
    let mut write_terms = None;
    let deleg = match d.u32() {
        OPEN_DELEGATE_NONE => (OPEN_DELEGATE_NONE, None, None),
        OPEN_DELEGATE_READ => {
            let s = get_stateid(&mut d);
            assert!(!d.bool(), "no recall pending");
            d.u32();
            d.u32();
            d.u32();
            d.opaque();
            (OPEN_DELEGATE_READ, Some(s), None)
        }
        OPEN_DELEGATE_WRITE => {
            let s = get_stateid(&mut d);
            assert!(!d.bool(), "no recall pending");
            assert_eq!(d.u32(), NFS_LIMIT_SIZE, "space_limit by size");
            let size = d.u64();
            assert_eq!(d.u32(), ACE4_ACCESS_ALLOWED_ACE_TYPE);
            assert_eq!(d.u32(), 0, "ACE flags");
            let mask = d.u32();
            assert_eq!(d.opaque(), b"EVERYONE@");
            write_terms = Some((size, mask));
            (OPEN_DELEGATE_WRITE, Some(s), None)
        }
        OPEN_DELEGATE_NONE_EXT => {
            let why = d.u32();
            if why == WND4_CONTENTION || why == WND4_RESOURCE {
                d.bool();
            }
            (OPEN_DELEGATE_NONE_EXT, None, Some(why))
        }
        t => panic!("delegation type {t}"),
    };
    assert_eq!(res(&mut d, OP_GETFH), NFS4_OK);
    let fh = d.opaque();
    Ok(Opened {
        sid,
        fh,
        rflags,
        deleg,
        write_terms,
    })
}

fn delegreturn<T: V4Transport>(c: &mut V4<T>, fh: &[u8], s: &Stateid) -> u32 {
    c.seq(&[
        putfh(fh),
        op(|e| {
            e.u32(OP_DELEGRETURN);
            stateid(e, s);
        }),
    ])
    .status
}

/// A delegation held by A (answering its probe) on /b/f, and B (no
/// backchannel); the export's handle, the file's and A's delegation.
fn holder(svc: &Svc) -> (V4<Link>, V4<Link>, Vec<u8>, Opened) {
    let mut a = with_backchannel(svc, 1, "client-a", true);
    let mut b = plain(svc, 2, "client-b");
    let dir = a.walk("/b").unwrap();
    let w = open_in(&mut b, &dir, "f", OPEN4_SHARE_ACCESS_BOTH, true).unwrap();
    b.write(&w.fh, &w.sid, 0, FILE_SYNC4, b"v1").unwrap();
    assert_eq!(b.seq(&[putfh(&w.fh), close(&w.sid)]).status, NFS4_OK);
    let o = open_in(&mut a, &dir, "f", OPEN4_SHARE_ACCESS_READ, false).unwrap();
    assert_eq!(o.deleg.0, OPEN_DELEGATE_READ, "A holds a read delegation");
    assert_ne!(o.rflags & OPEN4_RESULT_MAY_NOTIFY_LOCK, 0);
    (a, b, dir, o)
}

fn recall_of(cb: &CbCall) -> (Stateid, Vec<u8>) {
    let (opnum, args) = cb.op.as_ref().expect("CB_COMPOUND");
    assert_eq!(*opnum, OP_CB_RECALL);
    let mut r = Reader::new(args);
    let seqid = r.u32("seqid").unwrap();
    let mut other = [0u8; 12];
    other.copy_from_slice(r.bytes(12, "other").unwrap());
    assert!(!r.bool("truncate").unwrap());
    let fh = r.opaque_var(128, "fh").unwrap().to_vec();
    assert_eq!(r.remaining(), 0);
    (Stateid { seqid, other }, fh)
}

/// A holds a read delegation; B's OPEN for writing is NFS4ERR_DELAY and
/// CB_RECALL goes out on A's connection (not B's); A opens under the
/// delegation (CLAIM_DELEG_CUR_FH), answers, returns it; B's retry opens.
#[test]
fn backchannel_recall_answered() {
    let (_s, sh, svc) = setup();
    let (mut a, mut b, dir, o) = holder(&svc);
    let ds = o.deleg.1.unwrap();
    assert_eq!(sh.v4().delegations(), 1);
    assert!(!svc.borrow().has_backward_calls(), "nothing to send yet");
    assert_eq!(
        open_in(&mut b, &dir, "f", OPEN4_SHARE_ACCESS_WRITE, false).unwrap_err(),
        NFS4ERR_DELAY
    );
    assert!(svc.borrow().has_backward_calls());
    assert!(pull(&svc, 2).is_none(), "not on B's connection");
    let cb = pull(&svc, 1).expect("CB_RECALL on A's connection");
    assert_eq!(
        cb.seq.unwrap(),
        (a.sid, 1),
        "CB_SEQUENCE of A's session, first sequence id"
    );
    assert_eq!(recall_of(&cb), (ds, o.fh.clone()));
    assert!(pull(&svc, 1).is_none(), "one callback at a time, one recall");
    // Still recalled: B waits.
    assert_eq!(
        open_in(&mut b, &dir, "f", OPEN4_SHARE_ACCESS_WRITE, false).unwrap_err(),
        NFS4ERR_DELAY
    );
    // A flushes its state under the delegation before returning it.
    let r = a.seq(&[
        putfh(&o.fh),
        op(|e| {
            e.u32(OP_OPEN)
                .u32(0)
                .u32(OPEN4_SHARE_ACCESS_READ)
                .u32(0)
                .u64(0)
                .opaque(b"owner2");
            e.u32(OPEN4_NOCREATE).u32(CLAIM_DELEG_CUR_FH);
            stateid(e, &ds);
        }),
    ]);
    assert_eq!(r.status, NFS4_OK, "CLAIM_DELEG_CUR_FH");
    answer(&svc, 1, &cb, NFS4_OK);
    // A stranger's delegation stateid is refused.
    assert_eq!(delegreturn(&mut b, &o.fh, &ds), NFS4ERR_BAD_STATEID);
    assert_eq!(delegreturn(&mut a, &o.fh, &ds), NFS4_OK);
    assert_eq!(delegreturn(&mut a, &o.fh, &ds), NFS4ERR_BAD_STATEID, "gone");
    assert_eq!(sh.v4().delegations(), 0);
    let w = open_in(&mut b, &dir, "f", OPEN4_SHARE_ACCESS_WRITE, false).unwrap();
    assert_eq!(w.deleg.0, OPEN_DELEGATE_NONE, "no delegation for a write open");
    // A's reading open, while B writes, gets none either, and hears why.
    let o2 = open_in(
        &mut a,
        &dir,
        "f",
        OPEN4_SHARE_ACCESS_READ | OPEN4_SHARE_ACCESS_WANT_READ_DELEG,
        false,
    )
    .unwrap();
    assert_eq!(o2.deleg, (OPEN_DELEGATE_NONE_EXT, None, Some(WND4_CONTENTION)));
    assert_eq!(status_flags(&mut a), 0);
    let st = &sh.v4().callbacks().stats;
    use std::sync::atomic::Ordering::Relaxed;
    assert_eq!(
        (
            st.calls.load(Relaxed),
            st.replies.load(Relaxed),
            st.faults.load(Relaxed)
        ),
        (2, 2, 0)
    );
}

/// Right after A returns a recalled delegation, A's next reading OPEN of
/// the file gets none (else B, whose retry comes later, would be sent back
/// to wait for a recall of the new one); B's retry then opens. Once the
/// cool-down (here the shortened lease) has passed, A is granted one again.
#[test]
fn backchannel_no_new_delegation_right_after_a_recall() {
    let (_s, sh, svc) = setup();
    let (mut a, mut b, dir, o) = holder(&svc);
    let ds = o.deleg.1.unwrap();
    sh.v4().set_lease(Duration::from_millis(400));
    assert_eq!(
        open_in(&mut b, &dir, "f", OPEN4_SHARE_ACCESS_WRITE, false).unwrap_err(),
        NFS4ERR_DELAY
    );
    let cb = pull(&svc, 1).expect("CB_RECALL");
    recall_of(&cb);
    answer(&svc, 1, &cb, NFS4_OK);
    assert_eq!(delegreturn(&mut a, &o.fh, &ds), NFS4_OK);
    let again = open_in(&mut a, &dir, "f", OPEN4_SHARE_ACCESS_READ, false).unwrap();
    assert_eq!(
        again.deleg.0, OPEN_DELEGATE_NONE,
        "no delegation on a file just recalled"
    );
    let w = open_in(&mut b, &dir, "f", OPEN4_SHARE_ACCESS_WRITE, false).expect("B's retry opens");
    assert_eq!(b.seq(&[putfh(&w.fh), close(&w.sid)]).status, NFS4_OK);
    for _ in 0..8 {
        std::thread::sleep(Duration::from_millis(60));
        a.seq(&[]);
        b.seq(&[]);
    }
    let later = open_in(&mut a, &dir, "f", OPEN4_SHARE_ACCESS_READ, false).unwrap();
    assert_eq!(later.deleg.0, OPEN_DELEGATE_READ, "granted again after the cool-down");
}

/// A never answers the recall (it keeps renewing its lease): one lease
/// after the recall B's retry revokes the delegation and proceeds; A's
/// SEQUENCE says RECALLABLE_STATE_REVOKED, the stateid is DELEG_REVOKED
/// until FREE_STATEID takes it (and the flag).
#[test]
fn backchannel_recall_unanswered_is_revoked_after_the_lease() {
    let (_s, sh, svc) = setup();
    let (mut a, mut b, dir, o) = holder(&svc);
    let ds = o.deleg.1.unwrap();
    sh.v4().set_lease(Duration::from_millis(300));
    assert_eq!(
        open_in(&mut b, &dir, "f", OPEN4_SHARE_ACCESS_WRITE, false).unwrap_err(),
        NFS4ERR_DELAY
    );
    let cb = pull(&svc, 1).expect("CB_RECALL");
    recall_of(&cb);
    for _ in 0..8 {
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(status_flags(&mut a), 0, "renewed, not yet revoked");
        b.seq(&[]);
    }
    let w = open_in(&mut b, &dir, "f", OPEN4_SHARE_ACCESS_WRITE, false).expect("revoked: B opens");
    assert_eq!(w.deleg.0, OPEN_DELEGATE_NONE);
    assert_eq!(status_flags(&mut a), SEQ4_STATUS_RECALLABLE_STATE_REVOKED);
    let r = a.seq(&[putfh(&o.fh), read(&ds, 0, 2)]);
    assert_eq!(r.status, NFS4ERR_DELEG_REVOKED);
    let r = a.seq(&[op(|e| {
        e.u32(OP_TEST_STATEID).u32(1);
        stateid(e, &ds);
    })]);
    let mut d = r.dec();
    res(&mut d, OP_TEST_STATEID);
    assert_eq!((d.u32(), d.u32()), (1, NFS4ERR_DELEG_REVOKED));
    assert_eq!(delegreturn(&mut a, &o.fh, &ds), NFS4ERR_DELEG_REVOKED);
    // The late answer changes nothing.
    answer(&svc, 1, &cb, NFS4_OK);
    let r = a.seq(&[op(|e| {
        e.u32(OP_FREE_STATEID);
        stateid(e, &ds);
    })]);
    assert_eq!(r.status, NFS4_OK);
    assert_eq!(status_flags(&mut a), 0, "flag cleared with the last revoked delegation");
    assert_eq!(sh.v4().delegations(), 0);
}

/// A CB_COMPOUND carries the minor version of the holder's session: 1
/// for a 4.1 client, 2 for a 4.2 one (the Linux client finds the session
/// of a CB_SEQUENCE by it, and a 4.2 mount answered a recall that said 1
/// with NFS4ERR_BADSESSION: the delegation was revoked, not returned; seen
/// in the VM, tests/kernel/guest/deleg.sh).
#[test]
fn backchannel_cb_compound_carries_the_sessions_minor_version() {
    let (_s, _sh, svc) = setup();
    let (_a, mut b, dir, o) = holder(&svc);
    assert_eq!(
        open_in(&mut b, &dir, "f", OPEN4_SHARE_ACCESS_WRITE, false).unwrap_err(),
        NFS4ERR_DELAY
    );
    let cb = pull(&svc, 1).expect("CB_RECALL");
    assert_eq!(recall_of(&cb), (o.deleg.1.unwrap(), o.fh.clone()));
    assert_eq!(cb.minor, 1, "a 4.1 session");
    answer(&svc, 1, &cb, NFS4_OK);

    svc.borrow_mut().backward_channel(ConnId(3), Some(CHAN));
    let mut c = V4::new(link(&svc, 3), "client-c");
    c.minor = 2;
    bc_session(&mut c);
    let probe = pull(&svc, 3).expect("CB_NULL probe");
    answer(&svc, 3, &probe, NFS4_OK);
    let dir_c = c.walk("/b").unwrap();
    let w = open_in(&mut b, &dir, "g", OPEN4_SHARE_ACCESS_BOTH, true).unwrap();
    assert_eq!(b.seq(&[putfh(&w.fh), close(&w.sid)]).status, NFS4_OK);
    let oc = open_in(&mut c, &dir_c, "g", OPEN4_SHARE_ACCESS_READ, false).unwrap();
    assert_eq!(oc.deleg.0, OPEN_DELEGATE_READ, "C (4.2) holds a read delegation");
    assert_eq!(
        open_in(&mut b, &dir, "g", OPEN4_SHARE_ACCESS_WRITE, false).unwrap_err(),
        NFS4ERR_DELAY
    );
    let cb = pull(&svc, 3).expect("CB_RECALL to C");
    recall_of(&cb);
    assert_eq!(cb.minor, 2, "a 4.2 session's CB_COMPOUND says 2");
}

/// The statistics' "nfs4" section (`rpcrdma-target stats --json`)
/// counts what the delegations went through: a grant, a recall sent and
/// answered, the DELEGRETURN with its recall-to-return time; then a second
/// grant whose recall is never answered and is revoked after the lease.
#[test]
fn backchannel_stats_count_grants_recalls_returns_and_revocations() {
    let (_s, sh, svc) = setup();
    let (mut a, mut b, dir, o) = holder(&svc);
    let ds = o.deleg.1.unwrap();
    let v = sh.v4().stats_json();
    assert_eq!(
        (v["delegations_held"].as_u64(), v["delegations_granted"].as_u64()),
        (Some(1), Some(1)),
        "{v:#}"
    );
    assert_eq!(v["recalls"], 0);
    assert_eq!(
        open_in(&mut b, &dir, "f", OPEN4_SHARE_ACCESS_WRITE, false).unwrap_err(),
        NFS4ERR_DELAY
    );
    let cb = pull(&svc, 1).expect("CB_RECALL");
    recall_of(&cb);
    std::thread::sleep(Duration::from_millis(20));
    answer(&svc, 1, &cb, NFS4_OK);
    assert_eq!(delegreturn(&mut a, &o.fh, &ds), NFS4_OK);
    let v = sh.v4().stats_json();
    assert_eq!(v["delegations_held"], 0, "{v:#}");
    assert_eq!(v["recalls"], 1);
    assert_eq!(v["returned_after_recall"], 1);
    assert_eq!(v["returned_unrecalled"], 0);
    assert_eq!(v["revoked"], 0);
    assert_eq!(v["callbacks"]["recalls_sent"], 1);
    assert_eq!(v["callbacks"]["recalls_answered"], 1);
    let lat = &v["recall_to_return_us"];
    assert_eq!(lat["samples"], 1);
    let (p50, max) = (lat["p50"].as_f64().unwrap(), lat["max"].as_f64().unwrap());
    assert!(
        max >= 20_000.0 && p50 >= max,
        "recall to return took the 20 ms slept: {lat}"
    );
    // B is done; A reads again (once no delegation is granted so soon
    // after a recall: the lease, shortened here) and gets a new delegation,
    // which B's next write recalls; A never answers and loses it after the
    // lease.
    let w = open_in(&mut b, &dir, "f", OPEN4_SHARE_ACCESS_WRITE, false).unwrap();
    assert_eq!(b.seq(&[putfh(&w.fh), close(&w.sid)]).status, NFS4_OK);
    sh.v4().set_lease(Duration::from_millis(200));
    for _ in 0..5 {
        std::thread::sleep(Duration::from_millis(60));
        status_flags(&mut a);
        b.seq(&[]);
    }
    let o2 = open_in(&mut a, &dir, "f", OPEN4_SHARE_ACCESS_READ, false).unwrap();
    assert_eq!(o2.deleg.0, OPEN_DELEGATE_READ);
    assert_eq!(
        open_in(&mut b, &dir, "f", OPEN4_SHARE_ACCESS_WRITE, false).unwrap_err(),
        NFS4ERR_DELAY
    );
    assert!(pull(&svc, 1).is_some(), "the second CB_RECALL");
    for _ in 0..6 {
        std::thread::sleep(Duration::from_millis(60));
        status_flags(&mut a);
        b.seq(&[]);
    }
    open_in(&mut b, &dir, "f", OPEN4_SHARE_ACCESS_WRITE, false).expect("revoked: B opens");
    let v = sh.v4().stats_json();
    assert_eq!(v["delegations_granted"], 2, "{v:#}");
    assert_eq!(v["recalls"], 2);
    assert_eq!(v["revoked"], 1);
    assert_eq!(v["delegations_held"], 1, "revoked, not yet freed");
    assert_eq!(v["callbacks"]["recalls_sent"], 2);
    assert_eq!(v["callbacks"]["recalls_answered"], 1);
    assert_eq!(v["recall_to_return_us"]["samples"], 1, "a revocation is no return");
}

/// The backchannel connection goes while the recall is in flight: A's
/// SEQUENCE says CB_PATH_DOWN (and _SESSION); A binds a new connection with
/// BIND_CONN_TO_SESSION, which is probed, then the recall is sent again
/// there with the same CB_SEQUENCE sequence id (a retry); A returns the
/// delegation and B proceeds.
#[test]
fn backchannel_lost_mid_recall_then_rebound() {
    let (_s, _sh, svc) = setup();
    let (mut a, mut b, dir, o) = holder(&svc);
    let ds = o.deleg.1.unwrap();
    assert_eq!(
        open_in(&mut b, &dir, "f", OPEN4_SHARE_ACCESS_WRITE, false).unwrap_err(),
        NFS4ERR_DELAY
    );
    let first = pull(&svc, 1).expect("CB_RECALL");
    svc.borrow_mut().backward_channel(ConnId(1), None);
    assert!(!svc.borrow().has_backward_calls(), "nowhere to send");
    let down = SEQ4_STATUS_CB_PATH_DOWN | SEQ4_STATUS_CB_PATH_DOWN_SESSION;
    assert_eq!(status_flags(&mut a), down);
    // A reply arriving for the lost Call is not taken.
    answer(&svc, 1, &first, NFS4_OK);
    assert_eq!(status_flags(&mut a), down);
    // Reconnect: a new connection, announced, bound for both directions.
    svc.borrow_mut().backward_channel(ConnId(3), Some(CHAN));
    a.t.conn = ConnId(3);
    let sid = a.sid;
    let r = a.compound(&[op(|e| {
        e.u32(OP_BIND_CONN_TO_SESSION)
            .fixed(&sid)
            .u32(CDFC4_BACK_OR_BOTH)
            .bool(false);
    })]);
    let mut d = r.dec();
    assert_eq!(res(&mut d, OP_BIND_CONN_TO_SESSION), NFS4_OK);
    assert_eq!(d.fixed(16), sid);
    assert_eq!(d.u32(), CDFS4_BOTH);
    let probe = pull(&svc, 3).expect("CB_NULL on the new connection");
    assert_eq!(probe.proc_, 0);
    assert!(pull(&svc, 3).is_none(), "the recall waits for the probe");
    answer(&svc, 3, &probe, NFS4_OK);
    assert_eq!(status_flags(&mut a), 0, "path up again");
    let again = pull(&svc, 3).expect("CB_RECALL again");
    assert_eq!(recall_of(&again), recall_of(&first));
    assert_eq!(again.seq, first.seq, "the same sequence id: a retry");
    // The client had run the first one: its slot answers the retry with
    // NFS4ERR_RETRY_UNCACHED_REP, which is not a fault.
    let mut e = Enc::default();
    e.u32(again.xid).u32(1).u32(0).u32(0).u32(0).u32(0);
    e.u32(NFS4ERR_RETRY_UNCACHED_REP).opaque(b"").u32(1);
    e.u32(OP_CB_SEQUENCE).u32(NFS4ERR_RETRY_UNCACHED_REP);
    svc.borrow_mut().handle_backward_reply(ConnId(3), &e.b);
    assert_eq!(status_flags(&mut a), 0, "not a fault");
    assert_eq!(delegreturn(&mut a, &o.fh, &ds), NFS4_OK);
    open_in(&mut b, &dir, "f", OPEN4_SHARE_ACCESS_WRITE, false).unwrap();
}

/// Lost and never rebound: the delegation is revoked a lease after the
/// recall like an unanswered one.
#[test]
fn backchannel_lost_and_not_rebound_is_revoked() {
    let (_s, sh, svc) = setup();
    let (mut a, mut b, dir, _o) = holder(&svc);
    sh.v4().set_lease(Duration::from_millis(200));
    assert_eq!(
        open_in(&mut b, &dir, "f", OPEN4_SHARE_ACCESS_WRITE, false).unwrap_err(),
        NFS4ERR_DELAY
    );
    svc.borrow_mut().backward_channel(ConnId(1), None);
    for _ in 0..6 {
        std::thread::sleep(Duration::from_millis(60));
        status_flags(&mut a);
        b.seq(&[]);
    }
    open_in(&mut b, &dir, "f", OPEN4_SHARE_ACCESS_WRITE, false).unwrap();
    assert_eq!(
        status_flags(&mut a),
        SEQ4_STATUS_CB_PATH_DOWN | SEQ4_STATUS_CB_PATH_DOWN_SESSION | SEQ4_STATUS_RECALLABLE_STATE_REVOKED
    );
}

/// An NFSv3 WRITE (and REMOVE) of a file an NFSv4 client holds a read
/// delegation on, in a Call that cannot be deferred (no defer token, as
/// over TCP): NFS3ERR_JUKEBOX while the recall runs, done after the
/// return.
#[test]
fn backchannel_v3_write_recalls_a_v4_read_delegation() {
    let (_s, _sh, svc) = setup();
    let (mut a, _b, dir, o) = holder(&svc);
    let ds = o.deleg.1.unwrap();
    let mut v3 = Client::new(link(&svc, 4));
    assert_eq!(v3.write(&o.fh, 0, b"v3", FILE_SYNC).unwrap_err(), NFS3ERR_JUKEBOX);
    assert_eq!(v3.remove(&dir, "f"), NFS3ERR_JUKEBOX);
    let cb = pull(&svc, 1).expect("CB_RECALL");
    assert_eq!(recall_of(&cb).0, ds);
    assert!(pull(&svc, 1).is_none(), "recalled once");
    answer(&svc, 1, &cb, NFS4_OK);
    assert_eq!(v3.write(&o.fh, 0, b"v3", FILE_SYNC).unwrap_err(), NFS3ERR_JUKEBOX);
    assert_eq!(delegreturn(&mut a, &o.fh, &ds), NFS4_OK);
    v3.write(&o.fh, 0, b"v3", FILE_SYNC).unwrap();
    let (_, data) = a.read(&o.fh, &o.sid, 0, 2).unwrap();
    assert_eq!(data, b"v3", "A reads the NFSv3 write");
}

fn lock(write_wait: bool, locktype: u32, off: u64, len: u64, open: &Stateid, owner: &[u8]) -> Vec<u8> {
    let _ = write_wait;
    op(|e| {
        e.u32(OP_LOCK)
            .u32(locktype)
            .bool(false)
            .u64(off)
            .u64(len)
            .bool(true)
            .u32(0);
        stateid(e, open);
        e.u32(0).u64(0).opaque(owner);
    })
}

/// B's blocking LOCK (WRITEW_LT) is denied while A holds the range; A's
/// LOCKU sends CB_NOTIFY_LOCK to B (its file and lock owner), once; a
/// non-blocking denial records no waiter.
#[test]
fn backchannel_notify_lock_after_locku() {
    let (_s, sh, svc) = setup();
    let mut a = with_backchannel(&svc, 1, "client-a", true);
    let mut b = with_backchannel(&svc, 2, "client-b", true);
    let dir = a.walk("/b").unwrap();
    // No write delegation, so B's open needs no recall.
    let no_deleg = OPEN4_SHARE_ACCESS_BOTH | OPEN4_SHARE_ACCESS_WANT_NO_DELEG;
    let oa = open_in(&mut a, &dir, "l", no_deleg, true).unwrap();
    let ob = open_in(&mut b, &dir, "l", OPEN4_SHARE_ACCESS_BOTH, false).unwrap();
    assert_ne!(ob.rflags & OPEN4_RESULT_MAY_NOTIFY_LOCK, 0, "B may hear of locks");
    let r = a.seq(&[putfh(&oa.fh), lock(false, WRITE_LT, 0, 100, &oa.sid, b"la")]);
    assert_eq!(r.status, NFS4_OK);
    let mut d = r.dec();
    res(&mut d, OP_PUTFH);
    res(&mut d, OP_LOCK);
    let la = get_stateid(&mut d);
    let r = b.seq(&[putfh(&ob.fh), lock(false, WRITE_LT, 10, 10, &ob.sid, b"lb-poll")]);
    assert_eq!(r.status, NFS4ERR_DENIED);
    assert_eq!(sh.v4().lock_waiters(), 0, "a non-blocking lock does not wait");
    let r = b.seq(&[putfh(&ob.fh), lock(true, WRITEW_LT, 10, 10, &ob.sid, b"lb")]);
    assert_eq!(r.status, NFS4ERR_DENIED);
    assert_eq!(sh.v4().lock_waiters(), 1);
    assert!(!svc.borrow().has_backward_calls());
    let r = a.seq(&[
        putfh(&oa.fh),
        op(|e| {
            e.u32(OP_LOCKU).u32(WRITE_LT).u32(0);
            stateid(e, &la);
            e.u64(0).u64(100);
        }),
    ]);
    assert_eq!(r.status, NFS4_OK);
    assert!(pull(&svc, 1).is_none(), "nothing for A");
    let cb = pull(&svc, 2).expect("CB_NOTIFY_LOCK to B");
    let (opnum, args) = cb.op.clone().unwrap();
    assert_eq!(opnum, OP_CB_NOTIFY_LOCK);
    let mut r = Reader::new(&args);
    assert_eq!(r.opaque_var(128, "fh").unwrap(), &ob.fh[..]);
    assert_eq!(r.u64("clientid").unwrap(), b.clientid);
    assert_eq!(r.opaque_var(1024, "owner").unwrap(), b"lb");
    assert_eq!(r.remaining(), 0);
    answer(&svc, 2, &cb, NFS4_OK);
    assert_eq!(sh.v4().lock_waiters(), 0);
    assert!(pull(&svc, 2).is_none(), "notified once");
    let r = b.seq(&[putfh(&ob.fh), lock(true, WRITEW_LT, 10, 10, &ob.sid, b"lb")]);
    assert_eq!(r.status, NFS4_OK, "B locks after the notification");
}

/// SEQUENCE's flags and the grant of delegations follow the backchannel:
/// none asked, none reported; asked but the probe fails (or its reply is
/// malformed) reports CB_PATH_DOWN and grants no delegation; a rebind
/// whose probe answers clears it. Replies with unknown XIDs are ignored;
/// `nfs4.delegations` off grants none.
#[test]
fn backchannel_sequence_flags_follow_the_probe() {
    let (_s, sh, svc) = setup();
    let mut plain_c = plain(&svc, 5, "client-plain");
    assert_eq!(status_flags(&mut plain_c), 0, "no backchannel asked, none reported");
    let mut a = with_backchannel(&svc, 1, "client-a", false);
    assert_eq!(status_flags(&mut a), 0, "probe not answered yet: unknown");
    let dir = a.walk("/b").unwrap();
    open_in(&mut a, &dir, "g", OPEN4_SHARE_ACCESS_BOTH, true).unwrap();
    let o = open_in(
        &mut a,
        &dir,
        "g",
        OPEN4_SHARE_ACCESS_READ | OPEN4_SHARE_ACCESS_WANT_READ_DELEG,
        false,
    )
    .unwrap();
    assert_eq!(o.deleg, (OPEN_DELEGATE_NONE_EXT, None, Some(WND4_RESOURCE)));
    assert_eq!(o.rflags & OPEN4_RESULT_MAY_NOTIFY_LOCK, 0);
    let probe = pull(&svc, 1).expect("CB_NULL");
    // Replies that match nothing: ignored.
    let mut forged = reply_to(&probe, NFS4_OK);
    forged[..4].copy_from_slice(&(probe.xid ^ 1).to_be_bytes());
    svc.borrow_mut().handle_backward_reply(ConnId(1), &forged);
    svc.borrow_mut().handle_backward_reply(ConnId(1), &[1, 2, 3]);
    svc.borrow_mut()
        .handle_backward_reply(ConnId(2), &reply_to(&probe, NFS4_OK));
    assert_eq!(status_flags(&mut a), 0);
    // The probe's reply: PROG_UNAVAIL.
    let mut e = Enc::default();
    e.u32(probe.xid).u32(1).u32(0).u32(0).u32(0).u32(1);
    svc.borrow_mut().handle_backward_reply(ConnId(1), &e.b);
    let down = SEQ4_STATUS_CB_PATH_DOWN | SEQ4_STATUS_CB_PATH_DOWN_SESSION;
    assert_eq!(status_flags(&mut a), down);
    let o = open_in(&mut a, &dir, "g", OPEN4_SHARE_ACCESS_READ, false).unwrap();
    assert_eq!(o.deleg.0, OPEN_DELEGATE_NONE);
    // Rebound on the same connection; this probe's reply is cut short.
    let sid = a.sid;
    let bind = |a: &mut V4<Link>, dir: u32| {
        let r = a.compound(&[op(|e| {
            e.u32(OP_BIND_CONN_TO_SESSION).fixed(&sid).u32(dir).bool(false);
        })]);
        let mut d = r.dec();
        assert_eq!(res(&mut d, OP_BIND_CONN_TO_SESSION), NFS4_OK);
        d.fixed(16);
        d.u32()
    };
    assert_eq!(bind(&mut a, CDFC4_BACK), CDFS4_BACK);
    assert_eq!(status_flags(&mut a), 0, "bound again, unknown until probed");
    let p2 = pull(&svc, 1).unwrap();
    let good = reply_to(&p2, NFS4_OK);
    svc.borrow_mut()
        .handle_backward_reply(ConnId(1), &good[..good.len() - 4]);
    assert_eq!(status_flags(&mut a), down, "a malformed reply: faulty");
    assert_eq!(bind(&mut a, CDFC4_FORE_OR_BOTH), CDFS4_BOTH);
    let p3 = pull(&svc, 1).unwrap();
    answer(&svc, 1, &p3, NFS4_OK);
    assert_eq!(status_flags(&mut a), 0);
    let o = open_in(&mut a, &dir, "g", OPEN4_SHARE_ACCESS_READ, false).unwrap();
    assert_eq!(o.deleg.0, OPEN_DELEGATE_READ);
    assert_eq!(bind(&mut a, CDFC4_FORE), CDFS4_FORE);
    // Switched off: no more delegations (the one held stays).
    sh.v4().set_delegations(false);
    let mut c = with_backchannel(&svc, 6, "client-c", true);
    let o = open_in(&mut c, &dir, "g", OPEN4_SHARE_ACCESS_READ, false).unwrap();
    assert_eq!(o.deleg.0, OPEN_DELEGATE_NONE);
    assert_eq!(sh.v4().delegations(), 1);
}

/// A client holds at most 256 delegations: the next OPEN that asks gets
/// OPEN_DELEGATE_NONE_EXT / WND4_RESOURCE; a return makes room again.
#[test]
fn backchannel_delegations_per_client_are_bounded() {
    let (_s, sh, svc) = setup();
    let mut a = with_backchannel(&svc, 1, "client-a", true);
    let dir = a.walk("/b").unwrap();
    let want = OPEN4_SHARE_ACCESS_READ | OPEN4_SHARE_ACCESS_WANT_READ_DELEG;
    let mut held = vec![];
    for i in 0..=256 {
        let name = format!("f{i}");
        let create = OPEN4_SHARE_ACCESS_BOTH | OPEN4_SHARE_ACCESS_WANT_NO_DELEG;
        let w = open_in(&mut a, &dir, &name, create, true).unwrap();
        assert_eq!(a.seq(&[putfh(&w.fh), close(&w.sid)]).status, NFS4_OK);
        let o = open_in(&mut a, &dir, &name, want, false).unwrap();
        if i < 256 {
            assert_eq!(o.deleg.0, OPEN_DELEGATE_READ, "delegation {i}");
            held.push(o);
        } else {
            assert_eq!(o.deleg, (OPEN_DELEGATE_NONE_EXT, None, Some(WND4_RESOURCE)));
        }
    }
    assert_eq!(sh.v4().delegations(), 256);
    let first = &held[0];
    assert_eq!(delegreturn(&mut a, &first.fh, &first.deleg.1.unwrap()), NFS4_OK);
    let o = open_in(&mut a, &dir, "f256", want, false).unwrap();
    assert_eq!(o.deleg.0, OPEN_DELEGATE_READ);
    // Asking for none: none, and why.
    let o = open_in(
        &mut a,
        &dir,
        "f1",
        OPEN4_SHARE_ACCESS_READ | OPEN4_SHARE_ACCESS_WANT_NO_DELEG,
        false,
    )
    .unwrap();
    assert_eq!(o.deleg, (OPEN_DELEGATE_NONE_EXT, None, Some(WND4_NOT_WANTED)));
}

/// A v4.1 client on one record-marked TCP connection (RFC 5531 s11) that
/// also hears the server's backward Calls there (RFC 8881 s2.10.3.1):
/// a CALL record read while waiting for a Reply is kept for the test.
struct TcpBc {
    s: std::net::TcpStream,
    calls: std::collections::VecDeque<Vec<u8>>,
}

impl TcpBc {
    fn connect(addr: std::net::SocketAddr) -> TcpBc {
        let s = std::net::TcpStream::connect(addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        TcpBc {
            s,
            calls: Default::default(),
        }
    }

    fn write_record(&mut self, msg: &[u8]) {
        use std::io::Write;
        let mark = (0x8000_0000u32 | msg.len() as u32).to_be_bytes();
        self.s.write_all(&mark).unwrap();
        self.s.write_all(msg).unwrap();
    }

    fn read_record(&mut self) -> Vec<u8> {
        use std::io::Read;
        let mut out = Vec::new();
        loop {
            let mut m = [0u8; 4];
            self.s.read_exact(&mut m).expect("record mark");
            let w = u32::from_be_bytes(m);
            let at = out.len();
            out.resize(at + (w & 0x7fff_ffff) as usize, 0);
            self.s.read_exact(&mut out[at..]).expect("record");
            if w & 0x8000_0000 != 0 {
                return out;
            }
        }
    }

    /// The next backward Call (kept, or read now).
    fn backward_call(&mut self) -> CbCall {
        if let Some(m) = self.calls.pop_front() {
            return decode_cb(&m);
        }
        let m = self.read_record();
        assert_eq!(proto::rpc::peek_msg(&m).unwrap().1, proto::rpc::CALL, "a backward Call");
        decode_cb(&m)
    }
}

impl V4Transport for TcpBc {
    fn rt(&mut self, call: &[u8], _read_max: Option<u32>) -> Option<Vec<u8>> {
        self.write_record(call);
        loop {
            let m = self.read_record();
            match proto::rpc::peek_msg(&m) {
                Ok((_, proto::rpc::CALL)) => self.calls.push_back(m),
                _ => return Some(m),
            }
        }
    }
}

/// Two TCP servers on one `NfsShared` with the same service core (the
/// NFS and MOUNT ports, as the target starts them): a connection that
/// opens and closes on the second leaves the backchannel a v4.1 client
/// bound on the first alone (their connection ids differ), so the
/// client's SEQUENCE reports no CB_PATH_DOWN.
#[test]
fn backchannel_tcp_connection_ids_are_unique_across_listeners() {
    use rpcrdma_apps::server::tcp::{TcpOptions, TcpServer};
    let (_s, sh, _svc) = setup();
    let opts = TcpOptions {
        max_conns: 8,
        max_record_bytes: 2 * MIB,
        max_data_bytes: MIB,
        service_core: 1,
        idle_timeout: Duration::from_secs(30),
        record_timeout: Duration::from_secs(30),
        write_timeout: Duration::from_secs(30),
        shutdown_grace: Duration::from_secs(1),
    };
    let any: std::net::SocketAddr = "127.0.0.1:0".parse().unwrap();
    let nfs = TcpServer::start(any, sh.clone(), opts).unwrap();
    let mut mount = TcpServer::start(any, sh.clone(), opts).unwrap();
    let mut a = V4::new(TcpBc::connect(nfs.local_addr()), "client-a");
    bc_session(&mut a);
    let probe = a.t.backward_call();
    assert_eq!(probe.proc_, 0, "CB_NULL on A's own socket");
    let m = reply_to(&probe, NFS4_OK);
    a.t.write_record(&m);
    let t0 = std::time::Instant::now();
    while !sh.v4().callbacks().usable(&a.sid) {
        assert!(t0.elapsed() < Duration::from_secs(20), "probe answer not taken");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(status_flags(&mut a), 0);
    // A connection to the other server: served (a v4 NULL), then closed;
    // `finish` waits for its thread, which has withdrawn its backchannel.
    let mut other = Tcp::connect(mount.local_addr().port());
    let null = call_header(7, NFS, 4, 0, &Auth::None).b;
    assert!(other.roundtrip(&null).is_some());
    drop(other);
    mount.finish(Duration::from_secs(5));
    assert_eq!(
        mount.stats().conns_accepted.load(std::sync::atomic::Ordering::Relaxed),
        1
    );
    assert_eq!(
        status_flags(&mut a),
        0,
        "A's backchannel is not the other server's connection"
    );
    assert!(sh.v4().callbacks().usable(&a.sid));
    assert!(a.t.calls.is_empty());
}

// ---------------------------------------------------------------------------
// End to end over the engine: the responder with `NfsService`, requesters
// with a backchannel, on the shm fabric
// ---------------------------------------------------------------------------

/// A requester on `fab` and core `core` offering `backward_credits`,
/// connected to `addr` (the responder, and the sim network, are polled by
/// whichever engine holds them).
fn bc_client<F: dataplane::Fabric>(
    p: &Pools,
    fab: F,
    addr: &str,
    v: u32,
    core: usize,
    backward_credits: u32,
) -> Engine<F> {
    let mut cfg = requester_cfg(p, versions(v), 4);
    cfg.backward_credits = backward_credits;
    let mut cli = dataplane::requester::Requester::new(cfg, fab, p.pool, &p.regions, core).unwrap();
    cli.connect(addr).unwrap();
    Engine {
        cli,
        srv: None,
        net: None,
        binding: proto::ulb::Nfs3Binding::new(MIB as u32),
        carried: Carried::default(),
    }
}

/// The responder moves to `to`'s engine, which then polls it while it waits.
fn hand<F: dataplane::Fabric>(from: &mut V4<Engine<F>>, to: &mut V4<Engine<F>>) {
    if to.t.srv.is_none() {
        to.t.srv = from.t.srv.take();
        to.t.net = from.t.net.take();
    }
}

/// Poll until the requester holds a backward Call; it, decoded.
fn engine_cb<F: dataplane::Fabric>(e: &mut Engine<F>) -> CbCall {
    let t0 = std::time::Instant::now();
    loop {
        e.cli.poll();
        e.pump();
        if let Some((xid, m)) = e.cli.backward_calls().next() {
            let cb = decode_cb(m);
            assert_eq!(cb.xid, xid);
            return cb;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "no backward Call: {:?}",
            e.cli.stats()
        );
    }
}

/// Answer `cb` through the requester (inline, RFC 8167 s5.2).
fn engine_answer<F: dataplane::Fabric>(e: &mut Engine<F>, cb: &CbCall, status: u32) {
    let m = reply_to(cb, status);
    e.cli.reply_backward(cb.xid, &m).expect("reply_backward");
    assert_eq!(e.cli.backward_held(), 0);
}

/// Poll both ends until `f`.
fn engine_until<F: dataplane::Fabric>(e: &mut Engine<F>, what: &str, mut f: impl FnMut() -> bool) {
    let t0 = std::time::Instant::now();
    while !f() {
        e.cli.poll();
        e.pump();
        assert!(t0.elapsed() < Duration::from_secs(20), "{what}");
    }
}

/// The recall scenario over one fabric, the responder `srv` (already
/// listening at `addr`, at most two connections, backward credits) and two
/// requesters made by `fab`: client A binds its backchannel with
/// CREATE_SESSION, the CB_NULL probe reaches its requester
/// (`backward_calls`) and is answered (`reply_backward`); A gets a read
/// delegation, B (no backchannel) opens for writing and gets
/// NFS4ERR_DELAY, CB_RECALL reaches A over the backward direction; A
/// answers (or, when `lose`, loses its connection first and rebinds a new
/// one) and returns the delegation; B's retry opens; every buffer comes
/// back after teardown.
fn recall_over_engine<F: dataplane::Fabric>(
    v: u32,
    p: &Pools,
    sh: &Arc<NfsShared>,
    (srv, net): (
        dataplane::responder::Responder<'static, F, NfsService>,
        Option<dataplane::sim::SimNetwork>,
    ),
    mut fab: impl FnMut() -> F,
    addr: &str,
    lose: bool,
) {
    use std::sync::atomic::Ordering::Relaxed;
    let mut a = V4::new(bc_client(p, fab(), addr, v, 1, 2), "client-a");
    a.t.srv = Some(srv);
    a.t.net = net;
    a.t.connect();
    assert_eq!(a.t.cli.version(), v);
    bc_session(&mut a);
    let probe = engine_cb(&mut a.t);
    assert_eq!(probe.proc_, 0, "v{v}: CB_NULL first");
    assert_eq!(probe.auth_flavor, proto::rpc::AUTH_SYS);
    engine_answer(&mut a.t, &probe, NFS4_OK);
    let sid = a.sid;
    let cbs = sh.v4().callbacks();
    engine_until(&mut a.t, "probe answered", || cbs.usable(&sid));
    assert_eq!(status_flags(&mut a), 0);

    let mut b = V4::new(bc_client(p, fab(), addr, v, 2, 0), "client-b");
    hand(&mut a, &mut b);
    b.t.connect();
    b.setup(8);
    let dir = b.walk("/b").unwrap();
    let w = open_in(&mut b, &dir, "f", OPEN4_SHARE_ACCESS_BOTH, true).unwrap();
    b.write(&w.fh, &w.sid, 0, FILE_SYNC4, b"v1").unwrap();
    assert_eq!(b.seq(&[putfh(&w.fh), close(&w.sid)]).status, NFS4_OK);

    hand(&mut b, &mut a);
    let o = open_in(&mut a, &dir, "f", OPEN4_SHARE_ACCESS_READ, false).unwrap();
    assert_eq!(o.deleg.0, OPEN_DELEGATE_READ, "v{v}: A holds a read delegation");
    let ds = o.deleg.1.unwrap();

    hand(&mut a, &mut b);
    assert_eq!(
        open_in(&mut b, &dir, "f", OPEN4_SHARE_ACCESS_WRITE, false).unwrap_err(),
        NFS4ERR_DELAY
    );
    hand(&mut b, &mut a);
    let cb = engine_cb(&mut a.t);
    assert_eq!(cb.seq.unwrap(), (a.sid, 1), "CB_SEQUENCE of A's session");
    assert_eq!(recall_of(&cb), (ds, o.fh.clone()));
    let want = if lose {
        // A's connection goes with the recall unanswered: the responder
        // withdraws its backchannel, A's session hears CB_PATH_DOWN on its
        // new connection until BIND_CONN_TO_SESSION, whose probe answers;
        // then the recall comes again there as a retry.
        assert_eq!(a.t.cli.shutdown(100_000), 0);
        hand(&mut a, &mut b);
        let t0 = std::time::Instant::now();
        while b.t.srv.as_ref().unwrap().connections() > 1 {
            b.t.cli.poll();
            b.t.pump();
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "v{v}: A's connection not closed"
            );
        }
        assert!(!sh.v4().callbacks().usable(&sid), "v{v}: withdrawn with the connection");
        let fresh = bc_client(p, fab(), addr, v, 3, 2);
        drop(std::mem::replace(&mut a.t, fresh));
        hand(&mut b, &mut a);
        a.t.connect();
        let down = SEQ4_STATUS_CB_PATH_DOWN | SEQ4_STATUS_CB_PATH_DOWN_SESSION;
        assert_eq!(status_flags(&mut a), down, "v{v}");
        let r = a.compound(&[op(|e| {
            e.u32(OP_BIND_CONN_TO_SESSION)
                .fixed(&sid)
                .u32(CDFC4_BACK_OR_BOTH)
                .bool(false);
        })]);
        let mut d = r.dec();
        assert_eq!(res(&mut d, OP_BIND_CONN_TO_SESSION), NFS4_OK);
        assert_eq!(d.fixed(16), sid);
        assert_eq!(d.u32(), CDFS4_BOTH);
        let probe = engine_cb(&mut a.t);
        assert_eq!(probe.proc_, 0, "v{v}: CB_NULL on the new connection");
        engine_answer(&mut a.t, &probe, NFS4_OK);
        let again = engine_cb(&mut a.t);
        assert_eq!(recall_of(&again), recall_of(&cb));
        assert_eq!(again.seq, cb.seq, "v{v}: the same sequence id: a retry");
        engine_answer(&mut a.t, &again, NFS4_OK);
        assert_eq!(status_flags(&mut a), 0, "v{v}: path up again");
        (4, 3, 0)
    } else {
        engine_answer(&mut a.t, &cb, NFS4_OK);
        (2, 2, 0)
    };
    assert_eq!(delegreturn(&mut a, &o.fh, &ds), NFS4_OK);
    assert_eq!(sh.v4().delegations(), 0);
    let st = &sh.v4().callbacks().stats;
    assert_eq!(
        (
            st.calls.load(Relaxed),
            st.replies.load(Relaxed),
            st.faults.load(Relaxed)
        ),
        want,
        "v{v}"
    );

    hand(&mut a, &mut b);
    let w = open_in(&mut b, &dir, "f", OPEN4_SHARE_ACCESS_WRITE, false).expect("B's retry opens");
    b.write(&w.fh, &w.sid, 0, FILE_SYNC4, b"v2").unwrap();
    let rs = b.t.srv.as_ref().unwrap().stats();
    assert!(rs.backward_calls >= 2 && rs.backward_replies >= 2, "v{v}: {rs:?}");

    // Teardown: every buffer back.
    assert_eq!(a.t.cli.shutdown(100_000), 0);
    assert_eq!(b.t.cli.shutdown(100_000), 0);
    let net = b.t.net.take();
    let mut srv = b.t.srv.take().unwrap();
    drop((a, b));
    let t0 = std::time::Instant::now();
    while srv.connections() > 0 && t0.elapsed() < Duration::from_secs(10) {
        srv.poll();
        if let Some(n) = net.as_ref() {
            let _ = n.run_until_idle(1_000_000);
        }
    }
    let held = srv.shutdown(100_000);
    if let Some(n) = net.as_ref() {
        let _ = n.run_until_idle(1_000_000);
        srv.poll();
    }
    assert_eq!(held, Default::default(), "v{v}: responder buffers held");
    drop(srv);
    for class in [p.recv, p.send, p.data] {
        assert_eq!(p.pool.stats(class).unwrap().in_use, 0, "v{v}: class {class:?} leaked");
    }
}

/// The responder's configuration for these tests: two connections, two
/// backward credits each.
fn bc_responder_cfg(p: &Pools) -> dataplane::responder::ResponderConfig {
    let mut cfg = responder_cfg(p, 4);
    cfg.max_conns = 2;
    cfg.backward_credits = 2;
    cfg
}

/// RPC-over-RDMA versions 1 and 2 on shm: client A binds its backchannel
/// with CREATE_SESSION, the CB_NULL probe reaches its requester
/// (`backward_calls`) and is answered (`reply_backward`); A gets a read
/// delegation, B's OPEN for writing is NFS4ERR_DELAY, CB_RECALL reaches A
/// over the backward direction, A answers and returns the delegation, B's
/// retry opens; every buffer comes back after teardown.
/// RPC-over-RDMA versions 1 and 2 on shm: the recall answered.
#[test]
fn backchannel_engine_recall_answered_over_shm() {
    recall_over_shm(false);
}

/// Over shm, A's connection is lost with the recall in flight; A
/// reconnects and binds the new connection (BIND_CONN_TO_SESSION); the
/// probe and the recall (a retry) come there; B then opens.
#[test]
fn backchannel_engine_lost_mid_recall_then_rebound_over_shm() {
    recall_over_shm(true);
}

/// The connection lost mid-recall and rebound, on the sim fabric.
#[test]
fn backchannel_engine_lost_mid_recall_then_rebound_over_sim() {
    recall_over_sim(true);
}

/// [`recall_over_engine`] on shm, versions 1 and 2.
fn recall_over_shm(lose: bool) {
    use dataplane::shm::{ShmConfig, ShmFabric};
    for v in [1, 2] {
        let (_s, sh, _svc) = setup();
        let p = pools_cores(4, 4);
        let addr = format!("@rpcrdma-bc-engine-{}-v{v}-{lose}", std::process::id());
        let cfg = bc_responder_cfg(&p);
        let svc = NfsService::new(sh.clone(), 0).unwrap();
        // Each connection draws at most its forward and backward credits'
        // receives from the SRQ (sized for both connections).
        let fab = ShmFabric::new(ShmConfig {
            srq_window: cfg.credits + cfg.backward_credits,
            ..ShmConfig::default()
        })
        .unwrap();
        let srv = dataplane::responder::Responder::new(cfg, fab, svc, p.pool, &p.regions, 0, Some(&addr)).unwrap();
        let client_fab = || ShmFabric::new(ShmConfig::default()).unwrap();
        recall_over_engine(v, &p, &sh, (srv, None), client_fab, &addr, lose);
    }
}

/// The recall answered on the sim fabric (seeded), versions 1 and 2.
#[test]
fn backchannel_engine_recall_answered_over_sim() {
    recall_over_sim(false);
}

/// [`recall_over_engine`] on sim (seeded), versions 1 and 2.
fn recall_over_sim(lose: bool) {
    use dataplane::sim::{SimConfig, SimNetwork};
    for v in [1, 2] {
        let (_s, sh, _svc) = setup();
        let p = pools_cores(4, 4);
        let net = SimNetwork::new(SimConfig::with_seed(230 + u64::from(v)));
        let svc = NfsService::new(sh.clone(), 0).unwrap();
        let srv = dataplane::responder::Responder::new(
            bc_responder_cfg(&p),
            net.endpoint(),
            svc,
            p.pool,
            &p.regions,
            0,
            Some("srv"),
        )
        .unwrap();
        let net2 = net.clone();
        recall_over_engine(v, &p, &sh, (srv, Some(net)), move || net2.endpoint(), "srv", lose);
    }
}

// ---------------------------------------------------------------------------
// Over shm: revocation by time, and NFSv3 Calls held for a recall
// ---------------------------------------------------------------------------

type ShmEngine = Engine<dataplane::shm::ShmFabric>;

/// The responder over shm (version `v`, three connections), A with its
/// backchannel up holding a read delegation on /b/f (written "v1" by B),
/// and B without a backchannel; B holds the responder.
struct Held {
    _s: Store,
    sh: Arc<NfsShared>,
    p: Pools,
    addr: String,
    a: V4<ShmEngine>,
    b: V4<ShmEngine>,
    dir: Vec<u8>,
    o: Opened,
}

fn held_over_shm(v: u32, tag: &str, lease: Duration) -> Held {
    held_over_shm_as(v, tag, lease, OPEN4_SHARE_ACCESS_READ)
}

/// [`held_over_shm`] with A's open of `access`: for reading, a read
/// delegation; for writing too, a write delegation.
fn held_over_shm_as(v: u32, tag: &str, lease: Duration, access: u32) -> Held {
    use dataplane::shm::{ShmConfig, ShmFabric};
    let (s, sh, _svc) = setup();
    sh.v4().set_lease(lease);
    let p = pools_cores(4, 4);
    let addr = format!("@rpcrdma-bc-{tag}-{}-v{v}", std::process::id());
    let mut cfg = bc_responder_cfg(&p);
    cfg.max_conns = 3;
    let svc = NfsService::new(sh.clone(), 0).unwrap();
    let fab = ShmFabric::new(ShmConfig {
        srq_window: cfg.credits + cfg.backward_credits,
        ..ShmConfig::default()
    })
    .unwrap();
    let srv = dataplane::responder::Responder::new(cfg, fab, svc, p.pool, &p.regions, 0, Some(&addr)).unwrap();
    let fab = || ShmFabric::new(ShmConfig::default()).unwrap();
    let mut a = V4::new(bc_client(&p, fab(), &addr, v, 1, 2), "client-a");
    a.t.srv = Some(srv);
    a.t.connect();
    bc_session(&mut a);
    let probe = engine_cb(&mut a.t);
    assert_eq!(probe.proc_, 0, "v{v}: CB_NULL first");
    engine_answer(&mut a.t, &probe, NFS4_OK);
    let sid = a.sid;
    let cbs = sh.v4().callbacks();
    engine_until(&mut a.t, "probe answered", || cbs.usable(&sid));
    let mut b = V4::new(bc_client(&p, fab(), &addr, v, 2, 0), "client-b");
    hand(&mut a, &mut b);
    b.t.connect();
    b.setup(8);
    let dir = b.walk("/b").unwrap();
    let w = open_in(&mut b, &dir, "f", OPEN4_SHARE_ACCESS_BOTH, true).unwrap();
    b.write(&w.fh, &w.sid, 0, FILE_SYNC4, b"v1").unwrap();
    assert_eq!(b.seq(&[putfh(&w.fh), close(&w.sid)]).status, NFS4_OK);
    hand(&mut b, &mut a);
    let o = open_in(&mut a, &dir, "f", access, false).unwrap();
    let want = if access & OPEN4_SHARE_ACCESS_WRITE != 0 {
        OPEN_DELEGATE_WRITE
    } else {
        OPEN_DELEGATE_READ
    };
    assert_eq!(o.deleg.0, want, "v{v}: A holds a delegation");
    hand(&mut a, &mut b);
    Held {
        _s: s,
        sh,
        p,
        addr,
        a,
        b,
        dir,
        o,
    }
}

/// Poll `e` (holding the responder) for `d`, sending nothing.
fn idle_for(e: &mut ShmEngine, d: Duration) {
    let t0 = std::time::Instant::now();
    while t0.elapsed() < d {
        e.cli.poll();
        e.pump();
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// A never answers the recall and nobody retries the conflicting OPEN: the
/// responder's loop alone revokes the delegation one lease after the
/// recall (the revocation timer), so A's next SEQUENCE says
/// RECALLABLE_STATE_REVOKED without any conflicting Call arriving after
/// the lease, and B's OPEN then proceeds. Versions 1 and 2 over shm.
#[test]
fn backchannel_engine_recall_unanswered_is_revoked_by_the_timer_over_shm() {
    for v in [1, 2] {
        let lease = Duration::from_millis(300);
        let Held {
            sh,
            mut a,
            mut b,
            dir,
            o,
            ..
        } = held_over_shm(v, "revoke", lease);
        assert_eq!(
            open_in(&mut b, &dir, "f", OPEN4_SHARE_ACCESS_WRITE, false).unwrap_err(),
            NFS4ERR_DELAY
        );
        hand(&mut b, &mut a);
        let cb = engine_cb(&mut a.t);
        recall_of(&cb);
        let t0 = std::time::Instant::now();
        // A renews its lease and ignores the recall.
        for _ in 0..3 {
            idle_for(&mut a.t, Duration::from_millis(50));
            assert_eq!(status_flags(&mut a), 0, "v{v}: renewed, not yet revoked");
        }
        assert!(t0.elapsed() < lease, "v{v}: the checks ran within the lease");
        idle_for(&mut a.t, lease);
        assert_eq!(
            status_flags(&mut a),
            SEQ4_STATUS_RECALLABLE_STATE_REVOKED,
            "v{v}: revoked by time, with no conflicting Call after the lease"
        );
        assert_eq!(sh.v4().delegations(), 1, "v{v}: revoked, kept until FREE_STATEID");
        hand(&mut a, &mut b);
        let w = open_in(&mut b, &dir, "f", OPEN4_SHARE_ACCESS_WRITE, false).expect("B opens");
        assert_eq!(w.deleg.0, OPEN_DELEGATE_NONE);
        hand(&mut b, &mut a);
        let ds = o.deleg.1.unwrap();
        assert_eq!(delegreturn(&mut a, &o.fh, &ds), NFS4ERR_DELEG_REVOKED);
        // The late answer changes nothing, and frees A's backward receive.
        engine_answer(&mut a.t, &cb, NFS4_OK);
        assert_eq!(status_flags(&mut a), SEQ4_STATUS_RECALLABLE_STATE_REVOKED);
    }
}

/// An NFSv3 WRITE of a file A holds a read delegation on, over the engine
/// (which lets the Call be deferred): no NFS3ERR_JUKEBOX; the WRITE is
/// held while the recall runs (no reply while A has not returned the
/// delegation, even after A answered CB_RECALL), and completes as soon as
/// A's DELEGRETURN is in; A then reads the NFSv3 data. Versions 1 and 2
/// over shm.
#[test]
fn backchannel_v3_write_waits_for_delegreturn_instead_of_jukebox() {
    use dataplane::shm::{ShmConfig, ShmFabric};
    for v in [1, 2] {
        let Held {
            sh,
            p,
            addr,
            mut a,
            mut b,
            o,
            ..
        } = held_over_shm(v, "v3wait", Duration::from_secs(30));
        let ds = o.deleg.1.unwrap();
        let mut c = Client::new(bc_client(
            &p,
            ShmFabric::new(ShmConfig::default()).unwrap(),
            &addr,
            v,
            3,
            0,
        ));
        c.t.srv = b.t.srv.take();
        c.t.connect();
        let mut e = call_header(77, NFS, 3, 7, &c.auth);
        e.opaque(&o.fh).u64(0).u32(2).u32(FILE_SYNC).opaque(b"v3");
        let id = c.t.submit_call(&e.b);
        // Held: no reply while the recall runs.
        let t0 = std::time::Instant::now();
        while t0.elapsed() < Duration::from_millis(100) {
            c.t.cli.poll();
            c.t.pump();
            assert!(
                c.t.cli.poll_completion().is_none(),
                "v{v}: the NFSv3 WRITE was answered (NFS3ERR_JUKEBOX) while the delegation is held"
            );
        }
        a.t.srv = c.t.srv.take();
        let cb = engine_cb(&mut a.t);
        assert_eq!(recall_of(&cb).0, ds);
        engine_answer(&mut a.t, &cb, NFS4_OK);
        idle_for(&mut a.t, Duration::from_millis(20));
        c.t.srv = a.t.srv.take();
        c.t.cli.poll();
        assert!(c.t.cli.poll_completion().is_none(), "v{v}: answered before DELEGRETURN");
        a.t.srv = c.t.srv.take();
        assert_eq!(delegreturn(&mut a, &o.fh, &ds), NFS4_OK);
        c.t.srv = a.t.srv.take();
        let t1 = std::time::Instant::now();
        let (done, out) = c.t.next_reply(|_| (NFS, 7));
        assert_eq!(done, id);
        let r = Reply::parse(&out);
        let mut d = r.dec();
        assert_eq!(d.u32(), 0, "v{v}: the held WRITE succeeded");
        assert!(
            t1.elapsed() < Duration::from_secs(1),
            "v{v}: released at once after DELEGRETURN"
        );
        a.t.srv = c.t.srv.take();
        let (_, data) = a.read(&o.fh, &o.sid, 0, 2).unwrap();
        assert_eq!(data, b"v3", "v{v}: A reads the NFSv3 write");
        assert_eq!(sh.v4().delegations(), 0);
    }
}

/// The holder never answers: the NFSv3 WRITE held for the recall runs as
/// soon as the revocation timer revokes the delegation, a lease after the
/// recall (not NFS3ERR_JUKEBOX, and with no retry from anyone). Version 1
/// over shm.
#[test]
fn backchannel_v3_write_held_until_the_delegation_is_revoked() {
    use dataplane::shm::{ShmConfig, ShmFabric};
    // Long enough that A's renewals every 50 ms keep it from lapsing on a
    // loaded host (300 ms once let a stall of the test thread revoke it
    // early: a flaky "not revoked yet").
    let lease = Duration::from_millis(1200);
    let Held {
        sh,
        p,
        addr,
        mut a,
        mut b,
        o,
        ..
    } = held_over_shm(1, "v3revoke", lease);
    let mut c = Client::new(bc_client(
        &p,
        ShmFabric::new(ShmConfig::default()).unwrap(),
        &addr,
        1,
        3,
        0,
    ));
    c.t.srv = b.t.srv.take();
    c.t.connect();
    let mut e = call_header(78, NFS, 3, 7, &c.auth);
    e.opaque(&o.fh).u64(0).u32(2).u32(FILE_SYNC).opaque(b"v3");
    let t0 = std::time::Instant::now();
    let id = c.t.submit_call(&e.b);
    // A renews its lease (so it is not a courtesy client whose state a
    // conflict may take) and ignores the recall; C's WRITE waits.
    let mut renewed = t0;
    while t0.elapsed() < lease * 3 / 4 {
        c.t.cli.poll();
        c.t.pump();
        assert!(
            c.t.cli.poll_completion().is_none(),
            "answered before the revocation, after {:?}",
            t0.elapsed()
        );
        if renewed.elapsed() > Duration::from_millis(50) {
            a.t.srv = c.t.srv.take();
            assert_eq!(status_flags(&mut a), 0, "not revoked yet");
            c.t.srv = a.t.srv.take();
            renewed = std::time::Instant::now();
        }
    }
    a.t.srv = c.t.srv.take();
    assert_eq!(status_flags(&mut a), 0, "renewed once more");
    c.t.srv = a.t.srv.take();
    let (done, out) = c.t.next_reply(|_| (NFS, 7));
    let waited = t0.elapsed();
    assert_eq!(done, id);
    let r = Reply::parse(&out);
    assert_eq!(r.dec().u32(), 0, "the held WRITE succeeded after the revocation");
    assert!(waited >= lease, "answered after {waited:?}, before the lease");
    a.t.srv = c.t.srv.take();
    assert_eq!(status_flags(&mut a), SEQ4_STATUS_RECALLABLE_STATE_REVOKED);
    assert_eq!(sh.v4().delegations(), 1, "revoked, kept until FREE_STATEID");
}

// ---------------------------------------------------------------------------
// Write delegations (RFC 8881 s10.4)
// ---------------------------------------------------------------------------

/// A (answering its probe) creates /b/f opening it for reading and
/// writing and holds a write delegation on it; B has no backchannel.
fn write_holder(svc: &Svc) -> (V4<Link>, V4<Link>, Vec<u8>, Opened) {
    let mut a = with_backchannel(svc, 1, "client-a", true);
    let b = plain(svc, 2, "client-b");
    let dir = a.walk("/b").unwrap();
    let o = open_in(&mut a, &dir, "f", OPEN4_SHARE_ACCESS_BOTH, true).unwrap();
    assert_eq!(o.deleg.0, OPEN_DELEGATE_WRITE, "A holds a write delegation");
    (a, b, dir, o)
}

/// GETATTR of the size and change attribute.
fn size_change<T: V4Transport>(c: &mut V4<T>, fh: &[u8]) -> Result<(u64, u64), u32> {
    let r = c.seq(&[putfh(fh), getattr(&[FATTR4_SIZE, FATTR4_CHANGE])]);
    if r.status != NFS4_OK {
        return Err(r.status);
    }
    let mut d = r.dec();
    res(&mut d, OP_PUTFH);
    res(&mut d, OP_GETATTR);
    let a = attrs(&mut d);
    Ok((attr(&a, FATTR4_SIZE).unwrap(), attr(&a, FATTR4_CHANGE).unwrap()))
}

/// A write open by a client with a backchannel gets OPEN_DELEGATE_WRITE,
/// with a space limit of at least the file's size plus what it may grow
/// by, and an ACE of what the mode lets everyone do; the delegation's
/// stateid reads, writes and sets the size; the holder's own GETATTR,
/// READ, WRITE and SETATTR recall nothing; the counters show a write
/// delegation held.
#[test]
fn backchannel_write_deleg_granted_on_write_open() {
    let (_s, sh, svc) = setup();
    let (mut a, _b, _dir, o) = write_holder(&svc);
    let ds = o.deleg.1.unwrap();
    let (limit, mask) = o.write_terms.unwrap();
    assert!(limit >= 1 << 20, "room to grow: {limit}");
    // Created 0666 under the root's umask-free mem backend: everyone may
    // read and write.
    assert_eq!(mask, ACE4_READ_DATA | ACE4_WRITE_DATA | ACE4_APPEND_DATA);
    a.write(&o.fh, &ds, 0, UNSTABLE4, b"held by A").unwrap();
    let (_, data) = a.read(&o.fh, &ds, 0, 64).unwrap();
    assert_eq!(data, b"held by A");
    assert_eq!(size_change(&mut a, &o.fh).unwrap().0, 9);
    let r = a.seq(&[
        putfh(&o.fh),
        op(|e| {
            e.u32(OP_SETATTR);
            stateid(e, &ds);
            e.u32(1).u32(1 << FATTR4_SIZE).u32(8).u64(4);
        }),
    ]);
    assert_eq!(r.status, NFS4_OK, "SETATTR of the size with the delegation's stateid");
    a.write(&o.fh, &o.sid, 4, FILE_SYNC4, b"!").unwrap();
    assert!(
        !svc.borrow().has_backward_calls(),
        "the holder's own operations recall nothing"
    );
    let j = sh.v4().stats_json();
    assert_eq!(j["write_delegations_held"], 1);
    assert_eq!(j["write_delegations_granted"], 1);
    assert_eq!(j["recalls"], 0);
    assert_eq!(delegreturn(&mut a, &o.fh, &ds), NFS4_OK);
    assert_eq!(sh.v4().stats_json()["write_delegations_held"], 0);
}

/// No write delegation while another client has the file open, even for
/// reading only (the holder could not see that client's view); the reason
/// is given to a client that asked.
#[test]
fn backchannel_write_deleg_not_granted_when_another_client_has_it_open() {
    let (_s, sh, svc) = setup();
    let mut a = with_backchannel(&svc, 1, "client-a", true);
    let mut b = plain(&svc, 2, "client-b");
    let dir = a.walk("/b").unwrap();
    let w = open_in(&mut b, &dir, "f", OPEN4_SHARE_ACCESS_BOTH, true).unwrap();
    b.write(&w.fh, &w.sid, 0, FILE_SYNC4, b"v1").unwrap();
    assert_eq!(b.seq(&[putfh(&w.fh), close(&w.sid)]).status, NFS4_OK);
    let r = open_in(&mut b, &dir, "f", OPEN4_SHARE_ACCESS_READ, false).unwrap();
    let o = open_in(&mut a, &dir, "f", OPEN4_SHARE_ACCESS_BOTH, false).unwrap();
    assert_eq!(o.deleg.0, OPEN_DELEGATE_NONE);
    let o = open_in(
        &mut a,
        &dir,
        "f",
        OPEN4_SHARE_ACCESS_BOTH | OPEN4_SHARE_ACCESS_WANT_WRITE_DELEG,
        false,
    )
    .unwrap();
    assert_eq!(o.deleg, (OPEN_DELEGATE_NONE_EXT, None, Some(WND4_CONTENTION)));
    assert_eq!(sh.v4().delegations(), 0);
    // Once B has closed, A's next write open gets one.
    assert_eq!(b.seq(&[putfh(&r.fh), close(&r.sid)]).status, NFS4_OK);
    let o = open_in(&mut a, &dir, "f", OPEN4_SHARE_ACCESS_BOTH, false).unwrap();
    assert_eq!(o.deleg.0, OPEN_DELEGATE_WRITE);
}

/// OPEN4_SHARE_ACCESS_WANT_NO_DELEG is honoured (WND4_NOT_WANTED, and B's
/// GETATTR then recalls nothing); asking for a read delegation with an
/// open for writing gets none (WND4_CONTENTION); with `nfs4.delegations`
/// off a write open gets none.
#[test]
fn backchannel_write_deleg_want_no_deleg_honoured() {
    let (_s, sh, svc) = setup();
    let mut a = with_backchannel(&svc, 1, "client-a", true);
    let mut b = plain(&svc, 2, "client-b");
    let dir = a.walk("/b").unwrap();
    let no = OPEN4_SHARE_ACCESS_BOTH | OPEN4_SHARE_ACCESS_WANT_NO_DELEG;
    let o = open_in(&mut a, &dir, "f", no, true).unwrap();
    assert_eq!(o.deleg, (OPEN_DELEGATE_NONE_EXT, None, Some(WND4_NOT_WANTED)));
    assert_eq!(size_change(&mut b, &o.fh).unwrap().0, 0);
    assert!(!svc.borrow().has_backward_calls());
    let rd = OPEN4_SHARE_ACCESS_BOTH | OPEN4_SHARE_ACCESS_WANT_READ_DELEG;
    let o = open_in(&mut a, &dir, "g", rd, true).unwrap();
    assert_eq!(o.deleg, (OPEN_DELEGATE_NONE_EXT, None, Some(WND4_CONTENTION)));
    sh.v4().set_delegations(false);
    let o = open_in(&mut a, &dir, "h", OPEN4_SHARE_ACCESS_BOTH, true).unwrap();
    assert_eq!(o.deleg.0, OPEN_DELEGATE_NONE);
    assert_eq!(sh.v4().delegations(), 0);
}

/// What B does to the file A holds a write delegation on.
#[derive(Clone, Copy, Debug)]
enum Look {
    Getattr,
    Read,
    OpenRead,
}

/// A holds a write delegation and has written (as a client caching
/// writes would not have yet); B's `look` is NFS4ERR_DELAY and recalls
/// it (once); while recalled, B's retries wait; A flushes its cached
/// writes with the delegation's stateid, reopens under the delegation
/// (CLAIM_DELEG_CUR_FH, for reading and writing), answers, returns it;
/// B's retry then sees A's data and size.
fn write_deleg_recalled_by(look: Look) {
    let (_s, sh, svc) = setup();
    let (mut a, mut b, dir, o) = write_holder(&svc);
    let ds = o.deleg.1.unwrap();
    a.write(&o.fh, &ds, 0, FILE_SYNC4, b"first").unwrap();
    let before = size_change(&mut a, &o.fh).unwrap();
    let attempt = |b: &mut V4<Link>| -> Result<Vec<u8>, u32> {
        match look {
            Look::Getattr => size_change(b, &o.fh).map(|(size, _)| size.to_be_bytes().to_vec()),
            Look::Read => b.read(&o.fh, &Stateid::ANONYMOUS, 0, 64).map(|(_, d)| d),
            Look::OpenRead => {
                let r = open_in(b, &dir, "f", OPEN4_SHARE_ACCESS_READ, false)?;
                assert_eq!(
                    r.deleg.0, OPEN_DELEGATE_NONE,
                    "{look:?}: no delegation right after a recall"
                );
                b.read(&r.fh, &r.sid, 0, 64).map(|(_, d)| d)
            }
        }
    };
    assert_eq!(attempt(&mut b).unwrap_err(), NFS4ERR_DELAY, "{look:?}");
    let cb = pull(&svc, 1).expect("CB_RECALL on A's connection");
    assert_eq!(recall_of(&cb), (ds, o.fh.clone()), "{look:?}");
    assert_eq!(attempt(&mut b).unwrap_err(), NFS4ERR_DELAY, "{look:?}: still held");
    assert!(pull(&svc, 1).is_none(), "{look:?}: recalled once");
    // A flushes what it cached under the delegation.
    a.write(&o.fh, &ds, 5, FILE_SYNC4, b" and second").unwrap();
    let r = a.seq(&[
        putfh(&o.fh),
        op(|e| {
            e.u32(OP_OPEN)
                .u32(0)
                .u32(OPEN4_SHARE_ACCESS_BOTH)
                .u32(0)
                .u64(0)
                .opaque(b"owner2");
            e.u32(OPEN4_NOCREATE).u32(CLAIM_DELEG_CUR_FH);
            stateid(e, &ds);
        }),
    ]);
    assert_eq!(
        r.status, NFS4_OK,
        "{look:?}: CLAIM_DELEG_CUR_FH after a write delegation"
    );
    answer(&svc, 1, &cb, NFS4_OK);
    assert_eq!(delegreturn(&mut a, &o.fh, &ds), NFS4_OK);
    let after = size_change(&mut b, &o.fh).unwrap();
    assert_eq!(after.0, 16, "{look:?}: B sees A's size");
    assert_ne!(after.1, before.1, "{look:?}: and a new change attribute");
    let got = attempt(&mut b).unwrap();
    match look {
        Look::Getattr => assert_eq!(got, 16u64.to_be_bytes()),
        _ => assert_eq!(got, b"first and second", "{look:?}: B reads A's data"),
    }
    let st = sh.v4().deleg_stats();
    use std::sync::atomic::Ordering::Relaxed;
    assert_eq!(
        (st.recalls_write.load(Relaxed), st.returned_write.load(Relaxed)),
        (1, 1)
    );
}

#[test]
fn backchannel_write_deleg_recalled_by_getattr() {
    write_deleg_recalled_by(Look::Getattr);
}

#[test]
fn backchannel_write_deleg_recalled_by_read() {
    write_deleg_recalled_by(Look::Read);
}

#[test]
fn backchannel_write_deleg_recalled_by_open_for_reading() {
    write_deleg_recalled_by(Look::OpenRead);
}

/// NFSv3 READ, GETATTR, LOOKUP and ACCESS of a file under a write
/// delegation, in Calls that cannot be deferred: NFS3ERR_JUKEBOX while the recall runs, A's
/// data after the return. (Held Calls: the shm test below.)
#[test]
fn backchannel_write_deleg_v3_read_jukebox_until_return() {
    let (_s, _sh, svc) = setup();
    let (mut a, _b, dir, o) = write_holder(&svc);
    let ds = o.deleg.1.unwrap();
    let mut v3 = Client::new(link(&svc, 4));
    assert_eq!(v3.getattr(&o.fh).unwrap_err(), NFS3ERR_JUKEBOX);
    assert_eq!(v3.read(&o.fh, 0, 64).unwrap_err(), NFS3ERR_JUKEBOX);
    // LOOKUP and ACCESS answer with the file's attributes: they wait too.
    assert_eq!(v3.lookup(&dir, b"f").unwrap_err(), NFS3ERR_JUKEBOX);
    assert_eq!(v3.access(&o.fh, 1).unwrap_err(), NFS3ERR_JUKEBOX);
    let cb = pull(&svc, 1).expect("CB_RECALL");
    assert_eq!(recall_of(&cb).0, ds);
    a.write(&o.fh, &ds, 0, FILE_SYNC4, b"from A").unwrap();
    answer(&svc, 1, &cb, NFS4_OK);
    assert_eq!(delegreturn(&mut a, &o.fh, &ds), NFS4_OK);
    assert_eq!(v3.getattr(&o.fh).unwrap().size, 6);
    assert_eq!(v3.lookup(&dir, b"f").unwrap().1.size, 6);
    assert_eq!(v3.read(&o.fh, 0, 64).unwrap().0, b"from A");
}

/// A never answers the recall B's GETATTR caused (and renews its lease):
/// one lease after the recall B's retry proceeds, the delegation is
/// revoked (counted as a write one), A hears RECALLABLE_STATE_REVOKED and
/// its WRITE with the delegation's stateid is NFS4ERR_DELEG_REVOKED.
#[test]
fn backchannel_write_deleg_unanswered_is_revoked_after_the_lease() {
    let (_s, sh, svc) = setup();
    let (mut a, mut b, _dir, o) = write_holder(&svc);
    let ds = o.deleg.1.unwrap();
    sh.v4().set_lease(Duration::from_millis(300));
    assert_eq!(size_change(&mut b, &o.fh).unwrap_err(), NFS4ERR_DELAY);
    recall_of(&pull(&svc, 1).expect("CB_RECALL"));
    for _ in 0..8 {
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(status_flags(&mut a), 0, "renewed, not yet revoked");
        b.seq(&[]);
    }
    assert_eq!(
        size_change(&mut b, &o.fh).unwrap().0,
        0,
        "revoked: B's GETATTR proceeds"
    );
    assert_eq!(status_flags(&mut a), SEQ4_STATUS_RECALLABLE_STATE_REVOKED);
    assert_eq!(
        a.write(&o.fh, &ds, 0, FILE_SYNC4, b"late").unwrap_err(),
        NFS4ERR_DELEG_REVOKED
    );
    let j = sh.v4().stats_json();
    assert_eq!((j["revoked"].as_u64(), j["write_revoked"].as_u64()), (Some(1), Some(1)));
}

/// Over shm (versions 1 and 2), NFSv3 READ and then GETATTR of a file A
/// holds a write delegation on are held (no NFS3ERR_JUKEBOX, no reply)
/// while the recall runs, even after A answered CB_RECALL, and are
/// answered as soon as A's DELEGRETURN is in, with A's flushed data and
/// size; every buffer comes back after teardown.
#[test]
fn backchannel_write_deleg_v3_read_and_getattr_held_until_return_over_shm() {
    use dataplane::shm::{ShmConfig, ShmFabric};
    for v in [1, 2] {
        let Held {
            sh,
            p,
            addr,
            mut a,
            mut b,
            dir,
            o,
            ..
        } = held_over_shm_as(v, "wdeleg", Duration::from_secs(30), OPEN4_SHARE_ACCESS_BOTH);
        sh.v4().set_regrant_after_recall(Duration::ZERO);
        let mut c = Client::new(bc_client(
            &p,
            ShmFabric::new(ShmConfig::default()).unwrap(),
            &addr,
            v,
            3,
            0,
        ));
        c.t.srv = b.t.srv.take();
        c.t.connect();
        let mut ds = o.deleg.1.unwrap();
        for (round, proc_) in [(0u32, 6u32), (1, 1)] {
            if round > 0 {
                // A opens for writing again: a new write delegation.
                a.t.srv = c.t.srv.take();
                let again = open_in(&mut a, &dir, "f", OPEN4_SHARE_ACCESS_BOTH, false).unwrap();
                assert_eq!(again.deleg.0, OPEN_DELEGATE_WRITE, "v{v}: granted again");
                ds = again.deleg.1.unwrap();
                c.t.srv = a.t.srv.take();
            }
            let mut e = call_header(90 + round, NFS, 3, proc_, &c.auth);
            e.opaque(&o.fh);
            if proc_ == 6 {
                e.u64(0).u32(64);
            }
            let id = c.t.submit_call(&e.b);
            let t0 = std::time::Instant::now();
            while t0.elapsed() < Duration::from_millis(100) {
                c.t.cli.poll();
                c.t.pump();
                assert!(
                    c.t.cli.poll_completion().is_none(),
                    "v{v} proc {proc_}: answered while the write delegation is held"
                );
            }
            a.t.srv = c.t.srv.take();
            let cb = engine_cb(&mut a.t);
            assert_eq!(recall_of(&cb).0, ds, "v{v} proc {proc_}");
            engine_answer(&mut a.t, &cb, NFS4_OK);
            idle_for(&mut a.t, Duration::from_millis(20));
            c.t.srv = a.t.srv.take();
            c.t.cli.poll();
            assert!(c.t.cli.poll_completion().is_none(), "v{v}: answered before DELEGRETURN");
            a.t.srv = c.t.srv.take();
            // The flush of A's cached writes, then the return.
            let data: &[u8] = if round == 0 {
                b"written by A"
            } else {
                b"written by A, twice"
            };
            a.write(&o.fh, &ds, 0, FILE_SYNC4, data).unwrap();
            assert_eq!(delegreturn(&mut a, &o.fh, &ds), NFS4_OK);
            c.t.srv = a.t.srv.take();
            let (done, out) = c.t.next_reply(|_| (NFS, proc_));
            assert_eq!(done, id);
            let r = Reply::parse(&out);
            let mut d = r.dec();
            assert_eq!(d.u32(), 0, "v{v} proc {proc_}: the held Call succeeded");
            if proc_ == 6 {
                if d.bool() {
                    for _ in 0..21 {
                        d.u32();
                    }
                }
                assert_eq!(d.u32(), data.len() as u32);
                d.bool();
                assert_eq!(d.opaque(), data, "v{v}: the v3 READ sees A's data");
            } else {
                for _ in 0..5 {
                    d.u32();
                }
                assert_eq!(d.u64(), data.len() as u64, "v{v}: the v3 GETATTR sees A's size");
            }
        }
        assert_eq!(sh.v4().delegations(), 0);
        // Teardown: every buffer back.
        b.t.srv = c.t.srv.take();
        for cli in [&mut a.t.cli, &mut b.t.cli, &mut c.t.cli] {
            assert_eq!(cli.shutdown(100_000), 0, "v{v}");
        }
        let mut srv = b.t.srv.take().unwrap();
        drop((a, b, c));
        let t0 = std::time::Instant::now();
        while srv.connections() > 0 && t0.elapsed() < Duration::from_secs(10) {
            srv.poll();
        }
        assert_eq!(
            srv.shutdown(100_000),
            Default::default(),
            "v{v}: responder buffers held"
        );
        drop(srv);
        for class in [p.recv, p.send, p.data] {
            assert_eq!(p.pool.stats(class).unwrap().in_use, 0, "v{v}: class {class:?} leaked");
        }
    }
}

/// B's OPEN with UNCHECKED4 creation and a size of zero, of a file that
/// exists and A holds a delegation on, truncates it: that is a change, so
/// A's delegation is recalled and the OPEN is NFS4ERR_DELAY before the
/// file is touched (it used to truncate the file under the delegation).
#[test]
fn backchannel_unchecked_create_truncation_recalls_the_delegation() {
    let (_s, _sh, svc) = setup();
    let (mut a, mut b, dir, o) = holder(&svc);
    let ds = o.deleg.1.unwrap();
    let truncating_open = |b: &mut V4<Link>| {
        b.seq(&[
            putfh(&dir),
            op(|e| {
                e.u32(OP_OPEN)
                    .u32(0)
                    .u32(OPEN4_SHARE_ACCESS_BOTH)
                    .u32(0)
                    .u64(0)
                    .opaque(b"owner-t");
                e.u32(OPEN4_CREATE).u32(UNCHECKED4);
                e.u32(1).u32(1 << FATTR4_SIZE).u32(8).u64(0);
                e.u32(CLAIM_NULL).opaque(b"f");
            }),
        ])
        .status
    };
    assert_eq!(truncating_open(&mut b), NFS4ERR_DELAY);
    let (_, data) = a.read(&o.fh, &o.sid, 0, 8).unwrap();
    assert_eq!(data, b"v1", "not truncated under A's delegation");
    let cb = pull(&svc, 1).expect("CB_RECALL");
    assert_eq!(recall_of(&cb).0, ds);
    answer(&svc, 1, &cb, NFS4_OK);
    assert_eq!(delegreturn(&mut a, &o.fh, &ds), NFS4_OK);
    assert_eq!(truncating_open(&mut b), NFS4_OK);
    assert_eq!(size_change(&mut a, &o.fh).unwrap().0, 0, "truncated after the return");
}
