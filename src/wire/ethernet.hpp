// Ethernet II frames with an optional IEEE 802.1Q VLAN tag.
//
// Read first: IEEE 802.3 clause 3.1 (destination, source, type), IEEE 802.1Q
// section 9.6 (the tag: TPID 0x8100, then PCP 3 bits, DEI 1 bit, VID 12 bits),
// RFC 894 (IP over Ethernet). The frame check sequence is not part of the bytes
// seen here: the NIC (or TAP device) strips and adds it.
#pragma once

#include <cstdint>
#include <optional>

#include "iwcm/address.hpp"
#include "wire/bytes.hpp"

namespace iwcm::wire {

constexpr std::uint16_t kEtherTypeIpv4 = 0x0800;
constexpr std::uint16_t kEtherTypeArp = 0x0806;
constexpr std::uint16_t kEtherTypeVlan = 0x8100;
constexpr std::uint16_t kEtherTypeIpv6 = 0x86DD;

constexpr std::size_t kEthernetHeaderLen = 14;
constexpr std::size_t kEthernetVlanHeaderLen = 18;
constexpr std::uint16_t kVlanIdMax = 0x0FFF;
// Where the type sits (an 802.1Q tag's TPID when the frame is tagged), and the tag's TCI.
constexpr std::size_t kEthernetTypeOff = 12;
constexpr std::size_t kEthernetTciOff = 14;

struct VlanTag {
    std::uint16_t id = 0;       // 12 bits
    std::uint8_t priority = 0;  // PCP, 3 bits
    bool dei = false;
    friend constexpr bool operator==(const VlanTag&, const VlanTag&) = default;
};

struct EthernetRepr {
    MacAddr dst;
    MacAddr src;
    std::optional<VlanTag> vlan;
    std::uint16_t ethertype = 0;  // the inner type when tagged

    std::size_t header_len() const { return vlan ? kEthernetVlanHeaderLen : kEthernetHeaderLen; }
    // Writes header_len() bytes at the start of out.
    void emit(MutBytes out) const;
    friend bool operator==(const EthernetRepr&, const EthernetRepr&) = default;
};

struct EthernetFrame {
    EthernetRepr repr;
    Bytes payload;
};

// Accepts one 802.1Q tag; a second tag (or an 802.1ad outer tag) is left as the
// ethertype for the caller to refuse. Frames shorter than the header are refused.
ParseResult<EthernetFrame> parse_ethernet(Bytes frame);

// The VLAN id parse_ethernet() would find in `frame` (its 802.1Q tag's VID), or `untagged`
// when it has no tag; read before the parse, from a frame of at least kEthernetVlanHeaderLen
// bytes. Always inline, as load_be16 is: the core calls it on every frame that comes with a
// flow hash, and a call there cost more than the read.
[[gnu::always_inline]] inline std::uint16_t peek_vlan_id(Bytes frame, std::uint16_t untagged) {
    IWCM_ASSERT(frame.size() >= kEthernetVlanHeaderLen);
    if (load_be16(frame, kEthernetTypeOff) != kEtherTypeVlan) return untagged;
    return static_cast<std::uint16_t>(load_be16(frame, kEthernetTciOff) & kVlanIdMax);
}

namespace detail {
// parse_ethernet() writing into its arguments.
DecodeStatus decode_ethernet(Bytes frame, EthernetRepr& repr, Bytes& payload);
}  // namespace detail

}  // namespace iwcm::wire
