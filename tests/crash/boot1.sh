# Guest script of tests/crash/run.sh, first boot: make changes through the
# kernel NFS client, record what was acknowledged, cut the power.
. /host/common.sh
disk_up || exit 1
mkfs.ext4 -q -F /dev/nvme0n1 || exit 1
mkdir -p /srv/disk /mnt/nfs
# commit=60: the journal's own timer commits nothing during the test; only
# fsync makes a change durable.
mount -o commit=60 /dev/nvme0n1 /srv/disk || exit 1
mkdir -p /srv/disk/export
sync
ASYNC=$(cat /host/async)
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
  "backends": [ { "name": "disk", "type": "uring", "path": "/srv/disk/export", "queue_depth": 64 } ],
  "exports": [ { "path": "/export", "backend": "disk", "clients": ["127.0.0.0/8"],
                 "root_squash": false, "async": $ASYNC } ]
}
JSON
/host/rpcrdma-target -c /tmp/cores.json > /tmp/target.log 2>&1 &
i=0
until mount -t nfs -o vers=3,proto=tcp,port=2049,mountport=20048,mountproto=tcp,nolock,actimeo=0 \
    127.0.0.1:/export /mnt/nfs 2>/tmp/mount.err; do
    i=$((i + 1))
    if [ $i -gt 60 ]; then
        echo "guest: mount failed: $(cat /tmp/mount.err)"
        cat /tmp/target.log
        exit 1
    fi
    sleep 0.5
done
cd /mnt/nfs || exit 1
: > /host/acked
# 1. mv a b
echo "content of a" > a || exit 1
mv a b || exit 1
echo "absent a" >> /host/acked
echo "file b $(echo 'content of a' | sha256sum | cut -d' ' -f1)" >> /host/acked
# 2. the temp-file / fsync / rename pattern
dd if=/dev/urandom of=tmp.new bs=64k count=16 conv=fsync status=none || exit 1
sum=$(sha256sum tmp.new | cut -d' ' -f1)
mv tmp.new final || exit 1
echo "absent tmp.new" >> /host/acked
echo "file final $sum" >> /host/acked
# 3. a directory, and create-and-rename pairs in it
mkdir dir || exit 1
echo "dir dir" >> /host/acked
for n in $(seq 1 20); do
    echo "item $n" > "dir/f$n" || exit 1
    mv "dir/f$n" "dir/g$n" || exit 1
    echo "absent dir/f$n" >> /host/acked
    echo "file dir/g$n $(echo "item $n" | sha256sum | cut -d' ' -f1)" >> /host/acked
done
echo "guest: $(wc -l < /host/acked) acknowledged facts; cutting the power"
# The power cut: reset at once, nothing synced, nothing unmounted.
echo b > /proc/sysrq-trigger
sleep 30
