"""model.moe.dispatcher / capacity_factor written by the Megatron and torchtitan exporters and read back by the
Megatron importer (issue 19 item 3; Megatron-LM core_v0.15.3 arguments.py:3131-3142: --moe-token-dispatcher-type
allgather|alltoall|flex (default allgather), --moe-enable-deepep, --moe-expert-capacity-factor; torchtitan@b5bcd76
torchtitan/models/common/config_utils.py:370-377 expert_parallel_comm_backend standard|deepep|hybridep)."""

from __future__ import annotations

import pytest

from tests.export_cases import load_case
from parplan.frameworks.export import export_plan
from parplan.frameworks.import_plan import spec_from_megatron


def _moe_case(**moe):
    spec, plan = load_case("mixtral-8x7b-ep")
    model = spec.model.model_copy(update={"moe": spec.model.moe.model_copy(update=moe)})
    return spec.model_copy(update={"model": model}), plan


@pytest.mark.parametrize("moe", [dict(dispatcher="flex", capacity_factor=1.25), dict(dispatcher="alltoall"),
                                 dict(dispatcher="allgather")])
def test_megatron_dispatcher_round_trip(moe):
    spec, plan = _moe_case(**moe)
    text = export_plan(spec, plan, "megatron").text
    assert f"--moe-token-dispatcher-type {moe['dispatcher']}" in text
    assert ("--moe-enable-deepep" in text) == (moe["dispatcher"] == "flex")
    back = spec_from_megatron(text, spec).model.moe
    assert back.dispatcher == moe["dispatcher"] and back.capacity_factor == moe.get("capacity_factor")


@pytest.mark.parametrize("backend, sms", [("deepep", 24), ("hybridep", 32), ("hybridep", None)])
def test_megatron_flex_backend_and_sms_round_trip(backend, sms):
    """HybridEP goes out as --moe-flex-dispatcher-backend hybridep, never beside --moe-enable-deepep (Megatron refuses
    both: "Only one backend"); the dispatcher's SMs as the backend's own flag; all read back, and the export passes
    the argument rules of tests/frameworks/test_export_megatron.py."""
    from tests.frameworks.test_export_megatron import _check
    spec, plan = _moe_case(dispatcher="flex", dispatcher_backend=backend, dispatcher_sms=sms)
    text = export_plan(spec, plan, "megatron").text
    assert ("--moe-enable-deepep" in text) == (backend == "deepep")
    assert ("--moe-flex-dispatcher-backend hybridep" in text) == (backend == "hybridep")
    flag = "--moe-hybridep-num-sms" if backend == "hybridep" else "--moe-deepep-num-sms"
    assert (f"{flag} {sms}" in text) == (sms is not None)
    back = spec_from_megatron(text, spec).model.moe
    assert (back.dispatcher, back.dispatcher_backend, back.dispatcher_sms) == ("flex", backend, sms)
    assert _check(spec, plan) == []


def test_megatron_import_without_the_flag_is_megatrons_allgather():
    spec, plan = _moe_case()
    text = export_plan(spec, plan, "megatron").text.replace("--moe-token-dispatcher-type alltoall", "")
    assert spec_from_megatron(text, spec).model.moe.dispatcher == "allgather"


def test_torchtitan_comm_backend():
    spec, plan = _moe_case(dispatcher="flex", dispatcher_backend="hybridep")
    assert 'expert_parallel_comm_backend = "hybridep"' in export_plan(spec, plan, "torchtitan").text
    spec, plan = _moe_case(dispatcher="alltoall")
    assert "expert_parallel_comm_backend" not in export_plan(spec, plan, "torchtitan").text


def test_dispatcher_sms_where_no_verified_key_is_a_warning():
    """torchtitan and Megatron-Bridge get the dispatcher's SMs as a warning naming what to set, not a silent drop."""
    spec, plan = _moe_case(dispatcher="flex", dispatcher_backend="hybridep", dispatcher_sms=32)
    titan = export_plan(spec, plan, "torchtitan")
    assert any("dispatcher_sms 32" in w for w in titan.warnings)
    bridge = export_plan(spec, plan, "megatron-bridge")
    assert any("model.moe_hybridep_num_sms = 32" in w for w in bridge.warnings)
