#!/bin/bash
# One compute node of the test cluster as a machine of its own: run by cluster.sh as the
# first process of fresh mount, pid, uts and ipc namespaces. The node gets its own
# hostname, /run, /tmp, /var/tmp, /dev/shm, /var/spool, /var/lib and /var/log (empty),
# its own munged (the cluster's key) and its own slurmd. It shares with the login side
# only the network, the installed software (/usr, the checkout and its venv), /etc,
# /home and /srv (which stands for the cluster file system).
#
# Usage: cluster-node.sh NAME SLURM_CONF MUNGE_KEY
set -euo pipefail

name=$1 conf=$2 key=$3
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
private=(/run /tmp /var/tmp /dev/shm /var/spool /var/lib /var/log)

hostname "$name"
# The checkout (and its venv) is installed software: when it lives under a directory
# that is private to the node, it is carried over into the node's own copy.
carried=""
for dir in "${private[@]}"; do
    if [[ $repo == "$dir"/* ]]; then
        carried="$(dirname "$conf")/checkout"
        mkdir -p "$carried"
        # --rbind: what is mounted inside it comes too (a venv of its own over .venv,
        # as scripts/debian13.sh mounts one).
        mount --rbind "$repo" "$carried"
    fi
done
for dir in "${private[@]}"; do
    mount -t tmpfs -o mode=1777 "node-$name" "$dir"
done
chmod 755 /run /var/spool /var/lib /var/log
if [[ -n $carried ]]; then
    mkdir -p "$repo"
    mount --move "$carried" "$repo"
fi

mkdir -p /run/munge /run/lock /var/spool/slurmd /var/lib/munge /var/log/munge
if id -u munge >/dev/null 2>&1; then
    chown munge: /run/munge /var/lib/munge /var/log/munge
    chmod 755 /run/munge
    runuser -u munge -- munged --key-file="$key" --socket=/run/munge/munge.socket.2 \
        --pid-file=/run/munge/munged.pid --seed-file=/var/lib/munge/munged.seed \
        --log-file=/var/log/munge/munged.log
else
    munged --force --key-file="$key" --socket=/run/munge/munge.socket.2 \
        --pid-file=/run/munge/munged.pid --seed-file=/var/lib/munge/munged.seed \
        --log-file=/var/log/munge/munged.log
fi
# The machine outlives its slurmd (which may be killed and started again, as on a real
# node); it ends when its first process, tini, is killed.
slurmd -f "$conf" -N "$name"
exec tini -- sleep infinity
