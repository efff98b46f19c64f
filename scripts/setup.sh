#!/bin/bash
# Machine setup for pyscrun development, tests and CI (Debian 12 or 13, as root).
# Idempotent: installs only missing packages, (re)installs the Python package
# into $REPO/.venv only when pyproject.toml changed, then runs podman-setup.sh.
#
# Usage: scripts/setup.sh
set -euo pipefail

# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

need_root

PACKAGES=(
    runc podman conmon busybox-static
    slurmctld slurmd slurm-client munge
    python3-venv python3-dev
    tmux uidmap rsync procps psmisc iproute2 util-linux fuse-overlayfs
)
# Daemons that package scripts may start on installation.
DAEMONS=(munged slurmctld slurmd slurmdbd)

debian_release() {
    local v
    v="$(cat /etc/debian_version 2>/dev/null || true)"
    case $v in
        12* | bookworm*) echo 12 ;;
        13* | trixie*) echo 13 ;;
        *) echo "${v:-unknown}" ;;
    esac
}

# pids of the daemons above, one per line, sorted as text for comm(1).
# Reads /proc directly: procps (pgrep) may not be installed yet.
daemon_pids() {
    local p c d
    for p in /proc/[0-9]*; do
        c="$(cat "$p/comm" 2>/dev/null)" || continue
        for d in "${DAEMONS[@]}"; do
            if [[ $c == "$d" ]]; then echo "${p#/proc/}"; fi
        done
    done | sort
}

install_packages() {
    local p missing=()
    for p in "${PACKAGES[@]}"; do
        if [[ "$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)" != installed ]]; then
            missing+=("$p")
        fi
    done
    [[ ${#missing[@]} -eq 0 ]] && return 0

    say "installing: ${missing[*]}"
    local before policy=/usr/sbin/policy-rc.d our_policy=""
    before="$(daemon_pids)"
    # Keep package scripts from starting munge/slurm daemons (invoke-rc.d and
    # deb-systemd-invoke both honour policy-rc.d). Only add one if none exists.
    if [[ ! -e $policy ]]; then
        printf '#!/bin/sh\nexit 101\n' >"$policy"
        chmod 0755 "$policy"
        our_policy=$policy
    fi
    local rc=0
    {
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq &&
            apt-get install -y -qq \
                -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold \
                "${missing[@]}"
    } >/tmp/pyscrun-setup-apt.log 2>&1 || rc=$?
    [[ -n $our_policy ]] && rm -f "$our_policy"
    if [[ $rc -ne 0 ]]; then
        tail -n 20 /tmp/pyscrun-setup-apt.log >&2
        die "apt-get failed (exit $rc); full log: /tmp/pyscrun-setup-apt.log"
    fi

    # Stop any daemon that appeared during the installation (started by a
    # package script despite the policy), and only those.
    local pid new
    new="$(comm -13 <(printf '%s\n' "$before") <(daemon_pids) | grep -E '^[0-9]+$' || true)"
    for pid in $new; do
        say "stopping daemon started by package installation: $(cat "/proc/$pid/comm" 2>/dev/null) (pid $pid)"
        kill "$pid" 2>/dev/null || true
    done
    if [[ -n $new ]]; then
        sleep 1
        for pid in $new; do kill -9 "$pid" 2>/dev/null || true; done
    fi
    # On a systemd machine, make sure the units stay stopped as well.
    if [[ -d /run/systemd/system ]] && command -v systemctl >/dev/null 2>&1; then
        systemctl stop munge.service slurmctld.service slurmd.service >/dev/null 2>&1 || true
    fi
    for p in "${missing[@]}"; do
        [[ "$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)" == installed ]] ||
            die "package $p is still not installed"
    done
}

setup_venv() {
    local venv=$REPO/.venv py=/usr/bin/python3
    [[ -x $py ]] || die "$py not found (package python3)"
    local want have=""
    want="$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
    if [[ -x $venv/bin/python ]]; then
        have="$("$venv/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null || true)"
    fi
    # Recreate the venv when it is missing, broken, not made from Debian's
    # python3, or from another Python version (e.g. after an upgrade to 13).
    if [[ $have != "$want" ]] || ! grep -qx 'home = /usr/bin' "$venv/pyvenv.cfg" 2>/dev/null; then
        [[ -e $venv ]] && say "recreating $venv (was: ${have:-unusable})"
        rm -rf "$venv"
        say "creating venv $venv (python $want)"
        "$py" -m venv "$venv" || die "python3 -m venv failed (package python3-venv)"
    fi

    local pyproject=$REPO/pyproject.toml stamp=$venv/.installed
    if [[ ! -f $pyproject ]]; then
        say "no $pyproject yet: skipping pip install"
        return 0
    fi
    if [[ ! -e $stamp || $pyproject -nt $stamp ]]; then
        say "pip install -e ${REPO}[dev]"
        # The stamp gets the time the install started: a pyproject.toml
        # edited meanwhile is newer and triggers the next install.
        : >"$stamp.new"
        local log=/tmp/pyscrun-setup-pip.log
        "$venv/bin/pip" install -q -e "${REPO}[dev]" >"$log" 2>&1 || {
            rm -f "$stamp.new"
            tail -n 20 "$log" >&2
            die "pip install -e '${REPO}[dev]' failed; full log: $log"
        }
        # setuptools in the venv only adds a .pth hook that every start of scrun
        # pays for (milliseconds, several times per container); builds get their own.
        "$venv/bin/pip" uninstall -q -y setuptools >>"$log" 2>&1 || true
        mv -f "$stamp.new" "$stamp"
    fi
}

main() {
    local rel
    rel="$(debian_release)"
    case $rel in
        12 | 13) ;;
        *) say "warning: untested Debian version '$rel' (expected 12 or 13)" ;;
    esac
    install_packages
    setup_venv
    "$REPO/scripts/criu-setup.sh"
    "$REPO/scripts/docker-setup.sh"
    "$REPO/scripts/podman-setup.sh"
}

main "$@"
