#!/usr/bin/env python3
"""MLPerf Training v5.1 LLM results as rows of the published-runs format (measured data, fitted on as its own source).

    python benchmarks/mlperf.py --repo /work/.mirror/mlcommons+training_results_v5.1/repo \\
        --out benchmarks/data/mlperf-v5.1.yaml

``--repo`` is a git directory of ``mlcommons/training_results_v5.1`` (bare or not; read with ``git ls-tree`` /
``git show`` at ``--rev``, default HEAD). For every result folder ``<org>/results/<system>/<benchmark>/`` of the
LLM pre-training benchmarks (``llama31_8b``, ``llama31_405b``) it reads

* the system description ``<org>/systems/<system>.json``: ``number_of_nodes``, ``accelerators_per_node``,
  ``accelerator_model_name``;
* the result logs ``result_*.txt``: the ``:::MLLOG`` lines ``global_batch_size``, ``max_sequence_length`` and every
  ``tracked_stats`` value ``train_step_time`` (seconds per optimizer step); the row's step time is the median of
  them over all logs of the folder;
* the launch configuration: the ``config_*.sh`` that the system's README (``README-<system>.md`` under the
  benchmark's implementation folders) names, else the one config of the submitter's benchmark folder whose
  ``DGXNNODES`` x ``DGXNGPU`` is the system's GPU count and whose data-parallel size x ``MINIBS`` is the logged
  global batch (of several, the one in a folder named after the system) (ambiguous or absent: the row is listed as not read, with the candidates). ``source`` lines are
  followed; the fields used are ``TENSOR_MODEL_PARALLEL``, ``PIPELINE_MODEL_PARALLEL``, ``INTERLEAVED_PIPELINE``,
  ``CONTEXT_PARALLEL``, ``MICRO_BATCH_SIZE``, ``SEQ_PARALLEL``, ``FP8`` / ``FP4``, ``ASYM_PP_EMBED`` /
  ``ASYM_PP_LOSS`` (the embedding / loss counted as a pipeline layer), ``FP8_DPA`` (FP8 dot-product attention: the row's
  ``fp8_attention``) and ``USE_DIST_OPTIMIZER``; the config's
  data-parallel size x ``MINIBS`` must equal the logged global batch (else the row is not read, naming the field).

Every row carries ``source_id: mlperf-training-v5.1`` (ids start with ``mlperf51-``) and cites the submitter,
system, benchmark, the files read and the repository commit. The published metric is tokens/s/GPU = global batch x
sequence length / (median step time x GPUs). Rows on GPUs the catalog lacks (``solver-cli gpus``: B300, GB300,
MI325X, MI350X, MI355X) and NVFP4 runs (the cost model has no FP4 peak) are written with ``not_expressible`` set
to the reason. Llama 2 70B LoRA is not read: see :data:`LORA_REASON`.

Only facts are taken from the repository (numbers in configs and logs); no code of it is copied.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

import yaml

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from parplan.costmodel.spec.hardware import UnknownGPU, resolve_gpu_name  # noqa: E402

SOURCE_ID = "mlperf-training-v5.1"
REPO_URL = "https://github.com/mlcommons/training_results_v5.1"

# the pre-training benchmarks and the facts of their models (Meta's config.json for Llama 3.1 8B / 405B; the
# MLPerf reference trains the published architecture, OVERWRITTEN_NUM_LAYERS 32 in config_common_8b.sh)
BENCHMARKS: dict[str, dict[str, Any]] = {
    "llama31_8b": {"model": "Llama 3.1 8B", "num_layers": 32, "hidden_size": 4096, "ffn_hidden_size": 14336,
                   "num_attention_heads": 32, "num_kv_heads": 8, "vocab_size": 128256},
    "llama31_405b": {"model": "Llama 3.1 405B", "num_layers": 126, "hidden_size": 16384, "ffn_hidden_size": 53248,
                     "num_attention_heads": 128, "num_kv_heads": 8, "vocab_size": 128256},
}
ARCH_SOURCE = "Meta Llama 3.1 config.json (HF); Llama 3 paper Table 3"
# benchmark folders a submitter may file a benchmark's code under (HPE: benchmarks/llama3_8b)
BENCHMARK_DIRS = {"llama31_8b": ("llama31_8b", "llama3_8b"), "llama31_405b": ("llama31_405b",)}
LORA_REASON = ("llama2_70b_lora is LoRA fine-tuning: the base weights are frozen and only low-rank adapters get "
               "gradients and optimizer state; the cost model prices full-parameter training (every weight's "
               "gradient, reduction and AdamW state), so its memory, DP traffic and backward FLOPs would be wrong")


class RowError(ValueError):
    """A result folder that cannot become a row: the message names the row and the field."""


# ---------------------------------------------------------------------------------------------- the repository


class GitTree:
    """Read-only view of one commit of a git directory (``git ls-tree`` / ``git show``)."""

    def __init__(self, git_dir: str | Path, rev: str = "HEAD"):
        self.git_dir = str(git_dir)
        self.commit = self._git("rev-parse", rev).strip()
        self._files = self._git("ls-tree", "-r", "--name-only", self.commit).splitlines()

    def _git(self, *args: str) -> str:
        return subprocess.run(["git", "--git-dir", self.git_dir, *args], check=True, capture_output=True,
                              text=True).stdout

    def files(self) -> list[str]:
        return self._files

    def read(self, path: str) -> Optional[str]:
        try:
            return self._git("show", f"{self.commit}:{path}")
        except subprocess.CalledProcessError:
            return None  # absent (e.g. a large file not in the snapshot)


class DirTree:
    """The same interface over a plain directory (the tests' fixtures)."""

    def __init__(self, root: str | Path, commit: str = "fixture"):
        self.root = Path(root)
        self.commit = commit

    def files(self) -> list[str]:
        return sorted(str(p.relative_to(self.root)) for p in self.root.rglob("*") if p.is_file())

    def read(self, path: str) -> Optional[str]:
        p = self.root / path
        return p.read_text() if p.is_file() else None


# ---------------------------------------------------------------------------------------------- parsers


_ASSIGN = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=(.*)$")
_DEFAULT = re.compile(r'^\s*:\s*"?\$\{([A-Za-z_][A-Za-z0-9_]*):=([^}]*)\}"?\s*$')
_SOURCE = re.compile(r"^\s*(?:source|\.)\s+(.+?)\s*$")


def parse_config(path: str, read: Callable[[str], Optional[str]], env: Optional[dict[str, str]] = None,
                 depth: int = 0) -> dict[str, str]:
    """The variables a ``config_*.sh`` sets, following its ``source`` lines (relative to its folder) in order.

    Values are kept as text, quotes removed; a ``${VAR}`` or ``${VAR:-x}`` is substituted from what is known so far;
    command substitutions stay as written. ``unset`` removes a variable."""
    env = {} if env is None else env
    text = read(path)
    if text is None:
        raise FileNotFoundError(path)
    folder = path.rsplit("/", 1)[0] if "/" in path else ""
    for raw in text.splitlines():
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        m = _SOURCE.match(line)
        if m and depth < 8:
            name = m.group(1).strip("\"'").split("/")[-1]
            sub = f"{folder}/{name}" if folder else name
            if read(sub) is not None:
                parse_config(sub, read, env, depth + 1)
            else:  # recorded: a field it would set is unknown, not defaulted
                env["__MISSING__"] = (env.get("__MISSING__", "") + " " + sub).strip()
            continue
        if line.startswith("unset "):
            for name in line.split()[1:]:
                env.pop(name, None)
            continue
        m = _DEFAULT.match(line)
        if m:
            env.setdefault(m.group(1), m.group(2))
            continue
        m = _ASSIGN.match(line)
        if m:
            env[m.group(1)] = _substitute(m.group(2).strip().strip("\"'"), env)
    return env


def _substitute(value: str, env: dict[str, str]) -> str:
    def one(m: re.Match) -> str:
        name, default = m.group(1), m.group(3)
        return env.get(name, default if default is not None else m.group(0))
    return re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(:-([^}]*))?\}", one, value)


def parse_mllog(text: str) -> dict[str, Any]:
    """The keys a result log gives: ``global_batch_size``, ``max_sequence_length``, ``submission_*`` and every
    ``train_step_time`` of ``tracked_stats`` (a list, in order)."""
    out: dict[str, Any] = {"train_step_time": []}
    for line in text.splitlines():
        i = line.find(":::MLLOG ")
        if i < 0:
            continue
        try:
            rec = json.loads(line[i + len(":::MLLOG "):])
        except json.JSONDecodeError:
            continue
        key, value = rec.get("key"), rec.get("value")
        if key == "tracked_stats" and isinstance(value, dict) and "train_step_time" in value:
            out["train_step_time"].append(float(value["train_step_time"]))
        elif key in ("global_batch_size", "max_sequence_length", "submission_benchmark", "submission_org",
                     "submission_platform", "submission_division"):
            out.setdefault(key, value)
    return out


# ---------------------------------------------------------------------------------------------- mapping rules

# the catalog names an MLPerf accelerator string maps to, tried before the catalog's own resolution; parts the
# catalog lacks resolve to None (the row is not expressible, with the reason)
_GPU_RULES: tuple[tuple[str, Optional[str]], ...] = (
    (r"\bGB300\b", None), (r"\bB300\b", None), (r"Blackwell Ultra", None),
    (r"\bGB200\b", "GB200-NVL72"), (r"\bB200\b", "B200"),
    (r"\bH200\b", "H200-SXM-141GB"), (r"\bH100\b", "H100-SXM-80GB"),
    (r"\bMI300X\b", "MI300X"), (r"\bMI3[2-5]5?X\b", None),
)


def catalog_gpu_name(accelerator: str) -> tuple[Optional[str], str]:
    """(catalog name or None, why) for a system json's ``accelerator_model_name``."""
    for pattern, name in _GPU_RULES:
        m = re.search(pattern, accelerator)
        if m:
            if name is None:
                return None, f"{m.group(0)} is not in the GPU catalog (solver-cli gpus)"
            return name, f"{m.group(0)} -> {name}"
    try:
        name, _ = resolve_gpu_name(accelerator)
        return name, f"catalog resolution of {accelerator!r}"
    except UnknownGPU as e:
        return None, str(e).splitlines()[0]


def _int(env: dict[str, str], key: str, row: str, default: Optional[int] = None) -> Optional[int]:
    v = env.get(key)
    if v is None or v == "" or v.lower() in ("null", "none"):
        return default
    try:
        return int(v)
    except ValueError:
        raise RowError(f"{row}: field {key} = {v!r} is not an integer") from None


def _flag(env: dict[str, str], key: str) -> bool:
    return env.get(key, "").strip().lower() in ("true", "1", "yes")


@dataclass
class Folder:
    org: str
    system: str
    benchmark: str
    results: list[str] = field(default_factory=list)

    @property
    def row_id(self) -> str:
        slug = re.sub(r"[^a-z0-9]+", "-", f"{self.org}-{self.system}".lower()).strip("-")
        return f"mlperf51-{self.benchmark.replace('_', '-')}-{slug}"


def result_folders(files: list[str], benchmarks=tuple(BENCHMARKS) + ("llama2_70b_lora",)) -> list[Folder]:
    folders: dict[tuple[str, str, str], Folder] = {}
    for f in files:
        parts = f.split("/")
        if len(parts) == 5 and parts[1] == "results" and parts[3] in benchmarks and re.fullmatch(r"result_\d+\.txt", parts[4]):
            key = (parts[0], parts[2], parts[3])
            folders.setdefault(key, Folder(*key)).results.append(f)
    return [folders[k] for k in sorted(folders)]


def find_config(tree, folder: Folder, nodes: int, gpn: int, gbs: int) -> tuple[str, str]:
    """(config path, how it was found): the README's named config, else the one matching GPUs and batch."""
    files = tree.files()
    dirs = [f"{folder.org}/benchmarks/{d}/" for d in BENCHMARK_DIRS.get(folder.benchmark, (folder.benchmark,))]
    mine = [f for f in files if any(f.startswith(d) for d in dirs)]
    configs = [f for f in mine if re.search(r"/config_[^/]*\.sh$", f)]
    for readme in (f for f in mine if re.search(rf"/README-{re.escape(folder.system)}\.md$", f)):
        m = re.search(r"config_[A-Za-z0-9_.\-]+\.sh", tree.read(readme) or "")
        if m:
            here = readme.rsplit("/", 1)[0] + "/" + m.group(0)
            named = [here] if here in configs else [c for c in configs if c.endswith("/" + m.group(0))]
            if named:
                return named[0], f"named by {readme}"
    matches = []
    for c in configs:
        name = c.rsplit("/", 1)[1]
        if re.search(r"common|mounts", name):
            continue
        try:
            env = parse_config(c, tree.read)
            n, g = _int(env, "DGXNNODES", c), _int(env, "DGXNGPU", c, 8)
            tp, pp, cp = (_int(env, k, c, 1) for k in ("TENSOR_MODEL_PARALLEL", "PIPELINE_MODEL_PARALLEL",
                                                        "CONTEXT_PARALLEL"))
            minibs = _int(env, "MINIBS", c)
        except (RowError, FileNotFoundError):
            continue
        if n == nodes and g == gpn and minibs is not None and (n * g) % (tp * pp * cp) == 0 \
                and (n * g) // (tp * pp * cp) * minibs == gbs and "fp4" not in name.lower():
            matches.append(c)
    if len(matches) == 1:
        return matches[0], f"the only config of {dirs[0]} with {nodes}x{gpn} GPUs and global batch {gbs}"
    if not matches:
        raise RowError(f"{folder.row_id}: field config: no config_*.sh under {dirs[0]} with {nodes}x{gpn} GPUs "
                       f"and global batch {gbs}")
    in_system_folder = [c for c in matches if f"/{folder.system}/" in c]
    if len(in_system_folder) == 1:
        return in_system_folder[0], (f"the one config in a folder named {folder.system} with {nodes}x{gpn} GPUs and "
                                     f"global batch {gbs}")
    # several identical launch shapes: the same parallel plan is enough (the rows would not differ)
    shapes = {tuple(parse_config(c, tree.read).get(k) for k in ("TENSOR_MODEL_PARALLEL", "PIPELINE_MODEL_PARALLEL",
              "INTERLEAVED_PIPELINE", "CONTEXT_PARALLEL", "MICRO_BATCH_SIZE", "FP8")) for c in matches}
    if len(shapes) == 1:
        return sorted(matches)[0], f"{len(matches)} configs with {nodes}x{gpn} GPUs and global batch {gbs}, one plan"
    raise RowError(f"{folder.row_id}: field config: ambiguous, {len(matches)} configs with different plans: "
                   + ", ".join(sorted(matches)))


def _framework(text: str) -> str:
    """NeMo submissions as the mapping names NeMo rows ('NeMo ...': distributed optimizer, SP with TP > 1)."""
    return f"NeMo ({text})" if "nemo" in text.lower() and not text.lower().startswith("nemo") else text


def read_folder(tree, folder: Folder) -> dict[str, Any]:
    """One result folder as a published-runs row (``not_expressible`` set where the model cannot run it)."""
    rid = folder.row_id
    sys_path = f"{folder.org}/systems/{folder.system}.json"
    sys_text = tree.read(sys_path)
    if sys_text is None:
        raise RowError(f"{rid}: field system: {sys_path} absent")
    system = json.loads(sys_text)
    try:
        nodes, gpn = int(system["number_of_nodes"]), int(system["accelerators_per_node"])
    except (KeyError, ValueError) as e:
        raise RowError(f"{rid}: field number_of_nodes/accelerators_per_node: {e}") from None
    accel = system.get("accelerator_model_name") or ""
    logs = [parse_mllog(tree.read(p) or "") for p in sorted(folder.results)]
    steps = [t for log in logs for t in log["train_step_time"]]
    gbs_seen = {log.get("global_batch_size") for log in logs} - {None}
    seq_seen = {log.get("max_sequence_length") for log in logs} - {None}
    if len(gbs_seen) != 1:
        raise RowError(f"{rid}: field global_batch_size: {sorted(gbs_seen) or 'not logged'} in {len(logs)} logs")
    if len(seq_seen) != 1:
        raise RowError(f"{rid}: field max_sequence_length: {sorted(seq_seen) or 'not logged'}")
    if not steps:
        raise RowError(f"{rid}: field train_step_time: no tracked_stats train_step_time in {len(logs)} logs")
    gbs, seq = int(gbs_seen.pop()), int(seq_seen.pop())
    config, how = find_config(tree, folder, nodes, gpn, gbs)
    env = parse_config(config, tree.read)
    cname = config.rsplit("/", 1)[1]
    c_nodes, c_gpn = _int(env, "DGXNNODES", rid), _int(env, "DGXNGPU", rid, gpn)
    if (c_nodes, c_gpn) != (nodes, gpn):
        raise RowError(f"{rid}: field DGXNNODES/DGXNGPU: {cname} sets {c_nodes}x{c_gpn}, the system has {nodes}x{gpn}")
    tp = _int(env, "TENSOR_MODEL_PARALLEL", rid, 1)
    pp = _int(env, "PIPELINE_MODEL_PARALLEL", rid, 1)
    vpp = _int(env, "INTERLEAVED_PIPELINE", rid)
    cp = _int(env, "CONTEXT_PARALLEL", rid, 1)
    mbs = _int(env, "MICRO_BATCH_SIZE", rid, 1)
    gpus = nodes * gpn
    if gpus % (tp * pp * cp):
        raise RowError(f"{rid}: field TENSOR_MODEL_PARALLEL: tp·pp·cp = {tp * pp * cp} does not divide {gpus} GPUs")
    dp = gpus // (tp * pp * cp)
    minibs = _int(env, "MINIBS", rid)
    if minibs is not None and dp * minibs != gbs:
        raise RowError(f"{rid}: field MINIBS: {cname} gives data-parallel {dp} x MINIBS {minibs} = {dp * minibs}, "
                       f"the logs a global batch of {gbs}")
    step = statistics.median(steps)
    fp4 = _flag(env, "FP4") or "fp4" in cname.lower()
    fp8 = _flag(env, "FP8")
    precision = "nvfp4" if fp4 else "fp8" if fp8 else "bf16"
    gpu, gpu_why = catalog_gpu_name(accel)
    arch = BENCHMARKS[folder.benchmark]
    first = "embedding counted as a layer (ASYM_PP_EMBED)" if _flag(env, "ASYM_PP_EMBED") and pp > 1 else None
    last = "loss counted as a layer (ASYM_PP_LOSS)" if _flag(env, "ASYM_PP_LOSS") and pp > 1 else None
    sp = env.get("SEQ_PARALLEL")
    row = {
        "id": rid,
        "source_id": SOURCE_ID,
        "source": f"MLPerf Training v5.1, {folder.org}, {system.get('system_name') or folder.system}, {folder.benchmark}",
        "source_location": (f"mlcommons/training_results_v5.1@{tree.commit} {folder.org}/results/{folder.system}/"
                            f"{folder.benchmark}/result_*.txt ({len(logs)} logs, {len(steps)} train_step_time values); "
                            f"{sys_path}; {config} ({how})"),
        "source_url": f"{REPO_URL}/tree/{tree.commit}/{folder.org}/results/{folder.system}/{folder.benchmark}",
        "framework": _framework(system.get("framework") or ""),
        **arch,
        "arch_source": ARCH_SOURCE,
        "seq_len": seq,
        "gpu": gpu or accel,
        "gpu_reported": accel,
        "gpus_per_node": gpn,
        "num_gpus": gpus,
        "global_batch_size": gbs,
        "micro_batch_size": mbs,
        "tp": tp, "pp": pp, "cp": cp, "dp": dp, "ep": None,
        "vpp": vpp if (vpp or 1) > 1 else None,
        "precision": precision,
        # Transformer Engine FP8 dot-product attention (FP8_DPA, config_common_fp8attn.sh): the attention core in FP8
        "fp8_attention": bool(fp8 and not fp4 and _flag(env, "FP8_DPA")),
        # Megatron-Core fp8_param_gather (FP8_PARAM_GATHER): the distributed optimizer all-gathers FP8 weights
        "fp8_param_gather": bool(fp8 and not fp4 and _flag(env, "FP8_PARAM_GATHER")),
        "step_time_s": round(step, 6),
        "tokens_per_sec_per_gpu": round(gbs * seq / (step * gpus), 2),
        "recompute": "none",
        "sequence_parallel": (sp.lower() == "true") if sp else None,
        "zero_or_sharding": "distributed optimizer" if _flag(env, "USE_DIST_OPTIMIZER") else None,
        "first_stage_layers": first,
        "last_stage_layers": last,
        "notes": (f"measured: median train_step_time {step:.4f} s over {len(steps)} logged steps of {len(logs)} runs "
                  f"(min {min(steps):.4f}, max {max(steps):.4f}); config {cname}; GPU {gpu_why}; "
                  f"TP_COMM_OVERLAP={env.get('TP_COMM_OVERLAP', 'unset')}; FP8_RECIPE={env.get('FP8_RECIPE', 'unset')}; FP8_DPA={env.get('FP8_DPA', 'unset')}; recompute none: the config sets no recompute "
                  "(NeMo's default is off)"),
    }
    reasons = []
    if gpu is None:
        reasons.append(gpu_why)
    if fp4:
        reasons.append("NVFP4 training: the cost model has no FP4 peak or FP4 GEMM efficiency")
    missing = env.get("__MISSING__")
    if missing:
        row["notes"] += f"; sourced files absent from the repository: {missing}"
        if "FP8" not in env and "FP4" not in env:
            reasons.append(f"precision unknown: neither FP8 nor FP4 is set and {missing} (sourced) is absent")
    if reasons:
        row["not_expressible"] = "; ".join(reasons)
    return row


def read_repo(tree) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """(rows, folders not read with the reason)."""
    rows, skipped = [], []
    for folder in result_folders(tree.files()):
        if folder.benchmark == "llama2_70b_lora":
            skipped.append({"id": folder.row_id, "reason": LORA_REASON})
            continue
        try:
            rows.append(read_folder(tree, folder))
        except RowError as e:
            skipped.append({"id": folder.row_id, "reason": str(e)})
    return rows, skipped


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repo", required=True, help="git directory of mlcommons/training_results_v5.1 (or a plain folder)")
    p.add_argument("--rev", default="HEAD")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    repo = Path(args.repo)
    is_git = (repo / "HEAD").is_file() and (repo / "objects").is_dir()
    tree = GitTree(repo, args.rev) if is_git else GitTree(repo / ".git", args.rev) if (repo / ".git").is_dir() else DirTree(repo)
    rows, skipped = read_repo(tree)
    expressible = [r for r in rows if "not_expressible" not in r]
    header = [
        f"MLPerf Training v5.1 LLM pre-training results as published-runs rows (source_id {SOURCE_ID}).",
        f"Generated by: python benchmarks/mlperf.py --repo <training_results_v5.1 git dir> --out {args.out}",
        f"from mlcommons/training_results_v5.1@{tree.commit}. Read by benchmarks/fit.py (fit_rows) as the source 'MLPerf Training v5.1'; not_expressible rows are left out.",
        f"{len(rows)} rows, {len(expressible)} on catalog GPUs in a precision the model has; "
        f"{len(skipped)} result folders not read:",
    ]
    lora = [s for s in skipped if s["reason"] == LORA_REASON]
    if lora:
        header.append(f"  {len(lora)} llama2_70b_lora folders: {LORA_REASON}")
    header += [f"  {s['id']}: {s['reason']}" for s in skipped if s["reason"] != LORA_REASON]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w") as f:
        f.write("".join(f"# {line}\n" for line in header))
        yaml.safe_dump(rows, f, sort_keys=False, width=120)
    print("\n".join(header))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
