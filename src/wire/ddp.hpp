// DDP segments (RFC 5041) and RDMAP messages (RFC 5040) inside an MPA ULPDU.
//
// Read first: fpdu.hpp (the FPDU around a ULPDU), RFC 5041 section 4 (the
// tagged and untagged headers), RFC 5040 sections 4.1-4.8 (the RDMAP control
// byte, the Read Request and Terminate headers) and section 7 (the
// Terminate's layer, error type and code). Every field is big-endian.
//
//   byte 0  DDP control: T (0x80) | L (0x40) | 4 reserved | DDP version (2 bits, 1)
//   byte 1  RDMAP control: RDMAP version (2 bits, 1) | 2 reserved | opcode (4 bits)
//   tagged:   STag (4) | tagged offset (8)                           = 14 bytes
//   untagged: reserved / invalidate STag (4) | QN (4) | MSN (4) | MO (4) = 18 bytes
//   Read Request payload (queue 1): sink STag (4) | sink TO (8) | size (4) |
//                                   source STag (4) | source TO (8)      = 28 bytes
//   Terminate payload (queue 2): layer (4 bits) | error type (4) | code (8) |
//       M | D | R | 13 reserved; then, when M, the DDP segment length (2);
//       when D, the terminated DDP header (14 or 18); when R, the terminated
//       Read Request header (28).
// The values of section 7 and this Terminate layout are the ones Linux siw
// (drivers/infiniband/sw/siw/iwarp.h, siw_send_terminate) and Wireshark's
// iWARP dissector use: M, D, R are bits 0x8000, 0x4000, 0x2000 of the
// control word, and the 16-bit DDP segment length sits right after it.
//
// Parsing is lenient where the data path must answer with a TERMINATE: a
// header with a wrong DDP or RDMAP version, an unknown opcode or a queue
// number out of range parses, and the caller checks (check_ddp_segment);
// only a ULPDU too short for its header is a parse error.
#pragma once

#include <cstdint>
#include <optional>

#include "wire/bytes.hpp"
#include "wire/fpdu.hpp"

namespace iwcm::wire {

constexpr std::size_t kDdpTaggedHeaderLen = 14;
constexpr std::size_t kDdpUntaggedHeaderLen = 18;
constexpr std::size_t kReadRequestPayloadLen = 28;
constexpr std::uint8_t kDdpVersion = 1;
constexpr std::uint8_t kRdmapVersion = 1;

// The DDP control byte's T bit (RFC 5041 section 4.2): a tagged segment.
constexpr std::uint8_t kDdpFlagTagged = 0x80;

// The length of the DDP and RDMAP header that starts with DDP control byte `control`
// (its T bit: tagged or untagged).
constexpr std::size_t ddp_header_len(std::uint8_t control) {
    return (control & kDdpFlagTagged) != 0 ? kDdpTaggedHeaderLen : kDdpUntaggedHeaderLen;
}

enum class RdmapOpcode : std::uint8_t {
    kWrite = 0x0,
    kReadRequest = 0x1,
    kReadResponse = 0x2,
    kSend = 0x3,
    kSendInvalidate = 0x4,
    kSendSe = 0x5,
    kSendSeInvalidate = 0x6,
    kTerminate = 0x7,
};
const char* to_string(RdmapOpcode op);

// Untagged queue numbers (RFC 5040 section 5.1).
constexpr std::uint32_t kQnSend = 0;
constexpr std::uint32_t kQnReadRequest = 1;
constexpr std::uint32_t kQnTerminate = 2;

struct DdpHeader {
    bool tagged = false;
    bool last = true;
    std::uint8_t ddp_version = kDdpVersion;
    std::uint8_t rdmap_version = kRdmapVersion;
    std::uint8_t opcode = 0;  // RdmapOpcode as a raw 4-bit value (unknown ones parse)
    // tagged
    std::uint32_t stag = 0;
    std::uint64_t to = 0;
    // untagged
    std::uint32_t inval_stag = 0;  // the reserved word; Send with Invalidate's STag
    std::uint32_t qn = 0;
    std::uint32_t msn = 0;
    std::uint32_t mo = 0;

    std::size_t header_len() const { return tagged ? kDdpTaggedHeaderLen : kDdpUntaggedHeaderLen; }
    bool operator==(const DdpHeader&) const = default;
};

struct DdpSegment {
    DdpHeader header;
    Bytes header_bytes;  // the header as received (a TERMINATE quotes it)
    Bytes payload;
};

// Parses the DDP/RDMAP header at the start of a ULPDU; the rest is payload.
ParseResult<DdpSegment> parse_ddp(Bytes ulpdu);
// Writes a header (header_len() bytes). Returns the length.
std::size_t emit_ddp_header(const DdpHeader& header, MutBytes out);

struct ReadRequest {
    std::uint32_t sink_stag = 0;
    std::uint64_t sink_to = 0;
    std::uint32_t size = 0;
    std::uint32_t source_stag = 0;
    std::uint64_t source_to = 0;
    bool operator==(const ReadRequest&) const = default;
};
ParseResult<ReadRequest> parse_read_request(Bytes payload);  // exactly 28 bytes
std::size_t emit_read_request(const ReadRequest& request, MutBytes out);

// ---- Terminate (RFC 5040 section 4.8, error values section 7) ----
enum class TermLayer : std::uint8_t { kRdmap = 0, kDdp = 1, kLlp = 2 };

// RDMAP layer error types and codes (RFC 5040 section 7.2).
constexpr std::uint8_t kRdmapEtypeLocalCatastrophic = 0x0;
constexpr std::uint8_t kRdmapEtypeRemoteProtection = 0x1;
constexpr std::uint8_t kRdmapEtypeRemoteOperation = 0x2;
constexpr std::uint8_t kRdmapCodeInvalidStag = 0x00;
constexpr std::uint8_t kRdmapCodeBaseBounds = 0x01;
constexpr std::uint8_t kRdmapCodeAccessRights = 0x02;
constexpr std::uint8_t kRdmapCodeStagNotAssociated = 0x03;
constexpr std::uint8_t kRdmapCodeToWrap = 0x04;
constexpr std::uint8_t kRdmapCodeInvalidVersion = 0x05;
constexpr std::uint8_t kRdmapCodeUnexpectedOpcode = 0x06;
constexpr std::uint8_t kRdmapCodeCatastrophicStream = 0x07;
constexpr std::uint8_t kRdmapCodeCatastrophicGlobal = 0x08;
constexpr std::uint8_t kRdmapCodeCannotInvalidate = 0x09;
constexpr std::uint8_t kRdmapCodeUnspecified = 0xFF;

// DDP layer error types and codes (RFC 5041 section 7).
constexpr std::uint8_t kDdpEtypeLocalCatastrophic = 0x0;
constexpr std::uint8_t kDdpEtypeTagged = 0x1;
constexpr std::uint8_t kDdpEtypeUntagged = 0x2;
constexpr std::uint8_t kDdpTaggedInvalidStag = 0x00;
constexpr std::uint8_t kDdpTaggedBaseBounds = 0x01;
constexpr std::uint8_t kDdpTaggedStagNotAssociated = 0x02;
constexpr std::uint8_t kDdpTaggedToWrap = 0x03;
constexpr std::uint8_t kDdpTaggedInvalidVersion = 0x04;
constexpr std::uint8_t kDdpUntaggedInvalidQn = 0x01;
constexpr std::uint8_t kDdpUntaggedNoBuffer = 0x02;  // invalid MSN: no buffer available
constexpr std::uint8_t kDdpUntaggedMsnRange = 0x03;  // invalid MSN: MSN range
constexpr std::uint8_t kDdpUntaggedInvalidMo = 0x04;
constexpr std::uint8_t kDdpUntaggedTooLong = 0x05;  // message too long for the buffer
constexpr std::uint8_t kDdpUntaggedInvalidVersion = 0x06;

struct TerminateRepr {
    TermLayer layer = TermLayer::kRdmap;
    std::uint8_t etype = 0;
    std::uint8_t code = 0;
    // M: the DDP segment length of the terminated segment. RFC 5040 calls it
    // the segment's length; Linux siw writes the ULPDU length less the DDP
    // and RDMAP headers (its payload length), so a peer may see either.
    std::optional<std::uint16_t> ddp_segment_len{};
    Bytes ddp_header{};  // D when not empty: 14 or 18 bytes (its T bit says which), as received
    // R when not empty: the 28-byte Read Request header. siw also sets R on
    // Send errors without quoting one; that parses as R with nothing here.
    Bytes rdmap_header{};
};

// The whole Terminate ULPDU: untagged header (queue 2, opcode 7, MSN, MO 0,
// L set) and the Terminate payload.
std::size_t terminate_ulpdu_len(const TerminateRepr& term);
std::size_t emit_terminate_ulpdu(const TerminateRepr& term, std::uint32_t msn, MutBytes out);
// The Terminate payload (after the untagged header); views into it.
ParseResult<TerminateRepr> parse_terminate_payload(Bytes payload);
const char* describe_term(TermLayer layer, std::uint8_t etype, std::uint8_t code);

// The Terminate Control word (layer, error type, code, M, D, R) as fields;
// fpdu.cpp reads MPA-layer Terminates with it too.
TermHeader decode_term_control(std::uint32_t word);

// ---- FPDU around pieces ----
// Writes length, zero pad and CRC (zero when crc is false) around a ULPDU
// already at out[2, 2 + ulpdu_len). Returns the FPDU length.
std::size_t seal_fpdu_in_place(std::size_t ulpdu_len, bool crc, MutBytes out);
// For an FPDU sent in pieces: writes the zero pad and the CRC that follow a
// ULPDU of ulpdu_len bytes into out (at most 7 bytes). `crc_so_far` is
// crc32c of the length field and the ULPDU (nullopt: CRC not negotiated,
// the field is zero). Returns the trailer's length.
std::size_t emit_fpdu_trailer(std::size_t ulpdu_len, std::optional<std::uint32_t> crc_so_far,
                              MutBytes out);
// The most ULPDU bytes an FPDU of at most max_fpdu bytes carries (at most
// 65535); 0 when max_fpdu is below 8, the smallest FPDU.
std::size_t max_ulpdu_for_fpdu(std::size_t max_fpdu);

}  // namespace iwcm::wire
