// Whole TCP frames: the layers of ethernet/ipv4/ipv6/tcp composed.
//
// Read first: frame.hpp.
#include "wire/frame.hpp"

#include "wire/ipv4.hpp"
#include "wire/ipv6.hpp"

namespace iwcm::wire {

namespace {

constexpr const char* kLayer = "frame";

ParseError shifted(ParseError e, std::size_t by) {
    e.offset += by;
    return e;
}

// The IP layer's result in family-neutral form.
struct IpLayer {
    IpRepr ip;
    Bytes payload;
    std::size_t header_len = 0;
};

ParseResult<IpLayer> parse_ip_v4(Bytes packet) {
    auto p = parse_ipv4(packet);
    if (!p) return iwcm::fail(p.error());
    if (p->repr.protocol != kIpProtoTcp)
        return parse_fail("ipv4", "protocol", 9, "not TCP");
    const Ipv4Repr& r = p->repr;
    IpRepr ip{r.src, r.dst, r.ttl, r.tos, r.ident, 0, r.dont_fragment};
    return IpLayer{ip, p->payload, Ipv4Repr::kHeaderLen};
}

ParseResult<IpLayer> parse_ip_v6(Bytes packet) {
    auto p = parse_ipv6(packet);
    if (!p) return iwcm::fail(p.error());
    if (p->repr.next_header != kIpProtoTcp)
        return parse_fail("ipv6", "next_header", 6, "not TCP");
    const Ipv6Repr& r = p->repr;
    IpRepr ip{r.src, r.dst, r.hop_limit, r.traffic_class, 0, r.flow_label, true};
    return IpLayer{ip, p->payload, Ipv6Repr::kHeaderLen};
}

std::size_t ip_header_len(const IpRepr& ip) {
    return ip.src.is_v4() ? Ipv4Repr::kHeaderLen : Ipv6Repr::kHeaderLen;
}

void emit_ip(const IpRepr& ip, std::size_t segment_len, MutBytes out) {
    if (ip.src.is_v4()) {
        Ipv4Repr r{ip.src.v4(), ip.dst.v4(), kIpProtoTcp, ip.ttl, ip.tos, ip.ident,
                   ip.dont_fragment, static_cast<std::uint16_t>(segment_len)};
        r.emit(out);
    } else {
        Ipv6Repr r{ip.src.v6(), ip.dst.v6(), kIpProtoTcp, ip.ttl, ip.tos, ip.flow_label,
                   static_cast<std::uint16_t>(segment_len)};
        r.emit(out);
    }
}

}  // namespace

ParseResult<TcpFrame> parse_tcp_frame(Bytes frame) {
    auto eth = parse_ethernet(frame);
    if (!eth) return iwcm::fail(eth.error());
    const std::size_t ip_off = eth->repr.header_len();
    const std::uint16_t type = eth->repr.ethertype;
    if (type != kEtherTypeIpv4 && type != kEtherTypeIpv6)
        return parse_fail(kLayer, "ethertype", ip_off - 2, "not IP");
    auto ip = type == kEtherTypeIpv4 ? parse_ip_v4(eth->payload) : parse_ip_v6(eth->payload);
    if (!ip) return iwcm::fail(shifted(ip.error(), ip_off));
    const std::size_t tcp_off = ip_off + ip->header_len;
    auto tcp = parse_tcp(ip->payload, IpPseudoHeader{ip->ip.src, ip->ip.dst});
    if (!tcp) return iwcm::fail(shifted(tcp.error(), tcp_off));
    return TcpFrame{FrameRepr{eth->repr, ip->ip, tcp->repr}, tcp->payload};
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
