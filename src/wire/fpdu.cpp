// FPDU framing, RTR messages and the MPA-layer TERMINATE.
//
// Read first: fpdu.hpp, RFC 5044 section 4, RFC 5041 section 4, RFC 5040
// sections 4 and 4.8.
#include "wire/fpdu.hpp"

#include "wire/crc32c.hpp"
#include "wire/ddp.hpp"

namespace iwcm::wire {

using enum ParseErrorKind;  // the first argument of decode_fail() and parse_fail()

namespace {

constexpr const char* kLayer = "fpdu";
constexpr const char* kRtrLayer = "rtr";
constexpr const char* kTermLayer = "terminate";

constexpr std::uint32_t kFirstMsn = 1;
constexpr std::size_t kMsnOff = 10;  // in the untagged DDP header, for error offsets
constexpr std::size_t kRdmapCtrlOff = 1;
constexpr std::size_t kReadSizeOff = kDdpUntaggedHeaderLen + 12;
constexpr std::size_t kTermCtrlOff = kDdpUntaggedHeaderLen;
constexpr std::size_t kTerminateLen = kDdpUntaggedHeaderLen + 4;

std::uint8_t op(RdmapOpcode o) {
    return static_cast<std::uint8_t>(o);
}

// The untagged header of a one-segment first message (MSN 1, MO 0), as RTRs
// and the MPA-layer TERMINATE are.
DdpHeader first_untagged(RdmapOpcode opcode, std::uint32_t qn) {
    DdpHeader h;
    h.opcode = op(opcode);
    h.qn = qn;
    h.msn = kFirstMsn;
    return h;
}

std::size_t rtr_ulpdu_len(RtrType type) {
    switch (type) {
        case RtrType::kSend: return kDdpUntaggedHeaderLen;
        case RtrType::kWrite: return kDdpTaggedHeaderLen;
        case RtrType::kRead: return kDdpUntaggedHeaderLen + kReadRequestPayloadLen;
    }
    IWCM_ASSERT(false);
    return 0;
}

void put_rtr_ulpdu(const RtrParams& p, MutBytes u) {
    switch (p.type) {
        case RtrType::kSend:
            emit_ddp_header(first_untagged(RdmapOpcode::kSend, kQnSend), u);
            return;
        case RtrType::kWrite: {
            DdpHeader h;
            h.tagged = true;
            h.opcode = op(RdmapOpcode::kWrite);
            h.stag = p.stag;
            emit_ddp_header(h, u);
            return;
        }
        case RtrType::kRead: {
            const std::size_t n =
                emit_ddp_header(first_untagged(RdmapOpcode::kReadRequest, kQnReadRequest), u);
            emit_read_request(ReadRequest{p.stag, 0, 0, p.stag, 0}, u.subspan(n));
            return;
        }
    }
}

// A whole-message version-1 header of this opcode, tagged or not.
bool is_v1_last(const DdpHeader& h, RdmapOpcode opcode) {
    return h.last && h.ddp_version == kDdpVersion && h.rdmap_version == kRdmapVersion &&
           h.opcode == op(opcode);
}

bool untagged_is(const DdpHeader& h, RdmapOpcode opcode, std::uint32_t qn) {
    return !h.tagged && is_v1_last(h, opcode) && h.qn == qn;
}

ParseResult<RtrType> check_untagged_rtr(const DdpHeader& h, RtrType type) {
    if (h.msn != kFirstMsn || h.mo != 0)
        return parse_fail(kBadValue, kRtrLayer, "msn", kMsnOff,
                          "RTR is not the first message (MSN 1, MO 0)");
    return type;
}

ParseResult<RtrType> check_read_rtr(const DdpSegment& s) {
    auto rr = parse_read_request(s.payload);
    if (!rr)
        return parse_fail(kBadLength, kRtrLayer, "ulpdu_length", 0,
                          "READ request RTR is not 46 bytes");
    // The STags and offsets are not checked, as for the WRITE RTR: a
    // zero-length read moves nothing.
    if (rr->size != 0)
        return parse_fail(kBadValue, kRtrLayer, "read_size", kReadSizeOff,
                          "READ RTR is not zero-length");
    return check_untagged_rtr(s.header, RtrType::kRead);
}

}  // namespace

std::size_t fpdu_len_for_ulpdu(std::size_t ulpdu_len) {
    // The length field and the ULPDU, padded to a multiple of 4, then the CRC.
    return ((kFpduLengthLen + ulpdu_len + 3) & ~std::size_t{3}) + kFpduCrcLen;
}

std::size_t emit_fpdu(Bytes ulpdu, bool crc, MutBytes out) {
    IWCM_ASSERT(out.size() >= fpdu_len_for_ulpdu(ulpdu.size()));
    store_bytes(out, kFpduLengthLen, ulpdu);
    return seal_fpdu_in_place(ulpdu.size(), crc, out);
}

std::size_t rtr_fpdu_len(RtrType type) {
    return fpdu_len_for_ulpdu(rtr_ulpdu_len(type));
}

std::size_t emit_rtr_fpdu(const RtrParams& params, bool crc, MutBytes out) {
    IWCM_ASSERT(params.stag != 0);
    const std::size_t ulpdu_len = rtr_ulpdu_len(params.type);
    IWCM_ASSERT(out.size() >= fpdu_len_for_ulpdu(ulpdu_len));
    put_rtr_ulpdu(params, out.subspan(kFpduLengthLen, ulpdu_len));
    return seal_fpdu_in_place(ulpdu_len, crc, out);
}

std::size_t emit_read_rtr_response_fpdu(Bytes read_rtr, bool crc, MutBytes out) {
    IWCM_ASSERT(out.size() >= kReadRtrResponseFpduLen);
    auto seg = parse_ddp(read_rtr);
    IWCM_ASSERT(seg.has_value());
    auto rr = parse_read_request(seg->payload);
    IWCM_ASSERT(rr.has_value() && rr->size == 0);
    DdpHeader h;
    h.tagged = true;
    h.opcode = op(RdmapOpcode::kReadResponse);
    h.stag = rr->sink_stag;
    h.to = rr->sink_to;
    const std::size_t n = emit_ddp_header(h, out.subspan(kFpduLengthLen));
    IWCM_ASSERT(n == kDdpTaggedHeaderLen);
    return seal_fpdu_in_place(n, crc, out);
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
    Fpdu f{buffer.subspan(kFpduLengthLen, ulpdu_len), total, true};
    if (crc_expected) f.crc_ok = fpdu_crc_ok(Pieces::of(buffer), total);
    return f;
}

bool fpdu_crc_ok(const Pieces& fpdu, std::size_t total) {
    IWCM_ASSERT(total >= kFpduLengthLen + kFpduCrcLen && fpdu.size() >= total);
    std::uint32_t crc = 0;
    fpdu.first(total - kFpduCrcLen).each([&crc](Bytes run) { crc = crc32c(run, crc); });
    std::byte field[kFpduCrcLen];
    fpdu.subspan(total - kFpduCrcLen).head<sizeof field>(field);
    return load_le32(Bytes(field), 0) == crc;
}

ParseResult<RtrType> parse_rtr(Bytes u) {
    auto seg = parse_ddp(u);
    if (!seg)
        return parse_fail(kTruncated, kRtrLayer, "ulpdu_length", 0, "shorter than any DDP header");
    const DdpHeader& h = seg->header;
    if (h.tagged && is_v1_last(h, RdmapOpcode::kWrite)) {
        // Any STag and tagged offset: RFC 6581 asks the responder to check
        // neither (siw sends STag 1, other peers 0), and nothing is placed.
        if (!seg->payload.empty())
            return parse_fail(kBadValue, kRtrLayer, "ulpdu_length", 0,
                              "WRITE RTR is not zero-length");
        return RtrType::kWrite;
    }
    if (untagged_is(h, RdmapOpcode::kSend, kQnSend)) {
        if (!seg->payload.empty())
            return parse_fail(kBadValue, kRtrLayer, "ulpdu_length", 0,
                              "SEND RTR is not zero-length");
        return check_untagged_rtr(h, RtrType::kSend);
    }
    if (untagged_is(h, RdmapOpcode::kReadRequest, kQnReadRequest)) return check_read_rtr(*seg);
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
    TerminateRepr t;
    t.layer = TermLayer::kLlp;
    t.etype = kTermEtypeMpa;
    t.code = static_cast<std::uint8_t>(error);
    const std::size_t n = emit_terminate_ulpdu(t, kFirstMsn, out.subspan(kFpduLengthLen));
    IWCM_ASSERT(n == kTerminateLen);
    return seal_fpdu_in_place(n, crc, out);
}

ParseResult<TermHeader> parse_terminate_header(Bytes u) {
    auto seg = parse_ddp(u);
    if (!seg || u.size() < kTerminateLen)
        return parse_fail(kTruncated, kTermLayer, "ulpdu_length", 0, "shorter than a TERMINATE");
    if (!untagged_is(seg->header, RdmapOpcode::kTerminate, kQnTerminate))
        return parse_fail(kBadValue, kTermLayer, "opcode", kRdmapCtrlOff,
                          "not a TERMINATE on queue 2");
    return decode_term_control(load_be32(u, kTermCtrlOff));
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
