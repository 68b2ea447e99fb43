//! After a crowded-CPU move (`reactor::crowding`) the target's helper
//! threads follow the cores: `OffCores::follow_move` moves every thread
//! confined to the old off-core set to the new one, and no other. Alone in
//! its test binary: it re-pins threads of the whole process.

use std::sync::mpsc;

use rpcrdma_apps::cpus::{set_thread_cpus, thread_cpus, thread_cpus_of, CoreCpus, Followed, OffCores};

/// A thread confined to `cpus` that reports its id, then waits until told
/// to report its allowed CPUs and exit.
fn parked(cpus: Vec<usize>) -> (libc::pid_t, mpsc::Sender<()>, std::thread::JoinHandle<Vec<usize>>) {
    let (tid_tx, tid_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let h = std::thread::spawn(move || {
        set_thread_cpus(&cpus).unwrap();
        // SAFETY: plain system call.
        tid_tx.send(unsafe { libc::gettid() }).unwrap();
        let _ = go_rx.recv();
        thread_cpus().unwrap()
    });
    (tid_rx.recv().unwrap(), go_tx, h)
}

/// Issue 24 (session 25): with every CPU a core's, the helpers share the
/// admin core's CPU; when the io core is moved onto it, they must move to
/// the CPU it left, or an fsync runs beside the io core again.
#[test]
fn nfs_safety_helpers_follow_a_moved_core() {
    let allowed = thread_cpus().unwrap();
    if allowed.len() < 2 {
        eprintln!("skipped: needs two CPUs (allowed: {allowed:?})");
        return;
    }
    let (a, b) = (allowed[0], allowed[1]);
    // Two cores: admin on `a`, io on `b`; the process may use `a` and `b`.
    let off = OffCores::with_allowed(
        vec![a, b],
        CoreCpus {
            reactor: vec![a, b],
            io: vec![b],
        },
    );
    assert_eq!(off.cpus(), vec![a], "helpers on the admin core's CPU");
    let clone = off.clone();
    let (helper, helper_go, helper_h) = parked(off.cpus());
    let (admin, admin_go, admin_h) = parked(vec![a]);
    let (other, other_go, other_h) = parked(vec![a, b]);
    // The io core moved to `a`: the helpers go to `b`, the core threads
    // (kept) and a thread confined elsewhere stay.
    let f = off.follow_move(&[a, a], &[admin]).expect("the helpers' set changed");
    assert_eq!(
        f,
        Followed {
            from: vec![a],
            to: vec![b],
            threads: 1,
            failed: 0
        }
    );
    assert_eq!(thread_cpus_of(helper), Some(vec![b]));
    assert_eq!(thread_cpus_of(admin), Some(vec![a]));
    assert_eq!(thread_cpus_of(other), Some(vec![a, b]));
    // Clones (the helper pool's, the TCP listener's) see the new set, so a
    // helper started after the move goes there too.
    assert_eq!(clone.cpus(), vec![b]);
    // The same placement again changes nothing.
    assert_eq!(off.follow_move(&[a, a], &[admin]), None);
    for (go, h, want) in [
        (helper_go, helper_h, vec![b]),
        (admin_go, admin_h, vec![a]),
        (other_go, other_h, vec![a, b]),
    ] {
        go.send(()).unwrap();
        assert_eq!(h.join().unwrap(), want);
    }
}
