"""Where a field path is in a YAML node tree, so that an error can name line and column.

A field path (`("pools", 0, "gpu")`) is what pydantic and our own checks give
for a value; the composed node tree (`yaml.compose_all`) is what knows its
marks. yaml is imported inside the functions, and only for its node classes.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from pricing.userio.errors import FieldPath

if TYPE_CHECKING:
    import yaml


def locate(
    root: yaml.Node, field_path: Sequence[str | int], *, key: bool = False
) -> tuple[int, int]:
    """1-based (line, column) of the deepest node that exists along `field_path`.

    With `key=True` and a path that ends on an existing mapping key, the key
    itself is located rather than its value (an unknown field is best shown
    at its name). A path that leaves the tree stops at the last node found,
    so the root is the final fallback.
    """
    mark = root.start_mark
    for i, (key_node, node) in enumerate(walk(root, field_path)):
        last = i == len(field_path) - 1
        mark = key_node.start_mark if key and last and key_node is not None else node.start_mark
    return mark.line + 1, mark.column + 1


def as_written(root: yaml.Node, field_path: Sequence[str | int]) -> FieldPath:
    """`field_path` cut before an index into a single value.

    A field that takes one value or a list (`gpu: A100` for `gpu: [A100]`)
    is validated as a list, so its errors carry an index; when the file
    gives one value, the field is named as written, without the index.
    """
    import yaml

    nodes = list(walk(root, field_path))
    n = len(nodes)
    if n < len(field_path) and isinstance(field_path[n], int):
        node = nodes[-1][1] if nodes else root
        if isinstance(node, yaml.ScalarNode):
            return tuple(field_path[:n])
    return tuple(field_path)


def walk(
    root: yaml.Node, field_path: Sequence[str | int]
) -> Iterator[tuple[yaml.Node | None, yaml.Node]]:
    """(key node or None, value node) for each part of `field_path` found, from the root."""
    import yaml

    node: yaml.Node = root
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
