#!/usr/bin/env python3
"""tests/kernel/guest/gen_config.py BASE.json IP — print the rpcrdma-target
configuration for the kernel-interop guest, derived from configs/cores.json:
the verbs provider on rxe0 at IP, the fabric listener on IP:20049 (versions 1
and 2), NFS on 2049/TCP and MOUNT on 20048/TCP, one core per guest CPU (the
first admin, the rest I/O; a single CPU is one I/O core), a mem backend large
enough for the functional workload (or uring: TARGET_BACKEND), and /export open to IP's /24 without root
squashing (the workload chowns files)."""
import ipaddress
import json
import os
import sys

base_path, ip = sys.argv[1], sys.argv[2]
cfg = json.load(open(base_path))
ncpu = len(os.sched_getaffinity(0))
if ncpu == 1:
    cfg["cores"] = [{"cpu": 0, "role": "io"}]
elif "TARGET_IO_CPU" in os.environ:
    # TARGET_IO_CPU=N: one I/O core on CPU N, the admin core on another CPU
    # (where the guest's vCPUs run rxe's work matters under emulation)
    io = int(os.environ["TARGET_IO_CPU"])
    cfg["cores"] = [{"cpu": (io + 1) % ncpu, "role": "admin"}, {"cpu": io, "role": "io"}]
else:
    cfg["cores"] = [{"cpu": 0, "role": "admin"}] + [{"cpu": c, "role": "io"} for c in range(1, ncpu)]
cfg["fabric"] = {"provider": "verbs", "device": "rxe0", "ip": ip}
# TARGET_RDMA_PORT, TARGET_NFS_TCP_PORT, TARGET_MOUNT_PORT: other ports than
# the standard ones, and TARGET_RPCBIND (auto, register, serve, off) the
# rpcbind mode: for running beside the Linux server (paired.sh), whose
# listeners and rpcbind registrations hold the standard ones.
rdma_port = int(os.environ.get("TARGET_RDMA_PORT", "20049"))
cfg["listeners"]["fabric"] = [{"address": ip, "port": rdma_port, "versions": [1, 2]}]
cfg["listeners"]["nfs_tcp_port"] = int(os.environ.get("TARGET_NFS_TCP_PORT", "2049"))
cfg["listeners"]["mount_tcp_port"] = int(os.environ.get("TARGET_MOUNT_PORT", "20048"))
if os.environ.get("TARGET_RPCBIND"):
    cfg["listeners"]["rpcbind"] = {"mode": os.environ["TARGET_RPCBIND"]}
mem_mib = int(os.environ.get("TARGET_MEM_MIB", "768"))
cfg["backends"] = [{"name": "mem0", "type": "mem", "size_bytes": mem_mib << 20}]
# TARGET_BACKEND=uring: a directory tree through io_uring instead (I/O that
# completes later, deferred replies); O_DIRECT off, the guest's file systems
# may not have it. The tree: TARGET_URING_DIR (/var/tmp/rpcrdma-uring, on the
# guest's disk; servers.sh puts a tmpfs there with TARGET_URING_TMPFS=1, as
# the Linux server's export is).
if os.environ.get("TARGET_BACKEND") == "uring":
    tree = os.environ.get("TARGET_URING_DIR", "/var/tmp/rpcrdma-uring")
    cfg["backends"] = [{"name": "mem0", "type": "uring", "path": tree, "o_direct": False}]
# TARGET_NFS4_STATE_DIR: NFSv4 client records there (restart with reclaim,
# tests/kernel/guest/nfs4_state.sh).
if os.environ.get("TARGET_NFS4_STATE_DIR"):
    cfg.setdefault("nfs4", {})["state_dir"] = os.environ["TARGET_NFS4_STATE_DIR"]
# TARGET_REMOTE_INV=0: rdma.remote_invalidation off (plain Sends: the client
# invalidates every handle itself), for a comparison; on by default.
if os.environ.get("TARGET_REMOTE_INV") == "0":
    cfg.setdefault("rdma", {})["remote_invalidation"] = False
# TARGET_DELEGATIONS=0: nfs4.delegations off (the deleg step's comparison,
# tests/kernel/guest/nfs4_deleg.sh); on by default.
if os.environ.get("TARGET_DELEGATIONS") == "0":
    cfg.setdefault("nfs4", {})["delegations"] = False
net = str(ipaddress.ip_network(ip + "/24", strict=False))
cfg["exports"] = [
    dict(cfg["exports"][0], path="/export", backend="mem0", clients=[net], read_only=False, root_squash=False)
]
# Under software emulation the guest's few vCPUs also run rxe's softirq work;
# a core that polls while idle starves the fabric and the client. The shipped
# idle policy (spin_then_wait: spin briefly, or as long as the client's recent
# gaps between Calls suggest up to max_spin_us, then block on the completion
# channel) leaves them alone when idle, so the guest runs configs/cores.json's
# policy as it is (issue 24 item 1). For comparison:
# - TARGET_SPIN_US (and TARGET_MAX_SPIN_US, TARGET_MAX_WAIT_MS) keep
#   spin_then_wait with another spin time (a fixed one unless
#   TARGET_MAX_SPIN_US is given: its ceiling defaults to 0 then);
# - TARGET_IDLE_LOOPS / TARGET_MAX_SLEEP_US select spin_then_sleep (measured
#   idle CPU per reactor then: 8 loops / 50 us 52%, 1000 / 100 35%,
#   1000 / 1000 14%).
WAIT_VARS = ("TARGET_SPIN_US", "TARGET_MAX_SPIN_US", "TARGET_MAX_WAIT_MS")
if any(v in os.environ for v in WAIT_VARS):
    idle = dict(cfg.get("reactor", {}).get("idle", {}), policy="spin_then_wait")
    idle.pop("idle_loops", None)
    idle.pop("max_sleep_us", None)
    idle["spin_us"] = int(os.environ.get("TARGET_SPIN_US", idle.get("spin_us", 50)))
    if "TARGET_MAX_SPIN_US" in os.environ:
        idle["max_spin_us"] = int(os.environ["TARGET_MAX_SPIN_US"])
    elif "TARGET_SPIN_US" in os.environ:
        idle["max_spin_us"] = 0
    idle["max_wait_ms"] = int(os.environ.get("TARGET_MAX_WAIT_MS", idle.get("max_wait_ms", 1000)))
    idle.setdefault("fallback_sleep_us", 100)
    cfg.setdefault("reactor", {})["idle"] = idle
if "TARGET_IDLE_LOOPS" in os.environ or "TARGET_MAX_SLEEP_US" in os.environ:
    cfg.setdefault("reactor", {})["idle"] = {
        "policy": "spin_then_sleep",
        "idle_loops": int(os.environ.get("TARGET_IDLE_LOOPS", "1000")),
        "max_sleep_us": int(os.environ.get("TARGET_MAX_SLEEP_US", "1000")),
    }
# TARGET_PIN_THREADS=1 (or 0): the cores pinned to their CPUs (or floating)
# whatever the base file says (configs/cores.json pins them; docs/CONFIG.md)
if os.environ.get("TARGET_PIN_THREADS") in ("0", "1"):
    cfg.setdefault("reactor", {})["pin_threads"] = os.environ["TARGET_PIN_THREADS"] == "1"
# TARGET_MOVE_WHEN_CROWDED=0 (or 1): reactor.move_when_crowded off (or on)
# whatever the base file says (on by default; docs/CONFIG.md)
if os.environ.get("TARGET_MOVE_WHEN_CROWDED") in ("0", "1"):
    cfg.setdefault("reactor", {})["move_when_crowded"] = os.environ["TARGET_MOVE_WHEN_CROWDED"] == "1"
# a per-core cache may not exceed count / cores
for pool in cfg["pools"]:
    pool["per_core_cache"] = min(pool["per_core_cache"], pool["count"] // len(cfg["cores"]))
json.dump(cfg, sys.stdout, indent=2)
print()
