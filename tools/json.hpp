// One JSON object per line, for `--json` output. Read first: RFC 8259
// section 7 (string escapes). Keys are written in insertion order.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace iwcm::tools {

// The JSON string literal of s, quotes included; bytes below 0x20 and above
// 0x7E are written as \u00XX (so the line is plain ASCII).
std::string json_quote(std::string_view s);

class JsonObject {
public:
    JsonObject& add(std::string_view key, std::string_view value);
    JsonObject& add(std::string_view key, const char* value) {
        return add(key, std::string_view(value));
    }
    JsonObject& add(std::string_view key, const std::string& value) {
        return add(key, std::string_view(value));
    }
    JsonObject& add(std::string_view key, std::int64_t value);
    JsonObject& add(std::string_view key, std::uint64_t value);
    JsonObject& add(std::string_view key, int value) { return add(key, std::int64_t{value}); }
    JsonObject& add(std::string_view key, unsigned value) { return add(key, std::uint64_t{value}); }
    JsonObject& add(std::string_view key, double value);
    JsonObject& add(std::string_view key, bool value);
    JsonObject& add_null(std::string_view key);
    // value is already JSON (a nested object, say).
    JsonObject& add_raw(std::string_view key, std::string_view json);
    std::string str() const { return "{" + body_ + "}"; }

private:
    void key(std::string_view k);
    std::string body_;
};

}  // namespace iwcm::tools
