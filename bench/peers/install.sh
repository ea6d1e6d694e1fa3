#!/usr/bin/env bash
# Installs the peers of bench/peers/run.sh, if missing, at the versions in versions.env,
# by their ordinary clients (go install; cargo build of bench/peers/limitador_rls), into
# a cache outside the repository (PEERS_CACHE, default ~/.cache/sluice-peers), and
# reuses them. Builds run under `nice -n 10`: they are CPU-heavy and the machine may be
# shared. Prints nothing but errors and one line per build it had to do.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
source "$here/versions.env"
cache=${PEERS_CACHE:-$HOME/.cache/sluice-peers}
mkdir -p "$cache/bin"
need() { command -v "$1" >/dev/null || { echo "install.sh: $1 not found ($2)" >&2; exit 1; }; }

go_install() {  # binary name, package path, version
  local stamp="$cache/bin/$1.version"
  [[ -x $cache/bin/$1 && $(cat "$stamp" 2>/dev/null) == "$3" ]] && return 0
  need go "the Go toolchain: scripts/packages.txt"
  echo "install.sh: go install $2@$3" >&2
  local tmp
  tmp=$(mktemp -d)
  GOBIN=$tmp nice -n 10 go install "$2@$3"
  mv "$tmp/$(basename "$2")" "$cache/bin/$1"
  rmdir "$tmp"
  echo "$3" >"$stamp"
}
go_install ratelimit "$RATELIMIT_MODULE/src/service_cmd" "$RATELIMIT_VERSION"
go_install gubernator "$GUBERNATOR_MODULE/cmd/gubernator" "$GUBERNATOR_VERSION"

# limitador_rls: rebuilt only when its sources or lock file changed (cargo decides).
# limitador only compiles with its RocksDB feature (unused here); Debian's librocksdb and
# libsnappy (scripts/packages.txt) are linked instead of building RocksDB from source,
# which takes the better part of an hour on 2 shared cores.
need cargo "the Rust toolchain"
need protoc "protobuf-compiler, for the RLS protos"
multiarch=/usr/lib/$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)
if [[ -z ${ROCKSDB_LIB_DIR:-} && -e $multiarch/librocksdb.so && -e $multiarch/libsnappy.so ]]; then
  export ROCKSDB_LIB_DIR=$multiarch SNAPPY_LIB_DIR=$multiarch
fi
CARGO_TARGET_DIR=$cache/cargo-target nice -n 10 cargo build --quiet --release --locked \
  --manifest-path "$here/limitador_rls/Cargo.toml" -j"$(nproc)"
ln -sf "$cache/cargo-target/release/limitador_rls" "$cache/bin/limitador_rls"
