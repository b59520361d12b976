// TCP: parse and emit, options included.
//
// Read first: tcp.hpp, RFC 9293 section 3.1, RFC 7323 sections 2.2 and 3.2.
#include "wire/tcp.hpp"

#include <cstring>

#include "wire/checksum.hpp"

namespace iwcm::wire {

using enum ParseErrorKind;  // the first argument of decode_fail() and parse_fail()

namespace {

using detail::fold16;
using detail::sum_native;

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
                return decode_fail(kBadOption, kLayer, "option_mss", off + 1,
                                   "MSS length is not 4");
            o.mss = load_be16(h, off + 2);
            return std::nullopt;
        case tcp_option::kWindowScale:
            if (len != kLenWindowScale)
                return decode_fail(kBadOption, kLayer, "option_window_scale", off + 1,
                                   "window scale length is not 3");
            o.window_scale = load_u8(h, off + 2);
            return std::nullopt;
        case tcp_option::kSackPermitted:
            if (len != kLenSackPermitted)
                return decode_fail(kBadOption, kLayer, "option_sack_permitted", off + 1,
                                   "SACK-permitted length is not 2");
            o.sack_permitted = true;
            return std::nullopt;
        case tcp_option::kTimestamps:
            if (len != kLenTimestamps)
                return decode_fail(kBadOption, kLayer, "option_timestamps", off + 1,
                                   "timestamps length is not 10");
            o.timestamps = TcpTimestamps{load_be32(h, off + 2), load_be32(h, off + 6)};
            return std::nullopt;
        default: return std::nullopt;  // unknown kinds are skipped by their length
    }
}

// Walks the options area h[20, header_len).
DecodeStatus decode_options(Bytes h, TcpOptions& o) {
    o = TcpOptions{};
    return walk_type_length_options(h, kTcpHeaderLen, kLayer,
                                    [&](std::size_t off, std::uint8_t kind, std::uint8_t len) {
                                        return decode_known_option(h, off, kind, len, o);
                                    });
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

}  // namespace

namespace detail {

std::uint64_t write_tcp_header(const TcpRepr& repr, std::size_t header_len, std::byte* p) {
    // Each 32-bit word is built as a host-order number, stored with one byte swap and
    // added to the sum: no per-field bounds checks, no reading back.
    std::uint64_t sum = 0;
    auto put = [&p, &sum](std::uint32_t word) {
        sum += word;
        const std::uint32_t be = __builtin_bswap32(word);
        std::memcpy(p, &be, 4);
        p += 4;
    };
    put((std::uint32_t{repr.src_port} << 16) | repr.dst_port);
    put(repr.seq.value());
    put(repr.ack.value());
    put((static_cast<std::uint32_t>(header_len / 4) << 28) | (std::uint32_t{repr.flags} << 16) |
        repr.window);
    put(repr.urgent);  // the checksum field, zero, in the high half
    // The options in Linux's order (see tcp.hpp), each one whole 32-bit word.
    const TcpOptions& o = repr.options;
    if (o.mss)
        put((std::uint32_t{tcp_option::kMss} << 24) | (std::uint32_t{kLenMss} << 16) | *o.mss);
    if (o.timestamps) {
        // SACK-permitted folds into the two bytes in front of the timestamps, NOP NOP else.
        put(o.sack_permitted ? 0x0402080Au : 0x0101080Au);
        put(o.timestamps->value);
        put(o.timestamps->echo);
    }
    if (o.window_scale) put(0x01030300u | *o.window_scale);
    if (o.sack_permitted && !o.timestamps) put(0x01010402u);
    return sum;
}

bool decode_aligned_options(const std::byte* p, std::size_t len, TcpOptions& o) {
    o = TcpOptions{};
    for (std::size_t off = 0; off < len; off += 4) {
        std::uint32_t w = 0;
        std::memcpy(&w, p + off, 4);
        w = __builtin_bswap32(w);
        if ((w >> 24) == tcp_option::kEol) return true;  // the walk stops at EOL too
        if ((w >> 16) == 0x0204u) {
            o.mss = static_cast<std::uint16_t>(w);
        } else if ((w >> 8) == 0x010303u) {
            o.window_scale = static_cast<std::uint8_t>(w);
        } else if (w == 0x01010402u) {
            o.sack_permitted = true;
        } else if (w == 0x01010101u) {
            // Four NOPs.
        } else if ((w == 0x0101080Au || w == 0x0402080Au) && off + 12 <= len) {
            if (w == 0x0402080Au) o.sack_permitted = true;
            std::uint32_t ts[2];
            std::memcpy(ts, p + off + 4, 8);
            o.timestamps = TcpTimestamps{__builtin_bswap32(ts[0]), __builtin_bswap32(ts[1])};
            off += 8;
        } else {
            return false;
        }
    }
    return true;
}

DecodeStatus decode_tcp_summed(Bytes segment, std::uint32_t pseudo_sum, TcpRepr& repr,
                               Bytes& payload, Checksums checksums) {
    if (segment.size() < kTcpHeaderLen)
        return decode_fail(kTruncated, kLayer, "header", segment.size(), "truncated header");
    const std::size_t header_len =
        static_cast<std::size_t>(load_u8(segment, kDataOffsetOff) >> 4) * 4;
    if (header_len < kTcpHeaderLen)
        return decode_fail(kBadLength, kLayer, "data_offset", kDataOffsetOff,
                           "data offset below 5");
    if (header_len > segment.size())
        return decode_fail(kBadLength, kLayer, "data_offset", kDataOffsetOff,
                           "data offset beyond the segment");
    // A correct segment sums to 0xFFFF, which is its own byte-swapped image.
    const std::uint64_t start = __builtin_bswap16(static_cast<std::uint16_t>(fold16(pseudo_sum)));
    if (checksums == Checksums::kFull &&
        fold16(sum_native(segment.data(), segment.size(), start)) != 0xFFFFu)
        return decode_fail(kBadChecksum, kLayer, "checksum", kChecksumOff, "bad checksum");
    if (!decode_aligned_options(segment.data() + kTcpHeaderLen, header_len - kTcpHeaderLen,
                                repr.options)) {
        if (auto e = decode_options(segment.first(header_len), repr.options)) return e;
    }
    decode_fixed(segment, repr);
    payload = segment.subspan(header_len);
    return std::nullopt;
}

DecodeStatus decode_tcp(Bytes segment, const IpPseudoHeader& ph, TcpRepr& repr, Bytes& payload) {
    if (ph.src.family() != ph.dst.family())
        return decode_fail(kBadValue, kLayer, "checksum", kChecksumOff,
                           "pseudo-header families differ");
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
    IWCM_ASSERT(out.size() >= header_len);
    detail::write_tcp_header(repr, header_len, out.data());
    return header_len;
}

void finish_tcp_checksum(MutBytes segment, const IpPseudoHeader& ph) {
    IWCM_ASSERT(segment.size() >= kTcpHeaderLen);
    store_be16(segment, kChecksumOff, 0);
    store_be16(segment, kChecksumOff, tcp_checksum(ph.src, ph.dst, segment));
}

std::size_t emit_tcp(const TcpRepr& repr, Bytes payload, const IpPseudoHeader& ph, MutBytes out) {
    const std::size_t header_len = repr.header_len();
    const std::size_t total = header_len + payload.size();
    IWCM_ASSERT(out.size() >= total);
    // The header's words are summed as they are written; only the payload is read.
    const std::uint64_t header_sum = detail::write_tcp_header(repr, header_len, out.data());
    store_bytes(out, header_len, payload);
    const auto len = static_cast<std::uint32_t>(total);
    std::uint32_t sum = pseudo_header_sum(ph.src, ph.dst, kIpProtoTcp, len) + fold16(header_sum);
    if (!payload.empty()) sum = checksum_sum(payload, sum);
    store_be16(out, kChecksumOff, static_cast<std::uint16_t>(~fold16(sum)));
    return total;
}

}  // namespace iwcm::wire
