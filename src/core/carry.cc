// Carry-over of a state written under other parameters of the same policy name
// (Policy::on_change, kProportional): the rules every algorithm shares; each
// algorithm's conversion (Carry<Algorithm>) is in its own file. The Lua bodies
// (src/redis/lua/<algorithm>.lua) mirror these operation for operation, like the algorithms
// themselves.
#include <algorithm>
#include <cmath>

#include "core/algorithms.h"

namespace sluice::core {

// ceil(c * limit / old_limit), at most the new limit (a count over its old limit,
// kept as_is before, is "all used", not more).
std::uint64_t CarryScaleCount(std::uint64_t c, const Policy& p, const WrittenUnder& w) {
  const double limit = static_cast<double>(p.limit);
  return static_cast<std::uint64_t>(
      std::min(limit, std::ceil(static_cast<double>(c) * limit / w.limit)));
}

WrittenUnder ParamsOf(const Policy& p) {
  return WrittenUnder{static_cast<double>(p.limit), static_cast<double>(p.window),
                      static_cast<double>(p.Capacity())};
}

bool SameParams(const Policy& p, const WrittenUnder& w) {
  return w.limit == static_cast<double>(p.limit) && w.window == static_cast<double>(p.window) &&
         w.cap == static_cast<double>(p.Capacity());
}

}  // namespace sluice::core
