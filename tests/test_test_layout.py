"""The tests' own layout (issue 37 item 5): each test file sits in the folder mirroring the package (or top folder)
of what it covers and is named after the module it covers (``tests/solver/pools/test_cpsat.py`` covers
``solver/pools/cpsat.py``; a sub-package counts as a module: ``tests/client/test_ui.py`` covers ``client/ui/``).
The files named after a concept that no one module holds are listed below, each with the reason. Every test folder
is a package (``__init__.py``), so two folders may hold files of the same name."""
from __future__ import annotations

from tests.conftest import REPO

TESTS = REPO / "tests"

# tests/ root: what covers the whole checkout
ROOT_TESTS = {
    "test_layers": "the import-linter floors between all packages (pyproject [tool.importlinter])",
    "test_packaging": "the installed wheel: every package and its data",
    "test_test_layout": "this file: the layout of tests/ itself",
    "test_package_sizes": "the size rule over every package folder (modules, functions)",
    "test_docs": "README.md and docs/*.md: every command in them run or checked",
    "test_probe": "parplan.probe, the facade package's own module (src/parplan/probe.py)",
}
# test files named after a concept, by folder: the concept spans modules (or has no module of its name)
CONCEPTS = {
    "benchmarks": {
        "test_benchmarks_smoke": "a smoke run of several benchmark scripts",
        "test_gpu_names_and_mapping": "GPU names (costmodel/spec/hardware.py) and benchmarks/runs.py's mapping rules",
        "test_mlperf_precision": "the MLPerf runs' precision across benchmarks/mlperf.py, fit.py and the cost model",
        "test_uneven_example": "a README claim, through the planner and an example spec",
    },
    "client": {"test_cli_startup": "the CLI's cold start: what every command imports"},
    "costmodel": {
        "test_costmodel_house": "the house rules over all of costmodel/ and frameworks/",
        "test_fidelity": "the cost model against the published runs (benchmarks/fit.py, the fitted calibration)",
        "test_seed_formulas": "the seed articles' numbers, through several rooms",
        "test_seed_table": "seed 003's table, through the evaluator",
    },
    "costmodel/communication": {"test_collective_busbw": "NVLink bus bandwidths (spec/hardware.py) in the "
                                                         "collectives (communication/collectives.py)"},
    "costmodel/evaluation": {
        "test_evaluate_mfu_ceiling": "every preset x GPU against the published MFU ceilings",
        "test_fp8_bf16_parts": "the BF16 parts of an FP8 run, across architecture, efficiency and choice costs",
    },
    "costmodel/memory": {"test_megatron_memory": "the memory terms against Megatron-LM's theoretical formula"},
    "costmodel/schedules": {
        "test_uneven_bubble": "the bubble of unequal stages, against a pipeline simulation",
        "test_zb_weight_grad": "ZB-H1's bubble and its weight-gradient time, across bubble.py and layer costs",
    },
    "deploy": {
        "test_deploy_hardening": "the manifests' hardening (deploy/ holds no Python module)",
        "test_service_deploy": "the manifests against the server's flags (deploy/ holds no Python module)",
    },
    "frameworks": {
        "test_dispatcher_export": "the MoE dispatcher through the Megatron and torchtitan exporters and importer",
        "test_export_roundtrip": "export then import, across the exporters and frameworks/import_plan.py",
        "test_export_rules": "the exports against their frameworks' own rules",
        "test_framework_parsers": "the exports through the frameworks' own parsers",
        "test_megatron_lm_profile": "one profile's facts, across profiles.py, profile_data.py and the planner",
    },
    "library": {
        "test_deepseek_v3_preset": "one preset and its example, through every door",
        "test_inputs": "argument checks across the library's entry points",
        "test_pools_api": "plans on pools through the library, the CLI and the service",
        "test_spec_fuzz": "any input text through spec loading, evaluation and the CLI",
    },
    "server": {
        "test_service_docs": "docs/service.md's examples against a server",
        "test_service_drain": "the drain, across app.py, service.py and call_registry.py",
        "test_service_fuzz": "random requests on every RPC",
        "test_service_hardening": "hostile requests on every RPC",
        "test_service_health": "the health port and strict request parsing, across app.py and requests.py",
        "test_service_load": "benchmarks/load.py's smoke against a server",
    },
    "solver": {
        "test_bounded_calls": "memory and time bounds of a call, across the solver",
        "test_cpsat_dimensions": "CP-SAT against the oracles on every search dimension",
        "test_determinism": "byte-identical output of --deterministic runs",
        "test_dualpipe_split": "DualPipe's rank split: its term and CP-SAT = oracle = brute force",
        "test_layer_bound": "the layer bound between the search and bounds.py",
        "test_solver_controls": "streaming, cancel and time limits across the planner",
        "test_solver_house": "the house rules over all of solver/",
        "test_solver_scale": "large specs through both methods",
        "test_solver_seed_table": "seed 003's table, through the solver",
    },
}


def _test_files():
    return sorted(p for p in TESTS.rglob("test_*.py") if "data" not in p.relative_to(TESTS).parts)


def test_each_test_file_is_in_its_packages_folder_and_named_after_its_module() -> None:
    misplaced = []
    for path in _test_files():
        folder = path.parent.relative_to(TESTS).as_posix()
        if folder == ".":
            if path.stem not in ROOT_TESTS:
                misplaced.append(f"{path.name}: at tests/ root; move it to the folder of the package it covers")
            continue
        if not (REPO / folder).is_dir():
            misplaced.append(f"{folder}/{path.name}: no folder {folder}/ in the repository to mirror")
            continue
        covered = path.stem.removeprefix("test_")
        if (REPO / folder / f"{covered}.py").is_file() or (REPO / folder / covered / "__init__.py").is_file():
            continue
        if path.stem not in CONCEPTS.get(folder, {}):
            misplaced.append(f"{folder}/{path.name}: no module {folder}/{covered}.py; rename it after the module "
                             f"it covers, or list it in CONCEPTS with the reason")
    assert not misplaced, "\n".join(misplaced)


def test_every_listed_exception_is_a_test_file_that_needs_it() -> None:
    stale = [f"{folder}/{name}.py" for folder, names in CONCEPTS.items() for name in names
             if not (TESTS / folder / f"{name}.py").is_file()
             or (REPO / folder / f"{name.removeprefix('test_')}.py").is_file()]
    stale += [f"{name}.py" for name in ROOT_TESTS if not (TESTS / f"{name}.py").is_file()]
    assert not stale, f"listed as exceptions but missing or named after a module: {stale}"


def test_every_test_folder_is_a_package() -> None:
    folders = {p.parent for p in _test_files()}
    missing = [f.relative_to(REPO).as_posix() for f in sorted(folders) if not (f / "__init__.py").is_file()]
    assert not missing, f"test folders without __init__.py (pytest would import two test_x.py as one): {missing}"


def test_the_thorough_profiles_list_in_the_docs_names_every_file_that_sizes_its_examples() -> None:
    """docs/testing.md lists the test files whose example counts or spaces grow under PARPLAN_TEST_PROFILE=thorough:
    exactly the files that call ``sized(``, each named by its file name."""
    import re

    sizing = {p.name for p in TESTS.rglob("test_*.py") if "sized(" in p.read_text()}
    section = (REPO / "docs" / "testing.md").read_text().split("## The thorough profile", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"(test_\w+\.py)", section.split("checks this list", 1)[0]))
    assert sizing == listed, (sorted(sizing - listed), sorted(listed - sizing))
