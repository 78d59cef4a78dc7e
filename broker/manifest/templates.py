"""Manifests written from one template, loaded without parsing each of them again.

Why: a folder of manifests is often one file copied with a new `name` (or team,
image tag, queue): parsing each copy's YAML costs ~0.3 ms, and validating it ~0.1 ms,
thirty times what reading it costs, so a cold `broker plan DIR` of 10,000 such files
spent nine seconds on work it had done once. A file parsed in full and valid becomes a
`Template`: its lines, and the lines whose only value is one plain scalar (`key: value`
and perhaps a comment, the line's key and the value's column known from the node tree).
A later file with the same lines but for such values is `derive`d from it: its data is
the template's with those values replaced, its canonical JSON (the digest) is the
template's with those strings put in, and its spec is the template's with the new
label, or read again from the new data (`direct_spec`).

Only what is sure is derived, so errors and outputs stay those of a full parse: a
template has one document, no alias, merge key or tag, no line break other than
`\\n`, and was read by `direct_spec`; a changed value must be ASCII of a few plain
characters that YAML reads as a string in both files, on an ASCII line whose text
before and after the value is unchanged. Anything else (a new line, a quoted or
numeric value, a value `direct_spec` is unsure of, a bad label) is parsed in full.
tests/broker/test_manifest_templates.py holds derived manifests equal to parsed ones.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from broker.manifest import checks
from broker.manifest.digest import canonical_json, json_digest
from broker.manifest.load import Manifest
from broker.manifest.workdir import manifest_dir

if TYPE_CHECKING:
    import yaml

    from broker.spec import JobSpec
    from pricing.userio.yaml_reader import YamlDocument

# A value that scans as the same plain scalar wherever it stands (no indicator, space,
# quote, `:` or `#`), and whose JSON is itself in quotes.
_VALUE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-/]*")
# ... which YAML reads as a string: numbers, dates and `.inf` start with a digit, a sign
# or a dot; of the words, only YAML 1.1's booleans and nulls are something else.
_STRING = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-/]*")
_NOT_STRINGS = frozenset(
    "yes Yes YES no No NO true True TRUE false False FALSE on On ON off Off OFF "
    "null Null NULL".split()
)
_REST = re.compile(r"[ \t]*(?:#[^\r\n\x85\u2028\u2029]*)?")  # after a value on its line
_OTHER_BREAKS = re.compile("[\r\x85\u2028\u2029]")
_STR = "tag:yaml.org,2002:str"
LABELS = ("name", "team", "queue")  # the spec's own fields, read by checks.label alone
MAX_TEMPLATES = 8  # the most recent are tried (a sorted folder keeps copies together)


@dataclass(frozen=True)
class Slot:
    """A line whose only value is a plain string, which a copy may change."""

    path: tuple[str | int, ...]  # of the value in the document's data
    start: int  # its column (0-based) on the line
    end: int


@dataclass(frozen=True)
class _Change:
    """What copies that change the values on the same lines share."""

    pieces: list[str]  # the canonical JSON around the new values (one more than values)
    order: list[int]  # which value follows each piece but the last
    paths: list[tuple[str | int, ...]]
    labels: tuple[str, ...] | None  # the spec's fields they are, when all are labels


@dataclass
class Template:
    """A file parsed in full: what a copy of it shares with it."""

    text: str
    slots: dict[int, Slot]  # 0-based line number -> the slot on it
    manifest: Manifest
    name_at: tuple[int, int]
    span: tuple[int, int]
    data: dict[str, Any]
    numbers: tuple[int, ...] = field(init=False)  # the slots' lines, in order
    written: tuple[str, ...] = field(init=False)  # their text here
    # the text with each slot's line any line: a copy's lines there are its groups
    pattern: re.Pattern[str] = field(init=False)
    spec_fields: list[Any] = field(init=False)  # its spec's, in order (all are __init__'s)
    field_at: dict[str, int] = field(init=False)  # a spec field's place among them
    _changes: dict[tuple[int, ...], _Change] = field(default_factory=dict)

    def __post_init__(self) -> None:
        lines = self.text.split("\n")
        self.numbers = tuple(sorted(self.slots))
        self.written = tuple(lines[n] for n in self.numbers)
        pieces, done, at = [], 0, 0
        for number, line in enumerate(lines):
            if number in self.slots:
                pieces.append(re.escape(self.text[done:at]) + "([^\n]*)")
                done = at + len(line)
            at += len(line) + 1
        self.pattern = re.compile("".join(pieces) + re.escape(self.text[done:]))
        spec = self.manifest.spec
        names = [f.name for f in fields(spec) if f.init]
        self.spec_fields = [getattr(spec, name) for name in names]
        self.field_at = {name: i for i, name in enumerate(names)}

    def stored(self) -> dict[str, Any] | None:
        """What the spec cache keeps of it, with its file's row (`Templates.restore`):
        so a folder loaded before derives its copies without importing YAML. None when
        its data holds anything `redact` would mask (a URI's password: the spec keeps
        URIs without their user part, and the cache must not keep more than the spec)."""
        if not _nothing_to_mask(self.data):
            return None
        slots = [[n, list(slot.path), slot.start, slot.end] for n, slot in self.slots.items()]
        return {"slots": slots, "data": self.data}

    def change(self, lines: tuple[int, ...]) -> _Change:
        """What copies changing the values on `lines` share (worked out once)."""
        known = self._changes.get(lines)
        if known is None:
            paths = [self.slots[n].path for n in lines]
            raw = [f"\x00{i}\x00" for i in range(len(lines))]
            marks = [_quoted(mark) for mark in raw]
            text = canonical_json(_with_values(self.data, paths, raw))
            order = sorted(range(len(lines)), key=lambda i: text.index(marks[i]))
            pieces = []
            for i in order:
                head, text = text.split(marks[i], 1)
                pieces.append(head)
            own = all(len(p) == 1 and p[0] in LABELS for p in paths)
            labels = tuple(str(p[0]) for p in paths) if own else None
            if self.manifest.spec.run.workdir is not None:
                labels = None  # resolved against the copy's own folder: read again
            known = self._changes[lines] = _Change([*pieces, text], order, paths, labels)
        return known


def _nothing_to_mask(data: Any) -> bool:
    """Whether every text in `data` (keys too) is what `redact` leaves as it is."""
    from pricing.userio.redact import redact

    pending = [data]
    while pending:
        value = pending.pop()
        if isinstance(value, dict):
            pending.extend(value.keys())
            pending.extend(value.values())
        elif isinstance(value, list):
            pending.extend(value)
        elif isinstance(value, str) and redact(value) != value:
            return False
    return True


def _quoted(mark: str) -> str:
    return canonical_json(mark)


class Templates:
    """The templates of one load, newest first."""

    def __init__(self) -> None:
        self._recent: list[Template] = []

    def add(
        self, doc: YamlDocument, text: str, loaded: tuple[Manifest, tuple, tuple]
    ) -> Template | None:
        """Remember a file of one valid document, parsed in full, when it may be one."""
        template = template_of(doc, text, *loaded)
        if template is not None:
            self._remember(template)
        return template

    def restore(self, text: str, loaded: tuple[Manifest, tuple, tuple], stored: Any) -> None:
        """Remember a template the spec cache kept (`Template.stored`) with its file."""
        try:
            slots = {n: Slot(tuple(path), start, end) for n, path, start, end in stored["slots"]}
            data = stored["data"]
        except (TypeError, ValueError, KeyError):
            return  # unreadable: its copies are parsed
        if isinstance(data, dict):
            self._remember(Template(text, slots, *loaded, data))

    def _remember(self, template: Template) -> None:
        self._recent.insert(0, template)
        del self._recent[MAX_TEMPLATES:]

    def derive(self, path: Path, text: str) -> tuple[Manifest, tuple, tuple] | None:
        """The manifest of `text` as a copy of a template (with its name's place and
        its span), or None: parse it."""
        if not self._recent:
            return None
        for template in self._recent:
            derived = _derived(template, path, text)
            if derived is not None:
                return derived
        return None


def template_of(
    doc: YamlDocument, text: str, manifest: Manifest, name_at: tuple, span: tuple
) -> Template | None:
    """The template of a valid file of one document, or None when it may not be one."""
    from broker.manifest.direct import direct_spec

    if _OTHER_BREAKS.search(text) or not isinstance(doc.data, dict):
        return None
    if direct_spec(doc.data, manifest_dir(doc.path)) != manifest.spec:
        return None
    lines = text.split("\n")
    slots = _slots(doc.node, lines)
    if slots is None or not _json_safe(doc.data):
        return None
    return Template(text, slots, manifest, name_at, span, doc.data)


def _json_safe(data: Any) -> bool:
    """Whether `data` comes back from its JSON as it is (no date, which comes back a
    string): the spec cache keeps a template's data as JSON."""
    import json

    try:
        return json.loads(canonical_json(data)) == data
    except (TypeError, ValueError):
        return False


def _slots(root: yaml.Node, lines: list[str]) -> dict[int, Slot] | None:
    """The lines holding a plain string and nothing else; None when the tree has an
    alias, a merge key or a tag (a value there may stand for more than itself)."""
    import yaml

    slots: dict[int, Slot] = {}
    seen: set[int] = set()
    pending: list[tuple[yaml.Node, tuple[str | int, ...]]] = [(root, ())]
    while pending:
        node, path = pending.pop()
        if id(node) in seen:
            return None  # an alias
        seen.add(id(node))
        if isinstance(node, yaml.ScalarNode):
            continue
        if isinstance(node, yaml.SequenceNode):
            pending.extend((item, (*path, i)) for i, item in enumerate(node.value))
            continue
        for key, value in node.value:
            if not isinstance(key, yaml.ScalarNode) or key.tag != _STR:
                return None  # a merge key, or a key that is no string
            pending.append((key, (*path, "\x00key")))
            pending.append((value, (*path, key.value)))
            slot = _slot(value, lines, (*path, key.value))
            if slot is not None and path + (key.value,) != ("apiVersion",):
                slots[value.start_mark.line] = slot
    return slots


def _slot(node: yaml.Node, lines: list[str], path: tuple[str | int, ...]) -> Slot | None:
    import yaml

    if not isinstance(node, yaml.ScalarNode) or node.tag != _STR or node.style:  # plain: "" or None
        return None
    start, end = node.start_mark, node.end_mark
    if start.line != end.line or start.line >= len(lines):
        return None
    line = lines[start.line]
    if not line.isascii() or line[start.column : end.column] != node.value:
        return None
    if not _VALUE.fullmatch(node.value) or not _REST.fullmatch(line, end.column):
        return None
    return Slot(path, start.column, end.column)


def _derived(template: Template, path: Path, text: str) -> tuple[Manifest, tuple, tuple] | None:
    """`text` as a copy of `template`, or None when it is not one."""
    match = template.pattern.fullmatch(text)
    if match is None:
        return None  # not a copy
    lines = match.groups()
    if lines == template.written:
        return None  # the same text twice: parsed, so that nothing is assumed
    changed: list[int] = []
    values: list[str] = []
    for number, line, theirs in zip(template.numbers, lines, template.written, strict=True):
        if line != theirs:
            value = _new_value(line, theirs, template.slots[number])
            if value is None:
                return None
            changed.append(number)
            values.append(value)
    change = template.change(tuple(changed))
    spec = _spec(template, change, path, values)
    if spec is None:
        return None
    pieces = change.pieces
    json_text = pieces[0] + "".join(
        '"' + values[i] + '"' + piece for i, piece in zip(change.order, pieces[1:], strict=True)
    )
    start, end = template.span
    end += len(text) - len(template.text)
    model = template.manifest
    text = text[start:end] + "\n"
    manifest = Manifest(spec, path, model.index, model.line, json_digest(json_text), text)
    return manifest, template.name_at, (start, end)


def _new_value(line: str, theirs: str, slot: Slot) -> str | None:
    """The value on a changed slot's line, when all else on it is unchanged."""
    rest = theirs[slot.end :]
    if not (line.startswith(theirs[: slot.start]) and line.endswith(rest)):
        return None
    value = line[slot.start : len(line) - len(rest)]
    if not value.isascii() or not _STRING.fullmatch(value) or value in _NOT_STRINGS:
        return None
    return value


def _spec(template: Template, change: _Change, path: Path, values: list[str]) -> JobSpec | None:
    """The copy's spec: the template's with new labels, or `direct_spec` of its data."""
    from broker.manifest.direct import direct_spec

    if change.labels is not None:
        given = list(template.spec_fields)
        try:
            for name, value in zip(change.labels, values, strict=True):
                given[template.field_at[name]] = checks.label(value)
        except ValueError:
            return None
        return type(template.manifest.spec)(*given)
    return direct_spec(_with_values(template.data, change.paths, values), manifest_dir(path))


def _with_values(data: Any, paths: list, values: list) -> Any:
    """A copy of `data` with the value at each path replaced (only the containers on
    the paths are copied: the rest is shared, and nothing writes to a document)."""
    copies: dict[tuple, Any] = {(): _copy(data)}
    for path, value in zip(paths, values, strict=True):
        node = copies[()]
        for depth in range(1, len(path)):
            prefix = path[:depth]
            if prefix not in copies:
                copies[prefix] = node[path[depth - 1]] = _copy(node[path[depth - 1]])
            node = copies[prefix]
        node[path[-1]] = value
    return copies[()]


def _copy(container: Any) -> Any:
    return dict(container) if isinstance(container, dict) else list(container)
