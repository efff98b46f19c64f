"""A signal to `scrun run` right after its handlers are set, while its start request
loads the anchor's protocol: the handler must find the module whole and forward the
signal, not fail with an internal error that leaves the container and its job behind
(seen when Ctrl-C came just as a queued run asked for its start)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

# In a fresh interpreter, so that the protocol module is not loaded yet. The tracer
# sends SIGINT at the first Python code of that module to run: its import's body when
# it is loaded only then, else its request function.
SCRIPT = textwrap.dedent("""
    import os, signal, sys
    from pyscrun import log
    from pyscrun.cli import lifecycle
    from pyscrun.errors import ScrunError

    class Store:
        def socket_path(self, container_id):
            return "/nonexistent/anchor.sock"

    class State:
        id = "c1"

    fired = []

    def tracer(frame, event, arg):
        if not fired and frame.f_code.co_filename.endswith("anchor/protocol.py"):
            fired.append(frame.f_code.co_name)
            os.kill(os.getpid(), signal.SIGINT)
        return None

    log.current = log.Logger()
    forwarded = lifecycle._forward_signals(Store(), State())
    sys.settrace(tracer)
    try:
        lifecycle.ask_anchor(Store(), State(), {"op": "start"})
    except ScrunError as err:
        print("start refused:", err)
    sys.settrace(None)
    print("fired in", fired, "forwarded", forwarded)
""")


def test_a_signal_while_run_asks_for_its_start_is_forwarded() -> None:
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert "start refused: cannot reach the anchor" in done.stdout, done.stdout
    assert "forwarded [2]" in done.stdout, done.stdout  # SIGINT, to the container
    assert "Error" not in done.stderr, done.stderr
