"""The pure rules (layer 2, beside `flags/` and `pgle/`): every rule that decides a figure
or a kind, with no I/O.

- `stats`: statistics of step times and ratios (bootstrap intervals, verdicts).
- `numerics`: the numerics guard; `failures`: the failure taxonomy.
- `stopping`: warm-up settling and the prune decision.
- `measurement`: a child's `protocol.Result` turned into a `records.Measurement`.
- `collectives`: the collectives of an optimised HLO text.

The trial child imports `numerics`, `failures` and `stopping` (standard library
only; numpy inside functions), so parent and child apply one definition of each.
Nothing is imported here.
"""
