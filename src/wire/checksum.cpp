// The Internet checksum (RFC 1071) with 64-bit loads into a 64-bit accumulator, and
// an AVX2 path for long buffers chosen at start-up.
//
// Read first: RFC 1071 sections 1 and 2 (why summing wider words and folding at
// the end gives the same result), RFC 9293 section 3.1, RFC 8200 section 8.1.
//
// The AVX2 path widens 32-bit words into 64-bit lanes and adds them there: no
// carries to chase, four lanes at once, two chains; the lanes are folded at the end.
#include "wire/checksum.hpp"

#include <bit>
#include <cstring>

#include "wire/copy.hpp"

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

// Four 32-bit words at p, zero-extended to 64-bit lanes.
__attribute__((target("avx2"))) __m256i load(const std::byte* p) {
    return _mm256_cvtepu32_epi64(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

__attribute__((target("avx2"))) std::uint64_t lanes_sum(__m256i v) {
    const __m128i s = _mm_add_epi64(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    return static_cast<std::uint64_t>(_mm_cvtsi128_si64(s)) +
           static_cast<std::uint64_t>(_mm_extract_epi64(s, 1));
}
#endif

}  // namespace

std::uint64_t sum_native_portable(const std::byte* p, std::size_t n, std::uint64_t acc) {
    return sum_native_scalar(p, n, acc);
}

#if defined(__x86_64__)
__attribute__((target("avx2"))) std::uint64_t sum_native_avx2(const std::byte* p, std::size_t n,
                                                              std::uint64_t acc) {
    // Four 32-bit words widened to 64-bit lanes per 16 bytes: a lane would need
    // 2^32 additions to overflow, so the lanes are summed once, at the end.
    __m256i a = _mm256_setzero_si256();
    __m256i b = _mm256_setzero_si256();
    for (; n >= 64; p += 64, n -= 64) {
        a = _mm256_add_epi64(a, load(p));
        b = _mm256_add_epi64(b, load(p + 16));
        a = _mm256_add_epi64(a, load(p + 32));
        b = _mm256_add_epi64(b, load(p + 48));
    }
    // Each lane holds a sum of 32-bit words at offsets that are multiples of
    // four: adding it to the native-order accumulator keeps the ones'-complement
    // sum (RFC 1071 2(B)).
    acc = add_carry(acc, lanes_sum(_mm256_add_epi64(a, b)));
    return sum_native_scalar(p, n, acc);
}

bool have_avx2_sum() {
    return kHaveAvx2;
}

namespace {

// sum_native_avx2's lanes, each 32 bytes stored as soon as they are loaded.
__attribute__((target("avx2"))) std::uint64_t copy_and_sum_avx2(std::byte* to, const std::byte* p,
                                                                std::size_t n, std::uint64_t acc) {
    __m256i a = _mm256_setzero_si256();
    __m256i b = _mm256_setzero_si256();
    for (; n >= 64; p += 64, to += 64, n -= 64) {
        const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
        const __m256i y = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(to), x);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(to + 32), y);
        a = _mm256_add_epi64(a, _mm256_cvtepu32_epi64(_mm256_castsi256_si128(x)));
        b = _mm256_add_epi64(b, _mm256_cvtepu32_epi64(_mm256_extracti128_si256(x, 1)));
        a = _mm256_add_epi64(a, _mm256_cvtepu32_epi64(_mm256_castsi256_si128(y)));
        b = _mm256_add_epi64(b, _mm256_cvtepu32_epi64(_mm256_extracti128_si256(y, 1)));
    }
    acc = add_carry(acc, lanes_sum(_mm256_add_epi64(a, b)));
    if (n > 0) std::memcpy(to, p, n);
    return sum_native_scalar(p, n, acc);
}

}  // namespace

std::uint64_t sum_native_wide(const std::byte* p, std::size_t n, std::uint64_t acc) {
    if (kHaveAvx2) return sum_native_avx2(p, n, acc);
    return sum_native_scalar(p, n, acc);
}

std::uint64_t copy_and_sum_native(std::byte* to, const std::byte* from, std::size_t n,
                                  std::uint64_t acc) {
    if (kHaveAvx2 && n >= kWideSumMin) return copy_and_sum_avx2(to, from, n, acc);
    if (n > 0) copy_bytes(to, from, n);
    return sum_native(from, n, acc);
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

std::uint64_t copy_and_sum_native(std::byte* to, const std::byte* from, std::size_t n,
                                  std::uint64_t acc) {
    if (n > 0) copy_bytes(to, from, n);
    return sum_native(from, n, acc);
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
