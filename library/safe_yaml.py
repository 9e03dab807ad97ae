"""YAML text and files read safely: a safe loader that refuses duplicate keys, a bound on what aliases expand to
(an alias bomb), every failure a one-line :class:`~parplan.library.spec_error.SpecError` naming the line and
column, and files read only up to a size cap. Specs, sweeps and profiles are all read through here."""

from __future__ import annotations

import json
import re
from typing import Any

import yaml

from parplan.library.spec_error import SpecError
from parplan.library.validation_messages import short_repr


class _StrictSafeLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that rejects duplicate keys in a mapping (merge keys ``<<`` may still override)."""

    def construct_mapping(self, node, deep=False):  # noqa: D401 - PyYAML API
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, Any] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge" or not isinstance(key_node, yaml.ScalarNode):
                    continue
                key = self.construct_object(key_node, deep=False)
                try:
                    if key in seen:
                        raise yaml.constructor.ConstructorError(
                            "while constructing a mapping", node.start_mark,
                            f"found duplicate key {short_repr(key)}", key_node.start_mark)
                    seen[key] = key_node
                except TypeError:  # unhashable: the base class reports it
                    pass
        return super().construct_mapping(node, deep=deep)


def _yaml_error_message(err: yaml.YAMLError, name: str, text: str) -> str:
    if isinstance(err, yaml.reader.ReaderError):
        position = err.position if isinstance(err.position, int) else 0
        line = text.count("\n", 0, position) + 1
        column = position - (text.rfind("\n", 0, position) + 1) + 1
        char = err.character
        code = ord(char) if isinstance(char, str) and len(char) == 1 else char
        what = f"#x{code:04x}" if isinstance(code, int) else repr(code)
        return f"{name}: malformed YAML at line {line} column {column}: unacceptable character {what}: {err.reason}"
    mark = getattr(err, "problem_mark", None) or getattr(err, "context_mark", None)
    where = f" at line {mark.line + 1} column {mark.column + 1}" if mark is not None else ""
    parts = [p for p in (getattr(err, "problem", None), getattr(err, "context", None)) if p]
    detail = "; ".join(parts) if parts else str(err)
    return f"{name}: malformed YAML{where}: {detail}"


MAX_ALIAS_EXPANSION_NODES = 100_000
"""Nodes that aliases (``*a``) may add to a document once expanded, counted on the composed node graph before
anything is constructed: a 517-byte alias bomb ("billion laughs", CWE-776) would otherwise expand to 10^9
nodes for whoever walks the result. A document without aliases is never refused by this."""


def _alias_expansion(root: yaml.Node) -> int:
    """How many more nodes the document has expanded (every alias copied in place) than composed: the tree
    size is memoised per node object (an alias is the same object), so this is linear in the composed graph."""
    sizes: dict[int, int] = {}

    def size(node: yaml.Node) -> int:
        key = id(node)
        if key not in sizes:
            sizes[key] = 0  # a recursive alias counts once (PyYAML builds it as a cycle)
            if isinstance(node, yaml.MappingNode):
                children = [n for pair in node.value for n in pair]
            elif isinstance(node, yaml.SequenceNode):
                children = list(node.value)
            else:
                children = []
            sizes[key] = min(1 + sum(size(child) for child in children), 10**12)
        return sizes[key]

    return size(root) - len(sizes)


class _NotPlainJSON(Exception):
    """The text is not JSON that YAML reads the same way (:func:`_plain_json`)."""


# what PyYAML's YAML 1.1 resolver reads as a float of a JSON number literal (a dot, an exponent only with its sign:
# "1.5e3" and "1e-05" are strings to it); JSON's other numbers are integers to both
_YAML_FLOAT = re.compile(r"-?[0-9]+\.[0-9]*(?:[eE][-+][0-9]+)?")
# characters YAML's reader and JSON's strings read alike: printable ASCII and line breaks (no tab, no backslash: an
# escape or a tab between tokens goes through the YAML loader)
_PLAIN = re.compile(r"[\n\r\x20-\x5b\x5d-\x7e]*")


def _float(literal: str) -> float:
    if not _YAML_FLOAT.fullmatch(literal):
        raise _NotPlainJSON(literal)
    return float(literal)


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):  # a duplicate key: the YAML loader names it
        raise _NotPlainJSON("duplicate key")
    return out


def _constant(name: str) -> float:
    raise _NotPlainJSON(name)  # NaN, Infinity: YAML reads them as strings


def _plain_json(text: str) -> Any:
    """The JSON object ``text`` as the YAML loader reads it, where JSON and YAML 1.1 read it alike (an object of
    ASCII text without escapes or tabs, unique keys, integers and YAML-shaped floats; a service's request is usually
    ``json.dumps`` of a spec: 0.7 ms through the YAML loader, 16 us here); raises :class:`_NotPlainJSON` otherwise."""
    if not text.lstrip().startswith("{") or not _PLAIN.fullmatch(text):
        raise _NotPlainJSON("not plain")
    try:
        return json.loads(text, parse_float=_float, parse_constant=_constant, object_pairs_hook=_unique)
    except (ValueError, RecursionError) as err:  # (json.JSONDecodeError is a ValueError)
        raise _NotPlainJSON(str(err)) from None


def parse_yaml(text: str, name: str = "spec") -> Any:
    """Parse YAML text with a safe loader; raise :class:`SpecError` on anything malformed. JSON that YAML reads alike
    is read by the JSON parser (:func:`_plain_json`: the same values)."""
    try:
        return _plain_json(text)
    except _NotPlainJSON:
        pass
    try:
        loader = _StrictSafeLoader(text)
        try:
            node = loader.get_single_node()
            if node is None:
                return None
            extra = _alias_expansion(node)
            if extra > MAX_ALIAS_EXPANSION_NODES:
                raise SpecError(f"{name}: YAML aliases expand to {extra} more nodes than written (at most "
                                f"{MAX_ALIAS_EXPANSION_NODES}; an alias bomb?)", source=name)
            return loader.construct_document(node)
        finally:
            loader.dispose()
    except SpecError:
        raise
    except yaml.YAMLError as err:
        raise SpecError(_yaml_error_message(err, name, text), source=name) from None
    except RecursionError:
        raise SpecError(f"{name}: malformed YAML: nested too deeply", source=name) from None
    except (ValueError, TypeError, OverflowError) as err:  # PyYAML resolvers on odd scalars (e.g. huge dates)
        raise SpecError(f"{name}: malformed YAML: {err}", source=name) from None


def read_capped(path: str, limit_bytes: int) -> bytes:
    """A file's bytes, read only up to ``limit_bytes`` + 1 so that a huge file costs no memory; ``ValueError`` with
    the reason ("cannot read: ...", "larger than N MiB") for the caller to frame in its own error type."""
    try:
        with open(path, "rb") as f:
            raw = f.read(limit_bytes + 1)
    except (OSError, ValueError) as err:  # ValueError: embedded NUL in the path
        raise ValueError(f"cannot read: {getattr(err, 'strerror', None) or err}") from None
    if len(raw) > limit_bytes:
        raise ValueError(f"larger than {limit_bytes // 2**20} MiB")
    return raw
