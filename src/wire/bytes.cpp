// Helpers of bytes.hpp: the hex reader for tests and the text of a parse error.
//
// Read first: bytes.hpp.
#include "wire/bytes.hpp"

namespace iwcm::wire {

namespace {

int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

bool is_space(char c) {
    return c == ' ' || c == '\n' || c == '\r' || c == '\t' || c == ':';
}

}  // namespace

std::vector<std::byte> hex_bytes(std::string_view hex) {
    std::vector<std::byte> out;
    out.reserve(hex.size() / 2);
    int high = -1;
    for (std::size_t i = 0; i < hex.size(); ++i) {
        const char c = hex[i];
        if (c == '#') {
            while (i < hex.size() && hex[i] != '\n') ++i;
            continue;
        }
        if (is_space(c)) continue;
        const int d = hex_digit(c);
        IWCM_ASSERT(d >= 0);
        if (high < 0) {
            high = d;
        } else {
            out.push_back(static_cast<std::byte>((high << 4) | d));
            high = -1;
        }
    }
    IWCM_ASSERT(high < 0);
    return out;
}

std::string to_hex(Bytes b) {
    static constexpr char kDigits[] = "0123456789abcdef";
    std::string s;
    s.reserve(b.size() * 2);
    for (std::byte x : b) {
        const auto v = static_cast<std::uint8_t>(x);
        s.push_back(kDigits[v >> 4]);
        s.push_back(kDigits[v & 0xF]);
    }
    return s;
}

std::string_view to_string(ParseErrorKind kind) noexcept {
    switch (kind) {
        case ParseErrorKind::kTruncated: return "truncated";
        case ParseErrorKind::kBadLength: return "bad_length";
        case ParseErrorKind::kBadChecksum: return "bad_checksum";
        case ParseErrorKind::kNotIp: return "not_ip";
        case ParseErrorKind::kNotTcp: return "not_tcp";
        case ParseErrorKind::kBadOption: return "bad_option";
        case ParseErrorKind::kBadValue: return "bad_value";
        case ParseErrorKind::kFragment: return "fragment";
    }
    return "?";
}

std::string ParseError::to_string() const {
    std::string s;
    s.append(layer).append(": ").append(field).append(" at offset ");
    s.append(std::to_string(offset)).append(": ").append(reason);
    return s;
}

}  // namespace iwcm::wire
