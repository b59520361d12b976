// IPv4: parse and emit.
//
// Read first: ipv4.hpp, RFC 791 section 3.1.
#include "wire/ipv4.hpp"

#include <cstring>

#include "wire/checksum.hpp"

namespace iwcm::wire {

using enum ParseErrorKind;  // the first argument of decode_fail()

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
constexpr std::uint8_t kOptLsrr = 131;
constexpr std::uint8_t kOptSsrr = 137;

// One 4-byte copy: the address is kept in network order, as on the wire.
Ipv4Addr load_addr(Bytes b, std::size_t off) {
    IWCM_ASSERT(off + 4 <= b.size());
    Ipv4Addr a;
    std::memcpy(a.bytes.data(), b.data() + off, 4);
    return a;
}

// The fields that need no check once the header's shape is known good.
void decode_fields(Bytes h, Ipv4Repr& r) {
    r.tos = load_u8(h, kTosOff);
    r.ident = load_be16(h, kIdentOff);
    r.dont_fragment = (load_be16(h, kFlagsOff) & kFlagDf) != 0;
    r.ttl = load_u8(h, kTtlOff);
    r.protocol = load_u8(h, kProtoOff);
    r.src = load_addr(h, kSrcOff);
    r.dst = load_addr(h, kDstOff);
}

// Walks the options h[20, h.size()) (bytes.hpp, walk_type_length_options) and
// refuses the source routes.
DecodeStatus check_options(Bytes h) {
    return walk_type_length_options(
        h, Ipv4Repr::kHeaderLen, kLayer,
        [](std::size_t off, std::uint8_t type, std::uint8_t) -> DecodeStatus {
            if (type == kOptLsrr || type == kOptSsrr)
                return decode_fail(kBadOption, kLayer, "option", off, "source route refused");
            return std::nullopt;
        });
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
    std::memcpy(out.data() + kSrcOff, src.bytes.data(), 4);
    std::memcpy(out.data() + kDstOff, dst.bytes.data(), 4);
    store_be16(out, kChecksumOff, internet_checksum(out.first(kHeaderLen)));
}

namespace detail {

DecodeStatus decode_ipv4(Bytes packet, Ipv4Repr& repr, Bytes& payload, Checksums checksums) {
    constexpr std::size_t kHdr = Ipv4Repr::kHeaderLen;
    if (packet.size() < kHdr)
        return decode_fail(kTruncated, kLayer, "header", packet.size(), "truncated header");
    const std::uint8_t ver_ihl = load_u8(packet, kVerIhlOff);
    if ((ver_ihl >> 4) != 4)
        return decode_fail(kBadValue, kLayer, "version", kVerIhlOff, "version is not 4");
    const std::size_t header_len = std::size_t{ver_ihl & 0xFu} * 4;
    if (header_len < kHdr) return decode_fail(kBadLength, kLayer, "ihl", kVerIhlOff, "IHL below 5");
    if (header_len > packet.size())
        return decode_fail(kTruncated, kLayer, "options", packet.size(), "truncated options");
    const std::uint16_t total_len = load_be16(packet, kTotalLenOff);
    if (total_len < header_len)
        return decode_fail(kBadLength, kLayer, "total_length", kTotalLenOff,
                           "total length below header length");
    if (total_len > packet.size())
        return decode_fail(kBadLength, kLayer, "total_length", kTotalLenOff,
                           "total length beyond the buffer");
    const Bytes header = packet.first(header_len);
    if (checksums == Checksums::kFull && internet_checksum(header) != 0)
        return decode_fail(kBadChecksum, kLayer, "checksum", kChecksumOff, "bad header checksum");
    const std::uint16_t flags = load_be16(packet, kFlagsOff);
    if ((flags & kFlagMf) != 0 || (flags & kFragOffsetMask) != 0)
        return decode_fail(kFragment, kLayer, "fragment", kFlagsOff, "fragments not supported");
    if (auto e = check_options(header)) return e;
    decode_fields(packet, repr);
    repr.payload_len = static_cast<std::uint16_t>(total_len - header_len);
    payload = packet.subspan(header_len, total_len - header_len);
    return std::nullopt;
}

}  // namespace detail

ParseResult<Ipv4Packet> parse_ipv4(Bytes packet) {
    Ipv4Packet p;
    if (auto e = detail::decode_ipv4(packet, p.repr, p.payload)) return iwcm::fail(*e);
    const auto header_len = static_cast<std::size_t>(p.payload.data() - packet.data());
    p.options = packet.subspan(Ipv4Repr::kHeaderLen, header_len - Ipv4Repr::kHeaderLen);
    return p;
}

}  // namespace iwcm::wire
