"""autotune: find the best XLA compiler flags for a JAX workload.

Importing this package is cheap: it never imports jax, optuna or sqlalchemy.
Heavy modules are imported by the commands that need them.
"""

__version__ = "0.1.0"
