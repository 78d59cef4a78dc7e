"""`broker pools import --slurm`: write pools.yaml entries from a running Slurm cluster."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from broker.cli.exits import BAD_INPUT, PROVIDER, fail
from broker.cli.inputs import number_flag, output_path

app = typer.Typer(
    help="On-prem GPU pools (pools.yaml): import them from the cluster you run.",
    no_args_is_help=True,
    add_completion=False,
)


@app.command("import")
def import_pools(
    slurm: bool = typer.Option(
        False, "--slurm", help="Read the pools from Slurm (sinfo, scontrol show topology)."
    ),
    login: str = typer.Option(
        "", "--login", help="Run the Slurm commands on this login node over SSH: user@host."
    ),
    port: int = typer.Option(22, "--port", help="SSH port of the login node."),
    identity_file: str = typer.Option("", "--identity-file", help="SSH key for the login node."),
    known_hosts: str = typer.Option(
        "", "--known-hosts", help="known_hosts file holding the login node's key."
    ),
    region: str = typer.Option("onprem", "--region", help="location.region of the pools."),
    country: str = typer.Option("US", "--country", help="location.country (ISO code)."),
    cost: float = typer.Option(
        1.0, "--cost-per-gpu-hour", help="Amortised USD per GPU-hour (edit per pool later)."
    ),
    output: Path = typer.Option(
        None, "--output", "-o", help="Write to this file (it must not exist) [default: stdout]."
    ),
) -> None:
    """Write one pool per partition and node shape (GPU type and count, including MIG
    types, CPUs, memory), with each node's leaf switch from the topology. The file
    loads as it is; set the cost and country Slurm cannot know."""
    from onprem.executors.options import OptionError, SlurmOptions
    from onprem.executors.shell import LocalShell, SshShell
    from onprem.slurm_import import read_cluster
    from providers.errors import ProviderError

    if not slurm:
        fail("say where the pools come from: --slurm", BAD_INPUT)
    if output is not None and output.exists():
        fail(f"{output} exists: choose a new file (the import never overwrites)", BAD_INPUT)
    if output is not None:
        output_path(output, "--output")
    try:
        options = SlurmOptions(
            login=login, port=port, identity_file=identity_file, known_hosts=known_hosts
        )
    except OptionError as exc:
        fail(f"--{exc.field.replace('_', '-')}: {exc}", BAD_INPUT)
    from pricing.userio.bounds import MAX_PRICE_PER_HOUR

    number_flag(cost, "--cost-per-gpu-hour", 0, MAX_PRICE_PER_HOUR)
    if not cost > 0:
        fail("--cost-per-gpu-hour must be more than 0 (0 means not known)", BAD_INPUT)
    # Every flag is checked before the cluster is asked (sinfo, an SSH login): a pool of
    # the shape Slurm gives, with the location and cost given, must load.
    _check(_rendered([_sample_pool()], region, country, cost, {}, "a check"), region, country)
    for flag, value in (("--identity-file", identity_file), ("--known-hosts", known_hosts)):
        if value:
            _readable(Path(value).expanduser(), flag)
    shell = LocalShell()
    if options.login:
        user, _, host = options.login.partition("@")
        shell = SshShell(host, user, port, identity_file, known_hosts)
    try:
        pools = read_cluster(shell)
    except ProviderError as exc:
        fail(str(exc), PROVIDER)
    finally:
        shell.close()
    if not pools:
        fail("the cluster has no node with GPU gres (sinfo shows none)", PROVIDER)
    extra: dict[str, object] = {}
    if options.login:
        extra = {"login": options.login, "port": port}
        extra.update(
            {k: v for k, v in (("identity_file", identity_file), ("known_hosts", known_hosts)) if v}
        )
    text = _rendered(pools, region, country, cost, extra, options.login or "this machine's Slurm")
    _check(text, region, country)
    if output is None:
        sys.stdout.write(text)
        return
    from pricing.userio.atomic import atomic_write_text

    try:
        atomic_write_text(output, text)
    except OSError as exc:
        fail(f"cannot write {output}: {exc.strerror or exc}", BAD_INPUT)
    print(f"wrote {len(pools)} pool(s) to {output}", file=sys.stderr)


def _sample_pool():
    """A pool of the shape `read_cluster` returns, to check the flags against."""
    from onprem.slurm_import import ImportedPool

    return ImportedPool("check", "gpu", "A100", "a100", 8, 64, 512.0, (("node1", ""),))


def _readable(path: Path, flag: str) -> None:
    """Exit 2 naming `flag` unless `path` is a regular file (before SSH is tried)."""
    from pricing.userio.errors import UserInputError
    from pricing.userio.reading import check_regular

    try:
        check_regular(path)
    except UserInputError as exc:
        fail(f"{flag}: {exc.one_line()}", BAD_INPUT)


def _rendered(pools, region: str, country: str, cost: float, extra: dict, source: str) -> str:
    from onprem.slurm_import import render

    return render(
        pools,
        region=region,
        country=country.upper(),
        cost_per_gpu_hour=cost,
        executor_extra=extra,
        source=source,
    )


def _check(text: str, region: str, country: str) -> None:
    """The written text loads as a pools file; a bad --region or --country exits 2."""
    import tempfile

    from onprem.inventory import load_pools
    from pricing.userio.errors import UserInputError

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "pools.yaml"
        path.write_text(text)
        try:
            load_pools(path)
        except UserInputError as exc:
            fail(
                f"--region {region!r} / --country {country!r} do not make a valid file: "
                f"{exc.one_line()}",
                BAD_INPUT,
            )
