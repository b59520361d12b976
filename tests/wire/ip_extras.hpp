// Test helpers: IPv4 options and IPv6 extension headers put into a frame that
// was emitted without them, the way a peer or a router might send it.
//
// Read first: src/wire/ipv4.hpp and ipv6.hpp (what the parser skips and refuses).
#pragma once

#include <vector>

#include "wire/bytes.hpp"
#include "wire/checksum.hpp"

namespace iwcm::wire::test {

// The frame with `options` (a multiple of 4 bytes) after the 20-byte IPv4 header
// at ip_off: IHL, total length and header checksum updated. The TCP checksum
// does not cover the IP header, so it stays right.
inline std::vector<std::byte> with_ipv4_options(Bytes frame, Bytes options,
                                                std::size_t ip_off = 14) {
    IWCM_ASSERT(options.size() % 4 == 0 && options.size() <= 40);
    std::vector<std::byte> f(frame.begin(), frame.end());
    f.insert(f.begin() + static_cast<std::ptrdiff_t>(ip_off + 20), options.begin(), options.end());
    MutBytes ip = MutBytes(f).subspan(ip_off);
    const std::size_t header_len = 20 + options.size();
    store_u8(ip, 0, static_cast<std::uint8_t>(0x40 | (header_len / 4)));
    store_be16(ip, 2, static_cast<std::uint16_t>(load_be16(ip, 2) + options.size()));
    store_be16(ip, 10, 0);
    store_be16(ip, 10, internet_checksum(ip.first(header_len)));
    return f;
}

// The frame with extension headers `exts` after the 40-byte IPv6 header at
// ip_off. The IPv6 next header becomes `first`; the last header in exts must
// name the upper layer (6 for TCP) itself. Payload length updated; the TCP
// checksum's pseudo-header is unchanged (same addresses, same upper-layer length).
inline std::vector<std::byte> with_ipv6_extensions(Bytes frame, std::uint8_t first, Bytes exts,
                                                   std::size_t ip_off = 14) {
    std::vector<std::byte> f(frame.begin(), frame.end());
    f.insert(f.begin() + static_cast<std::ptrdiff_t>(ip_off + 40), exts.begin(), exts.end());
    MutBytes ip = MutBytes(f).subspan(ip_off);
    store_be16(ip, 4, static_cast<std::uint16_t>(load_be16(ip, 4) + exts.size()));
    store_u8(ip, 6, first);
    return f;
}

}  // namespace iwcm::wire::test
