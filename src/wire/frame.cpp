// Whole TCP frames: the layers of ethernet/ipv4/ipv6/tcp composed.
//
// Read first: frame.hpp.
#include "wire/frame.hpp"

#include <memory>
#include <type_traits>

#include "wire/checksum.hpp"
#include "wire/ipv4.hpp"
#include "wire/ipv6.hpp"

namespace iwcm::wire {

namespace {

constexpr const char* kLayer = "frame";

DecodeStatus shifted(DecodeStatus e, std::size_t by) {
    if (e) e->offset += by;
    return e;
}

// Builds the addresses in place: IpAddr is trivially destructible, so a new
// object may take the old one's storage. This avoids a temporary written byte
// by byte and then copied with one wide load, which the CPU cannot forward.
template <class Addr>
void set_addrs(IpRepr& ip, const Addr& src, const Addr& dst) {
    static_assert(std::is_trivially_destructible_v<IpAddr>);
    std::construct_at(&ip.src, src);
    std::construct_at(&ip.dst, dst);
}

// The IPv4 layer into the family-neutral IpRepr; sets the payload.
DecodeStatus decode_ip_v4(Bytes packet, IpRepr& ip, Bytes& payload) {
    Ipv4Repr r;
    if (auto e = detail::decode_ipv4(packet, r, payload)) return e;
    if (r.protocol != kIpProtoTcp) return decode_fail("ipv4", "protocol", 9, "not TCP");
    set_addrs(ip, r.src, r.dst);
    ip.ttl = r.ttl;
    ip.tos = r.tos;
    ip.ident = r.ident;
    ip.flow_label = 0;
    ip.dont_fragment = r.dont_fragment;
    return std::nullopt;
}

DecodeStatus decode_ip_v6(Bytes packet, IpRepr& ip, Bytes& payload) {
    Ipv6Repr r;
    if (auto e = detail::decode_ipv6(packet, r, payload)) return e;
    if (r.next_header != kIpProtoTcp) return decode_fail("ipv6", "next_header", 6, "not TCP");
    set_addrs(ip, r.src, r.dst);
    ip.ttl = r.hop_limit;
    ip.tos = r.traffic_class;
    ip.ident = 0;
    ip.flow_label = r.flow_label;
    ip.dont_fragment = true;
    return std::nullopt;
}

// The TCP pseudo-header sum taken from the addresses as they sit in the IP
// header: the same value as pseudo_header_sum(), without reading back the
// IpAddr values just written byte by byte (a store-forwarding stall).
std::uint32_t pseudo_sum_from_header(Bytes ip_header, std::uint16_t ethertype,
                                     std::size_t segment_len) {
    const bool v4 = ethertype == kEtherTypeIpv4;
    const Bytes addrs = v4 ? ip_header.subspan(12, 8) : ip_header.subspan(8, 32);
    const auto len = static_cast<std::uint32_t>(segment_len);
    return checksum_sum(addrs, kIpProtoTcp + (len >> 16) + (len & 0xFFFFu));
}

// All layers decoded straight into out; error offsets count from the frame start.
DecodeStatus decode_frame(Bytes frame, TcpFrame& out) {
    Bytes ip_bytes;
    if (auto e = detail::decode_ethernet(frame, out.repr.eth, ip_bytes)) return e;
    const std::size_t ip_off = out.repr.eth.header_len();
    const std::uint16_t type = out.repr.eth.ethertype;
    Bytes segment;
    if (type == kEtherTypeIpv4) {
        if (auto e = decode_ip_v4(ip_bytes, out.repr.ip, segment)) return shifted(e, ip_off);
    } else if (type == kEtherTypeIpv6) {
        if (auto e = decode_ip_v6(ip_bytes, out.repr.ip, segment)) return shifted(e, ip_off);
    } else {
        return decode_fail(kLayer, "ethertype", ip_off - 2, "not IP");
    }
    const std::size_t ip_header_len = static_cast<std::size_t>(segment.data() - ip_bytes.data());
    const std::uint32_t pseudo = pseudo_sum_from_header(ip_bytes, type, segment.size());
    return shifted(detail::decode_tcp_summed(segment, pseudo, out.repr.tcp, out.payload),
                   ip_off + ip_header_len);
}

std::size_t ip_header_len(const IpRepr& ip) {
    return ip.src.is_v4() ? Ipv4Repr::kHeaderLen : Ipv6Repr::kHeaderLen;
}

void emit_ip(const IpRepr& ip, std::size_t segment_len, MutBytes out) {
    if (ip.src.is_v4()) {
        Ipv4Repr r{
            ip.src.v4(), ip.dst.v4(), kIpProtoTcp,      ip.ttl,
            ip.tos,      ip.ident,    ip.dont_fragment, static_cast<std::uint16_t>(segment_len)};
        r.emit(out);
    } else {
        Ipv6Repr r{ip.src.v6(),
                   ip.dst.v6(),
                   kIpProtoTcp,
                   ip.ttl,
                   ip.tos,
                   ip.flow_label,
                   static_cast<std::uint16_t>(segment_len)};
        r.emit(out);
    }
}

}  // namespace

ParseResult<TcpFrame> parse_tcp_frame(Bytes frame) {
    // One named result, decoded in place and returned without a copy.
    ParseResult<TcpFrame> result;
    if (auto e = decode_frame(frame, *result)) result = iwcm::fail(*e);
    return result;
}

std::size_t tcp_frame_len(const FrameRepr& repr, std::size_t payload_len) {
    return repr.eth.header_len() + ip_header_len(repr.ip) + repr.tcp.header_len() + payload_len;
}

std::size_t emit_tcp_frame(const FrameRepr& repr, Bytes payload, MutBytes out) {
    IWCM_ASSERT(repr.ip.src.family() == repr.ip.dst.family());
    const std::size_t total = tcp_frame_len(repr, payload.size());
    IWCM_ASSERT(out.size() >= total);
    EthernetRepr eth = repr.eth;
    eth.ethertype = repr.ip.src.is_v4() ? kEtherTypeIpv4 : kEtherTypeIpv6;
    eth.emit(out);
    const std::size_t ip_off = eth.header_len();
    const std::size_t tcp_off = ip_off + ip_header_len(repr.ip);
    const std::size_t segment_len = total - tcp_off;
    IWCM_ASSERT(segment_len <= 0xFFFF - Ipv4Repr::kHeaderLen);
    emit_tcp(repr.tcp, payload, IpPseudoHeader{repr.ip.src, repr.ip.dst},
             out.subspan(tcp_off, segment_len));
    emit_ip(repr.ip, segment_len, out.subspan(ip_off));
    return total;
}

}  // namespace iwcm::wire
