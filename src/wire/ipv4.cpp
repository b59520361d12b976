// IPv4: parse and emit.
//
// Read first: ipv4.hpp, RFC 791 section 3.1.
#include "wire/ipv4.hpp"

#include "wire/checksum.hpp"

namespace iwcm::wire {

namespace {

constexpr const char* kLayer = "ipv4";
constexpr std::size_t kVerIhlOff = 0;
constexpr std::size_t kTosOff = 1;
constexpr std::size_t kTotalLenOff = 2;
constexpr std::size_t kIdentOff = 4;
constexpr std::size_t kFlagsOff = 6;
constexpr std::size_t kTtlOff = 8;
constexpr std::size_t kProtoOff = 9;
constexpr std::size_t kChecksumOff = 10;
constexpr std::size_t kSrcOff = 12;
constexpr std::size_t kDstOff = 16;
constexpr std::uint16_t kFlagDf = 0x4000;
constexpr std::uint16_t kFlagMf = 0x2000;
constexpr std::uint16_t kFragOffsetMask = 0x1FFF;

Ipv4Addr load_addr(Bytes b, std::size_t off) { return Ipv4Addr::from_u32(load_be32(b, off)); }

// The fields that need no check once the header's shape is known good.
Ipv4Repr decode(Bytes h, std::uint16_t total_len) {
    Ipv4Repr r;
    r.tos = load_u8(h, kTosOff);
    r.ident = load_be16(h, kIdentOff);
    r.dont_fragment = (load_be16(h, kFlagsOff) & kFlagDf) != 0;
    r.ttl = load_u8(h, kTtlOff);
    r.protocol = load_u8(h, kProtoOff);
    r.src = load_addr(h, kSrcOff);
    r.dst = load_addr(h, kDstOff);
    r.payload_len = static_cast<std::uint16_t>(total_len - Ipv4Repr::kHeaderLen);
    return r;
}

}  // namespace

void Ipv4Repr::emit(MutBytes out) const {
    IWCM_ASSERT(out.size() >= kHeaderLen);
    IWCM_ASSERT(payload_len <= 0xFFFF - kHeaderLen);
    store_u8(out, kVerIhlOff, 0x45);
    store_u8(out, kTosOff, tos);
    store_be16(out, kTotalLenOff, static_cast<std::uint16_t>(kHeaderLen + payload_len));
    store_be16(out, kIdentOff, ident);
    store_be16(out, kFlagsOff, dont_fragment ? kFlagDf : 0);
    store_u8(out, kTtlOff, ttl);
    store_u8(out, kProtoOff, protocol);
    store_be16(out, kChecksumOff, 0);
    store_be32(out, kSrcOff, src.to_u32());
    store_be32(out, kDstOff, dst.to_u32());
    store_be16(out, kChecksumOff, internet_checksum(out.first(kHeaderLen)));
}

ParseResult<Ipv4Packet> parse_ipv4(Bytes packet) {
    constexpr std::size_t kHdr = Ipv4Repr::kHeaderLen;
    if (packet.size() < kHdr) return parse_fail(kLayer, "header", packet.size(), "truncated header");
    const std::uint8_t ver_ihl = load_u8(packet, kVerIhlOff);
    if ((ver_ihl >> 4) != 4) return parse_fail(kLayer, "version", kVerIhlOff, "version is not 4");
    if ((ver_ihl & 0xF) < 5) return parse_fail(kLayer, "ihl", kVerIhlOff, "IHL below 5");
    if ((ver_ihl & 0xF) > 5)
        return parse_fail(kLayer, "ihl", kVerIhlOff, "IP options not supported");
    const std::uint16_t total_len = load_be16(packet, kTotalLenOff);
    if (total_len < kHdr)
        return parse_fail(kLayer, "total_length", kTotalLenOff, "total length below header length");
    if (total_len > packet.size())
        return parse_fail(kLayer, "total_length", kTotalLenOff, "total length beyond the buffer");
    const std::uint16_t flags = load_be16(packet, kFlagsOff);
    if ((flags & kFlagMf) != 0 || (flags & kFragOffsetMask) != 0)
        return parse_fail(kLayer, "fragment", kFlagsOff, "fragments not supported");
    if (internet_checksum(packet.first(kHdr)) != 0)
        return parse_fail(kLayer, "checksum", kChecksumOff, "bad header checksum");
    return Ipv4Packet{decode(packet, total_len), packet.subspan(kHdr, total_len - kHdr)};
}

}  // namespace iwcm::wire
