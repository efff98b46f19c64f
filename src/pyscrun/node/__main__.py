from pyscrun.node.agent import cli

cli()
