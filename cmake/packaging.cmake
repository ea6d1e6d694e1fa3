# Version header, install rules for the daemon and its system files, and the Debian
# package (cpack -G DEB, or scripts/package.sh). docs/deploy.md describes the result.

# The one version: project(sluice VERSION ...) in the top-level CMakeLists.txt. Both
# binaries print it (sluiced --version, sluice --version) and the package carries it.
configure_file(${PROJECT_SOURCE_DIR}/cmake/sluice_version.h.in
  ${PROJECT_BINARY_DIR}/generated/sluice_version.h @ONLY)
add_library(sluice_version INTERFACE)
target_include_directories(sluice_version INTERFACE $<BUILD_INTERFACE:${PROJECT_BINARY_DIR}/generated>)

if(TARGET sluiced)
  install(TARGETS sluiced RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()
install(FILES README.md docs/deploy.md docs/sluiced.md docs/algorithms.md docs/redis.md
  DESTINATION ${CMAKE_INSTALL_DOCDIR})

# System files live at absolute paths (/etc, /lib/systemd), so they form a component
# that only the package installs: `cmake --install build --prefix DIR` (the
# find_package test, a developer's install) leaves /etc alone.
install(FILES packaging/sluiced.yaml DESTINATION /etc/sluice
  COMPONENT system EXCLUDE_FROM_ALL)
install(FILES packaging/sluiced.default DESTINATION /etc/default RENAME sluiced
  COMPONENT system EXCLUDE_FROM_ALL)
install(FILES packaging/sluiced.service DESTINATION /lib/systemd/system
  COMPONENT system EXCLUDE_FROM_ALL)

set(CPACK_PACKAGE_NAME sluice)
set(CPACK_PACKAGE_VENDOR "sluice")
set(CPACK_PACKAGE_CONTACT "sluice maintainers <sluice@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "${PROJECT_DESCRIPTION}")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_PACKAGE_DIRECTORY ${PROJECT_BINARY_DIR}/package)
set(CPACK_STRIP_FILES ON)
# One package holding every component (the library, the tools and the system files).
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_GROUPING ALL_COMPONENTS_IN_ONE)
set(CPACK_COMPONENTS_ALL Unspecified system)
set(CPACK_DEBIAN_PACKAGE_NAME sluice)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)  # sluice_<version>_<arch>.deb
set(CPACK_DEBIAN_PACKAGE_SECTION net)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_DESCRIPTION
  "sluiced answers Envoy's rate limit gRPC API, HTTP JSON (/v1/check, /json),
nginx auth_request and Prometheus, with limits in the envoyproxy/ratelimit
YAML format, counted in Redis or in process. The package also holds the sluice
command-line tool, the C++ library (headers, static libraries, CMake package)
and the native Redis module, /usr/lib/sluice/sluice_redis_module.so.")
# Runtime dependencies from the binaries' shared libraries (dpkg-shlibdeps, dpkg-dev).
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# The library's CMake package finds hiredis through pkg-config; the daemon can use a
# local Redis.
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "redis-server, libhiredis-dev, libssl-dev, pkg-config")
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
  ${PROJECT_SOURCE_DIR}/packaging/debian/conffiles
  ${PROJECT_SOURCE_DIR}/packaging/debian/postinst
  ${PROJECT_SOURCE_DIR}/packaging/debian/prerm
  ${PROJECT_SOURCE_DIR}/packaging/debian/postrm)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
include(CPack)
