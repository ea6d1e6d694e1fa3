// What a permit id looks like (sluice/permit_id.h).
#include "sluice/permit_id.h"

namespace sluice {

bool IsPermitId(std::string_view id) {
  if (id.size() != kPermitIdLength) return false;
  for (char c : id) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

}  // namespace sluice
