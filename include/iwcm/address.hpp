// Addresses: MAC, IPv4, IPv6, and an endpoint (address + TCP port).
//
// Plain values, stored in network byte order, hashable and comparable. Text
// forms follow the usual conventions ("10.0.0.1", "fe80::1", "02:00:00:00:00:01",
// "10.0.0.1:4791", "[fe80::1]:4791").
#pragma once

#include <array>
#include <bit>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

namespace iwcm {

struct MacAddr {
    std::array<std::uint8_t, 6> bytes{};

    static constexpr MacAddr broadcast() { return {{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}}; }
    constexpr bool is_broadcast() const { return *this == broadcast(); }
    constexpr bool is_multicast() const { return (bytes[0] & 0x01) != 0; }
    static std::optional<MacAddr> parse(std::string_view text);
    std::string to_string() const;
    friend constexpr auto operator<=>(const MacAddr&, const MacAddr&) = default;
    // Two loads each side instead of a byte compare (every frame's destination is checked;
    // g++ calls memcmp for the defaulted one where it cannot see the alignment).
    friend constexpr bool operator==(const MacAddr& a, const MacAddr& b) {
        if (std::is_constant_evaluated()) return a.bytes == b.bytes;
        std::uint32_t a4, b4;
        std::uint16_t a2, b2;
        std::memcpy(&a4, a.bytes.data(), 4);
        std::memcpy(&b4, b.bytes.data(), 4);
        std::memcpy(&a2, a.bytes.data() + 4, 2);
        std::memcpy(&b2, b.bytes.data() + 4, 2);
        return ((a4 ^ b4) | static_cast<std::uint32_t>(a2 ^ b2)) == 0;
    }
};

struct Ipv4Addr {
    std::array<std::uint8_t, 4> bytes{};

    static constexpr Ipv4Addr from_u32(std::uint32_t host_order) {
        return {{static_cast<std::uint8_t>(host_order >> 24),
                 static_cast<std::uint8_t>(host_order >> 16),
                 static_cast<std::uint8_t>(host_order >> 8),
                 static_cast<std::uint8_t>(host_order)}};
    }
    constexpr std::uint32_t to_u32() const {
        return (std::uint32_t{bytes[0]} << 24) | (std::uint32_t{bytes[1]} << 16) |
               (std::uint32_t{bytes[2]} << 8) | std::uint32_t{bytes[3]};
    }
    static std::optional<Ipv4Addr> parse(std::string_view text);
    std::string to_string() const;
    friend constexpr auto operator<=>(const Ipv4Addr&, const Ipv4Addr&) = default;
};

struct Ipv6Addr {
    std::array<std::uint8_t, 16> bytes{};

    static std::optional<Ipv6Addr> parse(std::string_view text);
    std::string to_string() const;
    friend constexpr auto operator<=>(const Ipv6Addr&, const Ipv6Addr&) = default;
};

enum class IpFamily : std::uint8_t { kV4 = 4, kV6 = 6 };

// Either family in one value; the unused bytes of a v4 address are zero so
// that comparison and hashing need no branch.
class IpAddr {
public:
    constexpr IpAddr() = default;
    constexpr IpAddr(Ipv4Addr v4) : family_(IpFamily::kV4) {  // NOLINT(implicit)
        if (std::is_constant_evaluated()) {
            for (int i = 0; i < 4; ++i) bytes_[i] = v4.bytes[i];
        } else {
            // At run time the array in one 16-byte store, the address zero-extended: what
            // reads it (a copy of the whole, the comparisons' two 8-byte halves) lies within
            // that one store and is forwarded from it. A read spanning a 4-byte copy over a
            // zeroed array waits until both reach the cache (a store-forwarding stall, on
            // every frame's addresses just parsed).
            // (A vector of two words: as two scalars the compiler stores them one by one.)
            using Words = std::uint64_t __attribute__((vector_size(16)));
            std::uint32_t a = 0;
            std::memcpy(&a, v4.bytes.data(), 4);
            const Words words = {std::endian::native == std::endian::little
                                     ? std::uint64_t{a}
                                     : std::uint64_t{a} << 32,
                                 0};
            std::memcpy(bytes_.data(), &words, sizeof words);
        }
    }
    constexpr IpAddr(Ipv6Addr v6) : bytes_(v6.bytes), family_(IpFamily::kV6) {}  // NOLINT(implicit)

    constexpr IpFamily family() const { return family_; }
    constexpr bool is_v4() const { return family_ == IpFamily::kV4; }
    constexpr bool is_v6() const { return family_ == IpFamily::kV6; }
    constexpr Ipv4Addr v4() const { return {{bytes_[0], bytes_[1], bytes_[2], bytes_[3]}}; }
    constexpr Ipv6Addr v6() const { return {bytes_}; }
    // The all-zero address of the family: a listener's wildcard.
    constexpr bool is_unspecified() const {
        for (auto b : bytes_)
            if (b != 0) return false;
        return true;
    }
    constexpr const std::array<std::uint8_t, 16>& raw() const { return bytes_; }

    static std::optional<IpAddr> parse(std::string_view text);
    std::string to_string() const;
    // By family, then by bytes (the array comes first in memory: see bytes_).
    friend constexpr std::strong_ordering operator<=>(const IpAddr& a, const IpAddr& b) {
        if (const auto c = a.family_ <=> b.family_; c != 0) return c;
        return a.bytes_ <=> b.bytes_;
    }
    // Equality as the defaulted one would give it, but at run time with two 8-byte
    // compares instead of a call to memcmp: addresses are compared on every frame.
    friend constexpr bool operator==(const IpAddr& a, const IpAddr& b) {
        if (std::is_constant_evaluated()) return a.family_ == b.family_ && a.bytes_ == b.bytes_;
        std::uint64_t x[2];
        std::uint64_t y[2];
        std::memcpy(x, a.bytes_.data(), sizeof x);
        std::memcpy(y, b.bytes_.data(), sizeof y);
        return a.family_ == b.family_ && ((x[0] ^ y[0]) | (x[1] ^ y[1])) == 0;
    }

private:
    // The array first, at the value's start: a copy reads it in one 16-byte load, which
    // the one store of the constructor can forward.
    std::array<std::uint8_t, 16> bytes_{};
    IpFamily family_ = IpFamily::kV4;
};

struct Endpoint {
    IpAddr addr;
    std::uint16_t port = 0;

    // "10.0.0.1:80" or "[fe80::1]:80".
    static std::optional<Endpoint> parse(std::string_view text);
    std::string to_string() const;
    friend constexpr auto operator<=>(const Endpoint&, const Endpoint&) = default;
};

}  // namespace iwcm
