// MPA FPDUs, and the few DDP/RDMAP messages a connection manager sends itself:
// the zero-length RTR of Enhanced MPA and the TERMINATE of a failed negotiation.
//
// Read first: RFC 5044 sections 4.1 and 4.4 (FPDU: 16-bit ULPDU length, ULPDU,
// pad to 4 bytes, CRC32c over all of that), RFC 5041 section 4 (DDP tagged and
// untagged headers), RFC 5040 sections 4 and 4.8 (RDMAP headers, the Terminate
// header), RFC 6581 sections 6 and 9 (RTR messages; the MPA-layer error codes),
// and docs/design.md "MPA facts". Facts this file relies on:
//  * The CRC is carried least-significant byte first (as in iSCSI); with CRC
//    not negotiated the 4 bytes are still there and zero.
//  * RTR ULPDUs, every field big-endian:
//      SEND  41 43 | 00000000 | QN 0 | MSN 1 | MO 0                 (18 bytes)
//      WRITE c1 40 | STag | TO (8 bytes, zero)                      (14 bytes)
//      READ  41 41 | 00000000 | QN 1 | MSN 1 | MO 0 | sink STag |
//            sink TO (8) | read size 0 | source STag | source TO (8) (46 bytes)
//    The STag is never zero (hardware peers reject a zero STag).
//  * TERMINATE (RFC 5040 section 4.8): an untagged DDP segment on queue 2 with
//    RDMAP opcode 7, MSN 1, MO 0, then the 32-bit Terminate Control word:
//    layer (4 bits) | error type (4) | error code (8) | M | D | R | 13 reserved.
//    When M, D or R is set, the DDP segment length, the terminated DDP header
//    and the terminated RDMAP header follow; MPA-layer errors set none of them
//    (as Linux siw does), so the ULPDU is 22 bytes:
//      41 47 | 00000000 | QN 2 | MSN 1 | MO 0 | 2 0 code 00 00
//    The MPA errors are layer 2 (LLP), error type 0 (MPA), codes from RFC 5044
//    section 8 / RFC 6580 (1 to 4) and RFC 6581 section 9 (5 to 7); the names
//    below are the RFCs', as Wireshark also prints them.
#pragma once

#include <cstdint>
#include <optional>

#include "wire/bytes.hpp"
#include "wire/pieces.hpp"

namespace iwcm::wire {

constexpr std::size_t kFpduLengthLen = 2;
constexpr std::size_t kFpduCrcLen = 4;

enum class RtrType : std::uint8_t { kSend, kWrite, kRead };

// The STag of the RTRs we send (the READ RTR's sink and source, the WRITE RTR's sink);
// their tagged offsets are zero.
constexpr std::uint32_t kRtrStag = 0x1;

struct RtrParams {
    RtrType type = RtrType::kSend;
    std::uint32_t stag = kRtrStag;  // never zero; used by WRITE and READ
};

// The FPDU length around a ULPDU of this length: 2 + ulpdu_len + pad + 4.
std::size_t fpdu_len_for_ulpdu(std::size_t ulpdu_len);
// Frames any ULPDU (at most 65535 bytes) as an FPDU: length, ULPDU, zero pad,
// CRC (zero when crc is false). out.size() >= fpdu_len_for_ulpdu(). Returns the length.
std::size_t emit_fpdu(Bytes ulpdu, bool crc, MutBytes out);

// The FPDU length of an RTR of this type (24, 20 or 52 bytes).
std::size_t rtr_fpdu_len(RtrType type);
// Writes the RTR FPDU (out.size() >= rtr_fpdu_len()); with crc false the CRC
// field is zero. Returns the length written.
std::size_t emit_rtr_fpdu(const RtrParams& params, bool crc, MutBytes out);

struct Fpdu {
    Bytes ulpdu;
    std::size_t total_len = 0;  // 2 + ULPDU + pad + 4: what the caller consumes
    bool crc_ok = false;        // always true when no CRC was expected
};

// The FPDU length (2 + ULPDU length + pad + 4) once 2 bytes are there, nullopt before.
std::optional<std::size_t> fpdu_frame_len(Bytes prefix);
// Parses one complete FPDU from the start of buffer (which may hold more). With
// crc_expected the CRC is checked and a mismatch reported in crc_ok (the FPDU
// still parses: the caller decides, RFC 5044 section 8 says to close); without,
// the CRC field is ignored. An incomplete FPDU is an error.
ParseResult<Fpdu> parse_fpdu(Bytes buffer, bool crc_expected);
// The CRC field of the FPDU of `total` bytes (fpdu_len_for_ulpdu) at the start of `fpdu`,
// which may lie in pieces, holds the CRC32c of the bytes before it. parse_fpdu's check,
// for an FPDU read where it lies (fpdu.size() >= total >= kFpduLengthLen + kFpduCrcLen).
bool fpdu_crc_ok(const Pieces& fpdu, std::size_t total);

// Recognises a zero-length RTR in a ULPDU: the exact header above, a non-zero
// STag, no payload. Anything else is an error saying why.
ParseResult<RtrType> parse_rtr(Bytes ulpdu);

// The zero-length Read Response that answers a READ RTR, as any RDMAP responder answers
// a Read Request (RFC 5040 section 4.5; siw_init_rresp): a tagged, last segment to the
// request's sink STag and tagged offset, whatever they are (siw's READ RTR has sink STag
// 0). 14 bytes of ULPDU, 20 as an FPDU.
constexpr std::size_t kReadRtrResponseFpduLen = 20;
// Writes it for the READ RTR ULPDU `read_rtr` (one parse_rtr() accepted as kRead);
// out.size() >= kReadRtrResponseFpduLen. Returns the length written.
std::size_t emit_read_rtr_response_fpdu(Bytes read_rtr, bool crc, MutBytes out);

// MPA-layer TERMINATE error codes (layer 2, error type 0).
enum class TermError : std::uint8_t {
    kTcpConnectionLost = 0x01,    // TCP connection closed, terminated or lost
    kCrcError = 0x02,             // MPA CRC error
    kMarkerMismatch = 0x03,       // MPA marker and ULPDU length field mismatch
    kInvalidRequestReply = 0x04,  // invalid MPA request or reply frame
    kLocalCatastrophic = 0x05,    // local catastrophic error (RFC 6581)
    kInsufficientIrd = 0x06,      // insufficient IRD resources (RFC 6581)
    kNoMatchingRtr = 0x07,        // no matching RTR option (RFC 6581)
};

constexpr std::uint8_t kTermLayerRdmap = 0;
constexpr std::uint8_t kTermLayerDdp = 1;
constexpr std::uint8_t kTermLayerLlp = 2;
constexpr std::uint8_t kTermEtypeMpa = 0;

const char* to_string(TermError e);

// The Terminate Control word of any TERMINATE, for callers that log other layers' errors.
struct TermHeader {
    std::uint8_t layer = 0;
    std::uint8_t etype = 0;
    std::uint8_t code = 0;
    bool m = false;
    bool d = false;
    bool r = false;
};

// The FPDU length of an MPA-layer TERMINATE: 28 bytes.
std::size_t terminate_fpdu_len();
// Writes an MPA-layer TERMINATE FPDU (out.size() >= terminate_fpdu_len()).
std::size_t emit_terminate_fpdu(TermError error, bool crc, MutBytes out);
// Reads the header of any TERMINATE ULPDU (queue 2, opcode 7).
ParseResult<TermHeader> parse_terminate_header(Bytes ulpdu);
// Reads an MPA-layer TERMINATE ULPDU; other layers or unknown codes are errors.
ParseResult<TermError> parse_terminate(Bytes ulpdu);

}  // namespace iwcm::wire
