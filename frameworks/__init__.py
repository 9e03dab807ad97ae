"""The target training framework (Megatron-Core, Megatron-Bridge, torchtitan, DeepSpeed) as one concept.

A framework decides the legal plan space (schedules, sharding, recompute options it can run), the memory
conventions its allocator shows (a bundle of cost-model knobs), and how a plan is written down for it
(exports). Installed as ``parplan.frameworks``.
"""
