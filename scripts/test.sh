#!/usr/bin/env bash
# The whole test suite: installs what is missing, builds, runs every test with ctest.
# Usage: scripts/test.sh [preset]   (release by default; "asan" for the sanitizers)
set -euo pipefail
cd "$(dirname "$0")/.."
preset=${1:-release}
scripts/deps.sh
scripts/build.sh "$preset"
ctest --preset "$preset" -j "$(nproc)" --timeout 600
