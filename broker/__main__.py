"""`python -m broker` runs the CLI."""

from broker.cli.main import main

main()
