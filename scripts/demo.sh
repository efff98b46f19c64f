#!/bin/bash
# make demo: a loopback Slurm cluster, and a container that podman runs through pyscrun
# as a Slurm job. Everything it starts is stopped again on the way out.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=/dev/null
. "${PYSCRUN_TEST_HOME:-/srv/pyscrun-test}/env.sh"

SLURM_CONF="$(bash "$REPO/scripts/cluster.sh" up 3 | tail -n 1 | sed 's/^export SLURM_CONF=//')"
export SLURM_CONF
trap 'bash "$REPO/scripts/cluster.sh" down >/dev/null 2>&1 || true' EXIT
# A closed pipe (make demo | head) or Ctrl-C ends the demo through its EXIT trap too.
trap 'exit 1' PIPE HUP INT TERM

DEMO_DIR="$(mktemp -d /tmp/pyscrun-demo.XXXXXX)"
# podman passes the runtime no environment to speak of: tell scrun where slurm.conf is.
cat >"$DEMO_DIR/scrun" <<WRAPPER
#!/bin/sh
exec "$REPO/.venv/bin/scrun" --root "$DEMO_DIR/root" -f "$SLURM_CONF" "\$@"
WRAPPER
chmod +x "$DEMO_DIR/scrun"

echo "== sinfo: three compute nodes, each a machine of its own (own hostname, /run, pids)"
sinfo
srun -N3 --ntasks-per-node=1 sh -c 'echo "$(hostname): $(ls /run | wc -l) entries in /run, $(ls -d /proc/[0-9]* | wc -l) processes"' | sort
echo
echo "== podman --runtime $DEMO_DIR/scrun run --rm --uts=host $PYSCRUN_TEST_IMAGE ..."
podman --runtime "$DEMO_DIR/scrun" run --rm --uts=host "$PYSCRUN_TEST_IMAGE" \
    sh -c 'echo "hello from job $SLURM_JOB_ID on node $(hostname) (nodelist $SLURM_JOB_NODELIST)"' \
    | tee "$DEMO_DIR/out"
job_id="$(sed -n 's/.*from job \([0-9]*\).*/\1/p' "$DEMO_DIR/out")"
echo
echo "== the same container on three nodes (SCRUN_JOB_NUM_NODES=3 SCRUN_NTASKS=3)"
podman --runtime "$DEMO_DIR/scrun" run --rm --uts=host -e SCRUN_JOB_NUM_NODES=3 \
    -e SCRUN_NTASKS=3 "$PYSCRUN_TEST_IMAGE" sh -c 'echo "task $SLURM_PROCID on $(hostname)"'
echo
echo "== Slurm's record of job $job_id"
scontrol show job "$job_id" | grep -E 'JobId=|JobState=|NodeList=|Command=|Comment='
echo
echo "== squeue (empty: every container's job has ended)"
squeue
rm -rf "$DEMO_DIR"
