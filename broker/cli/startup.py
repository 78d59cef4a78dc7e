"""What every command does before it runs, without typer (so that `broker plan FILE`
can do it too: broker.cli.direct): the environment defaults, the quiet log, and the
warning for each unknown key of the settings files."""

from __future__ import annotations

import os
import sys

ENVIRONMENT_DEFAULTS = {
    # Typer's rich help costs ~0.25 s of imports; plain help keeps `broker --help` instant.
    "TYPER_USE_RICH": "0",
    # broker uses no pydantic plugins; looking for them scans every installed package (~0.1 s).
    "PYDANTIC_DISABLE_PLUGINS": "__all__",
}


def environment_defaults() -> None:
    """Set `ENVIRONMENT_DEFAULTS` where the environment does not say otherwise."""
    for name, value in ENVIRONMENT_DEFAULTS.items():
        os.environ.setdefault(name, value)


def quiet_logs(verbose: bool) -> None:
    """No library's log or warning reaches the terminal (azure-identity writes a page
    when it finds no credentials), unless --verbose: then every INFO line, on stderr."""
    import logging

    logger = logging.getLogger()
    if verbose:
        if not any(type(h) is logging.StreamHandler for h in logger.handlers):
            handler = logging.StreamHandler(sys.stderr)
            handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
            logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        return
    logging.captureWarnings(True)  # warnings.warn from SDKs: into the quiet log too
    if not any(isinstance(h, logging.NullHandler) for h in logger.handlers):
        logger.addHandler(logging.NullHandler())  # no "last resort" printing to stderr


def warn_unknown_settings() -> None:
    """One warning per key of broker.toml / config.toml that is no setting (a typo would
    otherwise be ignored silently); a settings file that is not TOML stops here."""
    from pricing.userio.settings import unknown_keys

    for warning in unknown_keys():
        print(f"broker: warning: {warning}", file=sys.stderr)
