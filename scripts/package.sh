#!/usr/bin/env bash
# Builds the Debian package of sluice (sluiced, sluice, the library, the systemd unit and
# the default config) from the release build and prints the .deb's path.
# Usage: scripts/package.sh [OUTPUT_DIR]   (default build/release/package)
# Install it with: apt-get install ./build/release/package/sluice_<version>_<arch>.deb
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(realpath -m "${1:-build/release/package}")
scripts/deps.sh >&2
scripts/build.sh release >&2
rm -f "$out"/sluice_*.deb
cpack -G DEB --config build/release/CPackConfig.cmake -B "$out" >&2
ls "$out"/sluice_*.deb
