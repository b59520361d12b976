// The Internet checksum (RFC 1071) with 64-bit loads into a 64-bit accumulator, and
// an AVX2 path for long buffers chosen at start-up.
//
// Read first: RFC 1071 sections 1 and 2 (why summing wider words and folding at
// the end gives the same result), RFC 9293 section 3.1, RFC 8200 section 8.1.
//
// The AVX2 path splits each 32-bit lane of a 32-byte load into its two 16-bit
// halves and adds them to 32-bit lanes: no carries to chase, eight lanes at once.
// A lane takes at most 2 * 0xFFFF per step, so it cannot overflow within kAvx2Block
// steps; after each block the lanes are added into the 64-bit accumulator.
#include "wire/checksum.hpp"

#include <bit>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace iwcm::wire {

using detail::fold16;

namespace detail {

namespace {

std::uint64_t add_carry(std::uint64_t acc, std::uint64_t w) {
    acc += w;
    return acc + (acc < w ? 1 : 0);
}

#if defined(__x86_64__)
bool detect_avx2() {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") != 0;
}

const bool kHaveAvx2 = detect_avx2();

// 32-byte steps per block: 2 * 0xFFFF * 2 (two loads a step) * 8192 < 2^32.
constexpr std::size_t kAvx2Block = 8192;

__attribute__((target("avx2"))) std::uint64_t lanes_sum(__m256i v) {
    // Eight 32-bit lanes into four 64-bit ones, then across.
    const __m256i lo = _mm256_unpacklo_epi32(v, _mm256_setzero_si256());
    const __m256i hi = _mm256_unpackhi_epi32(v, _mm256_setzero_si256());
    const __m256i s = _mm256_add_epi64(lo, hi);
    return static_cast<std::uint64_t>(_mm256_extract_epi64(s, 0)) +
           static_cast<std::uint64_t>(_mm256_extract_epi64(s, 1)) +
           static_cast<std::uint64_t>(_mm256_extract_epi64(s, 2)) +
           static_cast<std::uint64_t>(_mm256_extract_epi64(s, 3));
}
#endif

}  // namespace

std::uint64_t sum_native_portable(const std::byte* p, std::size_t n, std::uint64_t acc) {
    return sum_native_scalar(p, n, acc);
}

#if defined(__x86_64__)
__attribute__((target("avx2"))) std::uint64_t sum_native_avx2(const std::byte* p, std::size_t n,
                                                              std::uint64_t acc) {
    const __m256i low16 = _mm256_set1_epi32(0xFFFF);
    while (n >= 64) {
        __m256i a = _mm256_setzero_si256();
        __m256i b = _mm256_setzero_si256();
        for (std::size_t steps = 0; n >= 64 && steps < kAvx2Block; ++steps, p += 64, n -= 64) {
            const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
            const __m256i y = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32));
            a = _mm256_add_epi32(a, _mm256_and_si256(x, low16));
            b = _mm256_add_epi32(b, _mm256_srli_epi32(x, 16));
            a = _mm256_add_epi32(a, _mm256_and_si256(y, low16));
            b = _mm256_add_epi32(b, _mm256_srli_epi32(y, 16));
        }
        // Each lane's sum is a sum of 16-bit words at even offsets: adding it to the
        // native-order accumulator keeps the ones'-complement sum (RFC 1071 2(B)).
        acc = add_carry(acc, lanes_sum(a));
        acc = add_carry(acc, lanes_sum(b));
    }
    return sum_native_scalar(p, n, acc);
}

bool have_avx2_sum() {
    return kHaveAvx2;
}

std::uint64_t sum_native_wide(const std::byte* p, std::size_t n, std::uint64_t acc) {
    if (kHaveAvx2) return sum_native_avx2(p, n, acc);
    return sum_native_scalar(p, n, acc);
}
#else
std::uint64_t sum_native_avx2(const std::byte* p, std::size_t n, std::uint64_t acc) {
    return sum_native_scalar(p, n, acc);
}

bool have_avx2_sum() {
    return false;
}

std::uint64_t sum_native_wide(const std::byte* p, std::size_t n, std::uint64_t acc) {
    return sum_native_scalar(p, n, acc);
}
#endif

}  // namespace detail

std::uint32_t checksum_sum(Bytes data, std::uint32_t sum) {
    // RFC 1071 section 2(B): the ones'-complement sum does not depend on byte
    // order. So sum native 64-bit words with end-around carry, and swap the
    // folded 16-bit result once; the caller's running sum (big-endian domain)
    // is swapped in the same way on the way in.
    const std::uint64_t start = __builtin_bswap16(static_cast<std::uint16_t>(fold16(sum)));
    const std::uint64_t acc = detail::sum_native(data.data(), data.size(), start);
    return __builtin_bswap16(static_cast<std::uint16_t>(fold16(acc)));
}

std::uint16_t internet_checksum(Bytes data, std::uint32_t initial) {
    const std::uint32_t start = fold16(initial);
    return static_cast<std::uint16_t>(~checksum_sum(data, start) & 0xFFFFu);
}

std::uint32_t pseudo_header_sum(const IpAddr& src, const IpAddr& dst, std::uint8_t protocol,
                                std::uint32_t length) {
    IWCM_ASSERT(src.family() == dst.family());
    // The unused bytes of a v4 IpAddr are zero, so summing all 16 bytes of both
    // addresses gives the v4 sum too: no branch, and 32-bit words all along.
    std::uint64_t acc = 0;
    for (const auto* raw : {&src.raw(), &dst.raw()}) {
        std::uint64_t hi = 0;
        std::uint64_t lo = 0;
        std::memcpy(&hi, raw->data(), 8);
        std::memcpy(&lo, raw->data() + 8, 8);
        hi = __builtin_bswap64(hi);
        lo = __builtin_bswap64(lo);
        acc += (hi >> 32) + (hi & 0xFFFFFFFFu) + (lo >> 32) + (lo & 0xFFFFFFFFu);
    }
    acc += protocol;
    acc += (length >> 16) + (length & 0xFFFFu);
    IWCM_ASSERT(src.is_v6() || length <= 0xFFFFu);
    return fold16(acc);
}

std::uint16_t tcp_checksum(const IpAddr& src, const IpAddr& dst, Bytes segment) {
    const auto len = static_cast<std::uint32_t>(segment.size());
    return internet_checksum(segment, pseudo_header_sum(src, dst, kIpProtoTcp, len));
}

}  // namespace iwcm::wire
