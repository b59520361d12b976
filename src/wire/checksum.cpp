// The Internet checksum (RFC 1071) with 32-bit loads into a 64-bit accumulator.
//
// Read first: RFC 1071 sections 1 and 2 (why summing wider words and folding at
// the end gives the same result), RFC 9293 section 3.1, RFC 8200 section 8.1.
#include "wire/checksum.hpp"

#include <bit>
#include <cstring>

namespace iwcm::wire {

using detail::fold16;

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
