"""General rules that turn what a source publishes into the facts a cost-model input needs, each recording the
value it chose and why under :attr:`Expression.assumed` (printed per row by ``published_runs.py --verbose``).

:mod:`benchmarks.row_mapping` applies them where a row is silent or speaks in words:

* :func:`gpu_from_family`: a GPU named by its family ("NVIDIA Ampere GPU (exact SKU not stated)") -> a catalog part;
* :func:`megatron_account_for_split`: Megatron's ``account_for_embedding_in_pipeline_split`` /
  ``account_for_loss_in_pipeline_split`` inferred where the decoder layers do not divide into the pipeline's chunks
  but one or two more (the embedding, the loss) do;
* :func:`sharding_phrase`: sharding in words ("FSDP2 over all GPUs", "HSDP, sharded within a node", ...) -> a ZeRO
  stage and HSDP replica groups;
* :func:`family_heads` / :data:`FAMILY_SHAPES`: a family's convention for an unpublished head count (the GPT-3 and
  Megatron GPT tables) and BLOOM's shape facts;
* :func:`require_seq_len`: a row without a sequence length is an error naming the row and the field.
"""

from __future__ import annotations

import re
from typing import Optional

from benchmarks.row_facts import NotExpressible, as_int

# ---- GPU families

# a family word (as a source writes it) -> (catalog part, why that part). Each is the family's data-centre training
# part with the larger memory of its catalog variants: a run that ran is not judged on a smaller part than it may
# have had (the assumption is printed; a row that states the memory keeps its own).
GPU_FAMILIES: dict[str, tuple[str, str]] = {
    "ampere": ("A100-SXM-80GB", "the Ampere data-centre training GPU is the A100; its 80 GB SXM4 part"),
    "hopper": ("H100-SXM-80GB", "the Hopper data-centre training GPU is the H100; its 80 GB SXM5 part"),
    "blackwell": ("B200", "the Blackwell data-centre training GPU in HGX/DGX nodes is the B200"),
    "cdna3": ("MI300X", "AMD's CDNA 3 training accelerator is the MI300X"),
}
_NOT_A_FAMILY = ("ultra",)  # Blackwell Ultra (B300/GB300) is another part (GB300 by its name; B300 not in the catalog)


def gpu_from_family(name: str, assumed: dict[str, str]) -> Optional[str]:
    """The catalog part for a GPU named only by its architecture family, or None when the name names no family
    (or a part the catalog lacks, such as Blackwell Ultra)."""
    words = re.findall(r"[a-z0-9]+", name.lower())
    if any(w in words for w in _NOT_A_FAMILY):
        return None
    for family, (part, why) in GPU_FAMILIES.items():
        if family in words:
            assumed["gpu"] = f"{part} (the row names the family only: {name!r}; {why})"
            return part
    return None


# ---- Megatron's pipeline split with the embedding / loss counted as layers

# NVIDIA/Megatron-LM@d98e8a64 megatron/core/transformer/transformer_config.py:137-143 (the two flags: "the
# embedding [loss] layer will be treated as a standard transformer layer in the context of partition and placement
# for pipeline parallelism") and :2370-2400 (num_layers + 1 per flag must divide by pp, and by pp·vpp chunks);
# transformer_block.py:103-205 (get_num_layers_to_build: the first chunk of the first rank / the last chunk of the
# last rank builds one decoder layer fewer). Megatron-LM before these flags (2021/22) had neither.
MEGATRON_SPLIT_FAMILIES = ("nemo", "mcore", "bridge")


def megatron_account_for_split(num_layers: int, pp: int, vpp: int, fw: str,
                               assumed: dict[str, str]) -> Optional[tuple[bool, bool]]:
    """(account_for_embedding, account_for_loss) for a Megatron-Core-family row whose ``num_layers`` do not divide
    into ``pp`` x ``vpp`` equal chunks but ``num_layers`` + 2 (both) or + 1 (the loss) do; None where the layers
    divide (no flag needed), the framework is not Megatron-Core's, or neither count divides (not expressible
    this way). With one extra layer the flag is ambiguous: the loss is taken (the last stage, which holds the
    output layer and the logits, is the heavier end; Megatron-Bridge's recipes set the loss flag whenever they
    set one)."""
    if fw not in MEGATRON_SPLIT_FAMILIES or pp < 2:
        return None
    chunks = pp * vpp
    if num_layers % chunks == 0:
        return None
    for extra, flags in ((2, (True, True)), (1, (False, True))):
        if (num_layers + extra) % chunks == 0 and (num_layers + extra) // chunks >= 2:
            named = " and ".join(n for n, f in zip(("account_for_embedding_in_pipeline_split",
                                                    "account_for_loss_in_pipeline_split"), flags) if f)
            assumed["account_for_split"] = (
                f"{named} (inferred: {num_layers} layers do not divide into pp {pp} x vpp {vpp} = {chunks} chunks, "
                f"{num_layers} + {extra} = {num_layers + extra} do; Megatron-LM@d98e8a64 transformer_config.py:137-143)")
            return flags
    return None


# ---- sharding in words


def sharding_phrase(text: str, dp_cp: int, gpus: int, tp: int, pp: int) -> Optional[tuple[int, int, str]]:
    """(ZeRO stage, zero_replicas, why) for sharding phrases the field rules of :func:`row_facts.row_zero_stage` do
    not read: FSDP2 / ``fully_shard`` / HSDP, "over all GPUs", "sharded within a node"; None otherwise.

    * FSDP2 (PyTorch ``fully_shard``) reshards parameters after forward by default: ZeRO-3; "over all (N) GPUs"
      is one shard group over every data-parallel rank (``zero_replicas`` 1).
    * "ZeRO stage N" (DeepSpeed's ``zero_optimization.stage``, as BLOOM's paper writes it): stage N.
    * HSDP (``fully_shard`` on a 2-D mesh, torchtitan ``data_parallel_replicate_degree``) shards within a group
      and replicates across groups: the shard group a phrase names ("within a node", "over 8 GPUs") gives the
      replica count DP·CP / (shard group's data-parallel ranks).
    """
    t = text.lower()
    fsdp2 = bool(re.search(r"\bfsdp2\b|fully_shard|\bhsdp\b|hybrid[_ ]shard", t))
    if not fsdp2:
        stage_words = re.search(r"\bzero\s+stage\s*([0-3])\b", t)  # "ZeRO stage 1" (BLOOM §3.4), DeepSpeed's words
        if stage_words:
            n = int(stage_words.group(1))
            return n, 1, f"ZeRO stage {n} as written ({text!r}), over all data-parallel ranks"
        return None
    stage = 2 if re.search(r"reshard_after_forward\s*=?\s*false|shard_grad_op|zero-2", t) else 3
    replicas, why = 1, "FSDP2 (fully_shard): parameters resharded after forward, ZeRO-3"
    if stage == 2:
        why = "FSDP2 with reshard_after_forward off: ZeRO-2"
    hybrid = re.search(r"\bhsdp\b|hybrid[_ ]shard|replicat", t)
    if "all gpus" in t or re.search(rf"over (all )?{gpus} gpus", t):
        why += f"; one shard group over all {gpus} GPUs' data-parallel ranks (zero_replicas 1)"
    elif hybrid:
        m = re.search(r"(?:within|over|across|in) (?:a |one |each )?(node|(\d+) gpus)", t)
        if m is None:
            raise NotExpressible(f"HSDP without its shard group: {text!r}")
        shard_gpus = 8 if m.group(1) == "node" else int(m.group(2))
        shard_dp = max(1, shard_gpus // (tp * pp)) if shard_gpus >= tp * pp else 1
        if dp_cp % shard_dp:
            raise NotExpressible(f"HSDP shard group of {shard_gpus} GPUs does not divide DP·CP = {dp_cp}")
        replicas = dp_cp // shard_dp
        why += (f"; HSDP: sharded within {shard_gpus} GPUs ({shard_dp} data-parallel ranks), replicated across "
                f"{replicas} groups")
    return stage, replicas, why


# ---- family conventions for unpublished widths

# d_model -> n_heads, the family's published table:
# * GPT-3: Brown et al. 2020 (arXiv 2005.14165) Table 2.1 (125M ... 175B; 13B printed as d_model 5140 = 5120);
# * Megatron GPT: Narayanan et al. 2021 (arXiv 2104.04473) Table 1 (1.7B ... 1T).
GPT3_HEADS = {768: 12, 1024: 16, 1536: 16, 2048: 24, 2560: 32, 4096: 32, 5120: 40, 5140: 40, 12288: 96}
MEGATRON_GPT_HEADS = {2304: 24, 3072: 32, 4096: 32, 6144: 48, 8192: 64, 10240: 80, 12288: 96, 16384: 128,
                      20480: 128, 25600: 160}


def family_heads(fam: str, fw: str, hidden: int, assumed: dict[str, str]) -> Optional[int]:
    """The attention heads of a GPT-family model whose source does not publish them, from the family's own table at
    the same width (GPT-3 Table 2.1 first; Megatron's GPT table first for Megatron-LM 2021/22 rows, whose models
    it lists); None where neither lists the width."""
    if fam != "gpt":
        return None
    tables = [(GPT3_HEADS, "GPT-3, Brown et al. 2020 Table 2.1"),
              (MEGATRON_GPT_HEADS, "Megatron GPT, Narayanan et al. 2021 Table 1")]
    for table, source in (tables[::-1] if fw == "megatron-legacy" else tables):
        if hidden in table:
            heads = table[hidden]
            assumed["num_attention_heads"] = f"{heads} (not published; {source}: d_model {hidden} has {heads} heads)"
            return heads
    return None


# BLOOM (BigScience 2022, arXiv 2211.05100 §3.2 and Table 3; bigscience/bloom config.json): ALiBi positions (no
# position-embedding parameters, as the cost model counts none), a 4h GELU MLP, tied embeddings, multi-head
# attention, the 250,680-token tokenizer padded to 250,880
FAMILY_SHAPES: dict[str, dict] = {
    "bloom": {"gated_mlp": False, "tie_embeddings": True, "ffn_multiple": 4, "vocab_size": 250880,
              "why": "BLOOM (BigScience 2022, arXiv 2211.05100 §3.2, Table 3; config.json)"},
}


# ---- required fields


def require_seq_len(row: dict) -> int:
    """The row's sequence length; a row without one is not expressible, and the reason names the row and field."""
    seq = as_int(row.get("seq_len"))
    if seq is None:
        raise NotExpressible(f"row {row.get('id', '?')!r}: field seq_len is not published (required: the sequence "
                             "length sets every activation and FLOP term)")
    return seq
