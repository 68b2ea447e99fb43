#!/usr/bin/env bash
# tests/kernel/nfs4.sh — the Linux kernel's NFS client against rpcrdma-target
# with NFSv4.1 and NFSv4.2, over TCP and over RDMA (Soft-RoCE), in one
# Debian 12 guest (the VM tool of tests/kernel/run.sh). Quicker than run.sh:
# builds rpcrdma-target (release), stages it with the guest scripts under
# target/kernel-vm-nfs4 and runs tests/kernel/guest/nfs4.sh there; prints
# every failed check and, as its last line, "kernel-nfs4: PASS" when all held.
# Exit status: 0 pass, 1 a check failed, 3 the VM could not be had.
# Before the one-guest run, unless NFS4_STEPS leaves out "tshark", a
# two-guest run (softroce-vm.sh pair -p, tests/kernel/guest/pair.sh with
# NFS_VERS=4.2 PAIR_TCP=1) captures the wire for tshark4.sh; when it
# names "deleg" (not by default: about 12 minutes under TCG), another
# two-guest run (tests/kernel/guest/deleg.sh:
# client A in the second guest holds a read delegation, client B in the
# server's guest writes, vers=4.2 then vers=3; $NFS4_DELEG_ROUNDS recalls
# timed; then A writes under a write delegation and B reads, vers=4.2 then
# vers=3) captures the recalls for tshark_cb.sh. The recall-to-DELEGRETURN
# time and the delegations on/off figures are printed at the end.
# Env: NFS4_MOUNTS ("4.1/tcp 4.1/rdma 4.2/rdma 4.2/tcp default/rdma default/tcp";
#      "default": no vers= option, which must land on 4.2), NFS4_BACKENDS
#      ("mem uring": the target's backend, each in turn), NFS4_STEPS
#      ("matrix tshark restart locks nconnect"; add "paired" for the
#      comparison with the Linux server up beside ours, pair by pair, about
#      3 minutes a pair, "fio" for the comparison
#      with the Linux server, about 4 minutes a round, "perop" for the RPCs
#      and target system calls per 4 KiB qd-1 fio op, vers=3 against
#      vers=4.2 (guest/nfs4_perop.sh, about 4 minutes a round), and "deleg" for
#      delegations recalled over RDMA and their figures; see guest/nfs4.sh),
#      NFS4_FIO_ROUNDS (1: rounds of the fio step; in one boot the two
#      servers alternate, the pair's order flipping each round, and the table
#      gives per-row medians, ratios of medians, every round's ratio and the
#      Linux server's spread over its own rounds as the noise floor; use 3 or
#      more for a figure), NFS4_FIO_SECONDS (5: each fio job and perf run),
#      NFS4_FIO_PERF (1; 0: the fio step runs fio only, no perf rows),
#      NFS4_FIO_BACKEND (mem: ours' backend in the fio step; the Linux
#      server's export is a tmpfs), NFS4_SPIN_US (5000: ours once more with
#      cores spinning that long before they block, qd-1 rows; 0: skip),
#      NFS4_RESTART_FILES (16: 4 MiB files of the restart step's writer),
#      NFS4_PEROP_ROUNDS (1: rounds of the perop step, alternating),
#      NFS4_PEROP_BACKEND (the perop step's backends, else NFS4_FIO_BACKEND's),
#      NFS4_PEROP_STRACE (1; 0: none; stack: strace -k), NFS4_PEROP_NODELEG,
#      NFS4_PEROP_HOSTSCHED (1: the host's scheduler counters of the QEMU
#      threads during the jobs, tests/kernel/hostsched.sh),
#      NFS4_PEROP_RESTART, NFS4_PEROP_TRACE, NFS4_PEROP_VARIANT (see
#      guest/nfs4_perop.sh),
#      NFS4_URING_TMPFS (1: ours'
#      uring tree on a tmpfs, as the Linux server's export; else the disk),
#      NFS4_BASELINE_BIN (a directory holding another build's
#      rpcrdma-target: the perop step runs it too, as server "base", for a
#      before/after in one boot),
#      NFS4_DELEG_ROUNDS (40: recalls timed by the deleg step),
#      NFS4_DELEG_FIO_SECONDS (10: each job of the delegations on/off figures),
#      NFS4_DELEG_FIO_PAIRS (3: on/off pairs of those figures, in one boot),
#      NFS4_PAIRS (3: pairs of the paired step),
#      NFS4_PREBUILT (1: no build, the release binaries staged as they are),
#      SOFTROCE_VM, VMLAB_CACHE, CARGO_TARGET_DIR. Run under the shared VM lock:
#      flock /tmp/rpcrdma-vm.lock bash tests/kernel/nfs4.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
STAGE=$ROOT/target/kernel-vm-nfs4
BUILD_DIR=${CARGO_TARGET_DIR:-$ROOT/target}/release
unavailable() {
    echo "kernel-nfs4: VM UNAVAILABLE: $*"
    exit 3
}
# The VM tool and its image (built here when missing, so this suite runs
# alone on a fresh machine).
. tests/lib/vm.sh
vm_locate
# NFS4_PREBUILT=1: stage the release binaries as they are (built before the
# VM lock was taken), without building.
if [ -z "${NFS4_PREBUILT:-}" ]; then
    bash scripts/build-deps.sh
    cargo build --release --quiet -p rpcrdma-apps --bin rpcrdma-target -p rpcrdma-perf --bin perf
fi
rm -rf "$STAGE"
mkdir -p "$STAGE/bin" "$STAGE/out"
cp -r tests/kernel/guest "$STAGE/guest"
cp configs/cores.json "$STAGE/bin/cores.json"
cp "$BUILD_DIR/rpcrdma-target" "$BUILD_DIR/perf" "$STAGE/bin/"
if [ -n "${NFS4_BASELINE_BIN:-}" ]; then
    # another build of the target, the perop step's "base" server
    mkdir -p "$STAGE/bin/base"
    cp "$NFS4_BASELINE_BIN/rpcrdma-target" "$STAGE/bin/base/"
fi
echo "NFS4_MOUNTS='${NFS4_MOUNTS:-4.1/tcp 4.1/rdma 4.2/rdma 4.2/tcp default/rdma default/tcp}'" >"$STAGE/env.sh"
STEPS=${NFS4_STEPS:-matrix tshark restart locks nconnect}
{
    echo "NFS4_BACKENDS='${NFS4_BACKENDS:-mem uring}'"
    echo "NFS4_STEPS='$STEPS'"
    echo "NFS4_FIO_ROUNDS=${NFS4_FIO_ROUNDS:-1}"
    echo "export FIO_SECONDS=${NFS4_FIO_SECONDS:-5} PERF_SECONDS=${NFS4_FIO_SECONDS:-5}"
    echo "export NFS4_FIO_PERF=${NFS4_FIO_PERF:-1} NFS4_FIO_BACKEND='${NFS4_FIO_BACKEND:-mem}' NFS4_SPIN_US=${NFS4_SPIN_US:-5000}"
    echo "export NFS4_RESTART_FILES=${NFS4_RESTART_FILES:-16} NFS4_PEROP_ROUNDS=${NFS4_PEROP_ROUNDS:-1} NFS4_PEROP_STRACE=${NFS4_PEROP_STRACE:-1} NFS4_PEROP_BACKEND='${NFS4_PEROP_BACKEND:-}' NFS4_PEROP_NODELEG=${NFS4_PEROP_NODELEG:-0} NFS4_PEROP_RESTART=${NFS4_PEROP_RESTART:-0} NFS4_PEROP_TRACE=${NFS4_PEROP_TRACE:-0} NFS4_PEROP_VARIANT='${NFS4_PEROP_VARIANT:-}' TARGET_URING_TMPFS=${NFS4_URING_TMPFS:-0}"
    echo "export DELEG_FIO_SECONDS=${NFS4_DELEG_FIO_SECONDS:-10} DELEG_FIO_PAIRS=${NFS4_DELEG_FIO_PAIRS:-3} NFS4_PAIRS=${NFS4_PAIRS:-3}"
} >>"$STAGE/env.sh"
pair_rc=0
if [[ " $STEPS " == *" tshark "* ]]; then
    # the wire between two guests: NFSv4.2 over RDMA, then over TCP
    printf '#!/bin/sh\nPAIR_SERVER=ours exec bash /host/guest/pair.sh server\n' >"$STAGE/pair-server.sh"
    printf '#!/bin/sh\nNFS_VERS=4.2 PAIR_TCP=1 PAIR_SERVER=ours exec bash /host/guest/pair.sh client\n' >"$STAGE/pair-client.sh"
    bash "$VM" pair -c 2 -s "$STAGE" -p "$STAGE/out/pair4.pcap" "$STAGE/pair-server.sh" "$STAGE/pair-client.sh" 2>&1 |
        tr -d '\r' >"$STAGE/pair.log" || pair_rc=${PIPESTATUS[0]}
    grep -hE "^(not )?ok" "$STAGE"/out/pair-*/checks.txt 2>/dev/null
    [ -s "$STAGE/out/pair-client/checks.txt" ] || unavailable "the client guest of the pair never ran its script (log: $STAGE/pair.log)"
    echo "PAIR_PCAP=pair4.pcap" >>"$STAGE/env.sh"
fi
deleg_rc=0
if [[ " $STEPS " == *" deleg "* ]]; then
    # two kernel clients, A (second guest, over the wire) and B (the
    # server's guest); the recalls to A are captured
    for role in server client; do
        printf '#!/bin/sh\nDELEG_ROUNDS=%s exec bash /host/guest/deleg.sh %s\n' "${NFS4_DELEG_ROUNDS:-40}" $role >"$STAGE/deleg-$role.sh"
    done
    bash "$VM" pair -c 2 -s "$STAGE" -p "$STAGE/out/deleg.pcap" "$STAGE/deleg-server.sh" "$STAGE/deleg-client.sh" 2>&1 |
        tr -d '\r' >"$STAGE/deleg.log" || deleg_rc=${PIPESTATUS[0]}
    grep -hE "^(not )?ok" "$STAGE"/out/deleg-*/checks.txt 2>/dev/null || true
    [ -s "$STAGE/out/deleg-client/checks.txt" ] || unavailable "the client guest of the deleg pair never ran its script (log: $STAGE/deleg.log)"
    echo "DELEG_PCAP=deleg.pcap" >>"$STAGE/env.sh"
fi
printf '#!/bin/sh\nexec bash /host/guest/nfs4.sh\n' >"$STAGE/nfs4.sh"
rc=0
# NFS4_PEROP_HOSTSCHED=1: the host's scheduler counters of every QEMU thread
# while the guest runs (tests/kernel/hostsched.sh), read with the perop
# jobs' times by perop_cpu.py below
hs_pid=
if [ "${NFS4_PEROP_HOSTSCHED:-0}" = 1 ]; then
    bash tests/kernel/hostsched.sh "$STAGE/hostsched.txt" &
    hs_pid=$!
fi
bash "$VM" run -m 3072 -s "$STAGE" -f "$STAGE/nfs4.sh" 2>&1 | tr -d '\r' | tee "$STAGE/nfs4.log" || rc=${PIPESTATUS[0]}
if [ -n "$hs_pid" ]; then
    kill "$hs_pid" 2>/dev/null || true
    wait "$hs_pid" 2>/dev/null || true
    [ -d "$STAGE/out/perop" ] && python3 tests/kernel/guest/perop_cpu.py "$STAGE/out/perop" "$STAGE/hostsched.txt" >"$STAGE/out/perop/cpu-host.txt"
fi
grep -q 'vmlab-init: ready' "$STAGE/nfs4.log" || { echo "kernel-nfs4: VM UNAVAILABLE: no guest came up"; exit 3; }
checks=$STAGE/all-checks.txt
cat "$STAGE"/out/checks.txt "$STAGE"/out/pair-*/checks.txt "$STAGE"/out/deleg-*/checks.txt 2>/dev/null >"$checks" || true
[ -f "$STAGE/out/v42/table.txt" ] && cat "$STAGE/out/v42/table.txt"
[ -f "$STAGE/out/paired-v42-medians.txt" ] && cat "$STAGE/out/paired-v42-medians.txt"
[ -f "$STAGE/out/perop/table.txt" ] && cat "$STAGE/out/perop/table.txt"
[ -f "$STAGE/out/perop/cpu-host.txt" ] && cat "$STAGE/out/perop/cpu-host.txt"
for f in "$STAGE/out/deleg-server/recall-latency.txt" "$STAGE/out/ours/deleg-fio.txt"; do
    [ -f "$f" ] && sed "s/^/deleg figures: /" "$f"
done
echo "checks: $(grep -c '^ok' "$checks" || true) ok, $(grep -c '^not ok' "$checks" || true) not ok"
grep '^not ok' "$checks" || true
# every step asked for must have reported
need=()
[[ " $STEPS " == *" matrix "* ]] && need+=("mount ")
[[ " $STEPS " == *" tshark "* ]] && need+=("pair: umount" "pair tcp: umount" "pair4: malformed frames")
[[ " $STEPS " == *" deleg "* ]] && need+=("deleg: A reads B's vers=4.2 write" "deleg: A reads B's vers=3 write"
    "deleg: ${NFS4_DELEG_ROUNDS:-40} rounds: A returned" "deleg-pcap: malformed frames" "deleg-pcap: CB_COMPOUND with CB_RECALL"
    "deleg fio: GETATTR" "deleg open-read-close: GETATTR"
    "deleg write: B reads exactly what A wrote under its write delegation, vers=4.2"
    "deleg write: B reads exactly what A wrote under its write delegation, vers=3")
[[ " $STEPS " == *" restart "* ]] && need+=("restart vers=4.2 rdma: all ")
[[ " $STEPS " == *" locks "* ]] && need+=("locks vers=4.1 rdma: as many cases" "locks vers=4.2 rdma: as many cases")
[[ " $STEPS " == *" nconnect "* ]] && need+=("nconnect=4 vers=4.1 rdma: every transport" "nconnect=4 vers=4.2 rdma: every transport"
    "nconnect=4 vers=4.1 tcp: every transport" "nconnect=4 vers=4.2 tcp: every transport")
[[ " $STEPS " == *" fio "* ]] && need+=("kernel: fio seq-write-1m-qd4" "ours: fio seq-write-1m-qd4")
missing=0
for n in "${need[@]}"; do
    grep -qE "^(not )?ok - $n" "$checks" || { echo "no result for '$n'"; missing=1; }
done
[ "$rc" = 0 ] && [ "$pair_rc" = 0 ] && [ "$deleg_rc" = 0 ] && [ $missing = 0 ] && ! grep -q '^not ok' "$checks" ||
    { echo "kernel-nfs4: FAIL (guest exit $rc, pair exit $pair_rc, deleg pair exit $deleg_rc)"; exit 1; }
echo "kernel-nfs4: PASS"
