// DDP segment headers, RDMAP Read Request and Terminate messages, and the
// FPDU sealing the data path shares with the MPA-layer messages of fpdu.cpp.
//
// Read first: ddp.hpp (the layouts), RFC 5041 sections 4 and 7, RFC 5040
// sections 4.4 (Read Request), 4.8 (Terminate) and 7 (error values).
#include "wire/ddp.hpp"

#include <algorithm>

#include "wire/crc32c.hpp"
#include "wire/fpdu.hpp"

namespace iwcm::wire {

using enum ParseErrorKind;  // the first argument of parse_fail()

namespace {

constexpr const char* kLayer = "ddp";
constexpr const char* kReadLayer = "read_request";
constexpr const char* kTermLayer = "terminate";

// DDP control byte (RFC 5041 section 4.2): T (kDdpFlagTagged, ddp.hpp), L, 4 reserved
// bits, version.
constexpr std::uint8_t kDdpFlagLast = 0x40;
constexpr std::uint8_t kDdpVersionMask = 0x03;
// RDMAP control byte (RFC 5040 section 4.2): version, 2 reserved bits, opcode.
constexpr unsigned kRdmapVersionShift = 6;
constexpr std::uint8_t kRdmapOpcodeMask = 0x0F;

// Offsets inside a DDP header (the ULPDU's start).
constexpr std::size_t kDdpCtrlOff = 0;
constexpr std::size_t kRdmapCtrlOff = 1;
constexpr std::size_t kStagOff = 2;  // tagged
constexpr std::size_t kToOff = 6;
constexpr std::size_t kInvalStagOff = 2;  // untagged
constexpr std::size_t kQnOff = 6;
constexpr std::size_t kMsnOff = 10;
constexpr std::size_t kMoOff = 14;

// Offsets inside a Read Request payload (RFC 5040 section 4.4).
constexpr std::size_t kSinkStagOff = 0;
constexpr std::size_t kSinkToOff = 4;
constexpr std::size_t kReadSizeOff = 12;
constexpr std::size_t kSourceStagOff = 16;
constexpr std::size_t kSourceToOff = 20;

// The Terminate payload (RFC 5040 section 4.8): the control word, then the
// optional DDP segment length (16 bits), DDP header and RDMAP header.
constexpr std::size_t kTermCtrlLen = 4;
constexpr std::size_t kTermSegLenLen = 2;
constexpr std::uint32_t kTermFlagM = 0x8000;
constexpr std::uint32_t kTermFlagD = 0x4000;
constexpr std::uint32_t kTermFlagR = 0x2000;

std::uint32_t term_control_word(const TermHeader& h) {
    IWCM_ASSERT(h.layer <= 0xF && h.etype <= 0xF);
    return (std::uint32_t{h.layer} << 28) | (std::uint32_t{h.etype} << 24) |
           (std::uint32_t{h.code} << 16) | (h.m ? kTermFlagM : 0) | (h.d ? kTermFlagD : 0) |
           (h.r ? kTermFlagR : 0);
}

// The quoted DDP header of a Terminate: its own T bit says how long it is.
ParseResult<Bytes> take_quoted_ddp_header(Bytes rest, std::size_t off) {
    if (rest.empty())
        return parse_fail(kTruncated, kTermLayer, "ddp_header", off, "D set, no DDP header");
    const std::size_t len = ddp_header_len(load_u8(rest, 0));
    if (rest.size() < len)
        return parse_fail(kTruncated, kTermLayer, "ddp_header", off, "quoted DDP header cut");
    return rest.first(len);
}

const char* describe_rdmap(std::uint8_t etype, std::uint8_t code) {
    if (etype == kRdmapEtypeLocalCatastrophic) return "RDMAP local catastrophic error";
    if (etype != kRdmapEtypeRemoteProtection && etype != kRdmapEtypeRemoteOperation)
        return "RDMAP error of unknown type";
    switch (code) {
        case kRdmapCodeInvalidStag: return "RDMAP remote protection: invalid STag";
        case kRdmapCodeBaseBounds: return "RDMAP remote protection: base or bounds violation";
        case kRdmapCodeAccessRights: return "RDMAP remote protection: access rights violation";
        case kRdmapCodeStagNotAssociated:
            return "RDMAP remote protection: STag not associated with the RDMAP stream";
        case kRdmapCodeToWrap: return "RDMAP remote protection: tagged offset wrap";
        case kRdmapCodeInvalidVersion: return "RDMAP remote operation: invalid RDMAP version";
        case kRdmapCodeUnexpectedOpcode: return "RDMAP remote operation: unexpected opcode";
        case kRdmapCodeCatastrophicStream:
            return "RDMAP remote operation: catastrophic error localized to the stream";
        case kRdmapCodeCatastrophicGlobal: return "RDMAP remote operation: catastrophic error";
        case kRdmapCodeCannotInvalidate: return "RDMAP: STag cannot be invalidated";
        case kRdmapCodeUnspecified: return "RDMAP: unspecified error";
        default: return "RDMAP error with an unknown code";
    }
}

const char* describe_ddp_tagged(std::uint8_t code) {
    switch (code) {
        case kDdpTaggedInvalidStag: return "DDP tagged buffer: invalid STag";
        case kDdpTaggedBaseBounds: return "DDP tagged buffer: base or bounds violation";
        case kDdpTaggedStagNotAssociated:
            return "DDP tagged buffer: STag not associated with the DDP stream";
        case kDdpTaggedToWrap: return "DDP tagged buffer: tagged offset wrap";
        case kDdpTaggedInvalidVersion: return "DDP tagged buffer: invalid DDP version";
        default: return "DDP tagged buffer error with an unknown code";
    }
}

const char* describe_ddp_untagged(std::uint8_t code) {
    switch (code) {
        case kDdpUntaggedInvalidQn: return "DDP untagged buffer: invalid queue number";
        case kDdpUntaggedNoBuffer: return "DDP untagged buffer: invalid MSN, no buffer available";
        case kDdpUntaggedMsnRange: return "DDP untagged buffer: invalid MSN, MSN range";
        case kDdpUntaggedInvalidMo: return "DDP untagged buffer: invalid message offset";
        case kDdpUntaggedTooLong: return "DDP untagged buffer: message too long for the buffer";
        case kDdpUntaggedInvalidVersion: return "DDP untagged buffer: invalid DDP version";
        default: return "DDP untagged buffer error with an unknown code";
    }
}

const char* describe_ddp(std::uint8_t etype, std::uint8_t code) {
    switch (etype) {
        case kDdpEtypeLocalCatastrophic: return "DDP local catastrophic error";
        case kDdpEtypeTagged: return describe_ddp_tagged(code);
        case kDdpEtypeUntagged: return describe_ddp_untagged(code);
        default: return "DDP error of unknown type";
    }
}

const char* describe_llp(std::uint8_t etype, std::uint8_t code) {
    const auto first = static_cast<std::uint8_t>(TermError::kTcpConnectionLost);
    const auto last = static_cast<std::uint8_t>(TermError::kNoMatchingRtr);
    if (etype != kTermEtypeMpa || code < first || code > last) return "LLP error, unknown";
    return to_string(static_cast<TermError>(code));
}

}  // namespace

const char* to_string(RdmapOpcode op) {
    switch (op) {
        case RdmapOpcode::kWrite: return "Write";
        case RdmapOpcode::kReadRequest: return "Read Request";
        case RdmapOpcode::kReadResponse: return "Read Response";
        case RdmapOpcode::kSend: return "Send";
        case RdmapOpcode::kSendInvalidate: return "Send with Invalidate";
        case RdmapOpcode::kSendSe: return "Send with Solicited Event";
        case RdmapOpcode::kSendSeInvalidate: return "Send with Solicited Event and Invalidate";
        case RdmapOpcode::kTerminate: return "Terminate";
    }
    return "unknown RDMAP opcode";
}

ParseResult<DdpSegment> parse_ddp(Bytes ulpdu) {
    if (ulpdu.size() < kDdpTaggedHeaderLen)
        return parse_fail(kTruncated, kLayer, "header", ulpdu.size(), "shorter than a DDP header");
    const std::uint8_t ddp = load_u8(ulpdu, kDdpCtrlOff);
    const std::uint8_t rdmap = load_u8(ulpdu, kRdmapCtrlOff);
    DdpSegment s;
    DdpHeader& h = s.header;
    h.tagged = (ddp & kDdpFlagTagged) != 0;
    h.last = (ddp & kDdpFlagLast) != 0;
    h.ddp_version = ddp & kDdpVersionMask;
    h.rdmap_version = static_cast<std::uint8_t>(rdmap >> kRdmapVersionShift);
    h.opcode = rdmap & kRdmapOpcodeMask;
    if (h.tagged) {
        h.stag = load_be32(ulpdu, kStagOff);
        h.to = load_be64(ulpdu, kToOff);
    } else {
        if (ulpdu.size() < kDdpUntaggedHeaderLen)
            return parse_fail(kTruncated, kLayer, "header", ulpdu.size(),
                              "shorter than an untagged DDP header");
        h.inval_stag = load_be32(ulpdu, kInvalStagOff);
        h.qn = load_be32(ulpdu, kQnOff);
        h.msn = load_be32(ulpdu, kMsnOff);
        h.mo = load_be32(ulpdu, kMoOff);
    }
    s.header_bytes = ulpdu.first(h.header_len());
    s.payload = ulpdu.subspan(h.header_len());
    return s;
}

std::size_t emit_ddp_header(const DdpHeader& h, MutBytes out) {
    IWCM_ASSERT(out.size() >= h.header_len());
    IWCM_ASSERT(h.ddp_version <= kDdpVersionMask && h.rdmap_version <= 3);
    IWCM_ASSERT(h.opcode <= kRdmapOpcodeMask);
    const std::uint8_t ddp = static_cast<std::uint8_t>((h.tagged ? kDdpFlagTagged : 0) |
                                                       (h.last ? kDdpFlagLast : 0) | h.ddp_version);
    store_u8(out, kDdpCtrlOff, ddp);
    store_u8(out, kRdmapCtrlOff,
             static_cast<std::uint8_t>((h.rdmap_version << kRdmapVersionShift) | h.opcode));
    if (h.tagged) {
        store_be32(out, kStagOff, h.stag);
        store_be64(out, kToOff, h.to);
    } else {
        store_be32(out, kInvalStagOff, h.inval_stag);
        store_be32(out, kQnOff, h.qn);
        store_be32(out, kMsnOff, h.msn);
        store_be32(out, kMoOff, h.mo);
    }
    return h.header_len();
}

ParseResult<ReadRequest> parse_read_request(Bytes p) {
    if (p.size() < kReadRequestPayloadLen)
        return parse_fail(kTruncated, kReadLayer, "payload", p.size(),
                          "shorter than a Read Request header");
    if (p.size() > kReadRequestPayloadLen)
        return parse_fail(kBadLength, kReadLayer, "payload", kReadRequestPayloadLen,
                          "bytes after the Read Request header");
    ReadRequest r;
    r.sink_stag = load_be32(p, kSinkStagOff);
    r.sink_to = load_be64(p, kSinkToOff);
    r.size = load_be32(p, kReadSizeOff);
    r.source_stag = load_be32(p, kSourceStagOff);
    r.source_to = load_be64(p, kSourceToOff);
    return r;
}

std::size_t emit_read_request(const ReadRequest& r, MutBytes out) {
    IWCM_ASSERT(out.size() >= kReadRequestPayloadLen);
    store_be32(out, kSinkStagOff, r.sink_stag);
    store_be64(out, kSinkToOff, r.sink_to);
    store_be32(out, kReadSizeOff, r.size);
    store_be32(out, kSourceStagOff, r.source_stag);
    store_be64(out, kSourceToOff, r.source_to);
    return kReadRequestPayloadLen;
}

TermHeader decode_term_control(std::uint32_t word) {
    TermHeader h;
    h.layer = static_cast<std::uint8_t>(word >> 28);
    h.etype = static_cast<std::uint8_t>((word >> 24) & 0xF);
    h.code = static_cast<std::uint8_t>(word >> 16);
    h.m = (word & kTermFlagM) != 0;
    h.d = (word & kTermFlagD) != 0;
    h.r = (word & kTermFlagR) != 0;
    return h;
}

std::size_t terminate_ulpdu_len(const TerminateRepr& t) {
    IWCM_ASSERT(t.ddp_header.empty() || t.ddp_header.size() == kDdpTaggedHeaderLen ||
                t.ddp_header.size() == kDdpUntaggedHeaderLen);
    IWCM_ASSERT(t.rdmap_header.empty() || t.rdmap_header.size() == kReadRequestPayloadLen);
    return kDdpUntaggedHeaderLen + kTermCtrlLen + (t.ddp_segment_len ? kTermSegLenLen : 0) +
           t.ddp_header.size() + t.rdmap_header.size();
}

std::size_t emit_terminate_ulpdu(const TerminateRepr& t, std::uint32_t msn, MutBytes out) {
    const std::size_t len = terminate_ulpdu_len(t);
    IWCM_ASSERT(out.size() >= len);
    DdpHeader h;
    h.opcode = static_cast<std::uint8_t>(RdmapOpcode::kTerminate);
    h.qn = kQnTerminate;
    h.msn = msn;
    std::size_t off = emit_ddp_header(h, out);
    const TermHeader ctrl{static_cast<std::uint8_t>(t.layer),
                          t.etype,
                          t.code,
                          t.ddp_segment_len.has_value(),
                          !t.ddp_header.empty(),
                          !t.rdmap_header.empty()};
    store_be32(out, off, term_control_word(ctrl));
    off += kTermCtrlLen;
    if (t.ddp_segment_len) {
        store_be16(out, off, *t.ddp_segment_len);
        off += kTermSegLenLen;
    }
    store_bytes(out, off, t.ddp_header);
    off += t.ddp_header.size();
    store_bytes(out, off, t.rdmap_header);
    off += t.rdmap_header.size();
    IWCM_ASSERT(off == len);
    return len;
}

ParseResult<TerminateRepr> parse_terminate_payload(Bytes p) {
    if (p.size() < kTermCtrlLen)
        return parse_fail(kTruncated, kTermLayer, "control", p.size(),
                          "shorter than the Terminate Control word");
    const TermHeader ctrl = decode_term_control(load_be32(p, 0));
    TerminateRepr t;
    t.layer = static_cast<TermLayer>(ctrl.layer);  // any 4-bit value; describe_term names it
    t.etype = ctrl.etype;
    t.code = ctrl.code;
    std::size_t off = kTermCtrlLen;
    if (ctrl.m) {
        if (p.size() < off + kTermSegLenLen)
            return parse_fail(kTruncated, kTermLayer, "ddp_segment_length", off,
                              "M set, no DDP segment length");
        t.ddp_segment_len = load_be16(p, off);
        off += kTermSegLenLen;
    }
    if (ctrl.d) {
        auto quoted = take_quoted_ddp_header(p.subspan(off), off);
        if (!quoted) return iwcm::fail(quoted.error());
        t.ddp_header = *quoted;
        off += quoted->size();
    }
    // siw sets R on errors of Sends without quoting an RDMAP header (only a
    // Read Request has one), so a missing RDMAP header is not an error: R
    // then reads back as an empty rdmap_header.
    if (ctrl.r && p.size() >= off + kReadRequestPayloadLen)
        t.rdmap_header = p.subspan(off, kReadRequestPayloadLen);
    return t;
}

const char* describe_term(TermLayer layer, std::uint8_t etype, std::uint8_t code) {
    switch (layer) {
        case TermLayer::kRdmap: return describe_rdmap(etype, code);
        case TermLayer::kDdp: return describe_ddp(etype, code);
        case TermLayer::kLlp: return describe_llp(etype, code);
    }
    return "error of an unknown layer";
}

std::size_t seal_fpdu_in_place(std::size_t ulpdu_len, bool crc, MutBytes out) {
    IWCM_ASSERT(ulpdu_len <= 0xFFFF);
    const std::size_t crc_off = fpdu_len_for_ulpdu(ulpdu_len) - kFpduCrcLen;
    IWCM_ASSERT(out.size() >= crc_off + kFpduCrcLen);
    store_be16(out, 0, static_cast<std::uint16_t>(ulpdu_len));
    for (std::size_t i = kFpduLengthLen + ulpdu_len; i < crc_off; ++i) store_u8(out, i, 0);
    store_le32(out, crc_off, crc ? crc32c(out.first(crc_off)) : 0);
    return crc_off + kFpduCrcLen;
}

std::size_t emit_fpdu_trailer(std::size_t ulpdu_len, std::optional<std::uint32_t> crc_so_far,
                              MutBytes out) {
    const std::size_t pad =
        fpdu_len_for_ulpdu(ulpdu_len) - kFpduLengthLen - ulpdu_len - kFpduCrcLen;
    IWCM_ASSERT(out.size() >= pad + kFpduCrcLen);
    for (std::size_t i = 0; i < pad; ++i) store_u8(out, i, 0);
    store_le32(out, pad, crc_so_far ? crc32c(out.first(pad), *crc_so_far) : 0);
    return pad + kFpduCrcLen;
}

std::size_t max_ulpdu_for_fpdu(std::size_t max_fpdu) {
    // An FPDU is the 2-byte length and the ULPDU rounded up to 4, then the CRC.
    if (max_fpdu < kFpduLengthLen + kFpduCrcLen + 2) return 0;
    const std::size_t framed = (max_fpdu - kFpduCrcLen) & ~std::size_t{3};
    const std::size_t ulpdu = std::min<std::size_t>(framed - kFpduLengthLen, 0xFFFF);
    IWCM_ASSERT(fpdu_len_for_ulpdu(ulpdu) <= max_fpdu);
    return ulpdu;
}

}  // namespace iwcm::wire
