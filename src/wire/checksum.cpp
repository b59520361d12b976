// The Internet checksum (RFC 1071) with 32-bit loads into a 64-bit accumulator.
//
// Read first: RFC 1071 sections 1 and 2 (why summing wider words and folding at
// the end gives the same result), RFC 9293 section 3.1, RFC 8200 section 8.1.
#include "wire/checksum.hpp"

#include <cstring>

namespace iwcm::wire {

namespace {

// Folds a wide ones'-complement sum into 16 bits by adding the carries back.
std::uint32_t fold(std::uint64_t sum) {
    sum = (sum & 0xFFFFFFFFu) + (sum >> 32);
    sum = (sum & 0xFFFFFFFFu) + (sum >> 32);
    sum = (sum & 0xFFFFu) + (sum >> 16);
    sum = (sum & 0xFFFFu) + (sum >> 16);
    return static_cast<std::uint32_t>(sum);
}

}  // namespace

std::uint32_t checksum_sum(Bytes data, std::uint32_t sum) {
    // Big-endian 32-bit words summed into 64 bits cannot overflow for any buffer
    // below 2^32 words; each adds two 16-bit words whose carries fold in later.
    std::uint64_t acc = sum;
    const std::byte* p = data.data();
    std::size_t n = data.size();
    while (n >= 8) {
        std::uint64_t w = 0;
        std::memcpy(&w, p, 8);
        w = __builtin_bswap64(w);
        acc += (w >> 32) + (w & 0xFFFFFFFFu);
        p += 8;
        n -= 8;
    }
    if (n >= 4) {
        std::uint32_t w = 0;
        std::memcpy(&w, p, 4);
        acc += __builtin_bswap32(w);
        p += 4;
        n -= 4;
    }
    if (n >= 2) {
        acc += (std::uint32_t{static_cast<std::uint8_t>(p[0])} << 8) |
               std::uint32_t{static_cast<std::uint8_t>(p[1])};
        p += 2;
        n -= 2;
    }
    if (n == 1) acc += std::uint32_t{static_cast<std::uint8_t>(p[0])} << 8;
    return fold(acc);
}

std::uint16_t internet_checksum(Bytes data, std::uint32_t initial) {
    const std::uint32_t start = fold(initial);
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
    return fold(acc);
}

std::uint16_t tcp_checksum(const IpAddr& src, const IpAddr& dst, Bytes segment) {
    const auto len = static_cast<std::uint32_t>(segment.size());
    return internet_checksum(segment, pseudo_header_sum(src, dst, kIpProtoTcp, len));
}

}  // namespace iwcm::wire
