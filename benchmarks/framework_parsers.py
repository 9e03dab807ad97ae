"""Our exports through the frameworks' own parsers, at scale (issue 24.8).

    python benchmarks/framework_parsers.py [--out benchmarks/results/framework_parsers.txt]

Needs the ``frameworks`` extra (torch 2.13.0 CPU, deepspeed 0.19.8, torchtitan 0.2.2, megatron-core 0.16.1).
For each spec (the solver-speed scenarios that solve in seconds, the main example, the uneven-stage example,
DeepSeek-V3 with MLA and MTP from its config.json) and
each framework setting (megatron-core, megatron-bridge, torchtitan, deepspeed, any), the top 3 plans are
exported and each export whose target parser is installed is parsed (the golden export cases' specs too, their
plans dropped) (tests/frameworks/test_framework_parsers.py holds the
same checks for the golden cases; the parsers are run the same way):

* DeepSpeed (``DeepSpeedConfig``, ``deepspeed.moe.layer.MoE``) and torchtitan (``ConfigManager``, ``ParallelDims``,
  ``apply_ac``): every value benchmarks/framework_derived.py derives through their code (degrees, EP/ETP and local
  experts, DP, micro-batch, micro-batches and sequences per step, SP, the CP comm type, recompute and the layers each
  stage recomputes; DeepSpeed's ZeRO stage; torchtitan's sequence length, layers per model part and FSDP resharding)
  equal to the plan's, CP > 1 included;
* megatron-core ``TransformerConfig`` + ``get_num_layers_to_build`` (benchmarks/megatron_derived.py): accepted, and
  TP, PP, CP and its comm type, EP, ETP, VPP, SP, layers per (rank, chunk), recompute (the layers each stage
  recomputes, the selective modules), MTP depth and MLA equal.

Under a framework setting a plan goes to that framework's parser (megatron-bridge: megatron-core's, the same
TransformerConfig); under ``any`` to all three. A row counts "runs_on" when the plan's ``runs_on`` lists the
parser's framework: those must all be accepted with equal values; the others are parsed too and reported.
With ``--megatron-lm DIR`` (Megatron-LM's ``megatron/`` at core_v0.15.3, the export's target, taken from a fetched
snapshot at run time, never copied into this repository; ``pip install six`` for its tokenizer module) megatron-core's
parser is replaced by Megatron-LM's own path from the exported argv: ``parse_args`` + ``validate_args`` +
``core_transformer_config_from_args`` (megatron-core 0.15.3 from the snapshot, under this venv's numpy 2.4.6: the
``numpy<2`` pin is install metadata), compared as above plus DP, micro-batch, micro-batches and sequences per step,
sequence length and ZeRO (benchmarks/megatron_derived.py).
With ``--megatron-bridge DIR`` (a Megatron-Bridge checkout at v0.6.0, the Bridge export's target, with its
``3rdparty/Megatron-LM`` submodule; read at run time, never copied here) every plan of the megatron-core,
megatron-bridge and ``any`` settings also goes through Bridge's own performance-script path on the perf recipe of
its model, GPU and precision (benchmarks/bridge_perf.py: ``scripts/performance/run_script.py --dryrun`` as the
export's header says to call it, ``-m -mr -ng -g -c -gb -mb`` and the export's override lines, i.e. ``set_cli_overrides`` (OmegaConf/Hydra) -> ``set_user_overrides`` ->
``runtime_config_update`` -> ``ConfigContainer.validate``): accepted, and TP, PP, CP, EP/expert-TP, VPP, SP, DP,
micro-batch size and count, layers per (rank, chunk), recompute (granularity, method, layers per stage, selective
modules), activation offload, sequence length (model and dataset), distributed optimizer, Megatron-FSDP and its
sharding (ZeRO-2/3), MTP depth and the model's layers, width and experts equal to the plan (recompute compared in every
case, warned or not). A model no Bridge perf recipe builds (the GPT 13B and 1.7B, Mixtral, the large-vocabulary
example) goes through the same path on a stand-in recipe (``STAND_INS``: Llama-3 8B for a dense model, Qwen3-30B-A3B
for an MoE one; H100 where Bridge has no recipes for the GPU) whose provider gets the spec's shape from Hydra
overrides before the export's (:func:`bridge_shape_overrides`: layers, width, FFN, heads, head width, vocabulary,
experts, top-k, expert width, shared experts, dense layers); its rows name the stand-in. Three specs whose models Bridge has perf recipes for (Qwen3-30B-A3B on 64 H100s, DeepSeek-V3 on 1024 H100s, each
at its recipe's sequence length and batch) are added for this parser only. Prepare DIR from fetched snapshots::

    mkdir -p DIR/3rdparty/Megatron-LM
    git --git-dir BRIDGE.git archive v0.6.0 src scripts | tar -x -C DIR
    git --git-dir BRIDGE.git rev-parse v0.6.0 > DIR/COMMIT                         # 51885cf1...
    git --git-dir BRIDGE.git ls-tree v0.6.0 3rdparty/Megatron-LM | awk '{print $3}' \
        > DIR/3rdparty/Megatron-LM/COMMIT                                          # the submodule: cd4afffa...
    git --git-dir MEGATRON_LM.git archive $(cat DIR/3rdparty/Megatron-LM/COMMIT) megatron \
        | tar -x -C DIR/3rdparty/Megatron-LM
    pip install omegaconf "hydra-core>1.3,<=1.3.2" "transformers>=5.8,<=5.12.1"  # Bridge's pins

(the stubs and the offline model configs it needs are listed in benchmarks/bridge_perf.py).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))

from benchmarks.megatron_derived import check_megatron_core, check_megatron_lm  # noqa: E402 (after the path)

SETTINGS = ["megatron-core", "megatron-bridge", "torchtitan", "deepspeed", "any"]
PARSER_OF = {"megatron-core": ["megatron-core"], "megatron-bridge": ["megatron-core"], "torchtitan": ["torchtitan"],
             "deepspeed": ["deepspeed"], "any": ["megatron-core", "torchtitan", "deepspeed"]}
RUNS_ON = {"megatron-core": ("megatron-core", "megatron-bridge"), "torchtitan": ("torchtitan",),
           "deepspeed": ("deepspeed",)}


def bridge_specs():
    """Specs of models that Megatron-Bridge v0.6.0 has H100 perf recipes for and the main list lacks, at the
    recipe's sequence length and global batch (perf_recipes/qwen/h100/qwen3_moe.py
    ``qwen3_30b_a3b_pretrain_64gpu_h100_bf16_config``, perf_recipes/deepseek/h100/deepseek_v3.py
    ``deepseek_v3_pretrain_1024gpu_h100_bf16_config``, perf_recipes/llama/h100/llama31.py
    ``llama31_405b_pretrain_512gpu_h100_bf16_config``); run through the Bridge parser only (DeepSeek-V3's is in
    :func:`specs`, for every parser)."""
    return [hf_spec(*row) for row in (("Qwen3-30B-A3B / 64 H100, 4K (Bridge recipe)", "qwen3-30b-a3b.json", 64, 4096, 4096),
                                      ("Llama-3.1 405B / 512 H100, 8K (Bridge recipe)", "llama-3.1-405b.json", 512, 8192,
                                       768))]


def hf_spec(name: str, config: str, gpus: int, seq: int, batch: int):
    """(name, Spec) of a Hugging Face config.json in tests/data/hf on ``gpus`` H100s."""
    from parplan.library.spec_io import spec_from_data

    data = {"model": {"hf_config": str(ROOT / "tests" / "data" / "hf" / config)},
            "cluster": {"gpu": "H100-SXM-80GB", "num_gpus": gpus}, "training": {"seq_len": seq, "global_batch_size": batch}}
    return name, spec_from_data(data, name)


def specs():
    import yaml

    from parplan.library.spec_io import parse_spec
    from solver_speed import SCENARIOS

    out = [(name, dict(raw)) for name, raw in SCENARIOS if raw["cluster"]["num_gpus"] <= 256]
    for path in ("llama3-70b-64xh100.yaml", "uneven-stages-large-vocab.yaml"):
        out.append((path, yaml.safe_load((ROOT / "examples" / path).read_text())))
    for path in sorted((ROOT / "tests" / "data" / "exports" / "cases").glob("*.yaml")):  # the golden cases' specs
        spec = parse_spec(path.read_text())  # model presets resolved
        out.append((path.name, spec.model_copy(update={"plan": None})))
    # DeepSeek-V3 with MLA and one MTP module (its config.json), at the Bridge perf recipe's size (issue 40 acceptance)
    out.append(hf_spec("DeepSeek-V3 MLA+MTP / 1024 H100, 4K", "deepseek-v3.json", 1024, 4096, 16384))
    return out


def check_deepspeed(spec, plan) -> list[str]:
    """DeepSpeed's own values for the export (benchmarks/framework_derived.py) against the plan's, and the ZeRO stage
    (the pipeline engine's 0-1 under PP)."""
    from benchmarks.framework_derived import Rejected, deepspeed_derived, differences, planned

    try:
        got = deepspeed_derived(spec, plan)
    except Rejected as err:
        return [f"rejected: {err}"]
    want = dict(planned(spec, plan), zero_stage=min(plan.zero_stage, 1) if plan.pp > 1 else plan.zero_stage)
    return differences(got, want)


def check_torchtitan(spec, plan) -> list[str]:
    """torchtitan's own values for the export (benchmarks/framework_derived.py) against the plan's: every value of
    :func:`framework_derived.planned`, the sequence length, torch.compile of the model (fused elementwise ops unless
    ``assumptions.eager_elementwise``), the layers of each model part (not DualPipe, whose parts
    split each stage in halves) and FSDP's resharding after forward (ZeRO-3 without PP; under PP the plan prices
    ZeRO-2/3 without it, assumptions.zero_unsharded_across_microbatches_with_pp)."""
    from benchmarks.framework_derived import Rejected, differences, planned_torchtitan, torchtitan_derived

    from parplan.costmodel.spec.layout import model_chunk_layers

    try:
        got = torchtitan_derived(spec, plan)
    except Rejected as err:
        return [f"rejected: {err}"]
    want = dict(planned_torchtitan(spec, plan), seq_len=spec.training.seq_len)
    if plan.pp > 1 and plan.schedule not in ("dualpipe", "dualpipev"):
        want["parts"] = model_chunk_layers(plan)
    if "mla" in got:  # the model the TOML names (framework_derived._torchtitan_model)
        want.update(mla=spec.model.mla is not None, mtp_num_layers=spec.model.num_mtp_layers or 0)
    if got["reshard_after_forward"] is not None or plan.zero_stage >= 2:
        want["reshard_after_forward"] = plan.zero_stage == 3 and plan.pp == 1
    return differences(got, want)


# Megatron-Bridge v0.6.0 perf recipes by model shape (layers, hidden, heads, KV heads, vocabulary, experts):
# (-m family, -mr recipe); the HF configs they load are those of tests/data/hf (benchmarks/bridge_perf.py)
BRIDGE_RECIPES = {(32, 4096, 32, 8, 128256, None): ("llama", "llama3_8b"),
                  (80, 8192, 64, 8, 128256, None): ("llama", "llama3_70b"),
                  (126, 16384, 128, 8, 128256, None): ("llama", "llama31_405b"),
                  (48, 2048, 32, 4, 151936, 128): ("qwen", "qwen3_30b_a3b"),
                  (61, 7168, 128, 128, 129280, 256): ("deepseek", "deepseek_v3")}
BRIDGE_GPUS = {"H100-SXM-80GB": "h100", "B200": "b200", "GB200-NVL72": "gb200"}  # -g of the perf scripts
BRIDGE_PRECISION = {"bf16": "bf16", "fp8": "fp8_cs"}  # -c


class BridgeWorker:
    """benchmarks/bridge_perf.py in a subprocess (its imports, import hook and environment stay there)."""

    def __init__(self, bridge: Path):
        self.proc = subprocess.Popen([sys.executable, str(ROOT / "benchmarks" / "bridge_perf.py"), "--bridge",
                                      str(bridge)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                     stderr=subprocess.DEVNULL if not os.environ.get("PARPLAN_BRIDGE_TRACEBACK") else None)
        ready = self.proc.stdout.readline()
        if not ready:
            raise SystemExit("benchmarks/bridge_perf.py did not start (run it alone to see why)")
        self.info = json.loads(ready)

    def request(self, payload: dict) -> dict:
        self.proc.stdin.write(json.dumps(payload) + "\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())


BRIDGE: list = []  # the worker, started by main() under --megatron-bridge


# a stand-in perf recipe for a model no Bridge perf recipe builds: Bridge's own provider and config path (GPTModelProvider
# / its MoE fields, ConfigContainer, runtime_config_update, validate) on the spec's shape, set by Hydra overrides
# (:func:`bridge_shape_overrides`) before the export's; an H100 recipe on GPUs that have none (-g only picks defaults)
STAND_INS = {False: ("llama", "llama3_8b"), True: ("qwen", "qwen3_30b_a3b")}


def bridge_shape_overrides(spec) -> list[str]:
    """``model.*`` overrides that give a stand-in recipe's provider the spec's model shape (every field a
    ``TransformerConfig`` takes the shape from; family fields come from the export)."""
    m = spec.model
    out = [f"model.num_layers={m.num_layers}", f"model.hidden_size={m.hidden_size}",
           f"model.ffn_hidden_size={m.ffn_hidden_size}", f"model.num_attention_heads={m.num_attention_heads}",
           f"model.kv_channels={m.head_dim or m.hidden_size // m.num_attention_heads}", f"model.vocab_size={m.vocab_size}",
           "model.qk_layernorm=false"]
    if m.moe is not None:
        shared = m.moe.shared_expert_ffn_hidden_size or m.moe.expert_ffn_hidden_size
        out += [f"model.num_moe_experts={m.moe.num_experts}", f"model.moe_router_topk={m.moe.top_k}",
                f"model.moe_ffn_hidden_size={m.moe.expert_ffn_hidden_size}",
                f"model.moe_shared_expert_intermediate_size="
                f"{shared * m.moe.num_shared_experts if m.moe.num_shared_experts else 'null'}",
                f"model.moe_layer_freq=[{','.join(['0'] * m.moe.first_dense_layers + ['1'] * (m.num_layers - m.moe.first_dense_layers))}]"]
    return out


def bridge_recipe(spec):
    """``(family, recipe, gpu, precision)`` of the spec's Bridge perf recipe, or the reason there is none."""
    m = spec.model
    key = (m.num_layers, m.hidden_size, m.num_attention_heads, m.kv_heads, m.vocab_size,
           m.moe.num_experts if m.moe is not None else None)
    if key not in BRIDGE_RECIPES:
        return None, "no perf recipe for this model"
    if spec.cluster.gpu not in BRIDGE_GPUS:
        return None, f"no perf recipes for {spec.cluster.gpu}"
    return (*BRIDGE_RECIPES[key], BRIDGE_GPUS[spec.cluster.gpu], BRIDGE_PRECISION[spec.training.precision]), None


def bridge_recomputed(got: dict) -> list[int]:
    """Layers each pipeline rank recomputes in full under Bridge's final config (Megatron-Core's rule,
    megatron_derived.recomputed_per_stage)."""
    from benchmarks.megatron_derived import recomputed_per_stage

    return recomputed_per_stage(got["pp"], got["layers"], got["recompute_granularity"], got["recompute_method"],
                                got["recompute_num_layers"])


def check_megatron_bridge(spec, plan) -> list[str]:
    """Megatron-Bridge's perf-script path on the export (benchmarks/bridge_perf.py), on the model's perf recipe or a
    stand-in given the model's shape."""
    from parplan.frameworks.export import export_plan
    from parplan.frameworks.export_common import global_batch_size
    from parplan.frameworks.export_megatron import megatron_settings

    recipe, why = bridge_recipe(spec)
    shape = []
    if recipe is None:  # Bridge's config code on the spec's shape over a stand-in recipe (STAND_INS)
        shape = bridge_shape_overrides(spec)
        recipe = (*STAND_INS[spec.model.moe is not None], BRIDGE_GPUS.get(spec.cluster.gpu, "h100"),
                  BRIDGE_PRECISION[spec.training.precision])
    family, name, gpu, precision = recipe
    exported = export_plan(spec, plan, "bridge")
    # the export's documented use, `$(grep -v '^#' file)`: the shell splits the lines on whitespace
    overrides = " ".join(line for line in exported.text.splitlines() if not line.startswith("#")).split()
    # the export's performance-recipe use line: -m -mr -ng -g -c, and -gb -mb (benchmarks/bridge_perf.py)
    s = megatron_settings(spec, plan)
    argv = ["-m", family, "-mr", name, "-ng", str(spec.cluster.num_gpus), "-g", gpu, "-c", precision,
            "-gb", str(s.global_batch_size), "-mb", str(s.micro_batch_size)]
    answer = BRIDGE[0].request({"argv": argv, "overrides": shape + overrides})
    name += " with the spec's shape" if shape else ""
    if not answer["ok"]:
        return [f"rejected ({name}): {answer['error']}"]
    got, m = answer["got"], spec.model
    want = {"tp": plan.tp, "pp": plan.pp, "cp": plan.cp, "vpp": plan.vpp if plan.vpp > 1 else None,
            "sequence_parallel": s.sequence_parallel, "dp": plan.dp, "micro_batch_size": plan.micro_batch_size,
            "global_batch_size": global_batch_size(plan), "layers": model_chunk_layers(plan),
            "recompute_granularity": s.recompute_granularity, "recompute_method": s.recompute_method,
            "recompute_num_layers": s.recompute_num_layers, "cpu_offloading_num_layers": s.cpu_offloading_num_layers,
            "model_seq_length": spec.training.seq_len, "dataset_seq_length": spec.training.seq_len,
            "use_distributed_optimizer": s.distributed_optimizer or s.fsdp_sharding_strategy is not None,
            "use_megatron_fsdp": s.fsdp_sharding_strategy is not None,
            "data_parallel_sharding_strategy": s.fsdp_sharding_strategy,  # ZeRO-2/3 (export_bridge.fsdp_overrides)
            "mtp_num_layers": m.num_mtp_layers or None, "num_layers": m.num_layers, "hidden_size": m.hidden_size}
    if m.moe is not None:
        want.update(ep=plan.ep, etp=plan.etp)
    if s.recompute_granularity == "selective":
        want["recompute_modules"] = ["core_attn"]  # what --recompute-granularity selective means in Megatron-LM
    out = [f"{key} {got.get(key)} != {value}" for key, value in want.items() if got.get(key) != value]
    if got["global_batch_size"] // (got["micro_batch_size"] * got["dp"]) != plan.num_microbatches:
        out.append("micro-batches per step differ")
    full = plan.recompute == "full" and any(plan.recompute_layers)
    if bridge_recomputed(got) != (list(plan.recompute_layers) if full else [0] * plan.pp):  # no case skipped
        out.append(f"recomputed layers per stage {bridge_recomputed(got)} != {list(plan.recompute_layers)}")
    if m.moe is not None and got["num_moe_experts"] != m.moe.num_experts:
        out.append(f"num_moe_experts {got['num_moe_experts']} != {m.moe.num_experts}")
    if answer.get("stub_uses"):
        out.append(f"stubs used on the config path: {answer['stub_uses']}")
    return out


CHECKS = {"deepspeed": check_deepspeed, "torchtitan": check_torchtitan, "megatron-core": check_megatron_core,
          "megatron-bridge": check_megatron_bridge,
          "megatron-lm": check_megatron_lm}


def _arguments() -> tuple[argparse.Namespace, Path]:
    """The command line, and ``--out``'s default."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "framework_parsers.txt")
    parser.add_argument("--top", type=int, default=3)
    parser.add_argument("--megatron-lm", type=Path, metavar="DIR", help="a directory holding Megatron-LM's megatron/ "
                        "at core_v0.15.3 (e.g. `git --git-dir <fetched snapshot> archive core_v0.15.3 megatron | tar -x "
                        "-C DIR`): run its validate_args and core_transformer_config_from_args in place of "
                        "megatron-core's parser (the snapshot's megatron package shadows the installed one)")
    parser.add_argument("--megatron-bridge", type=Path, metavar="DIR", help="a Megatron-Bridge v0.6.0 checkout with "
                        "its 3rdparty/Megatron-LM submodule (module docstring): also run Bridge's perf-script override "
                        "path on the plans of the megatron-core, megatron-bridge and any settings")
    parser.add_argument("--only", choices=["megatron-core", "megatron-lm", "megatron-bridge", "torchtitan", "deepspeed"],
                        help="run this parser only")
    return parser.parse_args(), parser.get_default("out")


def _configure(args) -> list:
    """PARSER_OF / RUNS_ON for the parsers asked for, the Bridge worker started; the specs to plan."""
    if args.megatron_lm is not None:
        sys.path.insert(0, str(args.megatron_lm.resolve()))
        for setting in ("megatron-core", "megatron-bridge", "any"):
            PARSER_OF[setting] = ["megatron-lm" if t == "megatron-core" else t for t in PARSER_OF[setting]]
        RUNS_ON["megatron-lm"] = RUNS_ON["megatron-core"]
    spec_list = specs()
    if args.megatron_bridge is not None:
        for setting in ("megatron-core", "megatron-bridge", "any"):
            PARSER_OF[setting] = PARSER_OF[setting] + ["megatron-bridge"]
        RUNS_ON["megatron-bridge"] = ("megatron-bridge",)
        spec_list += [(name, spec, "megatron-bridge") for name, spec in bridge_specs()]
        BRIDGE.append(BridgeWorker(args.megatron_bridge))
    if args.only is not None:
        for setting in SETTINGS:
            PARSER_OF[setting] = [t for t in PARSER_OF[setting] if t == args.only]
    return spec_list


def _run(spec_list: list, top: int) -> tuple[dict, list[str], int]:
    """Every spec under every setting, its top plans through the setting's parsers: ``(tally, failures, exports,
    refused)``, the tally ``(parser, runs_on) -> [parsed, accepted with equal values]``, ``refused`` the (spec,
    setting) pairs whose framework cannot build the model at all (a spec error, e.g. MTP on torchtitan v0.2.2)."""
    from parplan.costmodel.spec.spec import Spec
    from parplan.frameworks.compare import error_reason, spec_for_framework
    from parplan.frameworks.loader import validate_spec
    from parplan.solver.cpsat import SolverControls
    from parplan.solver.planner import optimize

    controls = SolverControls(deterministic=True, time_limit_s=60)
    tally: dict[tuple[str, bool], list[int]] = {}
    failures, exports, refused = [], 0, []
    for name, raw, *only in spec_list:
        for setting in SETTINGS:
            targets = [t for t in PARSER_OF[setting] if not only or t in only]
            if not targets:
                continue
            base = raw if isinstance(raw, Spec) else validate_spec(raw)
            try:
                spec = spec_for_framework(base, setting)  # the base's own profile knobs taken back out
            except ValueError as err:  # pydantic's ValidationError: the spec's field and rule
                refused.append(f"{name} | {setting}: {error_reason(err)}")
                continue
            for rank, ev in enumerate(optimize(spec, top_k=top, controls=controls).plans, 1):
                exports += 1
                for target in targets:
                    runs = any(f in ev.runs_on for f in RUNS_ON[target])
                    problems = CHECKS[target](spec, ev.plan)
                    row = tally.setdefault((target, runs), [0, 0])
                    row[0] += 1
                    row[1] += not problems
                    if problems:
                        failures.append(f"{name} | {setting} #{rank} -> {target} (runs_on {ev.runs_on}): "
                                        + "; ".join(problems))
    return tally, failures, exports, refused


def _header(args, default_out: Path, seconds: float, specs_count: int, exports: int) -> list[str]:
    """The results file's header: the command, date, commit and what was run."""
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    if subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True,
                      text=True).stdout.strip():
        commit += " + working tree"
    command = ("python benchmarks/framework_parsers.py" + (f" --megatron-lm {args.megatron_lm}" if args.megatron_lm else "")
               + (f" --megatron-bridge {args.megatron_bridge}" if args.megatron_bridge else "")
               + (f" --only {args.only}" if args.only else "")
               + (f" --out {args.out}" if args.out != default_out else ""))
    lines = [f"# Command: {command}",
             f"# Date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%dT%H:%MZ} (commit {commit or '?'}); "
             f"{seconds:.0f} s",
             f"# {specs_count} specs x {len(SETTINGS)} framework settings x top {args.top}: {exports} exported plans"]
    if BRIDGE:
        info = BRIDGE[0].info
        lines.append(f"# Megatron-Bridge {info['version']} at {info['commit']}, Megatron-LM submodule at "
                     f"{info['megatron_lm_commit']}; stubbed imports: {', '.join(info['stubs'])}; environment "
                     f"overrides: {' '.join(info['environment_overrides']) or 'none'}")
    return lines


def main() -> None:
    args, default_out = _arguments()
    spec_list = _configure(args)
    t0 = time.perf_counter()
    tally, failures, exports, refused = _run(spec_list, args.top)
    lines = _header(args, default_out, time.perf_counter() - t0, len(spec_list), exports)
    lines += ["", f"{'parser':<16}{'plan runs there':<18}{'parsed':>8}{'accepted, values equal':>26}"]
    for (target, runs), (parsed, ok) in sorted(tally.items()):
        lines.append(f"{target:<16}{'yes' if runs else 'no':<18}{parsed:>8}{ok:>26}")
    lines += ["", f"not accepted or values differing ({len(failures)}):"] + [f"  {f}" for f in failures]
    lines += ["", f"specs refused under a framework setting, which cannot build the model ({len(refused)}):"]
    lines += [f"  {r}" for r in refused]
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
