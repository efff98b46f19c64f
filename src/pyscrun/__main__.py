from pyscrun.cli.main import main

main()
