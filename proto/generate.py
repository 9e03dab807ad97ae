"""Generate the Python protobuf and gRPC code of ``proto/parplan/v1/*.proto``: the one command.

    python proto/generate.py            # writes proto/parplan/v1/planner_pb2{,_grpc}.py and planner_pb2.pyi
    python proto/generate.py --out DIR  # the same files under DIR/parplan/v1/ (the staleness test uses this)

The generated files are committed; ``tests/wire/test_convert.py`` regenerates into a temporary folder and
fails when they differ. ``grpcio-tools`` (pinned in pyproject's ``test`` extra) bundles protoc and the
well-known types (``google/protobuf/struct.proto``).
"""

from __future__ import annotations

import argparse
import sys
from importlib import resources
from pathlib import Path

PROTO_ROOT = Path(__file__).resolve().parent
PROTO_FILES = sorted(p.relative_to(PROTO_ROOT).as_posix() for p in (PROTO_ROOT / "parplan").rglob("*.proto"))


def generate(out_dir: Path) -> list[Path]:
    """Run protoc (from grpcio-tools) on every proto file; return the files written."""
    from grpc_tools import protoc

    out_dir.mkdir(parents=True, exist_ok=True)
    well_known = resources.files("grpc_tools") / "_proto"
    args = ["grpc_tools.protoc", f"-I{PROTO_ROOT}", f"-I{well_known}", f"--python_out={out_dir}",
            f"--pyi_out={out_dir}", f"--grpc_python_out={out_dir}", *PROTO_FILES]
    code = protoc.main(args)
    if code != 0:
        raise RuntimeError(f"protoc failed with exit code {code}: {' '.join(args)}")
    return sorted(p for p in out_dir.rglob("*") if p.suffix in (".py", ".pyi") and p.name != "__init__.py")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=PROTO_ROOT, help="output root (default: proto/)")
    args = parser.parse_args(argv)
    for path in generate(args.out):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
