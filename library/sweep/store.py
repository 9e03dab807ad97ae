"""The result store of a sweep: ``DIR/store/<key>.json`` per solved point, ``DIR/sweep.json`` the manifest.

A point's key is the SHA-256 of the canonical JSON of what determines its answer: the resolved spec, the
resolved cost-model assumptions (preset, overrides and the fitted calibration), the solver controls and the
parplan version. Prices, budget and energy are not in it: they only derive figures from the answer, so a
re-priced sweep re-uses every solve. Each point is written when it completes (a temporary file renamed
into place), so a killed sweep loses no finished point, and ``--resume`` skips every key already stored.
``solver-cli sweep --report DIR`` needs nothing but this folder.
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any, Iterable, Optional

MANIFEST = "sweep.json"
STORE = "store"


def canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def point_key(spec: dict[str, Any], settings: dict[str, Any]) -> str:
    from parplan import __version__
    from parplan.costmodel.spec.assumptions import resolve_assumptions
    from parplan.frameworks.loader import validate_spec

    assumptions = resolve_assumptions(validate_spec(spec).assumptions).model_dump(mode="json")
    payload = {"spec": spec, "assumptions": assumptions, "solver": settings, "parplan": __version__}
    return hashlib.sha256(canonical(payload).encode()).hexdigest()


def _write_atomic(path: str, text: str) -> None:
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)  # atomic: a killed sweep leaves whole entries or none (no fsync: a process, not a power, loss)


class Store:
    def __init__(self, out_dir: str):
        self.dir = out_dir
        self.store_dir = os.path.join(out_dir, STORE)

    def create(self) -> None:
        os.makedirs(self.store_dir, exist_ok=True)

    def path(self, key: str) -> str:
        return os.path.join(self.store_dir, f"{key}.json")

    def has(self, key: str) -> bool:
        return os.path.exists(self.path(key))

    def put(self, key: str, entry: dict[str, Any]) -> None:
        # key order kept (the CONTRACT's plan order): a record read back equals the one solved
        _write_atomic(self.path(key), json.dumps(entry, separators=(",", ":"), ensure_ascii=False,
                                                 allow_nan=False) + "\n")

    def get(self, key: str) -> Optional[dict[str, Any]]:
        try:
            with open(self.path(key), encoding="utf-8") as f:
                return json.load(f)
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            return None  # a damaged entry counts as not done

    def keys(self) -> list[str]:
        try:
            return sorted(n[:-5] for n in os.listdir(self.store_dir) if n.endswith(".json"))
        except FileNotFoundError:
            return []

    def write_manifest(self, manifest: dict[str, Any]) -> None:
        _write_atomic(os.path.join(self.dir, MANIFEST), json.dumps(manifest, indent=1) + "\n")

    def read_manifest(self) -> dict[str, Any]:
        from parplan.library.sweep.points import SweepError

        path = os.path.join(self.dir, MANIFEST)
        try:
            with open(path, encoding="utf-8") as f:
                return json.load(f)
        except FileNotFoundError:
            raise SweepError(f"--report {self.dir}: no {MANIFEST} (not a sweep output folder)") from None
        except (OSError, ValueError) as err:
            raise SweepError(f"--report {self.dir}: {MANIFEST} unreadable: {err}") from None

    def entries(self, keys: Iterable[str]) -> dict[str, dict[str, Any]]:
        out = {}
        for key in keys:
            entry = self.get(key)
            if entry is not None:
                out[key] = entry
        return out


__all__ = ["Store", "point_key", "canonical", "MANIFEST", "STORE"]
