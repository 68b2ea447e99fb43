# Guest script of tests/crash/run.sh, second boot: is every acknowledged
# change on the disk?
. /host/common.sh
disk_up || exit 1
mkdir -p /srv/disk
mount /dev/nvme0n1 /srv/disk || { echo "guest: mount after the crash failed"; exit 1; }
cd /srv/disk/export || exit 1
lost=0
while read -r kind name sum; do
    case "$kind" in
    absent)
        if [ -e "$name" ]; then echo "crash: LOST: $name still there"; lost=$((lost + 1)); fi ;;
    dir)
        if [ ! -d "$name" ]; then echo "crash: LOST: directory $name"; lost=$((lost + 1)); fi ;;
    file)
        if [ ! -f "$name" ]; then
            echo "crash: LOST: $name missing"; lost=$((lost + 1))
        elif [ "$(sha256sum "$name" | cut -d' ' -f1)" != "$sum" ]; then
            echo "crash: LOST: $name content differs ($(stat -c %s "$name") bytes)"; lost=$((lost + 1))
        fi ;;
    esac
done < /host/acked
echo "crash: checked $(wc -l < /host/acked) acknowledged facts, $lost lost"
ls -la /srv/disk/export | head -20
[ "$lost" = 0 ]
