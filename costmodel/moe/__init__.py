"""Mixture-of-experts terms: the expert-parallel all-to-all and its dispatch load, the EP overlap with compute, and the
experts' element-wise work."""
