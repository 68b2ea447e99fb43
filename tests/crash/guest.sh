# Guest script of tests/crash/run.sh (one boot): two ext4 disks, one per
# export (`sync`, the default, and `async`), the same changes made on both
# through the kernel's NFS client, the facts each reply acknowledged written
# to the host, then the power cut. The host checks the disks afterwards.
disk_of() {   # disk_of SERIAL: the namespace of the controller with that serial
    for c in /sys/class/nvme/nvme*; do
        [ "$(tr -d ' ' < "$c/serial")" = "$1" ] && { echo "/dev/$(basename "$c")n1"; return 0; }
    done
    return 1
}
modprobe nvme || exit 1
i=0
until [ -b "$(disk_of crashsync)" ] && [ -b "$(disk_of crashasync)" ]; do
    i=$((i + 1))
    [ $i -gt 120 ] && { echo "guest: NVMe namespaces did not appear"; exit 1; }
    sleep 0.5
done
for e in sync async; do
    dev=$(disk_of "crash$e")
    mkfs.ext4 -q -F "$dev" || exit 1
    mkdir -p "/srv/$e" "/mnt/$e"
    # commit=600: the journal's own timer commits nothing during the test,
    # so only the server's fsyncs make a change durable.
    mount -o commit=600 "$dev" "/srv/$e" || exit 1
    mkdir -p "/srv/$e/export"
done
sync
cat > /tmp/cores.json <<JSON
{
  "cores": [ { "cpu": 0, "role": "admin" }, { "cpu": 1, "role": "io" } ],
  "listeners": { "fabric": [ { "address": "127.0.0.1", "port": 20049, "versions": [1, 2] } ],
                 "nfs_tcp_port": 2049, "mount_tcp_port": 20048 },
  "fabric": { "provider": "shm", "socket_path": "/tmp/fabric.sock" },
  "pools": [
    { "name": "recv", "usage": "receive", "buffer_size_bytes": 4096, "count": 256, "page_size": "4K", "per_core_cache": 16 },
    { "name": "send", "usage": "send", "buffer_size_bytes": 4096, "count": 256, "page_size": "4K", "per_core_cache": 16 },
    { "name": "data", "usage": "data", "buffer_size_bytes": 1048576, "count": 16, "page_size": "4K", "per_core_cache": 2 }
  ],
  "credits": { "max_per_connection": 32 },
  "backends": [ { "name": "sync", "type": "uring", "path": "/srv/sync/export", "queue_depth": 64 },
                { "name": "async", "type": "uring", "path": "/srv/async/export", "queue_depth": 64 } ],
  "exports": [ { "path": "/sync", "backend": "sync", "clients": ["127.0.0.0/8"], "root_squash": false },
               { "path": "/async", "backend": "async", "clients": ["127.0.0.0/8"], "root_squash": false,
                 "async": true } ]
}
JSON
/host/rpcrdma-target -c /tmp/cores.json > /tmp/target.log 2>&1 &
for e in sync async; do
    i=0
    until mount -t nfs -o vers=3,proto=tcp,port=2049,mountport=20048,mountproto=tcp,nolock,actimeo=0 \
        "127.0.0.1:/$e" "/mnt/$e" 2>/tmp/mount.err; do
        i=$((i + 1))
        if [ $i -gt 60 ]; then
            echo "guest: mount of /$e failed: $(cat /tmp/mount.err)"
            cat /tmp/target.log
            exit 1
        fi
        sleep 0.5
    done
done

sum() { printf '%s\n' "$1" | sha256sum | cut -d' ' -f1; }
# changes DIR FACTS: make the changes in DIR; each command returns only when
# the server has replied, so once they all have, FACTS lists the state the
# server acknowledged (the crash comes after).
changes() (
    cd "$1" || exit 1
    set -e
    # 1. mv a b
    echo "content of a" > a
    mv a b
    # 2. the temp-file / fsync / rename pattern
    dd if=/dev/urandom of=tmp.new bs=64k count=16 conv=fsync status=none
    final=$(sha256sum tmp.new | cut -d' ' -f1)
    mv tmp.new final
    # 3. a directory, and create-and-rename pairs in it
    mkdir dir
    for n in $(seq 1 20); do
        echo "item $n" > "dir/f$n"
        mv "dir/f$n" "dir/g$n"
    done
    # 4. metadata only, after the last data flush: LINK, SYMLINK, SETATTR,
    #    MKDIR, a RENAME across directories, REMOVE, RMDIR
    ln final hard
    ln -s final soft
    chmod 600 final
    mkdir dir/sub
    mv dir/g20 dir/sub/g20
    rm dir/g19
    mkdir gone
    rmdir gone
    {
        echo "absent a"
        echo "file b $(sum 'content of a')"
        echo "absent tmp.new"
        echo "file final $final"
        echo "mode final 600"
        echo "file hard $final"
        echo "symlink soft final"
        echo "dir dir"
        for n in $(seq 1 20); do echo "absent dir/f$n"; done
        for n in $(seq 1 18); do echo "file dir/g$n $(sum "item $n")"; done
        echo "dir dir/sub"
        echo "absent dir/g20"
        echo "file dir/sub/g20 $(sum 'item 20')"
        echo "absent dir/g19"
        echo "absent gone"
    } > "$2"
)
t0=$(cut -d' ' -f1 /proc/uptime)
changes /mnt/sync /host/facts-sync & ps=$!
changes /mnt/async /host/facts-async & pa=$!
rc=0
wait $ps || { echo "guest: the changes on /sync failed"; rc=1; }
wait $pa || { echo "guest: the changes on /async failed"; rc=1; }
if [ $rc != 0 ]; then cat /tmp/target.log; exit 1; fi
# Also to the shared directory: the console may not show it before the reset.
echo "guest: changes acknowledged in $(awk -v t0="$t0" '{ print $1 - t0 }' /proc/uptime) s:" \
    "$(wc -l < /host/facts-sync) facts on /sync, $(wc -l < /host/facts-async) on /async; cutting the power" |
    tee /host/guest.log
# The power cut: reset at once, nothing synced, nothing unmounted (QEMU runs
# with -no-reboot, so it exits).
echo b > /proc/sysrq-trigger
sleep 30
