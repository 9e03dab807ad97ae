"""A plan's placement needs as the topology constraints of three Kubernetes schedulers (issue 43 item 2): Kueue
Topology Aware Scheduling (TAS) annotations on the job's pod templates, KAI scheduler's workload annotations and
Volcano's ``networkTopology`` over HyperNode tiers. All three state the same placement: which parallel groups the
cost model priced on NVLink (so must share an NVLink domain), and that the rest may cross the fabric (preferably
close: one block).

The annotations (Kueue's docs, "Topology Aware Scheduling", kueue.sigs.k8s.io/docs/concepts/topology_aware_scheduling/,
beta and on by default since Kueue v0.14; constants in kubernetes-sigs/kueue@ff69552e apis/kueue/v1beta1/topology_types.go:
28-60), each set on a PodSet's PodTemplate metadata:

* ``kueue.x-k8s.io/podset-required-topology: LEVEL``: every pod of the PodSet on nodes of one domain of LEVEL;
* ``kueue.x-k8s.io/podset-preferred-topology: LEVEL``: the same as a preference; Kueue tries the levels above
  LEVEL one by one and at worst admits the PodSet spread over several domains;
* ``kueue.x-k8s.io/podset-slice-required-topology: LEVEL`` with ``kueue.x-k8s.io/podset-slice-size: N``: the
  PodSet cut into slices of N consecutive pods, each slice inside one domain of LEVEL (the size annotation is
  required with the slice level);
* ``kueue.x-k8s.io/podset-group-name``: PodSets of one group are fitted into the topology together (a PyTorchJob's
  Master and Worker).

Which groups need NVLink: the cost model puts a group of ``size`` ranks at stride ``stride`` on NVLink exactly
when ``span_within_domain(stride, size, domain)`` (costmodel/communication/comm.py ``Comm._of``, costmodel/communication/mesh.py), for TP
(stride 1), CP (TP), DP·CP (TP), PP (TP·CP·DP), EP (ETP) and expert DP (ETP·EP). The plan is priced as planned
only if every block of ``span`` consecutive ranks of the largest such group shares an NVLink domain: one pod
(= one node of ``gpus_per_node`` ranks) when ``span ≤ gpus_per_node``; else slices of ``span / gpus_per_node``
pods inside the NVLink-domain level (an NVL72 rack). The level names are Kueue's sample topology (the docs above:
``cloud.provider.com/topology-block``, ``cloud.provider.com/topology-rack``): a site sets its own labels.

KAI scheduler (NVIDIA/KAI-Scheduler@72de64fc8eca10fa8cca26a20156178f3edbe092): the workload's (top owner's) annotations
``kai.scheduler/topology`` (the name of a ``kai.scheduler/v1alpha1`` Topology: its levels are node labels),
``kai.scheduler/topology-required-placement`` and ``-preferred-placement`` (a level) become the PodGroup's topology
constraint (pkg/podgrouper/podgrouper/plugins/constants/constants.go:21-23, defaultgrouper/default_grouper.go:86-89;
docs/topology/README.md, whose example Topology ``cluster-topology`` has the block, rack and hostname levels named as
above). Segments (``kai.scheduler/segment-size``, ``segment-topology-required-placement``, constants.go:25-27) are
read only from a PyTorchJob's Worker template, numbered by Worker replica index (plugins/kubeflow/pytorch/
pytorch_grouper.go:127-293), and from LeaderWorkerSets; a JobSet's grouper reads none (plugins/jobset/jobset_grouper.go).
A PyTorchJob's Master holds node rank 0, so Worker segments are one pod off the NVLink slices: they are not written
(the same warning as Kueue's slices says so).

Volcano (volcano-sh/volcano@ed72c7c815a9fd547a787134676f73d42e9d049c; the types in volcano-sh/apis@536f121f53656c6fb7a07b9775b7e0f22c3dc2d9
pkg/apis/batch/v1alpha1/job.go:123-157, 279-303): a ``batch.volcano.sh/v1alpha1`` Job's ``spec.networkTopology``
``{mode: hard|soft, highestTierAllowed: N}`` keeps the job inside one HyperNode of tier <= N (hard) or prefers the
lowest tier (soft); a task's ``partitionPolicy`` ``{totalPartitions, partitionSize, networkTopology}`` cuts its pods,
by task index / partitionSize (pkg/controllers/job/job_controller_util.go:167-177), into partitions each under its own
constraint (docs/design/"Network Topology Aware Scheduling.md", "Job management"). Tiers are numbered from the nodes
up; parplan takes tier 1 to be the NVLink domain (:data:`VOLCANO_NVLINK_TIER`, an assumption: a site whose NVL72
racks are HyperNodes of another tier changes it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from parplan.costmodel.evaluation.choice import nvlink_domain_size
from parplan.costmodel.spec.hardware import resolve_gpu
from parplan.costmodel.communication.mesh import span_within_domain
from parplan.costmodel.spec.spec import Plan, Spec

REQUIRED = "kueue.x-k8s.io/podset-required-topology"
PREFERRED = "kueue.x-k8s.io/podset-preferred-topology"
SLICE_REQUIRED = "kueue.x-k8s.io/podset-slice-required-topology"
SLICE_SIZE = "kueue.x-k8s.io/podset-slice-size"
GROUP_NAME = "kueue.x-k8s.io/podset-group-name"
BLOCK_LEVEL = "cloud.provider.com/topology-block"  # the job: DP and PP over the fabric, fewest hops preferred
NVLINK_LEVEL = "cloud.provider.com/topology-rack"  # a multi-node NVLink domain (NVL72: one rack)
KAI_TOPOLOGY = "kai.scheduler/topology"
KAI_REQUIRED = "kai.scheduler/topology-required-placement"
KAI_PREFERRED = "kai.scheduler/topology-preferred-placement"
KAI_TOPOLOGY_NAME = "cluster-topology"  # KAI's docs/topology/README.md example: levels block, rack, hostname
VOLCANO_NVLINK_TIER = 1  # the HyperNode tier of an NVLink domain (an assumption, module docstring)


@dataclass(frozen=True)
class TopologyHints:
    nvlink_span_gpus: int  # consecutive ranks that must share an NVLink domain (1: none)
    nvlink_groups: tuple[str, ...]  # the groups priced on NVLink
    slice_pods: int  # pods per NVLink slice (1: a pod, one node, holds it)
    pods: int

    def reason(self) -> str:
        if self.slice_pods > 1:
            return (f"{', '.join(self.nvlink_groups)} priced on NVLink: each {self.slice_pods} consecutive pods "
                    f"({self.nvlink_span_gpus} GPUs) inside one NVLink domain ({NVLINK_LEVEL}); the rest preferably "
                    f"inside one {BLOCK_LEVEL}")
        return (f"NVLink groups ({', '.join(self.nvlink_groups) or 'none'}) inside one node; the job preferably inside "
                f"one {BLOCK_LEVEL}")


def topology_hints(spec: Spec, plan: Plan, per_node: int, pods: int) -> TopologyHints:
    """What the plan needs of its placement (module docstring)."""
    domain = nvlink_domain_size(spec, resolve_gpu(spec.cluster))
    n = plan.num_gpus
    groups = {"tp": (1, plan.tp), "cp": (plan.tp, plan.cp), "dp_cp": (plan.tp, plan.cp * plan.dp),
              "pp": (plan.stage_ranks, plan.pp)}
    if spec.model.moe is not None:
        groups.update({"ep": (plan.etp, plan.ep), "edp": (plan.etp * plan.ep, plan.expert_dp)})
    on_nvlink = {g: s * k for g, (s, k) in groups.items() if k > 1 and span_within_domain(s, k, domain, n)}
    span = max(on_nvlink.values(), default=1)
    slice_pods = max(1, -(-span // per_node))
    return TopologyHints(span, tuple(g for g in groups if g in on_nvlink), slice_pods, pods)


def kueue_annotations(h: TopologyHints, podset_pods: int, group: Optional[str] = None,
                      slices: bool = True) -> dict[str, str]:
    """The TAS annotations of one PodSet of ``podset_pods`` pods (``group``: its podset-group-name; ``slices``:
    False where the PodSet's pods do not start at an NVLink slice's first rank, a PyTorchJob's Workers)."""
    out: dict[str, str] = {}
    if whole_job_in_one_domain(h):
        out[REQUIRED] = NVLINK_LEVEL
    elif slices and h.slice_pods > 1 and podset_pods % h.slice_pods == 0:
        out[PREFERRED] = BLOCK_LEVEL
        out[SLICE_REQUIRED] = NVLINK_LEVEL
        out[SLICE_SIZE] = str(h.slice_pods)
    else:
        out[PREFERRED] = BLOCK_LEVEL
    if group is not None:
        out[GROUP_NAME] = group
    return out


def whole_job_in_one_domain(h: TopologyHints) -> bool:
    return 1 < h.slice_pods and h.slice_pods >= h.pods


def slices_fit(h: TopologyHints, first_pod: int, podset_pods: int) -> bool:
    """Whether a set of ``podset_pods`` pods from node rank ``first_pod`` is whole NVLink slices."""
    return 1 < h.slice_pods < h.pods and first_pod % h.slice_pods == 0 and podset_pods % h.slice_pods == 0


def kai_annotations(h: TopologyHints) -> dict[str, str]:
    """KAI scheduler's annotations on the workload (the PyTorchJob or JobSet itself): the whole job inside one
    NVLink domain where it fits one, else preferably one block (module docstring)."""
    placement = {KAI_REQUIRED: NVLINK_LEVEL} if whole_job_in_one_domain(h) else {KAI_PREFERRED: BLOCK_LEVEL}
    return {KAI_TOPOLOGY: KAI_TOPOLOGY_NAME, **placement}


def volcano_job_topology(h: TopologyHints) -> dict:
    """A Volcano Job's ``spec.networkTopology``: inside one NVLink-domain HyperNode where the job fits one, else
    soft (the lowest tier that holds it preferred)."""
    if whole_job_in_one_domain(h):
        return {"mode": "hard", "highestTierAllowed": VOLCANO_NVLINK_TIER}
    return {"mode": "soft"}


def volcano_partition_policy(h: TopologyHints, task_pods: int) -> dict:
    """A Volcano task's ``partitionPolicy``: its pods cut into the NVLink slices, each inside one NVLink-domain
    HyperNode (call only where :func:`slices_fit`)."""
    return {"totalPartitions": task_pods // h.slice_pods, "partitionSize": h.slice_pods,
            "networkTopology": {"mode": "hard", "highestTierAllowed": VOLCANO_NVLINK_TIER}}


def pytorchjob_warning(h: TopologyHints) -> Optional[str]:
    """A PyTorchJob's Master is a PodSet of its own: slices of several pods cannot span it and the Workers."""
    if 1 < h.slice_pods < h.pods:
        return (f"topology: the plan needs each {h.slice_pods} consecutive pods in one NVLink domain, which a "
                "PyTorchJob cannot state (its Master is a PodSet of one pod); the Worker PodSet has no slice "
                "annotation (nor KAI segment annotations) -- place the NVLink domains by hand or run the job as a "
                "Volcano Job (--emit volcano), whose partitions state them")
    return None


__all__ = ["TopologyHints", "topology_hints", "kueue_annotations", "pytorchjob_warning", "REQUIRED", "PREFERRED",
           "SLICE_REQUIRED", "SLICE_SIZE", "GROUP_NAME", "BLOCK_LEVEL", "NVLINK_LEVEL", "kai_annotations",
           "volcano_job_topology", "volcano_partition_policy", "slices_fit", "whole_job_in_one_domain", "KAI_TOPOLOGY",
           "KAI_REQUIRED", "KAI_PREFERRED", "KAI_TOPOLOGY_NAME", "VOLCANO_NVLINK_TIER"]
