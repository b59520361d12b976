// The STags of src/rdma/mr_table.hpp: keys and indices a peer cannot foresee,
// protection domains, and the order of the checks.
#include <gtest/gtest.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <set>
#include <vector>

#include "rdma/mr_table.hpp"

namespace iwcm::rdma {
namespace {

constexpr std::array<std::uint8_t, 16> kSecret = {1, 2,  3,  4,  5,  6,  7,  8,
                                                  9, 10, 11, 12, 13, 14, 15, 16};
constexpr std::uint32_t kRemote = kAccessRemoteWrite | kAccessRemoteRead;

TEST(MrTable, AReusedSlotNeverGetsItsPreviousKey) {
    MrTable t(1, kSecret);  // one slot: every registration takes it
    std::vector<std::byte> mem(64);
    std::set<std::uint32_t> keys;
    std::uint32_t previous = 0;
    for (int i = 0; i < 5000; ++i) {
        auto mr = t.reg(mem, kRemote, 0);
        ASSERT_TRUE(mr.has_value());
        if (i > 0) {
            EXPECT_EQ(mr->rkey >> 8, previous >> 8) << "one slot, one index";
            ASSERT_NE(mr->rkey, previous) << "registration " << i;
            // The STag of the region before resolves no more.
            EXPECT_EQ(t.check(previous, mr->addr, 1, kAccessRemoteWrite, 0, nullptr),
                      MemCheck::kInvalidStag);
        }
        EXPECT_NE(mr->rkey & 0xFF, 0u);
        keys.insert(mr->rkey & 0xFF);
        previous = mr->rkey;
        ASSERT_TRUE(t.dereg(mr->handle).has_value());
    }
    // Drawn, not counted: 5,000 draws of 255 keys leave none out (a counter
    // would too; the next test tells them apart).
    EXPECT_EQ(keys.size(), 255u);
}

TEST(MrTable, KeysAndIndicesAreNeitherSequentialNorTheSameForAnotherSecret) {
    auto stags = [](const std::array<std::uint8_t, 16>& secret) {
        MrTable t(4096, secret);
        std::vector<std::byte> mem(64);
        std::vector<std::uint32_t> out;
        for (int i = 0; i < 64; ++i) out.push_back(t.reg(mem, kRemote, 0)->rkey);
        return out;
    };
    const std::vector<std::uint32_t> a = stags(kSecret);
    EXPECT_EQ(a, stags(kSecret)) << "the same secret, the same STags (a simulation repeats)";
    std::array<std::uint8_t, 16> other = kSecret;
    other[0] ^= 1;
    const std::vector<std::uint32_t> b = stags(other);
    int same = 0;
    for (std::size_t i = 0; i < a.size(); ++i) same += a[i] == b[i];
    EXPECT_LE(same, 2) << "another secret, other STags";
    // Successive registrations: neither the next index nor the next key.
    int next_index = 0;
    int next_key = 0;
    std::set<std::uint32_t> indices;
    for (std::size_t i = 0; i < a.size(); ++i) {
        indices.insert(a[i] >> 8);
        if (i == 0) continue;
        next_index += (a[i] >> 8) == (a[i - 1] >> 8) + 1;
        next_key += (a[i] & 0xFF) == ((a[i - 1] + 1) & 0xFF);
    }
    EXPECT_EQ(indices.size(), a.size()) << "64 live regions, 64 indices";
    EXPECT_LE(next_index, 4);
    EXPECT_LE(next_key, 4);
    EXPECT_EQ(indices.count(0), 0u) << "not counted from zero";
}

TEST(MrTable, ChecksInSiwsOrderStagDomainRightsBounds) {
    MrTable t(16, kSecret);
    std::vector<std::byte> mem(100);
    auto mr = t.reg(mem, kAccessRemoteRead, 3);
    ASSERT_TRUE(mr.has_value());
    EXPECT_EQ(mr->pd, 3u);
    const std::uint64_t a = mr->addr;
    std::byte* where = nullptr;
    EXPECT_EQ(t.check(mr->rkey, a + 10, 20, kAccessRemoteRead, 3, &where), MemCheck::kOk);
    EXPECT_EQ(where, mem.data() + 10);
    EXPECT_EQ(t.check(mr->rkey ^ 0x100, a, 1, kAccessRemoteRead, 3, nullptr),
              MemCheck::kInvalidStag);
    EXPECT_EQ(t.check(mr->rkey ^ 0x1, a, 1, kAccessRemoteRead, 3, nullptr), MemCheck::kInvalidStag);
    // Another domain, even without the right and out of bounds: the domain first.
    EXPECT_EQ(t.check(mr->rkey, a + 99, 2, kAccessRemoteWrite, 4, nullptr), MemCheck::kPdMismatch);
    // The rights before the bounds.
    EXPECT_EQ(t.check(mr->rkey, a + 99, 2, kAccessRemoteWrite, 3, nullptr),
              MemCheck::kAccessRights);
    EXPECT_EQ(t.check(mr->rkey, a + 99, 2, kAccessRemoteRead, 3, nullptr), MemCheck::kBaseBounds);
    EXPECT_EQ(t.check(mr->rkey, a - 1, 1, kAccessRemoteRead, 3, nullptr), MemCheck::kBaseBounds);
    EXPECT_EQ(t.check(mr->rkey, a + 100, 0, kAccessRemoteRead, 3, nullptr), MemCheck::kOk);
}

TEST(MrTable, FullTableRefusesAndAFreedSlotServesAgain) {
    MrTable t(3, kSecret);
    std::vector<std::byte> mem(8);
    std::vector<MemoryRegion> mrs;
    for (int i = 0; i < 3; ++i) mrs.push_back(*t.reg(mem, 0, 0));
    EXPECT_EQ(t.reg(mem, 0, 0).error(), VerbsError::kQueueFull);
    EXPECT_EQ(t.live(), 3u);
    ASSERT_TRUE(t.dereg(mrs[1].handle).has_value());
    EXPECT_EQ(t.dereg(mrs[1].handle).error(), VerbsError::kStaleHandle);
    auto again = t.reg(mem, 0, 0);
    ASSERT_TRUE(again.has_value());
    EXPECT_EQ(again->handle.index, mrs[1].handle.index);
    EXPECT_EQ(t.reg(mem, 0, 0).error(), VerbsError::kQueueFull);
}

// A peer that tries every STag there is (all 2^32) against a QP of domain 2,
// at the one address every region covers: of 200 regions that allow remote
// access in domain 1 and two in domain 2, it reaches only the one of domain 2
// that allows what it asks; every other guess fails before any byte is named.
TEST(MrTable, GuessingEverySTagReachesOnlyWhatWasGiven) {
    MrTable t(4096, kSecret);
    std::vector<std::byte> mem(64);
    std::set<std::uint32_t> other_domain;
    for (int i = 0; i < 200; ++i) other_domain.insert(t.reg(mem, kRemote, 1)->rkey);
    const std::uint32_t given = t.reg(mem, kAccessRemoteWrite, 2)->rkey;
    const std::uint32_t local_only = t.reg(mem, kAccessLocalWrite, 2)->rkey;
    const std::uint64_t to = reinterpret_cast<std::uintptr_t>(mem.data());
    std::array<std::uint64_t, 5> seen{};
    std::uint32_t reached = 0;
    std::uint32_t stag = 0;
    do {
        const MemCheck c = t.check(stag, to, 8, kAccessRemoteWrite, 2, nullptr);
        ++seen[static_cast<std::size_t>(c)];
        if (c == MemCheck::kOk) reached = stag;
        if (c == MemCheck::kPdMismatch && other_domain.count(stag) == 0) ADD_FAILURE() << stag;
    } while (++stag != 0);
    EXPECT_EQ(seen[static_cast<std::size_t>(MemCheck::kOk)], 1u);
    EXPECT_EQ(reached, given);
    EXPECT_EQ(seen[static_cast<std::size_t>(MemCheck::kPdMismatch)], 200u);
    EXPECT_EQ(seen[static_cast<std::size_t>(MemCheck::kAccessRights)], 1u);
    EXPECT_EQ(t.check(local_only, to, 8, kAccessRemoteWrite, 2, nullptr), MemCheck::kAccessRights);
    EXPECT_EQ(seen[static_cast<std::size_t>(MemCheck::kBaseBounds)], 0u);
    EXPECT_EQ(seen[static_cast<std::size_t>(MemCheck::kInvalidStag)], (1ull << 32) - 202);
}

}  // namespace
}  // namespace iwcm::rdma
