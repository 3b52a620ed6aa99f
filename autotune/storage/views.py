"""The queries behind `Store.save_view` and `Store.stored_view`: a study's page as its
writer computed it, kept so that a reader of an unchanged study reads no run.

One row per study (`autotune_views`). `Store.current_view` (in `store`) compares the
row's version token with the study's own.
"""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import select

from autotune.ground.resources import VERSION, source_digest
from autotune.storage._base import StoreBase, asked_again, upsert
from autotune.storage.models import ViewRow


def made_by() -> str:
    """Which autotune computes a page: its version and the digest of its sources. A page
    another autotune computed may say other things, so a reader recomputes it."""
    return f"{VERSION}:{source_digest()}"[:64]


class ViewsMixin(StoreBase):
    """The stored pages of `Store` (see its docstring for what every method may raise)."""

    def save_view(self, study_name: str, version: str, page: str) -> None:
        """Keep `page` (a JSON text) as the study's page at `version` (`Store.version`,
        taken before the page's runs were read), replacing the one stored.

        One statement on SQLite and PostgreSQL (`INSERT ... ON CONFLICT DO UPDATE`): of
        two writers at once, the last to commit wins, and a reader compares versions.

        Raises:
            StudyNotFoundError: no study called `study_name`.
        """
        with self._session() as session:
            study_id = self._study_row(session, study_name).id
            upsert(session, ViewRow, {
                "study_id": study_id, "version": version, "made_by": made_by(), "page": page,
                "created_at": datetime.now(UTC)}, ("study_id",))

    @asked_again
    def stored_view(self, study_name: str) -> tuple[str, str] | None:
        """(version, page JSON text) of the study's stored page, where this autotune
        computed it; None where none is stored or another autotune stored it.

        Raises:
            StudyNotFoundError: no study called `study_name`.
        """
        with self._session() as session:
            study_id = self._study_row(session, study_name).id
            found = session.execute(select(ViewRow.version, ViewRow.page).where(
                ViewRow.study_id == study_id, ViewRow.made_by == made_by())).first()
            return None if found is None else (found.version, found.page)
