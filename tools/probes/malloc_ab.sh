#!/usr/bin/env bash
# The loop's step with glibc's mmap threshold fixed at 1 MiB (mobiedit.rss.return_freed_memory, what
# bench-shape's children do by default) against the allocator's own threshold: SmolLM2-135M, layer 5,
# the prefix graph (K = 17, 22 rows) on W8A16 and bf16, 5 timed calls each, three alternations of the
# two modes, one process each (session 38). Run from the repository root with the venv active:
#     bash tools/probes/malloc_ab.sh [MODEL]
set -euo pipefail
MODEL="${1:-smollm2-135m}"
for i in 1 2 3; do
  for t in 0 1; do
    OMP_NUM_THREADS=1 python -c "
if $t:
    from mobiedit.rss import return_freed_memory; return_freed_memory()
from mobiedit.cli import main
main(['bench-prefix', '--model', '$MODEL', '--n', '1', '--reps', '5', '--quant', 'w8a16,bf16', '--prefix-only'])
from mobiedit.rss import peak_rss_mb; print('threshold fixed=$t peak RSS', round(peak_rss_mb()), 'MB')
" 2>&1 | grep -E "fixed=|prefix reuse" | sed 's/, speed-up.*//; s/full nan s\/step, //'
  done
done
