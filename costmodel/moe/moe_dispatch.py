"""Token dispatch of an MoE layer: how many times a token crosses the network under each dispatcher, and how much
more than the mean the busiest expert-parallel rank receives (issue 19 item 3).

**Dispatchers** (``model.moe.dispatcher``, Megatron-Core's names: NVIDIA/Megatron-LM@d98e8a64ddf34856e74b24714e3bedb2f5a39553
megatron/core/transformer/transformer_config.py:891 ``moe_token_dispatcher_type: 'allgather' | 'alltoall' | 'flex'``
and :898 ``moe_flex_dispatcher_backend: 'deepep' | 'hybridep' | 'ncclep'``):

* ``alltoall`` (a plain NCCL all-to-all, Megatron ``MoEAlltoAllTokenDispatcher``; DeepSpeed-MoE's ``_AllToAll`` in
  deepspeed/moe/sharded_moe.py; torchtitan's default ``expert_parallel_comm_backend: standard``): every routed copy
  travels to its expert's GPU, so a token crosses the network once per *remote expert*: k·(1 - L/G) copies with
  L of the G EP ranks in the sender's NVLink domain and uniform routing; node-limited routing changes where the
  copies go, not how many there are.
* ``flex`` with ``deepep`` or ``hybridep`` (deepseek-ai/DeepEP ``internode`` kernels; DeepSeek-V3 §3.2.2: "each
  token ... is first transmitted via IB to the GPUs with the same in-node index on its target nodes ... then
  forwarded via NVLink"): a token crosses the network once per *remote node* holding at least one of its k
  experts (:func:`expected_remote_nodes`) and fans out over NVLink inside each node.
* ``allgather`` (Megatron ``MoEAllGatherTokenDispatcher``): every rank all-gathers the EP group's tokens and
  reduce-scatters the expert outputs, whatever the routing: a ring all-gather of G x the rank's tokens
  (:func:`allgather_bytes_per_rank`), k-independent.

**Expected distinct nodes** (uniform routing, derivation): an EP group spans N nodes with E/N experts each; a token
picks k distinct experts uniformly among E. A given node holds none of them with probability C(E - E/N, k)/C(E, k)
(all k picks among the other nodes' experts), so it is reached with probability p(E, N, k) = 1 - C(E - E/N, k)/C(E, k)
and the expected number of distinct nodes is N·p. Node-limited routing (``max_nodes_per_token`` M, DeepSeek-V3
§3.2.2: 4) binds only when M < N: the token's experts then lie among the E·M/N experts of M chosen nodes, M·p(E·M/N,
M, k) nodes reached; M ≥ N is the unlimited case (the limit cannot bind). By symmetry each reached node is the
sender's own with probability 1/N, so the *remote* nodes are (1 - 1/N) of them. Uniform routing is the assumption:
DeepSeek-V3 selects the M nodes by affinity (the sum of each node's top scores), which makes every chosen node more
likely to hold an expert, so the node-limited figure is a lower bound of the real crossings (at most M(1 - 1/N)).

**Busiest receiver** (:func:`busiest_rank_load`): each EP rank receives the copies for its E/G experts; their
counts fluctuate around the mean, and the all-to-all and the expert GEMMs wait for the busiest of the G ranks. With
a per-rank load of relative spread σ, the expected maximum of G such loads is about 1 + σ·√(2 ln G) (the maximum
of G independent Gaussians grows as √(2 ln G), a standard extreme-value result; the EP ranks' loads are nearly independent when E ≫ G), so
the busiest-over-mean ratio grows as √(ln G): ``1 + (moe_load_imbalance - 1)·√(ln G / ln G_ref)`` with
``moe_load_imbalance`` the ratio at ``moe_load_imbalance_reference_ep`` G_ref ranks; 1 at G = 1 (one rank holds
every expert: no rank waits for another). A capacity factor C (``model.moe.capacity_factor``; Megatron
``--moe-expert-capacity-factor``, transformer_config.py:917; GShard/Switch token dropping) drops what exceeds C x
the mean per expert, so the busiest load is at most C.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from parplan.costmodel.spec.assumptions import Assumptions
    from parplan.costmodel.spec.spec import MoESpec

DISPATCHERS = ("alltoall", "allgather", "flex")
FLEX_BACKENDS = ("deepep", "hybridep")


def node_hit_probability(num_experts: float, nodes: int, top_k: int) -> float:
    """p = 1 - C(E - E/N, k)/C(E, k): a given node of N (E/N experts each) holds at least one of k distinct experts
    picked uniformly among E (module docstring). The ratio is computed as the product Π_{i<k} (E - E/N - i)/(E - i)."""
    if nodes <= 1:
        return 1.0
    per_node = num_experts / nodes
    k = min(top_k, int(round(num_experts)))
    miss = 1.0
    for i in range(k):
        miss *= max(0.0, num_experts - per_node - i) / (num_experts - i)
    return 1.0 - miss


def expected_nodes(num_experts: int, top_k: int, nodes: int, max_nodes_per_token: int | None = None) -> float:
    """Expected distinct nodes (of the ``nodes`` an EP group spans) holding ≥ 1 of a token's k experts; node-limited
    routing only where it binds (M < N: the E·M/N experts of M nodes), else unlimited (module docstring)."""
    if nodes <= 1:
        return 1.0
    m = nodes if max_nodes_per_token is None else min(max_nodes_per_token, nodes)
    return m * node_hit_probability(num_experts * m / nodes, m, top_k)


def expected_remote_nodes(num_experts: int, top_k: int, nodes: int, max_nodes_per_token: int | None = None) -> float:
    """Network crossings per token under DeepEP/HybridEP: the expected distinct nodes times (1 - 1/N), each reached
    node being the sender's own with probability 1/N."""
    if nodes <= 1:
        return 0.0
    return expected_nodes(num_experts, top_k, nodes, max_nodes_per_token) * (1.0 - 1.0 / nodes)


def allgather_bytes_per_rank(token_bytes: float, group: int) -> float:
    """The all-gather dispatcher's ring all-gather (or the combine's reduce-scatter) of the group's tokens: each
    rank's ``token_bytes`` from every rank, ``group`` x ``token_bytes`` in all (collectives.ring_gather_time_s moves
    (G-1)/G of it)."""
    return token_bytes * group


def busiest_rank_load(ep: int, load_imbalance: float, reference_ep: int, capacity_factor: float | None = None) -> float:
    """The busiest EP rank's routed tokens over the mean (module docstring): 1 at ep = 1,
    ``1 + (load_imbalance - 1)·√(ln ep / ln reference_ep)``, at most the capacity factor."""
    if ep <= 1:
        return 1.0
    ref = max(2, reference_ep)
    load = 1.0 + (load_imbalance - 1.0) * math.sqrt(math.log(ep) / math.log(ref))
    return min(load, capacity_factor) if capacity_factor is not None else load


def busiest_load(ep: int, a: "Assumptions", moe: "MoESpec | None") -> float:
    """:func:`busiest_rank_load` with the knobs of ``a`` and ``moe``'s capacity factor (the expert GEMMs, their
    activations and the all-to-all's busiest receiver all read this one); padded to capacity
    (``a.moe_pad_to_capacity``), every rank's load is the capacity factor itself."""
    cap = moe.capacity_factor if moe is not None else None
    if cap is not None and a.moe_pad_to_capacity:
        return cap
    return busiest_rank_load(ep, a.moe_load_imbalance, a.moe_load_imbalance_reference_ep, cap)


def kept_share(a: "Assumptions", moe: "MoESpec | None") -> float:
    """Share of the routed token copies a capacity factor C keeps (the rest are dropped and cost no expert FLOPs):
    1 - E[max(0, X - C)] for a load X ~ N(1, σ²) over the mean, σ the spread :func:`busiest_rank_load` assumes
    (its busiest of G is 1 + σ·√(2 ln G), so σ = (moe_load_imbalance - 1)/√(2 ln ref)); the Gaussian's expected
    excess is σ·(φ(z) - z·(1 - Φ(z))), z = (C - 1)/σ; with σ = 0, max(0, 1 - C). A rank's spread: an expert's
    is wider, so this is the least that is dropped. No capacity factor: 1."""
    cap = moe.capacity_factor if moe is not None else None
    if cap is None:
        return 1.0
    sigma = (a.moe_load_imbalance - 1.0) / math.sqrt(2.0 * math.log(max(2, a.moe_load_imbalance_reference_ep)))
    if sigma <= 0:
        return 1.0 - max(0.0, 1.0 - cap)
    z = (cap - 1.0) / sigma
    pdf = math.exp(-z * z / 2) / math.sqrt(2 * math.pi)
    tail = 0.5 * math.erfc(z / math.sqrt(2))
    return 1.0 - sigma * (pdf - z * tail)


def random_routing_busiest_load(copies_per_rank: float, ep: int) -> float:
    """The busiest EP rank's routed copies over the mean when routing is uniformly random: Megatron-Core's
    ``--moe-router-force-load-balancing`` replaces the router's logits by standard-normal ones
    (megatron/core/transformer/moe/moe_utils.py ``apply_random_logits``: ``RandomSTE`` returns
    ``logits.clone().normal_()``; router.py applies it when ``moe_router_force_load_balancing``), the setting of
    every Megatron-Bridge MoE performance recipe. Each of the group's N = G·n copies then lands on a given rank with
    probability 1/G: a Binomial(N, 1/G) count of mean n and standard deviation √(n(1 - 1/G)), and the maximum of G
    such counts is about n + √(n(1 - 1/G))·√(2 ln G) (the same extreme-value bound as :func:`busiest_rank_load`), so

        busiest / mean = 1 + √(2 ln G · (1 - 1/G) / n),

    1 at G = 1. ``copies_per_rank`` n: the routed token copies an EP rank receives on average per micro-batch
    (its own tokens x top_k). A token's k experts are distinct, which only lowers the variance: an upper bound."""
    if ep <= 1 or copies_per_rank <= 0:
        return 1.0
    return 1.0 + math.sqrt(2.0 * math.log(ep) * (1.0 - 1.0 / ep) / copies_per_rank)


def imbalance_knob_for(busiest: float, ep: int, reference_ep: int) -> float:
    """The ``moe_load_imbalance`` knob (stated at ``reference_ep`` ranks) whose :func:`busiest_rank_load` at ``ep``
    ranks is ``busiest``: the inverse of its √(ln ep / ln ref) scaling (1 at ep 1)."""
    if ep <= 1:
        return 1.0
    return 1.0 + (busiest - 1.0) / math.sqrt(math.log(ep) / math.log(max(2, reference_ep)))
