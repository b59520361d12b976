// The Internet checksum and the TCP pseudo-header.
//
// Read first: RFC 1071 (computing the checksum: a ones'-complement sum of 16-bit
// big-endian words, byte-order independent, deferred carries), RFC 9293 section
// 3.1 (TCP checksum over the IPv4 pseudo-header) and RFC 8200 section 8.1 (the
// IPv6 pseudo-header).
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>

#include "iwcm/address.hpp"
#include "wire/bytes.hpp"

namespace iwcm::wire {

// IP protocol numbers (IANA "Assigned Internet Protocol Numbers").
constexpr std::uint8_t kIpProtoTcp = 6;
constexpr std::uint8_t kIpProtoIcmpv6 = 58;

// Whether a frame's IPv4 header checksum and TCP checksum are written on transmit and
// verified on receive (kFull), or offloaded (kOffload): written as zero and not verified.
// kOffload is only for a link between two cores of this library in memory, which cannot
// corrupt a frame, as Linux's loopback device skips the TCP checksum (CHECKSUM_PARTIAL on
// transmit, no verification on receive). CoreConfig::checksum_offload chooses it; every
// host on a real wire refuses it. kPartial, on transmit only, leaves the TCP checksum for
// the link to finish, as Linux hands a NIC a CHECKSUM_PARTIAL segment: the IPv4 header
// checksum is written, and the TCP checksum field holds the folded sum of the
// pseudo-header alone (not complemented), so that the complement of the sum from the TCP
// header to the end of the segment is the checksum (CoreConfig::checksum_partial, a TAP
// with the virtio-net header).
enum class Checksums : std::uint8_t { kFull, kOffload, kPartial };

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

namespace detail {

// The building blocks of the hot frame paths, inline so that a caller that knows its field
// values sums them in registers instead of reading back what it has just written.

// Folds a wide ones'-complement sum into 16 bits by adding the carries back. Any sum of
// 16- or 32-bit words, in either byte order, may be folded this way (RFC 1071 section 2).
inline std::uint32_t fold16(std::uint64_t sum) {
    sum = (sum & 0xFFFFFFFFu) + (sum >> 32);
    sum = (sum & 0xFFFFFFFFu) + (sum >> 32);
    sum = (sum & 0xFFFFu) + (sum >> 16);
    sum = (sum & 0xFFFFu) + (sum >> 16);
    return static_cast<std::uint32_t>(sum);
}

// Sums of at least this many bytes go to sum_native_wide (vector code when the CPU has it).
constexpr std::size_t kWideSumMin = 128;

// What sum_native does, for long buffers: AVX2 when the CPU has it (chosen once, at
// start-up), else the portable loop. The same contract and the same folded result.
std::uint64_t sum_native_wide(const std::byte* p, std::size_t n, std::uint64_t acc);
// The two paths of sum_native_wide on their own, so that tests can hold them to each
// other; sum_native_avx2 may be called only when have_avx2_sum() is true.
std::uint64_t sum_native_portable(const std::byte* p, std::size_t n, std::uint64_t acc);
std::uint64_t sum_native_avx2(const std::byte* p, std::size_t n, std::uint64_t acc);
bool have_avx2_sum();

// Adds n bytes at p to acc as native-order words with end-around carry; an odd last byte
// is padded with a zero byte. The result, folded, is the byte-swapped image of the
// big-endian sum on a little-endian host: compare it with 0xFFFF (its own image) or swap it.
// sum_native_scalar is the portable loop; sum_native (below) picks a path by length.
inline std::uint64_t sum_native_scalar(const std::byte* p, std::size_t n, std::uint64_t acc) {
    static_assert(std::endian::native == std::endian::little,
                  "sum_native assumes a little-endian host");
    auto add = [&acc](std::uint64_t w) {
        acc += w;
        acc += acc < w ? 1 : 0;
    };
    for (; n >= 16; p += 16, n -= 16) {
        std::uint64_t a = 0;
        std::uint64_t b = 0;
        std::memcpy(&a, p, 8);
        std::memcpy(&b, p + 8, 8);
        add(a);
        add(b);
    }
    // The tail with fixed-size loads only: little-endian, so each byte keeps its offset.
    std::uint64_t tail = 0;
    unsigned shift = 0;
    if (n & 8) {
        std::memcpy(&tail, p, 8);
        add(tail);
        tail = 0;
        p += 8;
    }
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
    return acc;
}

inline std::uint64_t sum_native(const std::byte* p, std::size_t n, std::uint64_t acc) {
    if (n >= kWideSumMin) return sum_native_wide(p, n, acc);
    return sum_native_scalar(p, n, acc);
}

// sum_native of the n bytes at `from`, which are copied to `to` in the same pass (a receiver
// that verifies a segment while it places it reads each byte once).
std::uint64_t copy_and_sum_native(std::byte* to, const std::byte* from, std::size_t n,
                                  std::uint64_t acc);

// sum_native over the concatenation of `pieces` (which starts at an even offset), read
// where each lies: a piece that starts at an odd offset of the whole pairs its bytes the
// other way round, so its folded sum is byte-swapped (RFC 1071 section 2(B)).
inline std::uint64_t sum_native_pieces(std::span<const Bytes> pieces, std::uint64_t acc) {
    if (pieces.size() == 1) return sum_native(pieces[0].data(), pieces[0].size(), acc);
    bool odd = false;
    for (Bytes piece : pieces) {
        std::uint32_t s = fold16(sum_native(piece.data(), piece.size(), 0));
        if (odd) s = __builtin_bswap16(static_cast<std::uint16_t>(s));
        acc += s;
        odd ^= (piece.size() & 1) != 0;
    }
    return acc;
}

// sum_native_pieces, the pieces copied side by side from `to` on in the same pass.
inline std::uint64_t copy_and_sum_pieces(std::byte* to, std::span<const Bytes> pieces,
                                         std::uint64_t acc) {
    if (pieces.size() == 1) return copy_and_sum_native(to, pieces[0].data(), pieces[0].size(), acc);
    bool odd = false;
    for (Bytes piece : pieces) {
        std::uint32_t s = fold16(copy_and_sum_native(to, piece.data(), piece.size(), 0));
        if (odd) s = __builtin_bswap16(static_cast<std::uint16_t>(s));
        acc += s;
        odd ^= (piece.size() & 1) != 0;
        to += piece.size();
    }
    return acc;
}

}  // namespace detail

}  // namespace iwcm::wire
