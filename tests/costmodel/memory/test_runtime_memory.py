"""The memory outside the tensor ledger (costmodel/memory/runtime_memory.py, issue 20 item 2): each term from its knobs, the
usable memory and the stage ledger that carry them, and the answer's lines."""

from __future__ import annotations

import pytest

from parplan import evaluate
from parplan.costmodel.spec.assumptions import resolve_assumptions
from parplan.costmodel.spec.degrees import Choice
from parplan.costmodel.spec.hardware import GIB, lookup_gpu
from parplan.costmodel.memory.runtime_memory import (MIB, communicators, memory_for_usable, nccl_buffer_bytes,
                                              runtime_memory, userbuffer_bytes)
from parplan.costmodel.spec.spec import PlanSpec, Spec
from parplan.frameworks.loader import validate_spec

H100 = lookup_gpu("H100-SXM-80GB")
A = resolve_assumptions(None)
LLAMA70 = dict(name="llama3-70b", num_layers=80, hidden_size=8192, ffn_hidden_size=28672, num_attention_heads=64,
               num_kv_heads=8, vocab_size=128256, gated_mlp=True, tie_embeddings=False)


def _spec(**kw) -> Spec:
    # the ledger's own usable memory: no memory band margin (parplan.evaluate judges fit as optimize does)
    data = dict(model=LLAMA70, training=dict(seq_len=8192, global_batch_size=512, precision="bf16"),
                cluster=dict(gpu="H100-SXM-80GB", num_gpus=64, gpus_per_node=8), framework="any",
                search=dict(memory_band=False))
    data.update(kw)
    return validate_spec(data)


def test_communicators_of_a_plan():
    c = Choice(tp=8, cp=2, pp=4, dp=2, ep=1)
    assert [(k.name, k.size, k.kind) for k in communicators(c)] == [
        ("tp", 8, "ring"), ("cp", 2, "p2p"), ("dp", 4, "ring"), ("pp", 4, "p2p")]
    moe = Choice(tp=1, cp=1, pp=1, dp=16, ep=8, zero_replicas=2)
    assert [k.name for k in communicators(moe)] == ["dp", "dp_replicas", "ep", "expert_dp"]
    assert communicators(Choice(tp=1, cp=1, pp=1, dp=1)) == []


def test_nccl_buffers_per_communicator():
    # ring: NCCL_BUFFSIZE 4 MiB x 16 channels x (send + recv) = 128 MiB; pipeline p2p: 2 neighbours x 2 channels
    # x (send + recv) x 4 MiB = 32 MiB; all-to-all over EP 8: 7 peers x 2 x 2 x 4 MiB = 112 MiB
    assert nccl_buffer_bytes(Choice(tp=8, cp=1, pp=1, dp=1), A) == 128 * MIB
    assert nccl_buffer_bytes(Choice(tp=1, cp=1, pp=4, dp=1), A) == 32 * MIB
    assert nccl_buffer_bytes(Choice(tp=1, cp=1, pp=1, dp=8, ep=8), A) == 128 * MIB + 112 * MIB
    more = resolve_assumptions({"nccl_buffsize_mib": 8.0, "nccl_nvls_mib": 256.0})
    assert nccl_buffer_bytes(Choice(tp=8, cp=1, pp=1, dp=1), more) == 256 * MIB + 256 * MIB  # NVLS on TP


def test_userbuffers_only_with_tp_overlap():
    c = Choice(tp=8, cp=2, pp=1, dp=4, micro_batch_size=1, sequence_parallel=True)
    per = 8192 * 1 // 2 * 8192  # (seq/cp · mbs) x hidden elements
    assert userbuffer_bytes(c, 8192, 8192, "bf16", A) == 10 * 2 * per
    assert userbuffer_bytes(c, 8192, 8192, "fp8", A) == (6 * 1 + 4 * 2) * per  # the all-gather ones in FP8
    assert userbuffer_bytes(c, 8192, 8192, "bf16", resolve_assumptions({"tp_comm_overlap": 0.0})) == 0
    assert userbuffer_bytes(c.but(tp=1), 8192, 8192, "bf16", A) == 0


def test_te_workspaces_by_generation():
    c = Choice(tp=1, cp=1, pp=1, dp=8)
    assert runtime_memory(c, 8192, 8192, "bf16", H100, A).te_workspace_bytes == 5 * 32 * MIB
    assert runtime_memory(c, 8192, 8192, "bf16", lookup_gpu("A100"), A).te_workspace_bytes == 5 * 4 * MIB


def test_usable_memory_and_its_inverse():
    spec = _spec(plan=dict(tp=8, pp=2, dp=4, vpp=2, schedule="interleaved"))
    ev = evaluate(spec, spec.plan)
    m = ev.metrics
    assert m.usable_memory_gib == pytest.approx(H100.memory_gib * 0.95 - 0.5)
    assert memory_for_usable(m.usable_memory_gib, A) == pytest.approx(H100.memory_gib)
    lines = m.memory_outside_ledger_gib
    assert set(lines) == {"cuda_context", "allocator_fragmentation", "nccl_buffers", "userbuffers", "te_workspaces"}
    assert lines["cuda_context"] + lines["allocator_fragmentation"] == pytest.approx(H100.memory_gib - m.usable_memory_gib)
    runtime = lines["nccl_buffers"] + lines["userbuffers"] + lines["te_workspaces"]
    for s in ev.stages:  # the plan's terms are a line of every stage, counted in its total
        assert s.runtime_buffers_gib == pytest.approx(runtime)
    # a typical plan keeps about the single reserve it replaces (5 % + 2 GiB = 5.98 GiB on H100)
    assert sum(lines.values()) == pytest.approx(0.05 * H100.memory_gib + 2.0, abs=0.5)
    expandable = _spec(plan=spec.plan, assumptions={"expandable_segments": True})
    assert evaluate(expandable, spec.plan).metrics.usable_memory_gib == pytest.approx(H100.memory_gib * 0.98 - 0.5)


def test_textbook_preset_keeps_seed_003s_usable_share_and_no_buffers():
    spec = _spec(plan=dict(tp=8, pp=2, dp=4), assumptions={"preset": "textbook"})
    ev = evaluate(spec, PlanSpec(tp=8, pp=2, dp=4))
    assert ev.metrics.usable_memory_gib == pytest.approx(80e9 * 0.9 / GIB)
    assert all(s.runtime_buffers_gib == 0 for s in ev.stages)
