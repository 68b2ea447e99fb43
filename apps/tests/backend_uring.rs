//! The `uring` backend: the conformance suite on the system's temporary
//! directory and on tmpfs (`/dev/shm`), plus what only a persistent backend
//! has: handles that survive a restart, files owned by the caller on disk,
//! the export key, and the O_DIRECT path.
//!
//! Needs root (CAP_DAC_READ_SEARCH for `open_by_handle_at`, chown to other
//! uids, `trusted.*` extended attributes), as the target itself.

mod backend_common;
mod cpu_list;

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use backend_common::{create_file, mkdir, pattern, read_exact, AlignedBuf, Fixture, OWNER};
use rpcrdma_apps::backend::uring::UringBackend;
use rpcrdma_apps::backend::{
    read_sync, write_sync, Backend, CreateHow, FileHandle, FsError, IoChannel, IoDesc, IoDone, IoOp, SetAttr, Stable,
};

/// A fresh directory, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new_in(base: &Path) -> TempDir {
        static N: AtomicU64 = AtomicU64::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        let p = base.join(format!(
            "rpcrdma-uring-{}-{}-{nanos}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const DEPTH: u32 = 64;

fn fixture_in(base: &Path) -> Fixture {
    let dir = TempDir::new_in(base);
    // The export is a subdirectory the backend creates.
    let b = UringBackend::open("u0", &dir.0.join("export"), DEPTH, true).unwrap();
    Fixture {
        backend: Arc::new(b),
        guard: Box::new(dir),
    }
}

mod tmp_dir {
    fn fixture() -> crate::backend_common::Fixture {
        crate::fixture_in(&std::env::temp_dir())
    }
    crate::conformance_tests!(fixture);
}

mod tmpfs {
    fn fixture() -> crate::backend_common::Fixture {
        crate::fixture_in(std::path::Path::new("/dev/shm"))
    }
    crate::conformance_tests!(fixture);
}

fn temp() -> TempDir {
    TempDir::new_in(&std::env::temp_dir())
}

/// Create files, write them FILE_SYNC, drop the backend, open it again: the
/// same handles name the same files with the same data.
#[test]
fn handles_and_data_survive_restart() {
    let dir = temp();
    let export = dir.0.join("export");
    let (root, d, f, g, data) = {
        let b = UringBackend::open("u", &export, DEPTH, true).unwrap();
        let root = b.root();
        let (d, _) = mkdir(&b, &root, b"dir");
        let (f, _) = create_file(&b, &d, b"file");
        let (g, _) = create_file(&b, &root, b"other");
        let data = pattern(300_000, 77);
        let mut ch = b.open_channel(0).unwrap();
        let (n, committed) = write_sync(&mut *ch, &f, 0, &data, Stable::FileSync).unwrap();
        assert_eq!(n as usize, data.len());
        assert_eq!(committed, Stable::FileSync);
        write_sync(&mut *ch, &g, 0, b"small", Stable::FileSync).unwrap();
        // Renamed after the handle was given out: the handle follows the file.
        b.rename(&d, b"file", &d, b"renamed").unwrap();
        b.sync_all().unwrap();
        (root, d, f, g, data)
    };
    let b = UringBackend::open("u", &export, DEPTH, true).unwrap();
    assert_eq!(b.root(), root, "the root handle is stable");
    assert_eq!(b.lookup(&root, b"dir").unwrap().0, d);
    assert_eq!(b.lookup(&d, b"renamed").unwrap().0, f);
    let mut ch = b.open_channel(1).unwrap();
    let (got, eof) = read_exact(&mut *ch, &f, 0, data.len() + 1);
    assert!(eof);
    assert!(got == data, "data after restart");
    assert_eq!(read_exact(&mut *ch, &g, 0, 100).0, b"small");
    assert_eq!(b.getattr(&f).unwrap().size, data.len() as u64);
    // And the files are plain files on disk.
    assert_eq!(std::fs::read(export.join("dir/renamed")).unwrap(), data);
    b.remove(&d, b"renamed").unwrap();
    drop(ch);
    drop(b);
    let b = UringBackend::open("u", &export, DEPTH, true).unwrap();
    assert_eq!(b.getattr(&f).unwrap_err(), FsError::Stale, "removed before the restart");
}

/// New objects belong to the caller on disk, not to the target's user.
#[test]
fn owner_is_set_on_disk() {
    let dir = temp();
    let export = dir.0.join("e");
    let b = UringBackend::open("u", &export, DEPTH, true).unwrap();
    let root = b.root();
    create_file(&b, &root, b"f");
    mkdir(&b, &root, b"d");
    b.symlink(&root, b"s", b"f", &SetAttr::default(), OWNER).unwrap();
    b.mknod(
        &root,
        b"p",
        rpcrdma_apps::backend::NodeKind::Fifo,
        &SetAttr::default(),
        OWNER,
    )
    .unwrap();
    b.create(&root, b"x", CreateHow::Exclusive(*b"12345678"), OWNER)
        .unwrap();
    for name in ["f", "d", "s", "p", "x"] {
        let m = std::fs::symlink_metadata(export.join(name)).unwrap();
        assert_eq!((m.uid(), m.gid()), (OWNER.uid, OWNER.gid), "{name}");
    }
    assert_eq!(
        std::fs::symlink_metadata(export.join("f")).unwrap().mode() & 0o7777,
        0o644
    );
}

/// A handle made by another export (another key) is not ours, even for a
/// file on the same file system.
#[test]
fn other_exports_handles_are_bad() {
    let dir = temp();
    let a = UringBackend::open("a", &dir.0.join("a"), DEPTH, true).unwrap();
    let b = UringBackend::open("b", &dir.0.join("b"), DEPTH, true).unwrap();
    let (fb, _) = create_file(&b, &b.root(), b"outside-a");
    assert_eq!(a.getattr(&fb).unwrap_err(), FsError::BadHandle);
    assert_eq!(a.getattr(&b.root()).unwrap_err(), FsError::BadHandle);
    assert_ne!(a.root(), b.root());
    let mut ch = a.open_channel(0).unwrap();
    assert_eq!(
        write_sync(&mut *ch, &fb, 0, b"x", Stable::Unstable).unwrap_err(),
        FsError::BadHandle
    );
    // A handle is at most 32 bytes.
    assert!(a.root().as_bytes().len() <= 32 && fb.as_bytes().len() <= 32);
    // Garbage of the right shape (tag and length of a real handle).
    let mut forged = fb.as_bytes().to_vec();
    let last = forged.len() - 1;
    forged[last] ^= 1;
    assert_eq!(
        b.getattr(&FileHandle::new(&forged).unwrap()).unwrap_err(),
        FsError::BadHandle
    );
}

#[test]
fn open_checks_arguments() {
    let dir = temp();
    assert_eq!(
        UringBackend::open("u", &dir.0.join("e"), 0, true).unwrap_err(),
        FsError::Inval
    );
    std::fs::write(dir.0.join("file"), b"x").unwrap();
    assert_eq!(
        UringBackend::open("u", &dir.0.join("file"), 8, true).unwrap_err(),
        FsError::Exist,
        "a file is not a directory to export"
    );
    let b = UringBackend::open("u", &dir.0.join("e"), 8, true).unwrap();
    assert_eq!(b.name(), "u");
    assert_eq!(b.kind(), "uring");
}

/// Aligned I/O takes O_DIRECT where the file system allows it; unaligned
/// offsets, lengths or buffers, and `o_direct: false`, go buffered; the
/// data is right either way.
fn direct_path_in(base: &Path) {
    let dir = TempDir::new_in(base);
    for o_direct in [true, false] {
        let b = UringBackend::open("u", &dir.0.join(format!("e{o_direct}")), DEPTH, o_direct).unwrap();
        let root = b.root();
        let (f, _) = create_file(&b, &root, b"f");
        let mut ch = b.open_uring_channel(0).unwrap();
        let data = pattern(1 << 20, 5);
        let mut buf = AlignedBuf::new(1 << 20, 0);
        buf.as_mut_slice().copy_from_slice(&data);
        write_sync(&mut ch, &f, 0, buf.as_slice(), Stable::FileSync).unwrap();
        let s = ch.stats();
        assert_eq!(s.direct_ios + s.buffered_ios, 1);
        if o_direct {
            // Either O_DIRECT was used, or the file system refused it and
            // the I/O was redone buffered.
            assert!(s.direct_ios == 1 || s.direct_fallbacks == 1, "{s:?}");
        } else {
            assert_eq!(s.direct_ios, 0);
        }
        let direct_before = ch.stats().direct_ios;
        // Unaligned buffer, offset, length: buffered.
        let mut odd = AlignedBuf::new(4096, 1);
        read_sync(&mut ch, &f, 0, odd.as_mut_slice()).unwrap();
        assert!(odd.as_slice() == &data[..4096]);
        read_exact(&mut ch, &f, 1, 4096);
        read_exact(&mut ch, &f, 4096, 100);
        assert_eq!(
            ch.stats().direct_ios,
            direct_before,
            "unaligned I/O never goes O_DIRECT"
        );
        // Aligned read back (after buffered writes: coherent).
        write_sync(&mut ch, &f, 10, b"patch", Stable::Unstable).unwrap();
        let mut rb = AlignedBuf::new(1 << 20, 0);
        read_sync(&mut ch, &f, 0, rb.as_mut_slice()).unwrap();
        let mut want = data.clone();
        want[10..15].copy_from_slice(b"patch");
        assert!(rb.as_slice() == &want[..]);
        assert!(format!("{ch:?}").contains("UringChannel"));
    }
}

#[test]
fn direct_path_tmp_dir() {
    direct_path_in(&std::env::temp_dir());
}

#[test]
fn direct_path_tmpfs() {
    direct_path_in(Path::new("/dev/shm"));
}

/// Exactly `queue_depth` I/O may be in flight.
#[test]
fn queue_depth_is_exact() {
    let dir = temp();
    let b = UringBackend::open("u", &dir.0.join("e"), 4, true).unwrap();
    let (f, _) = create_file(&b, &b.root(), b"f");
    let mut ch = b.open_channel(0).unwrap();
    write_sync(&mut *ch, &f, 0, &pattern(64, 1), Stable::Unstable).unwrap();
    let mut bufs = [[0u8; 8]; 5];
    for (i, buf) in bufs.iter_mut().enumerate() {
        let io = IoDesc {
            fh: f,
            op: IoOp::Read,
            offset: i as u64 * 8,
            buf: buf.as_mut_ptr(),
            len: 8,
            tag: i as u64,
        };
        // SAFETY: `bufs` outlives the I/O; everything is reaped below.
        let r = unsafe { ch.submit(io) };
        assert_eq!(r, if i < 4 { Ok(()) } else { Err(FsError::Jukebox) });
    }
    let mut out = [IoDone::default(); 8];
    let mut got = 0;
    while got < 4 {
        got += ch.poll(&mut out[got..]);
    }
    let mut tags: Vec<u64> = out[..4].iter().map(|d| d.tag).collect();
    tags.sort();
    assert_eq!(tags, vec![0, 1, 2, 3]);
    for (i, buf) in bufs.iter().enumerate().take(4) {
        assert_eq!(&buf[..], &pattern(64, 1)[i * 8..i * 8 + 8]);
    }
    assert_eq!(ch.in_flight(), 0);
}

/// A file removed through the backend while another core's channel has it
/// open gives `Stale` on that channel, and its descriptor is let go.
#[test]
fn removal_seen_by_other_channels() {
    let dir = temp();
    let b = UringBackend::open("u", &dir.0.join("e"), 8, true).unwrap();
    let root = b.root();
    let (f, _) = create_file(&b, &root, b"f");
    let mut ch0 = b.open_uring_channel(0).unwrap();
    let mut ch1 = b.open_uring_channel(1).unwrap();
    write_sync(&mut ch0, &f, 0, b"zero", Stable::Unstable).unwrap();
    assert_eq!(read_exact(&mut ch1, &f, 0, 4).0, b"zero");
    b.remove(&root, b"f").unwrap();
    assert_eq!(read_sync(&mut ch1, &f, 0, &mut [0u8; 4]).unwrap_err(), FsError::Stale);
    assert_eq!(
        write_sync(&mut ch0, &f, 0, b"x", Stable::Unstable).unwrap_err(),
        FsError::Stale
    );
    // Idle polling lets the descriptor go too.
    let mut out = [IoDone::default(); 1];
    assert_eq!(ch1.poll(&mut out), 0);
    assert!(!format!("{ch1:?}").contains("cached_fds: 1"), "{ch1:?}");
}

/// Removing other files, or one of two links of a file, leaves the cached
/// descriptor of the file alone.
#[test]
fn unrelated_removals_keep_cached_descriptors() {
    let dir = temp();
    let b = UringBackend::open("u", &dir.0.join("e"), 8, true).unwrap();
    let root = b.root();
    let (f, _) = create_file(&b, &root, b"f");
    let mut ch = b.open_uring_channel(0).unwrap();
    write_sync(&mut ch, &f, 0, b"one", Stable::Unstable).unwrap();
    assert_eq!(ch.stats().fd_opens, 1);
    for i in 0..10 {
        let name = format!("g{i}");
        create_file(&b, &root, name.as_bytes());
        b.remove(&root, name.as_bytes()).unwrap();
    }
    b.link(&f, &root, b"f2").unwrap();
    b.remove(&root, b"f").unwrap();
    create_file(&b, &root, b"h");
    b.rename(&root, b"h", &root, b"h2").unwrap();
    write_sync(&mut ch, &f, 3, b"two", Stable::Unstable).unwrap();
    assert_eq!(read_exact(&mut ch, &f, 0, 10).0, b"onetwo");
    assert_eq!(ch.stats().fd_opens, 1, "the descriptor stayed cached");
    // Renaming another file over it is its end.
    create_file(&b, &root, b"x");
    b.rename(&root, b"x", &root, b"f2").unwrap();
    assert_eq!(read_sync(&mut ch, &f, 0, &mut [0u8; 4]).unwrap_err(), FsError::Stale);
}

/// `.` and `..` come first under reserved cookies; other cookies at or above
/// 2^63 are not the file system's and are `BadCookie`.
#[test]
fn readdir_reserved_cookies() {
    let dir = temp();
    let b = UringBackend::open("u", &dir.0.join("e"), 8, true).unwrap();
    let root = b.root();
    create_file(&b, &root, b"only");
    let mut all = Vec::new();
    b.readdir(&root, 0, &mut |e| {
        all.push((e.name.to_vec(), e.cookie));
        true
    })
    .unwrap();
    let names: Vec<_> = all.iter().map(|e| e.0.clone()).collect();
    assert_eq!(names, vec![b".".to_vec(), b"..".to_vec(), b"only".to_vec()]);
    // Resuming after '.' gives '..' and the rest; after '..' the rest.
    for (skip, want) in [(0usize, 2usize), (1, 1)] {
        let mut got = Vec::new();
        assert!(b
            .readdir(&root, all[skip].1, &mut |e| {
                got.push(e.name.to_vec());
                true
            })
            .unwrap());
        assert_eq!(got, names[3 - want..].to_vec());
    }
    assert_eq!(
        b.readdir(&root, (1 << 63) | 7, &mut |_| true).unwrap_err(),
        FsError::BadCookie
    );
    assert_eq!(
        b.readdir(&root, u64::MAX, &mut |_| true).unwrap_err(),
        FsError::BadCookie
    );
}

/// A file that cannot be opened for writing (here: immutable) still reads
/// through the channel; writes to it are `Rofs`, not a failed read path.
#[test]
fn unwritable_file_still_reads() {
    use std::os::fd::AsRawFd;
    const FS_IMMUTABLE_FL: libc::c_long = 0x10;
    let dir = temp();
    let export = dir.0.join("e");
    let b = UringBackend::open("u", &export, 8, true).unwrap();
    let (f, _) = create_file(&b, &b.root(), b"frozen");
    {
        let mut ch = b.open_channel(0).unwrap();
        write_sync(&mut *ch, &f, 0, b"cold", Stable::FileSync).unwrap();
    }
    let file = std::fs::File::open(export.join("frozen")).unwrap();
    let flags: libc::c_long = FS_IMMUTABLE_FL;
    // SAFETY: FS_IOC_SETFLAGS reads one long from the pointer.
    let r = unsafe { libc::ioctl(file.as_raw_fd(), libc::FS_IOC_SETFLAGS, &flags) };
    assert_eq!(r, 0, "setting the immutable flag: {}", std::io::Error::last_os_error());
    let mut ch = b.open_channel(1).unwrap();
    // Nothing may panic until the flag is cleared (the directory could not
    // be removed otherwise).
    let mut buf = [0u8; 10];
    let got = read_sync(&mut *ch, &f, 0, &mut buf);
    let werr = write_sync(&mut *ch, &f, 0, b"x", Stable::Unstable);
    let clear: libc::c_long = 0;
    // SAFETY: as above.
    let r = unsafe { libc::ioctl(file.as_raw_fd(), libc::FS_IOC_SETFLAGS, &clear) };
    assert_eq!(r, 0);
    assert_eq!(got, Ok((4, true)));
    assert_eq!(&buf[..4], b"cold");
    assert_eq!(werr, Err(FsError::Rofs));
}

/// `backend::open` builds a `uring` backend from its configuration entry.
#[test]
fn open_from_config() {
    let dir = temp();
    let path = dir.0.join("cfg-export");
    let cfg = rpcrdma_apps::config::BackendConfig::Uring {
        name: "u".into(),
        path: path.to_str().unwrap().into(),
        queue_depth: 16,
        o_direct: true,
        iowq_off_cores: true,
    };
    let b = rpcrdma_apps::backend::open(&cfg).unwrap();
    assert_eq!(b.kind(), "uring");
    create_file(&*b, &b.root(), b"via-config");
    assert!(path.join("via-config").exists());
}

/// The allowed CPUs of the calling thread's io-wq workers (`iou-wrk-<tid>`).
fn own_io_workers() -> Vec<Vec<usize>> {
    // SAFETY: plain system call.
    let tid = unsafe { libc::gettid() };
    let want = format!("iou-wrk-{tid}");
    let mut found = Vec::new();
    for t in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        if comm.trim() != want {
            continue;
        }
        let status = std::fs::read_to_string(t.path().join("status")).unwrap_or_default();
        if let Some(l) = status.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")) {
            found.push(cpu_list::parse_cpu_list(l));
        }
    }
    found
}

/// A `uring` backend whose core runs on CPU 0 writes 16 MiB buffered and
/// flushes it (work the kernel hands to the ring's io-wq workers); returns
/// the channel's registered set and the CPUs its workers may run on. `None`
/// when the host has a single CPU (or CPU 0 is not ours).
/// What a channel registered, and the allowed CPUs of each of its workers.
type Workers = (Option<Vec<usize>>, Vec<Vec<usize>>);

/// The CPUs this thread may use, when they include CPU 0 and another
/// (the io-wq tests put a core on CPU 0); `None` (the test skipped) else.
fn cpu0_and_another() -> Option<Vec<usize>> {
    let allowed = rpcrdma_apps::cpus::thread_cpus().unwrap();
    if allowed.len() < 2 || !allowed.contains(&0) {
        eprintln!("skipped: needs CPU 0 and at least one other CPU (allowed: {allowed:?})");
        return None;
    }
    Some(allowed)
}

/// A buffered (no O_DIRECT: the writes go through the page cache) `uring`
/// backend in `dir` whose only core, an io core, runs on CPU 0; its io-wq
/// workers kept off that CPU when `off_cores`.
fn backend_of_core_on_cpu0(dir: &TempDir, name: &str, off_cores: bool) -> Arc<UringBackend> {
    let b = UringBackend::open(name, &dir.0.join("export"), DEPTH, false)
        .unwrap()
        .with_io_workers(
            off_cores,
            rpcrdma_apps::backend::uring::CoreCpus {
                reactor: vec![0],
                io: vec![0],
            },
        );
    Arc::new(b)
}

fn io_workers_of_core_on_cpu0(off_cores: bool) -> Option<Workers> {
    cpu0_and_another()?;
    let dir = temp();
    let b = backend_of_core_on_cpu0(&dir, "iowq", off_cores);
    let (fh, _) = create_file(&*b, &b.root(), b"big");
    let t = std::thread::spawn(move || {
        // SAFETY: cpu_set_t is plain data; all zeros is the empty set.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        // SAFETY: CPU 0 is within the set.
        unsafe { libc::CPU_SET(0, &mut set) };
        // SAFETY: pins the calling thread, as a core thread pins itself.
        let r = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
        assert_eq!(r, 0);
        let mut ch = b.open_uring_channel(0).unwrap();
        let registered = ch.io_worker_cpus().map(<[usize]>::to_vec);
        let data = pattern(1 << 20, 21);
        for i in 0..16u64 {
            let (n, _) = write_sync(&mut ch, &fh, i << 20, &data, Stable::Unstable).unwrap();
            assert_eq!(n, 1 << 20);
        }
        // A flush always runs on a worker.
        rpcrdma_apps::backend::flush_sync(&mut ch, &fh).unwrap();
        // Workers outlive their work by seconds, not this thread: look now.
        let workers = own_io_workers();
        (registered, workers)
    });
    let out = t.join().unwrap();
    drop(dir);
    Some(out)
}

/// Issue 21 item 5: the kernel's io-wq worker that copies a buffered write
/// (or runs an fsync) for a core's ring may not run on the core's CPU, where
/// it would pre-empt the reactor thread and every other client's READ.
#[test]
fn nfs_safety_iowq_workers_stay_off_the_core_cpu() {
    let Some((registered, workers)) = io_workers_of_core_on_cpu0(true) else {
        return;
    };
    let registered = registered.expect("an io-wq affinity is registered");
    assert!(!registered.contains(&0), "registered {registered:?}");
    assert!(!workers.is_empty(), "the flush ran on no io-wq worker of this thread");
    for w in &workers {
        assert!(
            !w.is_empty() && !w.contains(&0),
            "an io-wq worker may run on CPU 0: {w:?}"
        );
    }
}

/// The same with `iowq_off_cores` off: the kernel lets the worker run on the
/// core's CPU (what the test above would see without the registration).
#[test]
fn nfs_safety_iowq_workers_on_the_core_cpu_when_disabled() {
    let Some((registered, workers)) = io_workers_of_core_on_cpu0(false) else {
        return;
    };
    assert_eq!(registered, None);
    assert!(!workers.is_empty(), "the flush ran on no io-wq worker of this thread");
    assert!(workers.iter().any(|w| w.contains(&0)), "workers {workers:?}");
}

/// After a crowded-CPU move the core's io-wq workers follow the new set:
/// the core (on CPU 0, its workers kept off it) moves to another CPU, the
/// target registers the new off-core set (CPU 0 now) from the core thread
/// with `uring::follow_move`, and the workers the kernel starts from then
/// on may run on CPU 0 only. (The kernel does not move a running worker;
/// this waits for the first ones to retire, about 5 s idle.)
#[test]
fn nfs_safety_iowq_workers_follow_a_moved_core() {
    let Some(allowed) = cpu0_and_another() else {
        return;
    };
    let other = *allowed.iter().find(|&&c| c != 0).unwrap();
    let dir = temp();
    let b = backend_of_core_on_cpu0(&dir, "iowq-move", true);
    let (fh, _) = create_file(&*b, &b.root(), b"moved");
    let t = std::thread::spawn(move || {
        rpcrdma_apps::cpus::set_thread_cpus(&[0]).unwrap();
        let mut ch = b.open_uring_channel(0).unwrap();
        let data = pattern(1 << 20, 5);
        let work = |ch: &mut rpcrdma_apps::backend::uring::UringChannel| {
            for i in 0..4u64 {
                write_sync(ch, &fh, i << 20, &data, Stable::Unstable).unwrap();
            }
            rpcrdma_apps::backend::flush_sync(ch, &fh).unwrap();
        };
        work(&mut ch);
        let before = own_io_workers();
        // The move: the core thread to `other`, its workers' set to CPU 0.
        rpcrdma_apps::cpus::set_thread_cpus(&[other]).unwrap();
        rpcrdma_apps::backend::uring::follow_move(&[0]).expect("io-wq affinity registered");
        let t0 = std::time::Instant::now();
        while !own_io_workers().is_empty() && t0.elapsed() < std::time::Duration::from_secs(30) {
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
        work(&mut ch);
        (before, own_io_workers())
    });
    let (before, after) = t.join().unwrap();
    drop(dir);
    assert!(
        !before.is_empty() && before.iter().all(|w| !w.contains(&0)),
        "before: {before:?}"
    );
    assert!(!after.is_empty(), "the flush after the move ran on no io-wq worker");
    assert!(after.iter().all(|w| w == &vec![0]), "after the move: {after:?}");
}

/// A file removed through the backend while a channel had it open: the
/// channel lets its descriptor go, and the kernel frees the inode a moment
/// later. A handle opened in that moment finds the inode being freed, and
/// `open_by_handle_at` fails with ENOMEM (6.x kernels: `iget_locked` gives
/// up on an inode being freed and the file system reports it as ENOMEM),
/// not ESTALE. The backend knows it removed the file, and answers `Stale`,
/// not `Io`, whatever the timing: many rounds make the window likely.
#[test]
fn nfs_safety_uring_removed_file_is_stale_while_its_inode_is_being_freed() {
    // Four backends at once: freeing inodes on several CPUs at a time widens
    // the window (one alone rarely hits it; four at once often do).
    let rounds = |k: usize| {
        let dir = temp();
        let b = UringBackend::open("u", &dir.0.join("e"), 8, true).unwrap();
        let root = b.root();
        let mut ch = b.open_uring_channel(0).unwrap();
        // Enough data that freeing the inode takes a while.
        let big = pattern(1 << 20, 7);
        for i in 0..200 {
            let name = format!("f{i}");
            let (f, _) = create_file(&b, &root, name.as_bytes());
            write_sync(&mut ch, &f, 0, &big, Stable::Unstable).unwrap();
            b.remove(&root, name.as_bytes()).unwrap();
            assert_eq!(
                read_sync(&mut ch, &f, 0, &mut [0u8; 4]).unwrap_err(),
                FsError::Stale,
                "thread {k} round {i}: read"
            );
            assert_eq!(
                write_sync(&mut ch, &f, 0, b"x", Stable::Unstable).unwrap_err(),
                FsError::Stale,
                "thread {k} round {i}: write"
            );
            assert_eq!(
                b.getattr(&f).unwrap_err(),
                FsError::Stale,
                "thread {k} round {i}: getattr"
            );
        }
    };
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..4).map(|k| s.spawn(move || rounds(k))).collect();
        for h in hs {
            h.join().unwrap();
        }
    });
}

/// The same moment across a restart: a file removed by one backend instance
/// whose last descriptor went with that instance (its rings are torn down
/// by the kernel after the drop) is still being freed when the next
/// instance resolves its handle. The new instance has no record of the
/// removal; a getattr from a helper thread (where metadata runs) must
/// still answer `Stale`, as it would a moment later, and never `Io`.
#[test]
fn nfs_safety_uring_file_removed_before_a_restart_is_stale() {
    let rounds = |k: usize| {
        let dir = temp();
        let export = dir.0.join("e");
        let big = pattern(1 << 20, 9);
        for i in 0..60 {
            let name = format!("f{i}");
            let f = {
                let b = UringBackend::open("u", &export, 8, true).unwrap();
                let root = b.root();
                let mut ch = b.open_uring_channel(0).unwrap();
                let (f, _) = create_file(&b, &root, name.as_bytes());
                write_sync(&mut ch, &f, 0, &big, Stable::Unstable).unwrap();
                b.remove(&root, name.as_bytes()).unwrap();
                f
            };
            let b = UringBackend::open("u", &export, 8, true).unwrap();
            assert_eq!(
                b.getattr(&f).unwrap_err(),
                FsError::Stale,
                "thread {k} round {i}: getattr after the restart"
            );
        }
    };
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..4).map(|k| s.spawn(move || rounds(k))).collect();
        for h in hs {
            h.join().unwrap();
        }
    });
}
