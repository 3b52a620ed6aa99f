"""The read model: everything a user is told about a study, computed from its stored runs.

The only place that computes ratios over runs, verdicts, ranking and notes.
It takes plain records (`StudyRecord`, `RunRecord`, and Optuna's frozen trials
for importance) and returns plain rows, JSON-ready dicts and notes; the CLI
only lays them out, and the dashboard will reuse the same rows. It never
imports the study runner, the launcher, storage or the CLI (a test checks).

- `ranking`: order, verdict-aware ranks, the recommendation, Pareto front,
  environments.
- `table`: the rows of `best`, `trials` and `studies` with their stable JSON keys.
- `confirmation`: what the confirmation runs of a configuration say.
- `notes`: the sentences under `best` (noise floor, budget, backend, ...).
- `export`: the export document.
- `importance`: which flags moved the step time, against the noise.
"""
