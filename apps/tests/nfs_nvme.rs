//! The NFS service over the `nvme` backend, through the responder engine on
//! the sim fabric (v1 and v2): image files stand in for namespaces (the real
//! device path is tests/nvme/run.sh, in a VM with QEMU's NVMe). The export is
//! the backend's flat directory; its files are the devices: LOOKUP, 1 MiB
//! WRITE through a Read chunk (FILE_SYNC), COMMIT, READ back through a Write
//! chunk, unaligned I/O, READDIRPLUS, and namespace changes refused.

mod nfs_common;

use std::path::PathBuf;
use std::sync::Arc;

use nfs_common::*;
use proto::nfs3::{FILE_SYNC, UNSTABLE};
use rpcrdma_apps::backend::nvme::NvmeBackend;
use rpcrdma_apps::backend::Backend;

const CREDITS: u32 = 4;

#[test]
fn nvme_images_served_through_the_engine() {
    let dir = TempDir::new("nvme-nfs");
    let imgs: Vec<PathBuf> = ["disk0.img", "disk1.img"].iter().map(|n| dir.0.join(n)).collect();
    for (i, p) in imgs.iter().enumerate() {
        let f = std::fs::File::create(p).unwrap();
        f.set_len((4 << 20) + i as u64 * 4096).unwrap();
    }
    let backend: Arc<dyn Backend> = Arc::new(NvmeBackend::open("b0", &imgs, 32, true).unwrap());
    let store = Store {
        kind: Kind::Mem,
        backend,
        dir: None,
    };
    let mut ex = Ex::new("/nvme", "b0");
    ex.root_squash = false;
    let sh = shared(&[&store], &[ex], DATA_BUF_BYTES as u32);
    let p = pools(CREDITS);
    for v in [1u32, 2] {
        let mut c = Client::new(sim_engine(&p, &sh, 11 + u64::from(v), v, CREDITS));
        c.auth = Auth::root();
        let (root, _) = c.mnt("/nvme").expect("MNT");
        let mut names = c.list_all(&root, 4096);
        names.sort();
        assert_eq!(names, [".", "..", "disk0.img", "disk1.img"]);
        let (fh, a) = c.lookup(&root, b"disk1.img").expect("LOOKUP");
        assert_eq!((a.ftype, a.size), (1, (4 << 20) + 4096));

        // 1 MiB at an aligned offset, FILE_SYNC: durable before the reply.
        let data = pattern(v, MIB);
        let w = c.write(&fh, MIB as u64, &data, FILE_SYNC).expect("WRITE 1 MiB");
        assert_eq!((w.count as usize, w.committed), (MIB, FILE_SYNC));
        let (got, eof, _) = c.read(&fh, MIB as u64, MIB as u32).expect("READ 1 MiB");
        assert!(!eof && got == data, "v{v}: 1 MiB read back differs");
        // Unaligned, UNSTABLE, then COMMIT.
        let odd = pattern(100 + v, 3_333);
        let w = c.write(&fh, 777, &odd, UNSTABLE).expect("unaligned WRITE");
        assert_eq!(w.count, 3_333);
        assert_eq!(c.commit(&fh).expect("COMMIT"), sh.write_verifier());
        let (got, _, _) = c.read(&fh, 777, 3_333).expect("unaligned READ");
        assert_eq!(got, odd);
        // The end of the device: short read with eof.
        let (got, eof, _) = c.read(&fh, (4 << 20) + 4000, 4096).expect("READ at the end");
        assert_eq!((got.len(), eof), (96, true));
        // The namespace is the configuration's: it cannot change.
        assert!(c.mkfile(&root, "new.img", 0o644).is_err(), "CREATE refused");
        assert_ne!(c.remove(&root, "disk0.img"), 0, "REMOVE refused");
        assert_ne!(c.rename(&root, "disk0.img", &root, "x.img"), 0, "RENAME refused");
        assert!(c.mkdir(&root, "d", 0o755).is_err(), "MKDIR refused");
        let carried = c.t.carried;
        assert!(
            carried.read_chunk_calls >= 1 && carried.write_chunk_replies >= 1,
            "v{v}: {carried:?}"
        );
        c.umnt("/nvme");
    }
    // What NFS wrote is in the image file itself.
    let img = std::fs::read(&imgs[1]).unwrap();
    assert_eq!(&img[MIB..2 * MIB], &pattern(2, MIB)[..]);
    assert_eq!(&img[777..777 + 3_333], &pattern(102, 3_333)[..]);
}
