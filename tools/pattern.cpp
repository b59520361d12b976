// The byte pattern of --send-bytes / --expect-bytes. Read first: pattern.hpp.
#include "tools/pattern.hpp"

#include <algorithm>
#include <array>
#include <cstring>

namespace iwcm::tools::pattern {

namespace {

// Byte j of block k.
std::byte at(std::uint8_t tag, std::uint64_t k, std::size_t j) {
    if (j < 8) return static_cast<std::byte>(k >> (56 - 8 * j));
    return static_cast<std::byte>((k + j + tag) & 0xFF);
}

}  // namespace

void fill(std::uint8_t tag, std::uint64_t offset, std::span<std::byte> out) {
    std::size_t done = 0;
    while (done < out.size()) {
        const std::uint64_t k = (offset + done) / kBlock;
        std::size_t j = static_cast<std::size_t>((offset + done) % kBlock);
        const std::size_t end = std::min(kBlock, j + (out.size() - done));
        for (; j < std::min<std::size_t>(end, 8); ++j) out[done++] = at(tag, k, j);
        // The body: a run of consecutive byte values (the compiler vectorises it).
        const auto base = static_cast<std::uint8_t>(k + tag);
        for (; j < end; ++j)
            out[done++] = static_cast<std::byte>(static_cast<std::uint8_t>(base + j));
    }
}

std::optional<std::uint64_t> first_mismatch(std::uint8_t tag, std::uint64_t offset,
                                            std::span<const std::byte> got) {
    std::array<std::byte, kBlock> want{};
    for (std::size_t done = 0; done < got.size();) {
        const std::size_t n = std::min(want.size(), got.size() - done);
        fill(tag, offset + done, std::span(want).first(n));
        if (std::memcmp(want.data(), got.data() + done, n) != 0) {
            for (std::size_t i = 0; i < n; ++i)
                if (want[i] != got[done + i]) return offset + done + i;
        }
        done += n;
    }
    return std::nullopt;
}

}  // namespace iwcm::tools::pattern
