// The abort behind IWCM_ASSERT. Read first: include/iwcm/assert.hpp.
#include "iwcm/assert.hpp"

#include <cstdio>
#include <cstdlib>

namespace iwcm::detail {

void assert_failed(const char* expr, const char* file, int line) noexcept {
    std::fprintf(stderr, "iwcm: assertion failed: %s (%s:%d)\n", expr, file, line);
    std::abort();
}

}  // namespace iwcm::detail
