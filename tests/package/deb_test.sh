#!/usr/bin/env bash
# Builds the Debian package from a build tree with cpack and inspects it with dpkg-deb:
# the files, the conffiles, the declared dependencies, the maintainer scripts and the
# systemd unit; then runs the packed binaries from the extracted tree.
#
#   tests/package/deb_test.sh BUILD_DIR SOURCE_DIR WORK_DIR VERSION
set -euo pipefail
build=$1 src=$2 work=$3 version=$4
fail() { echo "deb_test: FAIL: $*" >&2; exit 1; }
for tool in cpack dpkg-deb dpkg-shlibdeps; do
  command -v "$tool" >/dev/null || fail "$tool is missing (scripts/deps.sh installs it)"
done
rm -rf "$work" && mkdir -p "$work"
cpack -G DEB --config "$build/CPackConfig.cmake" -B "$work" >"$work/cpack.log" 2>&1 ||
  { cat "$work/cpack.log" >&2; fail "cpack -G DEB failed"; }
arch=$(dpkg --print-architecture)
deb="$work/sluice_${version}_${arch}.deb"
[[ -f $deb ]] || fail "no $deb (got: $(ls "$work"))"

contents=$(dpkg-deb -c "$deb")
for f in ./usr/bin/sluiced ./usr/bin/sluice ./usr/include/sluice/limiter.h \
  ./usr/include/sluice/redis_store.h ./usr/lib/libsluice_core.a ./usr/lib/libsluice_redis.a \
  ./usr/lib/cmake/sluice/sluiceConfig.cmake ./usr/lib/cmake/sluice/sluiceConfigVersion.cmake \
  ./etc/sluice/sluiced.yaml ./etc/default/sluiced ./lib/systemd/system/sluiced.service \
  ./usr/share/doc/sluice/deploy.md; do
  grep -q " $f\$" <<<"$contents" || fail "$f is not in the package"
done
grep -Eq '^-rwxr-xr-x root/root .* \./usr/bin/sluiced$' <<<"$contents" ||
  fail "sluiced is not an executable owned by root"
# Nothing from the build machine leaks in (paths of the build tree, /usr/local).
if grep -Eq '\./usr/local|/work/|build/' <<<"$contents"; then fail "build paths in the package"; fi

field() { dpkg-deb -f "$deb" "$1"; }
[[ $(field Package) == sluice ]] || fail "Package: $(field Package)"
[[ $(field Version) == "$version" ]] || fail "Version: $(field Version), expected $version"
[[ $(field Architecture) == "$arch" ]] || fail "Architecture: $(field Architecture)"
depends=$(field Depends)
# dpkg-shlibdeps found the shared libraries sluiced and sluice link.
for lib in libc6 libstdc++6 'libgrpc++' libprotobuf libyaml-cpp libhiredis; do
  grep -q "$lib" <<<"$depends" || fail "Depends lacks $lib: $depends"
done

info=$(dpkg-deb -I "$deb")
for part in conffiles postinst prerm postrm; do
  grep -Eq "^ +[0-9]+ bytes, +[0-9]+ lines +.* $part( |$)" <<<"$info" ||
    fail "control archive lacks $part: $info"
done
ctrl="$work/control"
dpkg-deb -e "$deb" "$ctrl"
diff <(sort "$ctrl/conffiles") <(printf '/etc/default/sluiced\n/etc/sluice/sluiced.yaml\n') ||
  fail "conffiles differ"
for s in postinst prerm postrm; do
  [[ -x $ctrl/$s ]] || fail "$s is not executable"
  sh -n "$ctrl/$s" || fail "$s is not valid sh"
done

root="$work/root"
dpkg-deb -x "$deb" "$root"
unit="$root/lib/systemd/system/sluiced.service"
cmp -s "$unit" "$src/packaging/sluiced.service" || fail "the packed unit differs from packaging/"
for line in 'ExecStart=/usr/bin/sluiced --config /etc/sluice/sluiced.yaml' \
  'ExecReload=/bin/kill -HUP $MAINPID' 'Restart=on-failure' 'DynamicUser=yes' \
  'NoNewPrivileges=yes' 'ProtectSystem=strict' 'ProtectHome=yes' 'PrivateTmp=yes' \
  'CapabilityBoundingSet=' 'RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX' \
  'MemoryDenyWriteExecute=yes' 'Type=notify' 'EnvironmentFile=-/etc/default/sluiced' \
  'WantedBy=multi-user.target'; do
  grep -qxF -- "$line" "$unit" || fail "unit lacks '$line'"
done

# The packed binaries run, print the project's version, and accept the packed config.
[[ $("$root/usr/bin/sluiced" --version) == "sluiced $version" ]] || fail "sluiced --version"
[[ $("$root/usr/bin/sluice" --version) == "sluice $version" ]] || fail "sluice --version"
"$root/usr/bin/sluiced" --check-config "$root/etc/sluice/sluiced.yaml" ||
  fail "the default config does not pass --check-config"
# The unit's ExecStart command line is one this sluiced accepts (checked, not started:
# the process test in scripts/package_install_test.sh starts it).
exec_start=$(sed -n 's/^ExecStart=//p' "$unit")
exec_start=${exec_start//\/usr\/bin\/sluiced/$root/usr/bin/sluiced}
exec_start=${exec_start//\/etc\/sluice\//$root/etc/sluice/}
read -ra cmd <<<"$exec_start"
"${cmd[@]}" --check-config "$root/etc/sluice/sluiced.yaml" >/dev/null ||
  fail "the unit's command line is refused: ${cmd[*]}"
echo "deb_test: $deb OK"
dpkg-deb -f "$deb" Depends
