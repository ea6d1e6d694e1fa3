#!/usr/bin/env bash
# Builds the libFuzzer targets (in the `asan` tree: clang, ASan + UBSan, the library
# built with libFuzzer's coverage; build preset `fuzz` = only these targets) and runs each for a bounded time on its corpus. Fails if any
# target crashes, leaks, trips a sanitizer or a FUZZ_CHECK; the crashing input is
# copied to tests/fuzz/corpus/<target>/crash-<sha1> so that it becomes a regression
# input (the ordinary test suite replays every corpus file: ctest -L fuzz).
#
# Usage: scripts/fuzz.sh [seconds per target (default 30)] [target ...]
# FUZZ_JOBS (default 1) targets run at once (CI: one per core). New inputs libFuzzer
# finds are written to build/fuzz/corpus/<target>/ (not the repo). Prints, per
# target: executions, execs/s, coverage (libFuzzer's cov: edges and ft: features),
# corpus size.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-30}
shift || true
# FUZZ_SEED seeds libFuzzer's random choices (CI uses 1); 0: a new seed each run. A
# fixed seed does not make two runs explore the same inputs (measured: docs/testing.md),
# so fuzz here much longer than CI does before submitting.
seed=${FUZZ_SEED:-0}
fuzz_jobs=${FUZZ_JOBS:-1}
if [[ ${FUZZ_BUILD:-1} != 0 ]]; then  # FUZZ_BUILD=0: run what build/asan already has
  scripts/deps.sh
  cmake --preset asan >/dev/null
  cmake --build --preset fuzz -j "$(nproc)"
fi
out=build/fuzz  # what the runs find and log (the binaries are in build/asan)

targets=("$@")
if ((${#targets[@]} == 0)); then
  for d in tests/fuzz/corpus/*/; do targets+=("$(basename "$d")"); done
fi

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

# Runs one target; writes its table row to $out/<target>.row and exits with its status.
fuzz_one() {
  local t=$1 bin=build/asan/tests/fuzz/fuzz_$1
  local work=$out/corpus/$t artifacts=$out/artifacts/$t log=$out/$t.log rc=0
  if [[ ! -x $bin ]]; then
    echo "fuzz: no binary $bin (target '$t')" >&2
    printf '%-14s %10s\n' "$t" "no binary" >"$out/$t.row"
    return 1
  fi
  mkdir -p "$work" "$artifacts"
  # -max_total_time bounds the run; -timeout flags one input taking over 10 s as a
  # hang; -rss_limit_mb bounds memory (2 GB: the machine is shared).
  "$bin" -seed="$seed" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$artifacts/" "$work" "tests/fuzz/corpus/$t" >"$log" 2>&1 || rc=$?
  local execs rate cov ft corp
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  cov=$(grep -Eo 'cov: [0-9]+' "$log" | tail -1 | cut -d' ' -f2 || true)
  ft=$(grep -Eo 'ft: [0-9]+' "$log" | tail -1 | cut -d' ' -f2 || true)
  corp=$(grep -Eo 'corp: [0-9]+' "$log" | tail -1 | cut -d' ' -f2 || true)
  printf '%-14s %10s %9s %7s %7s %7s\n' "$t" "${execs:--}" "${rate:--}" "${cov:--}" "${ft:--}" \
    "${corp:--}" >"$out/$t.row"
  ((rc == 0)) && return 0
  # What went wrong, printed after the table (the end of a CI log is what gets read):
  # the sanitizer's or FUZZ_CHECK's report with its first frames, and the input kept.
  {
    echo "fuzz: $t FAILED (exit $rc); log: $log"
    grep -E -A12 'ERROR|FUZZ_CHECK|runtime error' "$log" | head -40 || true
    grep -E 'SUMMARY|Test unit written' "$log" | head -5 || true
    for a in "$artifacts"/*; do
      [[ -f $a ]] || continue
      dest=tests/fuzz/corpus/$t/$(basename "$a")
      cp "$a" "$dest"
      echo "fuzz: crashing input kept as $dest (commit it with the fix)"
      echo "fuzz: the input, base64: $(head -c 600 "$a" | base64 -w0)"
    done
  } >"$out/$t.fail"
  return "$rc"
}

mkdir -p "$out"
declare -A pid_of=()
failed=()
running=0
for t in "${targets[@]}"; do
  rm -f "$out/$t.row" "$out/$t.fail"
  if ((running >= fuzz_jobs)); then
    wait -n || true
    running=$((running - 1))
  fi
  fuzz_one "$t" &
  pid_of[$t]=$!
  running=$((running + 1))
done
for t in "${targets[@]}"; do
  wait "${pid_of[$t]}" || failed+=("$t")
done
printf '%-14s %10s %9s %7s %7s %7s\n' target execs execs/s cov ft corpus
for t in "${targets[@]}"; do cat "$out/$t.row" 2>/dev/null || echo "$t: no result"; done
if ((${#failed[@]})); then
  for t in "${failed[@]}"; do cat "$out/$t.fail" 2>/dev/null; done >&2
  echo "fuzz: failed: ${failed[*]}" >&2
  exit 1
fi
echo "fuzz: ${#targets[@]} targets, ${seconds}s each, $fuzz_jobs at a time, no crash"
