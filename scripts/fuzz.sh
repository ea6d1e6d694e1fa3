#!/usr/bin/env bash
# Builds the libFuzzer targets (the `fuzz` preset: clang, ASan + UBSan) and runs each
# for a bounded time on its corpus. Fails if any target crashes, leaks, trips a
# sanitizer or a FUZZ_CHECK; the crashing input is copied to
# tests/fuzz/corpus/<target>/crash-<sha1> so that it becomes a regression input (the
# ordinary test suite replays every corpus file: ctest -L fuzz).
#
# Usage: scripts/fuzz.sh [seconds per target (default 30)] [target ...]
# New inputs libFuzzer finds are written to build/fuzz/corpus/<target>/ (not the repo).
# Prints, per target: executions, execs/s, coverage (libFuzzer's cov: edges and ft:
# features), corpus size.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-30}
shift || true
# FUZZ_SEED seeds libFuzzer's random choices (CI uses 1); 0: a new seed each run. A
# fixed seed does not make two runs explore the same inputs (measured: docs/testing.md),
# so fuzz here much longer than CI does before submitting.
seed=${FUZZ_SEED:-0}
if [[ ${FUZZ_BUILD:-1} != 0 ]]; then  # FUZZ_BUILD=0: run what build/fuzz already has
  scripts/deps.sh
  cmake --preset fuzz >/dev/null
  cmake --build --preset fuzz -j "$(nproc)"
fi

targets=("$@")
if ((${#targets[@]} == 0)); then
  for d in tests/fuzz/corpus/*/; do targets+=("$(basename "$d")"); done
fi

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
failed=()
printf '%-14s %10s %9s %7s %7s %7s\n' target execs execs/s cov ft corpus
for t in "${targets[@]}"; do
  bin=build/fuzz/tests/fuzz/fuzz_$t
  [[ -x $bin ]] || { echo "fuzz: no binary $bin (target '$t')" >&2; failed+=("$t"); continue; }
  work=build/fuzz/corpus/$t
  artifacts=build/fuzz/artifacts/$t
  mkdir -p "$work" "$artifacts"
  log=build/fuzz/$t.log
  rc=0
  # -max_total_time bounds the run; -timeout flags one input taking over 10 s as a
  # hang; -rss_limit_mb bounds memory (2 GB: the machine is shared).
  "$bin" -seed="$seed" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$artifacts/" "$work" "tests/fuzz/corpus/$t" >"$log" 2>&1 || rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  cov=$(grep -Eo 'cov: [0-9]+' "$log" | tail -1 | cut -d' ' -f2)
  ft=$(grep -Eo 'ft: [0-9]+' "$log" | tail -1 | cut -d' ' -f2)
  corp=$(grep -Eo 'corp: [0-9]+' "$log" | tail -1 | cut -d' ' -f2)
  printf '%-14s %10s %9s %7s %7s %7s\n' "$t" "${execs:--}" "${rate:--}" "${cov:--}" "${ft:--}" "${corp:--}"
  if ((rc != 0)); then
    failed+=("$t")
    echo "fuzz: $t FAILED (exit $rc); log: $log" >&2
    grep -E 'ERROR|FUZZ_CHECK|runtime error|SUMMARY|Test unit written' "$log" | head -20 >&2 || true
    for a in "$artifacts"/*; do
      [[ -f $a ]] || continue
      dest=tests/fuzz/corpus/$t/$(basename "$a")
      cp "$a" "$dest"
      echo "fuzz: crashing input kept as $dest (commit it with the fix)" >&2
    done
  fi
done
if ((${#failed[@]})); then
  echo "fuzz: failed: ${failed[*]}" >&2
  exit 1
fi
echo "fuzz: ${#targets[@]} targets, ${seconds}s each, no crash"
