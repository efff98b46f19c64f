#!/bin/bash
# Debian's docker (dockerd + containerd) for pyscrun's docker tests, and the rootfs
# tarball the tests `docker import` as their image. Idempotent and quiet when there
# is nothing to do.
#
# No daemon is left running: package scripts are kept from starting dockerd or
# containerd (policy-rc.d), and any that appears anyway during the installation is
# stopped (only those, never a docker that already ran). The tests start a private
# dockerd of their own (tests/integration/dockerd.py): own socket, data-root,
# exec-root and pid file, no networking; a docker the user runs is never touched.
#
# Usage: scripts/docker-setup.sh
# Env:   PYSCRUN_TEST_HOME  (default /var/tmp/pyscrun-test)
# Makes: $H/docker/rootfs.tar (busybox-static, the same tree as podman's test image)
set -euo pipefail

# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

need_root

PACKAGES=(docker.io containerd busybox-static)
DAEMONS=(dockerd containerd containerd-shim docker-proxy)
H="${PYSCRUN_TEST_HOME:-/var/tmp/pyscrun-test}"
BUSYBOX=/bin/busybox
LOG=/tmp/pyscrun-docker-setup.log

installed() { [[ "$(dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null || true)" == installed ]]; }

# pids of the daemons above, one per line, sorted as text for comm(1).
daemon_pids() {
    local p c d
    for p in /proc/[0-9]*; do
        c="$(cat "$p/comm" 2>/dev/null)" || continue
        for d in "${DAEMONS[@]}"; do
            if [[ $c == "$d"* ]]; then echo "${p#/proc/}"; fi
        done
    done | sort
}

install_packages() {
    local p missing=()
    for p in "${PACKAGES[@]}"; do
        installed "$p" || missing+=("$p")
    done
    [[ ${#missing[@]} -eq 0 ]] && return 0

    say "installing: ${missing[*]}"
    local before policy=/usr/sbin/policy-rc.d our_policy="" rc=0
    before="$(daemon_pids)"
    if [[ ! -e $policy ]]; then
        printf '#!/bin/sh\nexit 101\n' >"$policy"
        chmod 0755 "$policy"
        our_policy=$policy
    fi
    {
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq &&
            apt-get install -y -qq --no-install-recommends \
                -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold \
                "${missing[@]}"
    } >"$LOG" 2>&1 || rc=$?
    [[ -n $our_policy ]] && rm -f "$our_policy"
    if [[ $rc -ne 0 ]]; then
        tail -n 20 "$LOG" >&2
        die "apt-get failed (exit $rc); full log: $LOG"
    fi

    local pid new
    new="$(comm -13 <(printf '%s\n' "$before") <(daemon_pids) | grep -E '^[0-9]+$' || true)"
    for pid in $new; do
        say "stopping daemon started by package installation: $(cat "/proc/$pid/comm" 2>/dev/null) (pid $pid)"
        kill "$pid" 2>/dev/null || true
    done
    if [[ -n $new ]]; then
        sleep 2
        for pid in $new; do kill -9 "$pid" 2>/dev/null || true; done
    fi
    if [[ -d /run/systemd/system ]] && command -v systemctl >/dev/null 2>&1; then
        systemctl stop docker.service docker.socket containerd.service >/dev/null 2>&1 || true
    fi
    for p in "${missing[@]}"; do
        installed "$p" || die "package $p is still not installed"
    done
}

# The image's root filesystem as a tarball for `docker import` (rebuilt when busybox changes).
build_rootfs_tar() {
    [[ -x $BUSYBOX ]] || die "$BUSYBOX not found (package busybox-static)"
    local out=$H/docker/rootfs.tar tmp rootfs applet
    mkdir -p "$H/docker"
    [[ -s $out && $out -nt $BUSYBOX ]] && return 0
    say "building $out"
    tmp="$(mktemp -d "$H/docker/build.XXXXXX")"
    rootfs=$tmp/rootfs
    mkdir -p "$rootfs"/{bin,tmp,proc,sys,dev,etc,root,var/tmp,run}
    chmod 1777 "$rootfs/tmp" "$rootfs/var/tmp"
    chmod 0700 "$rootfs/root"
    cp "$BUSYBOX" "$rootfs/bin/busybox"
    for applet in $("$BUSYBOX" --list); do
        [[ $applet == busybox || -e $rootfs/bin/$applet ]] && continue
        ln -s busybox "$rootfs/bin/$applet"
    done
    printf '%s\n' 'root:x:0:0:root:/root:/bin/sh' 'nobody:x:65534:65534:nobody:/nonexistent:/bin/false' \
        >"$rootfs/etc/passwd"
    printf '%s\n' 'root:x:0:' 'nogroup:x:65534:' >"$rootfs/etc/group"
    tar -C "$rootfs" --numeric-owner --owner=0 --group=0 -cf "$tmp/rootfs.tar" .
    mv -f "$tmp/rootfs.tar" "$out"
    rm -rf "$tmp"
}

main() {
    install_packages
    need_cmd dockerd containerd containerd-shim-runc-v2 docker
    build_rootfs_tar
}

main "$@"
