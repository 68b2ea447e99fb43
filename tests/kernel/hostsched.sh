#!/usr/bin/env bash
# tests/kernel/hostsched.sh OUT: on the host, every 0.2 s, append each QEMU
# thread's scheduler counters (/proc/<pid>/task/<tid>/schedstat: ns run, ns
# waiting runnable, time slices) to OUT as "time tid comm run wait slices",
# until killed. tests/kernel/nfs4.sh runs it while the VM runs when
# NFS4_PEROP_HOSTSCHED=1; tests/kernel/guest/perop_cpu.py reads it.
set -u
out=${1:?usage: hostsched.sh OUT}
: >"$out"
while :; do
    for p in $(pgrep -f 'qemu-system-x86_64'); do
        t=$(date +%s.%N)
        for d in /proc/"$p"/task/*; do
            read -r run wait slices <"$d/schedstat" 2>/dev/null || continue
            echo "$t ${d##*/} $(tr ' ' '_' <"$d/comm") $run $wait $slices"
        done
    done >>"$out"
    sleep 0.2
done
