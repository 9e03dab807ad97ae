"""Putting the terms together: a choice's costs, per-layer and MoE-layer costs, stage extras and activation offload,
the stage ledger, the evaluator and its pools variant, and plan legality."""
