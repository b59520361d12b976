// CRC32c: slice-by-8 tables built at compile time, and the SSE 4.2 instruction.
//
// Read first: crc32c.hpp; "A Systematic Approach to Building High Performance
// Software-based CRC Generators" (Kounavis and Berry, the slicing-by-8 method):
// table k maps a byte to its CRC contribution k bytes further along, so eight
// bytes fold into the remainder with eight table look-ups and no serial chain.
#include "wire/crc32c.hpp"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace iwcm::wire {

namespace {

constexpr std::uint32_t kPolyReflected = 0x82F63B78u;

using Tables = std::array<std::array<std::uint32_t, 256>, 8>;

constexpr Tables make_tables() {
    Tables t{};
    for (std::uint32_t i = 0; i < 256; ++i) {
        std::uint32_t c = i;
        for (int bit = 0; bit < 8; ++bit) c = (c & 1u) ? (c >> 1) ^ kPolyReflected : c >> 1;
        t[0][i] = c;
    }
    for (std::size_t k = 1; k < 8; ++k) {
        for (std::size_t i = 0; i < 256; ++i) {
            const std::uint32_t prev = t[k - 1][i];
            t[k][i] = (prev >> 8) ^ t[0][prev & 0xFFu];
        }
    }
    return t;
}

constexpr Tables kTables = make_tables();

// Runs the raw (uncomplemented) remainder over data, eight bytes a step.
std::uint32_t update_portable(std::uint32_t crc, const std::byte* p, std::size_t n) {
    while (n >= 8) {
        std::uint32_t lo = 0;
        std::uint32_t hi = 0;
        std::memcpy(&lo, p, 4);
        std::memcpy(&hi, p + 4, 4);
        if constexpr (std::endian::native == std::endian::big) {
            lo = __builtin_bswap32(lo);
            hi = __builtin_bswap32(hi);
        }
        lo ^= crc;
        crc = kTables[7][lo & 0xFF] ^ kTables[6][(lo >> 8) & 0xFF] ^ kTables[5][(lo >> 16) & 0xFF] ^
              kTables[4][lo >> 24] ^ kTables[3][hi & 0xFF] ^ kTables[2][(hi >> 8) & 0xFF] ^
              kTables[1][(hi >> 16) & 0xFF] ^ kTables[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n-- > 0) {
        crc = (crc >> 8) ^ kTables[0][(crc ^ static_cast<std::uint8_t>(*p++)) & 0xFFu];
    }
    return crc;
}

#if defined(__x86_64__)
// The crc32 instruction computes exactly this reflected Castagnoli remainder.
__attribute__((target("sse4.2"))) std::uint32_t update_hardware(std::uint32_t crc,
                                                                const std::byte* p, std::size_t n) {
    std::uint64_t c = crc;
    while (n >= 8) {
        std::uint64_t w = 0;
        std::memcpy(&w, p, 8);
        c = _mm_crc32_u64(c, w);
        p += 8;
        n -= 8;
    }
    auto c32 = static_cast<std::uint32_t>(c);
    while (n-- > 0) c32 = _mm_crc32_u8(c32, static_cast<std::uint8_t>(*p++));
    return c32;
}

bool detect_hardware() {
    __builtin_cpu_init();
    return __builtin_cpu_supports("sse4.2") != 0;
}

const bool kHaveHardware = detect_hardware();
#endif

}  // namespace

std::uint32_t crc32c(Bytes data, std::uint32_t seed) {
#if defined(__x86_64__)
    if (kHaveHardware) return ~update_hardware(~seed, data.data(), data.size());
#endif
    return ~update_portable(~seed, data.data(), data.size());
}

namespace detail {

std::uint32_t crc32c_portable(Bytes data, std::uint32_t seed) {
    return ~update_portable(~seed, data.data(), data.size());
}

bool crc32c_hardware() {
#if defined(__x86_64__)
    return kHaveHardware;
#else
    return false;
#endif
}

}  // namespace detail

}  // namespace iwcm::wire
