#!/bin/bash
# Smoke test of checkpoint/restore on this machine (kernel + criu + runc), as root:
# runs a busybox counter in a runc container whose stdout is a pipe, checkpoints it
# with `runc checkpoint`, restores it under a new id and checks that it goes on
# counting where it stopped. Leaves no container, process or file behind.
# One line on success; exit 1 with the details otherwise.
#
# Usage: scripts/criu-selftest.sh   (after scripts/criu-setup.sh)
set -euo pipefail

# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

need_root
need_cmd runc criu
BUSYBOX=/bin/busybox
PY=/usr/bin/python3
[[ -x $BUSYBOX ]] || die "$BUSYBOX not found (package busybox-static)"
[[ -x $PY ]] || die "$PY not found"

W="$(mktemp -d "${TMPDIR:-/var/tmp}/pyscrun-criu-selftest.XXXXXX")"
ROOT=$W/runc
B=$W/bundle
IMG=$W/image
ID=pyscrun-criu-selftest-$$
ID2=$ID-restored
READERS=()

rc() { runc --root "$ROOT" "$@"; }

cleanup() {
    local id p
    for id in "$ID" "$ID2"; do
        rc delete -f "$id" >/dev/null 2>&1 || true
    done
    for p in "${READERS[@]}"; do
        kill "$p" 2>/dev/null || true
    done
    rm -rf "$W"
}
trap cleanup EXIT

fail() {
    local f
    for f in "$W"/*.log "$W"/*.out "$IMG"/dump.log "$IMG"/restore.log; do
        [[ -s $f ]] && { printf -- '--- %s\n' "$f" >&2; tail -n 15 "$f" >&2; }
    done
    die "$*"
}

# start_reader FILE: open fd 8 as the write end of a pipe whose reader copies to
# FILE. The container's stdout and stderr go there: criu cannot dump a container
# whose stdio is a regular file of the host.
start_reader() {
    exec 8> >(exec cat >"$1")
    READERS+=("$!")
}

# wait_reader: wait until the last reader ended (all write ends closed).
wait_reader() {
    local p=${READERS[-1]} i
    for ((i = 0; i < 50; i++)); do
        kill -0 "$p" 2>/dev/null || return 0
        sleep 0.1
    done
    return 1
}

# Bundle: static busybox, a shell loop that prints 1, 2, 3, ... once a second.
mkdir -p "$B/rootfs/bin" "$IMG"
cp "$BUSYBOX" "$B/rootfs/bin/busybox"
for a in sh sleep echo; do ln -s busybox "$B/rootfs/bin/$a"; done
runc spec --bundle "$B"
"$PY" - "$B/config.json" <<'EOF'
import json, sys
path = sys.argv[1]
with open(path) as f:
    spec = json.load(f)
spec["process"]["terminal"] = False
spec["process"]["args"] = [
    "sh", "-c", "i=0; while true; do i=$((i+1)); echo $i; sleep 1; done"]
with open(path, "w") as f:
    json.dump(spec, f, indent=2)
EOF

start_reader "$W/before.out"
rc run -d --bundle "$B" "$ID" </dev/null >&8 2>&8 8>&- || fail "runc run failed"
exec 8>&-
sleep 3
rc checkpoint --image-path "$IMG" "$ID" >"$W/checkpoint.log" 2>&1 || fail "runc checkpoint failed"
wait_reader || fail "the container's stdout is still open after the checkpoint"
last="$(tail -n 1 "$W/before.out")"
[[ $last =~ ^[0-9]+$ && $last -ge 2 ]] || fail "unexpected output before the checkpoint: '$last'"

start_reader "$W/after.out"
rc restore -d --image-path "$IMG" --bundle "$B" "$ID2" </dev/null >&8 2>&8 8>&- ||
    fail "runc restore failed"
exec 8>&-
sleep 2.5
rc delete -f "$ID2" >/dev/null 2>&1 || fail "cannot delete the restored container"
wait_reader || fail "the restored container's stdout is still open after its deletion"
first="$(head -n 1 "$W/after.out")"
end="$(tail -n 1 "$W/after.out")"
[[ $first =~ ^[0-9]+$ && $end =~ ^[0-9]+$ ]] ||
    fail "unexpected output after the restore: '$(head -c 200 "$W/after.out")'"
((first == last + 1 && end > first)) ||
    fail "restored counter went $first..$end, expected to continue from $((last + 1))"
say "ok: runc checkpoint at $last, restored as new container: $first..$end" \
    "($(criu --version | sed -n 's/^Version: *//p' | head -n 1 | sed 's/^/criu /'), $(runc --version | head -n 1))"
