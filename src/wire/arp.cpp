// ARP: parse and emit. Read first: arp.hpp, RFC 826.
#include "wire/arp.hpp"

#include "wire/ethernet.hpp"

namespace iwcm::wire {

using enum ParseErrorKind;  // the first argument of decode_fail() and parse_fail()

namespace {

constexpr const char* kLayer = "arp";
constexpr std::size_t kHtypeOff = 0;
constexpr std::size_t kPtypeOff = 2;
constexpr std::size_t kHlenOff = 4;
constexpr std::size_t kPlenOff = 5;
constexpr std::size_t kOpOff = 6;
constexpr std::size_t kSenderMacOff = 8;
constexpr std::size_t kSenderIpOff = 14;
constexpr std::size_t kTargetMacOff = 18;
constexpr std::size_t kTargetIpOff = 24;
constexpr std::uint16_t kHtypeEthernet = 1;

MacAddr load_mac(Bytes b, std::size_t off) {
    MacAddr m;
    for (std::size_t i = 0; i < 6; ++i) m.bytes[i] = load_u8(b, off + i);
    return m;
}

Ipv4Addr load_ip(Bytes b, std::size_t off) {
    Ipv4Addr a;
    for (std::size_t i = 0; i < 4; ++i) a.bytes[i] = load_u8(b, off + i);
    return a;
}

void store_mac(MutBytes b, std::size_t off, const MacAddr& m) {
    for (std::size_t i = 0; i < 6; ++i) store_u8(b, off + i, m.bytes[i]);
}

void store_ip(MutBytes b, std::size_t off, const Ipv4Addr& a) {
    for (std::size_t i = 0; i < 4; ++i) store_u8(b, off + i, a.bytes[i]);
}

}  // namespace

void ArpRepr::emit(MutBytes out) const {
    IWCM_ASSERT(out.size() >= kArpLen);
    IWCM_ASSERT(op == ArpOp::kRequest || op == ArpOp::kReply);
    store_be16(out, kHtypeOff, kHtypeEthernet);
    store_be16(out, kPtypeOff, kEtherTypeIpv4);
    store_u8(out, kHlenOff, 6);
    store_u8(out, kPlenOff, 4);
    store_be16(out, kOpOff, static_cast<std::uint16_t>(op));
    store_mac(out, kSenderMacOff, sender_mac);
    store_ip(out, kSenderIpOff, sender_ip);
    store_mac(out, kTargetMacOff, target_mac);
    store_ip(out, kTargetIpOff, target_ip);
}

ParseResult<ArpRepr> parse_arp(Bytes packet) {
    if (packet.size() < kArpLen)
        return parse_fail(kTruncated, kLayer, "packet", packet.size(), "truncated packet");
    if (load_be16(packet, kHtypeOff) != kHtypeEthernet)
        return parse_fail(kBadValue, kLayer, "htype", kHtypeOff, "hardware type is not Ethernet");
    if (load_be16(packet, kPtypeOff) != kEtherTypeIpv4)
        return parse_fail(kBadValue, kLayer, "ptype", kPtypeOff, "protocol type is not IPv4");
    if (load_u8(packet, kHlenOff) != 6)
        return parse_fail(kBadValue, kLayer, "hlen", kHlenOff, "hardware length is not 6");
    if (load_u8(packet, kPlenOff) != 4)
        return parse_fail(kBadValue, kLayer, "plen", kPlenOff, "protocol length is not 4");
    const std::uint16_t op = load_be16(packet, kOpOff);
    if (op != 1 && op != 2)
        return parse_fail(kBadValue, kLayer, "opcode", kOpOff, "opcode is not request or reply");
    ArpRepr r;
    r.op = static_cast<ArpOp>(op);
    r.sender_mac = load_mac(packet, kSenderMacOff);
    r.sender_ip = load_ip(packet, kSenderIpOff);
    r.target_mac = load_mac(packet, kTargetMacOff);
    r.target_ip = load_ip(packet, kTargetIpOff);
    return r;
}

}  // namespace iwcm::wire
