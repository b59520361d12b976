// CRC32c known answers and the agreement of its two implementations.
//
// Read first: src/wire/crc32c.hpp; RFC 3720 appendix B.4 (the vectors below,
// whose CRC bytes the RFC lists least-significant first: "aa 36 91 8a" is
// 0x8A9136AA).
#include "wire/crc32c.hpp"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace iwcm::wire {
namespace {

std::vector<std::byte> filled(std::size_t n, int first, int step) {
    std::vector<std::byte> v(n);
    for (std::size_t i = 0; i < n; ++i)
        v[i] = static_cast<std::byte>(first + step * static_cast<int>(i));
    return v;
}

TEST(Crc32c, CheckValue) {
    EXPECT_EQ(crc32c(as_bytes("123456789")), 0xE3069283u);
}

TEST(Crc32c, Rfc3720Zeros) {
    EXPECT_EQ(crc32c(filled(32, 0, 0)), 0x8A9136AAu);
}

TEST(Crc32c, Rfc3720Ones) {
    EXPECT_EQ(crc32c(filled(32, 0xFF, 0)), 0x62A8AB43u);
}

TEST(Crc32c, Rfc3720Incrementing) {
    EXPECT_EQ(crc32c(filled(32, 0, 1)), 0x46DD794Eu);
}

TEST(Crc32c, Rfc3720Decrementing) {
    EXPECT_EQ(crc32c(filled(32, 31, -1)), 0x113FDB5Cu);
}

TEST(Crc32c, Rfc3720ReadCommandPdu) {
    const auto pdu = hex_bytes(
        "01 c0 00 00 00 00 00 00 00 00 00 00 00 00 00 00"
        "14 00 00 00 00 00 04 00 00 00 00 14 00 00 00 18"
        "28 00 00 00 00 00 00 00 02 00 00 00 00 00 00 00");
    EXPECT_EQ(crc32c(pdu), 0xD9963A56u);
}

TEST(Crc32c, EmptyIsZero) {
    EXPECT_EQ(crc32c(Bytes{}), 0u);
}

TEST(Crc32c, SeedChains) {
    const Bytes all = as_bytes("123456789");
    for (std::size_t cut = 0; cut <= all.size(); ++cut) {
        EXPECT_EQ(crc32c(all.subspan(cut), crc32c(all.first(cut))), 0xE3069283u) << cut;
    }
}

TEST(Crc32c, PortableMatchesDispatchedAtEveryLengthAndAlignment) {
    std::mt19937 rng(7);
    std::vector<std::byte> data(600);
    for (auto& b : data) b = static_cast<std::byte>(rng());
    for (std::size_t start = 0; start < 8; ++start) {
        for (std::size_t len = 0; len + start <= 300; ++len) {
            const Bytes s = Bytes(data).subspan(start, len);
            ASSERT_EQ(crc32c(s), detail::crc32c_portable(s)) << start << " " << len;
        }
    }
}

// The instruction path joins three remainders over blocks of 2 048, 480, 256, 128 and 32
// bytes: every length around a whole number of those rounds, at every alignment.
TEST(Crc32c, PortableMatchesDispatchedAcrossTheJoinedBlocks) {
    std::mt19937 rng(11);
    std::vector<std::byte> data(3 * 2048 * 3 + 64);
    for (auto& b : data) b = static_cast<std::byte>(rng());
    std::vector<std::size_t> lengths;
    for (const std::size_t round : {96u, 384u, 768u, 1440u, 6144u}) {
        for (std::size_t k = 1; k <= 3; ++k) {
            for (std::size_t d = 0; d <= 17; ++d) {
                lengths.push_back(k * round + d);
                lengths.push_back(k * round - d);
            }
        }
    }
    for (int i = 0; i < 200; ++i) lengths.push_back(rng() % (data.size() - 8));
    for (const std::size_t len : lengths) {
        for (std::size_t start = 0; start < 8; ++start) {
            const Bytes s = Bytes(data).subspan(start, len);
            const auto seed = static_cast<std::uint32_t>(rng());
            ASSERT_EQ(crc32c(s, seed), detail::crc32c_portable(s, seed)) << start << " " << len;
        }
    }
}

TEST(Crc32c, DetectsSingleBitFlip) {
    auto data = filled(64, 3, 5);
    const std::uint32_t good = crc32c(data);
    for (std::size_t bit = 0; bit < data.size() * 8; ++bit) {
        data[bit / 8] ^= static_cast<std::byte>(1u << (bit % 8));
        ASSERT_NE(crc32c(data), good) << bit;
        data[bit / 8] ^= static_cast<std::byte>(1u << (bit % 8));
    }
}

}  // namespace
}  // namespace iwcm::wire
