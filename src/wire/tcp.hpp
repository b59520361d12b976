// TCP segments: header, options, checksum; and wrap-aware sequence numbers.
//
// Read first: RFC 9293 sections 3.1 (header format, checksum, options) and 3.4
// (sequence number arithmetic), RFC 7323 sections 2 and 3 (window scale and
// timestamps), RFC 2018 section 2 (SACK-permitted). The options are emitted in
// the order and with the padding Linux uses (tcp_options_write), so a Linux SYN
// parsed and emitted again comes out byte for byte the same:
//   MSS; SACK-permitted folded in front of timestamps (or NOP NOP before them);
//   NOP + window scale; NOP NOP + SACK-permitted when there are no timestamps.
#pragma once

#include <cstdint>
#include <optional>

#include "iwcm/address.hpp"
#include "wire/bytes.hpp"
#include "wire/checksum.hpp"

namespace iwcm::wire {

// A 32-bit sequence number compared modulo 2^32 (RFC 9293 section 3.4): a < b
// when the signed distance a - b is negative, which is meaningful while the two
// are less than 2^31 apart.
class SeqNumber {
public:
    constexpr SeqNumber() = default;
    constexpr explicit SeqNumber(std::uint32_t v) : value_(v) {}
    constexpr std::uint32_t value() const { return value_; }

    friend constexpr SeqNumber operator+(SeqNumber s, std::uint32_t n) {
        return SeqNumber(s.value_ + n);
    }
    constexpr SeqNumber& operator+=(std::uint32_t n) {
        value_ += n;
        return *this;
    }
    // The wrap-aware distance a - b.
    friend constexpr std::int32_t operator-(SeqNumber a, SeqNumber b) {
        return static_cast<std::int32_t>(a.value_ - b.value_);
    }
    friend constexpr bool operator==(SeqNumber, SeqNumber) = default;
    friend constexpr bool operator<(SeqNumber a, SeqNumber b) { return (a - b) < 0; }
    friend constexpr bool operator<=(SeqNumber a, SeqNumber b) { return (a - b) <= 0; }
    friend constexpr bool operator>(SeqNumber a, SeqNumber b) { return (a - b) > 0; }
    friend constexpr bool operator>=(SeqNumber a, SeqNumber b) { return (a - b) >= 0; }

private:
    std::uint32_t value_ = 0;
};

namespace tcp_flags {
constexpr std::uint8_t kFin = 0x01;
constexpr std::uint8_t kSyn = 0x02;
constexpr std::uint8_t kRst = 0x04;
constexpr std::uint8_t kPsh = 0x08;
constexpr std::uint8_t kAck = 0x10;
constexpr std::uint8_t kUrg = 0x20;
constexpr std::uint8_t kEce = 0x40;
constexpr std::uint8_t kCwr = 0x80;
}  // namespace tcp_flags

namespace tcp_option {
constexpr std::uint8_t kEol = 0;
constexpr std::uint8_t kNop = 1;
constexpr std::uint8_t kMss = 2;
constexpr std::uint8_t kWindowScale = 3;
constexpr std::uint8_t kSackPermitted = 4;
constexpr std::uint8_t kSack = 5;
constexpr std::uint8_t kTimestamps = 8;
}  // namespace tcp_option

constexpr std::size_t kTcpHeaderLen = 20;
constexpr std::size_t kTcpMaxHeaderLen = 60;

struct TcpTimestamps {
    std::uint32_t value = 0;
    std::uint32_t echo = 0;
    friend constexpr bool operator==(const TcpTimestamps&, const TcpTimestamps&) = default;
};

struct TcpOptions {
    std::optional<std::uint16_t> mss;
    // As received: RFC 7323 section 2.3 says to use 14 for larger values, which is
    // the connection's business; the parser does not clamp.
    std::optional<std::uint8_t> window_scale;
    bool sack_permitted = false;
    std::optional<TcpTimestamps> timestamps;

    // The length emitted, a multiple of 4 (at most 20). Inline: every frame built asks.
    std::size_t emitted_len() const {
        const bool sack_alone = sack_permitted && !timestamps;
        return (mss ? 4u : 0u) + (timestamps ? 12u : 0u) + (window_scale ? 4u : 0u) +
               (sack_alone ? 4u : 0u);
    }
    friend bool operator==(const TcpOptions&, const TcpOptions&) = default;
};

struct TcpRepr {
    std::uint16_t src_port = 0;
    std::uint16_t dst_port = 0;
    SeqNumber seq;
    SeqNumber ack;
    std::uint8_t flags = 0;
    std::uint16_t window = 0;
    std::uint16_t urgent = 0;
    TcpOptions options;

    bool has(std::uint8_t flag) const { return (flags & flag) != 0; }
    std::size_t header_len() const { return kTcpHeaderLen + options.emitted_len(); }
    friend bool operator==(const TcpRepr&, const TcpRepr&) = default;
};

// The addresses of the pseudo-header; the family is src's.
struct IpPseudoHeader {
    IpAddr src;
    IpAddr dst;
};

struct TcpSegment {
    TcpRepr repr;
    Bytes payload;
};

// Checks the data offset (5 or more, not beyond the segment), the checksum over
// the pseudo-header of ph's family, and the options: MSS (kind 2, length 4),
// window scale (3, 3), SACK-permitted (4, 2), timestamps (8, 10); NOP skipped;
// EOL ends the list; other kinds (SACK blocks among them) skipped by their
// length; a length below 2 or running past the header is refused. The four
// reserved bits are ignored.
ParseResult<TcpSegment> parse_tcp(Bytes segment, const IpPseudoHeader& ph);

namespace detail {
// parse_tcp() writing into its arguments.
DecodeStatus decode_tcp(Bytes segment, const IpPseudoHeader& ph, TcpRepr& repr, Bytes& payload);
// The same with the pseudo-header's partial sum already computed (pseudo_header_sum()),
// for callers that sum the addresses straight from the IP header's bytes. With
// Checksums::kOffload the checksum is not verified (pseudo_sum is then unused).
DecodeStatus decode_tcp_summed(Bytes segment, std::uint32_t pseudo_sum, TcpRepr& repr,
                               Bytes& payload, Checksums checksums = Checksums::kFull);
}  // namespace detail

namespace detail {
// Writes the header and options at p (header_len() bytes, the caller has checked the room)
// with a zero checksum field, and returns the sum of the header's big-endian 32-bit words
// taken as host-order numbers: fold16() of it is the header's share of the checksum, found
// from the field values in registers instead of by reading the bytes back.
std::uint64_t write_tcp_header(const TcpRepr& repr, std::size_t header_len, std::byte* p);
// Decodes an options area of len bytes (a multiple of 4) made only of the word-aligned
// layouts that Linux and emit_tcp() write; returns false, with o unspecified, for
// anything else, which the caller then walks byte by byte. Where it returns true the
// result is what the byte walk gives.
bool decode_aligned_options(const std::byte* p, std::size_t len, TcpOptions& o);
}  // namespace detail

// Writes header, options and payload into out (out.size() >= header_len() +
// payload.size()) and computes the checksum. Returns the bytes written.
std::size_t emit_tcp(const TcpRepr& repr, Bytes payload, const IpPseudoHeader& ph, MutBytes out);

// Writes the header and options only, with a zero checksum field; for callers
// that place the payload themselves and then call finish_tcp_checksum().
std::size_t emit_tcp_header(const TcpRepr& repr, MutBytes out);
// Computes and stores the checksum of a complete segment written in place.
void finish_tcp_checksum(MutBytes segment, const IpPseudoHeader& ph);

}  // namespace iwcm::wire
