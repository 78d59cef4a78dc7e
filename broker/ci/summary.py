"""The result of `broker ci` as data, and as the Markdown posted on a pull request.

The table goes through the one renderer of the CLI (`broker.cli.render`), so that
the comment, `-o table`, `-o csv` and `-o json` show the same rows.
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass
from typing import Any

from broker.ci.changes import Revisions
from broker.ci.diff import CostDiff, JobChange
from broker.ci.policy import Rules, Violation, money
from broker.cli.render import Column, Output, render, usd


def dollars(value: Any) -> str:
    """`$1,234.50`; a missing cost (no feasible placement) is "no placement"."""
    return "no placement" if value is None else "$" + usd(value)


def signed(value: Any) -> str:
    """A difference with its sign: `+$12.00`, `-$3.50`, `$0.00`."""
    if value is None:
        return "-"
    sign = "+" if value > 0 else ("-" if value < 0 else "")
    return sign + "$" + usd(abs(value))


COLUMNS = (
    Column("job", "job"),
    Column("team", "team"),
    Column("file", "file"),
    Column("change", "change"),
    Column("before", "before", dollars, numeric=True),
    Column("after", "after", dollars, numeric=True),
    Column("difference", "difference", signed, numeric=True),
    Column("placement", "placement"),
)


@dataclass(frozen=True)
class Summary:
    """Everything `broker ci` found; the CLI decides the exit code from it."""

    revisions: Revisions
    scope: str
    diff: CostDiff
    rules: Rules
    violations: tuple[Violation, ...]
    errors: tuple[str, ...]  # head manifest errors, `file:line:column: field: message`
    notes: tuple[str, ...]  # what the reader should know (unreadable base versions)
    prices: str  # which catalog priced the jobs, and how old it is

    @property
    def infeasible(self) -> list[JobChange]:
        """New or changed jobs that have no feasible placement at head."""
        return [c for c in self.diff.changes if c.after is not None and not c.after.feasible]

    @property
    def passed(self) -> bool:
        return not (self.errors or self.infeasible or self.violations)

    def rows(self) -> list[dict[str, Any]]:
        """One row per changed job: exact values (None: no feasible placement on that side)."""
        return [_row(change) for change in self.diff.changes]

    def as_dict(self) -> dict[str, Any]:
        """The JSON document of `broker ci -o json`."""
        revs, diff = self.revisions, self.diff
        return {
            "passed": self.passed,
            "base": {"ref": revs.base_ref, "commit": revs.base, "merge_base": revs.merge_base},
            "head": {"ref": revs.head_ref, "commit": revs.head, "working_tree": revs.working_tree},
            "path": self.scope,
            "jobs": self.rows(),
            "total": {"before": diff.before, "after": diff.after, "difference": diff.difference},
            "all_jobs": {
                "count": diff.jobs_after,
                "before": diff.all_before,
                "after": diff.all_after,
                "percent": diff.percent if math.isfinite(diff.percent) else None,
            },
            "violations": [{"rule": v.rule, "message": v.message} for v in self.violations],
            "infeasible": [f"{c.current.spec.team}/{c.current.spec.name}" for c in self.infeasible],
            "errors": list(self.errors),
            "notes": list(self.notes),
            "prices": self.prices,
        }

    def table_rows(self) -> list[dict[str, Any]]:
        """The rows and a total row, for the human views."""
        diff = self.diff
        total = {
            "job": "total",
            "before": diff.before,
            "after": diff.after,
            "difference": diff.difference,
        }
        return [*self.rows(), total]

    def totals_line(self) -> str:
        diff = self.diff
        percent = (
            f", {diff.percent:+.1f}%"
            if math.isfinite(diff.percent)
            else (", from nothing" if diff.difference else "")
        )
        return (
            f"All {diff.jobs_after} job(s) under `{self.scope}`: {money(diff.all_before)} before, "
            f"{money(diff.all_after)} after ({signed(diff.difference)}{percent})."
        )

    def verdict_lines(self) -> list[str]:
        """What failed, one Markdown line each (empty when everything passed)."""
        lines = [f"- `{v.rule}`: {v.message}" for v in self.violations]
        for change in self.infeasible:
            job = change.current
            lines.append(
                f"- no feasible placement for {job.spec.team}/{job.spec.name} "
                f"({job.path}:{job.line}): `broker plan {job.path}` says what to relax"
            )
        if self.errors:
            lines.append(f"- {len(self.errors)} manifest error(s), listed below")
        return lines

    def markdown(self) -> str:
        """The pull-request comment / step summary."""
        revs, out = self.revisions, io.StringIO()
        head = f"`{revs.head_ref}` (`{revs.head[:12]}`" + (
            ", working tree)" if revs.working_tree else ")"
        )
        out.write("## broker: expected cost of this change\n\n")
        out.write(
            f"`{revs.base_ref}` (merge base `{revs.merge_base[:12]}`) → {head}, "
            f"manifests under `{self.scope}`. Prices: {self.prices}\n\n"
        )
        if self.diff.changes:
            render(self.table_rows(), COLUMNS, Output.markdown, stream=out)
        else:
            out.write("No job changes its expected cost.\n")
        out.write(f"\n{self.totals_line()}\n\n")
        rules = "; ".join(self.rules.describe()) or "none"
        failed = self.verdict_lines()
        out.write(f"**{'Failed' if failed else 'Passed'}** (rules: {rules})\n")
        for line in failed:
            out.write(f"{line}\n")
        if self.errors:
            out.write("\n```\n" + "\n".join(self.errors) + "\n```\n")
        for note in self.notes:
            out.write(f"\n{note}\n")
        return out.getvalue()


def _row(change: JobChange) -> dict[str, Any]:
    job = change.current
    before, after = change.before, change.after
    where = [e.where for e in (before, after) if e is not None]
    return {
        "job": job.spec.name,
        "team": job.spec.team,
        "file": f"{job.path}:{job.line}",
        "change": change.kind,
        "before": None if before is not None and not before.feasible else change.before_cost,
        "after": None if after is not None and not after.feasible else change.after_cost,
        "difference": change.difference,
        "placement": where[0] if len(set(where)) == 1 else " → ".join(where),
    }
