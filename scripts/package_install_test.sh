#!/usr/bin/env bash
# CI: installs the built .deb on this machine the way an operator does, runs the installed
# sluiced, and removes the package again. It changes /usr and /etc: run it as root on a
# CI machine or a throwaway one (it refuses to touch an already installed sluice).
#
#   scripts/package_install_test.sh [path/to/sluice_<version>_<arch>.deb]
#
# 1. apt-get install ./sluice_*.deb (dpkg -i with apt resolving the dependencies)
# 2. sluiced --version, sluiced --check-config /etc/sluice/sluiced.yaml, and
#    systemd-analyze verify on the installed unit
# 3. starts the installed sluiced with the unit's ExecStart command line, as an
#    unprivileged user with no_new_privs, on loopback ports; one GET /v1/check with curl;
#    SIGTERM. Not under systemd: there is no init system here, so the unit's sandboxing
#    is not exercised (tests/package/systemd_unit_test.sh checks it offline).
# 4. upgrade to the same build packed as a newer version: an edited conffile is kept
# 5. apt-get remove: nothing is left but the conffiles; apt-get purge: nothing at all
set -euo pipefail
cd "$(dirname "$0")/.."
step() { echo "== package_install_test: $*"; }
fail() { echo "package_install_test: FAIL: $*" >&2; exit 1; }
[[ $(id -u) -eq 0 ]] || fail "run as root (it installs a package)"
export DEBIAN_FRONTEND=noninteractive
apt_opts=(-y -q -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold)

if dpkg-query -W -f='${Status}' sluice 2>/dev/null | grep -q 'install ok\|config-files'; then
  fail "a sluice package is already on this machine; 'apt-get purge sluice' first"
fi
deb=${1:-}
if [[ -z $deb ]]; then
  step "building the package"
  deb=$(scripts/package.sh | tail -1)
fi
deb=$(realpath "$deb")
[[ -f $deb ]] || fail "no package at $deb"
work=$(mktemp -d /tmp/sluice-pkg-test.XXXXXX)
pid=""
installed=""
cleanup() {
  [[ -n $pid ]] && kill -KILL "$pid" 2>/dev/null || true
  # A failed run purges what it installed: the headers it leaves in /usr/include would
  # otherwise be found by the later builds of the same CI run (tests/layers fails then).
  if [[ -n $installed ]]; then apt-get purge -y -q sluice >/dev/null 2>&1 || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

step "apt-get install $deb"
installed=1
apt-get install "${apt_opts[@]}" "$deb"
[[ $(dpkg-query -W -f='${Status}' sluice) == "install ok installed" ]] || fail "not installed"
version=$(dpkg-deb -f "$deb" Version)
[[ $(sluiced --version) == "sluiced $version" ]] || fail "sluiced --version: $(sluiced --version)"
[[ $(sluice --version) == "sluice $version" ]] || fail "sluice --version"
[[ $(command -v sluiced) == /usr/bin/sluiced ]] || fail "sluiced is not /usr/bin/sluiced"

step "the native Redis module: /usr/lib/sluice/sluice_redis_module.so"
module=/usr/lib/sluice/sluice_redis_module.so
[[ -f $module ]] || fail "no $module"
if command -v redis-server >/dev/null; then
  # it loads into the machine's redis-server (on a unix socket in the work directory)
  redis-server --port 0 --unixsocket "$work/redis.sock" --save '' --daemonize no \
    --dir "$work" --logfile "$work/redis-module.log" --loadmodule "$module" &
  module_pid=$!
  for _ in $(seq 100); do redis-cli -s "$work/redis.sock" ping >/dev/null 2>&1 && break; sleep 0.1; done
  answer=$(redis-cli -s "$work/redis.sock" sluice.version 2>&1 || true)
  kill "$module_pid" 2>/dev/null || true  # (a server that refused the module has exited)
  wait "$module_pid" 2>/dev/null || true
  # (the layout version this source's client asks for: src/redis/module/wire.h)
  layout=$(sed -n 's/.*kModuleWireVersion = \([0-9]*\);.*/\1/p' src/redis/module/wire.h)
  [[ -n $layout && $answer == "$layout" ]] || {
    cat "$work/redis-module.log" >&2
    fail "SLUICE.VERSION answered '$answer', not $layout"
  }
fi

step "sluiced --check-config /etc/sluice/sluiced.yaml"
sluiced --check-config /etc/sluice/sluiced.yaml

unit=/lib/systemd/system/sluiced.service
[[ -f $unit ]] || fail "no $unit"
if command -v systemd-analyze >/dev/null; then
  step "systemd-analyze verify $unit (offline)"
  out=$(systemd-analyze verify "$unit" 2>&1) || fail "systemd-analyze verify: $out"
  [[ -z $out ]] || fail "systemd-analyze verify: $out"
fi

step "starting the unit's ExecStart as user nobody, not under systemd (no init here)"
exec_start=$(sed -n 's/^ExecStart=//p' "$unit")
read -ra cmd <<<"$exec_start"
log="$work/sluiced.log"
# The unit reads /etc/default/sluiced; the ports come from the environment as an
# operator's drop-in would set them. Port 0: sluiced picks free ports and logs them.
(
  set -a
  # shellcheck disable=SC1091
  source /etc/default/sluiced
  set +a
  export SLUICED_HTTP=127.0.0.1:0 SLUICED_GRPC=127.0.0.1:0
  exec setpriv --reuid=nobody --regid=nogroup --clear-groups --no-new-privs "${cmd[@]}"
) >"$log" 2>&1 &
pid=$!
port=""
for _ in $(seq 1 300); do  # up to 30 s
  port=$(sed -n 's/.*event=started .* http=127\.0\.0\.1:\([0-9]*\).*/\1/p' "$log")
  [[ -n $port ]] && break
  kill -0 "$pid" 2>/dev/null || { cat "$log" >&2; fail "sluiced exited"; }
  sleep 0.1
done
[[ -n $port ]] || { cat "$log" >&2; fail "sluiced did not start within 30 s"; }
step "curl /v1/check on 127.0.0.1:$port"
body=$(curl -sS --max-time 10 -w '\n%{http_code}' \
  "http://127.0.0.1:$port/v1/check?domain=default&key=remote_address&value=192.0.2.1")
echo "$body"
[[ $(tail -1 <<<"$body") == 200 ]] || fail "/v1/check did not answer 200"
grep -q '"OK"' <<<"$body" || fail "/v1/check did not say OK"
kill -TERM "$pid"
rc=0
for _ in $(seq 1 300); do
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.1
done
wait "$pid" || rc=$?
pid=""
[[ $rc -eq 0 ]] || { cat "$log" >&2; fail "sluiced exited $rc after SIGTERM"; }
grep -q 'event=stopped' "$log" || fail "no 'stopped' log line"

step "upgrade to a newer version keeps an edited conffile"
# The same package with a higher version: dpkg runs the upgrade path (prerm upgrade,
# postinst configure OLD_VERSION) and must keep the operator's edit.
next_version="$version+upgradetest"
dpkg-deb -R "$deb" "$work/next"
sed -i "s/^Version: .*/Version: $next_version/" "$work/next/DEBIAN/control"
next_deb="$work/sluice_next.deb"
dpkg-deb -b "$work/next" "$next_deb" >/dev/null
echo "# edited by package_install_test" >>/etc/sluice/sluiced.yaml
apt-get install "${apt_opts[@]}" "$next_deb"
[[ $(dpkg-query -W -f='${Version}' sluice) == "$next_version" ]] || fail "not upgraded"
grep -q 'edited by package_install_test' /etc/sluice/sluiced.yaml ||
  fail "the upgrade overwrote the edited /etc/sluice/sluiced.yaml"
sluiced --check-config /etc/sluice/sluiced.yaml >/dev/null || fail "config invalid after upgrade"

step "apt-get remove sluice: only the conffiles stay"
mapfile -t conffiles < <(dpkg-query -W -f='${Conffiles}\n' sluice | awk 'NF {print $1}')
[[ ${#conffiles[@]} -eq 2 ]] || fail "expected 2 conffiles, got: ${conffiles[*]}"
mapfile -t files < <(dpkg-deb -c "$deb" | awk '$1 !~ /^d/ {sub(/^\./, "", $6); print $6}')
apt-get remove "${apt_opts[@]}" sluice
[[ $(dpkg-query -W -f='${Status}' sluice) == "deinstall ok config-files" ]] ||
  fail "status after remove: $(dpkg-query -W -f='${Status}' sluice)"
for f in "${files[@]}"; do
  if printf '%s\n' "${conffiles[@]}" | grep -qxF "$f"; then
    [[ -f $f ]] || fail "conffile $f was removed by 'remove'"
  else
    [[ ! -e $f ]] || fail "$f is left after remove"
  fi
done
for d in /usr/include/sluice /usr/include/sluice_http /usr/lib/cmake/sluice /usr/share/doc/sluice; do
  [[ ! -e $d ]] || fail "$d is left after remove"
done

step "apt-get purge sluice: nothing left"
apt-get purge "${apt_opts[@]}" sluice
installed=""
for f in "${conffiles[@]}" /etc/sluice; do
  [[ ! -e $f ]] || fail "$f is left after purge"
done
status=$(dpkg-query -W -f='${Status}' sluice 2>/dev/null || true)
[[ -z $status || $status == *not-installed ]] || fail "after purge dpkg says: $status"
echo "package_install_test: OK ($deb installed, ran, removed, purged)"
