"""Read a user's YAML file so that every error names the file, line, column and field.

Every YAML file a user writes (on-prem pools, price overlays, job manifests)
goes through `load_yaml_documents`, and every complaint about it is a
`UserInputError` printed like a compiler's:

    pools.yaml:12:5: pools[0].gpus_per_nod: unknown field (did you mean 'gpus_per_node'?)

A file may hold several `---` documents. Each comes back as a `YamlDocument`:
its plain data (what `yaml.safe_load` gives) plus the composed node tree, so
that a field path such as `("pools", 0, "gpu")` can be located afterwards.
Lines and columns are 1-based; 0 means unknown (an unreadable file).

The file is parsed once by `yaml.compose_all` with the safe loader, so no tag
can build a Python object: libyaml's `CSafeLoader` when PyYAML was built with
it (several times faster, same nodes and marks), and PyYAML's own parser again
only for a file libyaml refused, since its error messages say more. The data
is built from the nodes as `SafeConstructor` builds it, by a faster builder
for the common tags. Duplicate keys in a mapping, which YAML parsers silently
resolve to the last one, are errors here. `parse_yaml_documents` does the same
for text already in hand (stdin, tests), and `iter_yaml_documents` gives the
documents one at a time (a long file of manifests).

`validation_errors` turns a pydantic `ValidationError` raised on a document's
data into located errors, with a "did you mean" for misspelt keys and for
values outside a Literal or Enum. pydantic and yaml are imported inside the
functions (importing this module must stay cheap for the CLI).
"""

from __future__ import annotations

import enum
import functools
import types
import typing
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pricing.suggest import did_you_mean

if TYPE_CHECKING:
    import pydantic
    import yaml

FieldPath = tuple[str | int, ...]


def format_field(field_path: Iterable[str | int]) -> str:
    """`("pools", 0, "nodes")` as `pools[0].nodes`."""
    out = ""
    for part in field_path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def suggestion(name: object, choices: Iterable[str]) -> str:
    """A suffix such as " (did you mean 'node'?)", or "" when nothing is close."""
    if not isinstance(name, str):
        return ""
    close = did_you_mean(name, choices, limit=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


class UserInputError(ValueError):
    """A mistake in a user's file, located as `path:line:column: field: message`.

    `related` holds further errors found in the same pass, so that one run can
    report them all; `str()` prints one error per line, this one first.
    """

    def __init__(
        self,
        path: Path | str,
        line: int,
        column: int,
        field: str,
        message: str,
        related: Sequence[UserInputError] = (),
    ) -> None:
        super().__init__(path, line, column, field, message, tuple(related))
        self.path = Path(path)
        self.line = line
        self.column = column
        self.field = field
        self.message = message
        self.related: tuple[UserInputError, ...] = tuple(related)

    @classmethod
    def collect(cls, errors: Sequence[UserInputError]) -> UserInputError:
        """One error carrying all of `errors` (at least one), the first as the head."""
        head, *rest = errors
        return cls(head.path, head.line, head.column, head.field, head.message, rest)

    @property
    def errors(self) -> tuple[UserInputError, ...]:
        """This error and the related ones, each on its own."""
        return (self, *self.related)

    def one_line(self) -> str:
        """This error alone, without the related ones."""
        where = str(self.path)
        if self.line:
            where += f":{self.line}:{self.column}"
        if self.field:
            return f"{where}: {self.field}: {self.message}"
        return f"{where}: {self.message}"

    def __str__(self) -> str:
        return "\n".join(error.one_line() for error in self.errors)


@dataclass(frozen=True)
class YamlDocument:
    """One `---` document of a file: its plain data, and where each node came from."""

    data: Any  # what yaml.safe_load would give: dicts, lists, str, int, float, bool, None, dates
    path: Path
    index: int  # 0-based position of the document in the file
    node: yaml.Node = field(repr=False, compare=False)

    def locate(self, field_path: Sequence[str | int], *, key: bool = False) -> tuple[int, int]:
        """1-based (line, column) of the deepest node that exists along `field_path`.

        With `key=True` and a path that ends on an existing mapping key, the key
        itself is located rather than its value (an unknown field is best shown
        at its name). A path that leaves the tree stops at the last node found,
        so the document start is the final fallback.
        """
        mark = self.node.start_mark
        for i, (key_node, node) in enumerate(self._walk(field_path)):
            last = i == len(field_path) - 1
            mark = key_node.start_mark if key and last and key_node is not None else node.start_mark
        return mark.line + 1, mark.column + 1

    def as_written(self, field_path: Sequence[str | int]) -> FieldPath:
        """`field_path` cut before an index into a single value.

        A field that takes one value or a list (`gpu: A100` for `gpu: [A100]`)
        is validated as a list, so its errors carry an index; when the file
        gives one value, the field is named as written, without the index.
        """
        import yaml

        nodes = list(self._walk(field_path))
        n = len(nodes)
        if n < len(field_path) and isinstance(field_path[n], int):
            node = nodes[-1][1] if nodes else self.node
            if isinstance(node, yaml.ScalarNode):
                return tuple(field_path[:n])
        return tuple(field_path)

    def _walk(
        self, field_path: Sequence[str | int]
    ) -> Iterator[tuple[yaml.Node | None, yaml.Node]]:
        """(key node or None, value node) for each part of `field_path` found, from the root."""
        import yaml

        node: yaml.Node = self.node
        for part in field_path:
            if isinstance(node, yaml.MappingNode):
                found = None
                for key_node, value_node in node.value:  # the last duplicate wins, as in YAML
                    if isinstance(key_node, yaml.ScalarNode) and key_node.value == str(part):
                        found = key_node, value_node
                if found is None:
                    return
                yield found
                node = found[1]
            elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
                if not 0 <= part < len(node.value):
                    return
                node = node.value[part]
                yield None, node
            else:
                return

    def error(
        self, field_path: Sequence[str | int], message: str, *, key: bool = False
    ) -> UserInputError:
        """A UserInputError located at `field_path` in this document."""
        line, column = self.locate(field_path, key=key)
        return UserInputError(self.path, line, column, format_field(field_path), message)


def load_yaml_documents(path: Path) -> list[YamlDocument]:
    """Parse every document of a YAML file; raise UserInputError on any syntax error.

    An empty file (or one of comments only) gives an empty list; an empty
    document between two `---` gives a document whose data is None.
    """
    path = Path(path)
    return parse_yaml_documents(read_yaml_text(path), path)


def read_yaml_text(path: Path) -> str:
    """A user's file as text (a UTF-8 byte-order mark dropped); UserInputError when unreadable."""
    path = Path(path)
    try:
        return path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise UserInputError(path, 0, 0, "", "file not found") from None
    except IsADirectoryError:
        raise UserInputError(path, 0, 0, "", "is a directory, not a file") from None
    except UnicodeDecodeError as exc:
        raise UserInputError(path, 0, 0, "", f"not UTF-8 text ({exc.reason})") from None
    except OSError as exc:
        raise UserInputError(path, 0, 0, "", f"cannot read: {exc.strerror or exc}") from None


def parse_yaml_documents(text: str, path: Path) -> list[YamlDocument]:
    """`load_yaml_documents` for text already read; `path` is only used to name it in errors."""
    return list(iter_yaml_documents(text, path))


def iter_yaml_documents(text: str, path: Path) -> Iterator[YamlDocument]:
    """The documents of `text` one at a time; a syntax error is raised on reaching it.

    For long files: a caller that keeps only what it needs of each document
    does not hold every node tree at once (which also spares the garbage
    collector from scanning them over and over).
    """
    import yaml

    path = Path(path)
    given = 0
    if yaml.__with_libyaml__:
        try:
            for document in _compose(text, path, _fast_loader()):
                yield document
                given += 1
            return
        except yaml.YAMLError:
            pass  # said again below: PyYAML's own messages say more, and count characters
    try:
        for document in _compose(text, path, yaml.SafeLoader):
            if document.index >= given:  # the two parsers agree on the documents before an error
                yield document
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


def _compose(text: str, path: Path, loader: type) -> Iterator[YamlDocument]:
    import yaml

    for index, node in enumerate(yaml.compose_all(text, Loader=loader)):
        yield YamlDocument(_Builder(path, node).build(node), path, index, node)


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

    def __init__(self, path: Path, root: yaml.Node) -> None:
        import yaml

        self.path, self.root = path, root
        self.yaml = yaml
        self.fallback = yaml.constructor.SafeConstructor()
        self.built: dict[int, Any] = {}  # id(node) -> object: an alias gives the same object
        self.checked = False  # whether the whole document was checked for duplicate keys

    def build(self, node: yaml.Node) -> Any:
        tag = node.tag
        if node.__class__ is self.yaml.ScalarNode:  # most nodes: no alias bookkeeping needed
            if tag == self._STR:
                return node.value
            value = node.value
            if tag == self._INT and value.isascii() and value.isdigit():
                if value[0] != "0" or value == "0":  # 010 is octal in YAML 1.1
                    return int(value)
            return self.fallback.construct_object(node)
        known = self.built.get(id(node), self)
        if known is not self:
            return known
        if tag == self._SEQ and isinstance(node, self.yaml.SequenceNode):
            items: list[Any] = []
            self.built[id(node)] = items
            items.extend(self.build(item) for item in node.value)
            return items
        if tag == self._MAP and isinstance(node, self.yaml.MappingNode):
            if not any(key.tag == self._MERGE for key, _ in node.value):
                return self._mapping(node)
        if not self.checked:  # a merge key or another tag: checked as SafeConstructor builds it
            _check_duplicate_keys(self.path, self.root, (), set())
            self.checked = True
        value = self.fallback.construct_object(node, deep=True)
        self.built[id(node)] = value
        return value

    def _mapping(self, node: yaml.MappingNode) -> dict[Any, Any]:
        mapping: dict[Any, Any] = {}
        self.built[id(node)] = mapping
        names: set[tuple[str, str]] = set()
        for key_node, value_node in node.value:
            if isinstance(key_node, self.yaml.ScalarNode):
                if (key_node.tag, key_node.value) in names:
                    _check_duplicate_keys(self.path, self.root, (), set())  # raises, naming it
                names.add((key_node.tag, key_node.value))
            key = self.build(key_node)
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
            mapping[key] = self.build(value_node)
        return mapping


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


def validation_errors(
    doc: YamlDocument, exc: pydantic.ValidationError, model: type[pydantic.BaseModel]
) -> list[UserInputError]:
    """Located errors, sorted by position, for `exc` raised validating `doc.data` as `model`.

    `model` is the root model: the known field names and allowed values at each
    level are read from it, for the "did you mean" of an unknown key
    (`extra_forbidden`) or of a value outside a Literal or an Enum. A missing
    field whose name is what a misspelt key in the same mapping should have
    been is not reported twice: the misspelt key's error says it. A field that
    takes one value or a list, given one value, is named without an index.
    """
    raw = exc.errors(include_url=False)
    suggested: set[tuple[str | int, ...]] = set()  # fields a misspelt key was matched to
    errors: list[UserInputError] = []
    for err in raw:
        loc = tuple(err["loc"])
        if err["type"] == "extra_forbidden" and loc and isinstance(loc[-1], str):
            names = _field_names(_annotation_at(model, loc[:-1]))
            close = did_you_mean(loc[-1], names, limit=1)
            suggested.update((*loc[:-1], name) for name in close)
            message = "unknown field" + (f" (did you mean {close[0]!r}?)" if close else "")
            if not close and names:
                message += f" (known fields: {', '.join(names)})"
            errors.append(doc.error(loc, message, key=True))
    for err in raw:
        loc = tuple(err["loc"])
        if err["type"] == "extra_forbidden" or (err["type"] == "missing" and loc in suggested):
            continue
        errors.append(doc.error(doc.as_written(loc), _message(err, _annotation_at(model, loc))))
    return sorted(errors, key=lambda e: (e.line, e.column))


def _message(err: dict[str, Any], annotation: object) -> str:
    kind, value = err["type"], err.get("input")
    if kind == "missing":
        return "field required"
    if kind in ("value_error", "assertion_error") and "error" in err.get("ctx", {}):
        return str(err["ctx"]["error"])
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        return f"expected a mapping of key: value, got {_kind_of(value)}"
    if kind in ("list_type", "tuple_type"):
        return f"expected a list, got {_kind_of(value)}"
    if kind in ("literal_error", "enum"):
        choices = _choices(annotation)
        allowed = ", ".join(choices) if choices else err.get("ctx", {}).get("expected", "")
        return f"{value!r} is not one of {allowed}{suggestion(value, choices)}"
    message = err["msg"]
    if not isinstance(value, dict | list):
        message += f" (got {value!r})"
    return message[:1].lower() + message[1:]


def _kind_of(value: object) -> str:
    if value is None:
        return "nothing"
    return {dict: "a mapping", list: "a list", str: "a string"}.get(type(value), repr(value))


def _strip_optional(annotation: object) -> object:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return annotation


def _annotation_at(model: object, loc: Sequence[str | int]) -> object:
    """The type expected at `loc` under `model`, or None when it cannot be told."""
    current: object = model
    for part in loc:
        current = _strip_optional(current)
        origin = typing.get_origin(current)
        args = typing.get_args(current)
        if isinstance(part, int) and origin in (list, tuple, set, frozenset, Sequence) and args:
            current = args[0]
        elif isinstance(part, str) and hasattr(current, "model_fields"):
            fields = current.model_fields  # type: ignore[attr-defined]
            info = fields.get(part) or next(
                (f for f in fields.values() if getattr(f, "alias", None) == part), None
            )
            if info is None:
                return None
            current = info.annotation
        elif origin in (dict, typing.Mapping) and len(args) == 2:
            current = args[1]
        else:
            return None
    return _strip_optional(current)


def _field_names(annotation: object) -> list[str]:
    fields = getattr(annotation, "model_fields", None)
    if not isinstance(fields, dict):
        return []
    return [getattr(info, "alias", None) or name for name, info in fields.items()]


def _choices(annotation: object) -> list[str]:
    if typing.get_origin(annotation) is typing.Literal:
        return [str(a) for a in typing.get_args(annotation)]
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return [str(member.value) for member in annotation]
    return []
