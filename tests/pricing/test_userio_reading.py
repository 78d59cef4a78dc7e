"""pricing.userio.reading: the one reader of user files refuses what is no regular file,
caps size before parsing, decodes strictly with a located error; and the readers built
on it (YAML, catalogs and their compiled cache, bills, traces) keep to it."""

from __future__ import annotations

import gzip
import os
import threading
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pricing.userio.errors import UserInputError
from pricing.userio.reading import Limits, load_json, read_bytes, read_gzip_or_plain, read_text
from pricing.userio.yaml_reader import load_yaml_documents, parse_yaml_documents


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path):
    fifo = tmp_path / "jobs.yaml"
    os.mkfifo(fifo)
    done = threading.Event()
    errors = []

    def read():
        try:
            read_text(fifo, "yaml")
        except UserInputError as exc:
            errors.append(exc)
        done.set()

    threading.Thread(target=read, daemon=True).start()
    assert done.wait(10), "reading a FIFO waited for a writer"
    assert "is a FIFO (named pipe), not a regular file" in str(errors[0])


@pytest.mark.parametrize(
    ("make", "said"),
    [
        (lambda p: p.mkdir(), "is a directory, not a file"),
        (lambda p: p.symlink_to("/dev/zero"), "is a character device, not a regular file"),
        (lambda p: None, "file not found"),
    ],
)
def test_what_is_no_regular_file_is_named(tmp_path, make, said):
    path = tmp_path / "pools.yaml"
    make(path)
    with pytest.raises(UserInputError, match=said) as info:
        read_bytes(path, "yaml")
    assert info.value.path == path


def test_the_size_cap_applies_before_parsing_and_names_its_setting(tmp_path, monkeypatch):
    path = tmp_path / "jobs.yaml"
    path.write_bytes(b"a: 1\n" * 1000)
    assert read_text(path, "yaml", Limits(yaml_bytes=5000)).startswith("a: 1")
    with pytest.raises(UserInputError, match=r"is 4\.9 KiB, over the 4 KiB limit .*max_yaml_bytes"):
        read_text(path, "yaml", Limits(yaml_bytes=4096))
    monkeypatch.setenv("BROKER_MAX_YAML_BYTES", "100")
    with pytest.raises(UserInputError, match="over the 100 bytes limit"):
        load_yaml_documents(path)


def test_a_gzip_bomb_stops_at_the_cap(tmp_path):
    path = tmp_path / "trace.json.gz"
    path.write_bytes(gzip.compress(b"0" * 1_000_000))
    assert len(path.read_bytes()) < 10_000
    with pytest.raises(UserInputError, match="inflates to more than the 97.7 KiB limit"):
        read_gzip_or_plain(path, "trace", Limits(trace_bytes=100_000))
    path.write_bytes(b"\x1f\x8b not really")
    with pytest.raises(UserInputError, match="not a gzip file"):
        read_gzip_or_plain(path, "trace", Limits())


@given(
    st.integers(1, 30), st.integers(1, 40), st.sampled_from([b"\xff", b"\xc3(", b"\xed\xa0\x80"])
)
def test_a_byte_that_is_not_utf8_is_located_exactly(tmp_path_factory, line, column, bad):
    lines = ["é" * 50] * 30  # multi-byte characters before it: columns count bytes
    data = bytearray("\n".join(lines).encode())
    offset = sum(len(text.encode()) + 1 for text in lines[: line - 1]) + (column - 1) * 2
    data[offset:offset] = bad
    path = tmp_path_factory.mktemp("utf8") / "x.yaml"
    path.write_bytes(bytes(data))
    with pytest.raises(UserInputError, match="not UTF-8 text") as info:
        read_text(path, "yaml", Limits())
    assert (info.value.line, info.value.column) == (line, (column - 1) * 2 + 1)


def test_nul_bytes_and_a_utf16_file_are_refused_where_they_are(tmp_path):
    path = tmp_path / "x.csv"
    path.write_bytes(b"a,b\n1,\x002\n")
    with pytest.raises(UserInputError, match=r"x\.csv:2:3: a NUL byte"):
        read_text(path, "catalog", Limits())
    path.write_bytes("\ufeffa,b\n".encode("utf-16-le"))
    with pytest.raises(UserInputError, match=r"x\.csv:1:1: not UTF-8 text \(byte 0xff"):
        read_text(path, "catalog", Limits())


def test_yaml_nested_too_deep_is_located_and_never_a_recursion_error(tmp_path):
    for text in ("a: " + "[" * 5000 + "]" * 5000, "".join(" " * i + "k:\n" for i in range(400))):
        with pytest.raises(UserInputError, match="nested deeper than 64 levels"):
            parse_yaml_documents(text, Path("deep.yaml"))
    assert parse_yaml_documents("a: " + "[" * 60 + "]" * 60, Path("ok.yaml"))[0].data


def test_a_lone_surrogate_escape_is_located(tmp_path):
    with pytest.raises(UserInputError, match=r"x\.yaml:2:7: .*lone surrogate"):
        parse_yaml_documents('a: 1\nname: "\\ud800"\n', Path("x.yaml"))
    assert parse_yaml_documents('name: "\\u00e9\\U0001F600"\n', Path("x.yaml"))[0].data == {
        "name": "é😀"
    }


@given(
    st.text(st.characters(codec=None, min_codepoint=0xD000, max_codepoint=0xE100) | st.characters())
)
def test_a_surrogate_is_found_in_any_double_quoted_value(text):
    """The reader looks for surrogates by encoding (no regular expression to compile)."""
    escaped = '"' + "".join(f"\\U{ord(c):08x}" for c in text) + '"'  # YAML's escapes
    has_surrogate = any(0xD800 <= ord(c) <= 0xDFFF for c in text)
    if has_surrogate:
        with pytest.raises(UserInputError, match="lone surrogate"):
            parse_yaml_documents(f"name: {escaped}\n", Path("x.yaml"))
    else:
        assert parse_yaml_documents(f"name: {escaped}\n", Path("x.yaml"))[0].data == {"name": text}


def test_an_alias_bomb_is_refused_and_a_recursive_alias_still_reads(tmp_path):
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 9)]
    with pytest.raises(UserInputError, match="alias bomb"):
        parse_yaml_documents("\n".join(lines), Path("lol.yaml"))
    (doc,) = parse_yaml_documents("a: &x [1, *x]\n", Path("rec.yaml"))
    assert doc.data["a"][1] is doc.data["a"]


def test_json_traces_are_located_and_nesting_is_refused(tmp_path):
    path = tmp_path / "t.json"
    path.write_text('{"a":\n  [1, 2,]}')
    with pytest.raises(UserInputError, match=r"t\.json:2:9: not JSON"):
        load_json(path, "trace", Limits())
    path.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(UserInputError, match="nested too deep"):
        load_json(path, "trace", Limits())


# --- catalogs ---------------------------------------------------------------------------------


def _catalog(tmp_path: Path, cell: str, value: str) -> Path:
    from tests.hostile.good import catalog_csv
    from tests.hostile.values import _csv_cell

    path = tmp_path / "offers.csv"
    path.write_text(_csv_cell(catalog_csv(10), 3, cell, value))
    return path


@pytest.mark.parametrize(
    ("cell", "value", "said"),
    [
        ("price_on_demand", "inf", "price_on_demand: inf is not a sane value"),
        ("price_spot", "1e400", "price_spot: inf is not a sane value"),
        ("accelerator_count", "1e9", "accelerator_count: 1e+09 is not a sane value"),
        ("as_of", "yesterday", "as_of: 'yesterday': not an ISO date"),
        ("as_of", "1999-12-31", "as_of: '1999-12-31': not a day prices were read (none"),
        ("cloud", "oracle", "cloud: 'oracle': unknown cloud"),
        ("price_on_demand", "0", "price_on_demand: must be positive or missing, never 0"),
    ],
)
def test_a_bad_catalog_cell_names_file_line_and_column(tmp_path, cell, value, said):
    from pricing.catalog import read_offer_table, read_offers_csv
    from pricing.schema import SchemaError

    path = _catalog(tmp_path, cell, value)
    with pytest.raises(SchemaError) as small:  # the csv module's path
        read_offer_table(path)
    assert str(small.value).startswith(f"{path}:5: {said}")
    with pytest.raises(SchemaError) as large:  # the pandas path, for large catalogs
        read_offers_csv(path)
    assert str(large.value).startswith(f"{path}:5: {said}")


def test_a_corrupt_compiled_cache_is_rebuilt(tmp_path):
    from pricing.catalog import _cache_path, read_offer_table
    from tests.hostile.good import catalog_csv

    path = tmp_path / "offers.csv"
    path.write_text(catalog_csv(10))
    first = read_offer_table(path)
    cache = _cache_path(path)
    assert cache is not None and cache.is_file()
    flipped = bytearray(cache.read_bytes())
    flipped[300] ^= 0x40  # a bit of the numbers changed: same length, only the CRC tells
    for garbage in (b"PK\x03\x04" + os.urandom(300), cache.read_bytes()[:200], b"", flipped):
        cache.write_bytes(garbage)
        again = read_offer_table(path)
        assert len(again) == len(first)
        assert repr(read_offer_table(path).records()) == repr(first.records())  # rebuilt, read
    cache.unlink()
    os.mkfifo(cache)
    assert len(read_offer_table(path)) == len(first)  # a FIFO in its place: not waited on


def test_a_bill_with_an_absurd_amount_names_its_line(tmp_path):
    from broker.reports.actual import BillError, read_bill
    from tests.hostile.good import bill_csv
    from tests.hostile.values import _csv_cell

    path = tmp_path / "cur.csv"
    for bad in ("inf", "1e999999", "NaN"):
        path.write_text(_csv_cell(bill_csv(), 1, "lineItem/UnblendedCost", bad))
        with pytest.raises(BillError, match=rf"cur\.csv:3: .*{bad}"):
            read_bill(path)


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="no /proc on this system")
def test_a_file_that_reports_no_size_is_read_whole_and_capped():
    # /proc files report a size of 0: the reader must not trust the size it was told.
    text = read_text("/proc/self/status", "yaml")
    assert text.startswith("Name:") and "\nPid:" in text
    with pytest.raises(UserInputError, match="over the 64 bytes limit"):
        read_text("/proc/self/status", "yaml", Limits(yaml_bytes=64))


def test_a_large_file_comes_back_whole_and_one_byte_over_is_refused(tmp_path):
    path = tmp_path / "big.yaml"
    body = b"".join(b"key%07d: value\n" % i for i in range(200_000))  # 3.2 MB
    path.write_bytes(body)
    assert read_bytes(path, "yaml") == body
    cap = len(body) - 1
    with pytest.raises(UserInputError, match="over the"):
        read_bytes(path, "yaml", Limits(yaml_bytes=cap))


FILE_KINDS = ("plain", "bom", "empty", "missing", "directory", "fifo", "large", "latin1", "nul",
              "symlink", "dangling")  # fmt: skip


@given(st.lists(st.sampled_from(FILE_KINDS), min_size=1, max_size=12))
def test_reading_many_files_gives_what_reading_each_gives(tmp_path_factory, kinds):
    """`read_texts` (a folder's files in one call) is `read_text` of each, its error in
    place: the same text, or the same located error, file by file, in order."""
    from pricing.userio.reading import read_texts

    folder = tmp_path_factory.mktemp("many")
    limits = Limits(yaml_bytes=64)
    paths = []
    for i, kind in enumerate(kinds):
        path = folder / f"f{i}.yaml"
        if kind in ("plain", "symlink"):
            path.write_text(f"name: job-{i}\n")
        elif kind == "bom":
            path.write_bytes(b"\xef\xbb\xbfname: x\n")
        elif kind == "empty":
            path.write_bytes(b"")
        elif kind == "directory":
            path.mkdir()
        elif kind == "fifo":
            os.mkfifo(path)
        elif kind == "large":
            path.write_text("x" * 65)
        elif kind == "latin1":
            path.write_bytes(b"name: caf\xe9\n")
        elif kind == "nul":
            path.write_bytes(b"name: a\x00b\n")
        if kind in ("symlink", "dangling"):
            link = folder / f"link{i}.yaml"
            link.symlink_to(path if kind == "symlink" else folder / "nowhere")
            path = link
        paths.append(path)

    def each(path):
        try:
            return ("text", read_text(path, "yaml", limits))
        except UserInputError as exc:
            return ("error", str(exc))

    many = [
        ("text", t) if isinstance(t, str) else ("error", str(t))
        for t in read_texts(paths, "yaml", limits)
    ]
    assert many == [each(path) for path in paths]
