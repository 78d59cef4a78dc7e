"""Real bills against the ledger: billing-export readers and per-instance reconciliation.

Three exports are read, told apart by their header (column names compared
without case):
- AWS Cost and Usage Report CSV (`lineItem/ResourceId`, `lineItem/UnblendedCost`,
  `lineItem/UsageStartDate`, `resourceTags/user:broker-attempt`; the CUR 2.0
  snake-case names `line_item_resource_id`, ... and its `resource_tags` map too);
- GCP billing export to BigQuery, queried to CSV (`cost`, `currency`,
  `usage_start_time`, `labels` as JSON, `resource.name` or `resource_name`);
- Azure cost details CSV (`ResourceId`, `costInUsd` or `CostInBillingCurrency`,
  `Date`, `Tags`).
A bill line belongs to an instance by its `broker-attempt` tag or label, else by
the instance's name (the last part of the resource id). Lines of resources the
broker does not know (disks, buckets, other workloads) are counted, not shown.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING

from broker.state.model import multiply, to_decimal, total
from pricing.userio.bounds import MAX_MONEY
from pricing.userio.errors import UserInputError

if TYPE_CHECKING:
    from broker.reports.query import Line
    from broker.state import Attempt, InstanceRow

TAG_ATTEMPT = "broker-attempt"  # providers.base.TAG_ATTEMPT (not imported: no providers here)
TOLERANCE = Decimal("0.05")


class BillError(ValueError):
    """A billing export that cannot be read as one of the known formats."""


@dataclass(frozen=True, slots=True)
class BillLine:
    """One cost line of a billing export, in USD."""

    cloud: str  # aws | gcp | azure
    resource: str  # as the bill names it
    attempt_id: str  # from the broker-attempt tag or label; "" without one
    cost: Decimal
    start: datetime | None


@dataclass(frozen=True, slots=True)
class Bill:
    path: str
    format: str  # aws-cur | gcp-billing-export | azure-cost-details
    cloud: str
    lines: list[BillLine]


# Column names, lower case, in order of preference.
_FORMATS: dict[str, dict[str, tuple[str, ...]]] = {
    "aws-cur": {
        "resource": ("lineitem/resourceid", "line_item_resource_id"),
        "cost": ("lineitem/unblendedcost", "line_item_unblended_cost"),
        "start": ("lineitem/usagestartdate", "line_item_usage_start_date"),
        "currency": ("lineitem/currencycode", "line_item_currency_code"),
        "tags": ("resource_tags",),
    },
    "gcp-billing-export": {
        "resource": ("resource.name", "resource_name", "resource.global_name"),
        "cost": ("cost",),
        "start": ("usage_start_time",),
        "currency": ("currency",),
        "tags": ("labels",),
    },
    "azure-cost-details": {
        "resource": ("resourceid", "instanceid"),
        "cost": ("costinusd", "costinbillingcurrency", "pretaxcost"),
        "start": ("date", "usagedatetime"),
        "currency": ("billingcurrencycode", "billingcurrency", "currency"),
        "tags": ("tags",),
    },
}
_CLOUD = {"aws-cur": "aws", "gcp-billing-export": "gcp", "azure-cost-details": "azure"}


def read_bill(path: str | Path) -> Bill:
    """Read one billing export; BillError when its format or a value is not understood.

    The file is read by `pricing.userio.reading` (a regular file within the billing
    export size cap, strict UTF-8); every error names the file and, for a row, its line.
    """
    file = Path(path)
    try:
        return _read_bill(file)
    except UserInputError as exc:
        raise BillError(str(exc)) from None
    except csv.Error as exc:
        raise BillError(f"{file}: not CSV: {exc}") from None


def _read_bill(file: Path) -> Bill:
    import io

    from pricing.userio.reading import read_text

    with io.StringIO(read_text(file, "bill"), newline="") as handle:
        reader = csv.DictReader(handle)
        header = {name.strip().lower(): name for name in reader.fieldnames or ()}
        kind = _detect(header, file)
        columns = {
            role: next((header[n] for n in names if n in header), None)
            for role, names in _FORMATS[kind].items()
        }
        if columns["resource"] is None:
            raise BillError(f"{file}: a {kind} export without a resource id column")
        usd_column = columns["cost"] is not None and columns["cost"].lower() == "costinusd"
        tag_columns = [name for key, name in header.items() if key.startswith("resourcetags/")]
        lines = []
        start = reader.line_num + 1
        for row in reader:
            where, start = f"{file}:{start}", reader.line_num + 1
            currency = (row.get(columns["currency"] or "") or "USD").strip().upper()
            if currency != "USD" and not usd_column:
                raise BillError(f"{where}: cost in {currency}; broker plans in USD")
            tags = _tags(row.get(columns["tags"] or "") or "", where)
            for name in tag_columns:
                tags[_tag_key(name.split("/", 1)[1])] = row.get(name) or ""
            lines.append(
                BillLine(
                    cloud=_CLOUD[kind],
                    resource=(row.get(columns["resource"]) or "").strip(),
                    attempt_id=tags.get(TAG_ATTEMPT, "").strip(),
                    cost=_amount(row.get(columns["cost"] or ""), where),
                    start=_moment(row.get(columns["start"] or ""), where),
                )
            )
    return Bill(str(file), kind, _CLOUD[kind], lines)


def _detect(header: Mapping[str, str], file: Path) -> str:
    names = set(header)
    if names & {"lineitem/unblendedcost", "line_item_unblended_cost"}:
        return "aws-cur"
    if names & {"costinusd", "costinbillingcurrency", "pretaxcost"}:
        return "azure-cost-details"
    if {"cost", "usage_start_time"} <= names:
        return "gcp-billing-export"
    raise BillError(
        f"{file}: not a billing export broker reads (AWS CUR, GCP BigQuery billing "
        "export, Azure cost details); see docs/reports.md"
    )


def _tag_key(key: str) -> str:
    """`user:broker-attempt`, `user_broker_attempt`, `broker-attempt` -> `broker-attempt`."""
    key = key.strip().lower()
    for prefix in ("user:", "user_"):
        if key.startswith(prefix):
            key = key[len(prefix) :]
    return key.replace("_", "-")


def _tags(text: str, where: str) -> dict[str, str]:
    """Tags or labels: a JSON object, a JSON list of {key, value}, or Azure's
    `"k": "v","k2": "v2"` (a JSON object without its braces)."""
    text = text.strip()
    if not text:
        return {}
    try:
        data = json.loads(text if text[0] in "[{" else "{" + text + "}")
    except (json.JSONDecodeError, RecursionError):
        raise BillError(f"{where}: cannot read the tags {text[:40]!r}") from None
    if isinstance(data, list) and all(isinstance(item, dict) for item in data):
        data = {str(item.get("key", "")): item.get("value", "") for item in data}
    if not isinstance(data, dict):
        raise BillError(f"{where}: tags are not key-value pairs: {text[:40]!r}")
    return {_tag_key(str(k)): str(v) for k, v in data.items()}


def _amount(text: str | None, where: str) -> Decimal:
    try:
        amount = to_decimal((text or "0").strip() or "0")
    except ValueError:
        raise BillError(f"{where}: not an amount: {text!r}") from None
    if abs(amount) > Decimal(int(MAX_MONEY)):
        raise BillError(f"{where}: {text!r} is not a sane amount (at most {MAX_MONEY:,.0f} USD)")
    return amount


def _moment(text: str | None, where: str) -> datetime | None:
    """ISO-8601 (AWS, GCP's "... UTC"), or Azure's US-style MM/DD/YYYY; naive means UTC."""
    text = (text or "").strip()
    if not text:
        return None
    try:
        moment = datetime.fromisoformat(text.replace(" UTC", "+00:00").replace("Z", "+00:00"))
    except ValueError:
        try:
            moment = datetime.strptime(text, "%m/%d/%Y")
        except ValueError:
            raise BillError(f"{where}: not a date: {text!r}") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


# --- reconciliation ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Reconciled:
    """Planned (ledger) versus billed cost of one instance."""

    cloud: str
    instance: str
    job: str
    attempt: str
    planned: Decimal
    billed: Decimal | None  # None: no line of the bill is for this instance
    tolerance: Decimal = TOLERANCE

    @property
    def difference(self) -> Decimal | None:
        return None if self.billed is None else total((self.billed, -self.planned))

    @property
    def flag(self) -> str:
        """ "" when within tolerance; else what is wrong."""
        if self.billed is None:
            return "not billed"
        if self.planned == 0:
            return "" if self.billed == 0 else "not in the ledger"
        gap = abs(total((self.billed, -self.planned)))
        if gap > multiply(self.tolerance, self.planned):  # exact: no division
            return "over" if self.billed > self.planned else "under"
        return ""

    @property
    def difference_pct(self) -> Decimal | None:
        if self.billed is None or self.planned == 0:
            return None
        diff = total((self.billed, -self.planned))
        return (diff * 100 / self.planned).quantize(Decimal("0.01"))


@dataclass(frozen=True, slots=True)
class Reconciliation:
    rows: list[Reconciled]
    clouds: tuple[str, ...]  # the clouds the bills cover
    ignored_lines: int  # bill lines of resources the broker does not know
    ignored_usd: Decimal

    @property
    def flagged(self) -> list[Reconciled]:
        return [row for row in self.rows if row.flag]


def reconcile(
    bills: Sequence[Bill],
    instances: Iterable[InstanceRow],
    planned: Mapping[str, Decimal],
    jobs: Mapping[str, str],
    since: datetime | None = None,
    until: datetime | None = None,
    tolerance: Decimal = TOLERANCE,
) -> Reconciliation:
    """Planned versus billed per instance of the clouds the bills cover.

    `planned`: attempt id -> planned USD (the ledger's charges billed on the
    instance); `jobs`: attempt id -> job label. Bill lines outside [since, until)
    (by usage start) are left out.
    """
    clouds = tuple(sorted({bill.cloud for bill in bills}))
    known = [i for i in instances if i.cloud in clouds and i.attempt_id]
    by_attempt = {i.attempt_id: i for i in known}
    by_name = {(i.cloud, _name(i.provider_id)): i for i in known}
    billed: dict[tuple[str, str], list[Decimal]] = {}
    strays: dict[tuple[str, str], list[Decimal]] = {}  # tagged lines of unknown attempts
    ignored: list[Decimal] = []
    for bill in bills:
        for line in bill.lines:
            if line.start is not None and (
                (since is not None and line.start < since)
                or (until is not None and line.start >= until)
            ):
                continue
            found = by_attempt.get(line.attempt_id) or by_name.get(
                (line.cloud, _name(line.resource))
            )
            if found is not None:
                billed.setdefault((found.cloud, found.provider_id), []).append(line.cost)
            elif line.attempt_id:
                strays.setdefault((line.cloud, line.attempt_id), []).append(line.cost)
            else:
                ignored.append(line.cost)
    rows = []
    for instance in known:
        attempt = instance.attempt_id or ""
        amounts = billed.get((instance.cloud, instance.provider_id))
        if attempt not in planned and amounts is None:
            continue  # neither planned in this period nor billed
        rows.append(
            Reconciled(
                instance.cloud,
                instance.provider_id,
                jobs.get(attempt, ""),
                attempt,
                planned.get(attempt, Decimal(0)),
                None if amounts is None else total(amounts),
                tolerance,
            )  # fmt: skip
        )
    for (cloud, attempt), amounts in sorted(strays.items()):
        rows.append(Reconciled(cloud, "", "", attempt, Decimal(0), total(amounts), tolerance))
    rows.sort(key=lambda r: (r.cloud, r.job, r.instance, r.attempt))
    return Reconciliation(rows, clouds, len(ignored), total(ignored))


def planned_by_attempt(
    lines: Iterable[Line], attempts: Mapping[str, Attempt]
) -> dict[str, Decimal]:
    """What the ledger expects each attempt's instance to be billed: its hours, and the
    egress the instance sent itself (checkpoint writes). Inputs and checkpoint restores
    are billed on the bucket that sent them, not on the instance."""
    amounts: dict[str, list[Decimal]] = {}
    for line in lines:
        attempt = attempts.get(line.attempt_id or "")
        if attempt is None:
            continue
        here = (attempt.placed_on.cloud, attempt.placed_on.region)
        if line.hourly or (line.keys["cloud"], line.keys["region"]) == here:
            amounts.setdefault(attempt.id, []).append(line.amount)
    return {attempt: total(values) for attempt, values in amounts.items()}


def _name(resource: str) -> str:
    """The instance's own name: the last part of a provider id or resource id, lower case."""
    return resource.rstrip("/").rsplit("/", 1)[-1].lower()
