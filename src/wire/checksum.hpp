// The Internet checksum and the TCP pseudo-header.
//
// Read first: RFC 1071 (computing the checksum: a ones'-complement sum of 16-bit
// big-endian words, byte-order independent, deferred carries), RFC 9293 section
// 3.1 (TCP checksum over the IPv4 pseudo-header) and RFC 8200 section 8.1 (the
// IPv6 pseudo-header).
#pragma once

#include <cstdint>

#include "iwcm/address.hpp"
#include "wire/bytes.hpp"

namespace iwcm::wire {

// IP protocol numbers (IANA "Assigned Internet Protocol Numbers").
constexpr std::uint8_t kIpProtoTcp = 6;
constexpr std::uint8_t kIpProtoIcmpv6 = 58;

// The ones'-complement sum of data as big-endian 16-bit words (an odd last byte
// is padded with a zero byte), added to `sum`, folded to 16 bits (0..0xFFFF).
// Use it to chain sums over pieces that each start at an even offset.
std::uint32_t checksum_sum(Bytes data, std::uint32_t sum = 0);

// The Internet checksum of data: the complement of checksum_sum(data, initial).
// `initial` is a partial sum (for example pseudo_header_sum()). A buffer that
// holds its own correct checksum field yields 0.
std::uint16_t internet_checksum(Bytes data, std::uint32_t initial = 0);

// The partial sum of the pseudo-header of an upper-layer packet: for IPv4 the
// source, destination, zero, protocol and 16-bit length; for IPv6 the source,
// destination, 32-bit length and next header. The family is src's; dst must match.
std::uint32_t pseudo_header_sum(const IpAddr& src, const IpAddr& dst, std::uint8_t protocol,
                                std::uint32_t length);

// The TCP checksum of a whole segment (header with its checksum field as it is,
// plus payload): 0 when the segment carries a correct checksum.
std::uint16_t tcp_checksum(const IpAddr& src, const IpAddr& dst, Bytes segment);

}  // namespace iwcm::wire
