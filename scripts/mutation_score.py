"""Print the mutation score per module after `mutmut run`, and the survivors to look at.

Usage: python scripts/mutation_score.py [--format json]

Reads `mutmut results --all true` (run from the repository root). A mutant
counts as killed when a test failed or timed out on it; `no tests` and
`survived` are not killed. Survivors listed in mutmut-equivalent.txt (one
mutant name a line, then `  # why`) are shown as equivalent, not as work.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

KILLED = {"killed", "timeout", "caught by type check", "segfault"}
ROOT = Path(__file__).resolve().parents[1]
LINE = re.compile(r"^\s*(?P<name>\S+?)__mutmut_\d+: (?P<status>.+)$")


def results() -> list[tuple[str, str]]:
    """(mutant name, status) for every mutant mutmut knows."""
    out = subprocess.run([sys.executable, "-m", "mutmut", "results", "--all", "true"],
                         cwd=ROOT, capture_output=True, text=True, check=True).stdout
    rows = []
    for line in out.splitlines():
        if match := LINE.match(line):
            rows.append((line.strip().split(":")[0], match["status"].strip()))
    return rows


def module_of(mutant: str) -> str:
    """`autotune.rules.stats.x_median__mutmut_3` -> `autotune/rules/stats.py`."""
    return re.split(r"\.x[_\u01c1]", mutant)[0].replace(".", "/") + ".py"


def equivalents() -> set[str]:
    path = ROOT / "mutmut-equivalent.txt"
    if not path.exists():
        return set()
    names = (line.split("#")[0].strip() for line in path.read_text().splitlines())
    return {name for name in names if name}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--format", choices=["table", "json"], default="table")
    args = parser.parse_args()
    by_module: dict[str, Counter[str]] = defaultdict(Counter)
    survivors: list[str] = []
    listed = equivalents()
    for name, status in results():
        kind = "killed" if status in KILLED else status
        by_module[module_of(name)][kind] += 1
        if kind != "killed":
            survivors.append(f"{name}: {status}{' (equivalent)' if name in listed else ''}")
    table = {m: {"mutants": sum(c.values()), "killed": c["killed"],
                 "score": round(c["killed"] / sum(c.values()), 3)}
             for m, c in sorted(by_module.items())}
    if args.format == "json":
        stale = sorted(listed - {line.split(":")[0] for line in survivors})
        print(json.dumps({"modules": table, "survivors": survivors, "stale_equivalents": stale},
                         indent=1))
        return 0
    print(f"{'module':32} {'mutants':>8} {'killed':>8} {'score':>7}")
    for module, row in table.items():
        print(f"{module:32} {row['mutants']:8} {row['killed']:8} {row['score']:7.1%}")
    total = sum(r["mutants"] for r in table.values())
    killed = sum(r["killed"] for r in table.values())
    print(f"{'all':32} {total:8} {killed:8} {killed / max(total, 1):7.1%}")
    for line in survivors:
        print("  " + line)
    surviving = {line.split(":")[0] for line in survivors}
    for name in sorted(listed - surviving):
        print(f"  {name}: listed as equivalent but killed or gone: remove its line")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
