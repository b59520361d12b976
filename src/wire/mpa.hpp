// MPA request, reply and reject frames, revision 1 and Enhanced MPA (revision 2).
//
// Read first: RFC 5044 section 7.1 (the request/reply frame: 16-byte key, flags
// M C R and reserved bits, revision, 16-bit private data length, private data
// of at most 512 bytes), RFC 6581 sections 5 to 9 (revision 2: the IRD/ORD word
// that opens the private data, the peer-to-peer bit and the RTR choices), and
// docs/design.md "MPA facts" (the 0x10 "enhanced" flag Linux sets with revision 2).
//
// Layout (all big-endian):
//   0  key "MPA ID Req Frame" or "MPA ID Rep Frame"
//   16 flags: M 0x80, C 0x40, R 0x20 (reply only), 0x10 enhanced, low 4 bits reserved
//   17 revision
//   18 private data length (the v2 word counted)
//   20 [v2 only] IRD word: A 0x8000 peer-to-peer, B 0x4000 zero-length SEND, IRD 14 bits
//   22 [v2 only] ORD word: C 0x8000 zero-length WRITE, D 0x4000 zero-length READ, ORD 14 bits
//   .. the application's private data
// The reserved flag bits are sent as zero and not checked (RFC 5044 section 7.1).
#pragma once

#include <cstdint>
#include <optional>

#include "wire/bytes.hpp"

namespace iwcm::wire {

constexpr std::size_t kMpaHeaderLen = 20;
constexpr std::size_t kMpaMaxPrivateData = 512;
constexpr std::size_t kMpaV2ParamsLen = 4;
constexpr std::size_t kMpaKeyLen = 16;
constexpr std::uint16_t kIrdOrdNone = 0x3FFF;
constexpr std::uint16_t kIrdOrdMax = 0x3FFF;

namespace mpa_flags {
constexpr std::uint8_t kMarkers = 0x80;
constexpr std::uint8_t kCrc = 0x40;
constexpr std::uint8_t kReject = 0x20;
constexpr std::uint8_t kEnhanced = 0x10;
}  // namespace mpa_flags

enum class MpaKind : std::uint8_t { kRequest, kReply };

// The revision-2 IRD/ORD word (the first 4 private-data bytes).
struct MpaV2Params {
    std::uint16_t ird = 0;      // 14 bits; kIrdOrdNone means "no value"
    std::uint16_t ord = 0;      // 14 bits
    bool peer_to_peer = false;  // A
    bool rtr_send = false;      // B: zero-length SEND as RTR
    bool rtr_write = false;     // C: zero-length RDMA WRITE as RTR
    bool rtr_read = false;      // D: zero-length RDMA READ as RTR
    friend constexpr bool operator==(const MpaV2Params&, const MpaV2Params&) = default;
};

struct MpaRepr {
    MpaKind kind = MpaKind::kRequest;
    bool markers = false;
    bool crc = false;
    bool reject = false;
    std::uint8_t revision = 2;
    // Present iff the enhanced flag is set; then the word is emitted and counted
    // in the wire private-data length.
    std::optional<MpaV2Params> v2;
    // The application's part only (the v2 word excluded). A view: on parse it
    // points into the parsed buffer, on emit the caller keeps it alive.
    Bytes private_data;

    // 20 + the wire private-data length.
    std::size_t buffer_len() const;
    // Writes buffer_len() bytes. Asserts the wire private data fits 512 bytes,
    // IRD/ORD fit 14 bits, v2 only with revision 2, reject only in a reply.
    void emit(MutBytes out) const;
};

// The whole frame length (20 + wire private-data length) once the 20-byte header
// is there, nullopt before: for reassembly across TCP segments. The key is not
// checked and the length not limited: parse_mpa() does both.
std::optional<std::size_t> mpa_frame_len(Bytes prefix);

// Parses one complete frame from the start of buffer (which may hold more; only
// buffer_len() bytes are the frame). Refuses: a key other than the request or
// reply key ("bad key"), revision 0 or above 2, a private-data length above 512,
// an incomplete frame, the reject flag in a request, the enhanced flag with
// revision 1 or with fewer than 4 private-data bytes. A revision-2 frame
// without the enhanced flag parses with v2 empty: the CM decides.
ParseResult<MpaRepr> parse_mpa(Bytes buffer);

}  // namespace iwcm::wire
