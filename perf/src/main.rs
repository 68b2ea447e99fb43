//! `perf`: load generator for rpcrdma. See perf/README.md.

use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand, ValueEnum};

use perf::args::{parse_cores, parse_duration, parse_size};
use perf::engine::OpKind;
use perf::plot::{render_svg, Curve};
use perf::run::{self, Auth, FabricKind, Mode, NfsOptions, RunConfig, RunOutput};
use perf::stats::{compare_rows, compare_table, RunResult};
use perf::tcp::{MountTarget, DEFAULT_MOUNT_PORT};

#[derive(Parser, Debug)]
#[command(name = "perf", about = "Load generator for rpcrdma (RPC-over-RDMA v1/v2, NFSv3)")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// RPC NULL round trips (NFSv3 NULL by default).
    Null(NullArgs),
    /// NFSv3 READ of a file reached through MOUNT and LOOKUP.
    Read(NfsArgs),
    /// NFSv3 WRITE of a file reached through MOUNT and LOOKUP.
    Write(NfsArgs),
    /// NFSv3 READ and WRITE mixed (--read-pct).
    Mixed(MixedArgs),
    /// The fabric's own ping-pong without RPC (the floor).
    Raw(RawArgs),
    /// NFSv4.1 over RPC-over-RDMA with a backchannel: hold a read
    /// delegation on --file and answer its recalls with DELEGRETURN (or,
    /// with --ignore-recalls, never answer), for --duration; reports the
    /// recalls and the time from each CB_RECALL to its DELEGRETURN.
    Deleg(DelegArgs),
    /// Two or more result files side by side, with ratios against the first.
    Compare(CompareArgs),
}

/// A list of CPU ids (`--cores`).
#[derive(Clone, Debug)]
struct CpuList(Vec<usize>);

fn cpu_list(s: &str) -> Result<CpuList, String> {
    parse_cores(s).map(CpuList)
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum FabricArg {
    Shm,
    Verbs,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum TransportArg {
    /// RPC-over-RDMA over --fabric.
    Rdma,
    /// ONC RPC with record marking to the NFS TCP port.
    Tcp,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum AuthArg {
    None,
    Sys,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum StableArg {
    Unstable,
    Data,
    File,
}

/// Options of every load.
#[derive(Args, Debug, Clone)]
struct Common {
    /// Transport: RPC-over-RDMA over --fabric, or RPC over TCP to the NFS TCP port.
    #[arg(long, value_enum, default_value = "rdma")]
    transport: TransportArg,
    /// Fabric provider [default: verbs when an RDMA device is present, else shm].
    #[arg(long, value_enum)]
    fabric: Option<FabricArg>,
    /// Target address: a socket path for shm (default /tmp/rpcrdma/fabric.sock),
    /// ip[:port] for verbs (default 127.0.0.1:20049) and tcp (default 127.0.0.1:2049).
    #[arg(long, short = 't')]
    target: Option<String>,
    /// RPC-over-RDMA version.
    #[arg(long = "vers", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=2))]
    version: u32,
    /// Calls outstanding per connection (queue depth).
    #[arg(long, default_value_t = 1)]
    qd: u32,
    /// Connections.
    #[arg(long, default_value_t = 1)]
    conns: u32,
    /// Client CPUs, one pinned thread each, connections spread over them ("0", "0,2", "0-3").
    #[arg(long, default_value = "0", value_parser = cpu_list)]
    cores: CpuList,
    /// Measured time ("5", "500ms", "1m").
    #[arg(long, default_value = "5", value_parser = parse_duration)]
    duration: Duration,
    /// Measure this many operations instead of a duration.
    #[arg(long)]
    count: Option<u64>,
    /// Warm-up before the measured time.
    #[arg(long, default_value = "1", value_parser = parse_duration)]
    warmup: Duration,
    /// Open loop: Calls per second per connection, latency from the intended send time.
    #[arg(long)]
    rate: Option<f64>,
    /// Write the result as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write an HdrHistogram interval log (one histogram per second, values in ns).
    #[arg(long = "hdr-log")]
    hdr_log: Option<PathBuf>,
    /// Write an SVG percentile plot of this run.
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Label of this run in plots [default: op, size, qd].
    #[arg(long)]
    label: Option<String>,
    /// Progress line on stderr every second (default when stderr is a terminal).
    #[arg(long)]
    progress: bool,
    /// No progress line.
    #[arg(long, conflicts_with = "progress")]
    no_progress: bool,
    /// Connection and reply timeout.
    #[arg(long, default_value = "10", value_parser = parse_duration)]
    timeout: Duration,
    /// Sleep this many microseconds per idle poll turn once a worker has
    /// been idle for a few turns (0: always spin). For hosts where busy
    /// polling starves the fabric (Soft-RoCE in an emulated VM); adds latency.
    #[arg(long = "idle-sleep-us", default_value_t = 0)]
    idle_sleep_us: u32,
    /// Yield the CPU (sched_yield) per idle poll turn once a worker has
    /// been idle for a few turns, instead of sleeping or spinning: for a
    /// client that shares its CPU with the target's core, so that each
    /// hands the CPU to the other as soon as it waits (no sleep's timer
    /// slack added to the latency). Takes precedence over --idle-sleep-us.
    #[arg(long = "idle-yield")]
    idle_yield: bool,
    /// Block until a reply (a completion or connection event) arrives once
    /// a worker has been idle for a few turns: the fabric's interrupt mode
    /// (verbs: a CQ notification on the completion channel; shm: the
    /// peer's doorbell), the way the kernel's NFS client waits. Measures
    /// qd-1 latency without the timer slack of --idle-sleep-us (in an
    /// emulated guest a 20 µs sleep lasts 200-300 µs) and without a busy
    /// CPU. Takes precedence over --idle-yield and --idle-sleep-us (which
    /// then only serves a fabric that cannot arm).
    #[arg(long = "idle-wait")]
    idle_wait: bool,
    /// NFS version: "3", or "4.1" (a session first, then SEQUENCE + PUTFH +
    /// READ/WRITE per Call; `null` sends SEQUENCE alone).
    #[arg(long = "nfs", default_value = "3", value_parser = ["3", "4.1"])]
    nfs: String,
    /// The target's process id: its CPU time (/proc/PID/stat) over the measured
    /// time is reported per operation next to perf's own.
    #[arg(long = "target-pid")]
    target_pid: Option<u32>,
    /// Seed of the random offsets and read/write choices.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

#[derive(Args, Debug, Clone)]
struct NullArgs {
    #[command(flatten)]
    common: Common,
    /// RPC program.
    #[arg(long, default_value_t = proto::nfs3::NFS_PROGRAM)]
    program: u32,
    /// Program version.
    #[arg(long = "prog-version", default_value_t = proto::nfs3::NFS_V3)]
    prog_version: u32,
    /// Credential flavor.
    #[arg(long, value_enum, default_value = "none")]
    auth: AuthArg,
    #[arg(long, default_value_t = 0)]
    uid: u32,
    #[arg(long, default_value_t = 0)]
    gid: u32,
}

#[derive(Args, Debug, Clone)]
struct DelegArgs {
    #[command(flatten)]
    common: Common,
    /// Export path.
    #[arg(long, default_value = "/export")]
    export: String,
    /// File name in the export.
    #[arg(long, default_value = "perf.dat")]
    file: String,
    /// Create the file when it does not exist.
    #[arg(long)]
    create: bool,
    /// Never answer a recall (the server revokes the delegation a lease later).
    #[arg(long = "ignore-recalls")]
    ignore_recalls: bool,
    #[arg(long, value_enum, default_value = "sys")]
    auth: AuthArg,
    #[arg(long, default_value_t = 0)]
    uid: u32,
    #[arg(long, default_value_t = 0)]
    gid: u32,
}

#[derive(Args, Debug, Clone)]
struct NfsArgs {
    #[command(flatten)]
    common: Common,
    /// I/O size ("4k", "64KiB", "1M").
    #[arg(long, default_value = "4k", value_parser = parse_size)]
    size: u64,
    /// No DDP: data travels inline or in Position-Zero Read / Reply chunks.
    #[arg(long)]
    no_ddp: bool,
    /// Writes carry a pattern of offset and salt; reads check it; written blocks are read back at the end.
    #[arg(long)]
    verify: bool,
    /// read only: check the file against the --verify pattern without writing it first (after a crash or
    /// restart), reading every block back at the end; any difference is an error.
    #[arg(long = "verify-only", conflicts_with = "verify")]
    verify_only: bool,
    /// MOUNT server host[:port] [default: the target's host, 127.0.0.1 for shm; port 20048,
    /// else portmap].
    #[arg(long = "mount-addr")]
    mount_addr: Option<String>,
    /// MOUNT port (no portmap fallback).
    #[arg(long = "mount-port")]
    mount_port: Option<u16>,
    /// Export path.
    #[arg(long, default_value = "/export")]
    export: String,
    /// File name in the export.
    #[arg(long, default_value = "perf.dat")]
    file: String,
    /// CREATE the file when LOOKUP does not find it.
    #[arg(long)]
    create: bool,
    /// Bytes of the file used (filled before reads when shorter, or always with --verify).
    #[arg(long = "file-size", default_value = "64M", value_parser = parse_size)]
    file_size: u64,
    /// Sequential offsets (each connection from its own start) instead of random.
    #[arg(long)]
    seq: bool,
    /// `stable_how` of WRITEs.
    #[arg(long, value_enum, default_value = "unstable")]
    stable: StableArg,
    /// COMMIT the file after every this many bytes written per connection
    /// ("1G"; writes only; 0: never).
    #[arg(long = "commit-every", default_value = "0", value_parser = parse_size)]
    commit_every: u64,
    /// Salt of the --verify pattern.
    #[arg(long, default_value_t = 0x5eed)]
    salt: u64,
    /// Credential flavor (the kernel's nfsd refuses AUTH_NONE).
    #[arg(long, value_enum, default_value = "sys")]
    auth: AuthArg,
    #[arg(long, default_value_t = 0)]
    uid: u32,
    #[arg(long, default_value_t = 0)]
    gid: u32,
    /// Do not connect MOUNT from a reserved port even when allowed.
    #[arg(long)]
    no_resvport: bool,
    /// Skip UMNT at the end.
    #[arg(long)]
    no_umount: bool,
}

#[derive(Args, Debug, Clone)]
struct MixedArgs {
    #[command(flatten)]
    nfs: NfsArgs,
    /// Percentage of READs.
    #[arg(long = "read-pct", default_value_t = 50)]
    read_pct: u32,
}

#[derive(Args, Debug, Clone)]
struct RawArgs {
    #[command(flatten)]
    common: Common,
    /// Message size (64 B by default: about an RPC-over-RDMA NULL Call, 68 B, and Reply, 52 B).
    #[arg(long, default_value = "64", value_parser = parse_size)]
    size: u64,
    /// Run the echo side: listen at --listen and answer until killed.
    #[arg(long)]
    serve: bool,
    /// Address to listen at with --serve.
    #[arg(long)]
    listen: Option<String>,
    /// Start the echo side in this process (default for shm unless --target is given).
    #[arg(long)]
    loopback: bool,
    /// Connect to --target instead of a loopback echo side.
    #[arg(long, conflicts_with = "loopback")]
    no_loopback: bool,
    /// CPU of the loopback echo thread (default: a CPU not in --cores), or of --serve.
    #[arg(long = "echo-core")]
    echo_core: Option<usize>,
    /// Each side reads every message it receives before answering or timing
    /// it, as an RPC layer must (the floor does not: a fabric only moves the
    /// bytes). With --serve: the echo side's half.
    #[arg(long)]
    touch: bool,
}

#[derive(Args, Debug, Clone)]
struct CompareArgs {
    /// Result files (--json output); ratios are against the first.
    #[arg(required = true, num_args = 2..)]
    files: Vec<PathBuf>,
    /// Write an SVG percentile plot with one line per file.
    #[arg(long)]
    plot: Option<PathBuf>,
    /// One row per file (main figures and ratios) instead of one column per file.
    #[arg(long = "by-file")]
    by_file: bool,
}

fn fabric_of(c: &Common) -> FabricKind {
    if c.transport == TransportArg::Tcp {
        return FabricKind::Tcp;
    }
    match c.fabric {
        Some(FabricArg::Shm) => FabricKind::Shm,
        Some(FabricArg::Verbs) => FabricKind::Verbs,
        None => FabricKind::default_kind(),
    }
}

fn target_of(c: &Common, f: FabricKind) -> String {
    let t = c.target.clone().unwrap_or_else(|| f.default_target().to_string());
    if f == FabricKind::Verbs && t.parse::<SocketAddr>().is_err() && !t.contains(':') {
        format!("{t}:20049")
    } else if f == FabricKind::Verbs && t.parse::<std::net::Ipv6Addr>().is_ok() {
        format!("[{t}]:20049")
    } else {
        t
    }
}

fn base_config(c: &Common, mode: Mode, size: u32) -> RunConfig {
    let fabric = fabric_of(c);
    RunConfig {
        mode,
        fabric,
        target: target_of(c, fabric),
        version: c.version,
        size,
        qd: c.qd,
        conns: c.conns,
        cores: c.cores.0.clone(),
        duration: c.duration,
        count: c.count,
        warmup: c.warmup,
        rate: c.rate,
        ddp: true,
        verify: false,
        verify_only: false,
        auth: Auth::None,
        seed: c.seed,
        nfs: None,
        progress: c.progress || (!c.no_progress && run::stderr_is_tty()),
        timeout: c.timeout,
        idle_sleep_us: c.idle_sleep_us,
        idle_yield: c.idle_yield,
        idle_wait: c.idle_wait,
        target_pid: c.target_pid,
        nfs41: c.nfs == "4.1",
    }
}

fn auth_of(a: AuthArg, uid: u32, gid: u32) -> Auth {
    match a {
        AuthArg::None => Auth::None,
        AuthArg::Sys => Auth::Sys { uid, gid },
    }
}

/// The MOUNT server: `--mount-addr host[:port]`, `--mount-port`, else the
/// target's host (verbs) or the loopback (shm).
fn mount_target(n: &NfsArgs, fabric: FabricKind, target: &str) -> Result<MountTarget> {
    let (host, port) = match &n.mount_addr {
        Some(a) => {
            if let Ok(sa) = a.parse::<SocketAddr>() {
                (sa.ip(), Some(sa.port()))
            } else if let Ok(ip) = a.parse::<IpAddr>() {
                (ip, None)
            } else if a.contains(':') {
                let sa = a
                    .to_socket_addrs()
                    .with_context(|| format!("--mount-addr {a}"))?
                    .next()
                    .with_context(|| format!("--mount-addr {a}: no address"))?;
                (sa.ip(), Some(sa.port()))
            } else {
                let sa = (a.as_str(), DEFAULT_MOUNT_PORT)
                    .to_socket_addrs()
                    .with_context(|| format!("--mount-addr {a}"))?
                    .next()
                    .with_context(|| format!("--mount-addr {a}: no address"))?;
                (sa.ip(), None)
            }
        }
        None => {
            let host = match fabric {
                FabricKind::Tcp => perf::tcpload::tcp_addr(target)?.ip(),
                FabricKind::Verbs => target
                    .parse::<SocketAddr>()
                    .map(|s| s.ip())
                    .with_context(|| format!("target {target}: expected ip:port"))?,
                FabricKind::Shm => IpAddr::from([127, 0, 0, 1]),
            };
            (host, None)
        }
    };
    Ok(MountTarget {
        timeout: n.common.timeout,
        reserved_port: !n.no_resvport,
        ..MountTarget::new(host, n.mount_port.or(port))
    })
}

fn nfs_config(n: &NfsArgs, kind: OpKind) -> Result<RunConfig> {
    let size = u32::try_from(n.size).context("--size too large")?;
    let mut cfg = base_config(&n.common, Mode::Rpc(kind), size);
    cfg.ddp = !n.no_ddp;
    cfg.verify = n.verify;
    cfg.verify_only = n.verify_only;
    cfg.auth = auth_of(n.auth, n.uid, n.gid);
    cfg.nfs = Some(NfsOptions {
        mount: mount_target(n, cfg.fabric, &cfg.target)?,
        export: n.export.clone(),
        file: n.file.clone(),
        create: n.create,
        file_size: n.file_size,
        seq: n.seq,
        stable: match n.stable {
            StableArg::Unstable => proto::nfs3::UNSTABLE,
            StableArg::Data => proto::nfs3::DATA_SYNC,
            StableArg::File => proto::nfs3::FILE_SYNC,
        },
        commit_every: n.commit_every,
        salt: n.salt,
        unmount: !n.no_umount,
    });
    Ok(cfg)
}

fn deleg_cmd(a: &DelegArgs) -> Result<i32> {
    let base = base_config(&a.common, Mode::Rpc(OpKind::Read), 4096);
    let cred = match auth_of(a.auth, a.uid, a.gid) {
        Auth::None => perf::nfs::Cred::none(),
        Auth::Sys { uid, gid } => perf::nfs::Cred::sys(&perf::nfs::machine_name(), uid, gid)?,
    };
    let cfg = perf::deleg::HoldConfig {
        target: base.target.clone(),
        version: base.version,
        cred,
        export: a.export.clone(),
        file: a.file.clone(),
        create: a.create,
        duration: base.duration,
        timeout: base.timeout,
        ignore_recalls: a.ignore_recalls,
    };
    let rep = match base.fabric {
        FabricKind::Shm => perf::deleg::hold(&perf::engine::ShmMaker::default(), &cfg)?,
        #[cfg(feature = "verbs")]
        FabricKind::Verbs => perf::deleg::hold(&perf::engine::VerbsMaker::default(), &cfg)?,
        _ => bail!("perf deleg runs over RPC-over-RDMA (--fabric shm or verbs)"),
    };
    let ms = |d: Option<Duration>| d.map_or("-".to_string(), |d| format!("{:.3} ms", d.as_secs_f64() * 1e3));
    println!(
        "delegations granted {} refused {}; recalls {} returned {} ignored {} probes {} other {} malformed {}",
        rep.granted,
        rep.refused,
        rep.stats.recalls,
        rep.stats.returned,
        rep.stats.ignored,
        rep.stats.probes,
        rep.stats.other,
        rep.stats.malformed
    );
    println!(
        "CB_RECALL to DELEGRETURN reply: p50 {} p99 {} (n={}); final SEQUENCE flags {:#x}",
        ms(rep.quantile(0.5)),
        ms(rep.quantile(0.99)),
        rep.recall_to_return.len(),
        rep.final_flags
    );
    Ok(0)
}

fn write_file(path: &Path, text: &str) -> Result<()> {
    if let Some(d) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
    }
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

fn report(c: &Common, cfg: &RunConfig, out: &RunOutput) -> Result<()> {
    print!("{}", out.result.summary(&cfg.cores));
    let t = &out.transport;
    if t.calls > 0 {
        println!(
            "  calls: short={} chunked={} long={} transport_errors={} bad_replies={}",
            t.short_calls, t.chunked_calls, t.long_calls, t.transport_errors, t.bad_replies
        );
    }
    if let Some(h) = &out.result.held_back_pct {
        println!(
            "  held back (of qd x conns x time): credits={:.2}% slots={:.2}% other={:.2}%",
            h.credits, h.slots, h.other
        );
    }
    if let Some(n) = out.verified_blocks {
        let what = if cfg.verify_only {
            "blocks of the file"
        } else {
            "written blocks"
        };
        println!("  verify: {n} {what} read back and checked");
    }
    if out.target_lost {
        println!("  target lost: the run stopped when a connection failed");
    }
    if let Some(p) = &c.json {
        write_file(p, &out.result.to_json())?;
    }
    if let Some(p) = &c.hdr_log {
        let mut buf = Vec::new();
        let cmd = std::env::args().collect::<Vec<_>>().join(" ");
        perf::hdrlog::write_log(&mut buf, out.base_time, &cmd, &out.intervals)?;
        write_file(p, &String::from_utf8_lossy(&buf))?;
    }
    if let Some(p) = &c.plot {
        let label = c.label.clone().unwrap_or_else(|| default_label(&out.result));
        let svg = render_svg(&label, &[Curve::from_hist(&label, &out.hist)]);
        write_file(p, &svg)?;
    }
    Ok(())
}

fn default_label(r: &RunResult) -> String {
    let vers = if r.op == "raw" {
        String::new()
    } else {
        format!(" v{}", r.version)
    };
    let size = if r.op == "null" {
        String::new()
    } else {
        format!(" {}", perf::args::size_label(r.size_bytes))
    };
    format!("{}{vers}{size} qd{} x{}", r.op, r.queue_depth, r.connections)
}

fn run_and_report(c: &Common, cfg: RunConfig) -> Result<i32> {
    let out = run::run(&cfg)?;
    report(c, &cfg, &out)?;
    Ok(if out.result.errors > 0 || out.result.ops == 0 {
        1
    } else {
        0
    })
}

fn compare(a: &CompareArgs) -> Result<i32> {
    let mut results = Vec::new();
    for f in &a.files {
        let text = std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?;
        let r = RunResult::from_json(&text).with_context(|| format!("{}", f.display()))?;
        let name = f
            .file_stem()
            .map_or_else(|| f.display().to_string(), |s| s.to_string_lossy().into());
        results.push((name, r));
    }
    if a.by_file {
        print!("{}", compare_rows(&results));
    } else {
        print!("{}", compare_table(&results));
    }
    if let Some(p) = &a.plot {
        let curves: Vec<Curve> = results.iter().map(|(n, r)| Curve::from_result(n, r)).collect();
        write_file(p, &render_svg("latency by percentile", &curves))?;
    }
    Ok(0)
}

fn raw_cmd(a: &RawArgs) -> Result<i32> {
    let size = u32::try_from(a.size).context("--size too large")?;
    let fabric = fabric_of(&a.common);
    if fabric == FabricKind::Tcp {
        bail!("raw is the fabric's own ping-pong: not with --transport tcp");
    }
    if a.serve {
        let Some(addr) = a.listen.clone().or_else(|| a.common.target.clone()) else {
            bail!("--serve needs --listen ADDR");
        };
        let stop = Arc::new(AtomicBool::new(false));
        for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
            signal_hook::flag::register(sig, Arc::clone(&stop)).context("installing a signal handler")?;
        }
        eprintln!("perf raw: echo side on {} at {addr} (Ctrl-C to stop)", fabric.name());
        let qd = a.common.qd.max(16);
        let n = run::serve_raw(fabric, &addr, size, qd, a.echo_core, &stop, a.touch)?;
        eprintln!("perf raw: {n} messages echoed");
        return Ok(0);
    }
    let loopback = a.loopback || (fabric == FabricKind::Shm && !a.no_loopback && a.common.target.is_none());
    let echo_cpu = a.echo_core.or_else(|| {
        let n = std::thread::available_parallelism().map_or(1, |n| n.get());
        (0..n.max(2)).find(|c| !a.common.cores.0.contains(c))
    });
    let mode = Mode::Raw {
        loopback,
        echo_cpu,
        touch: a.touch,
    };
    let mut cfg = base_config(&a.common, mode, size);
    if !loopback && a.common.target.is_none() {
        bail!("raw without --loopback needs --target (the address of `perf raw --serve`)");
    }
    cfg.target = target_of(&a.common, fabric);
    run_and_report(&a.common, cfg)
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    let code = match &cli.cmd {
        Cmd::Null(n) => {
            let mut cfg = base_config(
                &n.common,
                Mode::Rpc(OpKind::Null {
                    prog: n.program,
                    vers: n.prog_version,
                }),
                0,
            );
            cfg.auth = auth_of(n.auth, n.uid, n.gid);
            run_and_report(&n.common, cfg)?
        }
        Cmd::Read(n) => run_and_report(&n.common, nfs_config(n, OpKind::Read)?)?,
        Cmd::Write(n) => run_and_report(&n.common, nfs_config(n, OpKind::Write)?)?,
        Cmd::Mixed(m) => {
            let cfg = nfs_config(&m.nfs, OpKind::Mixed { read_pct: m.read_pct })?;
            run_and_report(&m.nfs.common, cfg)?
        }
        Cmd::Raw(a) => raw_cmd(a)?,
        Cmd::Deleg(a) => deleg_cmd(a)?,
        Cmd::Compare(a) => compare(a)?,
    };
    std::process::exit(code);
}
