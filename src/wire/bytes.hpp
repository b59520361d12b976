// Byte spans, big-endian loads and stores, and the parse error of every wire format.
//
// Read first: docs/design.md "Code style" ("Wire": checked views, plain Repr
// values) and RFC 1700's "network byte order" convention: every multi-byte field
// on the wire is big-endian unless a format says otherwise (the MPA CRC is the
// one exception, see fpdu.hpp).
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "iwcm/assert.hpp"
#include "iwcm/result.hpp"

namespace iwcm::wire {

using Bytes = std::span<const std::byte>;
using MutBytes = std::span<std::byte>;

// The loads and stores check their bounds with IWCM_ASSERT: a parser checks the
// length of its input before it reads a field, so an out-of-range access is a bug.
inline std::uint8_t load_u8(Bytes b, std::size_t off) {
    IWCM_ASSERT(off < b.size());
    return static_cast<std::uint8_t>(b[off]);
}

// Always inline: otherwise GCC 12's link-time inliner leaves this one out of line in the
// core's frame handling (a call for two byte loads; 68 instructions a setup, callgrind).
[[gnu::always_inline]] inline std::uint16_t load_be16(Bytes b, std::size_t off) {
    IWCM_ASSERT(off + 2 <= b.size());
    return static_cast<std::uint16_t>((std::uint16_t{static_cast<std::uint8_t>(b[off])} << 8) |
                                      std::uint16_t{static_cast<std::uint8_t>(b[off + 1])});
}

inline std::uint32_t load_be32(Bytes b, std::size_t off) {
    IWCM_ASSERT(off + 4 <= b.size());
    std::uint32_t v = 0;
    std::memcpy(&v, b.data() + off, 4);
    return __builtin_bswap32(v);
}

inline std::uint64_t load_be64(Bytes b, std::size_t off) {
    IWCM_ASSERT(off + 8 <= b.size());
    std::uint64_t v = 0;
    std::memcpy(&v, b.data() + off, 8);
    return __builtin_bswap64(v);
}

// The MPA CRC is the one field carried least-significant byte first.
inline std::uint32_t load_le32(Bytes b, std::size_t off) {
    IWCM_ASSERT(off + 4 <= b.size());
    std::uint32_t v = 0;
    std::memcpy(&v, b.data() + off, 4);
    if constexpr (std::endian::native == std::endian::big) v = __builtin_bswap32(v);
    return v;
}

inline void store_u8(MutBytes b, std::size_t off, std::uint8_t v) {
    IWCM_ASSERT(off < b.size());
    b[off] = static_cast<std::byte>(v);
}

inline void store_be16(MutBytes b, std::size_t off, std::uint16_t v) {
    IWCM_ASSERT(off + 2 <= b.size());
    b[off] = static_cast<std::byte>(v >> 8);
    b[off + 1] = static_cast<std::byte>(v);
}

inline void store_be32(MutBytes b, std::size_t off, std::uint32_t v) {
    IWCM_ASSERT(off + 4 <= b.size());
    const std::uint32_t be = __builtin_bswap32(v);
    std::memcpy(b.data() + off, &be, 4);
}

inline void store_be64(MutBytes b, std::size_t off, std::uint64_t v) {
    IWCM_ASSERT(off + 8 <= b.size());
    const std::uint64_t be = __builtin_bswap64(v);
    std::memcpy(b.data() + off, &be, 8);
}

inline void store_le32(MutBytes b, std::size_t off, std::uint32_t v) {
    IWCM_ASSERT(off + 4 <= b.size());
    if constexpr (std::endian::native == std::endian::big) v = __builtin_bswap32(v);
    std::memcpy(b.data() + off, &v, 4);
}

// Copies src into out at off; the caller has sized out.
inline void store_bytes(MutBytes out, std::size_t off, Bytes src) {
    IWCM_ASSERT(off + src.size() <= out.size());
    if (!src.empty()) std::memcpy(out.data() + off, src.data(), src.size());
}

// The bytes of a string, without its terminator.
inline Bytes as_bytes(std::string_view s) {
    return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

// "45 00 00 3c" or "4500003c" into bytes; whitespace is skipped and '#' starts a
// comment that runs to the end of the line. A bad digit or an odd count of digits
// is a bug in the test that wrote it, so it asserts.
std::vector<std::byte> hex_bytes(std::string_view hex);

// Lower-case hex of some bytes, two digits a byte, no separators: for test messages.
std::string to_hex(Bytes b);

// What kind of refusal a parse error is: callers act on this (the engine maps it
// to a drop reason with a switch), never on the error's text.
enum class ParseErrorKind : std::uint8_t {
    kTruncated,    // the buffer ends before a header, field or option does
    kBadLength,    // a length field disagrees with the buffer or with another length
    kBadChecksum,  // an IPv4 header, TCP or ICMPv6 checksum is wrong
    kNotIp,        // an ethertype other than IPv4 or IPv6
    kNotTcp,       // an IP packet that carries something else (ESP, AH, no next header...)
    kBadOption,    // an IPv4 option, IPv6 extension-header option or TCP option is malformed
                   // or one we refuse (source routes, unknown "discard" IPv6 options)
    kBadValue,     // a field holds a value the format forbids or we do not handle
    kFragment,     // an IPv4 fragment or an IPv6 fragment header
};

// A short name of the kind ("truncated", "bad_length", ...), for messages and tests.
std::string_view to_string(ParseErrorKind kind) noexcept;

// Why a parser refused its input: its kind, the layer ("ipv4"), the field
// ("total_length"), the byte offset of that field from the start of the buffer
// given to the parser that failed (parse_tcp_frame adds the offsets of the outer
// layers), and a reason. All strings are static.
struct ParseError {
    ParseErrorKind kind = ParseErrorKind::kBadValue;
    const char* layer = "";
    const char* field = "";
    std::size_t offset = 0;
    const char* reason = "";

    // "layer: field at offset N: reason"; the kind is not part of the text.
    std::string to_string() const;
};

template <class T>
using ParseResult = iwcm::Expected<T, ParseError>;

// The result of an internal decode step that writes into out-parameters: empty
// on success. Layers composed into one frame decode in place with it, so that
// parse_tcp_frame() copies no intermediate result.
using DecodeStatus = std::optional<ParseError>;

inline DecodeStatus decode_fail(ParseErrorKind kind, const char* layer, const char* field,
                                std::size_t offset, const char* reason) {
    return ParseError{kind, layer, field, offset, reason};
}

// Walks an option list in the form IPv4 and TCP share (RFC 791 section 3.1,
// RFC 9293 section 3.1): from h[off] on, End of Option List (type 0) ends the
// list and what follows it is padding, not read; No-Operation (type 1) is one
// byte; any other type has a length byte (counting type and length, at least 2)
// and its data, all within h, else kBadOption. visit(off, type, len) sees each
// of those and may refuse it with its own error. Offsets count from h's start.
template <class Visit>
DecodeStatus walk_type_length_options(Bytes h, std::size_t off, const char* layer, Visit&& visit) {
    constexpr std::uint8_t kEol = 0;
    constexpr std::uint8_t kNop = 1;
    constexpr auto kBad = ParseErrorKind::kBadOption;
    while (off < h.size()) {
        const std::uint8_t type = load_u8(h, off);
        if (type == kEol) break;
        if (type == kNop) {
            ++off;
            continue;
        }
        if (off + 1 >= h.size())
            return decode_fail(kBad, layer, "option_length", off, "option length byte missing");
        const std::uint8_t len = load_u8(h, off + 1);
        if (len < 2)
            return decode_fail(kBad, layer, "option_length", off + 1, "option length below 2");
        if (off + len > h.size())
            return decode_fail(kBad, layer, "option_length", off + 1,
                               "option runs past the header");
        if (auto e = visit(off, type, len)) return e;
        off += len;
    }
    return std::nullopt;
}

// Builds the error value of a parser, for `return parse_fail(...)`.
inline iwcm::Unexpected<ParseError> parse_fail(ParseErrorKind kind, const char* layer,
                                               const char* field, std::size_t offset,
                                               const char* reason) {
    return iwcm::fail(ParseError{kind, layer, field, offset, reason});
}

}  // namespace iwcm::wire
