"""broker.ci below the CLI: git plumbing, the change set, the cost diff and the rules."""

from __future__ import annotations

import functools
import math
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.ci import git
from broker.ci.changes import collect, revisions
from broker.ci.diff import CostDiff, JobChange, cost_diff
from broker.ci.policy import Limit, Rules, check, load_rules, parse_limit
from broker.estimate import JobEstimate, estimate
from broker.manifest.load import parse_manifest_text
from broker.offers import load_offers
from broker.planner.decision import CostEstimate, Placement
from broker.spec import JobSpec
from pricing.userio.errors import UserInputError
from tests.fakes.gitrepo import GitRepo, isolate_git, job
from tests.fakes.offers import write_catalog

NOW = datetime(2026, 11, 21, tzinfo=UTC)


@pytest.fixture
def repo(tmp_path, monkeypatch) -> GitRepo:
    """main: keep, grow, gone (+ a CI file that is not a manifest); branch `change` off it."""
    isolate_git(monkeypatch)
    repo = GitRepo(tmp_path / "repo")
    repo.write("jobs/keep.yaml", job("keep", gpu="T4:1", hours=5))
    repo.write("jobs/grow.yaml", job("grow", hours=10))
    repo.write("jobs/gone.yaml", job("gone", team="cv", gpu="T4:1"))
    repo.write(".github/workflows/ci.yml", "on: push\n")
    repo.commit("base")
    repo.git("switch", "-q", "-c", "change")
    return repo


def test_toplevel_and_unknown_things_are_clear_errors(repo, tmp_path):
    assert git.toplevel(repo.root / "jobs") == repo.root.resolve()
    assert git.toplevel(repo.root / "jobs" / "keep.yaml") == repo.root.resolve()
    outside = tmp_path / "plain"
    outside.mkdir()
    with pytest.raises(git.GitError, match="is not inside a git work tree"):
        git.toplevel(outside)
    with pytest.raises(git.GitError, match="no such file or directory"):
        git.toplevel(tmp_path / "missing" / "x.yaml")
    with pytest.raises(git.GitError, match=r"unknown git revision 'origin/nope'.*fetch-depth: 0"):
        git.commit_of(repo.root, "origin/nope")
    assert git.commit_of(repo.root, "main") == repo.git("rev-parse", "main")


def test_changed_files_committed_and_in_the_working_tree(repo):
    base = repo.git("rev-parse", "main")
    repo.write("jobs/grow.yaml", job("grow", hours=20))
    repo.remove("jobs/gone.yaml")
    repo.git("mv", "jobs/keep.yaml", "jobs/kept.yaml")
    repo.write("jobs/new.yaml", job("new"))
    head = repo.commit("change")
    committed = git.changed_files(repo.root, base, head, ".")
    assert [(c.status, c.path) for c in committed] == [
        ("D", "jobs/gone.yaml"),
        ("M", "jobs/grow.yaml"),
        ("D", "jobs/keep.yaml"),  # a rename is a deletion and an addition
        ("A", "jobs/kept.yaml"),
        ("A", "jobs/new.yaml"),
    ]
    repo.write("jobs/draft.yaml", job("draft"))  # untracked
    repo.write("jobs/new.yaml", job("new", hours=3))  # modified, not committed
    on_disk = git.changed_files(repo.root, base, git.WORKING_TREE, "jobs")
    assert ("A", "jobs/draft.yaml") in [(c.status, c.path) for c in on_disk]
    assert git.changed_files(repo.root, head, git.WORKING_TREE, "jobs") == [
        git.FileChange("A", "jobs/draft.yaml"),
        git.FileChange("M", "jobs/new.yaml"),
    ]
    assert git.changed_files(repo.root, base, head, "elsewhere") == []
    assert git.show(repo.root, base, "jobs/grow.yaml").decode() == job("grow", hours=10)


def test_collect_reads_base_versions_through_git_and_leaves_the_checkout_alone(repo):
    repo.write("jobs/grow.yaml", job("grow", hours=20))
    repo.remove("jobs/gone.yaml")
    repo.write("jobs/new.yaml", job("new"))
    repo.write(".github/workflows/ci.yml", "on: [push, pull_request]\n")
    repo.commit("change")
    before = repo.status()
    changeset = collect(repo.root, revisions(repo.root, "main"))
    assert repo.status() == before  # nothing checked out, staged or written
    assert changeset.scope == "."
    assert changeset.revisions.working_tree
    assert {str(m.path) for m in changeset.head.manifests} == {
        "jobs/keep.yaml",
        "jobs/grow.yaml",
        "jobs/new.yaml",
    }
    assert {(str(m.path), m.spec.name) for m in changeset.head_changed()} == {
        ("jobs/grow.yaml", "grow"),
        ("jobs/new.yaml", "new"),
    }
    # Only the changed files' base versions; the CI file is not a manifest, not an error.
    base = {
        (str(m.path), m.spec.name, m.spec.runtime.estimate_hours) for m in changeset.base.manifests
    }
    assert base == {("jobs/grow.yaml", "grow", 10), ("jobs/gone.yaml", "gone", 10)}
    assert changeset.base.errors == [] and changeset.head.errors == []


def test_merge_base_ignores_what_main_did_since(repo):
    repo.write("jobs/grow.yaml", job("grow", hours=20))
    repo.commit("change")
    repo.git("switch", "-q", "main")
    repo.write("jobs/keep.yaml", job("keep", gpu="T4:1", hours=50))
    repo.write("jobs/later.yaml", job("later"))
    repo.commit("main moves on")
    repo.git("switch", "-q", "change")
    revs = revisions(repo.root, "main")
    assert revs.merge_base != revs.base
    changeset = collect(repo.root, revs)
    assert [c.path for c in changeset.changes] == ["jobs/grow.yaml"]


def test_explicit_head_reads_the_commit_not_the_disk(repo):
    repo.write("jobs/grow.yaml", job("grow", hours=20))
    repo.commit("change")
    repo.write("jobs/grow.yaml", "apiVersion: broker/v1\nname: [broken\n")  # on disk only
    on_disk = collect(repo.root / "jobs", revisions(repo.root / "jobs", "main"))
    assert on_disk.scope == "jobs"
    assert [str(e.path) for e in on_disk.head.errors] == ["jobs/grow.yaml"]
    committed = collect(repo.root / "jobs", revisions(repo.root / "jobs", "main", "change"))
    assert not committed.revisions.working_tree and committed.head.errors == []
    grown = [m for m in committed.head.manifests if m.spec.name == "grow"]
    assert grown[0].spec.runtime.estimate_hours == 20 and str(grown[0].path) == "jobs/grow.yaml"


def test_base_version_that_does_not_load_is_reported_not_fatal(repo):
    repo.git("switch", "-q", "main")
    repo.write("jobs/grow.yaml", job("grow", spot="sometimes"))
    repo.commit("broken on main")
    repo.git("switch", "-q", "-c", "fix")
    repo.write("jobs/grow.yaml", job("grow"))
    repo.commit("fix")
    changeset = collect(repo.root, revisions(repo.root, "main"))
    assert [(str(e.path), e.line) for e in changeset.base.errors] == [("jobs/grow.yaml", 7)]
    assert changeset.head.errors == []


# --- the diff ---------------------------------------------------------------------------------


def placed(cost: float, cloud: str = "aws", region: str = "us-east-1") -> Placement:
    breakdown = CostEstimate(cost, 0.0, 0.0, cost, 1.0, 0.0, 0.0, 0.0, 0.0, "")
    return Placement(
        1, cloud, region, "", "p4d", "A100", 8, 1, "on-demand", cost, 1.0, cost, breakdown
    )


@functools.cache
def spec_of(name: str, **kw) -> JobSpec:
    return parse_manifest_text(job(name, **kw))[0].spec


def estimate_of(name: str, cost: float | None, digest: str = "d", path: str = "jobs/a.yaml", **kw):
    spec = spec_of(name, **kw)
    return JobEstimate(spec, Path(path), 1, digest, None if cost is None else placed(cost))


def test_diff_matches_jobs_by_team_and_name():
    before = [estimate_of("grow", 10.0), estimate_of("gone", 5.0), estimate_of("same", 7.0)]
    after = [
        estimate_of("grow", 25.0, digest="e", path="jobs/b.yaml"),  # moved and changed
        estimate_of("new", 3.0),
        estimate_of("same", 7.0),
    ]
    everything = [*after, estimate_of("untouched", 100.0)]
    diff = cost_diff(before, after, everything)
    assert [(c.current.spec.name, c.kind) for c in diff.changes] == [
        ("gone", "deleted"),
        ("grow", "changed"),
        ("new", "new"),
    ]
    assert [(c.before_cost, c.after_cost, c.difference) for c in diff.changes] == [
        (5.0, 0.0, -5.0),
        (10.0, 25.0, 15.0),
        (0.0, 3.0, 3.0),
    ]
    assert (diff.before, diff.after, diff.difference) == (15.0, 28.0, 13.0)
    assert diff.all_after == 135.0 and diff.all_before == 122.0 and diff.jobs_after == 4
    assert diff.percent == pytest.approx(100 * 13 / 122)


def test_jobs_of_a_broken_head_file_are_not_shown_deleted():
    before = [estimate_of("a", 10.0, path="jobs/broken.yaml")]
    assert cost_diff(before, [], [], unreadable={Path("jobs/broken.yaml")}).changes == ()
    assert cost_diff(before, [], []).changes[0].kind == "deleted"


def test_an_infeasible_side_counts_zero():
    diff = cost_diff([estimate_of("a", 10.0)], [estimate_of("a", None, digest="e")], [])
    (change,) = diff.changes
    assert change.after_cost == 0 and change.difference == -10
    assert diff.percent == -100.0
    assert cost_diff([], [estimate_of("a", 10.0)], [estimate_of("a", 10.0)]).percent == math.inf


money = st.floats(min_value=0, max_value=1e6, allow_nan=False)


@given(
    st.dictionaries(
        st.sampled_from("abcdefgh"), st.tuples(money, money, st.booleans()), max_size=8
    ),
    st.sampled_from("abcdefgh"),
    money,
)
def test_totals_add_up_whatever_the_jobs(jobs, only_before, untouched):
    before, after = [], []
    for name, (old, new, same) in jobs.items():
        if name != only_before:
            after.append(
                estimate_of(f"j-{name}", old if same else new, digest="x" if same else "y")
            )
        before.append(estimate_of(f"j-{name}", old, digest="x"))
    diff = cost_diff(before, after, [*after, estimate_of("other", untouched)])
    kept = [c for c in diff.changes if c.kind == "changed"]
    assert all(c.before.digest != c.after.digest for c in kept)
    assert diff.difference == pytest.approx(sum(c.difference for c in diff.changes))
    assert diff.all_before == pytest.approx(
        untouched + sum(e.cost for e in before), rel=1e-9, abs=1e-6
    )
    assert diff.all_after - diff.all_before == pytest.approx(diff.difference, abs=1e-6)


# --- the rules --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "limit"),
    [
        ("250", Limit(250.0)),
        ("$250", Limit(250.0)),
        ("$1,250.50", Limit(1250.5)),
        ("250 USD", Limit(250.0)),
        ("12.5", Limit(12.5)),
        ("10%", Limit(10.0, percent=True)),
        (" 0.5 % ", Limit(0.5, percent=True)),
        (40, Limit(40.0)),
    ],
)
def test_parse_limit(text, limit):
    assert parse_limit(text) == limit


@pytest.mark.parametrize(
    "text", ["", "ten", "-5", "10%%", "5 EUR", "1e3", "1,00", float("nan"), -1]
)
def test_parse_limit_refuses(text):
    with pytest.raises(ValueError):
        parse_limit(text)


@given(st.floats(min_value=0, max_value=1e9, allow_nan=False))
def test_limits_round_trip_through_their_text(value):
    assert parse_limit(str(Limit(value, percent=True))) == Limit(round(value, 2), True)
    assert parse_limit(str(Limit(value))) == Limit(round(value, 2))


def diff_of(*pairs: tuple[float | None, float | None], all_after: float | None = None, **kw):
    """A CostDiff of jobs j0, j1... going from cost a to cost b (None: absent)."""
    changes = []
    for i, (a, b) in enumerate(pairs):
        old = None if a is None else estimate_of(f"j{i}", a, digest="x")
        new = None if b is None else estimate_of(f"j{i}", b, digest="y", **kw)
        changes.append(JobChange(old, new))
    after = sum(b or 0 for _, b in pairs)
    return CostDiff(tuple(changes), after if all_after is None else all_after, len(pairs))


def test_max_increase_in_usd_and_percent():
    diff = diff_of((100.0, 150.0), all_after=1050.0)  # +50 over a base of 1000: 5%
    assert check(diff, Rules(max_increase=Limit(50.0))) == []
    (broken,) = check(diff, Rules(max_increase=Limit(49.99)))
    assert broken.rule == "max-increase" and "+$50.00" in broken.message
    assert check(diff, Rules(max_increase=Limit(5.0, percent=True))) == []
    (broken,) = check(diff, Rules(max_increase=Limit(4.9, percent=True)))
    assert "5.0% of $1,000.00" in broken.message and "over 4.9%" in broken.message


def test_percent_of_nothing_is_over_any_percent():
    (broken,) = check(diff_of((None, 10.0)), Rules(max_increase=Limit(1000.0, percent=True)))
    assert "from nothing at base" in broken.message


@given(st.lists(st.tuples(money, money), min_size=1, max_size=5), st.booleans())
def test_a_decrease_never_breaks_the_increase_rule(pairs, percent):
    pairs = [(max(a, b), min(a, b)) for a, b in pairs]  # every job gets cheaper (or not dearer)
    diff = diff_of(*pairs)
    assert check(diff, Rules(max_increase=Limit(0.0, percent))) == []


def test_job_cost_region_and_cloud_rules_judge_new_and_changed_jobs():
    diff = diff_of((None, 600.0), (10.0, 20.0), (900.0, None))
    rules = Rules(max_job_cost=500.0, require_checkpoint_for_spot=False)
    (broken,) = check(diff, rules)
    assert broken.rule == "max-job-cost" and "nlp/j0" in broken.message  # not j2: deleted
    assert check(diff, Rules(allowed_regions=("us-*",), allowed_clouds=("a*",))) == []
    rules = Rules(allowed_regions=("eu-*", "europe-*"), allowed_clouds=("gcp",))
    assert (
        sorted(v.rule for v in check(diff, rules))
        == ["allowed-clouds"] * 2 + ["allowed-regions"] * 2
    )


def test_spot_without_checkpoint():
    risky = diff_of((None, 5.0), spot="prefer")
    safe = diff_of((None, 5.0), spot="prefer", checkpoint=True)
    (broken,) = check(risky, Rules())
    assert broken.rule == "require-checkpoint-for-spot" and "spot: prefer" in broken.message
    assert check(safe, Rules()) == []
    assert check(risky, Rules(require_checkpoint_for_spot=False)) == []
    assert check(diff_of((None, 5.0)), Rules()) == []  # spot: never


def test_rules_from_the_policy_file(tmp_path):
    path = tmp_path / "policy.yaml"
    path.write_text(
        "queues: {default: 1}\n"
        "ci:\n"
        "  max_increase: 10%\n"
        "  max_job_cost: 500\n"
        "  allowed_regions: [us-*]\n"
        "  allowed_clouds: [aws, 'g*']\n"
        "  require_checkpoint_for_spot: false\n"
    )
    rules = load_rules(path)
    assert rules == Rules(
        max_increase=Limit(10.0, percent=True),
        max_job_cost=500.0,
        allowed_regions=("us-*",),
        allowed_clouds=("aws", "g*"),
        require_checkpoint_for_spot=False,
    )
    assert rules.over({"max_job_cost": 50.0, "allowed_regions": None}).max_job_cost == 50.0
    path.write_text("queues: {default: 1}\n")
    assert load_rules(path) == Rules() and load_rules(None) == Rules()


def test_policy_file_mistakes_name_file_line_and_field(tmp_path):
    path = tmp_path / "policy.yaml"
    path.write_text("ci:\n  max_increse: 10%\n  max_job_cost: -5\n  allowed_clouds: [awz]\n")
    with pytest.raises(UserInputError) as caught:
        load_rules(path)
    assert [e.one_line() for e in caught.value.errors] == [
        f"{path}:2:3: ci.max_increse: unknown field (did you mean 'max_increase'?)",
        f"{path}:3:17: ci.max_job_cost: input should be greater than or equal to 0 (got -5)",
        f"{path}:4:20: ci.allowed_clouds[0]: 'awz' matches no cloud (aws, gcp, azure, onprem) "
        "(did you mean 'aws'?)",
    ]


def test_the_queue_policy_loader_accepts_the_ci_section(tmp_path):
    from broker.queue import load_policy

    path = tmp_path / "policy.yaml"
    path.write_text("backfill: false\nci: {max_job_cost: 5}\n")
    assert load_policy(path).backfill is False


def test_estimates_of_a_collected_change(repo, tmp_path):
    """The pieces together, as `broker ci` runs them: totals from the planner's figures."""
    index = load_offers(write_catalog(tmp_path / "offers.csv")).index
    repo.write("jobs/grow.yaml", job("grow", hours=20))
    repo.commit("change")
    changeset = collect(repo.root, revisions(repo.root, "main"))
    at_head = estimate(changeset.head.manifests, index, NOW)
    at_base = estimate(changeset.base.manifests, index, NOW)
    after = [e for e in at_head if e.path in changeset.changed_paths]
    diff = cost_diff(at_base, after, at_head)
    (change,) = diff.changes
    assert change.kind == "changed"
    assert change.before_cost == pytest.approx(21.9576 * 10)
    assert change.after_cost == pytest.approx(21.9576 * 20)
    assert diff.all_after == pytest.approx(sum(e.cost for e in at_head))
