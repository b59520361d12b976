// The Internet checksum (RFC 1071) with 32-bit loads into a 64-bit accumulator.
//
// Read first: RFC 1071 sections 1 and 2 (why summing wider words and folding at
// the end gives the same result), RFC 9293 section 3.1, RFC 8200 section 8.1.
#include "wire/checksum.hpp"

#include <bit>
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
    // RFC 1071 section 2(B): the ones'-complement sum does not depend on byte
    // order. So sum native 64-bit words with end-around carry, and swap the
    // folded 16-bit result once; the caller's running sum (big-endian domain)
    // is swapped in the same way on the way in.
    std::uint64_t acc = __builtin_bswap16(static_cast<std::uint16_t>(fold(sum)));
    const std::byte* p = data.data();
    std::size_t n = data.size();
    auto add = [&acc](std::uint64_t w) {
        acc += w;
        acc += acc < w ? 1 : 0;
    };
    while (n >= 32) {
        std::uint64_t w[4];
        std::memcpy(w, p, 32);
        add(w[0]);
        add(w[1]);
        add(w[2]);
        add(w[3]);
        p += 32;
        n -= 32;
    }
    while (n >= 8) {
        std::uint64_t w = 0;
        std::memcpy(&w, p, 8);
        add(w);
        p += 8;
        n -= 8;
    }
    // The tail, zero-padded (an odd last byte pads as RFC 1071 says), with
    // fixed-size loads only: little-endian, so each byte keeps its offset.
    std::uint64_t tail = 0;
    unsigned shift = 0;
    if (n & 4) {
        std::uint32_t w = 0;
        std::memcpy(&w, p, 4);
        tail = w;
        p += 4;
        shift = 32;
    }
    if (n & 2) {
        std::uint16_t w = 0;
        std::memcpy(&w, p, 2);
        tail |= std::uint64_t{w} << shift;
        p += 2;
        shift += 16;
    }
    if (n & 1) tail |= std::uint64_t{static_cast<std::uint8_t>(*p)} << shift;
    add(tail);
    static_assert(std::endian::native == std::endian::little, "checksum_sum assumes a little-endian host");
    return __builtin_bswap16(static_cast<std::uint16_t>(fold(acc)));
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
