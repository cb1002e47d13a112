"""`python -m ablate.cli`: the `ablate` command, where no console script is on the PATH."""

from ablate.cli import main

main()
