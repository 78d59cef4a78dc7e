"""`broker` entry point: the root typer app and its sub-apps, one module per noun.

Heavy imports (pandas, cloud SDKs, rich) happen inside commands so that
`broker --help` stays instant.
"""

from __future__ import annotations

import sys

from broker.cli.startup import environment_defaults, quiet_logs, warn_unknown_settings

environment_defaults()  # before typer is imported: it reads TYPER_USE_RICH

import importlib  # noqa: E402
from collections.abc import Iterable  # noqa: E402

import typer  # noqa: E402

from broker import __version__  # noqa: E402
from broker.cli.exits import exit_code  # noqa: E402
from broker.cli.inputs import check_arguments  # noqa: E402

# Every command, in help order: its module under broker.cli and the function (or the
# sub-app) in it. A module is imported only when its command runs, or for the whole
# app (the root help): `broker plan` need not import every other command (~0.04 s).
COMMANDS: dict[str, str] = {
    "offers": "offers:offers",
    "validate": "validate:validate",
    "schema": "schema:schema",
    "import": "importer:app",
    "plan": "plan:plan_command",
    "estimate": "estimate:estimate_command",
    "ci": "ci:ci",
    "submit": "submit:submit",
    "rerun": "submit:rerun",
    "jobs": "jobs:jobs",
    "queue": "jobs:queue",
    "status": "status:status",
    "cancel": "status:cancel",
    "logs": "status:logs",
    "run": "run:run",
    "demo": "demo:demo",
    "cost-report": "report:cost_report",
    "check": "check:check",
    "pricing": "pricing:app",
    "sandbox": "sandbox:app",
    "pools": "pools:app",
    "metrics": "metrics:app",
    "state": "state:app",
    "simulate": "simulate:simulate",
}


def build_app(commands: Iterable[str] = COMMANDS) -> typer.Typer:
    """The root app with `commands` (default: all of them)."""
    app = typer.Typer(
        name="broker",
        help="Multi-cloud, cost-aware GPU job broker: one queue over AWS, GCP, Azure and on-prem.",
        no_args_is_help=True,
        add_completion=False,
        rich_markup_mode=None,
        pretty_exceptions_enable=False,
        context_settings={"help_option_names": ["-h", "--help"]},
    )
    for name in commands:
        module, attribute = COMMANDS[name].split(":")
        target = getattr(importlib.import_module(f"broker.cli.{module}"), attribute)
        if isinstance(target, typer.Typer):
            app.add_typer(target, name=name)
        else:
            app.command(name)(target)
    app.callback()(root)
    return app


def __getattr__(name: str) -> typer.Typer:
    """`broker.cli.main.app`: the whole app (what the root help shows)."""
    if name == "app":
        return build_app()
    raise AttributeError(name)


def _version(value: bool) -> None:
    if value:
        print(f"broker {__version__}")
        raise typer.Exit()


def root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
    verbose: bool = typer.Option(
        False,
        "--verbose",
        "-v",
        help="Show the log of broker and of the cloud SDKs on stderr (quiet by default).",
    ),
) -> None:
    """Multi-cloud, cost-aware GPU job broker: one queue over AWS, GCP, Azure and on-prem."""
    quiet_logs(verbose)


def main() -> None:
    """Console-script entry: run the command, and turn whatever ends it into its exit
    code through the one table in `broker.cli.exits` (usage errors and broken settings
    files exit 2, provider errors 5, Ctrl-C 130, a closed stdout quietly 0)."""
    command = next((arg for arg in sys.argv[1:] if not arg.startswith("-")), "")
    try:
        check_arguments(sys.argv[1:])  # before a command is built: nothing runs for them
        app = build_app([command] if command in COMMANDS else COMMANDS)
        warn_unknown_settings()
        code = _invoke(app, sys.argv[1:])
        sys.stdout.flush()  # a reader that went away shows here, not at exit
    except BaseException as exc:  # exit_code raises again what it does not know
        code = exit_code(exc)
    sys.exit(code)


def _invoke(app: typer.Typer, args: list[str]) -> int:
    """Run the command without click's own handling of errors, Ctrl-C and broken pipes
    (its standalone mode exits 1 on both), so that `broker.cli.exits` decides them all."""
    command = typer.main.get_command(app)
    with command.make_context("broker", args) as context:
        result = command.invoke(context)
    return result if isinstance(result, int) and not isinstance(result, bool) else 0


if __name__ == "__main__":
    main()
