// SHA-256 (FIPS 180-4), for the hash of a byte stream that `connect` and
// `listen` print (the same digest as Python's hashlib.sha256).
// Read first: FIPS 180-4 sections 4.1.2 (functions), 4.2.2 (constants),
// 5.1.1 (padding) and 6.2 (the computation).
//
// Written here because the project depends on no crypto library; it is not
// constant-time and is meant for checksums of test data, not for secrets.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace iwcm::tools {

class Sha256 {
public:
    using Digest = std::array<std::uint8_t, 32>;

    Sha256();
    void update(std::span<const std::byte> data);
    // The digest of everything updated so far; the object is reset after.
    Digest finish();
    // A digest as 64 lower-case hex digits (hashlib's hexdigest()).
    static std::string hex(const Digest& d);

private:
    void block(const std::uint8_t* p);

    std::array<std::uint32_t, 8> h_{};
    std::array<std::uint8_t, 64> buf_{};
    std::size_t used_ = 0;      // bytes waiting in buf_
    std::uint64_t length_ = 0;  // bytes updated in all
};

}  // namespace iwcm::tools
