// MPA request/reply frames: parse and emit.
//
// Read first: mpa.hpp, RFC 5044 section 7.1, RFC 6581 section 5.
#include "wire/mpa.hpp"

#include <cstring>

namespace iwcm::wire {

using enum ParseErrorKind;  // the first argument of decode_fail() and parse_fail()

namespace {

constexpr const char* kLayer = "mpa";
constexpr std::size_t kFlagsOff = 16;
constexpr std::size_t kRevisionOff = 17;
constexpr std::size_t kPdLenOff = 18;
constexpr std::size_t kIrdOff = 20;
constexpr std::size_t kOrdOff = 22;
constexpr std::uint16_t kBitHigh = 0x8000;
constexpr std::uint16_t kBitLow = 0x4000;
constexpr char kKeyRequest[] = "MPA ID Req Frame";
constexpr char kKeyReply[] = "MPA ID Rep Frame";
static_assert(sizeof(kKeyRequest) == kMpaKeyLen + 1 && sizeof(kKeyReply) == kMpaKeyLen + 1);

bool key_is(Bytes b, const char* key) {
    return std::memcmp(b.data(), key, kMpaKeyLen) == 0;
}

std::uint16_t encode_word(std::uint16_t value, bool high, bool low) {
    IWCM_ASSERT(value <= kIrdOrdMax);
    return static_cast<std::uint16_t>(value | (high ? kBitHigh : 0) | (low ? kBitLow : 0));
}

MpaV2Params decode_v2(Bytes b) {
    const std::uint16_t ird = load_be16(b, kIrdOff);
    const std::uint16_t ord = load_be16(b, kOrdOff);
    MpaV2Params p;
    p.ird = ird & kIrdOrdMax;
    p.ord = ord & kIrdOrdMax;
    p.peer_to_peer = (ird & kBitHigh) != 0;
    p.rtr_send = (ird & kBitLow) != 0;
    p.rtr_write = (ord & kBitHigh) != 0;
    p.rtr_read = (ord & kBitLow) != 0;
    return p;
}

std::uint8_t encode_flags(const MpaRepr& r) {
    std::uint8_t f = 0;
    if (r.markers) f |= mpa_flags::kMarkers;
    if (r.crc) f |= mpa_flags::kCrc;
    if (r.reject) f |= mpa_flags::kReject;
    if (r.v2) f |= mpa_flags::kEnhanced;
    return f;
}

// The checks of the 20-byte header that need no private data.
ParseResult<MpaKind> check_header(Bytes b) {
    MpaKind kind = MpaKind::kRequest;
    if (key_is(b, kKeyReply))
        kind = MpaKind::kReply;
    else if (!key_is(b, kKeyRequest))
        return parse_fail(kBadValue, kLayer, "key", 0, "bad key");
    const std::uint8_t rev = load_u8(b, kRevisionOff);
    if (rev == 0)
        return parse_fail(kBadValue, kLayer, "revision", kRevisionOff, "revision 0 is not defined");
    if (rev > 2) return parse_fail(kBadValue, kLayer, "revision", kRevisionOff, "revision above 2");
    const std::uint8_t flags = load_u8(b, kFlagsOff);
    if ((flags & mpa_flags::kReject) != 0 && kind == MpaKind::kRequest)
        return parse_fail(kBadValue, kLayer, "flags", kFlagsOff, "reject flag in a request");
    if ((flags & mpa_flags::kEnhanced) != 0 && rev != 2)
        return parse_fail(kBadValue, kLayer, "flags", kFlagsOff, "enhanced flag needs revision 2");
    return kind;
}

}  // namespace

std::size_t MpaRepr::buffer_len() const {
    return kMpaHeaderLen + (v2 ? kMpaV2ParamsLen : 0) + private_data.size();
}

void MpaRepr::emit(MutBytes out) const {
    const std::size_t wire_pd = buffer_len() - kMpaHeaderLen;
    IWCM_ASSERT(wire_pd <= kMpaMaxPrivateData);
    IWCM_ASSERT(out.size() >= buffer_len());
    IWCM_ASSERT(!v2 || revision == 2);
    IWCM_ASSERT(!reject || kind == MpaKind::kReply);
    store_bytes(out, 0,
                as_bytes({kind == MpaKind::kRequest ? kKeyRequest : kKeyReply, kMpaKeyLen}));
    store_u8(out, kFlagsOff, encode_flags(*this));
    store_u8(out, kRevisionOff, revision);
    store_be16(out, kPdLenOff, static_cast<std::uint16_t>(wire_pd));
    std::size_t off = kMpaHeaderLen;
    if (v2) {
        store_be16(out, kIrdOff, encode_word(v2->ird, v2->peer_to_peer, v2->rtr_send));
        store_be16(out, kOrdOff, encode_word(v2->ord, v2->rtr_write, v2->rtr_read));
        off += kMpaV2ParamsLen;
    }
    store_bytes(out, off, private_data);
}

std::optional<std::size_t> mpa_frame_len(Bytes prefix) {
    if (prefix.size() < kMpaHeaderLen) return std::nullopt;
    return kMpaHeaderLen + load_be16(prefix, kPdLenOff);
}

ParseResult<MpaRepr> parse_mpa(Bytes buffer) {
    // One named result, filled where the caller receives it: a repr built on the stack and
    // copied out is read in 16-byte pieces right after its narrower stores, which stall.
    ParseResult<MpaRepr> result;
    if (buffer.size() < kMpaHeaderLen) {
        result = parse_fail(kTruncated, kLayer, "header", buffer.size(), "truncated header");
        return result;
    }
    auto kind = check_header(buffer);
    if (!kind) {
        result = iwcm::fail(kind.error());
        return result;
    }
    const std::size_t pd_len = load_be16(buffer, kPdLenOff);
    if (pd_len > kMpaMaxPrivateData) {
        result = parse_fail(kBadLength, kLayer, "private_data_length", kPdLenOff,
                            "private data above 512 bytes");
        return result;
    }
    if (buffer.size() < kMpaHeaderLen + pd_len) {
        result =
            parse_fail(kTruncated, kLayer, "private_data", buffer.size(), "truncated private data");
        return result;
    }
    const std::uint8_t flags = load_u8(buffer, kFlagsOff);
    MpaRepr& r = *result;
    r.kind = *kind;
    r.markers = (flags & mpa_flags::kMarkers) != 0;
    r.crc = (flags & mpa_flags::kCrc) != 0;
    r.reject = (flags & mpa_flags::kReject) != 0;
    r.revision = load_u8(buffer, kRevisionOff);
    std::size_t pd_off = kMpaHeaderLen;
    if ((flags & mpa_flags::kEnhanced) != 0) {
        if (pd_len < kMpaV2ParamsLen) {
            result = parse_fail(kBadLength, kLayer, "private_data_length", kPdLenOff,
                                "enhanced frame shorter than the IRD/ORD word");
            return result;
        }
        r.v2 = decode_v2(buffer);
        pd_off += kMpaV2ParamsLen;
    }
    r.private_data = buffer.subspan(pd_off, kMpaHeaderLen + pd_len - pd_off);
    return result;
}

}  // namespace iwcm::wire
