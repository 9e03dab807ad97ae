"""Megatron-Bridge's own performance-script path on our Bridge exports (``framework_parsers.py --megatron-bridge``).

A worker process (one per benchmark run: Bridge's imports take about a minute, and its ``megatron`` namespace,
import hook and environment changes stay out of the benchmark's process). It reads one JSON request per line on
stdin and answers one JSON line on stdout::

    {"argv": [perf CLI arguments], "overrides": ["key=value", ...], "pp": p, "vpp": v}
    -> {"ok": true, "recipe": "<recipe function>", "got": {...}} | {"ok": false, "error": "..."}

For each request it runs, from a Megatron-Bridge checkout given by path (``--bridge DIR``: its ``src/`` and
``scripts/`` and its ``3rdparty/Megatron-LM`` submodule at the commit the checkout pins; code read at run time,
never copied here), exactly what ``scripts/performance/run_script.py``'s ``main`` does with
``--dryrun``: ``parse_cli_args().parse_known_args()`` on the perf CLI arguments followed by our override lines,
then ``_run_training(args, cli_overrides)``, which builds the flat perf recipe (``_prepare_perf_recipe``:
``get_perf_recipe_by_name``, or for another GPU count ``get_perf_optimized_recipe`` + ``set_post_overrides``),
applies the Hydra overrides (``set_cli_overrides``: OmegaConf dotlist into the ``ConfigContainer``) and the
argparse ones (``set_user_overrides``), then ``runtime_config_update`` (mixed precision, data-parallel size,
comm-overlap setup, ``ConfigContainer.validate`` with the model provider's ``finalize``: Megatron-Core's
``TransformerConfig.__post_init__`` checks) and writes the YAML, exiting 0. The recipe object is read back from
``_prepare_perf_recipe``'s return value (a wrapper that records it; ``runtime_config_update`` changes that object
in place), and the layers each (pipeline rank, virtual stage) builds come from the submodule's Megatron-Core
``get_num_layers_to_build`` on the finalized model config.

What is not Bridge's code here, all of it in :func:`setup`:

* **Stubbed imports** (``STUBS``): ``nemo_run`` (the Slurm launcher; ``argument_parser`` reads
  ``get_nemorun_home`` for a help string), ``transformer_engine`` (CUDA-only), ``megatron.energon`` (multimodal
  data loader), ``diffusers`` (diffusion models), ``modelopt`` (quantization): module-level imports of modules the
  recipes never call on this path. The stub is seen **only by imports written in Bridge's own files** (an
  ``__import__`` hook keyed on the importing file's path, nothing put in ``sys.modules``), so Megatron-Core's
  ``try: import transformer_engine`` still fails and it takes its no-TE paths, as on a machine without TE. A stub
  attribute is an inert placeholder (a module that returns more placeholders; called with one callable it returns
  it, as a decorator; used as a base class it drops out); every attribute looked up on a stub *after* the
  imports, i.e. on the config path itself, is recorded and reported as ``stub_uses`` (empty in the recorded run).
* **Python 3.11**: Bridge v0.6.0 requires Python 3.12; the only 3.12 feature its import chain needs is
  ``typing.override`` (Megatron-LM ``megatron/training/models/{gpt,hybrid}.py``), set to
  ``typing_extensions.override`` (the same identity decorator) when missing.
* **No GPU**: the MoE recipes read ``torch.cuda.get_device_properties(0)`` to choose the expert-parallel dispatcher
  (``apply_flex_dispatcher_backend``); it answers as the recipe's GPU (``-g``: H100 is sm_90), see ``_fake_device``.
* **Model configs offline**: the recipes call ``AutoBridge.from_hf_pretrained("meta-llama/Meta-Llama-3-70B")``
  ... (config only, ``load_weights=False``); with no network, a temporary Hugging Face cache holds the published
  ``config.json`` files of tests/data/hf/ under those ids and ``HF_HUB_OFFLINE=1`` is set (transformers' offline
  mode), so transformers reads the same config it would download.

Environment: Python packages ``omegaconf``, ``hydra-core`` (Bridge pins ``>1.3,<=1.3.2``) and ``transformers``
(``>=5.8,<=5.12.1``) next to the ``frameworks`` extra's torch (``pip install omegaconf "hydra-core>1.3,<=1.3.2"
"transformers>=5.8,<=5.12.1"``).
"""

from __future__ import annotations

import argparse
import builtins
import contextlib
import io
import json
import os
import shutil
import sys
import tempfile
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

STUBS = ("nemo_run", "transformer_engine", "megatron.energon", "diffusers", "modelopt", "nvidia_resiliency_ext")

# Hugging Face ids the perf recipes load -> the published config.json in tests/data/hf/ (and the revision a recipe
# pins: recipes/qwen/h100/qwen3_moe.py _QWEN3_30B_A3B_MODEL_REVISION)
HF_CONFIGS = {"meta-llama/Meta-Llama-3-70B": ("llama-3-70b.json", None),
              "meta-llama/Meta-Llama-3-8B": ("llama-3-8b.json", None),
              "meta-llama/Meta-Llama-3.1-405B": ("llama-3.1-405b.json", None),
              "deepseek-ai/DeepSeek-V3": ("deepseek-v3.json", None),
              "Qwen/Qwen3-30B-A3B": ("qwen3-30b-a3b.json", "ad44e777bcd18fa416d9da3bd8f70d33ebb85d39")}

# Hydra overrides put before the export's: fused kernels the recipes turn on whose availability Megatron-Core checks
# at config time (TransformerConfig.__post_init__, TE not installed here); kernel choices, no parallel field
ENVIRONMENT_OVERRIDES = ["model.apply_rope_fusion=false",  # "apply_rope_fusion is not available. Please install TE >= 1.4"
                         "model.moe_permute_fusion=false"]  # "fused permutation is not available. Please install TE >= 2.1.0"

# stub calls expected on the path: argument_parser's --log_dir help string reads nemo_run's home directory
EXPECTED_STUB_USES = {"nemo_run.config.get_nemorun_home()"}

STUB_USES: list[str] = []
_RECORDING = [False]


def _record(what: str) -> None:
    """Record a stub lookup made on a request's path, not in a module or class body being imported."""
    if not _RECORDING[0]:
        return
    frame = sys._getframe(2)
    while frame is not None and frame.f_code is not run_one.__code__:
        if frame.f_code.co_name == "<module>":
            return  # an import's module body
        frame = frame.f_back
    STUB_USES.append(what)


class _Stub(types.ModuleType):
    """An inert placeholder for a stubbed module or anything looked up on it."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        _record(f"{self.__name__}.{name}")
        sub = _Stub(f"{self.__name__}.{name}")
        setattr(self, name, sub)
        return sub

    def __call__(self, *args, **kwargs):
        if len(args) == 1 and not kwargs and callable(args[0]):
            return args[0]  # used as a decorator
        _record(f"{self.__name__}()")
        return _Stub(f"{self.__name__}()")

    def __or__(self, other):
        return self  # in a type annotation (``CallWrapper | None``)

    __ror__ = __or__

    def __mro_entries__(self, bases):
        return ()  # used as a base class: dropped


def _fused_adam_stub() -> types.ModuleType:
    """``transformer_engine.pytorch.optimizers`` as Megatron-Core's precision-aware-optimizer check sees it: a
    ``FusedAdam`` whose signature has the four arguments the check looks for (TE's own FusedAdam has them); never
    called."""
    module = types.ModuleType("transformer_engine.pytorch.optimizers")

    def FusedAdam(params, lr=1e-3, master_weight_dtype=None, exp_avg_dtype=None, exp_avg_sq_dtype=None,  # noqa: N802
                  use_decoupled_grad=False, **kwargs):
        raise RuntimeError("stub: not callable")

    module.FusedAdam = FusedAdam
    return module


# (importing file, module) -> a stub: one import in Megatron-Core that checks an installed TE's API
MEGATRON_CORE_STUBS = {("megatron/core/optimizer/optimizer_config.py", "transformer_engine.pytorch.optimizers"):
                       _fused_adam_stub}


def _install_stubs(bridge: Path) -> None:
    real_import = builtins.__import__
    made: dict[str, _Stub] = {}
    prefixes = (str(bridge.resolve() / "src") + os.sep, str(bridge.resolve() / "scripts") + os.sep)  # not 3rdparty/

    def hooked(name, globals=None, locals=None, fromlist=(), level=0):
        importer = str((globals or {}).get("__file__", ""))
        for (suffix, module), make in MEGATRON_CORE_STUBS.items():
            if level == 0 and name == module and fromlist and importer.endswith(suffix):
                return made.setdefault(f"{suffix}:{module}", make())
        if (level == 0 and any(name == s or name.startswith(s + ".") for s in STUBS) and globals
                and str(globals.get("__file__", "")).startswith(prefixes)):
            if fromlist:
                return made.setdefault(name, _Stub(name))
            top = name.split(".")[0]
            if top in STUBS:
                return made.setdefault(top, _Stub(top))
            return real_import(top, globals, locals, (), 0)
        return real_import(name, globals, locals, fromlist, level)

    builtins.__import__ = hooked


def _hf_cache(directory: Path) -> None:
    for repo, (name, revision) in HF_CONFIGS.items():
        snap = directory / ("models--" + repo.replace("/", "--"))
        commit = revision or "0" * 40
        (snap / "snapshots" / commit).mkdir(parents=True, exist_ok=True)
        (snap / "refs").mkdir(exist_ok=True)
        (snap / "refs" / "main").write_text(commit)
        shutil.copy(ROOT / "tests" / "data" / "hf" / name, snap / "snapshots" / commit / "config.json")
    os.environ.update(HF_HUB_CACHE=str(directory), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")


def setup(bridge: Path, scratch: Path):
    """Bridge's perf scripts importable from ``bridge``; returns the ``run_script`` module."""
    import typing

    if not hasattr(typing, "override"):
        import typing_extensions

        typing.override = typing_extensions.override
    megatron_lm = bridge / "3rdparty" / "Megatron-LM"
    if not (megatron_lm / "megatron" / "core").is_dir():
        raise SystemExit(f"{megatron_lm}/megatron/core missing: check out Bridge's Megatron-LM submodule")
    sys.path[:0] = [str(megatron_lm), str(bridge / "src"), str(bridge / "scripts" / "performance")]
    _install_stubs(bridge)
    _hf_cache(scratch / "hf")
    with contextlib.redirect_stdout(sys.stderr):
        import run_script  # noqa: the perf runner (scripts/performance/run_script.py)

        # the imports _run_training makes before it prepares the recipe, made here so that stub lookups recorded
        # during a request are the config path's, not an import's
        import megatron.bridge.diffusion.models.wan.wan_step  # noqa: F401
        import megatron.bridge.models.qwen_vl.qwen3_vl_step  # noqa: F401
        import megatron.bridge.training.gpt_step  # noqa: F401
        import megatron.bridge.training.pretrain  # noqa: F401
        import megatron.bridge.training.vlm_step  # noqa: F401
    return run_script


def layers_per_chunk(config, pp: int, vpp: int) -> list[int]:
    """The submodule's ``get_num_layers_to_build`` for each (virtual stage v, rank), in v·pp + rank order."""
    from megatron.core import parallel_state as ps
    from megatron.core.transformer.transformer_block import get_num_layers_to_build

    built = [0] * (pp * vpp)
    ps.set_pipeline_model_parallel_world_size(pp)
    ps.set_virtual_pipeline_model_parallel_world_size(vpp if vpp > 1 else None)
    try:
        for rank in range(pp):
            ps.set_pipeline_model_parallel_rank(rank)
            for v in range(vpp):
                built[v * pp + rank] = get_num_layers_to_build(config, vp_stage=v if vpp > 1 else None, pp_rank=rank)
    finally:
        ps.set_pipeline_model_parallel_rank(None)
        ps.set_pipeline_model_parallel_world_size(None)
        ps.set_virtual_pipeline_model_parallel_world_size(None)
    return built


# -g of the perf scripts -> what torch.cuda.get_device_properties(0) answers on that GPU (name, compute capability)
DEVICES = {"h100": ("NVIDIA H100 80GB HBM3", 9, 0), "b200": ("NVIDIA B200", 10, 0), "gb200": ("NVIDIA GB200", 10, 0)}


def _fake_device(gpu: str) -> None:
    """The MoE recipes pick their EP dispatcher from the GPU they run on
    (training/flex_dispatcher_backend.py ``apply_flex_dispatcher_backend``: ``torch.cuda.get_device_properties(0)``);
    this machine has none, so device 0 answers as the recipe's own GPU (``-g``). Only the dispatcher choice reads it."""
    import torch

    name, major, minor = DEVICES[gpu]
    torch.cuda.get_device_properties = lambda device=None: types.SimpleNamespace(name=name, major=major, minor=minor)


def run_one(run_script, request: dict, scratch: Path) -> dict:
    """``run_script.main()`` with ``--dryrun`` on the request's argv + overrides; the finalized config's values."""
    from argument_parser import parse_cli_args

    saved_env = dict(os.environ)
    captured = {}
    prepare = run_script._prepare_perf_recipe

    def recording(args, cli_overrides):
        captured["recipe"] = prepare(args, cli_overrides)
        return captured["recipe"]

    yaml_path = scratch / "ConfigContainer.yaml"
    argv = [*request["argv"], "--dryrun", "--save_config_filepath", str(yaml_path), *ENVIRONMENT_OVERRIDES,
            *request["overrides"]]
    run_script._prepare_perf_recipe = recording
    _fake_device(request["argv"][request["argv"].index("-g") + 1])
    del STUB_USES[:]
    _RECORDING[0] = True
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            args, cli_overrides = parse_cli_args().parse_known_args(argv)
            try:
                run_script._run_training(args, cli_overrides)
            except SystemExit as done:
                if done.code not in (0, None):
                    raise
    except Exception as err:  # noqa: BLE001 -- any rejection, reported
        if os.environ.get("PARPLAN_BRIDGE_TRACEBACK"):
            import traceback

            traceback.print_exc()
        return {"ok": False, "error": f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"}
    finally:
        _RECORDING[0] = False
        run_script._prepare_perf_recipe = prepare
        os.environ.clear()
        os.environ.update(saved_env)
    cfg = captured["recipe"]
    m = cfg.model
    got = {
        "tp": m.tensor_model_parallel_size, "pp": m.pipeline_model_parallel_size, "cp": m.context_parallel_size,
        "ep": m.expert_model_parallel_size, "etp": m.expert_tensor_parallel_size,
        "vpp": m.virtual_pipeline_model_parallel_size, "sequence_parallel": m.sequence_parallel,
        "dp": cfg.data_parallel_size, "micro_batch_size": cfg.train.micro_batch_size,
        "global_batch_size": cfg.train.global_batch_size,
        "recompute_granularity": m.recompute_granularity, "recompute_method": m.recompute_method,
        "recompute_num_layers": m.recompute_num_layers, "recompute_modules": m.recompute_modules,
        "cpu_offloading_num_layers": m.cpu_offloading_num_layers if m.cpu_offloading else None,
        "model_seq_length": m.seq_length, "dataset_seq_length": cfg.dataset.seq_length,
        "use_distributed_optimizer": cfg.ddp.use_distributed_optimizer,
        "use_megatron_fsdp": cfg.ddp.use_megatron_fsdp,
        "data_parallel_sharding_strategy": cfg.ddp.data_parallel_sharding_strategy if cfg.ddp.use_megatron_fsdp else None,
        "mtp_num_layers": m.mtp_num_layers, "num_layers": m.num_layers, "hidden_size": m.hidden_size,
        "num_moe_experts": m.num_moe_experts, "yaml_written": yaml_path.exists(),
    }
    got["layers"] = layers_per_chunk(m, m.pipeline_model_parallel_size, m.virtual_pipeline_model_parallel_size or 1)
    yaml_path.unlink(missing_ok=True)
    return {"ok": True, "got": got, "stub_uses": sorted(set(STUB_USES) - EXPECTED_STUB_USES)}


def _commit(directory: Path) -> str:
    """``git rev-parse HEAD`` of a checkout, else the first word of a COMMIT file beside its sources, else '?'."""
    import subprocess

    head = subprocess.run(["git", "-C", str(directory), "rev-parse", "HEAD"], capture_output=True, text=True)
    if head.returncode == 0 and (directory / ".git").exists():
        return head.stdout.strip()
    marker = directory / "COMMIT"
    return marker.read_text().split()[0] if marker.exists() else "?"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bridge", type=Path, required=True, help="a Megatron-Bridge checkout (src/, scripts/, "
                        "3rdparty/Megatron-LM/megatron/)")
    args = parser.parse_args()
    out = os.fdopen(os.dup(1), "w", buffering=1)  # the protocol; everything else printed goes to stderr
    os.dup2(2, 1)
    with tempfile.TemporaryDirectory(prefix="parplan-bridge-") as scratch:
        run_script = setup(args.bridge, Path(scratch))
        from megatron.bridge.package_info import __version__

        out.write(json.dumps({"ready": True, "version": __version__, "commit": _commit(args.bridge),
                              "megatron_lm_commit": _commit(args.bridge / "3rdparty" / "Megatron-LM"),
                              "stubs": list(STUBS) + ["transformer_engine.pytorch.optimizers (for "
                                                      "megatron/core/optimizer/optimizer_config.py)"],
                              "environment_overrides": ENVIRONMENT_OVERRIDES}) + "\n")
        for line in sys.stdin:
            if line.strip():
                out.write(json.dumps(run_one(run_script, json.loads(line), Path(scratch)), default=str) + "\n")


if __name__ == "__main__":
    main()
