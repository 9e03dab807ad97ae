#!/usr/bin/env python3
"""Megatron's own memory estimators, run from their source, side by side with parplan's ledger on the same plans.

    python benchmarks/megatron_estimators.py [--megatron-lm REPO] [--bridge REPO] [--out FILE]

Two estimators, each executed from its repository snapshot (``git show <commit>:<path>``, no re-implementation):

* Megatron-LM ``megatron/training/theoretical_memory_usage.py`` at d98e8a64 (after PR #4687, "weight and optimizer
  memory estimation take into account expert parallelism", a7c9e8c4, and PR #5145): ``report_theoretical_memory``'s
  two parts, ``compute_weight_and_optimizer_memory`` and the activation function it picks (SP + selective:
  ``compute_activation_memory``, else ``compute_activation_memory_without_sp``);
* Megatron-Bridge ``src/megatron/bridge/training/utils/theoretical_memory_utils.py`` at 067f987d:
  ``estimate_training_memory`` (issue #1673's pre-launch estimate), its model-state components and activation.

Their imports are stubbed only where they reach a GPU stack: ``megatron.training.utils`` (``print_rank_0`` silent,
``is_hybrid_model`` false), ``torch.nn.functional`` (``silu`` / ``gelu`` markers: Bridge compares the model's
``activation_func`` with ``F.silu``), Bridge's ``ConfigContainer`` (a type hint); Megatron-LM's
``megatron/training/vocab_utils.py`` (the vocabulary padding Bridge calls) is run from its snapshot too. The plans
are the cases of ``tests/megatron_memory_cases.py`` (the same ones ``benchmarks/megatron_memory.py`` compares with
the re-implemented formula) plus a Mixtral case with expert parallelism, the term PR #4687 added. Every figure is
GiB per GPU on the first pipeline stage (the stage both estimators describe); ours is the evaluator's stage 0 less
its NCCL / TE buffers (which neither estimator counts). The differences are itemized in docs/megatron-memory.md.
"""

from __future__ import annotations

import argparse
import contextlib
import subprocess
import sys
import types
from dataclasses import dataclass, replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Iterator, Optional

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from megatron_memory_cases import CASES, Case, megatron_args, our_spec  # noqa: E402

from parplan.costmodel.evaluation.evaluate import evaluate  # noqa: E402
from parplan.costmodel.spec.hardware import GIB  # noqa: E402

MIRROR = Path("/work/.mirror")
MEGATRON_LM = (MIRROR / "NVIDIA+Megatron-LM" / "repo", "d98e8a64ddf34856e74b24714e3bedb2f5a39553")
BRIDGE = (MIRROR / "NVIDIA-NeMo+Megatron-Bridge" / "repo", "067f987df03b8355b03192d88d70f1709fedf51a")
MEGATRON_FILE = "megatron/training/theoretical_memory_usage.py"
VOCAB_FILE = "megatron/training/vocab_utils.py"
BRIDGE_FILE = "src/megatron/bridge/training/utils/theoretical_memory_utils.py"
MB = 2**20  # both estimators' "MB"


class SnapshotMissing(RuntimeError):
    """The repository snapshot (or its commit) is not on this machine: the estimators cannot run."""


def source(repo: Path, commit: str, path: str) -> str:
    """``path`` at ``commit`` of the snapshot ``repo`` (a git directory without a work tree)."""
    try:
        return subprocess.run(["git", "-C", str(repo), "show", f"{commit}:{path}"], check=True,
                              capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        raise SnapshotMissing(f"{repo} @ {commit[:8]}: {path} not readable ({e})") from None


def _module(name: str, **attrs: Any) -> types.ModuleType:
    mod = types.ModuleType(name)
    mod.__dict__.update(attrs)
    if "." in name:
        mod.__package__ = name.rpartition(".")[0]
    return mod


def _run_source(name: str, text: str, filename: str) -> types.ModuleType:
    mod = _module(name)
    mod.__package__ = name.rpartition(".")[0]
    sys.modules[name] = mod
    exec(compile(text, filename, "exec"), mod.__dict__)  # noqa: S102  (the snapshot's own code)
    return mod


def silu(x):  # noqa: D103  the marker Bridge compares activation_func with
    return x


def gelu(x):  # noqa: D103
    return x


@contextlib.contextmanager
def _stubbed(names: dict[str, types.ModuleType]) -> Iterator[None]:
    """Put stub modules in ``sys.modules`` for the duration, restoring what was there."""
    saved = {n: sys.modules.get(n) for n in names}
    sys.modules.update(names)
    try:
        yield
    finally:
        for n, m in saved.items():
            if m is None:
                sys.modules.pop(n, None)
            else:
                sys.modules[n] = m


@dataclass
class Estimators:
    """The two upstream modules, loaded once."""

    megatron: types.ModuleType
    bridge: types.ModuleType


def load(megatron_repo: Path = MEGATRON_LM[0], bridge_repo: Path = BRIDGE[0]) -> Estimators:
    """Run both estimators' source files from their snapshots (raises :class:`SnapshotMissing`)."""
    meg_src = source(megatron_repo, MEGATRON_LM[1], MEGATRON_FILE)
    vocab_src = source(megatron_repo, MEGATRON_LM[1], VOCAB_FILE)
    bridge_src = source(bridge_repo, BRIDGE[1], BRIDGE_FILE)
    utils = _module("megatron.training.utils", print_rank_0=lambda *a, **k: None,
                    is_hybrid_model=lambda args: bool(getattr(args, "is_hybrid_model", False)))
    functional = _module("torch.nn.functional", silu=silu, gelu=gelu)
    stubs = {
        "megatron": _module("megatron"), "megatron.training": _module("megatron.training"),
        "megatron.training.utils": utils, "megatron.bridge": _module("megatron.bridge"),
        "megatron.bridge.training": _module("megatron.bridge.training"),
        "megatron.bridge.training.config": _module("megatron.bridge.training.config", ConfigContainer=object),
        "megatron.bridge.utils": _module("megatron.bridge.utils"),
        "torch": _module("torch"), "torch.nn": _module("torch.nn", functional=functional),
        "torch.nn.functional": functional,
    }
    with _stubbed(stubs):
        try:
            meg = _run_source("megatron.training.theoretical_memory_usage", meg_src, MEGATRON_FILE)
            vocab = _run_source("megatron.training.vocab_utils", vocab_src, VOCAB_FILE)
            sys.modules["megatron.bridge.utils.vocab_utils"] = _module(
                "megatron.bridge.utils.vocab_utils", calculate_padded_vocab_size=vocab.calculate_padded_vocab_size,
                _calculate_padded_vocab_size_cached=vocab._calculate_padded_vocab_size_cached)
            bridge = _run_source("megatron.bridge.training.utils.theoretical_memory_utils", bridge_src, BRIDGE_FILE)
        finally:
            for n in ("megatron.training.theoretical_memory_usage", "megatron.training.vocab_utils",
                      "megatron.bridge.utils.vocab_utils", "megatron.bridge.training.utils.theoretical_memory_utils"):
                sys.modules.pop(n, None)
    return Estimators(meg, bridge)


# ---- the plans


@dataclass(frozen=True)
class Plan:
    """A case of tests/megatron_memory_cases.py, with expert parallelism (PR #4687's term) where ``ep`` > 1."""

    case: Case
    ep: int = 1
    etp: Optional[int] = None  # None: the case's TP (the cases' convention)

    @property
    def name(self) -> str:
        return self.case.name + (f" EP{self.ep} ETP{self.etp or self.case.tp}" if self.ep > 1 else "")


PLANS: list[Plan] = [Plan(c) for c in CASES] + [
    # Mixtral 8x7B's 8 experts over EP 2 with expert-TP 1 (TP 8 for the dense part): 4 whole experts per GPU, their
    # optimizer states over expert-DP 16, PR #4687's term (before it, experts were divided by TP alone)
    Plan(next(c for c in CASES if c.num_experts), ep=2, etp=1),
]


def megatron_lm_args(p: Plan) -> SimpleNamespace:
    """The ``args`` Megatron-LM's functions read: the cases' MegatronArgs plus the fields d98e8a64 reads anew."""
    base = vars(megatron_args(p.case)).copy()
    world = p.case.tp * p.case.pp * p.case.dp
    base.update(expert_model_parallel_size=p.ep, expert_tensor_parallel_size=p.etp or p.case.tp,
                world_size=world, add_bias_linear=False, moe_latent_size=None, moe_router_topk=p.case.top_k)
    return SimpleNamespace(**base)


def bridge_config(p: Plan) -> SimpleNamespace:
    """A Bridge ``ConfigContainer`` as far as ``estimate_training_memory`` reads it (TransformerConfig names)."""
    c = p.case
    model = SimpleNamespace(
        num_layers=c.num_layers, hidden_size=c.hidden_size, ffn_hidden_size=c.ffn_hidden_size,
        num_attention_heads=c.num_attention_heads, num_query_groups=c.num_kv_heads if c.gqa else None,
        kv_channels=c.hidden_size // c.num_attention_heads, gated_linear_unit=c.swiglu,
        activation_func=silu if c.swiglu else gelu, normalization=c.normalization,
        share_embeddings_and_output_weights=c.tied, seq_length=c.seq_length, vocab_size=c.vocab_size,
        make_vocab_size_divisible_by=128, should_pad_vocab=True,
        tensor_model_parallel_size=c.tp, pipeline_model_parallel_size=c.pp,
        virtual_pipeline_model_parallel_size=c.vpp, context_parallel_size=1,
        expert_model_parallel_size=p.ep, expert_tensor_parallel_size=p.etp or c.tp,
        num_moe_experts=c.num_experts, moe_ffn_hidden_size=c.ffn_hidden_size if c.num_experts else None,
        moe_router_topk=c.top_k, num_experts_routed_to=c.top_k, moe_layer_freq=1, mtp_num_layers=None,
        sequence_parallel=c.tp > 1, recompute_granularity="selective", add_bias_linear=False)
    return SimpleNamespace(model=model, train=SimpleNamespace(micro_batch_size=c.micro_batch_size),
                           optimizer=SimpleNamespace(use_distributed_optimizer=c.distributed_optimizer),
                           data_parallel_size=c.dp)


@dataclass(frozen=True)
class Row:
    plan: Plan
    lm_states: float  # GiB: Megatron-LM weight + optimizer
    lm_act: float
    bridge_states: float
    bridge_act: float
    our_states: float
    our_act: float  # stage 0 activations (+ logits where stage 0 is the last stage)
    our_total: float  # stage 0 less NCCL / TE buffers

    @property
    def lm_total(self) -> float:
        return self.lm_states + self.lm_act

    @property
    def bridge_total(self) -> float:
        return self.bridge_states + self.bridge_act


def our_stage0(p: Plan) -> tuple[float, float, float]:
    spec = our_spec(p.case)
    if p.ep > 1:
        plan = spec.plan.model_copy(update={"ep": p.ep, "etp": p.etp or p.case.tp})
        spec = spec.model_copy(update={"plan": plan})
    s0 = evaluate(spec).stages[0]
    return s0.model_states_gib, s0.activations_gib + s0.logits_gib, s0.memory_gib - s0.runtime_buffers_gib


def compare(est: Estimators, p: Plan) -> Row:
    args = megatron_lm_args(p)
    lm_states = est.megatron.compute_weight_and_optimizer_memory(args) / GIB
    if args.sequence_parallel and args.recompute_granularity == "selective":  # report_theoretical_memory's choice
        lm_act = est.megatron.compute_activation_memory(args, num_microbatches=p.case.num_microbatches) / GIB
    else:
        lm_act = est.megatron.compute_activation_memory_without_sp(args, num_microbatches=p.case.num_microbatches) / GIB
    b = est.bridge.estimate_training_memory(bridge_config(p), num_microbatches=p.case.num_microbatches)
    b_states = sum(comp.memory_bytes for comp in b.model_state_components) / GIB
    b_act = (b.activation.memory_bytes if b.activation is not None else 0.0) / GIB
    ours = our_stage0(p)
    return Row(p, lm_states, lm_act, b_states, b_act, *ours)


def _pct(ours: float, theirs: float) -> str:
    return f"{100.0 * (ours / theirs - 1.0):+.1f} %"


def table(rows: list[Row]) -> str:
    head = ("| # | plan | parallelism | LM W+O | Bridge W+O | ours states | LM act | Bridge act | ours act | "
            "LM total | Bridge total | ours total | ours vs LM | ours vs Bridge |")
    lines = [head, "|" + "---|" * 14]
    for i, r in enumerate(rows, 1):
        c = r.plan.case
        par = c.parallel + (f" EP{r.plan.ep} ETP{r.plan.etp or c.tp}" if r.plan.ep > 1 else "")
        lines.append(f"| {i} | {c.name} | {par} | {r.lm_states:.2f} | {r.bridge_states:.2f} | {r.our_states:.2f} | "
                     f"{r.lm_act:.2f} | {r.bridge_act:.2f} | {r.our_act:.2f} | {r.lm_total:.2f} | "
                     f"{r.bridge_total:.2f} | {r.our_total:.2f} | {_pct(r.our_total, r.lm_total)} | "
                     f"{_pct(r.our_total, r.bridge_total)} |")
    return "\n".join(lines)


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--megatron-lm", type=Path, default=MEGATRON_LM[0], help="Megatron-LM snapshot (git directory)")
    p.add_argument("--bridge", type=Path, default=BRIDGE[0], help="Megatron-Bridge snapshot (git directory)")
    p.add_argument("--out", type=Path, default=None, help="also write the output here")
    args = p.parse_args(argv)
    try:
        est = load(args.megatron_lm, args.bridge)
    except SnapshotMissing as e:
        print(f"error: {e} (fetch github:NVIDIA/Megatron-LM and github:NVIDIA-NeMo/Megatron-Bridge)", file=sys.stderr)
        return 2
    rows = [compare(est, pl) for pl in PLANS]
    text = "\n".join([
        "# command: python benchmarks/megatron_estimators.py",
        f"# Megatron-LM {MEGATRON_LM[1][:10]} {MEGATRON_FILE}; Megatron-Bridge {BRIDGE[1][:10]} {BRIDGE_FILE}",
        "",
        "Stage-0 memory per GPU, GiB: Megatron's own estimators (run from source) vs parplan's default ledger",
        "(LM = Megatron-LM report_theoretical_memory's parts, Bridge = estimate_training_memory; W+O = weights,",
        " gradients and optimizer states; ours total = stage 0 less NCCL/TE buffers; Δ = ours / theirs - 1)",
        "",
        table(rows), ""])
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
