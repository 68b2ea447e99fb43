#!/usr/bin/env bash
# scripts/hostile-tcp.sh [RUNS] — issue 20 items 15 and 16 measured on the real
# rpcrdma-target (release build, shm fabric, mem backend) over loopback TCP.
#
# Each run starts a fresh target and measures, with its own Python client
# (ONC RPC over TCP, record marking, AUTH_SYS; no NFS client needed):
#   mount_quiet_ms    a new client's MNT (MOUNT v3), then on the NFS port NULL
#                     and a 4 KiB READ, with no other connection open;
#   mount_hostile_ms  the same while HOSTILE_PER_PORT connections are held on
#                     each of the MOUNT and NFS ports (half idle, half slow:
#                     one byte every 100 ms, a 256-byte record that never
#                     completes in time), all opened before the client comes;
#   stop_quiet_ms     SIGTERM to process exit, no client connected;
#   stop_stalled_ms   SIGTERM to process exit with a client stalled mid-record
#                     (the mark of a 1000-byte record and 500 bytes of it).
# The target runs with the default listeners.tcp limits (max_conns 64, idle
# 300 s, record 30 s, write 30 s, shutdown grace 2 s: docs/CONFIG.md), so
# nothing here is freed by a timeout: room is made by evicting the idlest.
# Prints each run and the medians. Environment: HOSTILE_PER_PORT (default
# 128), CARGO_TARGET_DIR, NO_BUILD=1 (use the binary already built).
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-3}
case $RUNS in '' | *[!0-9]*) echo "usage: scripts/hostile-tcp.sh [RUNS]" >&2; exit 2 ;; esac
TDIR=${CARGO_TARGET_DIR:-target}
command -v python3 >/dev/null || { apt-get update -qq && apt-get install -y -qq python3 >/dev/null; }
if [ "${NO_BUILD:-0}" != 1 ]; then
    bash scripts/build-deps.sh
    cargo build --release -p rpcrdma-apps --bin rpcrdma-target
fi
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
python3 - "$TDIR/release/rpcrdma-target" "$WORK" "$RUNS" "${HOSTILE_PER_PORT:-128}" <<'PY'
import json, os, random, signal, socket, statistics, struct, subprocess, sys, threading, time

target, work, runs, hostile = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
MOUNT_PROG, NFS_PROG = 100005, 100003

def config(run):
    c = json.load(open("configs/cores.json"))
    port = random.randint(30000, 60000)
    c["listeners"]["nfs_tcp_port"] = port
    c["listeners"]["mount_tcp_port"] = port + 1
    c["listeners"]["rpcbind"] = {"mode": "off"}
    c["listeners"]["stats_socket"] = os.path.join(work, f"stats{run}.sock")
    c["fabric"]["socket_path"] = os.path.join(work, f"fabric{run}.sock")
    path = os.path.join(work, f"target{run}.json")
    json.dump(c, open(path, "w"))
    return path, port, port + 1

class Rpc:
    """One TCP connection carrying ONC RPC Calls (RFC 5531) as root."""
    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=60)
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.xid = random.getrandbits(32)
    def call(self, prog, vers, proc, args=b""):
        self.xid = (self.xid + 1) & 0xFFFFFFFF
        cred = struct.pack(">II", 0, 4) + b"host" + struct.pack(">III", 0, 0, 0)
        m = struct.pack(">IIIIII", self.xid, 0, 2, prog, vers, proc)
        m += struct.pack(">II", 1, len(cred)) + cred + struct.pack(">II", 0, 0) + args
        self.s.sendall(struct.pack(">I", 0x80000000 | len(m)) + m)
        rec = b""
        while True:
            mark, = struct.unpack(">I", self.recv(4))
            rec += self.recv(mark & 0x7FFFFFFF)
            if mark & 0x80000000:
                break
        xid, mtype, stat = struct.unpack(">III", rec[:12])
        assert (xid, mtype, stat) == (self.xid, 1, 0), (xid, mtype, stat)
        vlen, = struct.unpack(">I", rec[16:20])
        at = 20 + (vlen + 3) // 4 * 4
        accept, = struct.unpack(">I", rec[at:at + 4])
        assert accept == 0, f"accept_stat {accept}"
        return rec[at + 4:]
    def recv(self, n):
        b = b""
        while len(b) < n:
            k = self.s.recv(n - len(b))
            if not k:
                raise ConnectionError("closed by the target")
            b += k
        return b
    def close(self):
        self.s.close()

def opaque(b):
    return struct.pack(">I", len(b)) + b + b"\0" * (-len(b) % 4)

def mnt(port):
    c = Rpc(port)
    r = c.call(MOUNT_PROG, 3, 1, opaque(b"/export"))
    c.close()
    st, n = struct.unpack(">II", r[:8])
    assert st == 0, f"MNT status {st}"
    return r[8:8 + n]

def create_file(nfs, root, data):
    sattr = struct.pack(">IIIIII", 0, 0, 0, 0, 0, 0)
    r = nfs.call(NFS_PROG, 3, 8, opaque(root) + opaque(b"f") + struct.pack(">I", 0) + sattr)
    st, follows, n = struct.unpack(">III", r[:12])
    assert st == 0 and follows == 1, f"CREATE status {st}"
    fh = r[12:12 + n]
    r = nfs.call(NFS_PROG, 3, 7, opaque(fh) + struct.pack(">QII", 0, len(data), 2) + opaque(data))
    assert struct.unpack(">I", r[:4])[0] == 0, "WRITE"
    return fh

def read4k(nfs, fh, data):
    r = nfs.call(NFS_PROG, 3, 6, opaque(fh) + struct.pack(">QI", 0, len(data)))
    st, follows = struct.unpack(">II", r[:8])
    assert st == 0, f"READ status {st}"
    at = 8 + (84 if follows else 0)
    count, eof, n = struct.unpack(">III", r[at:at + 12])
    assert r[at + 12:at + 12 + n] == data, "READ data"

def new_client(mport, nport, fh, data):
    """MNT, then NULL and READ on a new NFS connection: seconds taken."""
    t0 = time.monotonic()
    mnt(mport)
    c = Rpc(nport)
    c.call(NFS_PROG, 3, 0)
    read4k(c, fh, data)
    took = time.monotonic() - t0
    c.close()
    return took

def start(run):
    path, nport, mport = config(run)
    log = open(os.path.join(work, f"target{run}.log"), "w")
    p = subprocess.Popen([target, "-c", path], stdout=log, stderr=subprocess.STDOUT)
    for _ in range(300):
        try:
            socket.create_connection(("127.0.0.1", mport), timeout=1).close()
            socket.create_connection(("127.0.0.1", nport), timeout=1).close()
            return p, nport, mport
        except OSError:
            if p.poll() is not None:
                sys.exit(open(os.path.join(work, f"target{run}.log")).read() + "\nrpcrdma-target exited")
            time.sleep(0.1)
    sys.exit("the target's TCP ports never opened")

def stop(p):
    t0 = time.monotonic()
    p.send_signal(signal.SIGTERM)
    rc = p.wait(timeout=120)
    assert rc == 0, f"rpcrdma-target exit {rc}"
    return time.monotonic() - t0

rows = []
for run in range(runs):
    p, nport, mport = start(run)
    data = os.urandom(4096)
    root = mnt(mport)
    setup = Rpc(nport)
    fh = create_file(setup, root, data)
    setup.close()
    quiet = new_client(mport, nport, fh, data)
    # Hostile connections: idle and slow alternately, on both ports.
    idle, slow = [], []
    for port in (mport, nport):
        for i in range(hostile):
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            (idle if i % 2 == 0 else slow).append(s)
    halt = threading.Event()
    def feed():
        rec = struct.pack(">I", 0x80000000 | 256) + b"\0" * 256
        k = 0
        while not halt.is_set():
            for s in slow:
                try:
                    s.send(rec[k % len(rec):k % len(rec) + 1])
                except OSError:
                    pass
            k += 1
            time.sleep(0.1)
    feeder = threading.Thread(target=feed)
    feeder.start()
    time.sleep(0.3)
    hostile_s = new_client(mport, nport, fh, data)
    halt.set()
    feeder.join()
    for s in idle + slow:
        s.close()
    stop(p)
    # Shutdown with a client stalled mid-record, and without any client.
    p, nport, mport = start(run + 1000)
    st = socket.create_connection(("127.0.0.1", nport))
    st.sendall(struct.pack(">I", 0x80000000 | 1000) + b"\0" * 500)
    time.sleep(0.3)
    stop_stalled = stop(p)
    st.close()
    p, _, _ = start(run + 2000)
    time.sleep(0.3)
    stop_quiet = stop(p)
    row = [quiet * 1e3, hostile_s * 1e3, stop_quiet * 1e3, stop_stalled * 1e3]
    rows.append(row)
    print(f"run {run + 1}: mount_quiet_ms {row[0]:.1f} mount_hostile_ms {row[1]:.1f} "
          f"stop_quiet_ms {row[2]:.0f} stop_stalled_ms {row[3]:.0f}", flush=True)

med = [statistics.median(r[k] for r in rows) for k in range(4)]
print(f"median of {runs} ({hostile} hostile connections per port, half idle, half 1 byte/100 ms):")
print(f"  new client MNT+NULL+READ 4 KiB: quiet {med[0]:.1f} ms, hostile {med[1]:.1f} ms "
      f"(x{med[1] / med[0]:.2f})")
print(f"  SIGTERM to exit: quiet {med[2]:.0f} ms, client stalled mid-record {med[3]:.0f} ms")
PY
