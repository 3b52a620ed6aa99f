"""The ground (layer 1): what every other layer, the trial child included, stands on.

- `errors`: the exception root and the exit codes.
- `records`: the frozen records passed between layers (runs, claims, workers,
  measurements, `NewRun`).
- `protocol`: the trial protocol, the `Job` the parent hands a child and the
  `Result` it gets back.
- `proc`, `guard`: a child process run under a hard limit behind its guard, and
  the stop signals; `local_launch`: N processes of one trial on one machine.
- `resources`: the data folders, the digest of autotune's sources, its version.

Standard library only. Nothing is imported here.
"""
