// IPv6: parse and emit.
//
// Read first: ipv6.hpp, RFC 8200 section 3.
#include "wire/ipv6.hpp"

#include "wire/ipv4.hpp"

namespace iwcm::wire {

namespace {

constexpr const char* kLayer = "ipv6";
constexpr std::size_t kVersionOff = 0;
constexpr std::size_t kPayloadLenOff = 4;
constexpr std::size_t kNextHeaderOff = 6;
constexpr std::size_t kHopLimitOff = 7;
constexpr std::size_t kSrcOff = 8;
constexpr std::size_t kDstOff = 24;

Ipv6Addr load_addr(Bytes b, std::size_t off) {
    Ipv6Addr a;
    for (std::size_t i = 0; i < 16; ++i) a.bytes[i] = load_u8(b, off + i);
    return a;
}

void store_addr(MutBytes b, std::size_t off, const Ipv6Addr& a) {
    for (std::size_t i = 0; i < 16; ++i) store_u8(b, off + i, a.bytes[i]);
}

}  // namespace

void Ipv6Repr::emit(MutBytes out) const {
    IWCM_ASSERT(out.size() >= kHeaderLen);
    IWCM_ASSERT(flow_label <= kFlowLabelMax);
    const std::uint32_t first = (6u << 28) | (std::uint32_t{traffic_class} << 20) | flow_label;
    store_be32(out, kVersionOff, first);
    store_be16(out, kPayloadLenOff, payload_len);
    store_u8(out, kNextHeaderOff, next_header);
    store_u8(out, kHopLimitOff, hop_limit);
    store_addr(out, kSrcOff, src);
    store_addr(out, kDstOff, dst);
}

namespace detail {

DecodeStatus decode_ipv6(Bytes packet, Ipv6Repr& repr, Bytes& payload) {
    constexpr std::size_t kHdr = Ipv6Repr::kHeaderLen;
    if (packet.size() < kHdr)
        return decode_fail(kLayer, "header", packet.size(), "truncated header");
    const std::uint32_t first = load_be32(packet, kVersionOff);
    if ((first >> 28) != 6) return decode_fail(kLayer, "version", kVersionOff, "version is not 6");
    const std::uint16_t payload_len = load_be16(packet, kPayloadLenOff);
    if (payload_len > packet.size() - kHdr)
        return decode_fail(kLayer, "payload_length", kPayloadLenOff,
                           "payload length beyond the buffer");
    const std::uint8_t next = load_u8(packet, kNextHeaderOff);
    if (next != kIpProtoTcp && next != kIpProtoIcmpv6)
        return decode_fail(kLayer, "next_header", kNextHeaderOff, "extension header not supported");
    repr.traffic_class = static_cast<std::uint8_t>(first >> 20);
    repr.flow_label = first & kFlowLabelMax;
    repr.payload_len = payload_len;
    repr.next_header = next;
    repr.hop_limit = load_u8(packet, kHopLimitOff);
    repr.src = load_addr(packet, kSrcOff);
    repr.dst = load_addr(packet, kDstOff);
    payload = packet.subspan(kHdr, payload_len);
    return std::nullopt;
}

}  // namespace detail

ParseResult<Ipv6Packet> parse_ipv6(Bytes packet) {
    Ipv6Packet p;
    if (auto e = detail::decode_ipv6(packet, p.repr, p.payload)) return iwcm::fail(*e);
    return p;
}

}  // namespace iwcm::wire
