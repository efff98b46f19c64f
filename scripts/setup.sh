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
    tmux uidmap rsync procps psmisc iproute2 util-linux fuse-overlayfs tini rootlesskit
    gcc libc6-dev exfat-fuse exfatprogs
)
APT_LOG=/tmp/pyscrun-setup-apt.log

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
        say "creating venv $venv (python $want)"
        # --clear empties the directory rather than removing it: it may be a mount
        # point (scripts/debian13.sh puts a venv of its own there).
        "$py" -m venv --clear "$venv" || die "python3 -m venv failed (package python3-venv)"
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
    # scrun starts several times per container: compiled once here, its modules are
    # never compiled on the way (PYTHONDONTWRITEBYTECODE would keep Python from
    # writing what it compiles). Only what changed is compiled again.
    "$venv/bin/python" -m compileall -q "$REPO/src" >/dev/null
}

main() {
    local rel
    rel="$(debian_release)"
    case $rel in
        12 | 13) ;;
        *) say "warning: untested Debian version '$rel' (expected 12 or 13)" ;;
    esac
    install_missing
    setup_venv
    "$REPO/scripts/criu-setup.sh"
    "$REPO/scripts/docker-setup.sh"
    "$REPO/scripts/podman-setup.sh"
    "$REPO/scripts/users-setup.sh"
}

main "$@"
