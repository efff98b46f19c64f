# shellcheck shell=bash
# Shared helpers for the scripts in this directory. Source it; do not run it.
#
#   . "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
#
# Sets REPO (the directory that contains scripts/) and defines small helpers.

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
export REPO

# Name shown in front of messages: the calling script's base name.
_LIB_PROG="$(basename "${0%.sh}")"

# say MSG...: one short progress line on stderr (stdout stays clean for callers
# that capture it, e.g. `eval "$(scripts/cluster.sh up)"`).
say() { printf '%s: %s\n' "$_LIB_PROG" "$*" >&2; }

# die MSG...: error message on stderr, exit 1.
die() {
    printf '%s: error: %s\n' "$_LIB_PROG" "$*" >&2
    exit 1
}

need_root() {
    [[ $(id -u) -eq 0 ]] || die "must run as root"
}

# need_cmd CMD...: fail clearly when a command is missing.
need_cmd() {
    local c
    for c in "$@"; do
        command -v "$c" >/dev/null 2>&1 || die "command not found: $c (run scripts/setup.sh first)"
    done
}

# write_if_changed FILE [MODE]: write stdin to FILE only when the content differs.
# Returns 0 when the file was (re)written, 1 when it was already up to date.
write_if_changed() {
    local file=$1 mode=${2:-0644} tmp
    tmp="$(mktemp "${file}.XXXXXX")"
    cat >"$tmp"
    chmod "$mode" "$tmp"
    if [[ -f $file ]] && cmp -s "$tmp" "$file"; then
        rm -f "$tmp"
        return 1
    fi
    mv -f "$tmp" "$file"
    return 0
}

# pid_alive PIDFILE COMM PATTERN: true when PIDFILE names a live process whose
# comm is COMM and whose command line contains PATTERN (guards against pid reuse
# and against ever touching a daemon this project did not start).
pid_alive() {
    local pidfile=$1 comm=$2 pattern=$3 pid
    [[ -r $pidfile ]] || return 1
    pid="$(tr -d ' \n' <"$pidfile" 2>/dev/null)" || return 1
    [[ $pid =~ ^[0-9]+$ ]] || return 1
    [[ -r /proc/$pid/comm ]] || return 1
    [[ "$(cat "/proc/$pid/comm" 2>/dev/null)" == "$comm" ]] || return 1
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$pattern" || return 1
    printf '%s\n' "$pid"
}

# package_installed NAME: true when dpkg has the package installed.
package_installed() {
    [[ "$(dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null || true)" == installed ]]
}

# install_missing: apt-get install whichever of the array PACKAGES is missing, with
# apt's output in APT_LOG. A policy-rc.d keeps package scripts from starting their
# daemons (munged, slurmctld, dockerd, ...); nothing already running is touched, so a
# site's own munge or Slurm stays exactly as it was.
install_missing() {
    local p missing=()
    for p in "${PACKAGES[@]}"; do
        package_installed "$p" || missing+=("$p")
    done
    [[ ${#missing[@]} -eq 0 ]] && return 0

    say "installing: ${missing[*]}"
    local policy=/usr/sbin/policy-rc.d our_policy="" rc=0
    # invoke-rc.d and deb-systemd-invoke honour policy-rc.d; only add one if none exists.
    if [[ ! -e $policy ]]; then
        printf '#!/bin/sh\nexit 101\n' >"$policy"
        chmod 0755 "$policy"
        our_policy=$policy
    fi
    {
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq &&
            apt-get install -y -qq \
                -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold \
                "${missing[@]}"
    } >"$APT_LOG" 2>&1 || rc=$?
    [[ -n $our_policy ]] && rm -f "$our_policy"
    if [[ $rc -ne 0 ]]; then
        tail -n 20 "$APT_LOG" >&2
        die "apt-get failed (exit $rc); full log: $APT_LOG"
    fi

    for p in "${missing[@]}"; do
        package_installed "$p" || die "package $p is still not installed"
    done
}

# debian_release: 12, 13, or what /etc/debian_version says.
debian_release() {
    local v
    v="$(cat /etc/debian_version 2>/dev/null || true)"
    case $v in
        12* | bookworm*) echo 12 ;;
        13* | trixie*) echo 13 ;;
        *) echo "${v:-unknown}" ;;
    esac
}

# busybox_rootfs_tar BUSYBOX OUT: a tarball of the test image's root filesystem:
# busybox-static with every applet linked in /bin, the directories tests write to,
# and an /etc/passwd and /etc/group with root and nobody.
busybox_rootfs_tar() {
    local busybox=$1 out=$2 tmp rootfs applet
    [[ -x $busybox ]] || die "$busybox not found (package busybox-static)"
    tmp="$(mktemp -d "$(dirname "$out")/build.XXXXXX")"
    rootfs=$tmp/rootfs
    mkdir -p "$rootfs"/{bin,tmp,proc,sys,dev,etc,root,var/tmp,run}
    chmod 1777 "$rootfs/tmp" "$rootfs/var/tmp"
    chmod 0700 "$rootfs/root"
    cp "$busybox" "$rootfs/bin/busybox"
    for applet in $("$busybox" --list); do
        [[ $applet == busybox || -e $rootfs/bin/$applet ]] && continue
        ln -s busybox "$rootfs/bin/$applet"
    done
    [[ -e $rootfs/bin/sh ]] || die "busybox has no sh applet"
    printf '%s\n' 'root:x:0:0:root:/root:/bin/sh' 'nobody:x:65534:65534:nobody:/nonexistent:/bin/false' \
        >"$rootfs/etc/passwd"
    printf '%s\n' 'root:x:0:' 'nogroup:x:65534:' >"$rootfs/etc/group"
    tar -C "$rootfs" --numeric-owner --owner=0 --group=0 -cf "$tmp/rootfs.tar" .
    mv -f "$tmp/rootfs.tar" "$out"
    rm -rf "$tmp"
}

# podman_machine_settings: the containers.conf settings this kind of machine needs for
# podman, root's or an ordinary user's; the caller appends its own [engine] keys and
# sections after them.
podman_machine_settings() {
    cat <<'EOF'
[containers]
# The shell lacks CAP_SYS_RESOURCE: podman's default rlimits would fail.
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]
# No journald here.
log_driver = "k8s-file"
# No network setup (and no firewall changes); the container runs on another machine.
netns = "none"

[engine]
# No systemd here.
cgroup_manager = "cgroupfs"
events_logger = "file"
# crun fails on this machine's hybrid cgroups; runc works.
runtime = "runc"
EOF
}

# The base URI of the machine's own Debian entry for suite $1 (component main), as
# apt itself parses it from sources.list, sources.list.d/*.list and *.sources.
mirror_uri() {
    local codename=$1 target uri release rel_codename component
    # shellcheck disable=SC2016 # apt's $(FIELD) placeholders
    local fmt='$(TARGET_OF) $(REPO_URI) $(RELEASE) $(CODENAME) $(COMPONENT)'
    while read -r target uri release rel_codename component; do
        [[ $target == deb && $component == main ]] || continue
        if [[ $release == "$codename" || ($rel_codename == "$codename" && $release != */* && $release != *-*) ]]; then
            printf '%s\n' "${uri%/}"
            return 0
        fi
    done < <(apt-get indextargets --format "$fmt" 'Created-By: Packages' 2>/dev/null)
    return 1
}
