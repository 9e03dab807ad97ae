"""Pipeline schedules: the schedule catalog and pipeline units, the bubble formulas, DualPipe and DualPipeV's stage
layout, their step orders, and the paired-chunk overlap."""
