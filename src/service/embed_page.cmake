# Generates the .cc that holds the admin console (admin_ui.html) as one string, so that
# the page is edited as HTML and compiled into sluiced (nothing is read at run time).
# The page is self-contained: inline CSS and JS, nothing fetched but the admin JSON of
# the listener it came from, and every value from the server written with textContent,
# never parsed as HTML (keys are the callers' bytes); docs/sluiced.md "Admin API and
# console".
# Run at build time: cmake -DIN=<admin_ui.html> -DOUT=<file.cc> -P embed_page.cmake
file(READ "${IN}" page)
string(FIND "${page}" ")sluice_page\"" clash)
if(NOT clash EQUAL -1)
  message(FATAL_ERROR "${IN} contains the raw string's delimiter )sluice_page\"")
endif()
file(WRITE "${OUT}.tmp"
  "// Generated from src/service/admin_ui.html by src/service/embed_page.cmake.\n"
  "#include \"service/admin_server.h\"\n\n"
  "namespace sluice::service {\n\n"
  "const std::string& ConsolePage() {\n"
  "  static const std::string page = R\"sluice_page(${page})sluice_page\";\n"
  "  return page;\n"
  "}\n\n"
  "}  // namespace sluice::service\n")
file(COPY_FILE "${OUT}.tmp" "${OUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUT}.tmp")
