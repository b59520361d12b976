// Read first: random.hpp.
#include "random.hpp"

#include <sys/random.h>

#include <cerrno>

#include "iwcm/assert.hpp"

namespace iwcm {

void fill_random(std::span<std::byte> out) {
    std::size_t got = 0;
    while (got < out.size()) {
        const ssize_t n = ::getrandom(out.data() + got, out.size() - got, 0);
        if (n < 0 && errno == EINTR) continue;
        IWCM_ASSERT(n > 0);
        got += static_cast<std::size_t>(n);
    }
}

}  // namespace iwcm
