//! `rpcrdma-target stats -c FILE` (issue 24 part 3) against a target started
//! in-process from the same file: the JSON (`--json`) counts the TCP Calls
//! sent, the table names its sections, and a configuration whose target is
//! not running is an error that says where it looked.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;

use rpcrdma_apps::config::Config;
use rpcrdma_apps::server::Target;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A NULL Call of NFSv3 (AUTH_NONE) in one record.
fn null_record(xid: u32) -> Vec<u8> {
    let words = [xid, 0, 2, 100_003, 3, 0, 0, 0, 0, 0];
    let mut b = ((1u32 << 31) | 40).to_be_bytes().to_vec();
    for w in words {
        b.extend_from_slice(&w.to_be_bytes());
    }
    b
}

fn stats_cmd(cfg: &std::path::Path, extra: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_rpcrdma-target"))
        .arg("stats")
        .arg("-c")
        .arg(cfg)
        .args(extra)
        .output()
        .expect("runs")
}

#[test]
fn stats_command_reads_the_running_target() {
    let dir = std::env::temp_dir().join(format!("rpcrdma-stats-cli-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (nfs, mnt) = (free_port(), free_port());
    let v = serde_json::json!({
        "cores": [{ "cpu": 0, "role": "admin" }, { "cpu": 1, "role": "io" }],
        "reactor": { "idle": { "policy": "spin_then_sleep", "idle_loops": 1000, "max_sleep_us": 100 } },
        "listeners": { "fabric": [{ "address": "127.0.0.1", "port": 20049, "versions": [1, 2] }],
                       "nfs_tcp_port": nfs, "mount_tcp_port": mnt,
                       "stats_socket": dir.join("stats.sock").to_str().unwrap() },
        "fabric": { "provider": "shm", "socket_path": dir.join("fabric.sock").to_str().unwrap() },
        "pools": [
            { "name": "recv", "usage": "receive", "buffer_size_bytes": 4096, "count": 256,
              "page_size": "4K", "per_core_cache": 16 },
            { "name": "send", "usage": "send", "buffer_size_bytes": 8192, "count": 256,
              "page_size": "4K", "per_core_cache": 16 },
            { "name": "data", "usage": "data", "buffer_size_bytes": 65536, "count": 16,
              "page_size": "4K", "per_core_cache": 2 }
        ],
        "credits": { "max_per_connection": 8 },
        "backends": [{ "name": "b0", "type": "mem", "size_bytes": 1 << 20 }],
        "exports": [{ "path": "/export", "backend": "b0", "clients": ["127.0.0.0/8"],
                      "read_only": false, "root_squash": false }],
    });
    let file = dir.join("cores.json");
    std::fs::write(&file, serde_json::to_string_pretty(&v).unwrap()).unwrap();

    // Not running yet: an error naming the socket.
    let out = stats_cmd(&file, &[]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("stats.sock"), "{err}");

    let t = Target::start(Config::load(&file).unwrap()).expect("target starts");
    const CALLS: u32 = 25;
    let mut s = TcpStream::connect(("127.0.0.1", nfs)).unwrap();
    for xid in 1..=CALLS {
        s.write_all(&null_record(xid)).unwrap();
        let mut reply = [0u8; 4 + 24];
        s.read_exact(&mut reply).unwrap();
        assert_eq!(u32::from_be_bytes(reply[4..8].try_into().unwrap()), xid);
    }
    drop(s);

    // The io core publishes its counters on its own schedule (soon after it
    // starts and goes idle); on a loaded host the first query can come
    // before that, so ask until the core is there.
    let t0 = std::time::Instant::now();
    let doc = loop {
        let out = stats_cmd(&file, &["--json"]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
        if doc["cores"].as_array().is_some_and(|c| !c.is_empty()) || t0.elapsed().as_secs() >= 30 {
            break doc;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert_eq!(doc["pid"], std::process::id());
    let nfs_tcp = doc["tcp"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["addr"] == format!("127.0.0.1:{nfs}"))
        .expect("the NFS listener");
    assert_eq!(nfs_tcp["calls"], CALLS, "{doc:#}");
    assert_eq!(nfs_tcp["conns_accepted"], 1);
    assert_eq!(doc["cores"].as_array().map(Vec::len), Some(1), "{doc:#}");
    // where the io core runs: its configured CPU until a crowded-CPU move
    // (none without /proc/schedstat; one is possible on a loaded host that
    // has it), and the total counts its moves
    let io = &doc["cores"][0];
    assert_eq!(io["cpu_at_start"], 1, "{doc:#}");
    let moves = io["crowd_moves"].as_u64().expect("crowd_moves");
    assert_eq!(io["cpu"] == 1, moves == 0, "{doc:#}");
    assert_eq!(doc["total"]["crowd_moves"], moves, "{doc:#}");
    let io_row = format!("{} {} {}", io["core"], io["cpu"], moves);
    // issue 23: the delegation counters are there (none granted over TCP NULLs)
    assert_eq!(doc["nfs4"]["delegations_held"], 0, "{doc:#}");
    assert_eq!(doc["nfs4"]["callbacks"]["recalls_sent"], 0, "{doc:#}");

    let out = stats_cmd(&file, &[]);
    assert!(out.status.success());
    let table = String::from_utf8_lossy(&out.stdout);
    for want in [
        "core",
        "cpu",
        "moves",
        "total",
        "procedure",
        "pool",
        "receive",
        "data",
        &format!("tcp 127.0.0.1:{nfs}: calls={CALLS}"),
    ] {
        assert!(table.contains(want), "{want:?} missing:\n{table}");
    }
    // the io core's row: core, CPU now, moves
    assert!(
        table
            .lines()
            .any(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" ") == io_row),
        "no row starting {io_row:?}:\n{table}"
    );
    t.shutdown().expect("clean shutdown");
    assert!(!dir.join("stats.sock").exists());
    let _ = std::fs::remove_dir_all(&dir);
}
