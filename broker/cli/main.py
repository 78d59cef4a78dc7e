"""`broker` entry point: the root typer app and its sub-apps, one module per noun.

Heavy imports (pandas, cloud SDKs, rich) happen inside commands so that
`broker --help` stays instant.
"""

from __future__ import annotations

import os
import sys

# Typer's rich help costs ~0.25 s of imports; plain help keeps `broker --help` instant.
os.environ.setdefault("TYPER_USE_RICH", "0")
# broker uses no pydantic plugins; looking for them scans every installed package (~0.1 s).
os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")

import typer  # noqa: E402

from broker import __version__  # noqa: E402
from broker.cli import check, ci, estimate, jobs, offers, plan, pricing, run, schema, validate  # noqa: E402
from broker.cli import report as cost_report  # noqa: E402
from broker.cli.exits import INTERRUPTED, CliExit, report  # noqa: E402

app = typer.Typer(
    name="broker",
    help="Multi-cloud, cost-aware GPU job broker: one queue over AWS, GCP, Azure and on-prem.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
app.command("offers")(offers.offers)
app.command("validate")(validate.validate)
app.command("schema")(schema.schema)
app.command("plan")(plan.plan_command)
app.command("estimate")(estimate.estimate_command)
app.command("ci")(ci.ci)
app.command("submit")(jobs.submit)
app.command("queue")(jobs.queue)
app.command("status")(jobs.status)
app.command("cancel")(jobs.cancel)
app.command("logs")(jobs.logs)
app.command("run")(run.run)
app.command("demo")(run.demo)
app.command("cost-report")(cost_report.cost_report)
app.command("check")(check.check)
app.add_typer(pricing.app, name="pricing")


def _version(value: bool) -> None:
    if value:
        print(f"broker {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """Multi-cloud, cost-aware GPU job broker: one queue over AWS, GCP, Azure and on-prem."""


def main() -> None:
    """Console-script entry: run the app, turning CliExit into its exit code.

    Usage errors exit 2 (click's own handling); Ctrl-C exits 130.
    """
    try:
        app()
    except CliExit as exc:
        sys.exit(report(exc))
    except KeyboardInterrupt:
        print("broker: interrupted", file=sys.stderr)
        sys.exit(INTERRUPTED)


if __name__ == "__main__":
    main()
