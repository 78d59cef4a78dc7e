"""`broker ci --base REF [PATH]`: validate every manifest, cost the change, enforce the rules.

The Markdown summary goes to stdout (`-o table|json|csv` for the other views), to
`--comment-file` for a pull-request comment, and is appended to
`$GITHUB_STEP_SUMMARY` when that is set. Exit codes: 2 bad manifests (or a bad
flag, policy file or git ref), 3 a new or changed job has no feasible placement,
4 a rule is broken; the first that applies wins.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from broker.cli.exits import BAD_INPUT, FAILED, NO_PLACEMENT, OVER_BUDGET, fail
from broker.cli.inputs import output_path
from broker.cli.options import (
    CatalogOption,
    OverlaysOption,
    PoolsOption,
    offers_in_force,
    split_list,
)
from broker.cli.render import Output, render
from broker.cli.session import PolicyOption, StateOption, load_policy_option

if TYPE_CHECKING:
    from broker.ci.changes import Changeset
    from broker.ci.policy import Rules
    from broker.ci.summary import Summary


def ci(
    path: Path = typer.Argument(
        Path("."), help="Where the manifests are in the repository (a directory or a file)."
    ),
    base: str = typer.Option(
        ..., "--base", help="The branch the change goes into, e.g. origin/main.", show_default=False
    ),
    head: str = typer.Option(
        "HEAD", "--head", help="The change; HEAD reads the working tree, any other ref its commit."
    ),
    comment_file: Path = typer.Option(
        None, "--comment-file", help="Also write the Markdown summary here.", show_default=False
    ),
    max_increase: str = typer.Option(
        None,
        "--max-increase",
        help="Fail when the total rises by more: USD (250) or percent of the base total (10%).",
        show_default=False,
    ),
    max_job_cost: float = typer.Option(
        None,
        "--max-job-cost",
        help="Fail when a new or changed job is expected to cost more (USD).",
        show_default=False,
    ),
    allowed_regions: list[str] = typer.Option(
        None,
        "--allowed-regions",
        help="Region globs placements must fall in (us-*,europe-*).",
        show_default=False,
    ),
    allowed_clouds: list[str] = typer.Option(
        None,
        "--allowed-clouds",
        help="Cloud globs placements must fall in (aws,gcp).",
        show_default=False,
    ),
    require_checkpoint_for_spot: bool = typer.Option(
        None,
        "--require-checkpoint-for-spot/--no-require-checkpoint-for-spot",
        help="Fail when a job that may run on spot has no checkpoint [default: on].",
        show_default=False,
    ),
    policy: Path = PolicyOption,
    output: Output = typer.Option(Output.markdown, "--output", "-o", help="Output format."),
    catalog: Path = CatalogOption,
    pools: Path = PoolsOption,
    overlays: Path = OverlaysOption,
    state: str = StateOption,
) -> None:
    """Cost a change to job manifests between --base and HEAD; fail on broken manifests or rules.

    Exit 2 bad manifests, 3 a job with no feasible placement, 4 a rule broken.
    """
    from broker.ci.changes import collect, revisions
    from broker.ci.git import GitError

    flags = {
        "max_increase": max_increase,
        "max_job_cost": max_job_cost,
        "allowed_regions": split_list(allowed_regions) or None,
        "allowed_clouds": split_list(allowed_clouds) or None,
        "require_checkpoint_for_spot": require_checkpoint_for_spot,
    }
    if comment_file is not None:
        output_path(comment_file, "--comment-file", inputs=(policy, catalog, pools, overlays))
    rules = _rules(policy, flags)
    try:
        changeset = collect(path, revisions(path, base, head))
    except GitError as exc:
        fail(str(exc), BAD_INPUT)
    summary = _summarise(changeset, rules, offers_in_force(catalog, pools, overlays), state)
    text = summary.markdown()
    _publish(text, comment_file)
    _show(summary, text, output)
    _exit(summary)


def _show(summary: Summary, markdown: str, output: Output) -> None:
    """The summary on stdout: as posted (Markdown), or its rows in another format."""
    from broker.ci.summary import COLUMNS

    if output == Output.markdown:
        sys.stdout.write(markdown)
    elif output == Output.json:
        import json

        json.dump(summary.as_dict(), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:  # CSV keeps to the job rows (the notes go to stderr); the table adds the total
        rows = summary.rows() if output == Output.csv else summary.table_rows()
        notes = [summary.totals_line(), *summary.verdict_lines(), *summary.notes]
        render(rows, COLUMNS, output, notes=notes)


def _rules(policy: Path | None, flags: dict) -> Rules:
    """The policy file's `ci:` rules with the flags given over them; mistakes exit 2."""
    from broker.ci.policy import cloud_glob, load_rules, parse_limit
    from pricing.userio.errors import UserInputError
    from pricing.userio.settings import resolve_path

    load_policy_option(policy)  # the whole file must be valid, not only its ci: section
    try:
        rules = load_rules(resolve_path("policy", policy, default_file="policy.yaml"))
    except UserInputError as exc:
        fail(str(exc), BAD_INPUT)
    if flags["max_increase"] is not None:
        try:
            flags["max_increase"] = parse_limit(flags["max_increase"])
        except ValueError as exc:
            fail(f"--max-increase: {exc}", BAD_INPUT)
    for glob in flags["allowed_clouds"] or ():
        try:
            cloud_glob(glob)
        except ValueError as exc:
            fail(f"--allowed-clouds: {exc}", BAD_INPUT)
    if flags["max_job_cost"] is not None:
        from broker.cli.inputs import number_flag
        from pricing.userio.bounds import MAX_MONEY

        number_flag(flags["max_job_cost"], "--max-job-cost", 0, MAX_MONEY)
    return rules.over(flags)


def _summarise(changeset: Changeset, rules: Rules, view, state: str | None) -> Summary:
    """The change costed: every job of both revisions in one batch plan, an `auto`
    runtime learned from the history in `state` (none there: 1 h), as `broker plan` does."""
    from broker.ci.diff import cost_diff
    from broker.ci.policy import check
    from broker.ci.summary import Summary
    from broker.cli.estimate import prices
    from broker.cli.plan_run import learned_runtimes
    from broker.clock import SystemClock
    from broker.estimate import estimate

    head, base = changeset.head, changeset.base
    manifests = [*head.manifests, *base.manifests]
    specs = learned_runtimes([m.spec for m in manifests], state)
    estimates = estimate(manifests, view.index, SystemClock().now(), specs)
    at_head, at_base = estimates[: len(head.manifests)], estimates[len(head.manifests) :]
    changed = changeset.changed_paths
    after = [e for e in at_head if e.path in changed]
    diff = cost_diff(at_base, after, at_head, unreadable={e.path for e in head.errors})
    notes = tuple(
        f"The base version of `{path}` does not load ({count} error(s)); its jobs count as new."
        for path, count in _count_by_path(base.errors).items()
    )
    return Summary(
        revisions=changeset.revisions,
        scope=changeset.scope,
        diff=diff,
        rules=rules,
        violations=tuple(check(diff, rules)),
        errors=tuple(e.one_line() for e in head.errors),
        notes=notes,
        prices=prices(view),
    )


def _count_by_path(errors) -> dict[Path, int]:
    counts: dict[Path, int] = {}
    for error in errors:
        counts[error.path] = counts.get(error.path, 0) + 1
    return counts


def _publish(text: str, comment_file: Path | None) -> None:
    """Write the comment file and append to the GitHub step summary; say where on stderr."""
    targets = [(comment_file, "w")] if comment_file else []
    if os.environ.get("GITHUB_STEP_SUMMARY"):
        targets.append((Path(os.environ["GITHUB_STEP_SUMMARY"]), "a"))
    from pricing.userio.atomic import atomic_write_text

    for target, mode in targets:
        try:
            if mode == "w":  # the comment file: all or nothing, its folder made
                atomic_write_text(target, text)
            else:
                with target.open(mode, encoding="utf-8") as handle:
                    handle.write(text + "\n")
        except OSError as exc:
            fail(f"cannot write the summary to {target}: {exc.strerror}", FAILED)
        print(f"summary written to {target}", file=sys.stderr)


def _exit(summary: Summary) -> None:
    """Say what failed on stderr and exit with the code of the first kind of failure."""
    for error in summary.errors:
        print(error, file=sys.stderr)
    for violation in summary.violations:
        print(f"policy {violation.rule}: {violation.message}", file=sys.stderr)
    if summary.errors:
        fail(f"{len(summary.errors)} error(s) in manifests", BAD_INPUT)
    if summary.infeasible:
        jobs = ", ".join(f"{c.current.spec.team}/{c.current.spec.name}" for c in summary.infeasible)
        fail(f"no feasible placement for: {jobs}", NO_PLACEMENT)
    if summary.violations:
        rules = ", ".join(dict.fromkeys(v.rule for v in summary.violations))
        fail(f"{len(summary.violations)} policy violation(s): {rules}", OVER_BUDGET)
    print("broker ci: passed", file=sys.stderr)
