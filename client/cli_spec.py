"""How a ``solver-cli`` command reads its spec: a file or stdin (``-``), ``--hf-config`` in place of its model,
``--profile``, ``--memory-margin``; and the warnings it prints about the spec on stderr, one ``warning: ...`` line
each, once the command has succeeded (so ``--format json`` output stays parseable)."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Optional

import typer

from parplan.costmodel.errors import ArgumentError
from parplan.library.messages import one_line

if TYPE_CHECKING:  # the spec models are imported inside the functions that build a spec (start-up time)
    from parplan.costmodel.spec.spec import Spec


def print_warning(message: str) -> None:
    """One ``warning: ...`` line on stderr."""
    typer.echo(f"warning: {one_line(message)}", err=True)


def print_spec_warnings(spec: Spec, pareto: Optional[str] = None) -> None:
    """The spec's warnings on stderr, one ``warning: ...`` line each."""
    from parplan.costmodel.spec.spec import spec_warnings

    for warning in spec_warnings(spec, pareto=pareto):
        print_warning(warning)


def read_spec(path: str, hf_config: Optional[str] = None, profile: Optional[str] = None) -> Spec:
    """Load a spec from a file, or from stdin for '-'; ``hf_config`` replaces its model section, ``profile`` its
    ``profile:`` (library/profile.py). What a Hugging Face config could not map is printed as warnings on stderr."""
    from parplan.library.spec_io import MAX_SPEC_BYTES, SpecError, parse_yaml, read_spec_text, spec_from_data

    if path == "-":
        text = sys.stdin.read(MAX_SPEC_BYTES + 1)
        if len(text) > MAX_SPEC_BYTES:
            raise SpecError(f"<stdin>: larger than {MAX_SPEC_BYTES // 2**20} MiB; not a spec file")
        name, base_dir = "<stdin>", "."
    else:
        text, name, base_dir = read_spec_text(path), path, os.path.dirname(path) or "."
    data = parse_yaml(text, name) if text.strip() else None
    if hf_config is not None:
        data = {**data, "model": {"hf_config": os.path.abspath(hf_config)}} if isinstance(data, dict) else data
    data = {**data, "profile": os.path.abspath(profile)} if profile is not None and isinstance(data, dict) else data
    notes: list[str] = []
    spec = spec_from_data(data, name, base_dir=base_dir, notes=notes)
    for note in notes:
        print_warning(note)
    return spec


def with_memory_margin(spec: Spec, margin: Optional[float]) -> Spec:
    """The spec with ``search.memory_margin_gib`` set from ``--memory-margin`` (None: the spec's own); a margin given
    on the command line, 0 included, replaces the memory band's (``search.memory_band`` off)."""
    if margin is None:
        return spec
    import math

    if not math.isfinite(margin) or not 0 <= margin <= 4096:
        raise ArgumentError("--memory-margin", "must be a number of GiB from 0 to 4096", margin)
    search = spec.search.model_copy(update={"memory_margin_gib": float(margin), "memory_band": False})
    return spec.model_copy(update={"search": search})


def with_rank_by(spec: Spec, rank_by: Optional[str]) -> Spec:
    """The spec with ``search.rank_by`` set from ``--rank-by`` (None: the spec's own)."""
    if rank_by is None:
        return spec
    if rank_by not in ("point", "upper"):
        raise ArgumentError("--rank-by", "must be point or upper", rank_by)
    return spec.model_copy(update={"search": spec.search.model_copy(update={"rank_by": rank_by})})
