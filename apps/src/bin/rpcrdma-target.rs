//! `rpcrdma-target -c cores.json`: the NFSv3 gateway over RPC-over-RDMA.
//!
//! Starts reactors, pools, fabric listeners, the NFS and MOUNT services and
//! their TCP listeners from the configuration; SIGINT or SIGTERM drains
//! in-flight calls, syncs every backend and exits 0. `--check-config`
//! validates the file (every problem, with its JSON path) and exits.
//! `rpcrdma-target stats -c cores.json` prints the running target's live
//! statistics (read from its local socket; `--watch`, `--json`).

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand};
use rpcrdma_apps::config::{Config, ConfigError};
use rpcrdma_apps::server::{stats, Target};

#[derive(Parser, Debug)]
#[command(
    name = "rpcrdma-target",
    version,
    about = "NFSv3 over RPC-over-RDMA (v1 and v2) target"
)]
struct Args {
    /// The cores.json configuration (see docs/CONFIG.md).
    #[arg(short = 'c', long = "config", default_value = "configs/cores.json", global = true)]
    config: PathBuf,
    /// Validate the configuration and exit (0 when valid, 2 otherwise).
    #[arg(long)]
    check_config: bool,
    /// Log filter (tracing EnvFilter syntax); overrides RUST_LOG.
    #[arg(long)]
    log: Option<String>,
    #[command(subcommand)]
    cmd: Option<Cmd>,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Live statistics of the target running with this configuration: per
    /// core and per procedure counters, latency percentiles, pools (read
    /// from its local socket, `listeners.stats_socket`).
    Stats(StatsArgs),
}

#[derive(clap::Args, Debug)]
struct StatsArgs {
    /// Print the JSON document instead of the table.
    #[arg(long)]
    json: bool,
    /// Refresh every SECONDS (default 1) with rates, until interrupted.
    #[arg(long, value_name = "SECONDS", num_args = 0..=1, default_missing_value = "1")]
    watch: Option<f64>,
    /// The socket, instead of the one the configuration gives.
    #[arg(long)]
    socket: Option<PathBuf>,
}

/// `rpcrdma-target stats`: query the socket once, or every `--watch` seconds.
fn stats_cmd(cfg: &Config, a: &StatsArgs) -> std::process::ExitCode {
    let path = a.socket.clone().unwrap_or_else(|| stats::socket_path(cfg));
    let mut prev: Option<(serde_json::Value, std::time::Instant)> = None;
    loop {
        let doc = match stats::query(&path) {
            Ok(d) => d,
            Err(e) => {
                eprintln!(
                    "rpcrdma-target stats: {}: {e} (is the target running with this configuration?)",
                    path.display()
                );
                return std::process::ExitCode::FAILURE;
            }
        };
        if a.json {
            println!("{doc}");
        } else {
            if a.watch.is_some() {
                // Clear the terminal and home the cursor.
                print!("\x1b[2J\x1b[H");
            }
            let p = prev.as_ref().map(|(d, t)| (d, t.elapsed().as_secs_f64()));
            print!("{}", stats::render_table(&doc, p));
        }
        let Some(secs) = a.watch else {
            return std::process::ExitCode::SUCCESS;
        };
        prev = Some((doc, std::time::Instant::now()));
        std::thread::sleep(Duration::from_secs_f64(secs.clamp(0.1, 3600.0)));
    }
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let filter = args
        .log
        .clone()
        .or_else(|| std::env::var("RUST_LOG").ok())
        .unwrap_or_else(|| "info".into());
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let cfg = match Config::load(&args.config) {
        Ok(c) => c,
        Err(ConfigError::Invalid(problems)) => {
            eprintln!("{}: invalid configuration:", args.config.display());
            for p in &problems.0 {
                eprintln!("  {p}");
            }
            return std::process::ExitCode::from(2);
        }
        Err(e) => {
            eprintln!("{}: {e}", args.config.display());
            return std::process::ExitCode::from(2);
        }
    };
    if let Some(Cmd::Stats(a)) = &args.cmd {
        return stats_cmd(&cfg, a);
    }
    if args.check_config {
        println!("{}: configuration valid", args.config.display());
        let capacity = cfg.capacity();
        println!("{capacity}");
        // A bottleneck, not an error (docs/CONFIG.md, "Capacity").
        for w in capacity.queue_warnings() {
            eprintln!("{}: warning: {w}", args.config.display());
        }
        return std::process::ExitCode::SUCCESS;
    }
    match run(cfg) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rpcrdma-target: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(cfg: Config) -> anyhow::Result<()> {
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone()).context("installing signal handlers")?;
    }
    let target = Target::start(cfg).context("starting the target")?;
    tracing::info!(tcp = ?target.tcp_addrs(), "rpcrdma-target ready");
    // The cores' clock (reactor::clock): a system call per read or none.
    tracing::info!(
        clock = %reactor::clock::source(),
        os_clock_source = reactor::clock::os_clock_source().as_deref().unwrap_or("?"),
        "reactor clock"
    );
    // The admin thread: wait for a signal.
    while !stop.load(Ordering::Acquire) {
        std::thread::sleep(Duration::from_millis(50));
    }
    tracing::info!("signal received: draining");
    let stats = target.shutdown().context("shutting down")?;
    for (core, s) in &stats.engines {
        // Every Call ends in one of these (`ResponderStats::unaccounted`);
        // tests/kernel/run.sh reads this line.
        tracing::info!(
            core,
            calls = s.calls,
            replies = s.replies,
            call_errors = s.call_errors,
            unanswered_conn_lost = s.unanswered_conn_lost,
            unanswered_service_drop = s.unanswered_service_drop,
            unanswered_other = s.unanswered_other,
            unaccounted = s.unaccounted(0),
            error_replies = s.error_replies,
            service_rejected = s.service_rejected,
            conns_accepted = s.conns_accepted,
            conns_rejected = s.conns_rejected,
            sends_with_invalidate = s.sends_with_invalidate,
            "engine totals"
        );
    }
    for c in &stats.cores {
        let busy_pct = if c.busy_ns + c.idle_ns > 0 {
            100.0 * c.busy_ns as f64 / (c.busy_ns + c.idle_ns) as f64
        } else {
            0.0
        };
        tracing::info!(
            core = c.core,
            cpu = c.cpu,
            loops = c.loops,
            busy_pct = format!("{busy_pct:.1}"),
            ns_per_loop = (c.busy_ns + c.idle_ns).checked_div(c.loops).unwrap_or(0),
            sleeps = c.sleeps,
            spin_caught = c.spin_caught,
            crowd_moves = c.crowd_moves,
            wait_short = c.wait_short,
            wait_long = c.wait_long,
            spin_window_us = c.spin_window_us,
            arms = c.arms,
            wakes_fd = c.wakes_fd,
            wakes_bell = c.wakes_bell,
            wakes_none = c.wakes_none,
            bell_clears = c.bell_clears,
            "core totals"
        );
    }
    tracing::info!(tcp_calls = stats.tcp_calls, "rpcrdma-target stopped cleanly");
    Ok(())
}
