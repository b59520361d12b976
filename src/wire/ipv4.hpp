// IPv4 headers: options parsed and skipped, fragments refused.
//
// Read first: RFC 791 section 3.1 (the header and its options), RFC 1071 (its
// checksum), RFC 6864 (the identification field of atomic datagrams), RFC 7126
// section 4 (which options a host should drop). A connection manager's segments
// are small and sent with DF set, so a fragment is refused (kind kFragment)
// rather than reassembled. Options are walked for well-formedness and skipped:
// nothing here acts on one (a Router Alert or a timestamp changes nothing for
// TCP), and what we send carries none. The two source-route options (LSRR 131,
// SSRR 137) are refused, as RFC 7126 advises and Linux does by default
// (accept_source_route 0): answering one would mean reversing its route.
#pragma once

#include <cstdint>

#include "iwcm/address.hpp"
#include "wire/bytes.hpp"
#include "wire/checksum.hpp"

namespace iwcm::wire {

struct Ipv4Repr {
    Ipv4Addr src;
    Ipv4Addr dst;
    std::uint8_t protocol = kIpProtoTcp;
    std::uint8_t ttl = 64;
    std::uint8_t tos = 0;  // DSCP and ECN, the whole byte
    std::uint16_t ident = 0;
    bool dont_fragment = true;
    std::uint16_t payload_len = 0;

    static constexpr std::size_t kHeaderLen = 20;
    // Writes the 20-byte header, its checksum included, at the start of out.
    void emit(MutBytes out) const;
    friend bool operator==(const Ipv4Repr&, const Ipv4Repr&) = default;
};

// repr is the header as we would write it: payload_len counts the payload only,
// so emitting repr drops any options the packet had.
struct Ipv4Packet {
    Ipv4Repr repr;
    Bytes payload;  // cut to the total length
    Bytes options;  // the IHL beyond 20 bytes, padding included; empty without options
};

// Checks: version 4; IHL at least 5 and within the buffer; total length at least
// the IHL and not beyond the buffer (a longer buffer is Ethernet padding and is
// cut off); the header checksum over the IHL; MF clear and fragment offset zero;
// options well formed (EOL ends them, NOP is one byte, any other has a length
// byte of at least 2 that stays within the header) and not a source route. The
// reserved flag bit is ignored (RFC 791 gives it no meaning to act on).
ParseResult<Ipv4Packet> parse_ipv4(Bytes packet);

namespace detail {
// parse_ipv4() writing into its arguments; the options are payload.data() -
// packet.data() - 20 bytes from offset 20. With Checksums::kOffload the header
// checksum is not verified (frame.hpp, parse_tcp_frame).
DecodeStatus decode_ipv4(Bytes packet, Ipv4Repr& repr, Bytes& payload,
                         Checksums checksums = Checksums::kFull);
}  // namespace detail

}  // namespace iwcm::wire
