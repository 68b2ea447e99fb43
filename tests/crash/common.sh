# Sourced by the guest scripts of tests/crash/run.sh.
disk_up() {
    modprobe nvme || return 1
    i=0
    while [ $i -lt 120 ]; do
        [ -e /dev/nvme0n1 ] && return 0
        sleep 0.5
        i=$((i + 1))
    done
    echo "guest: no /dev/nvme0n1"
    return 1
}
