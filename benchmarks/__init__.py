"""Benchmarks of the cost model against published measurements (see README.md in this folder)."""
