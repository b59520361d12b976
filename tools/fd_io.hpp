// Whole reads and writes on a blocking descriptor: the kernel's TCP baselines of
// `iwarp-cm bench --wire` (tools/bench_wire.cpp) and bench/programs/tcp_peer.cpp.
#pragma once

#include <unistd.h>

#include <cstddef>

namespace iwcm::tools {

// Reads exactly n bytes; false on EOF or an error first.
inline bool read_all(int fd, void* buf, std::size_t n) {
    auto* p = static_cast<char*>(buf);
    while (n > 0) {
        const ssize_t r = ::read(fd, p, n);
        if (r <= 0) return false;
        p += r;
        n -= static_cast<std::size_t>(r);
    }
    return true;
}

// Writes exactly n bytes; false on an error first.
inline bool write_all(int fd, const void* buf, std::size_t n) {
    const auto* p = static_cast<const char*>(buf);
    while (n > 0) {
        const ssize_t w = ::write(fd, p, n);
        if (w <= 0) return false;
        p += w;
        n -= static_cast<std::size_t>(w);
    }
    return true;
}

}  // namespace iwcm::tools
