"""`python -m pyscrun.node`: the node agent, in the user namespace it is asked for,
whose maps newuidmap and newgidmap write while the agent's modules load, as the
sealed copy of its runtime is made (node/early.py)."""

import os

from pyscrun.node.userns import Entering

entering = Entering(os.environ)

from pyscrun.node.early import EarlyStart  # noqa: E402

early = EarlyStart(os.environ)

from pyscrun.node.entry import cli  # noqa: E402

cli(entering, early)
