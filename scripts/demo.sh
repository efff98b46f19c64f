#!/bin/bash
# make demo: what pyscrun is for. A loopback Slurm cluster of three compute nodes that
# are machines of their own; an ordinary user's rootless podman running containers
# through pyscrun as that user's Slurm jobs; and a counting container checkpointed on
# one node and restored on another. Everything it starts is stopped on the way out.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=/dev/null
. "${PYSCRUN_TEST_HOME:-/srv/pyscrun-test}/env.sh"
DEMO_USER="${PYSCRUN_DEMO_USER:-pyscrun-user}"
IMAGE=$PYSCRUN_TEST_IMAGE

SLURM_CONF="$(bash "$REPO/scripts/cluster.sh" up 3 | tail -n 1 | sed 's/^export SLURM_CONF=//')"
export SLURM_CONF
DEMO_DIR="$(mktemp -d /tmp/pyscrun-demo.XXXXXX)"
chmod 755 "$DEMO_DIR"
drained=""
cleanup() {
    [[ -n $drained ]] && scontrol update "NodeName=$drained" State=RESUME >/dev/null 2>&1
    podman --runtime "$DEMO_DIR/scrun-root" rm -f -t 0 counter counter-restored >/dev/null 2>&1
    bash "$REPO/scripts/cluster.sh" down >/dev/null 2>&1
    rm -rf "$DEMO_DIR"
}
trap 'cleanup || true' EXIT
# A closed pipe (make demo | head) or Ctrl-C ends the demo through its EXIT trap too.
trap 'exit 1' PIPE HUP INT TERM

# podman passes the runtime no environment to speak of: a wrapper names slurm.conf.
printf '#!/bin/sh\nexec %s -f %s "$@"\n' "$REPO/.venv/bin/scrun" "$SLURM_CONF" >"$DEMO_DIR/scrun"
printf '#!/bin/sh\nexec %s --root %s -f %s "$@"\n' "$REPO/.venv/bin/scrun" "$DEMO_DIR/root" \
    "$SLURM_CONF" >"$DEMO_DIR/scrun-root"
chmod 755 "$DEMO_DIR/scrun" "$DEMO_DIR/scrun-root"

uid="$(id -u "$DEMO_USER")"
as_user() {
    (cd / && runuser -u "$DEMO_USER" -- env -i PATH=/usr/bin:/bin \
        HOME="$(getent passwd "$DEMO_USER" | cut -d: -f6)" XDG_RUNTIME_DIR="/run/user/$uid" \
        SLURM_CONF="$SLURM_CONF" PODMAN_IGNORE_CGROUPSV1_WARNING=1 "$@")
}
user_podman() { as_user podman --runtime "$DEMO_DIR/scrun" "$@"; }

echo "== sinfo: three compute nodes, each a machine of its own (own hostname, /run, pids)"
sinfo
srun -N3 --ntasks-per-node=1 sh -c 'echo "$(hostname): $(ls /run | wc -l) entries in /run, $(ls -d /proc/[0-9]* | wc -l) processes"' | sort
echo
echo "== as $DEMO_USER (uid $uid), rootless podman: podman --runtime scrun run --rm --uts=host $IMAGE ..."
user_podman run --rm --uts=host "$IMAGE" \
    sh -c 'echo "hello from job $SLURM_JOB_ID on node $(hostname), uid $(id -u) inside"' \
    | tee "$DEMO_DIR/out"
job_id="$(sed -n 's/.*from job \([0-9]*\).*/\1/p' "$DEMO_DIR/out")"
echo "-- Slurm's record of job $job_id: the user's own"
scontrol show job "$job_id" | grep -oE '(^| )(JobId|UserId|JobState|NodeList)=[^ ]+' | paste -sd' '
echo
echo "== as $DEMO_USER: the same container on three nodes (SCRUN_JOB_NUM_NODES=3 SCRUN_NTASKS=3)"
user_podman run --rm --uts=host -e SCRUN_JOB_NUM_NODES=3 -e SCRUN_NTASKS=3 "$IMAGE" \
    sh -c 'echo "task $SLURM_PROCID on $(hostname)"' | sort
echo
echo "== checkpoint on one node, restore on another (as root: CRIU needs root, and runc"
echo "   refuses to checkpoint an ordinary user's container)"
podman --runtime "$DEMO_DIR/scrun-root" run -d --uts=host --name counter "$IMAGE" \
    sh -c 'i=0; while true; do echo "$i $(hostname)"; i=$((i+1)); sleep 0.5; done' >/dev/null
sleep 3
podman --runtime "$DEMO_DIR/scrun-root" container checkpoint --export "$DEMO_DIR/ck.tar" counter >/dev/null
last="$(podman logs counter 2>/dev/null | tail -n 1)"
node="${last#* }"
echo "-- counted to ${last% *} on $node, checkpointed into $DEMO_DIR/ck.tar (the login host's /tmp)"
podman --runtime "$DEMO_DIR/scrun-root" rm counter >/dev/null
scontrol update "NodeName=$node" State=DRAIN Reason=pyscrun-demo
drained=$node
podman --runtime "$DEMO_DIR/scrun-root" container restore --import "$DEMO_DIR/ck.tar" \
    --name counter-restored >/dev/null
echo "-- $node drained, restored in a new job"
sleep 3
last="$(podman logs counter-restored 2>/dev/null | tail -n 1)"
echo "-- counting on: ${last% *} on ${last#* }"
podman --runtime "$DEMO_DIR/scrun-root" rm -f -t 0 counter-restored >/dev/null
echo
echo "== squeue (empty: every container's job has ended)"
squeue
