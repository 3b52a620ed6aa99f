"""Storage: autotune's own tables next to Optuna's, behind one `Store`.

Importing this package loads SQLAlchemy and Alembic, never jax.
"""

from autotune.storage.store import HEAD_REVISION, Store

__all__ = ["HEAD_REVISION", "Store"]
