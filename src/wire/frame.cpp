// Whole TCP frames: the layers of ethernet/ipv4/ipv6/tcp composed.
//
// Read first: frame.hpp.
#include "wire/frame.hpp"

#include <bit>
#include <cstddef>
#include <cstring>
#include <memory>
#include <type_traits>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "wire/checksum.hpp"
#include "wire/copy.hpp"
#include "wire/ipv4.hpp"
#include "wire/ipv6.hpp"
#include "wire/pieces.hpp"

namespace iwcm::wire {

using enum ParseErrorKind;  // the first argument of decode_fail()

namespace {

using detail::fold16;
using detail::sum_native;

constexpr const char* kLayer = "frame";

// Raw accessors for the fast paths below, which check the frame's length once up front
// instead of at every field.
inline void put_be16(std::byte* p, std::uint16_t v) {
    const std::uint16_t be = __builtin_bswap16(v);
    std::memcpy(p, &be, 2);
}

inline void put_be32(std::byte* p, std::uint32_t v) {
    const std::uint32_t be = __builtin_bswap32(v);
    std::memcpy(p, &be, 4);
}

inline std::uint16_t get_be16(const std::byte* p) {
    std::uint16_t v = 0;
    std::memcpy(&v, p, 2);
    return __builtin_bswap16(v);
}

inline std::uint32_t get_be32(const std::byte* p) {
    std::uint32_t v = 0;
    std::memcpy(&v, p, 4);
    return __builtin_bswap32(v);
}

DecodeStatus shifted(DecodeStatus e, std::size_t by) {
    if (e) e->offset += by;
    return e;
}

// Writes `value` into `out` with one 16-byte store. The handler's segment copies the payload
// span whole (one 16-byte load) right after the parse: from two 8-byte stores it could not
// be forwarded and would wait for both to reach the cache (a store-forwarding stall).
void set_span(Bytes& out, Bytes value) {
    static_assert(sizeof(Bytes) == 16 && std::is_trivially_copyable_v<Bytes>);
#if defined(__SSE2__)
    // The pointer, then the size: the layout of libstdc++'s and libc++'s dynamic span (every
    // parse test reads its payload back through it). A copy through a vector type, or a load
    // of `value`, is turned back into two scalar stores or goes through the stack; the
    // intrinsic's store is one. __m128i may alias any object.
    const __m128i words =
        _mm_set_epi64x(static_cast<long long>(value.size()),
                       static_cast<long long>(reinterpret_cast<std::uintptr_t>(value.data())));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(&out), words);
#else
    out = value;
#endif
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
DecodeStatus decode_ip_v4(Bytes packet, IpRepr& ip, Bytes& payload, Checksums checksums) {
    Ipv4Repr r;
    if (auto e = detail::decode_ipv4(packet, r, payload, checksums)) return e;
    if (r.protocol != kIpProtoTcp) return decode_fail(kNotTcp, "ipv4", "protocol", 9, "not TCP");
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
    // The offset names the IPv6 header's next header even when extension headers
    // (ipv6.hpp) came between it and the protocol that is not TCP.
    if (r.next_header != kIpProtoTcp)
        return decode_fail(kNotTcp, "ipv6", "next_header", 6, "not TCP");
    set_addrs(ip, r.src, r.dst);
    ip.ttl = r.hop_limit;
    ip.tos = r.traffic_class;
    ip.ident = 0;
    ip.flow_label = r.flow_label;
    ip.dont_fragment = true;
    return std::nullopt;
}

// The TCP pseudo-header sum taken from the addresses as they sit in the IP
// header, side by side in one span: the same value as pseudo_header_sum(),
// without reading back the IpAddr values the decoder has just written (read
// right after their stores, they were a store-forwarding stall before an
// IpAddr was written in one store; from the header they cost nothing either way).
std::uint32_t pseudo_sum_from_header(Bytes ip_header, std::uint16_t ethertype,
                                     std::size_t segment_len) {
    const bool v4 = ethertype == kEtherTypeIpv4;
    const Bytes addrs = v4 ? ip_header.subspan(12, 8) : ip_header.subspan(8, 32);
    const auto len = static_cast<std::uint32_t>(segment_len);
    return checksum_sum(addrs, kIpProtoTcp + (len >> 16) + (len & 0xFFFFu));
}

// All layers decoded straight into out; error offsets count from the frame start.
DecodeStatus decode_frame(Bytes frame, TcpFrame& out, Checksums checksums) {
    Bytes ip_bytes;
    if (auto e = detail::decode_ethernet(frame, out.repr.eth, ip_bytes)) return e;
    const std::size_t ip_off = out.repr.eth.header_len();
    const std::uint16_t type = out.repr.eth.ethertype;
    Bytes segment;
    if (type == kEtherTypeIpv4) {
        if (auto e = decode_ip_v4(ip_bytes, out.repr.ip, segment, checksums))
            return shifted(e, ip_off);
    } else if (type == kEtherTypeIpv6) {
        if (auto e = decode_ip_v6(ip_bytes, out.repr.ip, segment)) return shifted(e, ip_off);
    } else {
        return decode_fail(kNotIp, kLayer, "ethertype", ip_off - 2, "not IP");
    }
    const std::size_t ip_header_len = static_cast<std::size_t>(segment.data() - ip_bytes.data());
    const std::uint32_t pseudo = pseudo_sum_from_header(ip_bytes, type, segment.size());
    return shifted(detail::decode_tcp_summed(segment, pseudo, out.repr.tcp, out.payload, checksums),
                   ip_off + ip_header_len);
}

// The common case, an IPv4 TCP frame (802.1Q-tagged or not) that passes every check, decoded
// at fixed offsets in one pass: the IPv4 header's checksum is five 32-bit loads, and the
// pseudo-header reuses the two address words. Returns false, with out partly written, for
// anything else; the layered decode_frame() then gives the result or the exact error, and
// it writes every field that this function may have touched. With Checksums::kOffload neither
// checksum is verified. `tail`: the frame is `frame` followed by these pieces, which are the
// whole TCP payload (`frame` then ends with the TCP header), `tail_len` bytes in all; read
// where they lie (out.payload is the one piece, or empty for several). One instance for each:
// the common whole frame pays nothing for the other, and each has one caller to be inlined
// into (its callers, in turn, small enough for the link-time inliner).
template <bool kTail>
bool decode_fast_v4(Bytes frame, TcpFrame& out, Checksums checksums,
                    std::span<const Bytes> tail = {}, std::size_t tail_len = 0,
                    std::uint64_t* tail_sum = nullptr) {
    const bool verify = checksums == Checksums::kFull;
    constexpr std::size_t kIpTcpMin = Ipv4Repr::kHeaderLen + kTcpHeaderLen;
    const std::byte* const p = frame.data();
    const std::size_t n = frame.size() + tail_len;
    // The headers' minimum lies in the first part (all of it when there is a tail).
    if (frame.size() < kEthernetHeaderLen + kIpTcpMin) return false;
    EthernetRepr& eth = out.repr.eth;
    std::size_t eth_len = kEthernetHeaderLen;
    std::uint16_t type = get_be16(p + 12);
    if (type == kEtherTypeVlan) {
        if (frame.size() < kEthernetVlanHeaderLen + kIpTcpMin) return false;
        const std::uint16_t tci = get_be16(p + 14);
        eth.vlan = VlanTag{static_cast<std::uint16_t>(tci & kVlanIdMax),
                           static_cast<std::uint8_t>(tci >> 13), (tci & 0x1000u) != 0};
        type = get_be16(p + 16);
        eth_len = kEthernetVlanHeaderLen;
    } else {
        eth.vlan.reset();
    }
    if (type != kEtherTypeIpv4) return false;

    const std::byte* const ip = p + eth_len;
    std::uint32_t w[5];  // the header as loaded, for the checksum
    std::memcpy(w, ip, sizeof w);
    const std::uint32_t ver_tos_len = __builtin_bswap32(w[0]);
    const std::uint32_t ident_flags = __builtin_bswap32(w[1]);
    const std::uint32_t ttl_proto = __builtin_bswap32(w[2]);
    const std::uint32_t total_len = ver_tos_len & 0xFFFFu;
    // Version 4 with IHL 5, a TCP header's room, no fragment (MF and offset clear; the
    // reserved bit is ignored, as parse_ipv4 does), protocol TCP, checksum good.
    if ((ver_tos_len >> 24) != 0x45u) return false;
    if (total_len < kIpTcpMin || total_len > n - eth_len) return false;
    if ((ident_flags & 0x3FFFu) != 0) return false;
    if (((ttl_proto >> 16) & 0xFFu) != kIpProtoTcp) return false;
    if (verify && fold16(std::uint64_t{w[0]} + w[1] + w[2] + w[3] + w[4]) != 0xFFFFu) return false;

    const std::byte* const tcp = ip + Ipv4Repr::kHeaderLen;
    const std::size_t segment_len = total_len - Ipv4Repr::kHeaderLen;
    const std::size_t header_len =
        static_cast<std::size_t>(static_cast<std::uint8_t>(tcp[12]) >> 4) * 4;
    if (header_len < kTcpHeaderLen || header_len > segment_len) return false;
    // A tail is exactly the payload: the headers end where the first part does.
    if constexpr (kTail) {
        if (tcp + header_len != p + frame.size() || segment_len - header_len != tail_len)
            return false;
    }
    if (verify) {
        // The pseudo-header in native order: both addresses as loaded, then the protocol
        // and the length as the byte-swapped images of their big-endian 16-bit words. A
        // tail starts at an even offset (the header is whole 32-bit words): its sum adds on.
        const std::uint64_t pseudo = std::uint64_t{w[3]} + w[4] +
                                     (std::uint32_t{kIpProtoTcp} << 8) +
                                     __builtin_bswap16(static_cast<std::uint16_t>(segment_len));
        std::uint64_t sum = sum_native(tcp, segment_len - tail_len, pseudo);
        if constexpr (kTail) {
            if (tail_sum != nullptr) {
                *tail_sum = sum;  // the caller sums the tail and checks
            } else {
                sum = detail::sum_native_pieces(tail, sum);
            }
        }
        if ((!kTail || tail_sum == nullptr) && fold16(sum) != 0xFFFFu) return false;
    }
    TcpRepr& t = out.repr.tcp;
    if (header_len == kTcpHeaderLen) {
        t.options = TcpOptions{};
    } else if (!detail::decode_aligned_options(tcp + kTcpHeaderLen, header_len - kTcpHeaderLen,
                                               t.options)) {
        return false;
    }

    // Every check passed: fill in the fields.
    std::memcpy(eth.dst.bytes.data(), p, 6);
    std::memcpy(eth.src.bytes.data(), p + 6, 6);
    eth.ethertype = kEtherTypeIpv4;
    Ipv4Addr src;
    Ipv4Addr dst;
    std::memcpy(src.bytes.data(), &w[3], 4);
    std::memcpy(dst.bytes.data(), &w[4], 4);
    IpRepr& r = out.repr.ip;
    set_addrs(r, src, dst);
    r.ttl = static_cast<std::uint8_t>(ttl_proto >> 24);
    r.tos = static_cast<std::uint8_t>(ver_tos_len >> 16);
    r.ident = static_cast<std::uint16_t>(ident_flags >> 16);
    r.flow_label = 0;
    r.dont_fragment = (ident_flags & 0x4000u) != 0;
    // Both ports in one store: the connection lookup reads them back as one 32-bit word, and
    // a load spanning two narrower stores is not forwarded from them; it waits until both
    // reach the cache (perf annotate put a quarter of handle_frame's time on that load).
    static_assert(offsetof(TcpRepr, dst_port) == offsetof(TcpRepr, src_port) + 2);
    const std::uint32_t ports = get_be32(tcp);
    std::uint32_t in_place = (ports << 16) | (ports >> 16);  // src_port at the lower address
    if constexpr (std::endian::native == std::endian::big) in_place = ports;
    std::memcpy(reinterpret_cast<std::byte*>(&t) + offsetof(TcpRepr, src_port), &in_place, 4);
    t.seq = SeqNumber(get_be32(tcp + 4));
    t.ack = SeqNumber(get_be32(tcp + 8));
    t.flags = static_cast<std::uint8_t>(tcp[13]);
    t.window = get_be16(tcp + 14);
    t.urgent = get_be16(tcp + 18);
    if constexpr (kTail) {
        set_span(out.payload, tail.size() == 1 ? tail[0] : Bytes{});
    } else {
        set_span(out.payload, Bytes(tcp + header_len, segment_len - header_len));
    }
    return true;
}

// Writes the Ethernet header at p with the given (inner) type; returns its length.
std::size_t put_ethernet(const EthernetRepr& eth, std::uint16_t type, std::byte* p) {
    std::memcpy(p, eth.dst.bytes.data(), 6);
    std::memcpy(p + 6, eth.src.bytes.data(), 6);
    if (!eth.vlan) {
        put_be16(p + 12, type);
        return kEthernetHeaderLen;
    }
    const VlanTag& tag = *eth.vlan;
    IWCM_ASSERT(tag.id <= kVlanIdMax);
    IWCM_ASSERT(tag.priority <= 7);
    put_be16(p + 12, kEtherTypeVlan);
    put_be16(p + 14,
             static_cast<std::uint16_t>((tag.priority << 13) | (tag.dei ? 0x1000u : 0u) | tag.id));
    put_be16(p + 16, type);
    return kEthernetVlanHeaderLen;
}

// Writes the 20-byte IPv4 header at p, its checksum found from the field values (zero when
// offloaded), and returns the TCP pseudo-header's sum (unfolded), which shares the address
// words.
std::uint64_t put_ipv4(const IpRepr& ip, std::uint32_t segment_len, std::byte* p,
                       Checksums checksums) {
    const std::uint32_t src = get_be32(reinterpret_cast<const std::byte*>(ip.src.raw().data()));
    const std::uint32_t dst = get_be32(reinterpret_cast<const std::byte*>(ip.dst.raw().data()));
    const std::uint32_t w0 = 0x45000000u | (std::uint32_t{ip.tos} << 16) |
                             static_cast<std::uint32_t>(Ipv4Repr::kHeaderLen + segment_len);
    const std::uint32_t w1 = (std::uint32_t{ip.ident} << 16) | (ip.dont_fragment ? 0x4000u : 0u);
    const std::uint32_t w2 = (std::uint32_t{ip.ttl} << 24) | (std::uint32_t{kIpProtoTcp} << 16);
    const std::uint64_t addrs = std::uint64_t{src} + dst;
    const auto checksum = checksums == Checksums::kOffload
                              ? std::uint16_t{0}
                              : static_cast<std::uint16_t>(~fold16(addrs + w0 + w1 + w2));
    put_be32(p, w0);
    put_be32(p + 4, w1);
    put_be32(p + 8, w2 | checksum);
    std::memcpy(p + 12, ip.src.raw().data(), 4);
    std::memcpy(p + 16, ip.dst.raw().data(), 4);
    return addrs + kIpProtoTcp + segment_len;
}

// Writes the 40-byte IPv6 header at p and returns the TCP pseudo-header's sum (unfolded).
std::uint64_t put_ipv6(const IpRepr& ip, std::uint32_t segment_len, std::byte* p) {
    IWCM_ASSERT(ip.flow_label <= kFlowLabelMax);
    put_be32(p, (6u << 28) | (std::uint32_t{ip.tos} << 20) | ip.flow_label);
    put_be32(p + 4, (segment_len << 16) | (std::uint32_t{kIpProtoTcp} << 8) | ip.ttl);
    std::memcpy(p + 8, ip.src.raw().data(), 16);
    std::memcpy(p + 24, ip.dst.raw().data(), 16);
    std::uint64_t sum = std::uint64_t{kIpProtoTcp} + segment_len;
    for (std::size_t off = 8; off < 40; off += 4) sum += get_be32(p + off);
    return sum;
}

std::size_t ip_header_len(const IpRepr& ip) {
    return ip.src.is_v4() ? Ipv4Repr::kHeaderLen : Ipv6Repr::kHeaderLen;
}

}  // namespace

namespace {

// The layered decode, which expects a cleared result. Out of line: parse_tcp_frame_into stays
// the fast decoder alone, small enough for the link-time inliner to take it into its caller.
[[gnu::noinline]] DecodeStatus decode_frame_cleared(Bytes frame, TcpFrame& out,
                                                    Checksums checksums) {
    out = TcpFrame{};
    return decode_frame(frame, out, checksums);
}

}  // namespace

std::optional<ParseError> parse_tcp_frame_into(Bytes frame, TcpFrame& out, Checksums checksums) {
    // The fast decoder writes every field when it succeeds.
    if (decode_fast_v4<false>(frame, out, checksums)) [[likely]]
        return std::nullopt;
    return decode_frame_cleared(frame, out, checksums);
}

bool parse_tcp_frame_parts(Bytes headers, std::span<const Bytes> payload, TcpFrame& out,
                           Checksums checksums, std::uint64_t* payload_sum) {
    const std::size_t len = total_size(payload);
    IWCM_ASSERT(len > 0);
    return decode_fast_v4<true>(headers, out, checksums, payload, len, payload_sum);
}

ParseResult<TcpFrame> parse_tcp_frame(Bytes frame, Checksums checksums) {
    // One named result, decoded in place and returned without a copy.
    ParseResult<TcpFrame> result;
    if (auto e = parse_tcp_frame_into(frame, *result, checksums)) result = iwcm::fail(*e);
    return result;
}

std::size_t tcp_frame_len(const FrameRepr& repr, std::size_t payload_len) {
    return repr.eth.header_len() + ip_header_len(repr.ip) + repr.tcp.header_len() + payload_len;
}

namespace {

// The headers of a TCP frame written: where its TCP header starts, the sum of that header and
// the pseudo-header (unfolded), and the frame's length.
struct FrameHeaders {
    std::byte* tcp;
    std::size_t tcp_header_len;
    std::uint64_t sum;
    std::size_t total;
    std::uint64_t pseudo;  // the pseudo-header's part of `sum`
};

FrameHeaders put_headers(const FrameRepr& repr, std::size_t payload_len, MutBytes out,
                         Checksums checksums) {
    const IpRepr& ip = repr.ip;
    IWCM_ASSERT(ip.src.family() == ip.dst.family());
    const bool v4 = ip.src.is_v4();
    const std::size_t ip_off = repr.eth.header_len();
    const std::size_t tcp_off = ip_off + (v4 ? Ipv4Repr::kHeaderLen : Ipv6Repr::kHeaderLen);
    const std::size_t tcp_header_len = repr.tcp.header_len();
    const std::size_t segment_len = tcp_header_len + payload_len;
    const std::size_t total = tcp_off + segment_len;
    // The room is checked once here; the writers below store without checks.
    IWCM_ASSERT(out.size() >= total);
    IWCM_ASSERT(segment_len <= 0xFFFF - Ipv4Repr::kHeaderLen);
    std::byte* const p = out.data();
    put_ethernet(repr.eth, v4 ? kEtherTypeIpv4 : kEtherTypeIpv6, p);
    const auto seg = static_cast<std::uint32_t>(segment_len);
    const std::uint64_t pseudo =
        v4 ? put_ipv4(ip, seg, p + ip_off, checksums) : put_ipv6(ip, seg, p + ip_off);
    std::byte* const tcp = p + tcp_off;
    const std::uint64_t header_sum = detail::write_tcp_header(repr.tcp, tcp_header_len, tcp);
    return {tcp, tcp_header_len, pseudo + header_sum, total, pseudo};
}

// Checksums::kPartial: the pseudo-header's folded sum in the TCP checksum field, for the link
// to add the segment's words to and complement.
void put_partial_sum(const FrameHeaders& h) {
    put_be16(h.tcp + 16, static_cast<std::uint16_t>(fold16(h.pseudo)));
}

}  // namespace

std::size_t emit_tcp_frame(const FrameRepr& repr, Bytes payload, MutBytes out,
                           Checksums checksums) {
    const FrameHeaders h = put_headers(repr, payload.size(), out, checksums);
    // The TCP checksum: pseudo-header and header summed from their values, then the
    // payload read from its source (it starts at an even offset, a multiple of 4).
    if (!payload.empty()) std::memcpy(h.tcp + h.tcp_header_len, payload.data(), payload.size());
    if (checksums == Checksums::kOffload) return h.total;  // the field stays zero
    if (checksums == Checksums::kPartial) {
        put_partial_sum(h);
        return h.total;
    }
    std::uint32_t sum = fold16(h.sum);
    if (!payload.empty()) sum = checksum_sum(payload, sum);
    put_be16(h.tcp + 16, static_cast<std::uint16_t>(~sum));
    return h.total;
}

std::size_t emit_tcp_frame_headers(const FrameRepr& repr, std::span<const Bytes> payload,
                                   MutBytes out, Checksums checksums) {
    const std::size_t len = total_size(payload);
    const FrameHeaders h = put_headers(repr, len, out, checksums);
    if (checksums == Checksums::kFull) {
        // emit_tcp_frame's sum, each piece read where it lies (checksum_sum's byte order:
        // the running sum swapped in, the folded result swapped out).
        const auto swapped = [](std::uint64_t v) {
            return std::uint32_t{__builtin_bswap16(static_cast<std::uint16_t>(fold16(v)))};
        };
        const std::uint32_t sum = swapped(detail::sum_native_pieces(payload, swapped(h.sum)));
        put_be16(h.tcp + 16, static_cast<std::uint16_t>(~sum));
    } else if (checksums == Checksums::kPartial) {
        put_partial_sum(h);
    }
    return h.total - len;
}

std::size_t emit_tcp_frame_gather(const FrameRepr& repr, std::span<const Bytes> pieces,
                                  MutBytes out, Checksums checksums) {
    // The headers, summed over the pieces where they lie, then the pieces side by side.
    const std::size_t headers = emit_tcp_frame_headers(repr, pieces, out, checksums);
    return static_cast<std::size_t>(copy_pieces(out.data() + headers, pieces) - out.data());
}

namespace {

std::size_t segment_v4_header_len(const SegmentV4& s) {
    return kTcpHeaderLen + (s.mss != 0 ? 4 : 0) + (s.wscale >= 0 ? 4 : 0);
}

// The words and sums of emit_tcp_frame() for the values of a SegmentV4, in the same order, so
// that the checksums come out bit for bit the same (a one's complement sum has two zeros).
// kSum false: the checksum fields stay zero and nothing is summed (Checksums::kOffload).
// kPartial: the IPv4 header's checksum, and the pseudo-header's sum in the TCP checksum
// field (Checksums::kPartial).
template <bool kSum, bool kPartial = false>
std::size_t emit_v4(const SegmentV4& s, Bytes payload, MutBytes out) {
    IWCM_ASSERT(s.dst_mac != nullptr && s.src_mac != nullptr);
    IWCM_ASSERT(s.wscale <= 14);
    const std::size_t tcp_header_len = segment_v4_header_len(s);
    const std::size_t segment_len = tcp_header_len + payload.size();
    const std::size_t ip_off = s.tagged ? kEthernetVlanHeaderLen : kEthernetHeaderLen;
    const std::size_t total = ip_off + Ipv4Repr::kHeaderLen + segment_len;
    IWCM_ASSERT(out.size() >= total && total == segment_v4_len(s, payload.size()));
    IWCM_ASSERT(segment_len <= 0xFFFF - Ipv4Repr::kHeaderLen);
    std::byte* p = out.data();
    std::memcpy(p, s.dst_mac->bytes.data(), 6);
    std::memcpy(p + 6, s.src_mac->bytes.data(), 6);
    if (s.tagged) {
        put_be32(p + 12, (std::uint32_t{kEtherTypeVlan} << 16) | s.vlan_tci);
        put_be16(p + 16, kEtherTypeIpv4);
    } else {
        put_be16(p + 12, kEtherTypeIpv4);
    }
    // IPv4: ident 0, DF set; the checksum from the values (put_ipv4).
    const auto seg = static_cast<std::uint32_t>(segment_len);
    std::byte* const ip = p + ip_off;
    const std::uint32_t w0 = 0x45000000u | (std::uint32_t{s.tos} << 16) |
                             static_cast<std::uint32_t>(Ipv4Repr::kHeaderLen + seg);
    const std::uint32_t w1 = 0x4000u;
    const std::uint32_t w2 = (std::uint32_t{s.ttl} << 24) | (std::uint32_t{kIpProtoTcp} << 16);
    const std::uint64_t addrs = std::uint64_t{s.src_ip} + s.dst_ip;
    std::uint16_t ip_checksum = 0;
    if constexpr (kSum || kPartial)
        ip_checksum = static_cast<std::uint16_t>(~fold16(addrs + w0 + w1 + w2));
    put_be32(ip, w0);
    put_be32(ip + 4, w1);
    put_be32(ip + 8, w2 | ip_checksum);
    put_be32(ip + 12, s.src_ip);
    put_be32(ip + 16, s.dst_ip);
    const std::uint64_t pseudo = addrs + kIpProtoTcp + seg;
    // TCP: the words of write_tcp_header(), summed as they are stored.
    std::byte* tcp = ip + Ipv4Repr::kHeaderLen;
    std::uint64_t sum = 0;
    std::byte* w = tcp;
    auto put = [&w, &sum](std::uint32_t word) {
        sum += word;
        put_be32(w, word);
        w += 4;
    };
    put((std::uint32_t{s.src_port} << 16) | s.dst_port);
    put(s.seq);
    put(s.ack);
    put((static_cast<std::uint32_t>(tcp_header_len / 4) << 28) | (std::uint32_t{s.flags} << 16) |
        s.window);
    put(0);  // checksum and urgent pointer
    if (s.mss != 0) put((std::uint32_t{tcp_option::kMss} << 24) | (std::uint32_t{4} << 16) | s.mss);
    if (s.wscale >= 0) put(0x01030300u | static_cast<std::uint32_t>(s.wscale));
    if (!payload.empty()) std::memcpy(tcp + tcp_header_len, payload.data(), payload.size());
    if constexpr (kPartial) put_be16(tcp + 16, static_cast<std::uint16_t>(fold16(pseudo)));
    if constexpr (kSum) {
        std::uint32_t csum = fold16(pseudo + sum);
        if (!payload.empty()) csum = checksum_sum(payload, csum);
        put_be16(tcp + 16, static_cast<std::uint16_t>(~csum));
    }
    return total;
}

}  // namespace

std::size_t emit_segment_v4(const SegmentV4& s, Bytes payload, MutBytes out) {
    switch (s.checksums) {
        case Checksums::kFull: return emit_v4<true>(s, payload, out);
        case Checksums::kPartial: return emit_v4<false, true>(s, payload, out);
        case Checksums::kOffload: break;
    }
    return emit_v4<false>(s, payload, out);
}

}  // namespace iwcm::wire
