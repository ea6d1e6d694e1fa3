#!/usr/bin/env bash
# Checks packaging/sluiced.service with systemd-analyze, offline (no systemd runs here):
#  - `verify`: syntax, every directive known to this systemd (252 on Debian 12; unknown
#    keys are only warnings there, so any output fails the test), referenced units and
#    the ExecStart/ExecReload binaries exist and are executable. ExecStart points at the
#    built sluiced in a copy of the unit, since /usr/bin/sluiced exists only once the
#    package is installed (scripts/package_install_test.sh verifies the installed unit).
#  - `security --offline`: the exposure score of the sandboxing, at most 2.0 ("OK").
# It does not start the service: whether sluiced runs under this sandbox is not tested.
#
#   tests/package/systemd_unit_test.sh UNIT SLUICED_BINARY WORK_DIR
set -euo pipefail
unit=$1 sluiced=$2 work=$3
fail() { echo "systemd_unit_test: FAIL: $*" >&2; exit 1; }
command -v systemd-analyze >/dev/null || fail "systemd-analyze is missing (Debian package systemd)"
rm -rf "$work" && mkdir -p "$work"
copy="$work/sluiced.service"
sed "s#^ExecStart=/usr/bin/sluiced #ExecStart=$sluiced #" "$unit" >"$copy"
grep -q "^ExecStart=$sluiced " "$copy" || fail "no ExecStart=/usr/bin/sluiced line to point at the build"

out=$(systemd-analyze verify "$copy" 2>&1) || fail "systemd-analyze verify failed: $out"
[[ -z $out ]] || fail "systemd-analyze verify complained: $out"

# A unit with a misspelt directive must make this test fail (the check can fail).
printf '[Service]\nExecStart=/bin/true\nProtectSystm=yes\n' >"$work/typo.service"
typo=$(systemd-analyze verify "$work/typo.service" 2>&1 || true)
[[ -n $typo ]] || fail "systemd-analyze verify does not report an unknown directive here"

security=$(systemd-analyze security --offline=true --threshold=20 "$copy" 2>&1) ||
  fail "exposure above 2.0: $(grep -F 'Overall exposure' <<<"$security")"
grep -F 'Overall exposure' <<<"$security"
echo "systemd_unit_test: OK"
