//! The `cores.json` loader and validator: the example files validate, and
//! bad configurations are reported with the JSON path, what was expected
//! and what was found.

use std::path::PathBuf;

use reactor::{Reactor, ReactorError};
use rpcrdma_apps::config::{
    BackendConfig, Config, ConfigError, ConfigProblems, CoreRole, FabricConfig, PageSize, PoolUsage, TcpConfig,
};
use serde_json::{json, Value};

fn config_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../configs").join(name)
}

fn example_value(name: &str) -> Value {
    let text = std::fs::read_to_string(config_path(name)).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// Applies `edit` to the quick-start config and returns the problems.
fn problems_after(edit: impl FnOnce(&mut Value)) -> ConfigProblems {
    let mut v = example_value("cores.json");
    edit(&mut v);
    match Config::from_json_value(&v) {
        Err(ConfigError::Invalid(p)) => p,
        other => panic!("expected problems, got {other:?}"),
    }
}

/// Asserts a problem at `path` whose expected/found texts contain the
/// given fragments.
fn assert_problem(p: &ConfigProblems, path: &str, expected: &str, found: &str) {
    let at_path: Vec<_> = p.0.iter().filter(|q| q.path == path).collect();
    assert!(!at_path.is_empty(), "no problem reported at {path}; got:\n{p}");
    assert!(
        at_path
            .iter()
            .any(|q| q.expected.contains(expected) && q.found.contains(found)),
        "{path}: no problem with expected-text containing {expected:?} and found-text containing {found:?}; got:\n{p}"
    );
}

#[test]
fn example_configs_validate() {
    for name in ["cores.json", "single-nic.json", "many-core.json"] {
        let c = Config::load(config_path(name)).unwrap_or_else(|e| panic!("{name} does not load: {e}"));
        c.validate().unwrap();
        // The serde derives describe the same schema as the walker.
        let text = std::fs::read_to_string(config_path(name)).unwrap();
        let via_serde: Config = serde_json::from_str(&text).unwrap();
        assert_eq!(via_serde, c, "{name}: serde derive and loader disagree");
        // Printing and reloading gives the same configuration.
        assert_eq!(Config::from_json_str(&c.to_json_pretty()).unwrap(), c);
        // The reactor options derived from it are valid.
        c.reactor_options().check().unwrap();
    }
}

#[test]
fn quick_start_config_is_the_small_host_profile() {
    let c = Config::load(config_path("cores.json")).unwrap();
    assert_eq!(c.cores.len(), 2);
    assert_eq!(c.io_cores(), vec![1]);
    assert_eq!(c.cores[0].role, CoreRole::Admin);
    assert!(
        c.reactor.pin_threads,
        "pinned: floating measured no better (docs/CONFIG.md)"
    );
    assert!(matches!(c.fabric, FabricConfig::Shm { .. }));
    assert!(c.pools.iter().all(|p| p.page_size == PageSize::Size4K));
    assert_eq!(c.backends.len(), 1);
    assert!(matches!(c.backends[0], BackendConfig::Mem { .. }));
    assert_eq!(c.exports.len(), 1);
    assert!(c.exports[0].allows("127.0.0.1".parse().unwrap()));
    assert!(!c.exports[0].allows("10.0.0.1".parse().unwrap()));
    assert_eq!(c.credits.max_per_connection, 128);
    assert_eq!(c.inline.v1.receive_bytes, 1024);
    assert_eq!(c.inline.v2.receive_bytes, 4096);
    assert_eq!(c.receive_pool().unwrap().usage, PoolUsage::Receive);
}

#[test]
fn quick_start_config_starts_a_reactor_here() {
    let c = Config::load(config_path("cores.json")).unwrap();
    let r = Reactor::start(c.reactor_options()).unwrap();
    assert_eq!(r.num_cores(), 2);
    r.shutdown().unwrap();
}

#[test]
fn missing_cpu_is_only_detected_at_start() {
    let mut v = example_value("cores.json");
    v["cores"][1]["cpu"] = json!(4000);
    let c = Config::from_json_value(&v).expect("validation does not look at the machine");
    match Reactor::start(c.reactor_options()) {
        Err(ReactorError::CpuUnavailable { core, cpu, .. }) => assert_eq!((core, cpu), (1, 4000)),
        other => panic!("expected CpuUnavailable, got {:?}", other.map(|_| ())),
    }
}

#[test]
fn defaults_apply_to_optional_sections() {
    let mut v = example_value("cores.json");
    let m = v.as_object_mut().unwrap();
    m.remove("reactor");
    m.remove("credits");
    m.remove("inline");
    v["exports"][0].as_object_mut().unwrap().remove("root_squash");
    let c = Config::from_json_value(&v).unwrap();
    assert_eq!(c.reactor, Default::default());
    assert_eq!(c.credits.max_per_connection, 128);
    assert_eq!(c.inline.v1.send_bytes, 1024);
    assert_eq!(c.inline.v2.send_bytes, 4096);
    assert!(c.exports[0].root_squash);
}

/// `$.rdma.remote_invalidation` (RFC 8797 s3.2, s5.1): on unless a
/// configuration turns it off; a wrong type or an unknown field in `rdma`
/// is reported at its path.
#[test]
fn rdma_remote_invalidation_defaults_on_and_can_be_turned_off() {
    let c = Config::from_json_value(&example_value("cores.json")).unwrap();
    assert!(c.rdma.remote_invalidation, "shipped: on");
    let mut v = example_value("cores.json");
    v["rdma"] = json!({ "remote_invalidation": false });
    assert!(!Config::from_json_value(&v).unwrap().rdma.remote_invalidation);
    v["rdma"] = json!({});
    assert!(Config::from_json_value(&v).unwrap().rdma.remote_invalidation);
    let p = problems_after(|v| v["rdma"] = json!({ "remote_invalidation": 1, "send_inv": true }));
    assert_problem(&p, "$.rdma.remote_invalidation", "true or false", "1");
    assert_problem(
        &p,
        "$.rdma.send_inv",
        "`remote_invalidation`",
        "unknown field `send_inv`",
    );
}

#[test]
fn pool_count_zero() {
    let p = problems_after(|v| v["pools"][1]["count"] = json!(0));
    assert_problem(&p, "$.pools[1].count", "at least 1 buffer", "0");
    assert_eq!(
        p.at("$.pools[1].count").unwrap().to_string(),
        "$.pools[1].count: expected at least 1 buffer, found 0"
    );
}

#[test]
fn unknown_fields_are_rejected_with_their_path() {
    let p = problems_after(|v| {
        v["pools"][0]["colour"] = json!("blue");
        v["listeners"]["fabric"][0]["mtu"] = json!(4096);
        v["extra"] = json!(true);
        v["fabric"]["device"] = json!("mlx5_0"); // not an shm option
    });
    assert_problem(&p, "$.pools[0].colour", "`buffer_size_bytes`", "unknown field `colour`");
    assert_problem(
        &p,
        "$.listeners.fabric[0].mtu",
        "only known fields",
        "unknown field `mtu`",
    );
    assert_problem(&p, "$.extra", "`exports`", "unknown field `extra`");
    assert_problem(&p, "$.fabric.device", "`socket_path`", "unknown field `device`");
    assert_eq!(p.0.len(), 4, "{p}");
}

#[test]
fn wrong_types_and_missing_fields() {
    let p = problems_after(|v| {
        v["cores"][0]["cpu"] = json!("zero");
        v["cores"][1]["role"] = json!("worker");
        v["listeners"].as_object_mut().unwrap().remove("nfs_tcp_port");
        v["listeners"]["mount_tcp_port"] = json!(70000);
        v["pools"][2]["page_size"] = json!("3M");
        v["exports"][0]["read_only"] = json!("no");
        v["listeners"]["fabric"][0]["address"] = json!("localhost");
    });
    assert_problem(&p, "$.cores[0].cpu", "an integer in 0..=4294967295", "\"zero\"");
    assert_problem(&p, "$.cores[1].role", "one of \"io\", \"admin\"", "\"worker\"");
    assert_problem(&p, "$.listeners.nfs_tcp_port", "required", "no such field");
    assert_problem(&p, "$.listeners.mount_tcp_port", "0..=65535", "70000");
    assert_problem(&p, "$.pools[2].page_size", "one of \"4K\", \"2M\", \"1G\"", "\"3M\"");
    assert_problem(&p, "$.exports[0].read_only", "true or false", "\"no\"");
    assert_problem(
        &p,
        "$.listeners.fabric[0].address",
        "IPv4 or IPv6 address",
        "\"localhost\"",
    );
    assert_eq!(p.0.len(), 7, "{p}");
}

#[test]
fn tagged_sections_report_bad_tags() {
    let p = problems_after(|v| {
        v["fabric"]["provider"] = json!("tcp");
        v["backends"][0]["type"] = json!("disk");
        v["reactor"]["idle"] = json!({"policy": "nap"});
    });
    assert_problem(&p, "$.fabric.provider", "one of \"shm\", \"verbs\", \"sim\"", "\"tcp\"");
    assert_problem(&p, "$.backends[0].type", "\"mem\", \"uring\", \"nvme\"", "\"disk\"");
    assert_problem(&p, "$.reactor.idle.policy", "\"spin_then_sleep\"", "\"nap\"");
}

#[test]
fn duplicate_cpus_and_no_io_core() {
    let p = problems_after(|v| {
        v["cores"] = json!([{"cpu": 3, "role": "admin"}, {"cpu": 3, "role": "admin"}]);
    });
    assert_problem(&p, "$.cores[1].cpu", "already $.cores[0].cpu", "3");
    assert_problem(&p, "$.cores", "role \"io\"", "none");
}

#[test]
fn credits_bounds() {
    let p = problems_after(|v| v["credits"]["max_per_connection"] = json!(0));
    assert_problem(&p, "$.credits.max_per_connection", "1..=16512", "0");
    let p = problems_after(|v| v["credits"]["max_per_connection"] = json!(16513));
    assert_problem(&p, "$.credits.max_per_connection", "$.pools[0].count", "16513");
}

#[test]
fn shipped_configs_take_64_connections_per_core_and_too_small_pools_are_refused() {
    // issue 24 item 5: cores.json took 15 connections per core, and a config
    // whose receive pool could not give one validated and started anyway.
    for name in ["cores.json", "single-nic.json", "many-core.json"] {
        let c = Config::load(config_path(name)).unwrap();
        let cap = c.capacity();
        assert!(cap.conns_per_core >= 64, "{name}: {cap}");
        assert_eq!(cap.srq_depth, cap.conns_per_core * cap.credits, "{name}");
        assert!(cap.to_string().contains("connections per core"), "{name}: {cap}");
    }
    let c = Config::load(config_path("cores.json")).unwrap().capacity();
    assert_eq!((c.conns_per_core, c.credits, c.receive_budget), (64, 128, 16384));
    // 2 cores x 64 cached + 1 engine x 2 x 128 = 384 buffers for one connection.
    let p = problems_after(|v| v["pools"][0]["count"] = json!(383));
    assert_problem(&p, "$.pools[0].count", "at least 384", "383");
    let mut v = example_value("cores.json");
    v["pools"][0]["count"] = json!(384);
    assert_eq!(Config::from_json_value(&v).unwrap().capacity().conns_per_core, 1);
}

#[test]
fn inline_thresholds_follow_rfc8797() {
    let p = problems_after(|v| {
        v["inline"]["v1"]["send_bytes"] = json!(512);
        v["inline"]["v1"]["receive_bytes"] = json!(1536);
        v["inline"]["v2"]["send_bytes"] = json!(262_144 + 1024);
    });
    for (path, found) in [
        ("$.inline.v1.send_bytes", "512"),
        ("$.inline.v1.receive_bytes", "1536"),
        ("$.inline.v2.send_bytes", "263168"),
    ] {
        assert_problem(&p, path, "a multiple of 1024 in 1024..=262144", found);
    }
    // The largest legal value is accepted, and then the pools must hold it.
    let p = problems_after(|v| v["inline"]["v2"]["receive_bytes"] = json!(262_144));
    assert!(p.at("$.inline.v2.receive_bytes").is_none());
    assert_problem(&p, "$.pools[0].buffer_size_bytes", "at least 262144", "4096");
}

#[test]
fn pools_cross_checks() {
    let p = problems_after(|v| {
        v["pools"][1]["usage"] = json!("receive");
        v["pools"][2]["per_core_cache"] = json!(200);
        v["pools"][2]["name"] = json!("recv");
    });
    assert_problem(&p, "$.pools", "exactly one pool with usage \"receive\"", "2");
    assert_problem(&p, "$.pools", "at least one pool with usage \"send\"", "none");
    assert_problem(
        &p,
        "$.pools[2].per_core_cache",
        "at most count / cores = 160 / 2 = 80",
        "200",
    );
    assert_problem(&p, "$.pools[2].name", "not used by $.pools[0]", "\"recv\"");
}

#[test]
fn exports_and_backends_cross_checks() {
    let p = problems_after(|v| {
        v["exports"][0]["backend"] = json!("nvme9");
        v["exports"][0]["clients"] = json!(["10.0.0.1/8", "everyone"]);
        v["exports"][0]["path"] = json!("export");
        v["backends"][0]["size_bytes"] = json!(1000);
    });
    assert_problem(&p, "$.exports[0].backend", "one of \"mem0\"", "\"nvme9\"");
    assert_problem(&p, "$.exports[0].clients[0]", "host bits set", "\"10.0.0.1/8\"");
    assert_problem(&p, "$.exports[0].clients[1]", "not an IP address", "\"everyone\"");
    assert_problem(&p, "$.exports[0].path", "an absolute path", "\"export\"");
    assert_problem(&p, "$.backends[0].size_bytes", "multiple of 4096", "1000");
}

#[test]
fn listener_cross_checks() {
    let p = problems_after(|v| {
        v["listeners"]["fabric"] = json!([
            {"address": "127.0.0.1", "port": 20049, "versions": [1, 3, 1]},
            {"address": "127.0.0.1", "port": 20049, "versions": []}
        ]);
        v["listeners"]["mount_tcp_port"] = json!(2049);
    });
    assert_problem(&p, "$.listeners.fabric[0].versions[1]", "version 1 or 2", "3");
    assert_problem(
        &p,
        "$.listeners.fabric[0].versions[2]",
        "each version listed once",
        "version 1 again",
    );
    assert_problem(&p, "$.listeners.fabric[1].versions", "non-empty", "an empty list");
    assert_problem(
        &p,
        "$.listeners.fabric[1]",
        "not used by $.listeners.fabric[0]",
        "127.0.0.1 port 20049",
    );
    assert_problem(
        &p,
        "$.listeners.mount_tcp_port",
        "different from $.listeners.nfs_tcp_port",
        "2049",
    );
}

/// `listeners.tcp` is optional (older files load unchanged), partial objects
/// take the defaults for the rest, and out-of-range values are reported.
#[test]
fn tcp_limits_are_optional_and_checked() {
    let c = Config::from_json_value(&example_value("cores.json")).unwrap();
    assert_eq!(c.listeners.tcp, TcpConfig::default());
    assert_eq!(c.listeners.tcp.max_conns, 64);
    let mut v = example_value("cores.json");
    v["listeners"]["tcp"] = json!({"idle_timeout_ms": 1500, "shutdown_grace_ms": 0});
    let c = Config::from_json_value(&v).unwrap();
    c.validate().unwrap();
    assert_eq!(c.listeners.tcp.idle_timeout_ms, 1500);
    assert_eq!(c.listeners.tcp.shutdown_grace_ms, 0);
    assert_eq!(c.listeners.tcp.record_timeout_ms, 30_000);
    let via_serde: Config = serde_json::from_value(v).unwrap();
    assert_eq!(via_serde, c, "serde derive and loader disagree");
    let p = problems_after(|v| {
        v["listeners"]["tcp"] = json!({"max_conns": 0, "record_timeout_ms": 0, "shutdown_grace_ms": 60001});
    });
    assert_problem(&p, "$.listeners.tcp.max_conns", "1..=4096", "0");
    assert_problem(&p, "$.listeners.tcp.record_timeout_ms", "1..=", "0");
    assert_problem(&p, "$.listeners.tcp.shutdown_grace_ms", "0..=60000", "60001");
    let p = problems_after(|v| v["listeners"]["tcp"] = json!({"idle_timeout": 5}));
    assert!(p.0.iter().any(|q| q.path == "$.listeners.tcp.idle_timeout"), "{p}");
}

#[test]
fn verbs_and_nvme_checks_on_the_many_core_example() {
    let mut v = example_value("many-core.json");
    v["fabric"]["port_num"] = json!(0);
    v["listeners"]["fabric"][0]["address"] = json!("10.20.0.12");
    v["backends"][1]["devices"] = json!(["dev/ng1n1"]);
    v["backends"][2]["queue_depth"] = json!(100);
    let p = match Config::from_json_value(&v) {
        Err(ConfigError::Invalid(p)) => p,
        other => panic!("expected problems, got {other:?}"),
    };
    assert_problem(&p, "$.fabric.port_num", "a port number >= 1", "0");
    assert_problem(
        &p,
        "$.listeners.fabric[0].address",
        "$.fabric.ip (10.20.0.11)",
        "10.20.0.12",
    );
    assert_problem(&p, "$.backends[1].devices[0]", "an absolute path", "\"dev/ng1n1\"");
    assert_problem(&p, "$.backends[2].queue_depth", "a power of two in 2..=4096", "100");
    assert_eq!(p.0.len(), 4, "{p}");
}

#[test]
fn every_problem_is_reported_at_once() {
    let p = problems_after(|v| {
        v["pools"][0]["count"] = json!(0);
        v["exports"][0]["backend"] = json!("missing");
        v["inline"]["v2"]["receive_bytes"] = json!(100);
        v["reactor"]["message_ring_size"] = json!(1000);
    });
    assert!(p.at("$.pools[0].count").is_some());
    assert!(p.at("$.exports[0].backend").is_some());
    assert!(p.at("$.inline.v2.receive_bytes").is_some());
    assert_problem(&p, "$.reactor.message_ring_size", "a power of two in 2..=65536", "1000");
    let text = ConfigError::Invalid(p.clone()).to_string();
    assert!(text.starts_with(&format!("{} configuration problem(s):", p.0.len())));
    assert!(text.contains("$.exports[0].backend: expected the name of a backend"));
}

#[test]
fn syntax_and_io_errors() {
    match Config::from_json_str("{\n  \"cores\": [\n  oops\n}") {
        Err(ConfigError::Syntax { line, .. }) => assert_eq!(line, 3),
        other => panic!("expected a syntax error, got {other:?}"),
    }
    match Config::from_json_str("[1, 2]") {
        Err(ConfigError::Invalid(p)) => assert_problem(&p, "$", "an object", "an array of 2 element(s)"),
        other => panic!("expected problems, got {other:?}"),
    }
    match Config::load(config_path("does-not-exist.json")) {
        Err(e @ ConfigError::Io { .. }) => {
            assert!(std::error::Error::source(&e).is_some());
        }
        other => panic!("expected an I/O error, got {other:?}"),
    }
}

#[test]
fn idle_fields_are_reported_against_their_documented_ranges() {
    // issue 24 item 5: not "-5" against the type's 0..=4294967295.
    let p = problems_after(|v| {
        v["reactor"]["idle"] = json!({ "policy": "spin_then_sleep", "idle_loops": 1000, "max_sleep_us": -5 });
    });
    assert_problem(&p, "$.reactor.idle.max_sleep_us", "an integer in 1..=1000000", "-5");
    let p = problems_after(|v| {
        v["reactor"]["idle"] =
            json!({ "policy": "spin_then_wait", "spin_us": -1, "max_spin_us": 1_000_001, "max_wait_ms": 0 });
    });
    assert_problem(&p, "$.reactor.idle.spin_us", "an integer in 0..=1000000", "-1");
    assert_problem(&p, "$.reactor.idle.max_spin_us", "an integer in 0..=1000000", "1000001");
    assert_problem(&p, "$.reactor.idle.max_wait_ms", "an integer in 1..=10000", "0");
    // The hybrid policy's optional fields take the shipped defaults.
    let mut v = example_value("cores.json");
    v["reactor"]["idle"] = json!({ "policy": "spin_then_wait" });
    let c = Config::from_json_value(&v).unwrap();
    assert_eq!(c.reactor.idle, reactor::idle::SPIN_THEN_WAIT);
}

/// issue 21 item 4: `--check-config` accepts a backend queue shallower than
/// the Calls a core can have in flight (they wait in the engine, no
/// JUKEBOX), shows it in the capacity output, and warns on stderr.
#[test]
fn nfs_safety_check_config_warns_of_a_queue_depth_below_the_calls_in_flight() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_rpcrdma-target"))
        .args(["--check-config", "-c"])
        .arg(config_path("single-nic.json"))
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "a warning, not a refusal: {stdout}{stderr}");
    assert!(
        stdout.contains("backend scratch (uring): queue depth 256 per core for up to 64 x 128 = 8192 Calls in flight"),
        "{stdout}"
    );
    let warnings: Vec<&str> = stderr.lines().filter(|l| l.contains("warning:")).collect();
    assert_eq!(warnings.len(), 1, "{stderr}");
    assert!(
        warnings[0].contains("\"scratch\" (uring): queue_depth 256 is below the 8192 Calls"),
        "{stderr}"
    );
    // The quick start's one backend is `mem`: nothing to warn of.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_rpcrdma-target"))
        .args(["--check-config", "-c"])
        .arg(config_path("cores.json"))
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(!String::from_utf8_lossy(&out.stderr).contains("warning:"));
}

/// `$.reactor.pin_threads`: absent means pinned (each core thread on its
/// `cpu` alone); `false` leaves every core thread on the CPUs the process
/// may use, so the kernel can move it off a CPU that other work needs, and
/// nothing is kept off a core's CPU for the helpers; a wrong type is
/// reported at its path.
#[test]
fn reactor_threads_float_when_pin_threads_is_false() {
    let affinity_on_cores = |c: &Config| {
        let r = Reactor::start(c.reactor_options()).unwrap();
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        for core in 0..c.cores.len() {
            let seen = seen.clone();
            r.handle()
                .send(core, move |_| {
                    seen.lock()
                        .unwrap()
                        .push((core, rpcrdma_apps::cpus::thread_cpus().unwrap()));
                })
                .unwrap();
        }
        r.shutdown().unwrap();
        let mut seen = seen.lock().unwrap().clone();
        seen.sort();
        seen
    };
    let allowed = rpcrdma_apps::cpus::thread_cpus().unwrap();
    let mut v = example_value("cores.json");
    v["reactor"]["pin_threads"] = json!(true);
    let pinned = Config::from_json_value(&v).unwrap();
    assert!(pinned.reactor_options().pin_threads);
    assert_eq!(rpcrdma_apps::cpus::CoreCpus::of(&pinned).reactor, vec![0, 1]);
    if allowed.contains(&0) && allowed.contains(&1) {
        assert_eq!(affinity_on_cores(&pinned), vec![(0, vec![0]), (1, vec![1])]);
    }
    v["reactor"].as_object_mut().unwrap().remove("pin_threads");
    assert!(
        Config::from_json_value(&v).unwrap().reactor.pin_threads,
        "pinned by default"
    );

    v["reactor"]["pin_threads"] = json!(false);
    let floating = Config::from_json_value(&v).unwrap();
    assert!(!floating.reactor_options().pin_threads);
    assert_eq!(rpcrdma_apps::cpus::CoreCpus::of(&floating), Default::default());
    assert_eq!(
        affinity_on_cores(&floating),
        vec![(0, allowed.clone()), (1, allowed.clone())]
    );

    let p = problems_after(|v| v["reactor"]["pin_threads"] = json!("yes"));
    assert_problem(&p, "$.reactor.pin_threads", "true or false", "\"yes\"");
}

/// `$.reactor.move_when_crowded`: absent means on (the reactor watches
/// pinned cores with the default rule), `false` turns the watcher off, a
/// wrong type is reported at its path; a reactor started from the shipped
/// file says whether it watches (or why it cannot: no scheduler statistics
/// on this host).
#[test]
fn reactor_moves_crowded_cores_unless_told_not_to() {
    let mut v = example_value("cores.json");
    v["reactor"].as_object_mut().unwrap().remove("move_when_crowded");
    let on = Config::from_json_value(&v).unwrap();
    assert!(on.reactor.move_when_crowded, "on by default");
    assert_eq!(on.reactor_options().crowd_move, Some(reactor::CrowdRule::default()));

    v["reactor"]["move_when_crowded"] = json!(false);
    let off = Config::from_json_value(&v).unwrap();
    assert_eq!(off.reactor_options().crowd_move, None);
    let r = Reactor::start(off.reactor_options()).unwrap();
    assert_eq!(*r.crowd_move(), reactor::CrowdMove::Off);
    r.shutdown().unwrap();

    let allowed = rpcrdma_apps::cpus::thread_cpus().unwrap();
    if allowed.contains(&0) && allowed.contains(&1) {
        let r = Reactor::start(on.reactor_options()).unwrap();
        match r.crowd_move() {
            reactor::CrowdMove::Watching => assert!(std::path::Path::new("/proc/schedstat").exists()),
            reactor::CrowdMove::Unavailable(why) => {
                assert!(!why.is_empty());
                assert!(!std::path::Path::new("/proc/schedstat").exists(), "{why}");
            }
            reactor::CrowdMove::Off => panic!("asked for, with two CPUs: watching or unavailable"),
        }
        let unavailable = matches!(r.crowd_move(), reactor::CrowdMove::Unavailable(_));
        let stats = r.shutdown().unwrap();
        if unavailable {
            // nothing watched: every core ends where it started
            assert_eq!(
                stats.iter().map(|s| (s.cpu, s.crowd_moves)).collect::<Vec<_>>(),
                vec![(0, 0), (1, 0)]
            );
        }
    }
    // floating cores are not watched
    v["reactor"]["move_when_crowded"] = json!(true);
    v["reactor"]["pin_threads"] = json!(false);
    let r = Reactor::start(Config::from_json_value(&v).unwrap().reactor_options()).unwrap();
    assert_eq!(*r.crowd_move(), reactor::CrowdMove::Off);
    r.shutdown().unwrap();

    let p = problems_after(|v| v["reactor"]["move_when_crowded"] = json!(1));
    assert_problem(&p, "$.reactor.move_when_crowded", "true or false", "1");
}
