// IPv6: parse and emit.
//
// Read first: ipv6.hpp, RFC 8200 sections 3 and 4.
#include "wire/ipv6.hpp"

#include "wire/ipv4.hpp"

namespace iwcm::wire {

using enum ParseErrorKind;  // the first argument of decode_fail()

namespace {

constexpr const char* kLayer = "ipv6";
constexpr std::size_t kVersionOff = 0;
constexpr std::size_t kPayloadLenOff = 4;
constexpr std::size_t kNextHeaderOff = 6;
constexpr std::size_t kHopLimitOff = 7;
constexpr std::size_t kSrcOff = 8;
constexpr std::size_t kDstOff = 24;
constexpr std::uint8_t kOptPad1 = 0;
constexpr std::uint8_t kOptPadN = 1;
constexpr std::size_t kRoutingSegmentsLeftOff = 3;

Ipv6Addr load_addr(Bytes b, std::size_t off) {
    Ipv6Addr a;
    for (std::size_t i = 0; i < 16; ++i) a.bytes[i] = load_u8(b, off + i);
    return a;
}

void store_addr(MutBytes b, std::size_t off, const Ipv6Addr& a) {
    for (std::size_t i = 0; i < 16; ++i) store_u8(b, off + i, a.bytes[i]);
}

// Walks the options of a hop-by-hop or destination options header h (RFC 8200
// 4.2): Pad1 is one byte, any other option is type, data length, data. `base` is
// h's offset in the packet, for the error offsets.
DecodeStatus check_tlv_options(Bytes h, std::size_t base) {
    std::size_t off = 2;  // after the next header and length bytes
    while (off < h.size()) {
        const std::uint8_t type = load_u8(h, off);
        if (type == kOptPad1) {
            ++off;
            continue;
        }
        if (off + 2 > h.size())
            return decode_fail(kBadOption, kLayer, "option_length", base + off,
                               "option length byte missing");
        const std::size_t len = 2 + std::size_t{load_u8(h, off + 1)};
        if (off + len > h.size())
            return decode_fail(kBadOption, kLayer, "option_length", base + off + 1,
                               "option runs past the header");
        // The two high bits of an unrecognised option's type: 00 skip it, else discard.
        if (type != kOptPadN && (type >> 6) != 0)
            return decode_fail(kBadOption, kLayer, "option", base + off,
                               "unrecognised option asks for a discard");
        off += len;
    }
    return std::nullopt;
}

bool is_walked(std::uint8_t next) {
    return next == ipv6_next::kHopByHop || next == ipv6_next::kDestinationOptions ||
           next == ipv6_next::kRouting || next == ipv6_next::kFragment;
}

// Walks the extension headers of packet (cut to 40 + payload length) from `off`
// (40) with `next` the IPv6 header's next header. On success `next` is the
// upper-layer protocol and `off` where its bytes start. ipv6.hpp lists the rules.
DecodeStatus walk_extensions(Bytes packet, std::uint8_t& next, std::size_t& off) {
    std::size_t next_off = kNextHeaderOff;  // where `next` was read, for errors
    for (std::size_t count = 0; is_walked(next); ++count) {
        if (next == ipv6_next::kFragment)
            return decode_fail(kFragment, kLayer, "fragment", off, "fragments not supported");
        if (next == ipv6_next::kHopByHop && count != 0)
            return decode_fail(kBadValue, kLayer, "next_header", next_off,
                               "hop-by-hop options not first");
        if (count == kMaxExtensionHeaders)
            return decode_fail(kBadValue, kLayer, "next_header", next_off,
                               "more than 8 extension headers");
        if (off + 2 > packet.size())
            return decode_fail(kBadLength, kLayer, "extension_header", off,
                               "extension header past the payload length");
        const std::size_t len = (std::size_t{load_u8(packet, off + 1)} + 1) * 8;
        if (off + len > packet.size())
            return decode_fail(kBadLength, kLayer, "hdr_ext_len", off + 1,
                               "extension header past the payload length");
        const Bytes h = packet.subspan(off, len);
        if (next == ipv6_next::kRouting) {
            if (load_u8(h, kRoutingSegmentsLeftOff) != 0)
                return decode_fail(kBadValue, kLayer, "segments_left",
                                   off + kRoutingSegmentsLeftOff,
                                   "routing header with segments left");
        } else if (auto e = check_tlv_options(h, off)) {
            return e;
        }
        next_off = off;
        next = load_u8(h, 0);
        off += len;
    }
    return std::nullopt;
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
        return decode_fail(kTruncated, kLayer, "header", packet.size(), "truncated header");
    const std::uint32_t first = load_be32(packet, kVersionOff);
    if ((first >> 28) != 6)
        return decode_fail(kBadValue, kLayer, "version", kVersionOff, "version is not 6");
    const std::uint16_t payload_len = load_be16(packet, kPayloadLenOff);
    if (payload_len > packet.size() - kHdr)
        return decode_fail(kBadLength, kLayer, "payload_length", kPayloadLenOff,
                           "payload length beyond the buffer");
    const Bytes whole = packet.first(kHdr + payload_len);
    std::uint8_t next = load_u8(packet, kNextHeaderOff);
    std::size_t upper_off = kHdr;
    if (auto e = walk_extensions(whole, next, upper_off)) return e;
    repr.traffic_class = static_cast<std::uint8_t>(first >> 20);
    repr.flow_label = first & kFlowLabelMax;
    repr.payload_len = static_cast<std::uint16_t>(whole.size() - upper_off);
    repr.next_header = next;
    repr.hop_limit = load_u8(packet, kHopLimitOff);
    repr.src = load_addr(packet, kSrcOff);
    repr.dst = load_addr(packet, kDstOff);
    payload = whole.subspan(upper_off);
    return std::nullopt;
}

}  // namespace detail

ParseResult<Ipv6Packet> parse_ipv6(Bytes packet) {
    Ipv6Packet p;
    if (auto e = detail::decode_ipv6(packet, p.repr, p.payload)) return iwcm::fail(*e);
    const auto upper_off = static_cast<std::size_t>(p.payload.data() - packet.data());
    p.extensions = packet.subspan(Ipv6Repr::kHeaderLen, upper_off - Ipv6Repr::kHeaderLen);
    return p;
}

}  // namespace iwcm::wire
