"""Links shared by concurrent collectives: what two transfers cost together on one NVLink or NIC (issue 38 item 1,
issue 39 item 4).

Every collective of the cost model is priced at its link's bandwidth as if it had the link to itself. Two that run
at the same time on the same link share it. DeepSeek-V3 (arXiv 2412.19437) §3.2.2 is the case in point: its
all-to-all crosses IB (50 GB/s on H800) and DeepEP forwards every token over NVLink (160 GB/s) inside the target
node, both at once, so the NVLink tier is busy for a share ``u = t_nv / max(t_nv, t_net)`` of the all-to-all
(``Comm.all_to_all_nvlink_busy``); the report trains without TP ("without using costly Tensor Parallelism") and
keeps the NVLink traffic within what its 20 SMs drive. Collectives of different communicators run at once on
their own streams (NCCL user guide, "Using multiple NCCL communicators concurrently", docs.nvidia.com/deeplearning/
nccl/user-guide/docs/usage/communicators.html) and nothing reserves a link's bandwidth for one of them; the model
takes the link as shared max-min fairly between two flows (an assumption, the simplest that conserves the link's
bytes):

* a transfer beside a stream that alone would use ``u`` of the link gets ``1 - u`` of it, at least half
  (:func:`shared_rate`); the other stream, paced by its own slower tier, takes only what it needs;
* so a collective of ``t`` seconds alone, a share ``s`` of which runs beside that stream, takes
  ``t·(1 + s·(1/r - 1))`` (:func:`stretched_s`), r its rate; the stream loses ``s·t·(u - (1 - r))/r`` of its own
  time on the link (:func:`displaced_s`: zero while it is paced elsewhere, u <= 1/2; the sum of the two at u = 1,
  one link carrying both).

Which collectives run concurrently is the schedule's (costmodel/evaluation/moe_layer.py): the EP all-to-all beside the
compute (and so beside its TP collectives) only where it is hidden: DualPipe / DualPipeV and Megatron-Core's
combined 1F1B pair it with another chunk's compute (paired_overlap.py), ``ep_comm_overlap`` hides its share; a
schedule that runs it between computations shares nothing.
"""

from __future__ import annotations


def shared_rate(other_busy: float) -> float:
    """The share of a link a transfer gets beside a stream that alone keeps ``other_busy`` of it busy: 1 - u, at
    least 1/2 (max-min fair share of two flows; module docstring)."""
    return 1.0 - min(max(other_busy, 0.0), 0.5)


def stretched_s(alone_s: float, concurrent_share: float, other_busy: float) -> float:
    """A collective of ``alone_s`` seconds alone, ``concurrent_share`` of which runs beside a stream keeping
    ``other_busy`` of the link busy: t·(1 + s·(1/r - 1)), r = :func:`shared_rate`."""
    s = min(max(concurrent_share, 0.0), 1.0)
    return alone_s * (1.0 + s * (1.0 / shared_rate(other_busy) - 1.0))


def displaced_s(alone_s: float, concurrent_share: float, other_busy: float) -> float:
    """The link time the stream keeping ``other_busy`` of the link busy loses to the collective of
    :func:`stretched_s`: during the collective's stretched concurrent time s·t/r it gets 1 - r instead of u."""
    s = min(max(concurrent_share, 0.0), 1.0)
    r = shared_rate(other_busy)
    return max(0.0, s * alone_s * (other_busy - (1.0 - r)) / r)
