"""The parts that launch (layer 3, beside `spaces/` and `storage/`).

- `launcher`: running one trial, a child subprocess (or N of them) per measurement.
- `replay`: replaying recorded trials from a table instead (benchmarks of the search).
- `workloads`: finding a workload (a built-in benchmark or the user's file).
- `inventory`: what each built-in benchmark compiles to (its collectives).

Nothing is imported here.
"""
