#!/bin/bash
# Runs a command (default: `make test`) in a Debian 13 root on this kernel, as root:
# Slurm 24.11, podman 5.4, runc, criu and Python 3.13 from Debian 13, this checkout.
#
# The root is made with debootstrap from the machine's own Debian mirror (as apt is
# configured here) under $DIR/root and kept between runs; it is made again when the
# packages asked of it change (debootstrap's list below, or the PACKAGES of setup.sh
# and docker-setup.sh, which `make test` installs into it on first use). The command
# runs in a mount and pid namespace of its own whose root is that tree (pivot_root,
# not chroot: CRIU refuses a root task whose root is not its mount namespace's), with
# fresh /proc, /run, /tmp and /dev/shm, the host's /sys and /dev, the checkout at its
# own path and a venv of its own over the checkout's .venv. The network is the
# host's: the test cluster gets ports of its own (PYSCRUN_SLURM_PORT_BASE). Whatever
# the command leaves running dies with the namespace's pid 1.
#
# Usage: scripts/debian13.sh [COMMAND ARG...]
# Env:   PYSCRUN_DEBIAN13_DIR        (default /srv/pyscrun-debian13)
#        PYSCRUN_SLURM_PORT_BASE     inside (default 17817)
# Log:   $DIR/debootstrap.log
set -euo pipefail

# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

need_root

SUITE=trixie
DIR="${PYSCRUN_DEBIAN13_DIR:-/srv/pyscrun-debian13}"
ROOT=$DIR/root
# What the root needs before the checkout's own set-up can run in it.
INCLUDE=make,ca-certificates,python3,python3-venv,apt-utils

# The packages the root is asked for, as one digest: a change makes it anew.
wanted_digest() {
    {
        echo "$SUITE $INCLUDE"
        sed -n '/^PACKAGES=(/,/)/p' "$REPO/scripts/setup.sh" "$REPO/scripts/docker-setup.sh"
    } | sha256sum | cut -d' ' -f1
}

make_root() {
    local digest=$1 uri
    if [[ -x $ROOT/usr/bin/make && "$(cat "$DIR/packages.sha256" 2>/dev/null)" == "$digest" ]]; then
        return 0
    fi
    PACKAGES=(debootstrap)
    APT_LOG=$DIR/debootstrap.log
    install_missing
    uri="$(mirror_uri "$(. /etc/os-release && echo "$VERSION_CODENAME")")" ||
        die "no Debian mirror for this release in apt's configuration (apt-get indextargets)"
    say "making a Debian 13 root in $ROOT from $uri (about 30 s)"
    rm -rf "$ROOT" "$ROOT.new"
    debootstrap --variant=minbase --include="$INCLUDE" "$SUITE" "$ROOT.new" "$uri" \
        >"$DIR/debootstrap.log" 2>&1 || die "debootstrap failed; log: $DIR/debootstrap.log"
    mv "$ROOT.new" "$ROOT"
    echo "$digest" >"$DIR/packages.sha256"
}

# What a machine of this site has beside Debian's packages, as the host has it: name
# resolution, the certificate authorities and pip's configuration (with /opt, where it
# may point), so that apt and pip reach the registries from the root as from the host.
site_settings() {
    local f
    for f in /etc/resolv.conf /etc/hosts /etc/pip.conf /etc/ssl/certs/ca-certificates.crt; do
        [[ -e $f ]] && cp -L "$f" "$ROOT$f"
    done
    if [[ -d /usr/local/share/ca-certificates ]]; then
        cp -a /usr/local/share/ca-certificates/. "$ROOT/usr/local/share/ca-certificates/"
    fi
    if [[ -d /opt ]]; then
        mount --rbind /opt "$ROOT/opt"
        mount -o remount,bind,ro "$ROOT/opt"
    fi
}

# Runs as pid 1 of the new pid namespace, in its new mount namespace.
enter() {
    local cmd=("$@") m
    mount --bind "$ROOT" "$ROOT"
    mount -t proc proc "$ROOT/proc"
    mount --rbind /sys "$ROOT/sys"
    mount --rbind /dev "$ROOT/dev"
    for m in run tmp dev/shm; do
        mkdir -p "$ROOT/$m"
        mount -t tmpfs -o mode=1777 tmpfs "$ROOT/$m"
    done
    chmod 0755 "$ROOT/run"
    # One venv per checkout, as on the host: its editable install names the checkout.
    local venv
    venv="$DIR/venvs/$(printf '%s' "$REPO" | sha256sum | cut -c1-16)"
    mkdir -p "$ROOT$REPO" "$venv" "$REPO/.venv"
    mount --bind "$REPO" "$ROOT$REPO"
    mount --bind "$venv" "$ROOT$REPO/.venv"
    site_settings
    cd "$ROOT"
    mkdir -p .host
    pivot_root . .host
    cd /
    umount -l /.host
    rmdir /.host
    cd "$REPO"
    # Not exec: pid 1 stays a shell, which reaps what the command leaves behind.
    # The caller's environment goes on (proxies, certificate paths, pip's settings).
    env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
        PYSCRUN_SLURM_PORT_BASE="${PYSCRUN_SLURM_PORT_BASE:-17817}" "${cmd[@]}"
}

main() {
    if [[ ${1:-} == --enter ]]; then
        shift
        enter "$@"
        return
    fi
    (($# > 0)) || set -- make test
    if [[ "$(debian_release)" == 13 ]]; then
        say "this machine is Debian 13: \`make test\` is the Debian 13 run; nothing more to do"
        return 0
    fi
    mkdir -p "$DIR"
    make_root "$(wanted_digest)"
    say "running '$*' in the Debian 13 root"
    unshare --mount --pid --fork --propagation private -- "$REPO/scripts/debian13.sh" --enter "$@"
}

main "$@"
