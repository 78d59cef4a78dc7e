"""`python -m broker` runs the CLI."""

from broker.cli.entry import main

main()
