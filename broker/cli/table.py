"""The boxed text table, fitted to a width: headers wrap, long text cells are cut with an
ellipsis, and when that is not enough the least important columns are left out (the
caller says which). Numbers are never cut: a cut number would be a wrong one.

Plain strings in, one string out; the renderer (`broker.cli.render`) decides the width
and whether to colour.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

ELLIPSIS = "…"
SOFT_MIN = 14  # text is first cut no narrower than this (or than it is) ...
MIN_TEXT = 6  # ... and at last no narrower than this (or its header's longest word)

# The box of the table view (rich's HEAVY_HEAD look, which this view replaced: importing
# rich cost `broker plan` a fifth of its time budget): top, header row, header rule,
# body row, bottom; each as (left, column rule, separator, right).
_BOX = (
    ("┏━", "━", "━┳━", "━┓"),
    ("┃ ", " ", " ┃ ", " ┃"),
    ("┡━", "━", "━╇━", "━┩"),
    ("│ ", " ", " │ ", " │"),
    ("└─", "─", "─┴─", "─┘"),
)
BOLD, RESET = "\x1b[1m", "\x1b[0m"


class TextColumn(NamedTuple):
    """One column as the table sees it: header, cells already formatted, alignment,
    importance when columns must go (higher stays longer), whether its cells may be cut
    (numbers and ids may not), an optional cell colour."""

    header: str
    cells: Sequence[str]
    numeric: bool = False
    keep: int = 1
    cut: bool = True
    colour: Callable[[str], str] | None = None  # cell text -> ANSI code ("" for none)


class Fitted(NamedTuple):
    text: str
    hidden: tuple[str, ...]  # headers of the columns left out to fit, in table order


def table(columns: Sequence[TextColumn], width: int | None, colour: bool) -> Fitted:
    """The table of `columns` in at most `width` characters (None: as wide as it is).

    In order, until it fits: headers wrap at spaces; optional columns (`keep` 0 or
    less) go, rightmost first; long text is cut to SOFT_MIN; columns of `keep` 1 go;
    text is cut to MIN_TEXT; then the least important columns go, one by one.
    """
    shown = list(enumerate(columns))
    steps = ((0, None), (None, SOFT_MIN), (1, SOFT_MIN), (None, MIN_TEXT), (99, MIN_TEXT))
    widths = _fit([c for _, c in shown], width, None)
    for level, floor in steps:
        if widths is not None:
            break
        widths = _fit([c for _, c in shown], width, floor)
        while widths is None and level is not None and _droppable(shown, level):
            _drop(shown)
            widths = _fit([c for _, c in shown], width, floor)
    if widths is None:  # one column left, wider than the terminal: cut it to its floor
        widths = [_floor(shown[0][1], MIN_TEXT)]
    kept = {index for index, _ in shown}
    hidden = tuple(c.header for index, c in enumerate(columns) if index not in kept)
    return Fitted(_draw([c for _, c in shown], widths, colour), hidden)


def _droppable(shown: list[tuple[int, TextColumn]], level: int) -> bool:
    return len(shown) > 1 and min(c.keep for _, c in shown) <= level


def _drop(shown: list[tuple[int, TextColumn]]) -> None:
    """Leave out the least important column, the rightmost of those."""
    at = min(range(len(shown)), key=lambda i: (shown[i][1].keep, -i))
    del shown[at]


def _span(widths: Sequence[int]) -> int:
    """The characters a row takes: cells, separators and borders."""
    return sum(widths) + 3 * (len(widths) - 1) + 4


def _natural(column: TextColumn) -> int:
    return max(len(column.header), _cells_width(column))


def _cells_width(column: TextColumn) -> int:
    return max(map(len, column.cells), default=0)


def _word(column: TextColumn) -> int:
    return max((len(word) for word in column.header.split()), default=0)


def _floor(column: TextColumn, least: int) -> int:
    """The narrowest a column may be: numbers and ids whole, text to `least` (or its
    header's longest word), never wider than it is."""
    if column.numeric or not column.cut:
        return max(_cells_width(column), _word(column), 1)
    return min(_natural(column), max(least, _word(column)))


def _fit(columns: Sequence[TextColumn], width: int | None, least: int | None) -> list[int] | None:
    """Column widths that fit `width`, or None when they do not: with headers wrapped
    at spaces, and with `least`, text narrowed (the widest first) down to that."""
    widths = [_natural(c) for c in columns]
    if width is None or _span(widths) <= width:
        return widths
    widths = [max(_cells_width(c), _word(c), 1) for c in columns]
    if least is None:
        return widths if _span(widths) <= width else None
    floors = [_floor(c, least) for c in columns]
    while _span(widths) > width:
        cuttable = [i for i in range(len(columns)) if widths[i] > floors[i]]
        if not cuttable:
            return None
        widest = max(cuttable, key=lambda i: (widths[i], -i))
        widths[widest] -= 1
    return widths


def _wrap(text: str, width: int) -> list[str]:
    """`text` in lines of at most `width` (words kept whole when they fit)."""
    lines: list[str] = []
    current = ""
    for word in text.split():
        candidate = f"{current} {word}" if current else word
        if len(candidate) <= width:
            current = candidate
        else:
            if current:
                lines.append(current)
            current = word
    lines.append(current)
    return [_cut(line, width) for line in lines]


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(width - 1, 0)] + ELLIPSIS


def _draw(columns: Sequence[TextColumn], widths: Sequence[int], colour: bool) -> str:
    """The box: header lines, rule, a line per row, bottom. Column by column, so a
    table of many rows costs little more than its cells (`broker plan` of 10,000 jobs)."""
    headers = [_wrap(c.header, w) for c, w in zip(columns, widths, strict=True)]
    depth = max(len(lines) for lines in headers)

    def rule(kind: int) -> str:
        left, fill, between, right = _BOX[kind]
        return left + between.join(fill * w for w in widths) + right + "\n"

    def lines(kind: int, padded: list[list[str]]) -> list[str]:
        left, _, between, right = _BOX[kind]
        return [left + between.join(cells) + right + "\n" for cells in zip(*padded, strict=True)]

    heads = []
    for c, w, text in zip(columns, widths, headers, strict=True):
        cells = [text[level] if level < len(text) else "" for level in range(depth)]
        heads.append(_pad(cells, w, c.numeric, BOLD if colour else ""))
    body = []
    for c, w in zip(columns, widths, strict=True):
        cells = c.cells
        if _cells_width(c) > w:
            cells = [cell if len(cell) <= w else _cut(cell, w) for cell in cells]
        padded = _pad(cells, w, c.numeric, "")
        if colour and c.colour is not None:
            styles = [c.colour(cell) for cell in c.cells]
            pairs = zip(styles, padded, strict=True)
            padded = [f"{st}{cell}{RESET}" if st else cell for st, cell in pairs]
        body.append(padded)
    out = [rule(0), *lines(1, heads), rule(2)]
    if columns and columns[0].cells:
        out += lines(3, body)
    out.append(rule(4))
    return "".join(out)


def _pad(cells: list[str], width: int, right: bool, style: str) -> list[str]:
    padded = [cell.rjust(width) for cell in cells] if right else [c.ljust(width) for c in cells]
    return [f"{style}{cell}{RESET}" for cell in padded] if style else padded
