"""Orchestration (layer 4b): a study as phases over one claimed measurement.

- `plan`: what a study is asked to do (`StudyPlan`) and what its phases report.
- `context`: what the phases share in one process, and the one claimed
  measurement (claim, heartbeat, launch, record, release).
- `runner`: `StudyRunner`, the coordinator that runs the phases in order.
- The phases: `search` (Optuna's ask and tell), `race`, `fit`, `confirm`,
  `shrink`, `pgle` (also the series of `autotune pgle`), and `reap` (what dead
  processes left behind).
- What they build on: `trials` (requests and judged outcomes), `measured`
  (the index of measured configurations), `samplers`, `preflight` (the
  space checked against the installed XLA), `heartbeat` (a claim's).
- `service`: what every front end (the CLI, the Python API, a worker) asks of a
  study: its runner, assembled once, and the sequence after the search.

Nothing is imported here, so `autotune.study.samplers` stays as light as it is.
"""
