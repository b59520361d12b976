// SHA-256 against the published vectors and hashlib's way of splitting
// input, and the byte pattern of --send-bytes / --expect-bytes against its
// definition (tools/pattern.hpp) and tests/interop/mpa_peer.py's copy.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "tools/pattern.hpp"
#include "tools/sha256.hpp"

namespace iwcm::tools {
namespace {

std::span<const std::byte> as_bytes(const std::string& s) {
    return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

std::string sha(std::span<const std::byte> b) {
    Sha256 h;
    h.update(b);
    return Sha256::hex(h.finish());
}

// FIPS 180-4 examples (NIST CSRC "SHA256.pdf", "SHA256_2.pdf") and the
// one-million-'a' vector of FIPS 180-2 appendix B.3.
TEST(Sha256, PublishedVectors) {
    EXPECT_EQ(sha({}), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    EXPECT_EQ(sha(as_bytes("abc")),
              "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    EXPECT_EQ(sha(as_bytes("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")),
              "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    EXPECT_EQ(sha(as_bytes(std::string(1000000, 'a'))),
              "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

// Padding edges: 55 bytes fit one block with the length, 56 need two.
TEST(Sha256, PaddingEdgesMatchOneShotAndSplitInput) {
    std::mt19937 rng(7);
    for (std::size_t len : {0u, 1u, 55u, 56u, 63u, 64u, 65u, 119u, 120u, 1000u, 4097u}) {
        std::vector<std::byte> data(len);
        for (auto& b : data) b = static_cast<std::byte>(rng());
        const std::string whole = sha(data);
        Sha256 h;
        for (std::size_t at = 0; at < len;) {
            const std::size_t n = std::min<std::size_t>(len - at, 1 + rng() % 70);
            h.update(std::span(data).subspan(at, n));
            at += n;
        }
        EXPECT_EQ(Sha256::hex(h.finish()), whole) << len;
    }
    // finish() resets: the next digest starts afresh.
    Sha256 h;
    h.update(as_bytes("abc"));
    (void)h.finish();
    EXPECT_EQ(Sha256::hex(h.finish()), sha({}));
}

TEST(Pattern, BlocksFollowTheDefinition) {
    std::vector<std::byte> b(3 * pattern::kBlock);
    pattern::fill(pattern::kTagInitiator, 0, b);
    for (std::uint64_t k = 0; k < 3; ++k) {
        const std::size_t at = k * pattern::kBlock;
        for (std::size_t j = 0; j < 8; ++j)
            EXPECT_EQ(std::to_integer<std::uint64_t>(b[at + j]), j == 7 ? k : 0u) << k << " " << j;
        for (std::size_t j : {8u, 9u, 200u, 4095u})
            EXPECT_EQ(std::to_integer<unsigned>(b[at + j]), (k + j + pattern::kTagInitiator) % 256)
                << k << " " << j;
    }
    // Block 0x0102 carries its number big-endian.
    std::vector<std::byte> head(8);
    pattern::fill(pattern::kTagResponder, 0x0102 * pattern::kBlock, head);
    EXPECT_EQ(std::to_integer<unsigned>(head[6]), 1u);
    EXPECT_EQ(std::to_integer<unsigned>(head[7]), 2u);
}

TEST(Pattern, AnyOffsetIsASliceOfTheWholeAndTheDirectionsDiffer) {
    std::vector<std::byte> whole(5 * pattern::kBlock + 123);
    pattern::fill(pattern::kTagResponder, 0, whole);
    for (std::size_t off : {0u, 1u, 7u, 8u, 4095u, 4096u, 4100u, 9000u}) {
        for (std::size_t len : {0u, 1u, 9u, 4096u, 6000u}) {
            if (off + len > whole.size()) continue;
            std::vector<std::byte> part(len);
            pattern::fill(pattern::kTagResponder, off, part);
            EXPECT_TRUE(std::equal(part.begin(), part.end(),
                                   whole.begin() + static_cast<std::ptrdiff_t>(off)))
                << off << "+" << len;
            EXPECT_FALSE(pattern::first_mismatch(pattern::kTagResponder, off, part))
                << off << "+" << len;
        }
    }
    // The other direction's bytes differ from the first body byte on.
    EXPECT_EQ(pattern::first_mismatch(pattern::kTagInitiator, 0, whole), 8u);
}

TEST(Pattern, FirstMismatchNamesTheStreamOffset) {
    std::vector<std::byte> b(10000);
    pattern::fill(pattern::kTagInitiator, 50000, b);
    b[7777] ^= std::byte{1};
    b[9000] ^= std::byte{1};
    EXPECT_EQ(pattern::first_mismatch(pattern::kTagInitiator, 50000, b), 57777u);
    // A block that came one block early: its header is wrong at once.
    std::vector<std::byte> early(pattern::kBlock);
    pattern::fill(pattern::kTagInitiator, 0, early);
    EXPECT_EQ(pattern::first_mismatch(pattern::kTagInitiator, pattern::kBlock, early),
              pattern::kBlock + 7);
}

// The same bytes as tests/interop/mpa_peer.py makes: the SHA-256 of the
// first 1 000 000 bytes of each direction, as hashlib gives them for
// mpa_peer.pattern_bytes(tag, 0, 1000000).
TEST(Pattern, AgreesWithTheKernelPeersCopy) {
    std::vector<std::byte> b(1000000);
    pattern::fill(pattern::kTagInitiator, 0, b);
    EXPECT_EQ(sha(b), "937b5f699b78c512ddde25dfba5ea48f48974c92ce05faa85e159720f0041fe2");
    pattern::fill(pattern::kTagResponder, 0, b);
    EXPECT_EQ(sha(b), "f98670692cd238427dd2498eaaf183490046e8bd4fe5ca127614a96b64963492");
}

}  // namespace
}  // namespace iwcm::tools
