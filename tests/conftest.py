"""Shared fixtures and hypothesis strategies of the solver tests: the small random specs every oracle test draws
(:func:`small_specs`), the assumption variants they carry, and a fixture that skips explanations. The checks
they share are in ``solver_checks.py``, the brute forces in ``brute_force.py``; the gRPC service tests' module
server and channel (:func:`server`, :func:`channel`); the package folders of this checkout
(:func:`package_folders`, read from pyproject.toml); a self-signed TLS certificate (:func:`self_signed_certificate`)."""

from __future__ import annotations

import contextlib
import functools
import gc
from pathlib import Path
import os
import time
from unittest import mock

import pytest
from hypothesis import settings
from hypothesis import strategies as st

from parplan.costmodel.spec.spec import ALL_SCHEDULES, CP_COMM_TYPES, Spec
from parplan.frameworks.loader import validate_spec

REPO = Path(__file__).resolve().parents[1]


def package_folders() -> dict[str, str]:
    """Each installed package (pyproject ``packages``, listed one by one) and its folder in this checkout: its own
    ``package-dir`` entry, else its parent's folder and its last name."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    tool = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders: dict[str, str] = {}
    for package in tool["packages"]:  # parents are listed before their subpackages
        parent, _, last = package.rpartition(".")
        folders[package] = tool["package-dir"].get(package) or f"{folders[parent]}/{last}"
    return folders
# The test profile: "default" (what `python -m pytest -q` and CI run, under the 10-minute goal) or "thorough"
# (PARPLAN_TEST_PROFILE=thorough: the oracle / brute-force agreement tests on their full example counts and spaces,
# run by nothing timed; docs/testing.md). A hypothesis profile of the same name: tests without their own
# max_examples draw 100 examples by default and 500 under "thorough".
settings.register_profile("thorough", max_examples=500)
settings.load_profile(os.environ.get("PARPLAN_TEST_PROFILE", "default"))


# The garbage collector's thresholds for the test process (CPython's default is (700, 10, 10)): the suite builds
# hundreds of thousands of long-lived objects (solver tables, hypothesis strategies, parsed specs), and with the
# defaults a full collection ran every ~18 middle-generation passes, ~7 % of the suite's CPU time rescanning objects
# that stay (docs/testing.md, "The suite's figures"). Larger thresholds collect the same garbage less often; the
# tests' answers do not depend on when a collection runs (but for the in-process gRPC server's: :func:`server` runs
# under the defaults), and the timed claims collect before their calls anyway (heap_of_a_fresh_process). Processes
# the tests start keep Python's defaults.
GC_THRESHOLDS = (10_000, 20, 100)
gc.set_threshold(*GC_THRESHOLDS)


# The suite runs on a worker per core (pyproject's addopts: `-n auto --dist loadfile`, pytest-xdist), at most
# MAX_WORKERS: each worker holds the suite's long-lived objects (up to ~2 GiB at its peak), so a many-core machine
# does not start one per core.
MAX_WORKERS = 4


def pytest_xdist_auto_num_workers(config) -> int:
    """``-n auto``: the cores this process may run on, at most :data:`MAX_WORKERS`."""
    return max(1, min(MAX_WORKERS, len(os.sched_getaffinity(0))))


def sized(default, thorough):
    """``thorough`` under the thorough test profile, else ``default``: an example count or a space size of a test
    that checks the same property either way (the default one still fails on a wrong answer)."""
    return thorough if settings.get_current_profile_name() == "thorough" else default


@contextlib.contextmanager
def heap_of_a_fresh_process():
    """The objects the suite has made so far moved out of the garbage collector's sight (``gc.freeze``) while a
    timed call runs: late in the suite the pytest process holds ~1.4 GiB of long-lived objects, and each full
    collection the call's own allocations trigger would rescan them (seconds of a 2 s call's CPU time that a fresh
    process, the claim's setting, does not spend). Unfrozen after."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


@pytest.fixture(scope="module")
def fresh_heap():
    """The suite's objects out of the collector's sight for a whole module of timed calls (``pytestmark =
    usefixtures("fresh_heap")``), as :func:`heap_of_a_fresh_process` but without its collection first: a full
    collection of the late suite's heap costs ~1 s, once per module instead of per call; what is garbage at the freeze
    waits for the module's end (unfreeze) to be collected."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def load_stretch(most: float = 4.0) -> float:
    """How many times slower than on a quiet machine CPU-bound work runs now: the wall time over this process's CPU
    time of a 0.1 s busy loop (1.0 when the process has a core to itself; ~4 with 8 runnable processes on 2 cores),
    at most ``most``. The time-limited tests scale their limits and slacks by it, so that under load they grant the
    same CPU time as on a quiet machine (where it changes nothing)."""
    wall0, cpu0 = time.perf_counter(), time.process_time()
    while time.perf_counter() - wall0 < 0.1:
        pass
    cpu_s = time.process_time() - cpu0
    return min(most, max(1.0, (time.perf_counter() - wall0) / max(cpu_s, 1e-3)))


SCHEDULE_VALUES = tuple(s.value for s in ALL_SCHEDULES)  # what a spec file says: the strings
GPU_NAMES = ["A100-SXM-80GB", "A100-SXM-40GB", "H100-SXM-80GB", "H800", "H200-SXM-141GB", "B200", "MI300X"]


def divisors_of(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


_PERCENT = st.integers(0, 99)


@functools.lru_cache(maxsize=None)
def _subsets_of(values: tuple, types: tuple) -> st.SearchStrategy:
    """The non-empty subsets of ``values``, one strategy per tuple (``types`` in the key: (0, 1) == (False, True)):
    building it anew for each draw cost ~1 ms, as much as the draw (the same strategy, so the same draws: the
    derandomized examples are unchanged)."""
    return st.sets(st.sampled_from(values), min_size=1, max_size=len(values))


def _maybe_subset(draw, values: list, p: float):
    """None (no restriction) with probability 1 - p, else a non-empty subset of ``values``."""
    if not values or draw(_PERCENT) >= 100 * p:
        return None
    return sorted(draw(_subsets_of(tuple(values), tuple(map(type, values)))), key=values.index)


OPTIMIZER_STATES = ["fp32/fp32/fp32", "fp32/bf16/bf16", "fp16/fp8/fp8", "fp32/fp32/fp8"]


@st.composite
def small_specs(draw, tiny: bool = False, memory_dims: bool = False, activation_offload: bool = False) -> Spec:
    """Dense (and ~25 % MoE) Llama-like models on 1-16 GPUs with random ``search:`` restrictions.

    ``tiny``: at most 6 layers and 8 GPUs, one micro-batch size and one or two schedules (for the brute force).
    ``memory_dims``: always draw the memory-side dimensions (HSDP replicas, optimizer dtypes, offload shares);
    otherwise each is drawn in about a quarter of the specs. ``activation_offload``: draw
    ``search.activation_offload_layers`` (a subset of {0, 1, L - 1}; otherwise unset, today's space).
    """
    L = draw(st.integers(2, 6 if tiny else 12))
    hidden = draw(st.sampled_from([256, 512, 1024]))
    heads = draw(st.sampled_from([4, 8, 8, 16]))
    kv = draw(st.sampled_from([k for k in (2, 4, 8, 16) if heads % k == 0] + [heads, 1]))
    model = dict(name="random", num_layers=L, hidden_size=hidden,
                 ffn_hidden_size=draw(st.sampled_from([hidden, 2 * hidden, 4 * hidden, 3 * hidden + 256])),
                 num_attention_heads=heads, num_kv_heads=kv, vocab_size=draw(st.integers(1000, 50000)),
                 gated_mlp=draw(st.booleans()), tie_embeddings=draw(st.booleans()))
    moe = draw(st.integers(0, 3)) == 0
    if moe:
        model["moe"] = dict(num_experts=draw(st.sampled_from([4, 8])), top_k=draw(st.integers(1, 2)),
                            expert_ffn_hidden_size=draw(st.sampled_from([hidden // 2, hidden, 2 * hidden])),
                            num_shared_experts=draw(st.integers(0, 1)),
                            first_dense_layers=draw(st.integers(0, min(1, L - 1))),
                            max_nodes_per_token=draw(st.sampled_from([None, None, 1, 2])),
                            dispatcher=draw(st.sampled_from(["alltoall", "alltoall", "flex", "allgather"])),
                            capacity_factor=draw(st.sampled_from([None, None, None, 1.0, 1.25])))
    if draw(st.integers(0, 4)) == 0:  # multi-head latent attention (issue 10)
        model["mla"] = dict(q_lora_rank=draw(st.sampled_from([0, hidden // 4])), kv_lora_rank=hidden // 8,
                            qk_nope_head_dim=draw(st.sampled_from([16, 32])),
                            qk_rope_head_dim=draw(st.sampled_from([0, 16])), v_head_dim=draw(st.sampled_from([16, 32])))
    if draw(st.integers(0, 4)) == 0:  # a multi-token-prediction module on the last stage
        model["num_mtp_layers"] = 1
    gpus = draw(st.sampled_from([1, 2, 4, 4, 8, 8] if tiny else [1, 2, 4, 4, 8, 8, 16, 16]))
    cluster = dict(gpu=draw(st.sampled_from(GPU_NAMES)), num_gpus=gpus,
                   gpus_per_node=draw(st.sampled_from([8, 8, 8, 4])))
    if draw(st.integers(0, 2)) == 0:  # small memory: recompute and infeasibility happen
        cluster["memory_gib"] = draw(st.integers(22, 160)) / 10
    search: dict = {}
    for f, p in (("tp", 0.3), ("cp", 0.25), ("pp", 0.3)):
        if (v := _maybe_subset(draw, divisors_of(gpus), p)) is not None:
            search[f] = v
    if tiny:
        search["micro_batch_size"] = [draw(st.sampled_from([1, 1, 2]))]
        k = draw(st.integers(1, 2))
        search["schedules"] = sorted(draw(st.sets(st.sampled_from(SCHEDULE_VALUES), min_size=k, max_size=k)),
                                     key=SCHEDULE_VALUES.index)
    else:
        if (v := _maybe_subset(draw, [1, 2, 4], 0.4)) is not None:
            search["micro_batch_size"] = v
        if (v := _maybe_subset(draw, list(SCHEDULE_VALUES), 0.5)) is not None:
            search["schedules"] = v
    if (v := _maybe_subset(draw, [1, 2, 3], 0.2)) is not None:
        search["vpp"] = v
    if moe:
        if (v := _maybe_subset(draw, [1, 2, 4, 8], 0.3)) is not None:
            search["ep"] = v
        if (v := _maybe_subset(draw, [1, 2], 0.2)) is not None:
            search["etp"] = v
        # the EP communication choices (costmodel/moe/moe_comm.py); FP8 dispatch needs FP8 training
        for name in ("moe_fp8_dispatch", "moe_a2a_overlap"):
            if (v := _maybe_subset(draw, [False, True], 0.4)) is not None:
                search[name] = v
    if (v := _maybe_subset(draw, [0, 1, 2, 3], 0.5)) is not None:
        search["zero_stages"] = v
    if (v := _maybe_subset(draw, ["none", "selective", "full"], 0.6)) is not None:
        search["recompute"] = v
    if (v := _maybe_subset(draw, [True, False], 0.2)) is not None:
        search["sequence_parallel"] = v
    if (v := _maybe_subset(draw, list(CP_COMM_TYPES), 0.35)) is not None:  # CP comm types (issue 10)
        search["cp_comm_types"] = v
    search["uneven_stages"] = draw(st.booleans())
    if search["uneven_stages"] and draw(st.integers(0, 3)) == 0:
        search["stage_split"] = "first_last"
    search["uniform_recompute"] = draw(st.booleans())
    p_mem = 1.0 if memory_dims else 0.25
    if (v := _maybe_subset(draw, [1, 2, 4], p_mem)) is not None:
        search["zero_replicas"] = v
    if (v := _maybe_subset(draw, OPTIMIZER_STATES, p_mem)) is not None:
        search["optimizer_states"] = v
    if (v := _maybe_subset(draw, [0.0, 0.5, 1.0], p_mem)) is not None:
        search["optimizer_offload_fractions"] = v
    # activation offload: drawn only when asked (an extra draw would shift every derandomized example of the
    # other oracles, whose tallies count what their examples reach)
    if activation_offload and (v := _maybe_subset(draw, sorted({0, 1, L - 1}), 1.0)) is not None:
        search["activation_offload_layers"] = v
    fp8 = moe and cluster["gpu"] not in ("A100-SXM-80GB", "A100-SXM-40GB") and draw(st.integers(0, 2)) == 0
    return validate_spec(dict(
        framework="any",  # the research space (issue 24.2: omitted is megatron-core)
        model=model,
        training=dict(seq_len=draw(st.sampled_from([512, 1024, 2048, 4096])),
                      global_batch_size=draw(st.sampled_from([2, 4, 8, 12, 16, 24, 32, 48, 64])),
                      precision="fp8" if fp8 else "bf16"),
        cluster=cluster, search=search, assumptions=assumption_overrides(draw)))


def assumption_overrides(draw) -> dict:
    preset = draw(st.sampled_from(["default", "textbook"]))
    out = dict(preset=preset)
    if preset == "default" and draw(st.integers(0, 3)) == 0:  # torchtitan's per-op SAC / DeepSeek-V3's selective
        out["selective_recompute_policy"] = draw(st.sampled_from(["alternate_matmuls", "deepseek_v3"]))
    if preset == "default" and draw(st.integers(0, 3)) == 0:  # SMs reserved for the all-to-all (DeepSeek-V3)
        out["ep_comm_sm_fraction"] = 0.15
    if preset == "default" and draw(st.integers(0, 3)) == 0:  # ZeRO-2/3 re-gather every micro-batch under PP
        out["zero_unsharded_across_microbatches_with_pp"] = False
    if preset == "default" and draw(st.integers(0, 3)) == 0:  # torchtitan's runtime: DTensor SP, torch pipelining
        out["sequence_parallel_saves_gathered_inputs"] = True
        out["pipeline_runtime"] = "torch"
    if draw(st.integers(0, 3)) == 0:  # optimizer offload: copies overlapping the CPU step, a slow host link
        out["optimizer_offload_overlap"] = True
        out["host_bandwidth_gbps"] = draw(st.sampled_from([4.0, 64.0]))
    return out


def spec_variant(spec: Spec, **changes) -> Spec | None:
    """``spec`` with dotted-path ``changes`` (``"training.global_batch_size": 64``), validated as a request's would be;
    None where the result is no spec (the warm cache's and the enumeration memo's property tests draw such variants)."""
    from parplan.costmodel.errors import ParplanError

    data = spec.model_dump(mode="json", exclude_none=True)
    for path, value in changes.items():
        section, name = path.split(".")
        data.setdefault(section, {})[name] = value
    try:
        return validate_spec(data)
    except (ParplanError, ValueError):  # (pydantic's ValidationError is a ValueError)
        return None


def spec_repr(spec: Spec) -> str:
    return spec.model_dump_json(exclude_defaults=True)


@pytest.fixture
def no_explanations():
    """The explanation of an infeasible request is tested in test_explain.py (and on the tiny specs of
    test_oracle.py); here it would only double the run time (it solves every relaxation). Function scope: set up
    once for all examples of the test that uses it, and undone before the next test.

    Patched where the planner looks it up (solver/planner.py imports the function by name; patching
    ``parplan.solver.explain.explain`` left the planner's binding alone, so explanations were still computed).
    ``patch.object`` raises if the planner stops holding that name, so the fixture cannot go stale silently."""
    from parplan.solver import planner

    with mock.patch.object(planner, "explain", lambda *a, **k: None):
        yield


# ------------------------------------------------------------------------------------ the gRPC service's tests


@pytest.fixture(scope="module")
def server():
    """A server on a free port (two solver slots) for one test module, drained after it."""
    from parplan.server.app import ServeOptions, start  # grpcio only where a service test asks for it

    running = start(ServeOptions(port=0, max_concurrent=2))
    try:
        yield running
    finally:
        running.drain(0)


@pytest.fixture
def fresh_warm_cache():
    """The solver's warm cache on and empty for the test, emptied after it (solver/warm_cache.py)."""
    from parplan.solver.warm_cache import WARM

    WARM.enable()
    WARM.clear()
    yield WARM
    WARM.clear()


@pytest.fixture(scope="module")
def channel(server):
    """An insecure channel to :func:`server`."""
    import grpc

    with grpc.insecure_channel(f"127.0.0.1:{server.port}") as ch:
        yield ch


def self_signed_certificate(tmp_path: Path) -> tuple[Path, Path]:
    """(certificate, key) PEM files of a self-signed localhost / 127.0.0.1 certificate made in ``tmp_path``."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                        x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = tmp_path / "tls.crt", tmp_path / "tls.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """Before each test and its fixtures (a module-scoped one included), the process's default memory budget
    (solver/deadline.py) is set to this test process's RSS plus the default: the room a fresh server process has
    beside its interpreter. The pytest process's RSS grows with every test before (over 1.5 GiB after the whole
    suite in CI, where the fixed default left no room for any solve: OverBudget, UNKNOWN). A test that changes
    the budget has the next test start from this again. Tests of the budget itself give their calls explicit
    budgets or patch ``rss_bytes``."""
    from parplan.solver import deadline

    deadline._process_default_mib = deadline.rss_bytes() // deadline.MIB + deadline.DEFAULT_MEMORY_BUDGET_MIB


def budget_beside_this_process(monkeypatch, room_mib: int) -> None:
    """The process's memory budget (solver/deadline.py) set to this test process's RSS plus ``room_mib``: an
    in-process server shares the pytest process, whose RSS grows with every test before (a fixed budget left no
    room for a sweep worker after the whole suite: RESOURCE_EXHAUSTED)."""
    from parplan.solver import deadline

    monkeypatch.setattr(deadline, "_process_default_mib", deadline.rss_bytes() // deadline.MIB + room_mib)
