"""pricing.userio: YAML documents keep their marks; every error is located."""

from __future__ import annotations

import pickle
import textwrap
from typing import Literal

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict, ValidationError

from pricing.userio.errors import UserInputError, format_field
from pricing.userio.validation import validation_errors
from pricing.userio.yaml_reader import load_yaml_documents


def write(tmp_path, text, name="file.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return path


class Item(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    name: str
    size: int
    colour: Literal["red", "green", "blue"] = "red"


class Root(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    items: list[Item]


def errors_for(tmp_path, text):
    (doc,) = load_yaml_documents(write(tmp_path, text))
    with pytest.raises(ValidationError) as info:
        Root.model_validate(doc.data)
    return validation_errors(doc, info.value, Root)


def test_documents_hold_safe_load_data_and_index(tmp_path):
    path = write(
        tmp_path,
        """
        a: 1
        b: [x, 2.5, true, null]
        ---
        - one
        ---
        """,
    )
    docs = load_yaml_documents(path)
    assert [d.data for d in docs] == [{"a": 1, "b": ["x", 2.5, True, None]}, ["one"], None]
    assert [d.index for d in docs] == [0, 1, 2]
    assert all(d.path == path for d in docs)


def test_empty_file_has_no_documents(tmp_path):
    assert load_yaml_documents(write(tmp_path, "# only a comment\n")) == []


def test_locate_walks_mappings_and_sequences(tmp_path):
    (doc,) = load_yaml_documents(
        write(
            tmp_path,
            """
            items:
              - name: a
                size: 1
              - name: b
                size: 2
            """,
        )
    )
    assert doc.locate(("items", 1, "size")) == (5, 11)
    assert doc.locate(("items", 1, "size"), key=True) == (5, 5)
    assert doc.locate(("items", 1)) == (4, 5)
    # deepest existing node: the missing field falls back to its mapping, a bad index to the list
    assert doc.locate(("items", 0, "colour")) == (2, 5)
    assert doc.locate(("items", 7, "name")) == (2, 3)
    assert doc.locate(()) == (1, 1)
    assert doc.locate(("nothing",)) == (1, 1)


def test_locate_in_second_document_uses_file_lines(tmp_path):
    docs = load_yaml_documents(write(tmp_path, "a: 1\n---\nb:\n  c: 2\n"))
    assert docs[1].locate(("b", "c")) == (4, 6)


def test_syntax_error_has_parser_line_and_column(tmp_path):
    path = write(tmp_path, "items:\n  - name: a\n    size: [1, 2\n")
    with pytest.raises(UserInputError) as info:
        load_yaml_documents(path)
    err = info.value
    assert (err.path, err.line, err.column, err.field) == (path, 4, 1, "")
    assert str(err).startswith(f"{path}:4:1: YAML syntax error: ")


def test_syntax_error_with_context(tmp_path):
    path = write(tmp_path, "a: 1\nb\nc: 2\n")
    with pytest.raises(UserInputError) as info:
        load_yaml_documents(path)
    assert (info.value.line, info.value.column) == (3, 1)
    assert "could not find expected ':'" in info.value.message
    assert "while scanning a simple key at line 2, column 1" in info.value.message


def test_python_tags_are_refused(tmp_path):
    path = write(tmp_path, "a: !!python/object/apply:os.system [echo hi]\n")
    with pytest.raises(UserInputError) as info:
        load_yaml_documents(path)
    assert info.value.line == 1 and "YAML syntax error" in str(info.value)


def test_duplicate_keys_are_errors(tmp_path):
    path = write(tmp_path, "items:\n  - name: a\n    size: 1\n    name: b\n")
    with pytest.raises(UserInputError) as info:
        load_yaml_documents(path)
    assert str(info.value) == f"{path}:4:5: items[0].name: duplicate key 'name' (first at line 2)"


def test_same_text_different_types_is_not_a_duplicate(tmp_path):
    (doc,) = load_yaml_documents(write(tmp_path, "1: a\n'1': b\n"))
    assert doc.data == {1: "a", "1": "b"}


def test_recursive_alias_does_not_loop(tmp_path):
    (doc,) = load_yaml_documents(write(tmp_path, "a: &x [1, *x]\n"))
    assert doc.data["a"][1] is doc.data["a"]


def test_missing_and_undecodable_files(tmp_path):
    with pytest.raises(UserInputError) as info:
        load_yaml_documents(tmp_path / "nope.yaml")
    assert str(info.value) == f"{tmp_path / 'nope.yaml'}: file not found"
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(b"a: \xff\xfe\n")
    with pytest.raises(UserInputError, match="not UTF-8"):
        load_yaml_documents(bad)


def test_unknown_key_points_at_key_with_did_you_mean(tmp_path):
    errors = errors_for(tmp_path, "items:\n  - name: a\n    sise: 3\n")
    assert len(errors) == 1  # the missing `size` is not reported twice
    err = errors[0]
    assert (err.line, err.column, err.field) == (3, 5, "items[0].sise")
    assert err.message == "unknown field (did you mean 'size'?)"


def test_unknown_key_without_close_name_lists_known_fields(tmp_path):
    errors = errors_for(tmp_path, "items:\n  - name: a\n    size: 3\n    zzz: 1\n")
    assert errors[0].message == "unknown field (known fields: name, size, colour)"


def test_bad_literal_value_gets_did_you_mean(tmp_path):
    errors = errors_for(tmp_path, "items:\n  - name: a\n    size: 3\n    colour: gren\n")
    assert [(e.line, e.column, e.field) for e in errors] == [(4, 13, "items[0].colour")]
    assert errors[0].message == "'gren' is not one of red, green, blue (did you mean 'green'?)"


def test_missing_and_type_errors_are_sorted_by_position(tmp_path):
    errors = errors_for(tmp_path, "items:\n  - size: x\n  - name: b\n    size: 2\n")
    assert [(e.line, e.column, e.field, e.message) for e in errors] == [
        (2, 5, "items[0].name", "field required"),
        (2, 11, "items[0].size", "input should be a valid integer (got 'x')"),
    ]


def test_wrong_shape_messages(tmp_path):
    (err,) = errors_for(tmp_path, "- a\n")
    assert (err.line, err.column, err.field) == (1, 1, "")
    assert err.message == "expected a mapping of key: value, got a list"
    (err,) = errors_for(tmp_path, "items: 3\n")
    assert err.message == "expected a list, got 3"


def test_collect_prints_all_errors_one_per_line(tmp_path):
    a = UserInputError(tmp_path / "p.yaml", 1, 2, "x", "bad")
    b = UserInputError(tmp_path / "p.yaml", 3, 4, "", "worse")
    err = UserInputError.collect([a, b])
    assert str(err) == f"{tmp_path}/p.yaml:1:2: x: bad\n{tmp_path}/p.yaml:3:4: worse"
    assert err.errors[1].one_line() == b.one_line()
    assert isinstance(err, ValueError)
    assert str(pickle.loads(pickle.dumps(err))) == str(err)


def test_str_format_from_the_brief():
    err = UserInputError("pools.yaml", 12, 5, "pools[0].nodes", "field required")
    assert str(err) == "pools.yaml:12:5: pools[0].nodes: field required"


@given(st.lists(st.one_of(st.integers(0, 50), st.from_regex(r"[a-z_]{1,8}", fullmatch=True))))
def test_format_field_round_trips_parts(parts):
    text = format_field(parts)
    assert text.count("[") == sum(isinstance(p, int) for p in parts)
    for part in parts:
        assert str(part) in text
