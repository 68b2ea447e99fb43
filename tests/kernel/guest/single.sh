#!/usr/bin/env bash
# tests/kernel/guest/single.sh — the one-guest part of the kernel-interop
# test (run by tests/kernel/run.sh through softroce-vm.sh run, the stage
# directory shared at /host):
#   1. dissects the capture of the two-guest run, if there is one (tshark.sh);
#   2. the fabric floor (floor.sh: perftest ib_send_lat / ib_read_lat);
#   3. for each server in $SERVERS ("kernel ours"), one after the other since
#      they share ports: start it, the functional workload (functional.sh),
#      the fio matrix (fio.sh) and the perf tool (perf.sh), stop it;
#   4. the side-by-side table (report.py) into $OUT/table.txt;
#   5. the ratio rows once more with both servers up at once, pair by pair
#      (paired.sh, KINTEROP_PAIRS pairs, default 3): $OUT/paired-medians.txt.
# Exits non-zero when any check failed. Settings come from /host/env.sh.
# RATIOS_ONLY=1 runs only the fio matrix and the perf tool (the ratio rows):
# no capture dissection, floor, functional or POSIX workload. SERVERS may
# name a server twice ("kernel-2") and variants of ours ("ours-NAME", NAME
# of letters, digits and _): such a variant runs with the assignments of
# $VARIANT_NAME (space separated, e.g. "TARGET_IO_CPU=0 RPCRDMA_WAIT=ppoll")
# in its environment, and gets its own table against the kernel's server
# (table-ours-NAME.txt), so that configurations are compared in one boot.
# ROUNDS=N (KINTEROP_ROUNDS) runs the whole SERVERS list N times in turn,
# round r's passes named "NAME.rR" (the first round's as given), and prints
# the median ratios over the rounds (medians.py) into $OUT/medians.txt.
# KINTEROP_SYSCALLS=1: after each pass of ours (first round only), the
# system calls per Call at qd 1 (syscalls.sh, strace -c).
set -uo pipefail
G=$(cd "$(dirname "$0")" && pwd)
export OUT=/host/out BIN=/host/bin
[ -f /host/env.sh ] && . /host/env.sh
: "${SERVERS:=kernel ours}" "${SECTION_TIMEOUT:=1500}"
export BIG_MIB FIO_SECONDS PERF_SECONDS
. "$G/lib.sh"
. "$G/servers.sh"
mkdir -p "$OUT/kernel" "$OUT/ours" "$OUT/floor"
SRC=$VMLAB_IP:/export
note "guest: kernel $(uname -r), $(nproc) CPUs, $(free -m | awk '/^Mem:/ {print $2}') MiB, $(rdma link show | head -1)"

# section NAME SCRIPT ARGS... : a guest script under a time limit; a hung
# NFS client is killable (hard mounts wait in TASK_KILLABLE).
section() {
    local name=$1 t rc=0
    shift
    t=$(now)
    timeout -s KILL "$SECTION_TIMEOUT" bash "$@" || rc=$?
    [ $rc = 137 ] && flunk "$name: killed after $SECTION_TIMEOUT s"
    note "section $name: $(elapsed "$t") s (exit $rc)"
    echo "$name $(elapsed "$t")" >>"$OUT/timings.txt"
}

RATIOS_ONLY=${RATIOS_ONLY:-0}
if [ -n "${PAIR_PCAP:-}" ] && [ "$RATIOS_ONLY" != 1 ]; then
    section "tshark" "$G/tshark.sh" "$OUT/$PAIR_PCAP" 10.0.2.15 pair
fi
[ "$RATIOS_ONLY" = 1 ] || section floor "$G/floor.sh"

ROUNDS=${KINTEROP_ROUNDS:-1}
passes=()
for ((r = 1; r <= ROUNDS; r++)); do
    for s in $SERVERS; do
        if [ $r = 1 ]; then passes+=("$s"); else passes+=("$s.r$r"); fi
    done
done
# KINTEROP_PAIRED_ONLY=1 (with RATIOS_ONLY): no passes, the paired rows only
[ "${KINTEROP_PAIRED_ONLY:-0}" = 1 ] && [ "$RATIOS_ONLY" = 1 ] && passes=()
for s in "${passes[@]}"; do
    variant=()
    base=${s%.r[0-9]*}
    case $base in
    kernel | kernel-[0-9])
        start=knfsd_start stop=knfsd_stop
        unset MOUNT_PORT # the kernel's mountd is found through rpcbind
        ;;
    ours | ours-[a-z0-9_]*)
        start=ours_start stop=ours_stop
        unset MOUNT_PORT # ours registers with the rpcbind knfsd's start left running
        export OURS_TAG=$s
        if [ "$base" != ours ]; then
            vname=VARIANT_${base#ours-}
            read -ra variant <<<"${!vname:-}"
            note "$s: variant of ours with: ${variant[*]}"
        fi
        ;;
    *)
        flunk "unknown server '$s' in SERVERS"
        continue
        ;;
    esac
    mkdir -p "$OUT/$s"
    for kv in "${variant[@]}"; do export "${kv?}"; done
    dmesg -C
    # what shares the guest's vCPUs during this server's part (every 30 s, over 5 s)
    python3 "$G/cpu_sample.py" 30 5 >"$OUT/$s/cpu.txt" 2>&1 &
    sampler=$!
    if $start; then
        if [ "$RATIOS_ONLY" != 1 ]; then
            section "$s-functional" "$G/functional.sh" "$SRC" "$s"
            section "$s-posix" "$G/posix.sh" "$SRC" "$s"
        fi
        section "$s-fio" "$G/fio.sh" "$SRC" "$s"
        # The client crowding the io core's CPU: the core moves (issue 24).
        [[ $s == ours && $RATIOS_ONLY != 1 ]] && section "$s-crowd" "$G/crowd.sh" "$SRC" "$s" "$TARGET_PID"
        # The same matrix over NFS/TCP, for RDMA against TCP (issue 24 part 2).
        [ "${KINTEROP_FIO_TCP:-0}" = 1 ] && section "$s-fio-tcp" "$G/fio.sh" "$SRC" "$s" tcp
        # Many connections from one client (issue 24 item 4), on request.
        [ "${KINTEROP_NCONNECT:-0}" = 1 ] && section "$s-nconnect" "$G/nconnect.sh" "$SRC" "$s"
        if [ -x "$BIN/perf" ]; then
            section "$s-perf" "$G/perf.sh" "$s"
        elif [ -e "$BIN/rpcrdma-target" ]; then
            flunk "$s: the perf tool is not staged ($BIN/perf)"
        else
            note "$s: perf tool runs skipped (no binaries staged: KINTEROP_SERVERS without ours)"
        fi
        if [[ $s == ours* && $s == "$base" && ${KINTEROP_SYSCALLS:-0} = 1 ]]; then
            section "$s-syscalls" "$G/syscalls.sh" "$s" "$TARGET_PID"
        fi
        mountpoint -q "/mnt/$s" && { umount -f "/mnt/$s" || umount -l "/mnt/$s"; }
    fi
    $stop
    for kv in "${variant[@]}"; do unset "${kv%%=*}"; done
    kill "$sampler" 2>/dev/null
    wait "$sampler" 2>/dev/null
    dmesg >"$OUT/$s/dmesg.txt"
    # A Call the server never answered shows in the client's log even when
    # every command finally succeeded (the client retransmits after a
    # reconnect): RPC time-outs and tasks blocked in writeback.
    stalls=$(grep -cE 'not responding|blocked for more than' "$OUT/$s/dmesg.txt")
    if [[ $s == ours* ]]; then
        check_eq "$s: the client's dmesg has no 'not responding' or 'blocked for more than'" "$stalls" 0
    else
        note "$s: the client's dmesg lines with 'not responding' or 'blocked for more than': $stalls"
    fi
    grep -E 'not responding|blocked for more than|still trying|server .* OK' "$OUT/$s/dmesg.txt" | head -5
done

# the ratio rows again with both servers up at once, pair by pair
# (paired.sh; KINTEROP_PAIRS pairs, default 3, 0 for none): the figures the
# emulator's drift moves least
if [ "${KINTEROP_PAIRS:-3}" -gt 0 ] && [[ " $SERVERS " == *" kernel "* && " $SERVERS " == *" ours "* ]] &&
    [ -x "$BIN/rpcrdma-target" ]; then
    section paired "$G/paired.sh"
fi

# both servers' functional step times side by side, one check per step
if [[ " $SERVERS " == *" kernel "* && " $SERVERS " == *" ours "* && $RATIOS_ONLY != 1 ]]; then
    python3 "$G/compare_steps.py" "$OUT"
fi

# the POSIX cases: no case the kernel's server passes may fail on ours
if [[ " $SERVERS " == *" kernel "* && " $SERVERS " == *" ours "* && $RATIOS_ONLY != 1 ]]; then
    python3 "$G/compare_posix.py" "$OUT"
fi

python3 "$G/report.py" "$OUT" | tee "$OUT/table.txt"
if [ "$ROUNDS" -gt 1 ]; then
    python3 "$G/medians.py" "$OUT" "${passes[@]}" | tee "$OUT/medians.txt"
fi
# every other pairing of a kernel pass with a pass of ours (or a variant)
# (the first round's)
for k in $SERVERS; do
    [[ $k == kernel* ]] || continue
    for o in $SERVERS; do
        [[ $o == ours* ]] || continue
        [ "$k $o" = "kernel ours" ] && continue
        python3 "$G/report.py" "$OUT" "$k" "$o" >"$OUT/table-$k-$o.txt"
        note "$k against $o: $(grep '^ratios' "$OUT/table-$k-$o.txt")"
    done
done
n_ok=$(grep -c '^ok' "$CHECKS")
n_bad=$(grep -c '^not ok' "$CHECKS")
note "guest checks: $n_ok ok, $n_bad not ok"
[ "$n_bad" = 0 ]
