//! NFSv4.1 byte-range locks and the grace period through the NFS service:
//! LOCK, LOCKT and LOCKU between two clients, unlock splitting, upgrades,
//! lock stateids and CLOSE / FREE_STATEID, lease expiry, bounds; a target
//! restart on `uring` with the clients reclaiming their opens and locks
//! through the responder engine.

mod nfs4_common;
mod nfs_common;

use std::sync::Arc;
use std::time::Duration;

use nfs4_common::*;
use nfs_common::*;
use proto::nfs4::*;
use rpcrdma_apps::config::Config;
use rpcrdma_apps::nfs::NfsShared;

fn setup(kind: Kind) -> (Store, Arc<NfsShared>) {
    let s = store(kind, "b0");
    let mut b = Ex::new("/b", "b0");
    b.root_squash = false;
    let cfg = config(&["b0"], &[b], MIB as u32);
    let sh = NfsShared::new(&cfg, vec![("b0".into(), s.backend.clone())]).unwrap();
    (s, sh)
}

fn client<T: V4Transport>(t: T, owner: &str) -> V4<T> {
    let mut c = V4::new(t, owner);
    c.setup(8);
    c
}

/// LOCK with a new lock owner through `open`.
fn lock_new(write: bool, reclaim: bool, off: u64, len: u64, open: &Stateid, owner: &[u8]) -> Vec<u8> {
    op(|e| {
        e.u32(OP_LOCK)
            .u32(if write { WRITE_LT } else { READ_LT })
            .bool(reclaim)
            .u64(off)
            .u64(len)
            .bool(true)
            .u32(0);
        stateid(e, open);
        e.u32(0).u64(0).opaque(owner);
    })
}

/// LOCK with the owner's lock stateid.
fn lock_exist(write: bool, off: u64, len: u64, lock: &Stateid) -> Vec<u8> {
    op(|e| {
        e.u32(OP_LOCK)
            .u32(if write { WRITEW_LT } else { READW_LT })
            .bool(false)
            .u64(off)
            .u64(len)
            .bool(false);
        stateid(e, lock);
        e.u32(0);
    })
}

fn lockt(write: bool, off: u64, len: u64, owner: &[u8]) -> Vec<u8> {
    op(|e| {
        e.u32(OP_LOCKT)
            .u32(if write { WRITE_LT } else { READ_LT })
            .u64(off)
            .u64(len)
            .u64(0)
            .opaque(owner);
    })
}

fn locku(off: u64, len: u64, lock: &Stateid) -> Vec<u8> {
    op(|e| {
        e.u32(OP_LOCKU).u32(WRITE_LT).u32(0);
        stateid(e, lock);
        e.u64(off).u64(len);
    })
}

fn free_stateid(s: &Stateid) -> Vec<u8> {
    op(|e| {
        e.u32(OP_FREE_STATEID);
        stateid(e, s);
    })
}

/// What LOCK, LOCKT or LOCKU answered: the stateid (LOCK, LOCKU), nothing
/// (LOCKT), or the status and, for NFS4ERR_DENIED, LOCK4denied's offset,
/// length, type, client id and owner.
#[derive(Debug, PartialEq, Eq)]
enum Got {
    Sid(Stateid),
    Ok,
    Denied(u64, u64, u32, u64, Vec<u8>),
    Err(u32),
}

fn run<T: V4Transport>(c: &mut V4<T>, fh: &[u8], o: Vec<u8>) -> Got {
    let opnum = u32::from_be_bytes(o[..4].try_into().unwrap());
    let r = c.seq(&[putfh(fh), o]);
    let mut d = r.dec();
    res(&mut d, OP_PUTFH);
    match res(&mut d, opnum) {
        NFS4_OK if opnum == OP_LOCKT => Got::Ok,
        NFS4_OK if opnum == OP_FREE_STATEID => Got::Ok,
        NFS4_OK => Got::Sid(get_stateid(&mut d)),
        NFS4ERR_DENIED => {
            let g = Got::Denied(d.u64(), d.u64(), d.u32(), d.u64(), d.opaque());
            d.end();
            g
        }
        s => Got::Err(s),
    }
}

fn sid(g: Got) -> Stateid {
    match g {
        Got::Sid(s) => s,
        other => panic!("no stateid: {other:?}"),
    }
}

#[test]
fn nfs4_lock_conflicts_between_two_clients() {
    let (_s, sh) = setup(Kind::Mem);
    let mut a = client(Direct::new(&sh), "client-a");
    let mut b = client(Direct::new(&sh), "client-b");
    let dir = a.walk("/b").unwrap();
    let (oa, fh) = a
        .open(&dir, open("f", 3, 0, b"oa", Some((UNCHECKED4, 0o666, [0; 8]))))
        .unwrap();
    a.write(&fh, &oa, 0, FILE_SYNC4, &[7; 200]).unwrap();
    let (ob, _) = b.open(&dir, open("f", 3, 0, b"ob", None)).unwrap();
    // A write-locks bytes 0..=99.
    let la = sid(run(&mut a, &fh, lock_new(true, false, 0, 100, &oa, b"la")));
    assert_eq!(la.seqid, 1);
    // B's read lock inside it: DENIED, with A's lock described.
    let a_id = a.clientid;
    let denied_a = |off, len| Got::Denied(off, len, WRITE_LT, a_id, b"la".to_vec());
    assert_eq!(
        run(&mut b, &fh, lock_new(false, false, 50, 10, &ob, b"lb")),
        denied_a(0, 100)
    );
    assert_eq!(sh.v4().lock_stateids(), 1, "nothing made for the denied owner");
    // LOCKT: past A's range is free; inside it is not; A's own owner never
    // conflicts with itself, another owner of A does.
    assert_eq!(run(&mut b, &fh, lockt(true, 100, NFS4_LENGTH_EOF, b"lb")), Got::Ok);
    assert_eq!(run(&mut b, &fh, lockt(false, 99, 1, b"lb")), denied_a(0, 100));
    assert_eq!(run(&mut a, &fh, lockt(true, 0, 100, b"la")), Got::Ok);
    assert_eq!(run(&mut a, &fh, lockt(false, 0, 1, b"la2")), denied_a(0, 100));
    // LOCKU of the middle splits A's lock in two; the stateid's seqid moves.
    let la2 = sid(run(&mut a, &fh, locku(40, 20, &la)));
    assert_eq!((la2.other, la2.seqid), (la.other, 2));
    assert_eq!(sh.v4().locked_ranges(), 2);
    assert_eq!(run(&mut b, &fh, lockt(true, 0, 1, b"lb")), denied_a(0, 40));
    assert_eq!(run(&mut b, &fh, lockt(true, 60, 1, b"lb")), denied_a(60, 40));
    assert_eq!(run(&mut b, &fh, lockt(true, 40, 20, b"lb")), Got::Ok);
    let lb = sid(run(&mut b, &fh, lock_new(false, false, 50, 10, &ob, b"lb")));
    // The old seqid is OLD_STATEID; a newer one BAD_STATEID.
    assert_eq!(run(&mut a, &fh, locku(0, 1, &la)), Got::Err(NFS4ERR_OLD_STATEID));
    let ahead = Stateid { seqid: 9, ..la2 };
    assert_eq!(run(&mut a, &fh, locku(0, 1, &ahead)), Got::Err(NFS4ERR_BAD_STATEID));
    // A downgrades its first part to a read lock: B may read-lock there.
    let la3 = sid(run(&mut a, &fh, lock_exist(false, 0, 40, &la2)));
    assert_eq!(la3.seqid, 3);
    assert_eq!(run(&mut b, &fh, lockt(false, 0, 40, b"lb")), Got::Ok);
    assert_eq!(
        run(&mut b, &fh, lockt(true, 0, 1, b"lb")),
        Got::Denied(0, 40, READ_LT, a.clientid, b"la".to_vec())
    );
    let lb2 = sid(run(&mut b, &fh, lock_exist(false, 0, 10, &lb)));
    // ... and A cannot upgrade back over B's read lock.
    assert_eq!(
        run(&mut a, &fh, lock_exist(true, 0, 40, &la3)),
        Got::Denied(0, 10, READ_LT, b.clientid, b"lb".to_vec())
    );
    // To the end of every file: all ones.
    let la4 = sid(run(&mut a, &fh, lock_exist(true, 1000, NFS4_LENGTH_EOF, &la3)));
    assert_eq!(
        run(&mut b, &fh, lockt(false, u64::MAX - 1, 1, b"lb")),
        Got::Denied(1000, NFS4_LENGTH_EOF, WRITE_LT, a.clientid, b"la".to_vec())
    );
    // Ranges of length 0 or past 2^64 - 1: INVAL.
    assert_eq!(run(&mut a, &fh, lock_exist(true, 0, 0, &la4)), Got::Err(NFS4ERR_INVAL));
    assert_eq!(
        run(&mut a, &fh, lock_exist(true, u64::MAX, 2, &la4)),
        Got::Err(NFS4ERR_INVAL)
    );
    assert_eq!(
        run(&mut b, &fh, lockt(true, 10, u64::MAX - 1, b"lb")),
        Got::Err(NFS4ERR_INVAL)
    );
    // Another client's lock stateid is not B's.
    assert_eq!(run(&mut b, &fh, locku(0, 1, &la4)), Got::Err(NFS4ERR_BAD_STATEID));
    // A lock stateid reads and writes with its open's access.
    let (_, got) = b.read(&fh, &lb2, 0, 4).unwrap();
    assert_eq!(got, [7; 4]);
    b.write(&fh, &lb2, 300, FILE_SYNC4, b"by-lock").unwrap();
    // RELEASE_LOCKOWNER is NFSv4.0's: NOTSUPP.
    let rl = op(|e| {
        e.u32(OP_RELEASE_LOCKOWNER).u64(a.clientid).opaque(b"la");
    });
    assert_eq!(a.seq(&[rl]).status, NFS4ERR_NOTSUPP);
    // While locks are held: CLOSE and FREE_STATEID are LOCKS_HELD.
    assert_eq!(run(&mut a, &fh, close(&oa)), Got::Err(NFS4ERR_LOCKS_HELD));
    assert_eq!(run(&mut a, &fh, free_stateid(&la4)), Got::Err(NFS4ERR_LOCKS_HELD));
    // Unlocked wholly, the lock stateid may be freed, then it is unknown.
    let la5 = sid(run(&mut a, &fh, locku(0, NFS4_LENGTH_EOF, &la4)));
    assert_eq!(run(&mut a, &fh, free_stateid(&la5)), Got::Ok);
    assert_eq!(run(&mut a, &fh, locku(0, 1, &la5)), Got::Err(NFS4ERR_BAD_STATEID));
    assert_eq!(run(&mut a, &fh, close(&oa)), Got::Sid(Stateid::INVALID));
    // B unlocks and closes: its lock stateid goes with the open.
    let lb3 = sid(run(&mut b, &fh, locku(0, NFS4_LENGTH_EOF, &lb2)));
    assert_eq!(run(&mut b, &fh, close(&ob)), Got::Sid(Stateid::INVALID));
    assert_eq!(run(&mut b, &fh, locku(0, 1, &lb3)), Got::Err(NFS4ERR_BAD_STATEID));
    assert_eq!((sh.v4().lock_stateids(), sh.v4().opens()), (0, 0));
}

#[test]
fn nfs4_lock_modes_and_bounds() {
    let (_s, sh) = setup(Kind::Mem);
    let mut a = client(Direct::new(&sh), "bounds");
    let dir = a.walk("/b").unwrap();
    let (rd, fh) = a
        .open(&dir, open("g", 1, 0, b"o-read", Some((UNCHECKED4, 0o666, [0; 8]))))
        .unwrap();
    // A write lock through a read-only open: OPENMODE.
    assert_eq!(
        run(&mut a, &fh, lock_new(true, false, 0, 1, &rd, b"l")),
        Got::Err(NFS4ERR_OPENMODE)
    );
    // A directory: ISDIR.
    assert_eq!(run(&mut a, &dir, lockt(true, 0, 1, b"l")), Got::Err(NFS4ERR_ISDIR));
    // Every other byte, up to the bound of ranges per lock stateid.
    let mut l = sid(run(&mut a, &fh, lock_new(false, false, 0, 1, &rd, b"l")));
    for i in 1..rpcrdma_apps::nfs4::lock::MAX_RANGES_PER_STATEID as u64 {
        l = sid(run(&mut a, &fh, lock_exist(false, 2 * i, 1, &l)));
    }
    let n = rpcrdma_apps::nfs4::lock::MAX_RANGES_PER_STATEID as u64;
    assert_eq!(
        run(&mut a, &fh, lock_exist(false, 2 * n, 1, &l)),
        Got::Err(NFS4ERR_RESOURCE)
    );
    // Filling a gap merges three ranges into one, which is allowed.
    let l = sid(run(&mut a, &fh, lock_exist(false, 1, 1, &l)));
    assert_eq!(sh.v4().locked_ranges(), n as usize - 1);
    // Splitting past the bound is refused as well.
    let l = sid(run(&mut a, &fh, lock_exist(false, 2 * n, 1, &l)));
    assert_eq!(run(&mut a, &fh, locku(1, 1, &l)), Got::Err(NFS4ERR_RESOURCE));
}

/// A client whose lease expired keeps its locks until another client's
/// lock conflicts with them; then its state goes and the lock is granted.
#[test]
fn nfs4_lease_expiry_frees_locks() {
    let (_s, sh) = setup(Kind::Mem);
    let mut a = client(Direct::new(&sh), "expires");
    let mut b = client(Direct::new(&sh), "lives");
    let dir = a.walk("/b").unwrap();
    let (oa, fh) = a
        .open(&dir, open("h", 3, 0, b"oa", Some((UNCHECKED4, 0o666, [0; 8]))))
        .unwrap();
    let (ob, _) = b.open(&dir, open("h", 3, 0, b"ob", None)).unwrap();
    sid(run(&mut a, &fh, lock_new(true, false, 0, NFS4_LENGTH_EOF, &oa, b"la")));
    assert!(matches!(
        run(&mut b, &fh, lock_new(true, false, 5, 1, &ob, b"lb")),
        Got::Denied(0, NFS4_LENGTH_EOF, WRITE_LT, _, _)
    ));
    sh.v4().set_lease(Duration::from_millis(50));
    std::thread::sleep(Duration::from_millis(120));
    // B's SEQUENCE renews B; A has expired: a courtesy client until now.
    assert_eq!(sh.v4().clients(), 2);
    assert_eq!(run(&mut b, &fh, lockt(true, 5, 1, b"lb")), Got::Ok);
    assert_eq!(sh.v4().clients(), 1, "A's record went at the conflict");
    sid(run(&mut b, &fh, lock_new(true, false, 5, 1, &ob, b"lb")));
    assert_eq!((sh.v4().lock_stateids(), sh.v4().opens()), (1, 1));
    sh.v4().set_lease(Duration::from_secs(90));
}

/// One export `/b` of backend `b0`, root not squashed, with the NFSv4
/// client records kept in `state` (so a restarted target has a grace
/// period).
fn restartable(state: &TempDir) -> Config {
    let mut b = Ex::new("/b", "b0");
    b.root_squash = false;
    let mut cfg = config(&["b0"], &[b], MIB as u32);
    cfg.nfs4.state_dir = Some(state.0.to_str().unwrap().to_string());
    cfg
}

/// A target restart on `uring`: the client's record is durable before its
/// first OPEN is answered; after the restart there is a grace period in
/// which only reclaims succeed (through the sim engine), strangers get
/// NFS4ERR_GRACE / NFS4ERR_NO_GRACE, and RECLAIM_COMPLETE ends it.
#[test]
fn nfs4_restart_with_reclaim_through_the_engine_on_uring() {
    let data = TempDir::new("nfs4-reclaim-data");
    let state = TempDir::new("nfs4-reclaim-state");
    let cfg = restartable(&state);
    let start = || {
        let be = open_uring("b0", &data.0);
        NfsShared::new(&cfg, vec![("b0".into(), be)]).unwrap()
    };
    let retry = |c: &mut V4<_>, ops: &[Vec<u8>]| -> Res {
        for _ in 0..1000 {
            let r = c.seq(ops);
            if r.status != NFS4ERR_DELAY {
                return r;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        panic!("DELAY for ever");
    };
    let (fh, lock_before) = {
        let sh = start();
        assert!(!sh.v4().in_grace(), "no records yet");
        let p = pools(4);
        let mut c = V4::new(sim_engine(&p, &sh, 7, 2, 4), "reclaimer");
        c.setup(4);
        let dir = c.walk("/b").unwrap();
        // The first OPEN waits (DELAY) until the record is on disk.
        let r = c.seq(&[
            putfh(&dir),
            open("f", 3, 0, b"o", Some((UNCHECKED4, 0o644, [0; 8]))),
            getfh(),
        ]);
        assert_eq!(r.status, NFS4ERR_DELAY, "the record is written first");
        let r = retry(
            &mut c,
            &[
                putfh(&dir),
                open("f", 3, 0, b"o", Some((UNCHECKED4, 0o644, [0; 8]))),
                getfh(),
            ],
        );
        assert_eq!(r.status, NFS4_OK);
        let mut d = r.dec();
        res(&mut d, OP_PUTFH);
        res(&mut d, OP_OPEN);
        let os = get_stateid(&mut d);
        open_rest(&mut d);
        res(&mut d, OP_GETFH);
        let fh = d.opaque();
        c.write(&fh, &os, 0, FILE_SYNC4, b"before the restart").unwrap();
        let l = sid(run(&mut c, &fh, lock_new(true, false, 0, 6, &os, b"lo")));
        (fh, l)
    };
    let text = std::fs::read_to_string(state.0.join("b0.nfs4-clients")).unwrap();
    assert!(text.contains(&"reclaimer".bytes().map(|x| format!("{x:02x}")).collect::<String>()));

    // The restart.
    let sh = start();
    assert!(sh.v4().in_grace());
    let p = pools(4);
    let mut c = V4::new(sim_engine(&p, &sh, 8, 2, 4), "reclaimer");
    c.session(4);
    let mut s = V4::new(Direct::new(&sh), "stranger");
    s.session(4);
    let dir = s.walk("/b").unwrap();
    // Anything but a reclaim: GRACE; a reclaim by a client the records do
    // not name: NO_GRACE.
    assert_eq!(s.open(&dir, open("f", 1, 0, b"s", None)), Err(NFS4ERR_GRACE));
    let claim_prev = |owner: &'static [u8]| {
        op(move |e| {
            e.u32(OP_OPEN).u32(0).u32(3).u32(0).u64(0).opaque(owner);
            e.u32(OPEN4_NOCREATE).u32(CLAIM_PREVIOUS).u32(OPEN_DELEGATE_NONE);
        })
    };
    assert_eq!(s.seq(&[putfh(&fh), claim_prev(b"s")]).status, NFS4ERR_NO_GRACE);
    assert_eq!(run(&mut s, &fh, lockt(true, 0, 1, b"s")), Got::Err(NFS4ERR_GRACE));
    // The old stateids are stale.
    assert_eq!(
        run(&mut c, &fh, locku(0, 1, &lock_before)),
        Got::Err(NFS4ERR_STALE_STATEID)
    );
    // The reclaimer gets its open and its lock back.
    let r = c.seq(&[putfh(&fh), claim_prev(b"o")]);
    assert_eq!(r.status, NFS4_OK);
    let mut d = r.dec();
    res(&mut d, OP_PUTFH);
    res(&mut d, OP_OPEN);
    let os = get_stateid(&mut d);
    assert_eq!(
        run(&mut c, &fh, lock_new(true, false, 0, 6, &os, b"lo")),
        Got::Err(NFS4ERR_GRACE)
    );
    let l = sid(run(&mut c, &fh, lock_new(true, true, 0, 6, &os, b"lo")));
    assert_eq!(l.seqid, 1);
    // RECLAIM_COMPLETE of the only client named ends the grace period.
    let rc = op(|e| {
        e.u32(OP_RECLAIM_COMPLETE).bool(false);
    });
    assert_eq!(c.seq(std::slice::from_ref(&rc)).status, NFS4_OK);
    assert!(!sh.v4().in_grace());
    assert_eq!(c.seq(&[putfh(&fh), claim_prev(b"o2")]).status, NFS4ERR_NO_GRACE);
    // The stranger now opens; the reclaimed lock holds against it.
    let (so, _) = retry_open(&mut s, &dir);
    assert_eq!(
        run(&mut s, &fh, lock_new(false, false, 2, 1, &so, b"s")),
        Got::Denied(0, 6, WRITE_LT, c.clientid, b"lo".to_vec())
    );
    let (_, got) = c.read(&fh, &os, 0, 64).unwrap();
    assert_eq!(got, b"before the restart");
}

/// A client that held a delegation when the target restarted reclaims its
/// open with CLAIM_PREVIOUS naming the delegation's type (the Linux client
/// does so for a file it wrote under a write delegation, then reclaims the
/// locks it held locally under it). The delegation itself is not in the
/// records, so the open is reclaimed with none (OPEN_DELEGATE_NONE, as the
/// Linux server answers a delegation reclaim it refuses) rather than the
/// whole reclaim refused: refused, the client lost its locks ("lost 1
/// locks") in `tests/kernel/nfs4.sh`'s restart step once write delegations
/// were granted.
#[test]
fn backchannel_delegation_reclaim_after_restart_reopens_the_file() {
    let data = TempDir::new("nfs4-deleg-reclaim-data");
    let state = TempDir::new("nfs4-deleg-reclaim-state");
    let cfg = restartable(&state);
    let start = || {
        let be = open_uring("b0", &data.0);
        NfsShared::new(&cfg, vec![("b0".into(), be)]).unwrap()
    };
    let fh = {
        let sh = start();
        let mut c = V4::new(Direct::new(&sh), "holder");
        c.session(4);
        let dir = c.walk("/b").unwrap();
        let mut got = None;
        for _ in 0..1000 {
            match c.open(&dir, open("f", 3, 0, b"o", Some((UNCHECKED4, 0o644, [0; 8])))) {
                Err(NFS4ERR_DELAY) => std::thread::sleep(Duration::from_millis(2)),
                r => {
                    got = Some(r.unwrap());
                    break;
                }
            }
        }
        got.expect("the open").1
    };
    // The restart: in the grace period the holder reclaims its open, saying
    // it held a write (then a read) delegation on the file.
    let sh = start();
    assert!(sh.v4().in_grace());
    let mut c = V4::new(Direct::new(&sh), "holder");
    c.session(4);
    for (owner, had, at) in [
        (&b"o"[..], OPEN_DELEGATE_WRITE, 0),
        (&b"o2"[..], OPEN_DELEGATE_READ, 10),
    ] {
        let reclaim = op(move |e| {
            e.u32(OP_OPEN).u32(0).u32(3).u32(0).u64(0).opaque(owner);
            e.u32(OPEN4_NOCREATE).u32(CLAIM_PREVIOUS).u32(had);
        });
        let r = c.seq(&[putfh(&fh), reclaim]);
        assert_eq!(r.status, NFS4_OK, "a reclaim naming delegation type {had}");
        let mut d = r.dec();
        res(&mut d, OP_PUTFH);
        res(&mut d, OP_OPEN);
        let os = get_stateid(&mut d);
        // The open comes back with no delegation (open_rest checks).
        open_rest(&mut d);
        assert_eq!(
            sid(run(&mut c, &fh, lock_new(true, true, at, 6, &os, owner))).seqid,
            1,
            "its locks are reclaimed under the reclaimed open"
        );
    }
}

fn retry_open(s: &mut V4<Direct>, dir: &[u8]) -> (Stateid, Vec<u8>) {
    for _ in 0..1000 {
        match s.open(dir, open("f", 1, 0, b"s", None)) {
            Err(NFS4ERR_DELAY) => std::thread::sleep(Duration::from_millis(2)),
            r => return r.unwrap(),
        }
    }
    panic!("DELAY for ever");
}
