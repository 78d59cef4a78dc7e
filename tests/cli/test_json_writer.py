"""write_json writes long lists item by item, encoding a shared list or mapping once;
its output must stay byte for byte what encoding the whole document gave."""

from __future__ import annotations

import io
import json
import math

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.cli.render import LONG_LIST, _json_ready, write_json

leaves = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5)
values = st.recursive(
    leaves,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.lists(inner, max_size=3).map(tuple)
        | st.dictionaries(st.text(max_size=3) | st.integers(0, 3), inner, max_size=3)
    ),
    max_leaves=8,
)


def reference(document) -> str:
    """write_json as it was: the whole document made JSON-ready, then each item of a
    long list encoded whole."""
    out = io.StringIO()
    ready = _json_ready(document)
    if isinstance(ready, dict) and any(
        isinstance(v, list) and len(v) > LONG_LIST for v in ready.values()
    ):
        compact = json.JSONEncoder(default=str, ensure_ascii=True).encode
        parts = []
        for key, value in ready.items():
            if isinstance(value, list) and len(value) > LONG_LIST:
                items = ",\n    ".join(compact(item) for item in value)
                parts.append(f"  {compact(key)}: [\n    {items}\n  ]")
            else:
                text = json.dumps(value, indent=2, default=str).replace("\n", "\n  ")
                parts.append(f"  {compact(key)}: {text}")
        out.write("{\n" + ",\n".join(parts) + "\n}\n")
    else:
        json.dump(ready, out, indent=2, default=str)
        out.write("\n")
    return out.getvalue()


def written(document) -> str:
    out = io.StringIO()
    write_json(document, out)
    return out.getvalue()


@settings(max_examples=60, deadline=None)
@given(
    shared=st.lists(values, min_size=1, max_size=3),
    items=st.lists(
        st.dictionaries(st.text(max_size=4) | st.integers(0, 2), values, max_size=4),
        min_size=1,
        max_size=4,
    ),
    extra=values,
    as_tuple=st.booleans(),
)
def test_a_long_list_is_written_as_when_encoded_whole(shared, items, extra, as_tuple):
    """Items (some holding the same list objects, some with integer keys or NaN) repeated
    past LONG_LIST, next to another value."""
    rows = []
    for i in range(LONG_LIST + 5):
        row = dict(items[i % len(items)])
        row["shared"] = shared[i % len(shared)]  # the same object in many rows
        row["own"] = [i, math.nan, (i, "x")]
        rows.append(row)
    document = {"jobs": tuple(rows) if as_tuple else rows, "meta": extra}
    assert written(document) == reference(document)


@given(values)
def test_a_short_document_is_written_as_before(document):
    assert written(document) == reference(document)


def test_the_jobs_of_a_shared_plan_get_the_documents_their_decisions_give(tmp_path):
    """`broker plan DIR -o json`'s documents: shared parts' lists, equal to each
    decision's own `as_dict` (feasible copies, infeasible ones with their hints)."""
    from datetime import UTC, datetime
    from pathlib import Path

    from broker.cli.inputs import offers_in_force
    from broker.cli.plan_run import _documents, _with_hints
    from broker.manifest.load import load_manifests
    from broker.planner.plan import plan_many

    text = (Path(__file__).resolve().parents[2] / "examples/jobs/llama-finetune.yaml").read_text()
    for i in range(LONG_LIST + 3):
        copy = text.replace("name: llama-ft", f"name: job-{i}")
        if i % 50 == 7:
            copy = copy.replace("max_price_per_hour: 40", "max_price_per_hour: 0.01")
        (tmp_path / f"job-{i}.yaml").write_text(copy)
    jobs = [m.spec for m in load_manifests([tmp_path]).manifests]
    index, now = offers_in_force(None, None, None).index, datetime(2026, 6, 1, tzinfo=UTC)
    decisions = [
        d if d.placements else _with_hints(d, job, index, now)
        for d, job in zip(plan_many(jobs, index, now, top=1), jobs, strict=True)
    ]
    assert sum(not d.placements for d in decisions) == 4
    documents = _documents(decisions)
    assert documents == [d.as_dict() for d in decisions]
    assert written({"jobs": documents}) == reference({"jobs": [d.as_dict() for d in decisions]})


@given(
    st.lists(
        st.floats() | st.sampled_from([0.0, -0.0, 1.0, 0.5]) | st.integers(-3, 3) | st.none(),
        max_size=30,
    ),
    st.sampled_from(["money", "figure", "count", "fixed"]),
)
def test_table_cells_format_each_float_once_as_each_would_be(values, kind):
    """A table column's cells (each distinct float formatted once) are the formatter's
    for every value: -0.0 (equal to 0.0, shown "-0.00"), NaN, ints among floats."""
    from broker.cli import formats
    from broker.cli.render import Column

    fmt = {
        "money": formats.Money(),
        "figure": formats.Figure(),
        "count": formats.Count(),
        "fixed": formats.Fixed(2),
    }[kind]
    shown = fmt.for_values(values)
    assert Column("x", "x", fmt).cells(values) == [shown(v) for v in values]
