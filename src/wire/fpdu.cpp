// FPDU framing, RTR messages and the MPA-layer TERMINATE.
//
// Read first: fpdu.hpp, RFC 5044 section 4, RFC 5041 section 4, RFC 5040
// sections 4 and 4.8.
#include "wire/fpdu.hpp"

#include "wire/crc32c.hpp"

namespace iwcm::wire {

using enum ParseErrorKind;  // the first argument of decode_fail() and parse_fail()

namespace {

constexpr const char* kLayer = "fpdu";
constexpr const char* kRtrLayer = "rtr";
constexpr const char* kTermLayer = "terminate";

// DDP control byte: T (0x80), L (0x40), 4 reserved bits, DDP version 1.
constexpr std::uint8_t kDdpUntaggedLast = 0x41;
constexpr std::uint8_t kDdpTaggedLast = 0xC1;
// RDMAP control byte: version 1 in the top two bits, the opcode in the low four.
constexpr std::uint8_t kRdmapV1 = 0x40;
constexpr std::uint8_t kOpWrite = 0x0;
constexpr std::uint8_t kOpReadRequest = 0x1;
constexpr std::uint8_t kOpSend = 0x3;
constexpr std::uint8_t kOpTerminate = 0x7;

constexpr std::uint32_t kQnSend = 0;
constexpr std::uint32_t kQnReadRequest = 1;
constexpr std::uint32_t kQnTerminate = 2;
constexpr std::uint32_t kFirstMsn = 1;

// Offsets inside a ULPDU.
constexpr std::size_t kDdpCtrlOff = 0;
constexpr std::size_t kRdmapCtrlOff = 1;
constexpr std::size_t kUlpReservedOff = 2;
constexpr std::size_t kQnOff = 6;
constexpr std::size_t kMsnOff = 10;
constexpr std::size_t kMoOff = 14;
constexpr std::size_t kUntaggedHeaderLen = 18;
constexpr std::size_t kStagOff = 2;
constexpr std::size_t kToOff = 6;
constexpr std::size_t kTaggedHeaderLen = 14;
constexpr std::size_t kSinkStagOff = 18;
constexpr std::size_t kSinkToOff = 22;
constexpr std::size_t kReadSizeOff = 30;
constexpr std::size_t kSourceStagOff = 34;
constexpr std::size_t kSourceToOff = 38;
constexpr std::size_t kReadRequestLen = 46;
constexpr std::size_t kTermCtrlOff = 18;
constexpr std::size_t kTerminateLen = 22;

constexpr std::uint32_t kTermFlagM = 0x8000;
constexpr std::uint32_t kTermFlagD = 0x4000;
constexpr std::uint32_t kTermFlagR = 0x2000;

std::size_t pad_len(std::size_t ulpdu_len) {
    return (4 - (kFpduLengthLen + ulpdu_len) % 4) % 4;
}

// Writes the untagged DDP + RDMAP header shared by SEND, READ request and TERMINATE.
void put_untagged(MutBytes u, std::uint8_t opcode, std::uint32_t qn) {
    store_u8(u, kDdpCtrlOff, kDdpUntaggedLast);
    store_u8(u, kRdmapCtrlOff, kRdmapV1 | opcode);
    store_be32(u, kUlpReservedOff, 0);
    store_be32(u, kQnOff, qn);
    store_be32(u, kMsnOff, kFirstMsn);
    store_be32(u, kMoOff, 0);
}

std::size_t rtr_ulpdu_len(RtrType type) {
    switch (type) {
        case RtrType::kSend: return kUntaggedHeaderLen;
        case RtrType::kWrite: return kTaggedHeaderLen;
        case RtrType::kRead: return kReadRequestLen;
    }
    IWCM_ASSERT(false);
    return 0;
}

void put_rtr_ulpdu(const RtrParams& p, MutBytes u) {
    switch (p.type) {
        case RtrType::kSend: put_untagged(u, kOpSend, kQnSend); return;
        case RtrType::kWrite:
            store_u8(u, kDdpCtrlOff, kDdpTaggedLast);
            store_u8(u, kRdmapCtrlOff, kRdmapV1 | kOpWrite);
            store_be32(u, kStagOff, p.stag);
            store_be64(u, kToOff, 0);
            return;
        case RtrType::kRead:
            put_untagged(u, kOpReadRequest, kQnReadRequest);
            store_be32(u, kSinkStagOff, p.stag);
            store_be64(u, kSinkToOff, 0);
            store_be32(u, kReadSizeOff, 0);
            store_be32(u, kSourceStagOff, p.stag);
            store_be64(u, kSourceToOff, 0);
            return;
    }
}

// Writes length, zero pad and CRC around a ULPDU already at out[2, 2 + ulpdu_len).
std::size_t seal_fpdu(std::size_t ulpdu_len, bool crc, MutBytes out) {
    IWCM_ASSERT(ulpdu_len <= 0xFFFF);
    const std::size_t crc_off = kFpduLengthLen + ulpdu_len + pad_len(ulpdu_len);
    IWCM_ASSERT(out.size() >= crc_off + kFpduCrcLen);
    store_be16(out, 0, static_cast<std::uint16_t>(ulpdu_len));
    for (std::size_t i = kFpduLengthLen + ulpdu_len; i < crc_off; ++i) store_u8(out, i, 0);
    store_le32(out, crc_off, crc ? crc32c(out.first(crc_off)) : 0);
    return crc_off + kFpduCrcLen;
}

// Checks the DDP and RDMAP control bytes of an untagged message and its queue.
bool untagged_is(Bytes u, std::uint8_t opcode, std::uint32_t qn) {
    return u.size() >= kUntaggedHeaderLen && load_u8(u, kDdpCtrlOff) == kDdpUntaggedLast &&
           load_u8(u, kRdmapCtrlOff) == (kRdmapV1 | opcode) && load_be32(u, kQnOff) == qn;
}

ParseResult<RtrType> check_untagged_rtr(Bytes u, RtrType type) {
    if (load_be32(u, kMsnOff) != kFirstMsn || load_be32(u, kMoOff) != 0)
        return parse_fail(kBadValue, kRtrLayer, "msn", kMsnOff,
                          "RTR is not the first message (MSN 1, MO 0)");
    return type;
}

ParseResult<RtrType> check_read_rtr(Bytes u) {
    if (u.size() != kReadRequestLen)
        return parse_fail(kBadLength, kRtrLayer, "ulpdu_length", 0,
                          "READ request RTR is not 46 bytes");
    // The STags and offsets are not checked, as for the WRITE RTR: a
    // zero-length read moves nothing.
    if (load_be32(u, kReadSizeOff) != 0)
        return parse_fail(kBadValue, kRtrLayer, "read_size", kReadSizeOff,
                          "READ RTR is not zero-length");
    return check_untagged_rtr(u, RtrType::kRead);
}

}  // namespace

std::size_t fpdu_len_for_ulpdu(std::size_t ulpdu_len) {
    return kFpduLengthLen + ulpdu_len + pad_len(ulpdu_len) + kFpduCrcLen;
}

std::size_t emit_fpdu(Bytes ulpdu, bool crc, MutBytes out) {
    IWCM_ASSERT(out.size() >= fpdu_len_for_ulpdu(ulpdu.size()));
    store_bytes(out, kFpduLengthLen, ulpdu);
    return seal_fpdu(ulpdu.size(), crc, out);
}

std::size_t rtr_fpdu_len(RtrType type) {
    return fpdu_len_for_ulpdu(rtr_ulpdu_len(type));
}

std::size_t emit_rtr_fpdu(const RtrParams& params, bool crc, MutBytes out) {
    IWCM_ASSERT(params.stag != 0);
    const std::size_t ulpdu_len = rtr_ulpdu_len(params.type);
    IWCM_ASSERT(out.size() >= fpdu_len_for_ulpdu(ulpdu_len));
    put_rtr_ulpdu(params, out.subspan(kFpduLengthLen, ulpdu_len));
    return seal_fpdu(ulpdu_len, crc, out);
}

std::optional<std::size_t> fpdu_frame_len(Bytes prefix) {
    if (prefix.size() < kFpduLengthLen) return std::nullopt;
    return fpdu_len_for_ulpdu(load_be16(prefix, 0));
}

ParseResult<Fpdu> parse_fpdu(Bytes buffer, bool crc_expected) {
    if (buffer.size() < kFpduLengthLen)
        return parse_fail(kTruncated, kLayer, "ulpdu_length", buffer.size(),
                          "truncated length field");
    const std::size_t ulpdu_len = load_be16(buffer, 0);
    const std::size_t total = fpdu_len_for_ulpdu(ulpdu_len);
    if (buffer.size() < total)
        return parse_fail(kTruncated, kLayer, "ulpdu", buffer.size(), "truncated FPDU");
    const std::size_t crc_off = total - kFpduCrcLen;
    Fpdu f{buffer.subspan(kFpduLengthLen, ulpdu_len), total, true};
    if (crc_expected) f.crc_ok = load_le32(buffer, crc_off) == crc32c(buffer.first(crc_off));
    return f;
}

ParseResult<RtrType> parse_rtr(Bytes u) {
    if (u.size() < kTaggedHeaderLen)
        return parse_fail(kTruncated, kRtrLayer, "ulpdu_length", 0, "shorter than any DDP header");
    const std::uint8_t ddp = load_u8(u, kDdpCtrlOff);
    const std::uint8_t rdmap = load_u8(u, kRdmapCtrlOff);
    if (ddp == kDdpTaggedLast && rdmap == (kRdmapV1 | kOpWrite)) {
        // Any STag and tagged offset: RFC 6581 asks the responder to check
        // neither (siw sends STag 1, other peers 0), and nothing is placed.
        if (u.size() != kTaggedHeaderLen)
            return parse_fail(kBadValue, kRtrLayer, "ulpdu_length", 0,
                              "WRITE RTR is not zero-length");
        return RtrType::kWrite;
    }
    if (untagged_is(u, kOpSend, kQnSend)) {
        if (u.size() != kUntaggedHeaderLen)
            return parse_fail(kBadValue, kRtrLayer, "ulpdu_length", 0,
                              "SEND RTR is not zero-length");
        return check_untagged_rtr(u, RtrType::kSend);
    }
    if (untagged_is(u, kOpReadRequest, kQnReadRequest)) return check_read_rtr(u);
    return parse_fail(kBadValue, kRtrLayer, "opcode", kRdmapCtrlOff, "not an RTR message");
}

const char* to_string(TermError e) {
    switch (e) {
        case TermError::kTcpConnectionLost: return "TCP connection closed, terminated or lost";
        case TermError::kCrcError: return "MPA CRC error";
        case TermError::kMarkerMismatch: return "MPA marker and ULPDU length field mismatch";
        case TermError::kInvalidRequestReply: return "invalid MPA request or reply frame";
        case TermError::kLocalCatastrophic: return "local catastrophic error";
        case TermError::kInsufficientIrd: return "insufficient IRD resources";
        case TermError::kNoMatchingRtr: return "no matching RTR option";
    }
    return "unknown TERMINATE error";
}

std::size_t terminate_fpdu_len() {
    return fpdu_len_for_ulpdu(kTerminateLen);
}

std::size_t emit_terminate_fpdu(TermError error, bool crc, MutBytes out) {
    IWCM_ASSERT(out.size() >= terminate_fpdu_len());
    MutBytes u = out.subspan(kFpduLengthLen, kTerminateLen);
    put_untagged(u, kOpTerminate, kQnTerminate);
    const std::uint32_t ctrl = (std::uint32_t{kTermLayerLlp} << 28) |
                               (std::uint32_t{kTermEtypeMpa} << 24) |
                               (std::uint32_t{static_cast<std::uint8_t>(error)} << 16);
    store_be32(u, kTermCtrlOff, ctrl);
    return seal_fpdu(kTerminateLen, crc, out);
}

ParseResult<TermHeader> parse_terminate_header(Bytes u) {
    if (u.size() < kTerminateLen)
        return parse_fail(kTruncated, kTermLayer, "ulpdu_length", 0, "shorter than a TERMINATE");
    if (!untagged_is(u, kOpTerminate, kQnTerminate))
        return parse_fail(kBadValue, kTermLayer, "opcode", kRdmapCtrlOff,
                          "not a TERMINATE on queue 2");
    const std::uint32_t ctrl = load_be32(u, kTermCtrlOff);
    TermHeader h;
    h.layer = static_cast<std::uint8_t>(ctrl >> 28);
    h.etype = static_cast<std::uint8_t>((ctrl >> 24) & 0xF);
    h.code = static_cast<std::uint8_t>(ctrl >> 16);
    h.m = (ctrl & kTermFlagM) != 0;
    h.d = (ctrl & kTermFlagD) != 0;
    h.r = (ctrl & kTermFlagR) != 0;
    return h;
}

ParseResult<TermError> parse_terminate(Bytes u) {
    auto h = parse_terminate_header(u);
    if (!h) return iwcm::fail(h.error());
    if (h->layer != kTermLayerLlp || h->etype != kTermEtypeMpa)
        return parse_fail(kBadValue, kTermLayer, "layer", kTermCtrlOff, "not an MPA-layer error");
    const auto first = static_cast<std::uint8_t>(TermError::kTcpConnectionLost);
    const auto last = static_cast<std::uint8_t>(TermError::kNoMatchingRtr);
    if (h->code < first || h->code > last)
        return parse_fail(kBadValue, kTermLayer, "error_code", kTermCtrlOff + 1,
                          "unknown MPA error code");
    return static_cast<TermError>(h->code);
}

}  // namespace iwcm::wire
