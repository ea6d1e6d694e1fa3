#!/usr/bin/env bash
# The main job: installs what is missing, builds, and runs sluice's demo.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh release
exec build/release/src/cli/sluice simulate "$@"
