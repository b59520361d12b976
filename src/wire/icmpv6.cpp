// ICMPv6 neighbour discovery: parse and emit. Read first: icmpv6.hpp, RFC 4861.
#include "wire/icmpv6.hpp"

#include "wire/checksum.hpp"
#include "wire/ipv6.hpp"

namespace iwcm::wire {

using enum ParseErrorKind;  // the first argument of decode_fail() and parse_fail()

namespace {

constexpr const char* kLayer = "icmpv6";
constexpr std::size_t kTypeOff = 0;
constexpr std::size_t kCodeOff = 1;
constexpr std::size_t kChecksumOff = 2;
constexpr std::size_t kFlagsOff = 4;
constexpr std::size_t kTargetOff = 8;
constexpr std::size_t kOptionsOff = 24;
constexpr std::uint8_t kOptSourceLl = 1;
constexpr std::uint8_t kOptTargetLl = 2;
constexpr std::uint8_t kFlagRouter = 0x80;
constexpr std::uint8_t kFlagSolicited = 0x40;
constexpr std::uint8_t kFlagOverride = 0x20;

std::uint16_t icmp_checksum(Bytes msg, const Ipv6Addr& src, const Ipv6Addr& dst) {
    const std::uint32_t ph = pseudo_header_sum(IpAddr(src), IpAddr(dst), kIpProtoIcmpv6,
                                               static_cast<std::uint32_t>(msg.size()));
    return internet_checksum(msg, ph);
}

}  // namespace

void NdRepr::emit(const Ipv6Addr& src, const Ipv6Addr& dst, MutBytes out) const {
    const std::size_t len = buffer_len();
    IWCM_ASSERT(out.size() >= len);
    IWCM_ASSERT(target.bytes[0] != 0xff);
    MutBytes msg = out.first(len);
    for (auto& b : msg) b = std::byte{0};
    const bool ns = kind == NdKind::kSolicitation;
    store_u8(msg, kTypeOff, ns ? kIcmpv6NeighborSolicit : kIcmpv6NeighborAdvert);
    if (!ns) {
        std::uint8_t f = 0;
        if (router) f |= kFlagRouter;
        if (solicited) f |= kFlagSolicited;
        if (override_flag) f |= kFlagOverride;
        store_u8(msg, kFlagsOff, f);
    }
    for (std::size_t i = 0; i < 16; ++i) store_u8(msg, kTargetOff + i, target.bytes[i]);
    if (lladdr) {
        store_u8(msg, kOptionsOff, ns ? kOptSourceLl : kOptTargetLl);
        store_u8(msg, kOptionsOff + 1, 1);
        for (std::size_t i = 0; i < 6; ++i) store_u8(msg, kOptionsOff + 2 + i, lladdr->bytes[i]);
    }
    store_be16(msg, kChecksumOff, icmp_checksum(msg, src, dst));
}

ParseResult<NdRepr> parse_nd(Bytes icmp, const Ipv6Addr& src, const Ipv6Addr& dst) {
    if (icmp.size() < 4)
        return parse_fail(kTruncated, kLayer, "header", icmp.size(), "truncated header");
    const std::uint8_t type = load_u8(icmp, kTypeOff);
    if (type != kIcmpv6NeighborSolicit && type != kIcmpv6NeighborAdvert)
        return parse_fail(kBadValue, kLayer, "type", kTypeOff, "not neighbour discovery");
    if (icmp.size() < kNdMinLen)
        return parse_fail(kTruncated, kLayer, "length", icmp.size(), "shorter than 24 bytes");
    if (icmp_checksum(icmp, src, dst) != 0)
        return parse_fail(kBadChecksum, kLayer, "checksum", kChecksumOff, "bad checksum");
    if (load_u8(icmp, kCodeOff) != 0)
        return parse_fail(kBadValue, kLayer, "code", kCodeOff, "code is not 0");
    NdRepr r;
    r.kind = type == kIcmpv6NeighborSolicit ? NdKind::kSolicitation : NdKind::kAdvertisement;
    for (std::size_t i = 0; i < 16; ++i) r.target.bytes[i] = load_u8(icmp, kTargetOff + i);
    if (r.target.bytes[0] == 0xff)
        return parse_fail(kBadValue, kLayer, "target", kTargetOff, "multicast target");
    if (r.kind == NdKind::kAdvertisement) {
        const std::uint8_t f = load_u8(icmp, kFlagsOff);
        r.router = (f & kFlagRouter) != 0;
        r.solicited = (f & kFlagSolicited) != 0;
        r.override_flag = (f & kFlagOverride) != 0;
    }
    const std::uint8_t wanted = r.kind == NdKind::kSolicitation ? kOptSourceLl : kOptTargetLl;
    std::size_t off = kOptionsOff;
    while (off < icmp.size()) {
        if (off + 2 > icmp.size())
            return parse_fail(kBadOption, kLayer, "option", off, "truncated option");
        const std::size_t olen = std::size_t{load_u8(icmp, off + 1)} * 8;
        if (olen == 0)
            return parse_fail(kBadOption, kLayer, "option_length", off + 1, "option of length 0");
        if (off + olen > icmp.size())
            return parse_fail(kBadOption, kLayer, "option_length", off + 1, "option past the end");
        if (load_u8(icmp, off) == wanted && olen >= 8) {
            MacAddr m;
            for (std::size_t i = 0; i < 6; ++i) m.bytes[i] = load_u8(icmp, off + 2 + i);
            r.lladdr = m;
        }
        off += olen;
    }
    return r;
}

Ipv6Addr solicited_node_multicast(const Ipv6Addr& addr) {
    Ipv6Addr m{{0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, 0xff, 0, 0, 0}};
    m.bytes[13] = addr.bytes[13];
    m.bytes[14] = addr.bytes[14];
    m.bytes[15] = addr.bytes[15];
    return m;
}

MacAddr ipv6_multicast_mac(const Ipv6Addr& group) {
    IWCM_ASSERT(group.bytes[0] == 0xff);
    return {{0x33, 0x33, group.bytes[12], group.bytes[13], group.bytes[14], group.bytes[15]}};
}

}  // namespace iwcm::wire
