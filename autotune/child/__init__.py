"""The trial child: what runs in the fresh process that measures one configuration.

Run as `python -m autotune.child FILE [--preset P]`, or through
`autotune.bench.report()` from a user's own program. It reads the job
(`autotune.ground.protocol.Job`) from the environment, compiles, then times, and
writes one result document. Standard library only at import time; jax is
imported inside the functions that run here, never by the parent.

Modules: `workload` (load a workload file), `failure` (a classified failure
of the configuration), `timing` (compile, warm up, time, numerics facts),
`program` (facts about the compiled program), `ranks` (which process of a
multi-process trial this is, and process 0's decisions for all), `run` (the
phases and the result file). Benchmark scripts may use their public names.
"""
