"""library/safe_yaml.py: JSON that YAML 1.1 reads alike is read by the JSON parser, to the same values; any other
text (escapes, tabs, exponent floats YAML reads as strings, NaN, duplicate keys, non-ASCII) goes through the YAML
loader as before (its values and its errors)."""

from __future__ import annotations

import json

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from parplan.library import safe_yaml
from parplan.library.safe_yaml import parse_yaml
from parplan.library.spec_error import SpecError

# mostly printable ASCII (the JSON parser's text), now and then escapes, tabs and other scripts (the YAML loader's)
TEXT = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=8) | st.text(
    st.characters(min_codepoint=0, max_codepoint=0x2FF), max_size=3).filter(lambda s: len(s) < 2 or s.isascii())
NUMBER = st.one_of(st.integers(-10**20, 10**20), st.floats(allow_nan=True, allow_infinity=True),
                   st.sampled_from([1e-05, 2.5e-07, 1e16, 1.5e300, 3e20, 0.1, -0.0]))  # exponent forms: YAML strings
LEAF = st.one_of(st.none(), st.booleans(), NUMBER, TEXT)
DOCS = st.dictionaries(TEXT, st.recursive(LEAF, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(TEXT, inner, max_size=4)), max_leaves=12), max_size=6)


def by_yaml(text: str):
    """What the YAML loader alone reads (or the error it raises)."""
    try:
        return yaml.load(text, Loader=safe_yaml._StrictSafeLoader)
    except yaml.YAMLError as err:
        return type(err)


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(doc=DOCS, indent=st.sampled_from([None, 1, 2]), tight=st.booleans(), ascii_only=st.booleans())
def test_json_reads_as_yaml_reads_it(doc, indent, tight, ascii_only):
    text = json.dumps(doc, indent=indent, separators=(",", ":") if tight else None, ensure_ascii=ascii_only)
    expected = by_yaml(text)
    if isinstance(expected, type):
        with pytest.raises(SpecError):
            parse_yaml(text)
    else:
        got = parse_yaml(text)
        assert json.dumps(got, sort_keys=True) == json.dumps(expected, sort_keys=True)  # (NaN: as text both)


@pytest.mark.parametrize("text, plain", [
    ('{"a": 1, "b": [0.5, -0.0, 1.5e+3], "c": {"d": null, "e": true}}', True),
    ('{"a": 1.5e3}', False), ('{"a": 1e-05}', False), ('{"a": 1E+2}', False), ('{"a": NaN}', False),
    ('{"a": "x\\/y"}', False), ('{\t"a": 1}', False), ('{"a": "é"}', False), ('[1, 2]', False), ('{"a": 1} x', False)])
def test_which_text_takes_the_json_parser(text, plain):
    if plain:
        assert safe_yaml._plain_json(text) == by_yaml(text)
    else:
        with pytest.raises(safe_yaml._NotPlainJSON):
            safe_yaml._plain_json(text)


def test_a_duplicate_key_is_the_yaml_loaders_error():
    with pytest.raises(SpecError, match="duplicate key 'a'"):
        parse_yaml('{"a": 1, "a": 2}', "spec_text")
