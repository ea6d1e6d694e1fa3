// Status (sluice/status.h): what its copies and moves keep.
#include "sluice/status.h"

#include <gtest/gtest.h>

#include <utility>

namespace sluice {
namespace {

// A success is a null pointer (status.h): copies and moves keep what an error says,
// and a moved-from Status is a success.
TEST(Status, CopiesAndMovesKeepTheError) {
  const Status e = Status::NotFound("no policy 'x'");
  Status copy = e;
  EXPECT_EQ(copy.code(), ErrorCode::kNotFound);
  EXPECT_EQ(copy.message(), "no policy 'x'");
  Status moved = std::move(copy);
  EXPECT_EQ(moved.ToString(), "not_found: no policy 'x'");
  EXPECT_TRUE(copy.ok());  // NOLINT(bugprone-use-after-move): the documented state
  EXPECT_EQ(copy.message(), "");
  copy = moved;
  EXPECT_EQ(copy.code(), ErrorCode::kNotFound);
  copy = Status::Ok();
  EXPECT_TRUE(copy.ok());
  EXPECT_EQ(copy.code(), ErrorCode::kOk);
  EXPECT_EQ(copy.ToString(), "ok");
  EXPECT_TRUE(Status(ErrorCode::kOk, "ignored").ok());
  EXPECT_FALSE(e.ok());
}

}  // namespace
}  // namespace sluice
