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
