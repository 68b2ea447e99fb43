//! Stable client records and the grace period (RFC 8881 s8.4.2, s8.4.3).
//!
//! A backend whose files outlive the process (`uring`, `nvme`) keeps, in
//! the state directory of the configuration (`nfs4.state_dir`), one small
//! file `<backend name>.nfs4-clients`: the `co_ownerid` of every client
//! that holds state there, one per line in hexadecimal. A client's first
//! OPEN on such a backend adds it; the OPEN is answered NFS4ERR_DELAY until
//! the file holding it is durable (written to a temporary file, fsynced,
//! renamed over the old one, the directory fsynced). The writing happens
//! on a thread of its own, never on a reactor core, and the client's retry
//! finds it done. DESTROY_CLIENTID takes the client out again.
//!
//! At start-up the records of every backend are read. When they name any
//! client, the server is in its grace period for one lease time, or until
//! every client named has sent RECLAIM_COMPLETE: a client named in the
//! records may reclaim its opens (OPEN with CLAIM_PREVIOUS) and locks (LOCK
//! with `reclaim` set); any other OPEN, LOCK or LOCKT is NFS4ERR_GRACE. A
//! reclaim outside the grace period, after the client's RECLAIM_COMPLETE,
//! or by a client the records do not name is NFS4ERR_NO_GRACE.
//!
//! Bounded: a record holds at most [`crate::nfs4::state::MAX_CLIENTS`]
//! owners of at most `NFS4_OPAQUE_LIMIT` bytes; longer files or lines are
//! not read past the bound.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex, MutexGuard};
use std::time::Instant;

use proto::nfs4::*;

use super::state::{V4State, MAX_CLIENTS};

/// The first line of a record file.
const MAGIC: &str = "rpcrdma-nfs4-clients 1";

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Nothing panics while holding these locks: the data stays consistent.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) || s.len() > 2 * NFS4_OPAQUE_LIMIT as usize {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

#[derive(Debug, Default)]
struct Owners {
    /// Each owner and the generation that added it.
    list: Vec<(Vec<u8>, u64)>,
    /// Bumped on every change.
    gen: u64,
}

/// One backend's record file.
#[derive(Debug)]
pub struct Record {
    path: PathBuf,
    owners: Mutex<Owners>,
    /// The generation on disk.
    durable: AtomicU64,
    /// A write is queued for the writer.
    queued: AtomicBool,
}

impl Record {
    /// Read `path` (an absent file is an empty record).
    fn load(path: PathBuf) -> std::io::Result<Record> {
        let mut list = Vec::new();
        match std::fs::read_to_string(&path) {
            Ok(text) => {
                let mut lines = text.lines();
                if lines.next() == Some(MAGIC) {
                    for l in lines.take(MAX_CLIENTS) {
                        if let Some(o) = unhex(l.trim()) {
                            if !o.is_empty() && !list.iter().any(|(x, _)| *x == o) {
                                list.push((o, 0));
                            }
                        }
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        Ok(Record {
            path,
            owners: Mutex::new(Owners { list, gen: 0 }),
            durable: AtomicU64::new(0),
            queued: AtomicBool::new(false),
        })
    }

    /// Write the current owners durably (the writer thread).
    fn write_now(&self) -> std::io::Result<()> {
        self.queued.store(false, Ordering::SeqCst);
        let (gen, text) = {
            let o = lock(&self.owners);
            let mut text = String::from(MAGIC);
            text.push('\n');
            for (x, _) in &o.list {
                text.push_str(&hex(x));
                text.push('\n');
            }
            (o.gen, text)
        };
        let tmp = self.path.with_extension("nfs4-clients.tmp");
        {
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(text.as_bytes())?;
            f.sync_all()?;
        }
        std::fs::rename(&tmp, &self.path)?;
        if let Some(dir) = self.path.parent() {
            std::fs::File::open(dir)?.sync_all()?;
        }
        self.durable.fetch_max(gen, Ordering::SeqCst);
        Ok(())
    }
}

/// The records of every backend (indexed as the service's backends).
#[derive(Debug, Default)]
pub struct Records {
    backends: Vec<Option<Arc<Record>>>,
    writer: Mutex<Option<mpsc::Sender<Arc<Record>>>>,
    /// Where the writer thread runs (started by whichever thread first
    /// needs it, a core's as a rule: it must not keep that core's pinning).
    off_cores: crate::cpus::OffCores,
}

impl Records {
    /// No records: nothing persists, no grace period.
    pub fn none() -> Records {
        Records::default()
    }

    /// The records in `dir` of the backends `(name, persists)`, in the
    /// service's backend order; a backend that does not persist has none.
    pub fn open(dir: &Path, backends: &[(&str, bool)]) -> std::io::Result<Records> {
        std::fs::create_dir_all(dir)?;
        let mut v = Vec::with_capacity(backends.len());
        for (name, persists) in backends {
            v.push(match persists {
                true => Some(Arc::new(Record::load(dir.join(format!("{name}.nfs4-clients")))?)),
                false => None,
            });
        }
        Ok(Records {
            backends: v,
            writer: Mutex::new(None),
            off_cores: crate::cpus::OffCores::default(),
        })
    }

    /// Run the writer thread on `cpus`' set (off the io cores' CPUs); by
    /// default it keeps the affinity of the thread that starts it.
    pub fn with_off_cores(mut self, cpus: crate::cpus::OffCores) -> Records {
        self.off_cores = cpus;
        self
    }

    /// The owners the records named at start-up (each once).
    pub fn known(&self) -> Vec<Vec<u8>> {
        let mut all: Vec<Vec<u8>> = Vec::new();
        for r in self.backends.iter().flatten() {
            for (o, _) in &lock(&r.owners).list {
                if !all.contains(o) {
                    all.push(o.clone());
                }
            }
        }
        all
    }

    /// Whether `backend` keeps a record.
    pub fn keeps(&self, backend: usize) -> bool {
        matches!(self.backends.get(backend), Some(Some(_)))
    }

    /// Whether `owner` is durably in `backend`'s record (or the backend
    /// keeps none); when not, it is added and a write queued.
    pub fn ensure(&self, backend: usize, owner: &[u8]) -> bool {
        let Some(Some(r)) = self.backends.get(backend) else {
            return true;
        };
        let need = {
            let mut o = lock(&r.owners);
            match o.list.iter().find(|(x, _)| x == owner) {
                Some((_, g)) => *g,
                None => {
                    if o.list.len() >= MAX_CLIENTS {
                        // Full: the oldest entry makes room (it can no
                        // longer reclaim after a restart).
                        o.list.remove(0);
                    }
                    o.gen += 1;
                    let g = o.gen;
                    o.list.push((owner.to_vec(), g));
                    g
                }
            }
        };
        if r.durable.load(Ordering::SeqCst) >= need {
            return true;
        }
        self.kick(r);
        false
    }

    /// Take `owner` out of every record (DESTROY_CLIENTID).
    pub fn forget(&self, owner: &[u8]) {
        for r in self.backends.iter().flatten() {
            let changed = {
                let mut o = lock(&r.owners);
                let n = o.list.len();
                o.list.retain(|(x, _)| x != owner);
                if o.list.len() != n {
                    o.gen += 1;
                }
                o.list.len() != n
            };
            if changed {
                self.kick(r);
            }
        }
    }

    /// Queue a write of `r` on the writer thread (started on first use).
    fn kick(&self, r: &Arc<Record>) {
        if r.queued.swap(true, Ordering::SeqCst) {
            return;
        }
        let mut w = lock(&self.writer);
        if w.is_none() {
            let (tx, rx) = mpsc::channel::<Arc<Record>>();
            let cpus = self.off_cores.clone();
            let spawned = std::thread::Builder::new().name("nfs4-records".into()).spawn(move || {
                cpus.apply();
                for rec in rx {
                    if let Err(e) = rec.write_now() {
                        eprintln!("nfs4: writing {}: {e}", rec.path.display());
                    }
                }
            });
            if spawned.is_err() {
                r.queued.store(false, Ordering::SeqCst);
                return;
            }
            *w = Some(tx);
        }
        if let Some(tx) = w.as_ref() {
            if tx.send(r.clone()).is_err() {
                r.queued.store(false, Ordering::SeqCst);
            }
        }
    }

    /// Wait (at most `ms`) until every record is durable: tests, shutdown.
    pub fn wait_durable(&self, ms: u64) -> bool {
        let t0 = Instant::now();
        loop {
            let all = self.backends.iter().flatten().all(|r| {
                let gen = lock(&r.owners).gen;
                r.durable.load(Ordering::SeqCst) >= gen
            });
            if all {
                return true;
            }
            if t0.elapsed().as_millis() as u64 >= ms {
                return false;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
}

/// The grace period after a restart.
#[derive(Debug, Default)]
pub(super) struct Grace {
    /// When it ends at the latest (`None`: over, or never begun).
    until: Option<Instant>,
    /// The owners the records named.
    known: Vec<Vec<u8>>,
    /// Those of them that sent RECLAIM_COMPLETE.
    done: Vec<Vec<u8>>,
}

impl Grace {
    /// A grace period ending at `until` for the `known` owners (none when
    /// there are none).
    pub fn new(known: Vec<Vec<u8>>, until: Instant) -> Grace {
        Grace {
            until: (!known.is_empty()).then_some(until),
            known,
            done: Vec::new(),
        }
    }

    /// Whether the grace period still runs at `now`; it ends at its time or
    /// once every known client completed its reclaim.
    pub fn active(&mut self, now: Instant) -> bool {
        match self.until {
            None => false,
            Some(u) if now >= u || self.known.iter().all(|k| self.done.contains(k)) => {
                self.until = None;
                false
            }
            Some(_) => true,
        }
    }

    /// Whether the grace period has not been seen to end yet.
    pub fn running(&self) -> bool {
        self.until.is_some()
    }

    /// The owners the records named that did not complete a reclaim.
    pub fn unreclaimed(&self) -> Vec<Vec<u8>> {
        self.known.iter().filter(|k| !self.done.contains(k)).cloned().collect()
    }

    /// Whether the records named `owner`.
    pub fn knows(&self, owner: &[u8]) -> bool {
        self.known.iter().any(|k| k == owner)
    }

    /// `owner` sent RECLAIM_COMPLETE.
    pub fn complete(&mut self, owner: &[u8]) {
        if self.knows(owner) && !self.done.iter().any(|d| d == owner) {
            self.done.push(owner.to_vec());
        }
    }
}

impl V4State {
    /// Whether the grace period runs.
    pub fn in_grace(&self) -> bool {
        let mut t = self.lock_tables();
        self.grace_active(&mut t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_bound_their_input() {
        let dir = std::env::temp_dir().join(format!("nfs4-records-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let r = Records::open(&dir, &[("u", true), ("m", false)]).unwrap();
        assert!(r.known().is_empty());
        assert!(r.ensure(1, b"any"), "a backend without records");
        assert!(!r.ensure(0, b"client-a"), "not durable yet");
        assert!(r.wait_durable(60_000));
        assert!(r.ensure(0, b"client-a"));
        assert!(!r.ensure(0, &[0, 1, 0xff]));
        assert!(r.wait_durable(60_000));
        let again = Records::open(&dir, &[("u", true), ("m", false)]).unwrap();
        assert_eq!(again.known(), vec![b"client-a".to_vec(), vec![0, 1, 0xff]]);
        again.forget(b"client-a");
        assert!(again.wait_durable(60_000));
        let third = Records::open(&dir, &[("u", true)]).unwrap();
        assert_eq!(third.known(), vec![vec![0, 1, 0xff]]);
        // Garbage lines and a wrong first line are not read.
        std::fs::write(
            dir.join("u.nfs4-clients"),
            format!("{MAGIC}\nzz\n0\n{}\n6162\n", "a".repeat(4000)),
        )
        .unwrap();
        let g = Records::open(&dir, &[("u", true)]).unwrap();
        assert_eq!(g.known(), vec![b"ab".to_vec()]);
        std::fs::write(dir.join("u.nfs4-clients"), "something else\n6162\n").unwrap();
        assert!(Records::open(&dir, &[("u", true)]).unwrap().known().is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn grace_ends_at_its_time_or_when_all_reclaimed() {
        let now = Instant::now();
        let mut g = Grace::new(
            vec![b"a".to_vec(), b"b".to_vec()],
            now + std::time::Duration::from_secs(60),
        );
        assert!(g.active(now));
        g.complete(b"a");
        g.complete(b"stranger");
        assert!(g.active(now));
        g.complete(b"b");
        assert!(!g.active(now), "every known client reclaimed");
        let mut g = Grace::new(vec![b"a".to_vec()], now + std::time::Duration::from_millis(5));
        assert!(!g.active(now + std::time::Duration::from_millis(6)));
        assert!(!Grace::new(vec![], now + std::time::Duration::from_secs(60)).active(now));
    }
}
