"""`python -m pyscrun.node`: the node agent, in the user namespace it is asked for,
whose maps newuidmap and newgidmap write while the agent's modules load."""

import os

from pyscrun.node.userns import Entering

entering = Entering(os.environ)

from pyscrun.node.agent import cli  # noqa: E402

cli(entering)
