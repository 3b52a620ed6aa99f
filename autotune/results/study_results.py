"""`StudyResults`: the read model's one entry for a study.

Every view of a study (`autotune best` as a table or JSON, `Study.best`, the
dashboard's study page and the report made from it) starts here, from the
study's record and runs as the storage layer handed them out: the order of
its configurations, the best rows and their JSON, and the recommendation are
computed once, in one place, so no two views can disagree. It never opens a
database.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from autotune.ground.records import RunRecord, StudyRecord
from autotune.results.fitted import with_fit
from autotune.results.ranking import Order, Recommendation, ordered, recommend
from autotune.results.table import BestRow, best_row_json, best_rows


@dataclass(frozen=True)
class StudyResults:
    """One study's results: `record` and `runs` as stored, judged with `catalog`."""

    record: StudyRecord
    runs: list[RunRecord] = field(repr=False)
    catalog: Any = field(repr=False)

    @classmethod
    def of(cls, record: StudyRecord, runs: list[RunRecord], catalog: Any) -> StudyResults:
        """The results of the study `record`, from its `runs` (`catalog` as the study
        measured with it: `study_catalog`)."""
        return cls(record, list(runs), study_catalog(catalog, record))

    @cached_property
    def order(self) -> Order:
        """The configurations best first, by what the study minimises (`ranking.ordered`)."""
        return ordered(self.runs, self.record.objectives, self.record.memory_budget_bytes)

    def rows(self, limit: int = 10) -> list[BestRow]:
        """The baseline row and the `limit` best configurations (`ranking.best_rows`)."""
        r = self.record
        return best_rows(self.runs, self.catalog, limit=limit,
                         memory_budget=r.memory_budget_bytes, objectives=r.objectives,
                         order=self.order)

    def best_json(self, rows: list[BestRow]) -> list[dict[str, Any]]:
        """The rows of `autotune best --format json` (each with the study's space fit)."""
        return with_fit([best_row_json(row) for row in rows], self.record)

    @cached_property
    def recommendation(self) -> Recommendation:
        """What autotune recommends: a configuration proven faster, or XLA's defaults."""
        r = self.record
        return recommend(self.runs, r.objectives, r.memory_budget_bytes, order=self.order)


def study_catalog(catalog: Any, record: StudyRecord) -> Any:
    """`catalog` as study `record` measured with it: the flags outside the catalog that
    its plan recorded as taken per compilation (`plan["per_compile_open"]`) given so
    (`Catalog.per_compiling`), so a reader splits its runs as its runner did."""
    names = (record.plan or {}).get("per_compile_open") or ()
    return catalog.per_compiling(names) if names else catalog
