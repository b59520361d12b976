// ICMPv6 neighbour discovery: neighbour solicitation and advertisement.
//
// Read first: RFC 4861 sections 4.3 (Neighbor Solicitation), 4.4 (Neighbor
// Advertisement), 4.6.1 (the source / target link-layer address options),
// 7.1.1 and 7.1.2 (validation: hop limit 255, code 0, length at least 24,
// target not multicast, no option of length 0), RFC 4443 section 2.3 (the
// ICMPv6 checksum over the IPv6 pseudo-header, next header 58), RFC 2464
// section 7 (IPv6 multicast to Ethernet: 33:33 and the low 32 bits).
//
// Layout (big-endian):
//   0 type (135 NS, 136 NA) | 1 code 0 | 2 checksum
//   4 NS: reserved (4)  /  NA: flags R 0x80, S 0x40, O 0x20 in byte 4, reserved
//   8 target address (16)
//   24 options: type (1 source LL, 2 target LL) | length in units of 8 bytes | MAC
// Options other than the link-layer address are skipped by their length.
#pragma once

#include <cstdint>
#include <optional>

#include "iwcm/address.hpp"
#include "wire/bytes.hpp"

namespace iwcm::wire {

constexpr std::uint8_t kIcmpv6NeighborSolicit = 135;
constexpr std::uint8_t kIcmpv6NeighborAdvert = 136;
constexpr std::uint8_t kNdHopLimit = 255;
constexpr std::size_t kNdMinLen = 24;
constexpr std::size_t kNdLinkLayerOptionLen = 8;

enum class NdKind : std::uint8_t { kSolicitation, kAdvertisement };

struct NdRepr {
    NdKind kind = NdKind::kSolicitation;
    Ipv6Addr target;
    // NA flags (RFC 4861 section 4.4); sent as zero in an NS.
    bool router = false;
    bool solicited = false;
    bool override_flag = false;
    // The source link-layer address option of an NS, or the target
    // link-layer address option of an NA.
    std::optional<MacAddr> lladdr;

    std::size_t buffer_len() const { return kNdMinLen + (lladdr ? kNdLinkLayerOptionLen : 0); }
    // Writes buffer_len() bytes with the checksum for the given IPv6 addresses.
    void emit(const Ipv6Addr& src, const Ipv6Addr& dst, MutBytes out) const;
    friend bool operator==(const NdRepr&, const NdRepr&) = default;
};

// Parses an ICMPv6 message (the IPv6 payload) as NS or NA: checks the
// checksum with src and dst, the code, the length, a non-multicast target and
// the option lengths. Other ICMPv6 types are refused as "not neighbour
// discovery". The IPv6 hop limit (must be 255) is the caller's to check.
ParseResult<NdRepr> parse_nd(Bytes icmp, const Ipv6Addr& src, const Ipv6Addr& dst);

// ff02::1:ffXX:XXXX, the solicited-node multicast address of addr (RFC 4291 2.7.1).
Ipv6Addr solicited_node_multicast(const Ipv6Addr& addr);
// 33:33 and the last four bytes of a multicast address (RFC 2464 section 7).
MacAddr ipv6_multicast_mac(const Ipv6Addr& group);

}  // namespace iwcm::wire
