"""The one redaction of secrets, for every room: whatever leaves the process or is
stored (an error, an event, a ledger detail, a status file, a log the broker writes, a
report) passes through `redact` first, and a URI is stored without its user part
(`without_userinfo`).

`redact` masks, as `***`:
- credentials after a name that says so (`password=`, `"client_secret": "..."`,
  `SessionToken: ...`, `X-Amz-Signature=`, `sig=` of an Azure SAS, `AccountKey=`);
- `Authorization:` and `Cookie:` header values, `Bearer` tokens;
- the user part of a URI (`s3://user:PASS@host/` -> `s3://***@host/`); of a
  `postgresql://` URL up to its last `@`, whatever the password holds;
- keys known by their shape: AWS access key ids (`AKIA...`, `ASIA...`) and session
  tokens, secret access keys, Google API keys and OAuth tokens, Azure AD client
  secrets, GitHub and GitLab tokens, JWTs, PEM private key blocks, and any long token
  mixing upper case, lower case and digits.
It errs on the side of masking (a leaked secret cannot be taken back), while keeping
what helps debugging: instance ids, request ids (UUIDs), paths, error codes.

Only `re` is imported; the patterns compile on first use.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable

MASK = "***"


# the words that make a value a named credential (`password=...`); also searched alone,
# as the cheap test that lets `redact` skip the named pattern (slow: it backtracks)
_NAMES = (
    r"secret|token|passw(?:or)?d|pwd|credential|signature|api[_-]?key|access[_-]?key"
    r"|account[_-]?key|private[_-]?key|shared[_-]?access[_-]?key|\bsig\b|session[_-]?key"
    r"|client[_-]?key|\bauth\b"
)


@functools.cache
def _named_word() -> re.Pattern[str]:
    """A word of `_NAMES` anywhere: the named pattern cannot match a text without one."""
    return re.compile(rf"(?i){_NAMES}")


@functools.cache
def _clue() -> re.Pattern[str]:
    """What some pattern of `_patterns` other than the named one needs in a text to
    match: `://` (URIs), a header word, the start of a JWT, an OAuth token or a PEM
    block, the prefix of a shape that needs no mix of cases (an AWS key id, a Google
    refresh token, a GitHub, GitLab or Slack token, an Azure AD secret's `Q~`), or a run
    of 13 or more token characters holding both an upper and a lower case letter: every
    other shape's match lies in one such run (the shortest an AWS session token's prefix
    and one more; each mixes cases; the shapes are case-sensitive). A text with none of
    these (nor a word of `_NAMES`) is left as it is, without trying the patterns: a
    place (`aws/us-east-1/p3.2xlarge`), a time (`2026-12-02T03:10:00Z`) or an id is
    no clue."""
    run = r"[\w~.+/=-]"
    return re.compile(
        r"://|(?i:authoriz|cookie|bearer)|ya29\.|eyJ|-----BEGIN|1//|\dQ~"
        r"|\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA|ABIA|ACCA)"
        r"|\b(?:ghp|gho|ghs|ghu|ghr|github_pat|glpat|xox[abpr])[_-]"
        rf"|(?<!{run})(?={run}{{13}})(?={run}*?[A-Z])(?={run}*?[a-z])"
    )


@functools.cache
def _patterns() -> tuple[tuple[re.Pattern[str], str], ...]:
    """(pattern, replacement) in the order they apply: named values first, shapes last."""
    shapes = (
        # PEM private keys (RSA, EC, OPENSSH, ENCRYPTED, PGP ... BLOCK), to their end
        r"-----BEGIN [A-Z ]*PRIVATE KEY[A-Z ]*-----.*?"
        r"(?:-----END [A-Z ]*PRIVATE KEY[A-Z ]*-----|$)",
        r"\beyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*",  # JWT
        r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA|ABIA|ACCA)[A-Z0-9]{16}\b",  # AWS key id
        r"\b(?:FwoGZXIvYXdz|IQoJb3JpZ2lu)[A-Za-z0-9+/=_-]+",  # AWS session token
        r"\bAIza[0-9A-Za-z_-]{35}",  # Google API key
        r"\bya29\.[0-9A-Za-z_.-]+",  # Google OAuth access token
        r"\b1//[0-9A-Za-z_-]{30,}",  # Google OAuth refresh token
        r"(?<![A-Za-z0-9_~.-])[A-Za-z0-9_~.-]{3}\dQ~[A-Za-z0-9_~.-]{31,34}",  # Azure AD secret
        r"\b(?:ghp|gho|ghs|ghu|ghr|github_pat|glpat|xox[abpr])[_-][A-Za-z0-9_-]{10,}",
        # AWS secret access keys: 40 base64 characters mixing upper, lower and digits
        r"(?<![A-Za-z0-9+/=])(?=[A-Za-z0-9+/]{0,39}[A-Z])(?=[A-Za-z0-9+/]{0,39}[a-z])"
        r"(?=[A-Za-z0-9+/]{0,39}[0-9])[A-Za-z0-9+/]{40}(?![A-Za-z0-9+/=])",
        # long base64 with + or = (Azure storage keys, tokens), mixing all three: not a path
        r"(?<![A-Za-z0-9+/=_-])(?=[A-Za-z0-9+/=_-]*[A-Z])(?=[A-Za-z0-9+/=_-]*[a-z])"
        r"(?=[A-Za-z0-9+/=_-]*[0-9])(?=[A-Za-z0-9+/=_-]*[+=])[A-Za-z0-9+/=_-]{40,}",
        # any other long token mixing upper, lower and digits (ids and UUIDs are one case),
        # but for a folder or file name in a path (errors must name the user's files)
        r"(?<![A-Za-z0-9_+=/-])(?=[A-Za-z0-9_+=-]*[A-Z])(?=[A-Za-z0-9_+=-]*[a-z])"
        r"(?=[A-Za-z0-9_+=-]*[0-9])[A-Za-z0-9_+=-]{32,}(?![A-Za-z0-9_+=-]|\.[A-Za-z]{1,5}\b|/)",
    )
    # A name starts where a word starts and its tail is bounded: tried at every position
    # with both ends unbounded, a 100,000-letter value in an error took minutes.
    named = re.compile(
        rf"""(?ix)
        (?P<name>(?<![\w.-])["']?[\w.-]*?(?:{_NAMES})[\w.-]{{0,128}}["']?)
        (?P<sep>\s*[:=]\s*)
        (?P<value>"[^"]*"|'[^']*'|[^\s,;&"'<>)}}\]]+)
        """
    )
    return (
        # a database URL's user part, up to its last `@` (a password may hold `/`, `?`, `#`)
        (re.compile(r"(?i)\b(postgres(?:ql)?://)[^\s@]*@"), rf"\1{MASK}@"),
        # userinfo; the scheme starts where no scheme character precedes (`\b` tried every
        # letter of `a.a.a...` and read on to its end: minutes for a long value)
        (re.compile(r"(?i)(?<![a-z0-9+.-])([a-z][a-z0-9+.-]*://)[^/\s@?#]+@"), rf"\1{MASK}@"),
        (
            re.compile(r"(?i)\b(authorization\s*[:=]\s*)(?:(?:bearer|basic|token)\s+)?[^\s,;]+"),
            rf"\1{MASK}",
        ),
        (re.compile(r"(?i)\b((?:set-)?cookie\s*:\s*)[^\r\n]+"), rf"\1{MASK}"),
        (re.compile(r"(?i)\b(bearer\s+)[A-Za-z0-9._~+/=-]+"), rf"\1{MASK}"),
        (named, ""),  # replaced by _mask_named
        *((re.compile(shape, re.S), MASK) for shape in shapes),
    )


# Pieces of which an ASCII text lowered holds one when `_clue` or `_named_word` finds
# anything in it, but for a run of mixed cases (`_mixed_run`) or a word `sig`
# (`_sig_word`): each of their literals lowered, or a part of one (`auth` of `authoriz`,
# `key` of every `..._key`, `q~` of `\dQ~`). `_maybe_clue` tries these first: a few
# substring tests, where those two expressions are tried at every position of the text.
_TOKEN_PREFIXES = ("ghp", "gho", "ghs", "ghu", "ghr", "github_pat", "glpat")  # then _ or -
_CLUE_PIECES = (
    "://", "auth", "cookie", "bearer", "ya29.", "eyj", "-----begin", "1//", "q~",
    "akia", "asia", "agpa", "aida", "aroa", "anpa", "anva", "aipa", "abia", "acca", "xox",
    *(prefix + sep for prefix in _TOKEN_PREFIXES for sep in "_-"),
    "secret", "token", "passw", "pwd", "credential", "signature", "key",
)  # fmt: skip


@functools.cache
def _runs() -> re.Pattern[str]:
    """A whole run of 13 or more of `_clue`'s token characters, as they are in ASCII."""
    run = "[A-Za-z0-9_~.+/=-]"
    return re.compile(rf"(?<!{run}){run}{{13,}}")


@functools.cache
def _sig_word() -> re.Pattern[str]:
    """`_NAMES`' word `sig` in a text lowered (not the `sig` of `SIGTERM`)."""
    return re.compile(r"\bsig\b")


def _has_piece(lowered: str) -> bool:
    """Whether an ASCII text lowered holds a piece of `_CLUE_PIECES` or a word `sig`."""
    for piece in _CLUE_PIECES:  # a loop: `any` of a generator takes twice as long
        if piece in lowered:
            return True
    return "sig" in lowered and _sig_word().search(lowered) is not None


def _mixed_run(text: str) -> bool:
    """Whether an ASCII text holds a run of `_runs` with both an upper and a lower case
    letter (`_clue`'s last alternative)."""
    if text.lower() == text or text.upper() == text:
        return False  # no upper case letter, or no lower case one
    for found in _runs().finditer(text):
        run = found.group()
        if run.lower() != run and run.upper() != run:
            return True
    return False


def _maybe_clue(text: str) -> bool:
    """What `_clue` or `_named_word` finds in `text`, without trying them on an ASCII
    text (its case folds as `(?i)` folds it) with no piece of `_CLUE_PIECES` and no run
    of mixed cases: they cannot find anything there."""
    if text.isascii() and not _has_piece(text.lower()) and not _mixed_run(text):
        return False
    return _clue().search(text) is not None or _named_word().search(text) is not None


def redact(text: str) -> str:
    """`text` with anything that looks like a key, token, password or signature masked."""
    if not text:
        return text
    if not _maybe_clue(text):
        return text  # no pattern can match (`_clue`)
    for pattern, replacement in _patterns():
        if replacement:
            text = pattern.sub(replacement, text)
        elif _named_word().search(text):  # else it cannot match: skip its backtracking
            text = pattern.sub(_mask_named, text)
    return text


LONGEST_WORD = 200  # characters of one word of a message shown before the rest is cut


def shortened(text: str) -> str:
    """`text` with every word over LONGEST_WORD characters cut, saying how long it was:
    a value of 20 MB quoted back in an error is no clear line (and redacting it first
    took minutes). Cut before `redact`: what is left of a secret is still masked."""
    if len(text) <= LONGEST_WORD:
        return text
    return " ".join(
        f"{word[:LONGEST_WORD]}...({len(word):,} characters)" if len(word) > LONGEST_WORD else word
        for word in text.split(" ")
    )


def redact_data(value: object, text: Callable[[str], str] = redact) -> object:
    """`redact` applied to every string in nested lists, tuples and dicts (keys too), and
    a text value under a key that names a secret (`{"token": "..."}`) masked whole: an
    event's or a status file's data before it is stored. `text`: `redact`, or one that
    remembers its answers (the simulator's store)."""
    if isinstance(value, str):
        return text(value)
    if isinstance(value, dict):
        return _redacted_dict(value, text)
    if isinstance(value, list):
        return [redact_data(item, text) for item in value]
    if isinstance(value, tuple):
        return tuple(redact_data(item, text) for item in value)
    return value


_AS_IS = frozenset({int, float, bool, type(None)})  # what `redact_data` returns unchanged


def _redacted_dict(value: dict, text: Callable[[str], str]) -> dict:
    """`redact_data` of a dict: its keys and values redacted, a text under a key that
    names a secret masked whole; numbers and None kept without a call (an event's data is
    mostly those)."""
    out: dict = {}
    for key, item in value.items():
        named = isinstance(key, str)
        name = text(key) if named else redact_data(key, text)
        if isinstance(item, str):
            out[name] = MASK if named and _names_secret(key) else text(item)
        else:
            out[name] = item if type(item) in _AS_IS else redact_data(item, text)
    return out


@functools.lru_cache(maxsize=4096)
def _names_secret(key: str) -> bool:
    """Whether the key names a secret; remembered, as data keys are a few field names."""
    return _secret_name().search(key) is not None


@functools.cache
def _secret_name() -> re.Pattern[str]:
    """A key that names a secret (the names of `redact`'s named values)."""
    return re.compile(
        r"(?i)(?:secret|token|passw(?:or)?d|pwd|credential|signature|api[_-]?key|access[_-]?key"
        r"|account[_-]?key|private[_-]?key|session[_-]?key|client[_-]?key|^sig$|^auth"
        r"|authorization|cookie)"
    )


def without_userinfo(uri: str) -> str:
    """`uri` without a user part: `s3://user:PASS@host/x` -> `s3://host/x` (what is
    stored and shown of a URI); other text unchanged."""
    scheme, sep, rest = uri.partition("://")
    if not sep:
        return uri
    authority, slash, path = rest.partition("/")
    if "@" in authority:
        authority = authority.rsplit("@", 1)[1]
    return f"{scheme}{sep}{authority}{slash}{path}"


def _mask_named(match: re.Match[str]) -> str:
    value = match["value"]
    if value[:1] in "\"'" and value[-1:] == value[:1] and len(value) >= 2:
        masked = f"{value[0]}{MASK}{value[0]}"
    else:
        masked = MASK
    return f"{match['name']}{match['sep']}{masked}"
