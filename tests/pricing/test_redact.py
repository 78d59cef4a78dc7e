"""pricing.userio.redact: the one redaction every room uses (providers.errors names it too),
and where it is applied: the state store's events, ledger details and manifest texts."""

from __future__ import annotations

from datetime import datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pricing.userio.redact import _CLUE_PIECES, MASK, redact, redact_data, without_userinfo

SECRETS = {
    "access key id": "AKIAIOSFODNN7EXAMPLE",
    "temporary key id": "ASIAY34FZKBOKMUTVV7A",
    "session token": "FwoGZXIvYXdzEJr//////////wEaDKJ3Rk4AbCdEfGhIjKLAAZ+x/1abc==",
    "session token (IQoJ)": "IQoJb3JpZ2luX2VjEHYaCXVzLWVhc3QtMSJHMEUCIQDx/abc+def=",
    "secret access key": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "azure client secret": "Abc8Q~ZyXwVuTsRqPoNmLkJiHgFeDcBa0123456789",
    "azure storage key": "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1"
    "SZFPTOtr/KBHBeksoGMGw==",
    "google api key": "AIzaSyD-1234567890abcdefghijklmnopqrstu",
    "google oauth token": "ya29.a0AfH6SMBx-EXAMPLE-token",
    "github token": "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
    "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9Pl",
}  # fmt: skip
PEM = (
    "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAx\nabc\n-----END RSA PRIVATE KEY-----",
    "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXk\n-----END OPENSSH PRIVATE KEY-----",
    "-----BEGIN PGP PRIVATE KEY BLOCK-----\nlQOYBF\n-----END PGP PRIVATE KEY BLOCK-----",
)  # fmt: skip


@pytest.mark.parametrize("name", sorted(SECRETS))
def test_known_key_shapes_are_masked_wherever_they_are_quoted(name):
    secret = SECRETS[name]
    for text in (
        secret,
        f"error: {secret} was refused",
        f'{{"value": "{secret}"}}',
        f"<K>{secret}</K>",
    ):
        cleaned = redact(text)
        assert secret not in cleaned and MASK in cleaned, (name, cleaned)


@pytest.mark.parametrize("block", PEM)
def test_pem_private_key_blocks_are_masked_whole(block):
    cleaned = redact(f"key:\n{block}\nafter")
    assert "PRIVATE KEY" not in cleaned and cleaned.endswith("after")


@pytest.mark.parametrize(
    "text",
    [
        "Authorization: AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20261101/us-east-1/"
        "pricing/aws4_request, SignedHeaders=host;x-amz-date, Signature=fe5f80f77d5fa3beca038a",
        "X-Amz-Security-Token: shortish-token-value",
        "https://bucket.s3.amazonaws.com/k?X-Amz-Signature=abc123&X-Amz-Credential=AKIAX/y",
        "Authorization: Bearer abc.def.ghi",
        "Cookie: session=abcdef; other=1",
        "https://acct.blob.core.windows.net/c?sv=2024&sig=abc%2Bdef%3D",
        'config {"client_secret": "s3cr3t", "password": "hunter2"}',
    ],
)
def test_credential_headers_and_named_values_are_masked(text):
    cleaned = redact(text)
    for secret in ("fe5f80f77d5fa3beca038a", "shortish-token-value", "abc123", "abc.def.ghi",
                   "abcdef", "abc%2Bdef", "s3cr3t", "hunter2", "AKIAIOSFODNN7EXAMPLE"):  # fmt: skip
        assert secret not in cleaned, cleaned


@given(
    st.sampled_from(["s3", "gs", "az", "https", "postgresql"]),
    st.from_regex(r"[A-Za-z0-9._-]{1,12}", fullmatch=True),
    st.from_regex(r"[A-Za-z0-9!$%&*+=~-]{1,20}", fullmatch=True),
    st.from_regex(r"[a-z0-9.-]{1,20}", fullmatch=True),
)
def test_userinfo_in_a_uri_is_masked_and_stripped(scheme, user, password, host):
    uri = f"{scheme}://{user}:{password}@{host}/some/key"
    assert f"{user}:{password}" not in redact(f"moving {uri} now")
    assert without_userinfo(uri) == f"{scheme}://{host}/some/key"
    assert without_userinfo(f"{scheme}://{host}/a@b") == f"{scheme}://{host}/a@b"  # a key's @


def test_what_helps_debugging_is_kept():
    text = (
        "InsufficientInstanceCapacity: no p4d.24xlarge in us-east-1a for instance "
        "i-0123456789abcdef0, request 3f2b8c1e-9a4d-4e6f-8b2a-1c3d5e7f9a0b, "
        "path /tmp/pytest-of-root/test_sandbox0/a-1/log.txt, key=checkpoints/step-100, "
        "job j-0123456789ab, egress input s3://data-bucket/set/: aws:us-east-1 -> gcp:us-central1"
    )
    assert redact(text) == text


def test_the_users_file_names_are_kept_in_errors():
    text = (
        "/home/me/ModelTrainingConfig2024_production_v3.yaml:3:1: name: bad; "
        "/data/Run_2024_Experiment42_FinalVersionABC/offers.csv: not found"
    )
    assert redact(text) == text
    assert redact("token AbCdEfGhIjKlMnOpQrStUvWxYz0123456789 leaked") == "token *** leaked"


def test_redact_data_reaches_every_string():
    data = {
        "uri": "s3://u:pw1@b/k",
        "nested": [{"token": "t0k"}],
        "n": 3,
        "when": datetime(2026, 1, 1),
    }
    cleaned = redact_data(data)
    assert "pw1" not in str(cleaned) and "t0k" not in str(cleaned)
    assert cleaned["n"] == 3 and cleaned["when"] == datetime(2026, 1, 1)


def test_the_providers_use_the_same_function():
    from providers import errors

    assert errors.redact is redact


def _redact_without_the_word_test(text: str) -> str:
    """`redact` as it was before its cheap word test: every pattern applied."""
    from pricing.userio.redact import _mask_named, _patterns

    for pattern, replacement in _patterns():
        text = pattern.sub(replacement or _mask_named, text)
    return text


NAMED_PIECES = ("password", "PassWd", "pwd", "api-key", "Access_Key", "sig", "auth", "token",
                "client_key", "signature", "x", "=", ": ", '"', "'", " ", ".", "-", "_", "/",
                "sigx", "authz", "AKIAIOSFODNN7EXAMPLE", "s3://u:p@h/", "@", ",", "\n")  # fmt: skip


@given(st.lists(st.sampled_from(NAMED_PIECES) | st.text(max_size=6), max_size=14))
def test_skipping_the_named_pattern_when_no_word_names_a_secret_changes_nothing(pieces):
    """`redact` skips the named-value pattern (it backtracks: most of a redaction's time)
    when no word of it appears; the answer is the full redaction's, whatever the text."""
    text = "".join(pieces)
    assert redact(text) == _redact_without_the_word_test(text)


def test_a_named_value_is_still_masked_after_the_word_test():
    assert redact("connect: password=hunter2 sig=abc auth: xyz") == (
        f"connect: password={MASK} sig={MASK} auth: {MASK}"
    )


PIECES = [*"aQz09_~.+/=-:@ \n'\"", "://", "ghp_", "AKIA", "ya29.", "eyJ", "1//"]
PIECES += ["FwoGZXIvYXdz", "Bearer ", "-----BEGIN ", "token=", "abcdefghijklm"]
# shapes that need no mix of cases, and runs of one case (places, times, ids): no clue
PIECES += ["Q~", "AIza", "IQoJb3JpZ2lu", "xoxb-", "glpat-", "github_pat_", "ABCDEFGHIJKLMNOP"]
PIECES += ["2026-12-02T03:10:00.000000Z", "aws/us-east-1/p3.2xlarge", "0123456789", "A", "T"]


@given(st.lists(st.sampled_from(PIECES), max_size=40).map("".join))
def test_a_text_without_a_clue_is_left_as_every_pattern_leaves_it(text):
    """`redact`'s shortcut (no clue of any pattern: the text as it is) gives what running
    every pattern gives."""
    from pricing.userio import redact as module

    full = text
    for pattern, replacement in module._patterns():
        if replacement:
            full = pattern.sub(replacement, full)
        elif module._named_word().search(full):
            full = pattern.sub(module._mask_named, full)
    assert redact(text) == full


def _found_by_the_clue_patterns(text: str) -> bool:
    from pricing.userio import redact as module

    return bool(module._clue().search(text) or module._named_word().search(text))


def _any_case(piece: str) -> st.SearchStrategy[str]:
    return st.sampled_from([piece, piece.upper(), piece.title(), piece.swapcase()])


# the quick test's pieces and near misses, in any case; words and runs of one or two cases
QUICK_PIECES = [*PIECES, "SIGTERM", " sig ", "sig=", "-sig-", "throughput", "through-put"]
QUICK_PIECES += ["ghp", "gh_", "xoxa", "9Q~", "eyj", "EYJ", "KEY", "ke y", "pas sw", "auth"]
QUICK_PIECES += ["aBcDeFgHiJkLm", "abcdefABCDEF", "abcdefghijkl", "ABCDEFGHIJKL", "ı", "ſ", "K"]


@given(
    st.lists(
        st.sampled_from(QUICK_PIECES)
        | st.sampled_from(_CLUE_PIECES).flatmap(_any_case)
        | st.text(max_size=4),
        max_size=30,
    ).map("".join)
)
def test_the_quick_clue_test_answers_as_the_clue_patterns(text):
    """`redact`'s substring tests (`_maybe_clue`) say "no clue" only where the clue and
    named-word patterns find nothing, and otherwise what they find."""
    from pricing.userio.redact import _maybe_clue

    assert _maybe_clue(text) == _found_by_the_clue_patterns(text)


def test_a_pass_s_messages_take_the_quick_way():
    """The texts a simulated pass writes (times, ids, places, SIGTERM) are told apart by
    the substring tests alone; a word `sig`, a mixed run and a piece are not."""
    from pricing.userio import redact as module

    quiet = (
        "attempt 9: spot-reclaim notice, stops at 2026-01-07T11:44:45.000000Z: the job gets"
        " SIGTERM to checkpoint",
        "runtime estimate 48 h on V100, scaled by relative GPU throughput",
        "launching -> running: attempt 18 running on sim-a-000000000013",
    )
    for text in quiet:
        assert not module._has_piece(text.lower()) and not module._mixed_run(text)
        assert not _found_by_the_clue_patterns(text)
    assert module._has_piece("a sig=x".lower()) and module._mixed_run("id aBcDeFgHiJkLmN")
