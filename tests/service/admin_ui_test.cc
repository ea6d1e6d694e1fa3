// The admin console (GET /ui) in a real headless browser (issue #24): sluiced started by
// the fixtures of tests/support with the admin listener, then
// tests/service/admin_ui/console_test.mjs drives Debian's chromium through playwright-core
// (scripts/deps.sh installs both): the page loads with no console error and fetches
// nothing from elsewhere, a burst shows as denials and as a top key, explain shows the
// replaced rule, and reset asks for confirmation and works. Missing node, chromium or
// playwright-core is a failure, not a skip.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "admin_fixture.h"
#include "process.h"

namespace sluice::testing {
namespace {

TEST(AdminConsole, InHeadlessChromium) {
  TempDir dir;
  WriteFile(dir.File("c.yaml"), kAdminConfig);
  const std::string token = dir.File("token");
  WriteTokenFile(token, "console-test-token-0123456789abcdef\n");
  Sluiced d = StartSluiced(dir.File("c.yaml"), dir.File("log"),
                           {"--admin", "0", "--admin-token-file", token});
  ASSERT_GT(d.http_port, 0);
  const int admin = AdminPort(d);
  ASSERT_GT(admin, 0) << d.LogText();
  const std::string script = std::string(ADMIN_UI_DIR) + "/console_test.mjs";
  // SLUICE_CONSOLE_SCREENSHOT=docs/img/admin-console.png refreshes the docs' screenshot.
  const char* shot = std::getenv("SLUICE_CONSOLE_SCREENSHOT");
  auto node = Process::Spawn({"/usr/bin/node", script, std::to_string(admin),
                              std::to_string(d.http_port), token, shot != nullptr ? shot : ""},
                             dir.File("node.log"));
  ASSERT_TRUE(node);
  const int rc = node->Wait(std::chrono::seconds(90));
  EXPECT_EQ(rc, 0) << ReadFile(dir.File("node.log")) << "\nsluiced:\n" << d.LogText();
}

}  // namespace
}  // namespace sluice::testing
