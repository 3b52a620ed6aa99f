#!/usr/bin/env bash
# The GPU checks of a lent device machine, as one script (the device tool's `run`, from
# the repository root, wheels of the missing packages carried in .whl/): a short real
# study on one GPU with `best`, `export` and `trials`; a direct-mode study whose peak
# memory must come from the allocator (`memory_stats`); then a recorded table of one
# corpus workload over benchmarks/tables/gpu-table.yaml. Everything it prints and the
# files it keeps go under $OUT (the table's parts as a tarball, so a cut-off recording
# still comes back). Budgets: BUDGET_STUDY, BUDGET_DIRECT, BUDGET_RECORD seconds.
set -u
OUT=${OUT:-/tmp/gpu-check}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
A="python3 -m autotune"
DB=sqlite:///$OUT/gpu.db
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c "import jax, jaxlib; print('jax', jax.__version__, 'jaxlib', jaxlib.__version__, jax.devices())"

echo "== study: gpu-table on the corpus attention step, one GPU"
SECONDS=0
timeout "${BUDGET_STUDY:-150}" $A study --space benchmarks/tables/gpu-table.yaml \
    --script benchmarks/corpus/attention.py --preset small --devices 1 --name gpu1 \
    --trials 6 --steps 50 --confirm 2 --confirm-repeats 2 --confirm-max 4 --drop-unknown \
    --storage "$DB" 2>&1 | tail -45
echo "study: exit ${PIPESTATUS[0]} after ${SECONDS}s"
/usr/bin/time -f "best --format json: %e s" $A best gpu1 --storage "$DB" --format json \
    > "$OUT/best.json"
$A export gpu1 --storage "$DB" -o "$OUT/export.yaml" && cat "$OUT/export.yaml"
$A trials gpu1 --storage "$DB" --format json | python3 -c "
import json, sys
for r in json.load(sys.stdin):
    print(r['run'], r['trial'], r['role'], r['outcome'], r['median_step_s'],
          r['compile_time_s'], (r['message'] or '')[:120])"

echo "== study: gpu-runtime in direct mode (peak memory from the allocator)"
SECONDS=0
timeout "${BUDGET_DIRECT:-80}" $A study --space gpu-runtime --benchmark matmul \
    --preset small --devices 1 --name direct1 --mode direct --trials 3 --steps 100 \
    --confirm 0 --storage "$DB" 2>&1 | tail -25
echo "direct study: exit ${PIPESTATUS[0]} after ${SECONDS}s"
$A best direct1 --storage "$DB" --format json | python3 -c "
import json, sys
for r in json.load(sys.stdin):
    print(r['trial'], r['peak_memory_bytes'], r['memory_source'], r['search_speedup'])"

echo "== record: corpus attention over gpu-table.yaml"
mkdir -p /tmp/rec
SECONDS=0
timeout "${BUDGET_RECORD:-240}" python3 benchmarks/scripts/record_table.py \
    --script benchmarks/corpus/attention.py --preset small --devices 1 --repeats 3 \
    --steps 30 --space benchmarks/tables/gpu-table.yaml \
    -o /tmp/rec/attention-small-gpu.json.gz 2>&1 | grep -v "^\[seed" | tail -20
echo "record: exit ${PIPESTATUS[0]} after ${SECONDS}s"
tar czf "$OUT/rec.tgz" -C /tmp rec
ls -la "$OUT"
