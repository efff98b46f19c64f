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
# Env:   PYSCRUN_TEST_HOME  (default /srv/pyscrun-test)
# Makes: $H/docker/rootfs.tar (busybox-static, the same tree as podman's test image)
set -euo pipefail

# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

need_root

PACKAGES=(docker.io containerd busybox-static)
H="${PYSCRUN_TEST_HOME:-/srv/pyscrun-test}"
BUSYBOX=/bin/busybox
APT_LOG=/tmp/pyscrun-docker-setup.log

# The image's root filesystem as a tarball for `docker import` (rebuilt when busybox changes).
build_rootfs_tar() {
    local out=$H/docker/rootfs.tar
    mkdir -p "$H/docker"
    [[ -s $out && $out -nt $BUSYBOX ]] && return 0
    say "building $out"
    busybox_rootfs_tar "$BUSYBOX" "$out"
}

main() {
    install_missing
    need_cmd dockerd containerd containerd-shim-runc-v2 docker
    build_rootfs_tar
}

main "$@"
