"""The gRPC planning service (next issue): a thin adapter over ``parplan.solver.planner.optimize``."""
