"""`python -m autotune ...` is the `autotune` command (local workers are started this way)."""

from autotune.cli import main

main()
