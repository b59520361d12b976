// Text as bytes and back, for the tests of the core's parts that carry bytes (the event
// queue's private data, the transmit queue's frames, the receive context's pieces).
#pragma once

#include <cstddef>
#include <span>
#include <string>

namespace iwcm::cm {

// A view of the string's characters (valid while the string is unchanged in size).
inline std::span<const std::byte> bytes_of(const std::string& s) {
    return std::as_bytes(std::span<const char>(s.data(), s.size()));
}

inline std::string text_of(std::span<const std::byte> b) {
    return std::string(reinterpret_cast<const char*>(b.data()), b.size());
}

}  // namespace iwcm::cm
