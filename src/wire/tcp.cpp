// TCP: parse and emit, options included.
//
// Read first: tcp.hpp, RFC 9293 section 3.1, RFC 7323 sections 2.2 and 3.2.
#include "wire/tcp.hpp"

#include <initializer_list>

#include "wire/checksum.hpp"

namespace iwcm::wire {

namespace {

constexpr const char* kLayer = "tcp";
constexpr std::size_t kSrcPortOff = 0;
constexpr std::size_t kDstPortOff = 2;
constexpr std::size_t kSeqOff = 4;
constexpr std::size_t kAckOff = 8;
constexpr std::size_t kDataOffsetOff = 12;
constexpr std::size_t kFlagsOff = 13;
constexpr std::size_t kWindowOff = 14;
constexpr std::size_t kChecksumOff = 16;
constexpr std::size_t kUrgentOff = 18;

constexpr std::uint8_t kLenMss = 4;
constexpr std::uint8_t kLenWindowScale = 3;
constexpr std::uint8_t kLenSackPermitted = 2;
constexpr std::uint8_t kLenTimestamps = 10;

// Checks a known option's length and stores its value; `off` is the option's
// offset in the header, so errors name where the bad length byte is.
DecodeStatus decode_known_option(Bytes h, std::size_t off, std::uint8_t kind, std::uint8_t len,
                                 TcpOptions& o) {
    switch (kind) {
        case tcp_option::kMss:
            if (len != kLenMss)
                return decode_fail(kLayer, "option_mss", off + 1, "MSS length is not 4");
            o.mss = load_be16(h, off + 2);
            return std::nullopt;
        case tcp_option::kWindowScale:
            if (len != kLenWindowScale)
                return decode_fail(kLayer, "option_window_scale", off + 1,
                                   "window scale length is not 3");
            o.window_scale = load_u8(h, off + 2);
            return std::nullopt;
        case tcp_option::kSackPermitted:
            if (len != kLenSackPermitted)
                return decode_fail(kLayer, "option_sack_permitted", off + 1,
                                   "SACK-permitted length is not 2");
            o.sack_permitted = true;
            return std::nullopt;
        case tcp_option::kTimestamps:
            if (len != kLenTimestamps)
                return decode_fail(kLayer, "option_timestamps", off + 1,
                                   "timestamps length is not 10");
            o.timestamps = TcpTimestamps{load_be32(h, off + 2), load_be32(h, off + 6)};
            return std::nullopt;
        default:
            return std::nullopt;  // unknown kinds are skipped by their length
    }
}

// Walks the options area h[20, header_len).
DecodeStatus decode_options(Bytes h, TcpOptions& o) {
    o = TcpOptions{};
    std::size_t off = kTcpHeaderLen;
    while (off < h.size()) {
        const std::uint8_t kind = load_u8(h, off);
        if (kind == tcp_option::kEol) break;
        if (kind == tcp_option::kNop) {
            ++off;
            continue;
        }
        if (off + 1 >= h.size())
            return decode_fail(kLayer, "option_length", off, "option length byte missing");
        const std::uint8_t len = load_u8(h, off + 1);
        if (len < 2) return decode_fail(kLayer, "option_length", off + 1, "option length below 2");
        if (off + len > h.size())
            return decode_fail(kLayer, "option_length", off + 1, "option runs past the header");
        if (auto e = decode_known_option(h, off, kind, len, o)) return e;
        off += len;
    }
    return std::nullopt;
}

void decode_fixed(Bytes h, TcpRepr& r) {
    r.src_port = load_be16(h, kSrcPortOff);
    r.dst_port = load_be16(h, kDstPortOff);
    r.seq = SeqNumber(load_be32(h, kSeqOff));
    r.ack = SeqNumber(load_be32(h, kAckOff));
    r.flags = load_u8(h, kFlagsOff);
    r.window = load_be16(h, kWindowOff);
    r.urgent = load_be16(h, kUrgentOff);
}

std::size_t put_option_bytes(MutBytes out, std::size_t off, std::initializer_list<std::uint8_t> v) {
    for (std::uint8_t b : v) store_u8(out, off++, b);
    return off;
}

// Writes the options in Linux's order (see tcp.hpp) from offset 20; returns the end.
std::size_t emit_options(const TcpOptions& o, MutBytes out) {
    std::size_t off = kTcpHeaderLen;
    if (o.mss) {
        off = put_option_bytes(out, off, {tcp_option::kMss, kLenMss});
        store_be16(out, off, *o.mss);
        off += 2;
    }
    if (o.timestamps) {
        if (o.sack_permitted)
            off = put_option_bytes(out, off, {tcp_option::kSackPermitted, kLenSackPermitted});
        else
            off = put_option_bytes(out, off, {tcp_option::kNop, tcp_option::kNop});
        off = put_option_bytes(out, off, {tcp_option::kTimestamps, kLenTimestamps});
        store_be32(out, off, o.timestamps->value);
        store_be32(out, off + 4, o.timestamps->echo);
        off += 8;
    }
    if (o.window_scale) {
        off = put_option_bytes(
            out, off,
            {tcp_option::kNop, tcp_option::kWindowScale, kLenWindowScale, *o.window_scale});
    }
    if (o.sack_permitted && !o.timestamps) {
        off = put_option_bytes(
            out, off,
            {tcp_option::kNop, tcp_option::kNop, tcp_option::kSackPermitted, kLenSackPermitted});
    }
    return off;
}

}  // namespace

std::size_t TcpOptions::emitted_len() const {
    std::size_t n = 0;
    if (mss) n += 4;
    if (timestamps) n += 12;
    if (window_scale) n += 4;
    if (sack_permitted && !timestamps) n += 4;
    return n;
}

namespace detail {

DecodeStatus decode_tcp_summed(Bytes segment, std::uint32_t pseudo_sum, TcpRepr& repr,
                               Bytes& payload) {
    if (segment.size() < kTcpHeaderLen)
        return decode_fail(kLayer, "header", segment.size(), "truncated header");
    const std::size_t header_len =
        static_cast<std::size_t>(load_u8(segment, kDataOffsetOff) >> 4) * 4;
    if (header_len < kTcpHeaderLen)
        return decode_fail(kLayer, "data_offset", kDataOffsetOff, "data offset below 5");
    if (header_len > segment.size())
        return decode_fail(kLayer, "data_offset", kDataOffsetOff, "data offset beyond the segment");
    if (internet_checksum(segment, pseudo_sum) != 0)
        return decode_fail(kLayer, "checksum", kChecksumOff, "bad checksum");
    if (auto e = decode_options(segment.first(header_len), repr.options)) return e;
    decode_fixed(segment, repr);
    payload = segment.subspan(header_len);
    return std::nullopt;
}

DecodeStatus decode_tcp(Bytes segment, const IpPseudoHeader& ph, TcpRepr& repr, Bytes& payload) {
    if (ph.src.family() != ph.dst.family())
        return decode_fail(kLayer, "checksum", kChecksumOff, "pseudo-header families differ");
    const auto len = static_cast<std::uint32_t>(segment.size());
    return decode_tcp_summed(segment, pseudo_header_sum(ph.src, ph.dst, kIpProtoTcp, len), repr,
                             payload);
}

}  // namespace detail

ParseResult<TcpSegment> parse_tcp(Bytes segment, const IpPseudoHeader& ph) {
    TcpSegment s;
    if (auto e = detail::decode_tcp(segment, ph, s.repr, s.payload)) return iwcm::fail(*e);
    return s;
}

std::size_t emit_tcp_header(const TcpRepr& repr, MutBytes out) {
    const std::size_t header_len = repr.header_len();
    IWCM_ASSERT(header_len <= kTcpMaxHeaderLen);
    IWCM_ASSERT(out.size() >= header_len);
    store_be16(out, kSrcPortOff, repr.src_port);
    store_be16(out, kDstPortOff, repr.dst_port);
    store_be32(out, kSeqOff, repr.seq.value());
    store_be32(out, kAckOff, repr.ack.value());
    store_u8(out, kDataOffsetOff, static_cast<std::uint8_t>((header_len / 4) << 4));
    store_u8(out, kFlagsOff, repr.flags);
    store_be16(out, kWindowOff, repr.window);
    store_be16(out, kChecksumOff, 0);
    store_be16(out, kUrgentOff, repr.urgent);
    const std::size_t end = emit_options(repr.options, out);
    IWCM_ASSERT(end == header_len);
    return header_len;
}

void finish_tcp_checksum(MutBytes segment, const IpPseudoHeader& ph) {
    IWCM_ASSERT(segment.size() >= kTcpHeaderLen);
    store_be16(segment, kChecksumOff, 0);
    store_be16(segment, kChecksumOff, tcp_checksum(ph.src, ph.dst, segment));
}

std::size_t emit_tcp(const TcpRepr& repr, Bytes payload, const IpPseudoHeader& ph, MutBytes out) {
    const std::size_t header_len = emit_tcp_header(repr, out);
    const std::size_t total = header_len + payload.size();
    IWCM_ASSERT(out.size() >= total);
    store_bytes(out, header_len, payload);
    finish_tcp_checksum(out.first(total), ph);
    return total;
}

}  // namespace iwcm::wire
