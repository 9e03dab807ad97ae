"""The inputs the cost model reads: the validated spec (model, cluster, plan), the parallel degrees and choice, the GPU
catalog and cluster layout, the assumption presets and fitted calibration, the frameworks' rules and their binding,
the optimizer-state sizes, and the host launch floor (whose op count is an assumption's default)."""
