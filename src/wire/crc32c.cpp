// CRC32c: slice-by-8 tables built at compile time, and the SSE 4.2 instruction
// run over three blocks at once.
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

// Running the raw remainder through n zero bytes is linear in the remainder: a
// 32 x 32 matrix over GF(2), kept as the images of the 32 unit vectors. Three
// remainders computed apart over three blocks join as
//   raw(c, A B C) = zeros_C(zeros_B(raw(c, A)) ^ raw(0, B)) ^ raw(0, C),
// and zeros over a fixed length is four byte-indexed tables.
using Matrix = std::array<std::uint32_t, 32>;

constexpr std::uint32_t apply(const Matrix& m, std::uint32_t v) {
    std::uint32_t out = 0;
    for (std::size_t bit = 0; v != 0; ++bit, v >>= 1) {
        if ((v & 1u) != 0) out ^= m[bit];
    }
    return out;
}

// a after b.
constexpr Matrix compose(const Matrix& a, const Matrix& b) {
    Matrix out{};
    for (std::size_t bit = 0; bit < 32; ++bit) out[bit] = apply(a, b[bit]);
    return out;
}

constexpr Matrix zeros_matrix(std::size_t bytes) {
    Matrix step{};  // one zero byte
    for (std::size_t bit = 0; bit < 32; ++bit) {
        const std::uint32_t v = 1u << bit;
        step[bit] = (v >> 8) ^ kTables[0][v & 0xFFu];
    }
    Matrix out{};
    for (std::size_t bit = 0; bit < 32; ++bit) out[bit] = 1u << bit;
    for (; bytes != 0; bytes >>= 1, step = compose(step, step)) {
        if ((bytes & 1u) != 0) out = compose(step, out);
    }
    return out;
}

using ZeroTables = std::array<std::array<std::uint32_t, 256>, 4>;

constexpr ZeroTables make_zero_tables(std::size_t bytes) {
    const Matrix m = zeros_matrix(bytes);
    ZeroTables t{};
    for (std::size_t k = 0; k < 4; ++k) {
        for (std::uint32_t b = 0; b < 256; ++b) t[k][b] = apply(m, b << (8 * k));
    }
    return t;
}

template <std::size_t kBytes>
constexpr ZeroTables kZeros = make_zero_tables(kBytes);

template <std::size_t kBytes>
std::uint32_t run_zeros(std::uint32_t crc) {
    const ZeroTables& t = kZeros<kBytes>;
    return t[0][crc & 0xFFu] ^ t[1][(crc >> 8) & 0xFFu] ^ t[2][(crc >> 16) & 0xFFu] ^
           t[3][crc >> 24];
}

#if defined(__x86_64__)
std::uint64_t load64(const std::byte* p) {
    std::uint64_t w = 0;
    std::memcpy(&w, p, 8);
    return w;
}

// The crc32 instruction takes three cycles and can start one a cycle: three
// remainders over three adjacent blocks of kBlock bytes keep it busy, then join.
template <std::size_t kBlock>
__attribute__((target("sse4.2"))) std::uint32_t three_ways(std::uint32_t crc, const std::byte*& p,
                                                           std::size_t& n) {
    static_assert(kBlock % 8 == 0);
    for (; n >= 3 * kBlock; p += 3 * kBlock, n -= 3 * kBlock) {
        std::uint64_t a = crc;
        std::uint64_t b = 0;
        std::uint64_t c = 0;
        for (std::size_t i = 0; i < kBlock; i += 8) {
            a = _mm_crc32_u64(a, load64(p + i));
            b = _mm_crc32_u64(b, load64(p + kBlock + i));
            c = _mm_crc32_u64(c, load64(p + 2 * kBlock + i));
        }
        crc = run_zeros<kBlock>(run_zeros<kBlock>(static_cast<std::uint32_t>(a)) ^
                                static_cast<std::uint32_t>(b)) ^
              static_cast<std::uint32_t>(c);
    }
    return crc;
}

// The crc32 instruction computes exactly this reflected Castagnoli remainder.
__attribute__((target("sse4.2"))) std::uint32_t update_hardware(std::uint32_t crc,
                                                                const std::byte* p, std::size_t n) {
    crc = three_ways<2048>(crc, p, n);
    // An FPDU of a 1460-byte MSS is summed over at most 1456 bytes: one round of 480 and
    // 16 bytes, where rounds of 768, 384 and three of 96 would take twice the time (each
    // round a serial chain of its block's instructions, then the join).
    crc = three_ways<480>(crc, p, n);
    crc = three_ways<256>(crc, p, n);
    crc = three_ways<128>(crc, p, n);
    crc = three_ways<32>(crc, p, n);
    std::uint64_t c = crc;
    for (; n >= 8; p += 8, n -= 8) c = _mm_crc32_u64(c, load64(p));
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
