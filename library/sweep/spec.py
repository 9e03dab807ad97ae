"""The sweep spec (``solver-cli sweep sweep.yaml``): strict like the planning spec (``extra="forbid"``).

.. code-block:: yaml

    base: examples/llama3-70b-64xh100.yaml     # a spec path (relative to this file) or a spec mapping
    axes:                                      # dotted spec keys -> values: the grid is their product
      cluster.gpu: [H100-SXM-80GB, A100-SXM-80GB]
      cluster.num_gpus: [64, 128, 256]
    # points: [{cluster.num_gpus: 64}, ...]     # or an explicit list instead of (or besides) a grid
    budget: {tokens: 1.0e12}                   # or {steps: N}
    deadline_h: 720                            # optional: points slower than this are flagged
    prices: {H100-SXM-80GB: 2.0}               # your $ per GPU-hour (parplan claims no prices)
    energy: {utilisation: 1.0, pue: 1.0}       # the utilisation model (records.py)
    solver: {top_k: 1, time_limit_s: 60, deterministic: true}

``axes`` keys name spec keys (``model``, ``cluster.gpu``, ``training.seq_len``, ``framework``, ...); a
``model`` value that is a string is a preset name, or a Hugging Face config.json path when it ends in
``.json`` (relative to the sweep file); a mapping is an inline model section.
"""

from __future__ import annotations

from typing import Any, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, PositiveFloat, PositiveInt, model_validator

MAX_POINTS = 1_000_000


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class Budget(_Strict):
    """The training budget every point is timed against: tokens, or optimizer steps (one of them)."""

    tokens: Optional[PositiveFloat] = Field(None, le=1e18)
    steps: Optional[PositiveInt] = Field(None, le=10**12)

    @model_validator(mode="before")
    @classmethod
    def _ints_as_floats(cls, data: Any) -> Any:  # `tokens: 1000000000000` is an int in YAML
        if isinstance(data, dict) and isinstance(data.get("tokens"), int) and not isinstance(data["tokens"], bool):
            data = {**data, "tokens": float(data["tokens"])}
        if isinstance(data, dict) and isinstance(data.get("tokens"), str):  # YAML 1.1 reads `1.0e12` as text
            try:
                data = {**data, "tokens": float(data["tokens"])}
            except ValueError:
                pass
        return data

    @model_validator(mode="after")
    def _one(self) -> "Budget":
        if (self.tokens is None) == (self.steps is None):
            raise ValueError("give exactly one of tokens or steps")
        return self


class Energy(_Strict):
    """Energy = GPUs x hours x board power x ``utilisation`` x ``pue`` (records.py). ``utilisation`` 1.0 (the
    default) charges every GPU its full board power for the whole run: an upper bound for the GPUs alone;
    ``pue`` > 1 adds the facility's overhead (cooling, power delivery)."""

    utilisation: float = Field(1.0, gt=0, le=1)
    pue: float = Field(1.0, ge=1, le=5)

    @model_validator(mode="before")
    @classmethod
    def _floats(cls, data: Any) -> Any:
        if isinstance(data, dict):
            data = {k: float(v) if isinstance(v, int) and not isinstance(v, bool) else v for k, v in data.items()}
        return data


class SolverSettings(_Strict):
    """Solver controls of every point (the options of ``solver-cli optimize``). ``workers`` is CP-SAT's
    workers per solve and the CPUs a Ray task reserves; the default 1 runs one solve per core."""

    top_k: int = Field(1, ge=1, le=100)
    time_limit_s: float = Field(60.0, gt=0, le=86400)
    method: str = Field("cpsat", pattern="^(cpsat|exhaustive)$")
    workers: int = Field(1, ge=1, le=256)
    deterministic: bool = False
    seed: int = Field(1, ge=0, le=2**31 - 1)

    @model_validator(mode="before")
    @classmethod
    def _floats(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("time_limit_s"), int) and not isinstance(
                data["time_limit_s"], bool):
            data = {**data, "time_limit_s": float(data["time_limit_s"])}
        return data


class SweepSpec(_Strict):
    base: Union[str, dict[str, Any]]
    axes: dict[str, list[Any]] = {}
    points: list[dict[str, Any]] = []
    budget: Optional[Budget] = None
    deadline_h: Optional[PositiveFloat] = None
    prices: dict[str, PositiveFloat] = {}
    energy: Energy = Energy()
    solver: SolverSettings = SolverSettings()

    @model_validator(mode="before")
    @classmethod
    def _floats(cls, data: Any) -> Any:
        if isinstance(data, dict):
            data = dict(data)
            if isinstance(data.get("deadline_h"), int) and not isinstance(data["deadline_h"], bool):
                data["deadline_h"] = float(data["deadline_h"])
            if isinstance(data.get("prices"), dict):
                data["prices"] = {k: float(v) if isinstance(v, int) and not isinstance(v, bool) else v
                                  for k, v in data["prices"].items()}
        return data


__all__ = ["SweepSpec", "Budget", "Energy", "SolverSettings", "MAX_POINTS"]
