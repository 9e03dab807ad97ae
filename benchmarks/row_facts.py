"""Published training runs, field by field: the rules that turn one field of a ``published-runs.yaml`` row into a
cost-model value (the row's model family and framework, its framework profile and version, precision, recompute,
ZeRO stage, stage split, GPU and NVLink domain), and the :class:`Expression` record that keeps every value chosen
and why. :mod:`benchmarks.row_mapping` composes them into a (Spec, PlanSpec) section by section; the conventions
are in :mod:`benchmarks.runs`.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Optional

from parplan.costmodel.evaluation.evaluate import even_stage_layers
from parplan.costmodel.spec.hardware import UnknownGPU, resolve_gpu_name
from parplan.costmodel.spec.spec import PlanSpec, Spec
from parplan.frameworks.layout import LayoutError, megatron_split, resolve_layout, torchtitan_split
from parplan.frameworks.profiles import profile

class NotExpressible(ValueError):
    """The row cannot be written as a (Spec, PlanSpec); the message says why."""


@dataclass
class Expression:
    """A row as cost-model input, or the reason it cannot be one."""

    row_id: str
    spec: Optional[Spec] = None
    plan: Optional[PlanSpec] = None
    assumed: dict[str, str] = field(default_factory=dict)  # field -> value chosen and why (not in the row)
    reason: Optional[str] = None  # set when not expressible
    framework: Optional[str] = None  # the framework profile that runs the row's plan (profile_family)
    framework_version: Optional[str] = None  # the profile's version at the row's date (framework_version), or None
    # assumption knobs set for this row: techniques its framework did not use (e.g. no TP comm overlap in
    # Megatron-LM 2021); the fitted knobs describe the technique when it is used
    overrides: dict[str, Any] = field(default_factory=dict)
    # plan fields the row's source does not state (their value above is a default): what the planner may complete
    # (benchmarks/row_completion.py); the stage split is among them when the row states none it can be pinned by
    unstated: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.reason is None

    def override(self, knob: str, value: Any, why: str, shown: Optional[str] = None) -> None:
        """Set an assumption knob for this row and record the value and its reason under ``assumed``."""
        self.overrides[knob] = value
        if shown is None:
            shown = str(value).lower() if isinstance(value, bool) else f"{value:g}" if isinstance(value, float) else str(value)
        self.assumed[knob] = f"{shown} ({why})"


# GPUs per node when the row does not say: 8 (DGX/HGX), except a GB200 NVL72 compute tray's 4 GPUs
GPUS_PER_NODE = {"GB200-NVL72": 4, "GB300-NVL72": 4}


H100_SXM_TDP_W = 700.0  # NVIDIA H100 SXM5 datasheet: up to 700 W


def row_family(row: dict) -> str:
    m = (row.get("model") or "").lower()
    if "bloom" in m:
        return "bloom"
    if "deepseek" in m:
        return "deepseek"
    if "llama" in m:
        return "llama"
    if "nemotron" in m:
        return "nemotron"
    if "mpt" in m:
        return "mpt"
    if "qwen" in m:
        return "qwen"
    if "gpt-oss" in m or "gpt oss" in m:
        return "gpt-oss"
    if "gpt" in m:
        return "gpt"
    return "unknown"


# a row's framework field by its prefix (first match), as the mapping's rules name it; Megatron-LM 2021/2022 rows
# had no distributed optimizer and no SP unless stated
FRAMEWORK_PREFIXES: tuple[tuple[str, str], ...] = (
    ("torchtitan", "torchtitan"), ("nemo", "nemo"), ("megatron-core", "mcore"), ("megatron-lm", "megatron-legacy"),
    ("megatron-bridge", "bridge"), ("llm foundry", "llmfoundry"))


def row_framework(row: dict) -> str:
    fw = (row.get("framework") or "").lower()
    name = next((name for prefix, name in FRAMEWORK_PREFIXES if fw.startswith(prefix)), None)
    if name is not None:
        return name
    return "hai-llm" if "hai-llm" in fw else "unknown"


# the target-framework profile (parplan.frameworks.profiles) a row's framework belongs to; Megatron-LM 2021/2022
# rows get the dated megatron-lm profile (framework_version), the others the family's current profile
_PROFILE_OF = {"torchtitan": "torchtitan", "nemo": "megatron-core", "mcore": "megatron-core",
               "megatron-legacy": "megatron-lm", "bridge": "megatron-bridge", "deepspeed": "deepspeed",
               "llmfoundry": "llm-foundry"}


def profile_family(row: dict) -> Optional[str]:
    """The framework profile that runs a row's plan, or None (HAI-LLM, Meta internal: no profile)."""
    sharding = (row.get("zero_or_sharding") or "").lower()
    if "deepspeed" in sharding:
        return "deepspeed"
    return _PROFILE_OF.get(row_framework(row))


def framework_version(row: dict, ex: Optional["Expression"] = None) -> Optional[str]:
    """The version of the row's profile: for Megatron-LM 2021/2022 rows (the ``megatron-lm`` profile, dated by
    main-branch commits) the row's ``framework_version`` (a date, from its ``mapping_facts`` where the source
    names the commit), else the last day of the year its framework or source names ('Megatron-LM (2022)' ->
    2022-12-31): the widest space of that year, so the check never narrows a framework below what the run could
    have had. Other rows: their stated ``framework_version`` (torchtitan's main-branch date before v0.1.0), else None
    (the family's newest profile)."""
    family = profile_family(row)
    if family is None:
        return None
    stated = row_value(row, "framework_version", ex) if ex is not None else (
        row.get("framework_version") or ((row.get("mapping_facts") or {}).get("framework_version") or {}).get("value"))
    if stated is not None:
        return str(stated)
    if family != "megatron-lm":
        return None
    for text in (row.get("framework") or "", row.get("source") or ""):
        year = re.search(r"\b(20\d\d)\b", text)
        if year:
            if ex is not None:
                ex.assumed["framework_version"] = (f"{year.group(1)}-12-31 (Megatron-LM main at the end of the year "
                                                   "the row names; no commit stated)")
            return f"{year.group(1)}-12-31"
    return None


def row_value(row: dict, key: str, ex: "Expression"):
    """A row's field, else the row's own ``mapping_facts`` entry (value + why, recorded under ``assumed``)."""
    v = row.get(key)
    if v is not None:
        return v
    fact = (row.get("mapping_facts") or {}).get(key)
    if fact is None:
        return None
    ex.assumed[key] = f"{fact['value']} ({fact['why']})"
    return fact["value"]


def as_int(v) -> Optional[int]:
    if v is None:
        return None
    if isinstance(v, bool):
        raise NotExpressible(f"expected an integer, got {v!r}")
    if isinstance(v, float) and not v.is_integer():
        raise NotExpressible(f"expected an integer, got {v!r}")
    try:
        return int(v)
    except (TypeError, ValueError):
        raise NotExpressible(f"expected an integer, got {v!r}") from None


def padded_vocab(vocab: int, tp: int, divisible_by: int = 128) -> int:
    """Megatron's ``_vocab_size_with_padding``: a multiple of make_vocab_size_divisible_by x TP."""
    mult = divisible_by * tp
    return int(math.ceil(vocab / mult) * mult)


def row_precision(row: dict, assumed: dict[str, str]) -> str:
    p = (row.get("precision") or "").lower()
    if not p:
        assumed["precision"] = "bf16 (not stated; 16-bit mixed precision)"
        return "bf16"
    if "fp8" in p or "float8" in p:
        if "+" in p or "linears" in p:
            assumed["precision"] = f"fp8 (row: {row['precision']!r}; the model has one precision per run)"
        return "fp8"
    if "fp16" in p or "bf16" in p or "mixed" in p:
        if "bf16" not in p:
            assumed["precision"] = f"bf16 (row: {row['precision']!r}; fp16 has the same dense peak)"
        return "bf16"
    raise NotExpressible(f"unknown precision {row.get('precision')!r}")


def row_recompute(row: dict, assumed: dict[str, str]) -> str:
    text = (row.get("recompute") or "").strip().lower()
    if text.startswith("full"):
        return "full"
    if text.startswith("selective"):
        return "selective"
    if text.startswith("none"):
        return "none"
    if text:
        raise NotExpressible(f"unknown recompute {row.get('recompute')!r}")
    acct = (row.get("flops_accounting") or "").lower()
    if "recompute" in acct and "includes" in acct:
        assumed["recompute"] = "full (not stated; the paper's FLOP formula counts the recompute forward pass)"
        return "full"
    assumed["recompute"] = "none (not stated)"
    return "none"


def row_zero_stage(row: dict, fw: str, assumed: dict[str, str]) -> int:
    text = (row.get("zero_or_sharding") or "").lower()
    if "zero-2" in text or re.search(r"optim_grads(?!_params)", text) or "shard_grad_op" in text:
        return 2  # Megatron-FSDP's optim_grads, FSDP's SHARD_GRAD_OP
    if "zero-3" in text or "full_shard" in text or "fully sharded" in text or "optim_grads_params" in text \
            or re.search(r"\bfsdp\b", text):
        return 3  # Megatron-FSDP's optim_grads_params, FSDP/FSDP2 full sharding
    if "zero-1" in text or "distributed optimizer" in text:
        return 1
    if text.startswith("none"):
        return 0
    if text:
        raise NotExpressible(f"unknown sharding {row.get('zero_or_sharding')!r}")
    if fw in ("nemo", "mcore", "bridge"):
        assumed["zero_stage"] = "1 (not stated; NeMo/Megatron-Core perf recipes use the distributed optimizer)"
        return 1
    assumed["zero_stage"] = "0 (not stated; Megatron-LM 2021/2022 had no distributed optimizer)"
    return 0


def stage_layers_of(num_layers: int, pp: int, vpp: int, first: Optional[int], last: Optional[int],
                  assumed: dict[str, str]) -> Optional[list[int]]:
    """Layers per pipeline rank; None means the evaluator's even split. Raises when nothing legal exists."""
    if first is not None or last is not None:
        if pp < 2:
            raise NotExpressible("first/last stage layers given without pipeline parallelism")
        inner = num_layers - (first or 0) - (last or 0)
        mids = pp - (first is not None) - (last is not None)
        if inner < 0 or (mids and inner < mids) or (not mids and inner):
            raise NotExpressible("first/last stage layers do not fit the layer count")
        split = even_stage_layers(inner, mids) if mids else []
        layers = ([first] if first is not None else []) + split + ([last] if last is not None else [])
    else:
        layers = even_stage_layers(num_layers, pp)
    if vpp > 1 and any(n % vpp for n in layers):
        if first is not None or last is not None:
            raise NotExpressible(f"stage layers {layers} are not multiples of vpp = {vpp}")
        # as even as possible in whole virtual chunks; the end stages (embedding, head) take the shortfall
        chunks, rem = divmod(num_layers, vpp)
        if rem:
            raise NotExpressible(f"{num_layers} layers do not split into vpp = {vpp} equal chunks per stage")
        layers = [c * vpp for c in even_stage_layers(chunks, pp)]  # the remainder goes to middle stages
        assumed["stage_layers"] = f"{layers} (even split in multiples of vpp = {vpp}; not stated)"
    if any(n < 1 for n in layers):
        raise NotExpressible(f"{num_layers} layers cannot fill {pp} pipeline stages")
    return layers if layers != even_stage_layers(num_layers, pp) else None


def catalog_gpu(row: dict) -> tuple[str, Optional[float]]:
    """The row's GPU through the catalog's name resolution (aliases, partial names); unknown: not expressible."""
    try:
        return resolve_gpu_name(row.get("gpu") or "")
    except UnknownGPU as e:
        raise NotExpressible(str(e)) from None


def tp_pp_from_model_parallel(row: dict, tp: Optional[int], pp: Optional[int], gpn: int,
                               assumed: dict[str, str]) -> tuple[int, int]:
    """Only the model-parallel size published: tensor parallelism up to the GPUs of a node, pipeline
    parallelism for the rest (Narayanan et al. 2021, arXiv 2104.04473, §3.3 Takeaway #1)."""
    mp = as_int(row.get("model_parallel_size"))
    if not mp:
        raise NotExpressible("TP/PP split not published")
    if tp is None and pp is None:
        tp = math.gcd(mp, gpn)
        pp = mp // tp
    elif tp is None:
        tp = mp // pp
    else:
        pp = mp // tp
    if tp * pp != mp:
        raise NotExpressible(f"TP/PP split not published; model-parallel size {mp} does not split as stated")
    why = f"only the model-parallel size {mp} is published; TP up to a node's {gpn} GPUs, PP across nodes " \
          "(Narayanan et al. 2021 §3.3, Takeaway #1)"
    assumed["tp"] = f"{tp} ({why})"
    assumed["pp"] = f"{pp} ({why})"
    return tp, pp


def nvlink_domain(cat, gpus: int, gpn: int, assumed: dict[str, str]) -> Optional[int]:
    """A multi-node NVLink domain (GB200 NVL72) that the job does not fill in whole racks: the job spreads
    evenly, so its domain is the largest divisor of the GPU count that fits a rack in whole trays."""
    if cat.nvlink_domain_size <= gpn or gpus % cat.nvlink_domain_size == 0 or gpus < cat.nvlink_domain_size:
        return None
    d = max(k for k in range(gpn, cat.nvlink_domain_size + 1, gpn) if gpus % k == 0)
    assumed["nvlink_domain_size"] = (f"{d} ({gpus} GPUs do not fill whole {cat.nvlink_domain_size}-GPU NVLink "
                                     f"domains: {gpus // d} domains of {d})")
    return d


_LAYOUT_RE = re.compile(r"layout\s+([EtmL|()*\d,]+)")
_FEWER_RE = re.compile(r"\b(one|two|three|\d+) (?:transformer |decoder )?layers? (?:fewer|less|short)")
_WORDS = {"one": 1, "two": 2, "three": 3}


def row_pipeline_layout(row: dict, num_layers: int, pp: int, vpp: int, assumed: dict[str, str]) -> Optional[list[list[int]]]:
    """Per-(stage, chunk) decoder layers where the row states its split in words or as a layout string:

    * a Megatron ``--pipeline-model-parallel-layout`` string (``layout Et|(tt|)*30L``) in the row's
      ``pipeline_layout``, ``first_stage_layers`` or ``last_stage_layers``;
    * "embedding (loss) counted as a layer" / ``account_for_embedding(loss)_in_pipeline_split``: Megatron's split;
    * "one layer fewer" on the first / last stage: the stage's equal share less that many layers, the embedding
      and output counted as those layers (torchtitan's and Meta's convention).
    None where the row gives numbers or nothing (the evaluator's even split).
    """
    texts = [str(row.get(k) or "") for k in ("pipeline_layout", "first_stage_layers", "last_stage_layers")]
    joined = " ".join(texts)
    try:
        m = _LAYOUT_RE.search(joined) or (re.fullmatch(r"[EtmL|()*\d,]+", texts[0]) and re.match(r"(.*)", texts[0]))
        if m:
            text = m.group(1).rstrip(",")
            while text.count(")") > text.count("("):  # the prose's closing parenthesis, not the layout's
                text = text[:-1]
            return resolve_layout(text, pp, num_layers).decoder
        emb = "account_for_embedding" in joined or "embedding counted as" in joined
        loss = "account_for_loss" in joined or "loss counted as" in joined
        if emb or loss:
            split = megatron_split(num_layers, pp, vpp, account_for_embedding=emb, account_for_loss=loss)
            assumed["pipeline_layout"] = f"{split.stage_layers} (Megatron's split with the embedding/loss as layers)"
            return split.decoder
        fewer = [_FEWER_RE.search(t.lower()) for t in texts[1:]]
        if any(fewer):
            n_first, n_last = (0 if f is None else _WORDS.get(f.group(1)) or int(f.group(1)) for f in fewer)
            split = torchtitan_split(num_layers, pp, vpp, input_weight=n_first, output_weight=n_last)
            assumed["pipeline_layout"] = f"{split.stage_layers} (stated in words: {texts[1]!r} / {texts[2]!r})"
            return split.decoder
    except LayoutError as e:
        raise NotExpressible(f"pipeline layout: {e}") from None
    return None
