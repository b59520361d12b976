// Initial sequence numbers: SipHash-2-4 against the reference vectors, and the ISN as
// RFC 6528 defines it, for both address families.
//
// Read first: src/cm/isn.hpp; Aumasson and Bernstein, "SipHash: a fast short-input PRF",
// appendix A (the vectors).
#include "cm/isn.hpp"

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <vector>

namespace iwcm::cm {
namespace {

std::array<std::uint8_t, 16> paper_key() {
    std::array<std::uint8_t, 16> key{};
    for (std::size_t i = 0; i < key.size(); ++i) key[i] = static_cast<std::uint8_t>(i);
    return key;
}

std::vector<std::uint8_t> counting(std::size_t n) {
    std::vector<std::uint8_t> m(n);
    for (std::size_t i = 0; i < n; ++i) m[i] = static_cast<std::uint8_t>(i);
    return m;
}

TEST(SipHash24, ReferenceVectors) {
    EXPECT_EQ(siphash24(paper_key(), counting(0)), 0x726fdb47dd0e0e31ULL);
    EXPECT_EQ(siphash24(paper_key(), counting(12)), 0x751e8fbc860ee5fbULL);
    EXPECT_EQ(siphash24(paper_key(), counting(15)), 0xa129ca6149be45e5ULL);
}

// RFC 6528: ISN = M + F(4-tuple, secret), F over local port, remote port, local address,
// remote address (big-endian), M the time in 4-microsecond ticks.
std::uint32_t reference_isn(const std::array<std::uint8_t, 16>& key, const Endpoint& local,
                            const Endpoint& remote, Instant now) {
    std::vector<std::uint8_t> m{
        static_cast<std::uint8_t>(local.port >> 8), static_cast<std::uint8_t>(local.port),
        static_cast<std::uint8_t>(remote.port >> 8), static_cast<std::uint8_t>(remote.port)};
    const std::size_t len = local.addr.is_v4() ? 4 : 16;
    m.insert(m.end(), local.addr.raw().begin(), local.addr.raw().begin() + len);
    m.insert(m.end(), remote.addr.raw().begin(), remote.addr.raw().begin() + len);
    const auto ticks = static_cast<std::uint32_t>(now.time_since_epoch().count() / 4000);
    return ticks + static_cast<std::uint32_t>(siphash24(key, m));
}

TEST(InitialSequence, Ipv4IsSipHashOfTheTupleAfterTheClock) {
    const Endpoint local{Ipv4Addr{{10, 0, 0, 1}}, 49152};
    const Endpoint remote{Ipv4Addr{{192, 168, 7, 200}}, 5000};
    const Instant now = kInstantZero + std::chrono::milliseconds(1234);
    EXPECT_EQ(initial_sequence(paper_key(), local, remote, now),
              reference_isn(paper_key(), local, remote, now));
    // Another tuple, another key: other numbers, still the reference's.
    std::array<std::uint8_t, 16> key{};
    key.fill(0xA5);
    const Endpoint other{Ipv4Addr{{10, 0, 0, 1}}, 49153};
    EXPECT_EQ(initial_sequence(key, other, remote, now), reference_isn(key, other, remote, now));
    EXPECT_NE(initial_sequence(key, other, remote, now), initial_sequence(key, local, remote, now));
}

TEST(InitialSequence, Ipv6IsSipHashOfTheTupleAfterTheClock) {
    Ipv6Addr a{};
    Ipv6Addr b{};
    a.bytes[0] = 0xfd;
    a.bytes[15] = 1;
    b.bytes[0] = 0xfd;
    b.bytes[15] = 2;
    const Endpoint local{a, 40000};
    const Endpoint remote{b, 4791};
    const Instant now = kInstantZero + std::chrono::seconds(77);
    EXPECT_EQ(initial_sequence(paper_key(), local, remote, now),
              reference_isn(paper_key(), local, remote, now));
}

}  // namespace
}  // namespace iwcm::cm
