"""What the user gets from a study on a recorded table, and the oracle's limit.

A sibling module of `search_efficiency.py`. Every figure is judged by the
table's truth (`ReplayTable.true_ratio`: the median of every recorded repeat
of a configuration's program), never by what the study itself measured:

- **captured gain**: (defaults' true ratio - the recommendation's) /
  (defaults' true ratio - the optimum's): 1 is the whole gain the table
  offers, 0 is keeping the defaults, below 0 a recommendation slower than the
  defaults. None where the table offers no gain of at least `GAIN_FLOOR`
  (the defaults within 1% of the optimum: nothing to capture).
- **slower**: the recommendation is truly slower than the defaults.
- **right**: the recommendation (the defaults included) is truly within
  `RIGHT_WITHIN` (2%) of the optimum.
- **kept**: the recommendation is XLA's defaults (what a table without a gain
  worth confirming should give on nearly every seed).
- **sound**: the answer a user should get: on a table whose optimum is at least
  `WORTH` (3%, the least gain worth having on these machines) faster than the
  defaults (`worth_having`: by the table's truth, and by the best program's runs of
  confirmation length where the table has them from its own kind of CPU), a right
  recommendation; on any other table, the defaults kept.
- **behind**: over the same seeds, one method is behind another beyond the
  noise where the seeds sound only under the other outnumber those sound only
  under it by more than a fair coin gives in `BEHIND_P` (5%) of draws
  (`paired`: McNemar's exact test, one-sided).

The **oracle** knows which program is truly the best (more than any method
can know: compiles free, and every configuration's program and true ratio
known) and spends the method's budget, B search processes plus the most the
confirmation may spend on one configuration (`replay_study.confirm_budget`),
measuring that program against the defaults. It recommends it where the
same rule as `recommend` allows (the pooled interval of the paired ratio,
`autotune.rules.stats.paired_ratio`, lies wholly below 1 - `MIN_GAIN`,
`autotune.results.confirmation`), else keeps the defaults. No method that
must confirm with that rule does better on a table; a method's figures are
reported as fractions of it.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Sequence
from typing import Any

#: a table whose defaults are within 1% of its optimum offers no gain to capture
GAIN_FLOOR = 0.01
#: a recommendation within 2% of the optimum is right
RIGHT_WITHIN = 0.02
#: a table whose optimum is at least 3% faster than its defaults offers a gain worth having
WORTH = 0.03
#: one method is behind another beyond the noise where a fair coin over their discordant
#: seeds favours the other so much in fewer than this share of draws (`paired`)
BEHIND_P = 0.05


def truths(table) -> tuple[float, float]:
    """(the defaults' true ratio, the optimum's) of a table."""
    optimum = min(table.ratios().values())
    defaults = table.true_ratio("")
    return (optimum if defaults is None else defaults), optimum


def captured_gain(defaults: float, optimum: float, found: float | None) -> float | None:
    """The share of the table's gain a recommendation with true ratio `found` captures
    (None where the table offers less than `GAIN_FLOOR`; an unmeasured answer is 0)."""
    if defaults - optimum < GAIN_FLOOR * defaults:
        return None
    return (defaults - (defaults if found is None else found)) / (defaults - optimum)


def worth_having(table) -> bool:
    """Whether the table's optimum is truly at least `WORTH` faster than its defaults.

    By the table's truth (its short processes), and, where the table has runs of
    confirmation length of that best program recorded on its own kind of CPU
    (`ReplayTable.long_comparable`, `record_table.py --long-for`), by those too: their
    paired ratio must also lie at or below 1 - `WORTH`. The short truth's optimum is the
    lowest of some 30-160 noisy medians, so on a workload of tiny steps it can promise a
    gain that longer processes of the same program do not show (norm-act tiny on AVX2:
    0.969 in 15 steps, 1.016 in 160); there the defaults are the answer a user should get.
    """
    from truth_check import estimate  # sibling script: the same estimate it prints

    defaults, optimum = truths(table)
    if defaults - optimum < WORTH * defaults:
        return False
    if not table.long_comparable:
        return True
    found = estimate(table.program_runs(best_program_key(table), long=True))
    return found is None or found["ratio"] <= 1 - WORTH


def summary(found: Sequence[float | None], seconds: Sequence[float], defaults: float,
            optimum: float, kept: Sequence[bool], worth: bool | None = None
            ) -> dict[str, Any]:
    """The user's figures over seeds: `captured_gain` {median, p10} (None where the table
    offers no gain), `slower`, `right`, `kept` and `sound` (shares of seeds) and `device_seconds`
    (median), for answers whose true ratios are `found` (None: no truth, counted as the
    defaults) and which recommended XLA's defaults where `kept`. `worth`: whether the table
    offers a gain worth having (`worth_having`); None: by `defaults` and `optimum` alone."""
    ratios = [defaults if f is None else f for f in found]
    right = _right(ratios, optimum)
    sound = sound_seeds(found, defaults, optimum, kept, worth)
    gains = [captured_gain(defaults, optimum, r) for r in ratios]
    known = [g for g in gains if g is not None]
    return {
        "captured_gain": {"median": round(statistics.median(known), 3),
                          "p10": round(_quantile(known, 0.10), 3)} if known else None,
        "slower": sum(r > defaults for r in ratios) / len(ratios),
        "right": sum(right) / len(ratios),
        "kept": sum(kept) / len(kept),
        "sound": sum(sound) / len(sound),
        "device_seconds": round(statistics.median(seconds), 2),
    }


def sound_seeds(found: Sequence[float | None], defaults: float, optimum: float,
                kept: Sequence[bool], worth: bool | None = None) -> list[bool]:
    """Whether each seed's answer is sound (the module docstring), in `summary`'s terms."""
    if worth is None:
        worth = defaults - optimum >= WORTH * defaults
    if not worth:
        return list(kept)
    return _right([defaults if f is None else f for f in found], optimum)


def _right(ratios: Sequence[float], optimum: float) -> list[bool]:
    """Whether each true ratio lies within `RIGHT_WITHIN` of the optimum's."""
    return [right_ratio(r, optimum) for r in ratios]


def right_ratio(ratio: float, optimum: float) -> bool:
    """Whether a true ratio lies within `RIGHT_WITHIN` of the optimum's: a right answer."""
    return ratio <= optimum * (1 + RIGHT_WITHIN)


def paired(mine: Sequence[bool], theirs: Sequence[bool]) -> dict[str, Any]:
    """Two methods' per-seed verdicts (sound or not) on the same seeds, compared seed by
    seed: `only_mine` and `only_theirs`, the seeds sound under one alone; `p_behind`, the
    chance that a fair coin over those discordant seeds gives the other at least
    `only_theirs` of them (McNemar's exact test, one-sided; 1.0 with none discordant);
    `behind`: `p_behind` below `BEHIND_P`, so `mine` is behind beyond the noise."""
    if len(mine) != len(theirs):
        raise ValueError("paired verdicts must come from the same seeds")
    only_mine = sum(m and not t for m, t in zip(mine, theirs, strict=True))
    only_theirs = sum(t and not m for m, t in zip(mine, theirs, strict=True))
    n = only_mine + only_theirs
    p = sum(math.comb(n, k) for k in range(only_theirs, n + 1)) / 2 ** n
    return {"only_mine": only_mine, "only_theirs": only_theirs, "p_behind": round(p, 4),
            "behind": p < BEHIND_P}


def _quantile(values: Sequence[float], q: float) -> float:
    """The `q` quantile (linear between order statistics, as numpy's default)."""
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def best_program_key(table) -> str:
    """The key of a configuration of the table's truly best program."""
    ratios = table.ratios()
    return min(ratios, key=lambda key: (ratios[key], key))


def _program_runs(table, key: str) -> list[dict[str, Any]]:
    """Every recorded repeat of the configurations compiled to `key`'s program."""
    program = table.programs.get(key)
    members = table.members(program) if program else [key]
    return [run for member in members for run in table.runs[member]]


def _best_repeats(table) -> list[dict[str, Any]]:
    """The recorded processes of the table's best program that timed steps (what the
    oracle draws from)."""
    return [r for r in _program_runs(table, best_program_key(table))
            if r.get("status", "ok") == "ok" and r.get("step_times_s")]


def oracle_answer(table, processes: int, seed: int, fresh: bool = False
                  ) -> tuple[float, float, bool]:
    """(true ratio recommended, device-seconds, whether it kept the defaults) of the oracle
    spending `processes` timed
    processes on the best program: recorded repeats of it drawn without replacement in
    shuffled rounds (`TableLauncher`'s rule), judged by `paired_ratio`; with `fresh`, no
    more than the table holds (each recorded process once)."""
    from autotune.results import confirmation
    from autotune.rules.stats import paired_ratio

    defaults, optimum = truths(table)
    repeats = _best_repeats(table)
    rng = random.Random(seed)
    if fresh:
        processes = min(processes, len(repeats))
    drawn: list[dict[str, Any]] = []
    while len(drawn) < processes and repeats:
        round_ = list(repeats)
        rng.shuffle(round_)
        drawn += round_[:processes - len(drawn)]
    if not drawn:
        return defaults, 0.0, True
    estimate = paired_ratio([r["step_times_s"] for r in drawn],
                            [r["baseline_step_times_s"] for r in drawn])
    seconds = sum(r.get("compile_time_s", 0.0) + sum(r["step_times_s"])
                  + sum(r["baseline_step_times_s"]) for r in drawn)
    confirmed = confirmation.worth_applying(estimate)
    return (optimum if confirmed else defaults), seconds, not confirmed


def oracle(table, processes: Sequence[int], seeds: Sequence[int], fresh: bool = False
           ) -> dict[str, Any]:
    """The oracle's `summary` over `seeds`, each seed spending its own number of
    `processes` (the method's budget: search and confirmation; with `fresh`, at most the
    best program's recorded processes), and `reused`: the share of seeds whose processes
    outnumber them, so that some were drawn twice."""
    defaults, optimum = truths(table)
    answers = [oracle_answer(table, n, seed, fresh)
               for n, seed in zip(processes, seeds, strict=True)]
    held = len(_best_repeats(table))
    reused = sum(n > held for n in processes) / len(processes) if not fresh else 0.0
    return {**summary([a for a, _, _ in answers], [s for _, s, _ in answers], defaults,
                      optimum, [k for _, _, k in answers], worth_having(table)),
            "reused": reused}


def of_oracle(figures: dict[str, Any], limit: dict[str, Any]) -> dict[str, float | None]:
    """A method's captured gain (median) and share right as fractions of the oracle's
    (None where the oracle's own figure is 0 or absent)."""
    def share(mine: float | None, best: float | None) -> float | None:
        if mine is None or not best:
            return None
        return round(mine / best, 3)

    gain = (figures["captured_gain"] or {}).get("median")
    best_gain = (limit["captured_gain"] or {}).get("median")
    return {"captured_gain": share(gain, best_gain), "right": share(figures["right"],
                                                                     limit["right"])}


def cost_to_match(entry: dict[str, Any], reference: dict[str, Any], top: str
                  ) -> dict[str, Any]:
    """What `entry` (a method's figures by checkpoint, as `search_efficiency.report` keeps
    them) spends to do as well as `reference` does at checkpoint `top`: its first
    checkpoint whose median captured gain and share right are at least the reference's
    there (the share right alone on a table without a gain), and the device-seconds of
    both. `ratio` is the method's over the reference's (the issue's goal: at most 0.5);
    `at` and `ratio` are None where no checkpoint matches."""
    def gain(figures: dict[str, Any], b: str) -> float | None:
        found = figures["captured_gain"][b]
        return None if found is None else found["median"]

    want_gain, want_right = gain(reference, top), reference["right"][top]
    seconds = reference["device_seconds"][top]
    for b in sorted(entry["right"], key=int):
        mine = gain(entry, b)
        if entry["right"][b] >= want_right and (want_gain is None or (
                mine is not None and mine >= want_gain)):
            spent = entry["device_seconds"][b]
            return {"at": int(b), "device_seconds": spent, "reference_at": int(top),
                    "reference_device_seconds": seconds,
                    "ratio": round(spent / seconds, 3) if seconds else None}
    return {"at": None, "device_seconds": None, "reference_at": int(top),
            "reference_device_seconds": seconds, "ratio": None}


def cost_for_random(entry: dict[str, Any], rand: dict[str, Any], top: str
                    ) -> dict[str, Any]:
    """The same comparison from the other side: what `rand` (random search's figures by
    checkpoint, which may reach past `top`) spends to do as well as `entry` does at
    checkpoint `top` (`cost_to_match` with the roles swapped). `ratio` is still the
    method's device-seconds over random's, now at random's matching checkpoint `at`. Where
    random matches at none, `at` and `ratio` are None and `at_most` is the method's over
    random's at its last checkpoint `last`: random spent that much there and had not yet
    done as well, so the ratio at equal answers is at most that (if random ever gets
    there). A matching checkpoint of no device-seconds gives `ratio` None."""
    found = cost_to_match(rand, entry, top)
    mine = found["reference_device_seconds"]
    last = max(rand["device_seconds"], key=int)
    spent = found["device_seconds"] if found["at"] is not None else None
    theirs = rand["device_seconds"][last]
    return {"at": found["at"], "device_seconds": spent, "method_at": int(top),
            "method_device_seconds": mine, "last": int(last),
            "ratio": round(mine / spent, 3) if spent else None,
            "at_most": None if spent is not None or not theirs else round(mine / theirs, 3)}


def confirmation_floor(entry: dict[str, Any], reference: dict[str, Any], top: str
                       ) -> dict[str, Any]:
    """What `entry`'s confirmation alone spends at checkpoint `top` (its median
    `confirmation_seconds`) as a ratio of `reference`'s whole device-seconds there. On
    every seed a study spends at least its confirmation, so the method's own ratio of
    device-seconds at `top` is no lower, whatever its search spent there, as long as its
    confirmation is handed the leaders it was (another search hands on others, whose
    confirmation may cost otherwise). `floor` is None where the reference spent
    nothing."""
    mine = entry["confirmation_seconds"][top]
    theirs = reference["device_seconds"][top]
    return {"at": int(top), "confirmation_seconds": mine, "reference_device_seconds": theirs,
            "floor": round(mine / theirs, 3) if theirs else None}
