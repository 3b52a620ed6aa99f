"""`python -m autotune.child FILE [--preset P]`: measure one workload file."""

from autotune.child.run import main

raise SystemExit(main())
