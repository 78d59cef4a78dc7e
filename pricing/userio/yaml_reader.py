"""Read a user's YAML file into documents that know where each of their values was written.

Every YAML file a user writes (on-prem pools, price overlays, job manifests,
queue policy) goes through `load_yaml_documents`, and every complaint about it
is a located `UserInputError` (see `pricing.userio.errors`).

A file may hold several `---` documents. Each comes back as a `YamlDocument`:
its plain data (what `yaml.safe_load` gives) plus the composed node tree, so
that a field path such as `("pools", 0, "gpu")` can be located afterwards
(`pricing.userio.locate`).

The file is parsed once by `yaml.compose_all` with the safe loader, so no tag
can build a Python object: libyaml's `CSafeLoader` when PyYAML was built with
it (several times faster, same nodes and marks), and PyYAML's own parser again
only for a file libyaml refused, since its error messages say more. The data
is built from the nodes as `SafeConstructor` builds it, by a faster builder
for the common tags. Duplicate keys in a mapping, which YAML parsers silently
resolve to the last one, are errors here. `parse_yaml_documents` does the same
for text already in hand (stdin, tests), and `iter_yaml_documents` gives the
documents one at a time (a long file of manifests). yaml is imported inside the
functions (importing this module must stay cheap for the CLI).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pricing.userio import locate
from pricing.userio.errors import FieldPath, UserInputError, format_field
from pricing.userio.reading import Limits, read_text

if TYPE_CHECKING:
    import yaml

MAX_EXPANDED_NODES = 1_000_000  # values of one document once its aliases are expanded


@dataclass(frozen=True, eq=False)
class YamlDocument:
    """One `---` document of a file: its plain data, and where each node came from."""

    data: Any  # what yaml.safe_load would give: dicts, lists, str, int, float, bool, None, dates
    path: Path
    index: int  # 0-based position of the document in the file
    node: yaml.Node = field(repr=False, compare=False)

    def locate(self, field_path: Sequence[str | int], *, key: bool = False) -> tuple[int, int]:
        """1-based (line, column) of `field_path` in this document (`locate.locate`)."""
        return locate.locate(self.node, field_path, key=key)

    def as_written(self, field_path: Sequence[str | int]) -> FieldPath:
        """`field_path` named as the file writes it (`locate.as_written`)."""
        return locate.as_written(self.node, field_path)

    def error(
        self, field_path: Sequence[str | int], message: str, *, key: bool = False
    ) -> UserInputError:
        """A UserInputError located at `field_path` in this document."""
        line, column = self.locate(field_path, key=key)
        return UserInputError(self.path, line, column, format_field(field_path), message)


def load_yaml_documents(path: Path, limits: Limits | None = None) -> list[YamlDocument]:
    """Parse every document of a YAML file; raise UserInputError on any syntax error.

    The file is read by `pricing.userio.reading` (a regular file, within the YAML size
    cap of `limits`, strict UTF-8). An empty file (or one of comments only) gives an
    empty list; an empty document between two `---` gives a document whose data is None.
    """
    path = Path(path)
    limits = limits or Limits.resolved()
    return list(iter_yaml_documents(read_yaml_text(path, limits), path, limits.nesting_depth))


def read_yaml_text(path: Path, limits: Limits | None = None) -> str:
    """A user's file as text (a UTF-8 byte-order mark dropped); UserInputError when it
    cannot be read, is no regular file, is over the YAML size cap or is not UTF-8."""
    return read_text(Path(path), "yaml", limits)


def parse_yaml_documents(
    text: str, path: Path, max_depth: int = Limits().nesting_depth
) -> list[YamlDocument]:
    """`load_yaml_documents` for text already read; `path` is only used to name it in errors."""
    return list(iter_yaml_documents(text, path, max_depth))


def iter_yaml_documents(
    text: str, path: Path, max_depth: int = Limits().nesting_depth
) -> Iterator[YamlDocument]:
    """The documents of `text` one at a time; a syntax error is raised on reaching it.

    For long files: a caller that keeps only what it needs of each document
    does not hold every node tree at once (which also spares the garbage
    collector from scanning them over and over). Lists and mappings nested deeper
    than `max_depth` are an error at the first one too deep.
    """
    import yaml

    path = Path(path)
    given = 0
    if yaml.__with_libyaml__:
        try:
            for document in _compose(text, path, _fast_loader(), max_depth):
                yield document
                given += 1
            return
        except yaml.MarkedYAMLError as exc:
            if "nesting depth" in str(exc.problem):  # libyaml's own cap (1000): said as ours
                raise _too_deep(path, exc.problem_mark, max_depth) from None
        except yaml.YAMLError:
            pass  # said again below: PyYAML's own messages say more, and count characters
    try:
        for document in _compose(text, path, yaml.SafeLoader, max_depth):
            if document.index >= given:  # the two parsers agree on the documents before an error
                yield document
    except RecursionError:  # PyYAML's composer recurses: a file nested too deep for it
        raise UserInputError(
            path, 0, 0, "", f"lists and mappings nested deeper than {max_depth} levels"
        ) from None
    except yaml.MarkedYAMLError as exc:
        raise _syntax_error(path, exc) from None
    except yaml.YAMLError as exc:  # ReaderError: a character YAML does not allow
        position = getattr(exc, "position", None)
        line, column = _line_column(text, position) if position is not None else (0, 0)
        reason = getattr(exc, "reason", None) or str(exc)
        raise UserInputError(path, line, column, "", f"YAML syntax error: {reason}") from None


@functools.cache
def _fast_loader() -> type:
    """libyaml's CSafeLoader, remembering how plain scalars resolve (files repeat their keys)."""
    import yaml

    resolve = functools.lru_cache(maxsize=4096)(
        functools.partial(yaml.resolver.Resolver.resolve, yaml.resolver.Resolver())
    )

    class FastSafeLoader(yaml.CSafeLoader):  # type: ignore[misc]
        def resolve(self, kind: type, value: str | None, implicit: tuple[bool, bool]) -> str:
            return resolve(kind, value, implicit)

    return FastSafeLoader


def _compose(text: str, path: Path, loader: type, max_depth: int) -> Iterator[YamlDocument]:
    import yaml

    for index, node in enumerate(yaml.compose_all(text, Loader=loader)):
        builder = _Builder(path, node, max_depth)
        data = builder.build(node)
        if builder.aliased:
            _check_expansion(path, node, MAX_EXPANDED_NODES)
        yield YamlDocument(data, path, index, node)


def _check_expansion(path: Path, root: yaml.Node, limit: int) -> None:
    """Raise when the document, its aliases expanded, holds more than `limit` nodes: ten
    aliases of ten aliases of ... (a "billion laughs") are a few lines of YAML that
    every reader walking the data (validation, digests) would take forever over. Sizes
    are memoised per node, so this walk is as long as the file; a recursive alias
    counts once."""
    import yaml

    sizes: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        if isinstance(node, yaml.ScalarNode):
            continue
        parts = [
            part for pair in node.value for part in (pair if isinstance(pair, tuple) else (pair,))
        ]
        if children_done:
            on_path.discard(id(node))
            total = 1 + sum(sizes.get(id(part), 1) for part in parts)
            if total > limit:
                mark = node.start_mark
                message = f"aliases expand to more than {limit:,} values (a YAML alias bomb)"
                raise UserInputError(path, mark.line + 1, mark.column + 1, "", message)
            sizes[id(node)] = total
            continue
        if id(node) in sizes or id(node) in on_path:
            continue
        on_path.add(id(node))
        stack.append((node, True))
        stack.extend((part, False) for part in parts if id(part) not in sizes)


def _too_deep(path: Path, mark: yaml.Mark | None, max_depth: int) -> UserInputError:
    line, column = (mark.line + 1, mark.column + 1) if mark is not None else (0, 0)
    message = f"lists and mappings nested deeper than {max_depth} levels"
    return UserInputError(path, line, column, "", message)


def _has_surrogate(text: str) -> bool:
    """Whether `text` holds a surrogate code point: the only ones UTF-8 cannot encode (a
    regular expression of their range cost 0.3 ms to compile, on every cold start)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _lone_surrogate(path: Path, node: yaml.Node) -> UserInputError:
    """A `"\\ud800"` escape: text no file can hold (it cannot be written as UTF-8)."""
    mark = node.start_mark
    message = "an escape such as \\ud800 is half of a character (a lone surrogate), not text"
    return UserInputError(path, mark.line + 1, mark.column + 1, "", message)


def _unbuildable(path: Path, node: yaml.Node, exc: Exception) -> UserInputError:
    """A value YAML reads but no Python value holds: a date that is no date (`2026-02-30`,
    unquoted, is read as one), an integer too long to convert (Python's 4,300 digits)."""
    mark = node.start_mark
    shown = node.value if isinstance(node.value, str) else ""
    shown = repr(shown[:40] + "...") if len(shown) > 40 else repr(shown)
    reason = str(exc).split(";")[0]
    if "integer string conversion" in reason:
        reason = "an integer too long to read"
    where = f"{shown}: " if shown != "''" else ""
    message = f"{where}not a value ({reason}); quote it if it is text"
    return UserInputError(path, mark.line + 1, mark.column + 1, "", message)


class _Builder:
    """A document's plain data, exactly as `SafeConstructor` builds it, several times faster.

    Strings, plain integers, lists and mappings (nearly all of a config file)
    are built here; every other tag, and a mapping with a `<<` merge key, is
    handed to `SafeConstructor`, which refuses unknown tags. Duplicate keys are
    found on the way and reported by `_check_duplicate_keys`, which names the field.
    """

    _STR = "tag:yaml.org,2002:str"
    _INT = "tag:yaml.org,2002:int"
    _SEQ = "tag:yaml.org,2002:seq"
    _MAP = "tag:yaml.org,2002:map"
    _MERGE = "tag:yaml.org,2002:merge"

    def __init__(self, path: Path, root: yaml.Node, max_depth: int) -> None:
        import yaml

        self.path, self.root, self.max_depth = path, root, max_depth
        self.yaml = yaml
        self.fallback = yaml.constructor.SafeConstructor()
        self.built: dict[int, Any] = {}  # id(node) -> object: an alias gives the same object
        self.checked = False  # whether the whole document was checked for duplicate keys
        self.aliased = False  # whether an alias was met (then its expansion is measured)

    def build(self, node: yaml.Node, depth: int = 0) -> Any:
        tag = node.tag
        if node.__class__ is self.yaml.ScalarNode:  # most nodes: no alias bookkeeping needed
            if tag == self._STR:
                value = node.value
                if node.style == '"' and not value.isascii() and _has_surrogate(value):
                    raise _lone_surrogate(self.path, node)
                return value
            return self._scalar(node, tag)
        known = self.built.get(id(node), self)
        if known is not self:
            self.aliased = True
            return known
        if depth >= self.max_depth:
            raise _too_deep(self.path, node.start_mark, self.max_depth)
        if tag == self._SEQ and isinstance(node, self.yaml.SequenceNode):
            items: list[Any] = []
            self.built[id(node)] = items
            items.extend(self.build(item, depth + 1) for item in node.value)
            return items
        if tag == self._MAP and isinstance(node, self.yaml.MappingNode):
            if not any(key.tag == self._MERGE for key, _ in node.value):
                return self._mapping(node, depth)
        if not self.checked:  # a merge key or another tag: checked as SafeConstructor builds it
            _check_depth(self.path, node, depth, self.max_depth)
            _check_duplicate_keys(self.path, self.root, (), set())
            self.checked = True
        try:
            value = self.fallback.construct_object(node, deep=True)
        except (ValueError, OverflowError) as exc:  # a scalar inside it no Python value holds
            raise _unbuildable(self.path, node, exc) from None
        if isinstance(value, str) and _has_surrogate(value):
            raise _lone_surrogate(self.path, node)
        self.built[id(node)] = value
        return value

    def _scalar(self, node: yaml.ScalarNode, tag: str) -> Any:
        """A scalar that is not a plain string; a located error for one that names no
        value (`2026-02-30` read as a date, an integer of 5,000 digits)."""
        value = node.value
        try:
            if tag == self._INT and value.isascii() and value.isdigit():
                if value[0] != "0" or value == "0":  # 010 is octal in YAML 1.1
                    return int(value)
            return self.fallback.construct_object(node)
        except (ValueError, OverflowError) as exc:
            raise _unbuildable(self.path, node, exc) from None

    def _mapping(self, node: yaml.MappingNode, depth: int) -> dict[Any, Any]:
        mapping: dict[Any, Any] = {}
        self.built[id(node)] = mapping
        names: set[tuple[str, str]] = set()
        for key_node, value_node in node.value:
            if isinstance(key_node, self.yaml.ScalarNode):
                if (key_node.tag, key_node.value) in names:
                    _check_duplicate_keys(self.path, self.root, (), set())  # raises, naming it
                names.add((key_node.tag, key_node.value))
            key = self.build(key_node, depth + 1)
            try:
                if key.__class__ is not str:
                    hash(key)
            except TypeError:
                raise self.yaml.constructor.ConstructorError(
                    "while constructing a mapping",
                    node.start_mark,
                    "found unhashable key",
                    key_node.start_mark,
                ) from None
            mapping[key] = self.build(value_node, depth + 1)
        return mapping


def _check_depth(path: Path, top: yaml.Node, depth: int, max_depth: int) -> None:
    """Raise when lists and mappings under `top` (at `depth`) go deeper than `max_depth`:
    a walk without recursion, before `SafeConstructor` recurses into them."""
    import yaml

    pending, seen = [(top, depth)], set()
    while pending:
        node, level = pending.pop()
        if isinstance(node, yaml.ScalarNode) or id(node) in seen:
            continue
        seen.add(id(node))
        if level >= max_depth:
            raise _too_deep(path, node.start_mark, max_depth)
        for child in node.value:  # nodes of a list, (key, value) pairs of a mapping
            for part in child if isinstance(child, tuple) else (child,):
                pending.append((part, level + 1))


def _syntax_error(path: Path, exc: yaml.MarkedYAMLError) -> UserInputError:
    mark = exc.problem_mark or exc.context_mark
    line, column = (mark.line + 1, mark.column + 1) if mark is not None else (0, 0)
    message = f"YAML syntax error: {exc.problem or exc.context or 'invalid YAML'}"
    if exc.problem and exc.context:
        context = exc.context
        if exc.context_mark is not None and exc.context_mark is not mark:
            context += f" at line {exc.context_mark.line + 1}, column {exc.context_mark.column + 1}"
        message += f" ({context})"
    return UserInputError(path, line, column, "", message)


def _line_column(text: str, position: int) -> tuple[int, int]:
    before = text[:position]
    return before.count("\n") + 1, position - (before.rfind("\n") + 1) + 1


def _check_duplicate_keys(path: Path, node: yaml.Node, at: FieldPath, seen: set[int]) -> None:
    import yaml

    if id(node) in seen:  # an alias: already checked, and it may refer to itself
        return
    seen.add(id(node))
    if isinstance(node, yaml.MappingNode):
        first_line: dict[tuple[str, str], int] = {}
        for key_node, value_node in node.value:
            name = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
            if isinstance(name, str) and key_node.tag != "tag:yaml.org,2002:merge":
                if (key_node.tag, name) in first_line:
                    mark = key_node.start_mark
                    raise UserInputError(
                        path,
                        mark.line + 1,
                        mark.column + 1,
                        format_field((*at, name)),
                        f"duplicate key {name!r} (first at line {first_line[key_node.tag, name]})",
                    )
                first_line[key_node.tag, name] = key_node.start_mark.line + 1
            _check_duplicate_keys(path, value_node, (*at, name if name is not None else "?"), seen)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _check_duplicate_keys(path, item, (*at, i), seen)
