"""Set-up installs what is missing and leaves every running service as it was."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

from tests.integration.harness import REPO


def test_installing_leaves_a_daemon_it_did_not_start_running(tmp_path: Path) -> None:
    """A site's own slurmctld that (re)starts while packages are installed is not
    stopped. apt-get and dpkg-query are stand-ins here (a mock, named as such: a real
    installation cannot be made to race a site's daemon on purpose)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    daemon = bin_dir / "slurmctld"
    shutil.copy("/bin/sleep", daemon)
    installed = tmp_path / "installed"
    (bin_dir / "apt-get").write_text(
        "#!/bin/sh\n"
        f"[ \"$1\" = install ] || exit 0\n"
        # The site's daemon restarts (by its own supervisor) during the installation.
        f"setsid {daemon} 1000 </dev/null >/dev/null 2>&1 &\n"
        f"echo $! > {tmp_path / 'daemon.pid'}\n"
        f"touch {installed}\n")
    (bin_dir / "dpkg-query").write_text(
        f"#!/bin/sh\n[ -e {installed} ] && echo installed || echo not-installed\n")
    for tool in ("apt-get", "dpkg-query"):
        (bin_dir / tool).chmod(0o755)
    # DAEMONS as scripts/setup.sh once set it, for the list of daemons to stop.
    script = (f". {REPO / 'scripts' / 'lib.sh'}; PACKAGES=(pyscrun-fake-package); "
              "DAEMONS=(munged slurmctld slurmd slurmdbd); "
              f"APT_LOG={tmp_path / 'apt.log'}; install_missing")
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"},
                          check=False)
    pid = int((tmp_path / "daemon.pid").read_text())
    try:
        assert done.returncode == 0, done.stderr
        assert Path(f"/proc/{pid}").exists(), "set-up stopped a daemon it did not start"
    finally:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
