"""The `broker` console script: answers `broker` / `broker --help` from a cache.

Importing typer alone costs 0.1-0.2 s on our machines, more than the whole budget
of `broker --help`. The root help is therefore rendered by typer once, saved
under the user cache directory with a key made of the broker version and the
size and modification time of every CLI module, and printed from there until
one of them changes. `broker plan FILE [-o FORMAT]` runs without typer
(broker.cli.direct); everything else goes straight to `broker.cli.main`.
"""

from __future__ import annotations

import os
import sys

ROOT_HELP = ([], ["--help"], ["-h"])


def help_cache_path() -> str:
    """Where the rendered root help lives for the current CLI sources (os.path, not
    pathlib: this runs before anything else is imported)."""
    import zlib

    from broker import __version__
    from pricing.userio.dirs import user_dir

    cli = os.path.dirname(os.path.abspath(__file__))
    parts = [__version__]
    for name in sorted(os.listdir(cli)):
        if name.endswith(".py"):
            stat = os.stat(os.path.join(cli, name))
            parts.append(f"{name}:{stat.st_size}:{stat.st_mtime_ns}")
    key = f"{zlib.crc32('|'.join(parts).encode()):08x}"
    return os.path.join(user_dir("cache"), f"help-{key}.txt")


def render_root_help() -> str:
    """The root help exactly as typer prints it (the slow path, and the cache's source)."""
    import typer

    from broker.cli.main import app

    command = typer.main.get_command(app)
    with command.make_context("broker", [], resilient_parsing=True) as context:
        return command.get_help(context) + "\n"


def main() -> None:
    if sys.argv[1:] in ROOT_HELP:
        path = help_cache_path()
        try:
            with open(path, encoding="utf-8") as handle:
                text = handle.read()
        except OSError:
            from pricing.userio.atomic import atomic_write_text

            text = render_root_help()
            try:
                atomic_write_text(path, text, durable=False)
            except OSError:
                pass  # a read-only cache costs speed, never the answer
        sys.stdout.write(text)
        return
    import gc

    # `broker plan FILE [-o F]` runs with the cyclic collector off from its first import
    # to its exit (broker.collector: its scans over the imports alone cost ~0.01 s).
    gc.disable()
    from broker.cli.direct import recognise

    plan = recognise(sys.argv[1:])  # straight, without typer
    if plan is not None:
        from broker.cli.direct import run as run_plan

        sys.exit(run_plan(plan))
    gc.enable()
    from broker.cli.main import main as run

    run()
