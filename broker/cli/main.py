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

import importlib  # noqa: E402
from collections.abc import Iterable  # noqa: E402

import typer  # noqa: E402

from broker import __version__  # noqa: E402
from broker.cli.exits import BAD_INPUT, INTERRUPTED, CliExit, known_failure, report  # noqa: E402
from pricing.userio.settings import ConfigError  # noqa: E402

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
    "submit": "jobs:submit",
    "queue": "jobs:queue",
    "status": "jobs:status",
    "cancel": "jobs:cancel",
    "logs": "jobs:logs",
    "run": "run:run",
    "demo": "run:demo",
    "cost-report": "report:cost_report",
    "check": "check:check",
    "pricing": "pricing:app",
    "sandbox": "sandbox:app",
    "pools": "pools:app",
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
) -> None:
    """Multi-cloud, cost-aware GPU job broker: one queue over AWS, GCP, Azure and on-prem."""


def main() -> None:
    """Console-script entry: run the app, turning CliExit into its exit code.

    Usage errors exit 2 (click's own handling), and so does a broken settings file
    (broker.toml, config.toml), wherever a setting is read; Ctrl-C exits 130.
    """
    command = sys.argv[1] if len(sys.argv) > 1 else ""
    app = build_app([command] if command in COMMANDS else COMMANDS)
    try:
        _warn_unknown_settings()
        app()
    except CliExit as exc:
        sys.exit(report(exc))
    except ConfigError as exc:
        sys.exit(report(CliExit(str(exc), BAD_INPUT)))
    except KeyboardInterrupt:
        print("broker: interrupted", file=sys.stderr)
        sys.exit(INTERRUPTED)
    except Exception as exc:  # a bad input or state file raised below the commands
        known = known_failure(exc)
        if known is None:
            raise
        sys.exit(report(known))


def _warn_unknown_settings() -> None:
    """One warning per key of broker.toml / config.toml that is no setting (a typo would
    otherwise be ignored silently); a settings file that is not TOML stops here."""
    from pricing.userio.settings import unknown_keys

    for warning in unknown_keys():
        print(f"broker: warning: {warning}", file=sys.stderr)


if __name__ == "__main__":
    main()
