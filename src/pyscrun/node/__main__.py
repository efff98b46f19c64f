"""The node agent's program (node.agent_command): the task in the user namespace it is
asked for, whose maps newuidmap and newgidmap write while the agent's modules load,
as (where the runtime would copy itself) a sealed copy of it is made: node/early.py."""

import gc
import os

# No collection while the agent loads and brings its container up (a millisecond and
# more of its start, and a guard forked meanwhile shares what collections write): the
# agent resumes them once the container may start (node/agent.py).
gc.disable()

from pyscrun.node.userns import Entering  # noqa: E402

entering = Entering(os.environ)

from pyscrun.node.early import EarlyStart  # noqa: E402

early = EarlyStart(os.environ, entering)

from pyscrun.node.entry import cli  # noqa: E402

cli(entering, early)
