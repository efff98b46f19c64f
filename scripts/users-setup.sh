#!/bin/bash
# Ordinary users for pyscrun's tests and demo: rootless podman as Slurm's container
# guide sets it up, for two unprivileged users who share nothing but the machine.
# Idempotent. For each user:
#   - the account, with subordinate uid and gid ranges (/etc/subuid, /etc/subgid)
#   - /run/user/UID, its XDG_RUNTIME_DIR on this (login) host
#   - ~/.config/containers/containers.conf and storage.conf: vfs storage and runroot
#     in the home directory, which the compute nodes share (as in Slurm's guide)
#   - the test image localhost/pyscrun-test:latest in that store
# The checkout must be reachable by them (its venv runs scrun): directories above it
# that others cannot traverse get o+x, and say so.
#
# Usage: scripts/users-setup.sh
# Env:   PYSCRUN_TEST_USERS  (default "pyscrun-user pyscrun-user2")
set -euo pipefail

# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

need_root
need_cmd podman runc newuidmap newgidmap runuser

USERS="${PYSCRUN_TEST_USERS:-pyscrun-user pyscrun-user2}"
IMAGE=localhost/pyscrun-test:latest
SUB_COUNT=65536

make_user() {
    local user=$1
    if ! id -u "$user" >/dev/null 2>&1; then
        say "creating user $user"
        useradd --create-home --shell /bin/bash "$user"
    fi
    add_range "$user" /etc/subuid
    add_range "$user" /etc/subgid
}

# add_range USER FILE: a range of SUB_COUNT ids above every range FILE holds.
add_range() {
    local user=$1 file=$2 start
    touch "$file"
    grep -q "^$user:" "$file" && return 0
    start="$(awk -F: 'BEGIN { top = 100000 } { if ($2 + $3 > top) top = $2 + $3 } END { print top }' "$file")"
    printf '%s:%s:%s\n' "$user" "$start" "$SUB_COUNT" >>"$file"
}

runtime_dir() {
    local user=$1 uid
    uid="$(id -u "$user")"
    install -d -m 700 -o "$uid" -g "$(id -g "$user")" "/run/user/$uid"
}

podman_config() {
    local user=$1 home conf
    home="$(getent passwd "$user" | cut -d: -f6)"
    conf=$home/.config/containers
    runuser -u "$user" -- mkdir -p "$conf" "$home/containers"
    runuser -u "$user" -- tee "$conf/storage.conf" >/dev/null <<EOF
# Written by pyscrun's scripts/users-setup.sh. vfs storage in the home directory, which
# every compute node sees: a container's rootfs and podman's own files (/etc/hosts,
# /etc/hostname of the container) are plain files there.
[storage]
driver = "vfs"
graphroot = "$home/containers/storage"
runroot = "$home/containers/run"
EOF
    {
        echo "# Written by pyscrun's scripts/users-setup.sh, as Slurm's container guide sets up podman."
        podman_machine_settings
    } | runuser -u "$user" -- tee "$conf/containers.conf" >/dev/null
}

as_user() {
    local user=$1 uid
    shift
    uid="$(id -u "$user")"
    (cd / && runuser -u "$user" -- env -i PATH=/usr/bin:/bin HOME="$(getent passwd "$user" | cut -d: -f6)" \
        XDG_RUNTIME_DIR="/run/user/$uid" PODMAN_IGNORE_CGROUPSV1_WARNING=1 "$@")
}

image() {
    local user=$1 tar
    as_user "$user" podman image exists "$IMAGE" 2>/dev/null && return 0
    say "importing $IMAGE for $user"
    tar="$(mktemp -d /tmp/pyscrun-users-setup.XXXXXX)"
    chmod 755 "$tar"
    busybox_rootfs_tar /bin/busybox "$tar/rootfs.tar"
    chmod 644 "$tar/rootfs.tar"
    as_user "$user" podman import --quiet --change 'CMD ["/bin/sh"]' "$tar/rootfs.tar" "$IMAGE" \
        >/dev/null 2>"$tar/err" || { cat "$tar/err" >&2; rm -rf "$tar"; die "podman import as $user failed"; }
    rm -rf "$tar"
}

verify() {
    local user=$1 out
    out="$(as_user "$user" podman run --rm "$IMAGE" echo hi 2>&1)" ||
        die "rootless podman as $user with runc fails: $out"
    [[ $out == *hi ]] || die "rootless podman as $user printed '$out', not hi"
}

# pause_pid USER: the pid of the pause process that holds USER's rootless podman
# namespaces (podman starts it at its first run and leaves it running), or 0.
pause_pid() {
    local uid pid
    uid="$(id -u "$1")"
    pid="$(cat "/run/user/$uid/libpod/tmp/pause.pid" 2>/dev/null)" || { echo 0; return; }
    if [[ $pid =~ ^[0-9]+$ && -d /proc/$pid && $(stat -c %u "/proc/$pid") == "$uid" &&
        $(cat "/proc/$pid/comm") == podman* ]]; then
        echo "$pid"
    else
        echo 0
    fi
}

# reachable: every directory above the checkout lets others through, so that the
# users can run its venv's scrun.
reachable() {
    local dir=$REPO
    while [[ $dir != / ]]; do
        if ! [[ $(stat -c %A "$dir") =~ ^.........[xt]$ ]]; then
            say "letting others traverse $dir (o+x), for the test users to run the checkout's scrun"
            chmod o+x "$dir"
        fi
        dir="$(dirname "$dir")"
    done
}

main() {
    local user before after
    reachable
    for user in $USERS; do
        make_user "$user"
        runtime_dir "$user"
        before="$(pause_pid "$user")"
        podman_config "$user"
        image "$user"
        verify "$user"
        # What this script started does not outlive it.
        after="$(pause_pid "$user")"
        if [[ $after != 0 && $after != "$before" ]]; then
            kill "$after"
        fi
    done
    say "ok: $USERS"
}

main "$@"
