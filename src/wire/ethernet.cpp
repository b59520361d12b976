// Ethernet II and 802.1Q: parse and emit.
//
// Read first: ethernet.hpp.
#include "wire/ethernet.hpp"

namespace iwcm::wire {

using enum ParseErrorKind;  // the first argument of decode_fail() and parse_fail()

namespace {

constexpr const char* kLayer = "ethernet";
constexpr std::size_t kDstOff = 0;
constexpr std::size_t kSrcOff = 6;
constexpr std::size_t kInnerTypeOff = 16;

MacAddr load_mac(Bytes b, std::size_t off) {
    MacAddr m;
    for (std::size_t i = 0; i < 6; ++i) m.bytes[i] = load_u8(b, off + i);
    return m;
}

void store_mac(MutBytes b, std::size_t off, const MacAddr& m) {
    for (std::size_t i = 0; i < 6; ++i) store_u8(b, off + i, m.bytes[i]);
}

VlanTag decode_tci(std::uint16_t tci) {
    return VlanTag{static_cast<std::uint16_t>(tci & kVlanIdMax),
                   static_cast<std::uint8_t>(tci >> 13), (tci & 0x1000u) != 0};
}

std::uint16_t encode_tci(const VlanTag& t) {
    IWCM_ASSERT(t.id <= kVlanIdMax);
    IWCM_ASSERT(t.priority <= 7);
    return static_cast<std::uint16_t>((t.priority << 13) | (t.dei ? 0x1000u : 0u) | t.id);
}

}  // namespace

void EthernetRepr::emit(MutBytes out) const {
    IWCM_ASSERT(out.size() >= header_len());
    store_mac(out, kDstOff, dst);
    store_mac(out, kSrcOff, src);
    if (vlan) {
        store_be16(out, kEthernetTypeOff, kEtherTypeVlan);
        store_be16(out, kEthernetTciOff, encode_tci(*vlan));
        store_be16(out, kInnerTypeOff, ethertype);
    } else {
        store_be16(out, kEthernetTypeOff, ethertype);
    }
}

namespace detail {

DecodeStatus decode_ethernet(Bytes frame, EthernetRepr& repr, Bytes& payload) {
    if (frame.size() < kEthernetHeaderLen)
        return decode_fail(kTruncated, kLayer, "header", frame.size(),
                           "frame shorter than 14 bytes");
    repr.dst = load_mac(frame, kDstOff);
    repr.src = load_mac(frame, kSrcOff);
    const std::uint16_t type = load_be16(frame, kEthernetTypeOff);
    if (type != kEtherTypeVlan) {
        repr.vlan.reset();
        repr.ethertype = type;
        payload = frame.subspan(kEthernetHeaderLen);
        return std::nullopt;
    }
    if (frame.size() < kEthernetVlanHeaderLen)
        return decode_fail(kTruncated, kLayer, "vlan_tag", kEthernetTciOff, "802.1Q tag truncated");
    repr.vlan = decode_tci(load_be16(frame, kEthernetTciOff));
    repr.ethertype = load_be16(frame, kInnerTypeOff);
    payload = frame.subspan(kEthernetVlanHeaderLen);
    return std::nullopt;
}

}  // namespace detail

ParseResult<EthernetFrame> parse_ethernet(Bytes frame) {
    EthernetFrame f;
    if (auto e = detail::decode_ethernet(frame, f.repr, f.payload)) return iwcm::fail(*e);
    return f;
}

}  // namespace iwcm::wire
