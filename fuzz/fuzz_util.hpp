// Helpers shared by the libFuzzer targets (fuzz/*.cpp).
//
// Read first: fuzz/README.md. Random bytes almost never carry a right IPv4 or
// TCP checksum, so a target that only fed them to the parsers would test the
// checksum check and nothing behind it. fix_checksums() makes the checksums of
// an Ethernet + IPv4/IPv6 + TCP frame right in place (when the frame is long
// enough to have them), so that the fuzzer reaches the options, the TCP state
// machine and MPA; the first input byte chooses whether it is applied, so the
// bad-checksum paths stay covered too.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <vector>

#include "wire/bytes.hpp"
#include "wire/checksum.hpp"
#include "wire/ethernet.hpp"
#include "wire/tcp.hpp"

namespace iwcm::fuzz {

// A failed property: abort so libFuzzer saves the input.
#define FUZZ_CHECK(cond)                                                                        \
    do {                                                                                        \
        if (!(cond)) {                                                                          \
            std::fprintf(stderr, "fuzz check failed: %s (%s:%d)\n", #cond, __FILE__, __LINE__); \
            std::abort();                                                                       \
        }                                                                                       \
    } while (0)

inline std::span<const std::byte> bytes_of(const std::uint8_t* data, std::size_t size) {
    return {reinterpret_cast<const std::byte*>(data), size};
}

inline std::uint16_t be16(const std::vector<std::byte>& b, std::size_t off) {
    return static_cast<std::uint16_t>((std::to_integer<unsigned>(b[off]) << 8) |
                                      std::to_integer<unsigned>(b[off + 1]));
}

inline void put16(std::vector<std::byte>& b, std::size_t off, std::uint16_t v) {
    b[off] = static_cast<std::byte>(v >> 8);
    b[off + 1] = static_cast<std::byte>(v & 0xFF);
}

// Sets the IPv4 header checksum and the TCP checksum of `frame` (an Ethernet
// frame, optionally 802.1Q-tagged) where the lengths allow. Never reads or
// writes out of bounds, whatever the bytes say.
inline void fix_checksums(std::vector<std::byte>& frame) {
    std::size_t off = wire::kEthernetHeaderLen;
    if (frame.size() < off) return;
    std::uint16_t type = be16(frame, 12);
    if (type == wire::kEtherTypeVlan) {
        if (frame.size() < wire::kEthernetVlanHeaderLen) return;
        type = be16(frame, 16);
        off = wire::kEthernetVlanHeaderLen;
    }
    IpAddr src, dst;
    std::size_t tcp_off = 0;
    std::size_t tcp_len = 0;
    if (type == wire::kEtherTypeIpv4) {
        if (frame.size() < off + 20) return;
        std::size_t ihl = (std::to_integer<unsigned>(frame[off]) & 0x0F) * 4u;
        if (ihl < 20 || frame.size() < off + ihl) return;
        put16(frame, off + 10, 0);
        put16(frame, off + 10,
              wire::internet_checksum(std::span<const std::byte>(frame).subspan(off, ihl)));
        std::size_t total = be16(frame, off + 2);
        if (total < ihl || frame.size() < off + total) return;
        Ipv4Addr s{}, d{};
        for (int i = 0; i < 4; ++i) {
            s.bytes[i] = std::to_integer<std::uint8_t>(frame[off + 12 + i]);
            d.bytes[i] = std::to_integer<std::uint8_t>(frame[off + 16 + i]);
        }
        src = IpAddr(s);
        dst = IpAddr(d);
        tcp_off = off + ihl;
        tcp_len = total - ihl;
    } else if (type == wire::kEtherTypeIpv6) {
        if (frame.size() < off + 40) return;
        std::size_t plen = be16(frame, off + 4);
        if (frame.size() < off + 40 + plen) return;
        Ipv6Addr s{}, d{};
        for (int i = 0; i < 16; ++i) {
            s.bytes[i] = std::to_integer<std::uint8_t>(frame[off + 8 + i]);
            d.bytes[i] = std::to_integer<std::uint8_t>(frame[off + 24 + i]);
        }
        src = IpAddr(s);
        dst = IpAddr(d);
        tcp_off = off + 40;
        tcp_len = plen;
    } else {
        return;
    }
    if (tcp_len < 20) return;
    put16(frame, tcp_off + 16, 0);
    std::span<std::byte> seg(frame.data() + tcp_off, tcp_len);
    wire::finish_tcp_checksum(seg, wire::IpPseudoHeader{src, dst});
}

}  // namespace iwcm::fuzz
