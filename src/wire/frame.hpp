// A whole Ethernet (+802.1Q) / IPv4 or IPv6 / TCP frame: the unit the CM engine
// sends and receives.
//
// Read first: ethernet.hpp, ipv4.hpp, ipv6.hpp, tcp.hpp. Parse and emit touch no
// heap and make one pass over the bytes for each checksum; no padding to the
// 60-byte Ethernet minimum is added (the NIC or TAP device does that, and parse
// accepts padded frames because IPv4 cuts its payload to the total length).
#pragma once

#include <cstdint>
#include <span>

#include "iwcm/address.hpp"
#include "wire/bytes.hpp"
#include "wire/ethernet.hpp"
#include "wire/ipv4.hpp"
#include "wire/tcp.hpp"

namespace iwcm::wire {

// The IP fields a connection keeps, for either family: ttl is the IPv6 hop
// limit, tos the traffic class; ident and dont_fragment are IPv4 only, and
// flow_label IPv6 only.
struct IpRepr {
    IpAddr src;
    IpAddr dst;
    std::uint8_t ttl = 64;
    std::uint8_t tos = 0;
    std::uint16_t ident = 0;
    std::uint32_t flow_label = 0;
    bool dont_fragment = true;
    friend bool operator==(const IpRepr&, const IpRepr&) = default;
};

// eth.ethertype is ignored on emit (derived from ip.src's family) and set on parse.
struct FrameRepr {
    EthernetRepr eth;
    IpRepr ip;
    TcpRepr tcp;
    friend bool operator==(const FrameRepr&, const FrameRepr&) = default;
};

struct TcpFrame {
    FrameRepr repr;
    Bytes payload;
};

// Checks every layer; an ethertype other than IPv4/IPv6 (kind kNotIp) or an IP
// protocol other than TCP (kNotTcp, also TCP behind AH or ESP) is refused with a
// reason. IPv4 options and IPv6 extension headers are skipped as ipv4.hpp and
// ipv6.hpp say, fragments refused (kFragment); the repr keeps neither, so the
// frame emitted from it has none. Error offsets count from the frame start.
// Checksums::kOffload: the IPv4 header and TCP checksums are not verified (a link
// in memory between two cores of this library; checksum.hpp); every other check is.
ParseResult<TcpFrame> parse_tcp_frame(Bytes frame, Checksums checksums = Checksums::kFull);
// The same into `out`, which may hold an earlier frame: every field is written (the common
// IPv4 frame without clearing `out` first, which is what a caller that parses frame after
// frame into one object saves). nullopt when the frame parsed; on an error `out` is unspecified.
std::optional<ParseError> parse_tcp_frame_into(Bytes frame, TcpFrame& out,
                                               Checksums checksums = Checksums::kFull);

// A frame in parts, `headers` followed by the `payload` pieces (not all empty): the whole
// TCP payload read where it lies, as a frame handed over by reference arrives
// (Core::receive_parts). Only the common IPv4 frame parses so, with the result
// parse_tcp_frame_into() gives for the joined frame, except that out.payload is the one
// piece, or empty when there are several (the caller reads them); false for anything else
// (any error included): join the parts and parse the whole frame then, for the result or
// the exact error. `payload_sum`, with Checksums::kFull: the TCP checksum is left for the
// caller to finish over the payload (detail::sum_native_pieces or copy_and_sum_pieces onto
// *payload_sum, the pseudo-header's and TCP header's sum, then fold16 == 0xFFFF): a receiver
// that places the payload verifies it in the same pass; every other check is made here.
bool parse_tcp_frame_parts(Bytes headers, std::span<const Bytes> payload, TcpFrame& out,
                           Checksums checksums = Checksums::kFull,
                           std::uint64_t* payload_sum = nullptr);

// The length emit_tcp_frame() writes.
std::size_t tcp_frame_len(const FrameRepr& repr, std::size_t payload_len);

// Writes the frame (out.size() >= tcp_frame_len()), with the IPv4 header checksum
// and the TCP checksum; with Checksums::kOffload both fields are zero and the frame is
// otherwise the same, byte for byte. Returns the length written.
std::size_t emit_tcp_frame(const FrameRepr& repr, Bytes payload, MutBytes out,
                           Checksums checksums = Checksums::kFull);

// emit_tcp_frame() without the payload, given in pieces: writes everything up to the end of
// the TCP header (the checksum summed over the pieces where they lie, of any lengths) and
// returns that length; the payload's room after it (out.size() >= tcp_frame_len()) is left
// as it is. The headers followed by the pieces are the frame emit_tcp_frame() writes for
// their concatenation.
std::size_t emit_tcp_frame_headers(const FrameRepr& repr, std::span<const Bytes> payload,
                                   MutBytes out, Checksums checksums = Checksums::kFull);

// The same frame with the payload given in pieces, gathered in order (a
// stream's segment whose bytes lie partly in registered memory): byte for
// byte what emit_tcp_frame() writes for their concatenation. The TCP
// checksum is summed over the payload once it is in the frame, so the
// pieces may have any lengths. Checksums as emit_tcp_frame().
std::size_t emit_tcp_frame_gather(const FrameRepr& repr, std::span<const Bytes> pieces,
                                  MutBytes out, Checksums checksums = Checksums::kFull);

// One IPv4 segment of a connection as flat values: the engine's sending path, which knows
// every field, writes it without a FrameRepr to fill and read back. The frame is byte for
// byte the one emit_tcp_frame() writes for the FrameRepr with the same values, IPv4 ident 0
// with DF set, urgent 0, and at most the MSS and window-scale options (frame_test checks).
struct SegmentV4 {
    const MacAddr* dst_mac = nullptr;
    const MacAddr* src_mac = nullptr;
    std::uint32_t src_ip = 0;  // host order
    std::uint32_t dst_ip = 0;
    std::uint16_t vlan_tci = 0;  // the 802.1Q tag's TCI (PCP, DEI, id) when tagged
    bool tagged = false;
    std::uint8_t ttl = 64;
    std::uint8_t tos = 0;
    std::uint8_t flags = 0;
    std::uint16_t src_port = 0;
    std::uint16_t dst_port = 0;
    std::uint32_t seq = 0;
    std::uint32_t ack = 0;
    std::uint16_t window = 0;
    std::uint16_t mss = 0;     // the MSS option's value; 0: no MSS option
    std::int16_t wscale = -1;  // the window-scale option's shift; -1: no such option
    // kOffload: both checksum fields zero, nothing summed (as emit_tcp_frame's argument).
    Checksums checksums = Checksums::kFull;
};

// The length emit_segment_v4() writes. Inline: the caller asks it for every frame.
inline std::size_t segment_v4_len(const SegmentV4& s, std::size_t payload_len) {
    return (s.tagged ? kEthernetVlanHeaderLen : kEthernetHeaderLen) + Ipv4Repr::kHeaderLen +
           kTcpHeaderLen + (s.mss != 0 ? 4 : 0) + (s.wscale >= 0 ? 4 : 0) + payload_len;
}

// Writes the frame (out.size() >= segment_v4_len()); returns the length written.
std::size_t emit_segment_v4(const SegmentV4& s, Bytes payload, MutBytes out);

}  // namespace iwcm::wire
