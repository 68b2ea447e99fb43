//! The `mem` backend: the conformance suite, plus its capacity accounting,
//! handles of another instance and its queue depth.

mod backend_common;

use std::sync::Arc;

use backend_common::{create_file, pattern, read_exact, Fixture, OWNER};
use rpcrdma_apps::backend::mem::{MemBackend, MEM_BLOCK_BYTES, MEM_MIN_INODES};
use rpcrdma_apps::backend::{
    read_sync, write_sync, Backend, CreateHow, FsError, IoDesc, IoDone, IoOp, SetAttr, Stable,
};

fn fixture() -> Fixture {
    Fixture {
        backend: Arc::new(MemBackend::new("mem0", 64 << 20).unwrap()),
        guard: Box::new(()),
    }
}

conformance_tests!(fixture);

#[test]
fn size_must_be_whole_blocks() {
    assert_eq!(MemBackend::new("m", 0).unwrap_err(), FsError::Inval);
    assert_eq!(MemBackend::new("m", 4097).unwrap_err(), FsError::Inval);
    let b = MemBackend::new("m", 8 * MEM_BLOCK_BYTES).unwrap();
    assert_eq!(b.fsstat().unwrap().total_bytes, 8 * MEM_BLOCK_BYTES);
    assert_eq!(b.name(), "m");
}

/// Filling the arena gives `NoSpc` with nothing written; removing (only the
/// last link) and truncating give the space back.
#[test]
fn capacity_exhaustion_and_return() {
    let blocks = 64u64;
    let b = MemBackend::new("small", blocks * MEM_BLOCK_BYTES).unwrap();
    let root = b.root();
    let mut ch = b.open_channel(0).unwrap();
    let st = b.fsstat().unwrap();
    assert_eq!(st.free_bytes, blocks * MEM_BLOCK_BYTES);
    let (a, _) = create_file(&b, &root, b"a");
    let data = pattern((40 * MEM_BLOCK_BYTES) as usize, 1);
    write_sync(&mut *ch, &a, 0, &data, Stable::Unstable).unwrap();
    assert_eq!(b.fsstat().unwrap().free_bytes, 24 * MEM_BLOCK_BYTES);
    assert_eq!(b.getattr(&a).unwrap().used, 40 * MEM_BLOCK_BYTES);
    let (c, _) = create_file(&b, &root, b"c");
    // 30 blocks do not fit into 24: refused whole.
    let big = pattern((30 * MEM_BLOCK_BYTES) as usize, 2);
    assert_eq!(
        write_sync(&mut *ch, &c, 0, &big, Stable::Unstable).unwrap_err(),
        FsError::NoSpc
    );
    assert_eq!(b.getattr(&c).unwrap().size, 0, "a refused write changes nothing");
    assert_eq!(b.fsstat().unwrap().free_bytes, 24 * MEM_BLOCK_BYTES);
    // Overwriting allocated blocks needs no space; a hole write does.
    write_sync(&mut *ch, &a, 5, b"over", Stable::Unstable).unwrap();
    write_sync(
        &mut *ch,
        &c,
        0,
        &big[..(24 * MEM_BLOCK_BYTES) as usize],
        Stable::Unstable,
    )
    .unwrap();
    assert_eq!(b.fsstat().unwrap().free_bytes, 0);
    assert_eq!(
        write_sync(&mut *ch, &c, 100 * MEM_BLOCK_BYTES, b"x", Stable::Unstable).unwrap_err(),
        FsError::NoSpc
    );
    // Extending the size allocates nothing.
    b.setattr(
        &c,
        &SetAttr {
            size: Some(1 << 30),
            ..SetAttr::default()
        },
    )
    .unwrap();
    // A second link keeps the blocks; removing the last link frees them.
    b.link(&a, &root, b"a2").unwrap();
    b.remove(&root, b"a").unwrap();
    assert_eq!(b.fsstat().unwrap().free_bytes, 0);
    let (got, _) = read_exact(&mut *ch, &a, 0, 10);
    assert_eq!(&got[..5], &data[..5]);
    assert_eq!(&got[5..9], b"over");
    b.remove(&root, b"a2").unwrap();
    assert_eq!(b.fsstat().unwrap().free_bytes, 40 * MEM_BLOCK_BYTES);
    // Truncating frees whole blocks past the new end.
    b.setattr(
        &c,
        &SetAttr {
            size: Some(4 * MEM_BLOCK_BYTES + 1),
            ..SetAttr::default()
        },
    )
    .unwrap();
    assert_eq!(b.fsstat().unwrap().free_bytes, 59 * MEM_BLOCK_BYTES);
    // Recycled blocks come back zeroed around partial writes.
    let (d, _) = create_file(&b, &root, b"d");
    write_sync(&mut *ch, &d, 10, b"mid", Stable::Unstable).unwrap();
    let (got, _) = read_exact(&mut *ch, &d, 0, 13);
    assert_eq!(&got[..10], &[0u8; 10]);
    let (got, _) = read_exact(&mut *ch, &c, 4 * MEM_BLOCK_BYTES, 100);
    assert_eq!(got.len(), 1);
    // The space is usable again.
    let (e, _) = create_file(&b, &root, b"e");
    let fifty = pattern((50 * MEM_BLOCK_BYTES) as usize, 3);
    write_sync(&mut *ch, &e, 0, &fifty, Stable::Unstable).unwrap();
    let (got, _) = read_exact(&mut *ch, &e, 0, fifty.len());
    assert!(got == fifty);
}

#[test]
fn inode_exhaustion() {
    let b = MemBackend::new("few", 16 * MEM_BLOCK_BYTES).unwrap();
    let root = b.root();
    let st = b.fsstat().unwrap();
    assert_eq!(st.total_files, MEM_MIN_INODES);
    assert_eq!(st.free_files, MEM_MIN_INODES - 1, "the root uses one");
    let mut made = 0;
    let err = loop {
        match b.create(
            &root,
            format!("f{made}").as_bytes(),
            CreateHow::Guarded(SetAttr::default()),
            OWNER,
        ) {
            Ok(_) => made += 1,
            Err(e) => break e,
        }
        assert!(made <= MEM_MIN_INODES);
    };
    assert_eq!(err, FsError::NoSpc);
    assert_eq!(made, MEM_MIN_INODES - 1);
    assert_eq!(b.fsstat().unwrap().free_files, 0);
    assert_eq!(
        b.mkdir(&root, b"d", &SetAttr::default(), OWNER).unwrap_err(),
        FsError::NoSpc
    );
    b.remove(&root, b"f0").unwrap();
    b.mkdir(&root, b"d", &SetAttr::default(), OWNER).unwrap();
}

/// Handles of another instance (a previous run of the target) are stale, not
/// another instance's files.
#[test]
fn handles_of_another_instance_are_stale() {
    let one = MemBackend::new("one", 16 * MEM_BLOCK_BYTES).unwrap();
    let two = MemBackend::new("two", 16 * MEM_BLOCK_BYTES).unwrap();
    let (f, _) = create_file(&one, &one.root(), b"f");
    create_file(&two, &two.root(), b"f");
    assert_eq!(two.getattr(&f).unwrap_err(), FsError::Stale);
    assert_eq!(two.getattr(&one.root()).unwrap_err(), FsError::Stale);
    assert_ne!(one.root(), two.root());
}

/// A slot reused after a remove has a new generation.
#[test]
fn reused_inode_gets_new_generation() {
    let b = MemBackend::new("gen", 16 * MEM_BLOCK_BYTES).unwrap();
    let root = b.root();
    let (f, fa) = create_file(&b, &root, b"f");
    b.remove(&root, b"f").unwrap();
    let (g, ga) = create_file(&b, &root, b"g");
    assert_eq!(ga.fileid, fa.fileid, "the slot is reused");
    assert_ne!(g, f);
    assert_eq!(b.getattr(&f).unwrap_err(), FsError::Stale);
}

#[test]
fn queue_depth_is_exact() {
    let b = MemBackend::new("q", 16 * MEM_BLOCK_BYTES).unwrap().with_queue_depth(4);
    let root = b.root();
    let (f, _) = create_file(&b, &root, b"f");
    let mut ch = b.open_channel(3).unwrap();
    let mut bufs = [[0u8; 8]; 5];
    for (i, buf) in bufs.iter_mut().enumerate() {
        let io = IoDesc {
            fh: f,
            op: IoOp::Write(Stable::Unstable),
            offset: i as u64 * 8,
            buf: buf.as_mut_ptr(),
            len: 8,
            tag: i as u64,
        };
        // SAFETY: `bufs` outlives the channel's use; all are reaped below.
        let r = unsafe { ch.submit(io) };
        assert_eq!(r.is_ok(), i < 4, "submission {i}");
    }
    assert_eq!(ch.in_flight(), 4);
    let mut out = [IoDone::default(); 3];
    assert_eq!(ch.poll(&mut out), 3);
    assert_eq!(out.iter().map(|d| d.tag).collect::<Vec<_>>(), vec![0, 1, 2]);
    assert!(out.iter().all(|d| d.committed == Stable::FileSync && d.result == Ok(8)));
    assert_eq!(ch.poll(&mut out), 1);
    assert_eq!(out[0].tag, 3);
    assert_eq!(ch.in_flight(), 0);
    assert_eq!(b.getattr(&f).unwrap().size, 32);
    // A null buffer is refused in the completion, not dereferenced.
    let io = IoDesc {
        fh: f,
        op: IoOp::Read,
        offset: 0,
        buf: std::ptr::null_mut(),
        len: 8,
        tag: 9,
    };
    // SAFETY: the channel must not touch a null buffer; nothing else is in flight.
    unsafe { ch.submit(io).unwrap() };
    assert_eq!(ch.poll(&mut out), 1);
    assert_eq!(out[0].result, Err(FsError::Inval));
    let mut buf = [0u8; 4];
    assert_eq!(read_sync(&mut *ch, &f, 0, &mut buf).unwrap().0, 4);
}

/// `io_now` does the I/O at once when nothing is queued, and declines while a
/// completion is waiting to be reaped, so completions still come out in
/// submission order.
#[test]
fn io_now_only_with_an_empty_queue() {
    let b = MemBackend::new("n", 16 * MEM_BLOCK_BYTES).unwrap();
    let root = b.root();
    let (f, _) = create_file(&b, &root, b"f");
    let mut ch = b.open_channel(0).unwrap();
    let mut data = *b"abcdefgh";
    let io = |op, buf: *mut u8, tag| IoDesc {
        fh: f,
        op,
        offset: 0,
        buf,
        len: 8,
        tag,
    };
    // SAFETY: `data` outlives the call, which is done with it on return.
    let done = unsafe { ch.io_now(&io(IoOp::Write(Stable::FileSync), data.as_mut_ptr(), 5)) }.expect("empty queue");
    assert_eq!((done.tag, done.result), (5, Ok(8)));
    assert_eq!(ch.in_flight(), 0);
    let mut back = [0u8; 8];
    // SAFETY: as above.
    unsafe { ch.submit(io(IoOp::Read, back.as_mut_ptr(), 6)).unwrap() };
    let mut other = [0u8; 8];
    // SAFETY: as above.
    assert!(unsafe { ch.io_now(&io(IoOp::Read, other.as_mut_ptr(), 7)) }.is_none());
    assert_eq!(ch.in_flight(), 1);
    let mut out = [IoDone::default(); 2];
    assert_eq!(ch.poll(&mut out), 1);
    assert_eq!((out[0].tag, out[0].result), (6, Ok(8)));
    assert_eq!(&back, b"abcdefgh");
    assert_eq!(read_sync(&mut *ch, &f, 0, &mut other), Ok((8, true)));
    assert_eq!(&other, b"abcdefgh");
}

/// Cookies are positions: one never handed out is `BadCookie`; the cookie of
/// a removed entry resumes at the entry after it.
#[test]
fn readdir_cookies_are_positions() {
    let b = MemBackend::new("c", 16 * MEM_BLOCK_BYTES).unwrap();
    let root = b.root();
    for name in [&b"a"[..], b"b", b"c"] {
        create_file(&b, &root, name);
    }
    let mut cookies = Vec::new();
    b.readdir(&root, 0, &mut |e| {
        cookies.push((e.name.to_vec(), e.cookie));
        true
    })
    .unwrap();
    assert_eq!(cookies.len(), 5);
    let after_a = cookies[2].1;
    b.remove(&root, b"a").unwrap();
    let mut rest = Vec::new();
    assert!(b
        .readdir(&root, after_a, &mut |e| {
            rest.push(e.name.to_vec());
            true
        })
        .unwrap());
    assert_eq!(rest, vec![b"b".to_vec(), b"c".to_vec()]);
    assert_eq!(
        b.readdir(&root, 1 << 40, &mut |_| true).unwrap_err(),
        FsError::BadCookie
    );
}

/// `backend::open` builds a `mem` backend from its configuration entry.
#[test]
fn open_from_config() {
    let cfg = rpcrdma_apps::config::BackendConfig::Mem {
        name: "m".into(),
        size_bytes: 1 << 20,
    };
    let b = rpcrdma_apps::backend::open(&cfg).unwrap();
    assert_eq!(b.kind(), "mem");
    assert_eq!(b.fsstat().unwrap().total_bytes, 1 << 20);
    let bad = rpcrdma_apps::config::BackendConfig::Mem {
        name: "m".into(),
        size_bytes: 1000,
    };
    assert_eq!(rpcrdma_apps::backend::open(&bad).unwrap_err(), FsError::Inval);
}
