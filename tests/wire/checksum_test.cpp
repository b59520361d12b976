// Internet checksum: RFC 1071's example, a naive reference, pseudo-headers.
//
// Read first: src/wire/checksum.hpp, RFC 1071 section 3 (the worked example).
#include "wire/checksum.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "wire/wire_test_util.hpp"

namespace iwcm::wire {
namespace {

// One 16-bit word at a time, carries folded on every step: slow and obvious.
std::uint16_t naive_checksum(Bytes data) {
    std::uint32_t sum = 0;
    for (std::size_t i = 0; i < data.size(); i += 2) {
        std::uint32_t word = std::uint32_t{static_cast<std::uint8_t>(data[i])} << 8;
        if (i + 1 < data.size()) word |= static_cast<std::uint8_t>(data[i + 1]);
        sum += word;
        sum = (sum & 0xFFFF) + (sum >> 16);
    }
    return static_cast<std::uint16_t>(~sum & 0xFFFF);
}

TEST(Checksum, Rfc1071Example) {
    // RFC 1071 section 3: the sum of these 8 bytes is 0xDDF2 (folded), so the
    // checksum is its complement.
    const auto data = hex_bytes("00 01 f2 03 f4 f5 f6 f7");
    EXPECT_EQ(checksum_sum(data), 0xDDF2u);
    EXPECT_EQ(internet_checksum(data), static_cast<std::uint16_t>(~0xDDF2u));
}

TEST(Checksum, KnownIpv4Header) {
    // The header of a real packet with its checksum field zeroed; 0xB861 is the
    // value the sender put there.
    auto h = hex_bytes("45 00 00 73 00 00 40 00 40 11 00 00 c0 a8 00 01 c0 a8 00 c7");
    EXPECT_EQ(internet_checksum(h), 0xB861);
    h[10] = std::byte{0xB8};
    h[11] = std::byte{0x61};
    EXPECT_EQ(internet_checksum(h), 0);
}

TEST(Checksum, MatchesNaiveAtEveryLength) {
    std::mt19937 rng(11);
    std::vector<std::byte> data(200);
    for (auto& b : data) b = static_cast<std::byte>(rng());
    for (std::size_t start = 0; start < 4; ++start) {
        for (std::size_t len = 0; start + len <= data.size(); ++len) {
            const Bytes s = Bytes(data).subspan(start, len);
            ASSERT_EQ(internet_checksum(s), naive_checksum(s)) << start << " " << len;
        }
    }
}

TEST(Checksum, AllOnesDoesNotOverflow) {
    std::vector<std::byte> data(70000, std::byte{0xFF});
    EXPECT_EQ(internet_checksum(data), naive_checksum(data));
}

// The AVX2 path and the portable one fold to the same sum at every length and
// alignment around the vector steps, from any starting accumulator.
TEST(Checksum, Avx2PathMatchesPortable) {
    if (!detail::have_avx2_sum()) GTEST_SKIP() << "no AVX2 on this CPU";
    std::mt19937_64 rng(15);
    std::vector<std::byte> data(700);
    for (auto& b : data) b = static_cast<std::byte>(rng());
    for (std::size_t start = 0; start < 33; ++start) {
        for (std::size_t len = 0; start + len <= data.size(); ++len) {
            const std::uint64_t acc = len % 3 == 0 ? 0 : rng();
            const std::byte* p = data.data() + start;
            ASSERT_EQ(detail::fold16(detail::sum_native_avx2(p, len, acc)),
                      detail::fold16(detail::sum_native_portable(p, len, acc)))
                << start << " " << len;
        }
    }
}

// Copy-and-sum gives the sum of the bytes it copies, and the copy, at every length and
// alignment around the vector steps (both sides of kWideSumMin), from any accumulator;
// over pieces, as sum_native_pieces does, odd-length pieces included.
TEST(Checksum, CopyAndSumIsTheSumAndTheCopy) {
    std::mt19937_64 rng(16);
    std::vector<std::byte> data(700);
    for (auto& b : data) b = static_cast<std::byte>(rng());
    for (std::size_t start = 0; start < 9; ++start) {
        for (std::size_t len = 0; start + len <= data.size(); ++len) {
            const std::uint64_t acc = len % 3 == 0 ? 0 : rng();
            const std::byte* p = data.data() + start;
            std::vector<std::byte> to(len + 2, std::byte{0x5A});
            ASSERT_EQ(detail::fold16(detail::copy_and_sum_native(to.data() + 1, p, len, acc)),
                      detail::fold16(detail::sum_native_portable(p, len, acc)))
                << start << " " << len;
            ASSERT_TRUE(std::equal(p, p + len, to.begin() + 1)) << start << " " << len;
            ASSERT_EQ(to.front(), std::byte{0x5A});
            ASSERT_EQ(to.back(), std::byte{0x5A});  // nothing written past the end
        }
    }
    for (int trial = 0; trial < 200; ++trial) {
        std::vector<std::size_t> cuts;
        for (int i = 0; i < 4; ++i) cuts.push_back(rng() % (data.size() + 1));
        std::sort(cuts.begin(), cuts.end());
        const std::vector<Bytes> pieces = test::pieces_of(data, cuts);
        std::vector<std::byte> to(data.size());
        const std::uint64_t acc = rng();
        ASSERT_EQ(detail::fold16(detail::copy_and_sum_pieces(to.data(), pieces, acc)),
                  detail::fold16(detail::sum_native_pieces(pieces, acc)));
        ASSERT_EQ(to, data);
    }
}

// Long enough for several of the AVX2 path's blocks, every lane at its largest.
TEST(Checksum, Avx2PathAllOnesDoesNotOverflow) {
    std::vector<std::byte> data((3u << 20) + 17, std::byte{0xFF});
    EXPECT_EQ(internet_checksum(data), naive_checksum(data));
    data[12345] = std::byte{0};
    EXPECT_EQ(internet_checksum(data), naive_checksum(data));
}

TEST(Checksum, SumsChainAtEvenOffsets) {
    const auto data = hex_bytes("12 34 56 78 9a bc de f0 11 22 33");
    const Bytes all(data);
    const std::uint32_t split = checksum_sum(all.subspan(4), checksum_sum(all.first(4)));
    EXPECT_EQ(split, checksum_sum(all));
}

TEST(Checksum, PseudoHeaderIpv4) {
    const IpAddr src = Ipv4Addr{{10, 0, 0, 1}};
    const IpAddr dst = Ipv4Addr{{10, 0, 0, 2}};
    // The pseudo-header spelled out as bytes: src, dst, zero, protocol, length.
    const auto ph = hex_bytes("0a 00 00 01 0a 00 00 02 00 06 00 14");
    EXPECT_EQ(pseudo_header_sum(src, dst, 6, 20), checksum_sum(ph));
}

TEST(Checksum, PseudoHeaderIpv6) {
    const IpAddr src = *Ipv6Addr::parse("fd77::1");
    const IpAddr dst = *Ipv6Addr::parse("fd77::2");
    // src, dst, 32-bit length, three zero bytes, next header.
    const auto ph = hex_bytes(
        "fd 77 00 00 00 00 00 00 00 00 00 00 00 00 00 01"
        "fd 77 00 00 00 00 00 00 00 00 00 00 00 00 00 02"
        "00 01 00 28 00 00 00 06");
    EXPECT_EQ(pseudo_header_sum(src, dst, 6, 0x10028), checksum_sum(ph));
}

}  // namespace
}  // namespace iwcm::wire
