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
// The queue pair whose peer names the STags in these tests.
constexpr std::uint32_t kPeerQp = 0;

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
            EXPECT_EQ(t.check(previous, mr->addr, 1, kAccessRemoteWrite, 0, kPeerQp, nullptr),
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
    EXPECT_EQ(t.check(mr->rkey, a + 10, 20, kAccessRemoteRead, 3, kPeerQp, &where), MemCheck::kOk);
    EXPECT_EQ(where, mem.data() + 10);
    EXPECT_EQ(t.check(mr->rkey ^ 0x100, a, 1, kAccessRemoteRead, 3, kPeerQp, nullptr),
              MemCheck::kInvalidStag);
    EXPECT_EQ(t.check(mr->rkey ^ 0x1, a, 1, kAccessRemoteRead, 3, kPeerQp, nullptr),
              MemCheck::kInvalidStag);
    // Another domain, even without the right and out of bounds: the domain first.
    EXPECT_EQ(t.check(mr->rkey, a + 99, 2, kAccessRemoteWrite, 4, kPeerQp, nullptr),
              MemCheck::kPdMismatch);
    // The rights before the bounds.
    EXPECT_EQ(t.check(mr->rkey, a + 99, 2, kAccessRemoteWrite, 3, kPeerQp, nullptr),
              MemCheck::kAccessRights);
    EXPECT_EQ(t.check(mr->rkey, a + 99, 2, kAccessRemoteRead, 3, kPeerQp, nullptr),
              MemCheck::kBaseBounds);
    EXPECT_EQ(t.check(mr->rkey, a - 1, 1, kAccessRemoteRead, 3, kPeerQp, nullptr),
              MemCheck::kBaseBounds);
    EXPECT_EQ(t.check(mr->rkey, a + 100, 0, kAccessRemoteRead, 3, kPeerQp, nullptr), MemCheck::kOk);
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
// access in domain 1, two regions in domain 2, a window bound on its QP, one
// bound on another QP and one never bound, it reaches only the region of
// domain 2 that allows what it asks and the window of its own QP; every other
// guess fails before any byte is named.
TEST(MrTable, GuessingEverySTagReachesOnlyWhatWasGiven) {
    MrTable t(4096, kSecret);
    std::vector<std::byte> mem(64);
    std::set<std::uint32_t> other_domain;
    for (int i = 0; i < 200; ++i) other_domain.insert(t.reg(mem, kRemote, 1)->rkey);
    const std::uint32_t given = t.reg(mem, kAccessRemoteWrite, 2)->rkey;
    const std::uint32_t local_only = t.reg(mem, kAccessLocalWrite | kAccessMwBind, 2)->rkey;
    const std::uint64_t to = reinterpret_cast<std::uintptr_t>(mem.data());
    const WindowBind range{local_only, to, 64, kAccessRemoteWrite};
    const MemoryWindow mine = *t.alloc_mw(2);
    ASSERT_EQ(t.bind(mine.handle, mine.rkey, kPeerQp, 2, range), MrTable::Bind::kOk);
    const MemoryWindow theirs = *t.alloc_mw(2);
    ASSERT_EQ(t.bind(theirs.handle, theirs.rkey, kPeerQp + 1, 2, range), MrTable::Bind::kOk);
    ASSERT_TRUE(t.alloc_mw(2).has_value());  // never bound
    other_domain.insert(theirs.rkey);        // "not associated with this stream"
    std::array<std::uint64_t, 5> seen{};
    std::set<std::uint32_t> reached;
    std::uint32_t stag = 0;
    do {
        const MemCheck c = t.check(stag, to, 8, kAccessRemoteWrite, 2, kPeerQp, nullptr);
        ++seen[static_cast<std::size_t>(c)];
        if (c == MemCheck::kOk) reached.insert(stag);
        if (c == MemCheck::kPdMismatch && other_domain.count(stag) == 0) ADD_FAILURE() << stag;
    } while (++stag != 0);
    EXPECT_EQ(seen[static_cast<std::size_t>(MemCheck::kOk)], 2u);
    EXPECT_EQ(reached, (std::set<std::uint32_t>{given, mine.rkey}));
    EXPECT_EQ(seen[static_cast<std::size_t>(MemCheck::kPdMismatch)], 201u);
    EXPECT_EQ(seen[static_cast<std::size_t>(MemCheck::kAccessRights)], 1u);
    EXPECT_EQ(t.check(local_only, to, 8, kAccessRemoteWrite, 2, kPeerQp, nullptr),
              MemCheck::kAccessRights);
    EXPECT_EQ(seen[static_cast<std::size_t>(MemCheck::kBaseBounds)], 0u);
    EXPECT_EQ(seen[static_cast<std::size_t>(MemCheck::kInvalidStag)], (1ull << 32) - 204);
}

// A window (type 2B) is invalid until bound; bound, it names its range with its own
// rights for the peer of its QP only, never as an lkey; its region stays registered
// while it is bound; invalidated (by its QP only), it may be bound again under
// another key, and the STag before names nothing.
TEST(MrTable, AWindowServesItsQueuePairsPeerWithinItsRangeUntilInvalidated) {
    MrTable t(16, kSecret);
    std::vector<std::byte> mem(128);
    const MemoryRegion mr = *t.reg(mem, kAccessLocalWrite | kAccessMwBind, 2);
    const MemoryWindow w = *t.alloc_mw(2);
    EXPECT_EQ(w.pd, 2u);
    EXPECT_NE(w.rkey >> 8, mr.rkey >> 8);
    const std::uint64_t a = mr.addr;
    EXPECT_EQ(t.check(w.rkey, a, 1, kAccessRemoteWrite, 2, kPeerQp, nullptr),
              MemCheck::kInvalidStag)
        << "not bound yet";
    const std::uint32_t stag = (w.rkey & ~0xFFu) | ((w.rkey + 1) & 0xFF);  // ibv_inc_rkey
    ASSERT_EQ(t.bind(w.handle, stag, kPeerQp, 2, {mr.lkey, a + 16, 32, kAccessRemoteWrite}),
              MrTable::Bind::kOk);
    std::byte* where = nullptr;
    EXPECT_EQ(t.check(stag, a + 16, 32, kAccessRemoteWrite, 2, kPeerQp, &where), MemCheck::kOk);
    EXPECT_EQ(where, mem.data() + 16);
    EXPECT_EQ(t.check(w.rkey, a + 16, 1, kAccessRemoteWrite, 2, kPeerQp, nullptr),
              MemCheck::kInvalidStag)
        << "the allocation's key is not the bind's";
    EXPECT_EQ(t.check(stag, a + 16, 1, kAccessRemoteRead, 2, kPeerQp, nullptr),
              MemCheck::kAccessRights);
    EXPECT_EQ(t.check(stag, a + 15, 1, kAccessRemoteWrite, 2, kPeerQp, nullptr),
              MemCheck::kBaseBounds);
    EXPECT_EQ(t.check(stag, a + 40, 9, kAccessRemoteWrite, 2, kPeerQp, nullptr),
              MemCheck::kBaseBounds);
    EXPECT_EQ(t.check(stag, a + 16, 1, kAccessRemoteWrite, 2, kPeerQp + 1, nullptr),
              MemCheck::kPdMismatch)
        << "another QP's peer";
    EXPECT_EQ(t.check(stag, a + 16, 1, kAccessLocalWrite, 2, kLocalUse, nullptr),
              MemCheck::kInvalidStag)
        << "no lkey";
    EXPECT_EQ(t.check(mr.rkey, a + 16, 1, kAccessRemoteWrite, 2, kPeerQp, nullptr),
              MemCheck::kAccessRights)
        << "the region itself gives no remote access";
    EXPECT_EQ(t.dereg(mr.handle).error(), VerbsError::kWrongState);
    EXPECT_EQ(t.bind(w.handle, stag, kPeerQp, 2, {mr.lkey, a, 8, kAccessRemoteRead}),
              MrTable::Bind::kBound);
    EXPECT_EQ(t.invalidate(stag, 2, kPeerQp + 1), MrTable::Invalidation::kPdMismatch);
    EXPECT_EQ(t.invalidate(stag, 2, kPeerQp), MrTable::Invalidation::kOk);
    EXPECT_EQ(t.check(stag, a + 16, 1, kAccessRemoteWrite, 2, kPeerQp, nullptr),
              MemCheck::kInvalidStag);
    EXPECT_EQ(t.invalidate(stag, 2, kPeerQp), MrTable::Invalidation::kPdMismatch)
        << "not bound any more";
    const std::uint32_t next = (stag & ~0xFFu) | ((stag + 1) & 0xFF);
    ASSERT_EQ(t.bind(w.handle, next, kPeerQp, 2, {mr.lkey, a, 8, kAccessRemoteRead}),
              MrTable::Bind::kOk);
    EXPECT_EQ(t.check(next, a, 8, kAccessRemoteRead, 2, kPeerQp, nullptr), MemCheck::kOk);
    EXPECT_EQ(t.check(stag, a, 8, kAccessRemoteRead, 2, kPeerQp, nullptr), MemCheck::kInvalidStag);
    t.unbind_qp(kPeerQp + 1);
    EXPECT_EQ(t.check(next, a, 8, kAccessRemoteRead, 2, kPeerQp, nullptr), MemCheck::kOk);
    t.unbind_qp(kPeerQp);
    EXPECT_EQ(t.check(next, a, 8, kAccessRemoteRead, 2, kPeerQp, nullptr), MemCheck::kInvalidStag)
        << "its QP is gone";
    EXPECT_TRUE(t.dereg(mr.handle).has_value());
    EXPECT_TRUE(t.dealloc_mw(w.handle).has_value());
    EXPECT_EQ(t.dealloc_mw(w.handle).error(), VerbsError::kStaleHandle);
    EXPECT_EQ(t.live(), 0u);
}

TEST(MrTable, ABindIsRefusedForEachRuleItBreaks) {
    MrTable t(16, kSecret);
    std::vector<std::byte> mem(64);
    const std::uint64_t a = reinterpret_cast<std::uintptr_t>(mem.data());
    const MemoryRegion mr = *t.reg(mem, kAccessLocalWrite | kAccessMwBind, 2);
    const MemoryRegion no_bind = *t.reg(mem, kAccessLocalWrite | kAccessRemoteWrite, 2);
    const MemoryRegion read_only = *t.reg(mem, kAccessMwBind, 2);
    const MemoryRegion other_pd = *t.reg(mem, kAccessLocalWrite | kAccessMwBind, 3);
    const MemoryWindow w = *t.alloc_mw(2);
    const MemoryWindow w3 = *t.alloc_mw(3);
    const MemoryWindow gone = *t.alloc_mw(2);
    ASSERT_TRUE(t.dealloc_mw(gone.handle).has_value());
    using B = MrTable::Bind;
    auto bind = [&](const MemoryWindow& mw, std::uint32_t stag, const WindowBind& to) {
        return t.bind(mw.handle, stag, kPeerQp, 2, to);
    };
    const WindowBind ok{mr.lkey, a, 64, kAccessRemoteWrite | kAccessRemoteRead};
    EXPECT_EQ(bind(gone, gone.rkey, ok), B::kNoWindow);
    EXPECT_EQ(t.bind({mr.handle.index, mr.handle.generation}, mr.rkey, kPeerQp, 2, ok),
              B::kNoWindow)
        << "a region is no window";
    EXPECT_EQ(bind(w, w3.rkey, ok), B::kStagIndex);
    EXPECT_EQ(bind(w3, w3.rkey, ok), B::kPdMismatch);
    EXPECT_EQ(bind(w, w.rkey, {other_pd.lkey, a, 8, kAccessRemoteRead}), B::kPdMismatch);
    EXPECT_EQ(bind(w, w.rkey, {mr.lkey ^ 1, a, 8, kAccessRemoteRead}), B::kNoRegion);
    EXPECT_EQ(bind(w, w.rkey, {w3.rkey, a, 8, kAccessRemoteRead}), B::kNoRegion);
    EXPECT_EQ(bind(w, w.rkey, {no_bind.lkey, a, 8, kAccessRemoteRead}), B::kRegionRights);
    EXPECT_EQ(bind(w, w.rkey, {read_only.lkey, a, 8, kAccessRemoteWrite}), B::kRegionRights);
    EXPECT_EQ(bind(w, w.rkey, {mr.lkey, a + 1, 64, kAccessRemoteRead}), B::kBounds);
    EXPECT_EQ(bind(w, w.rkey, {mr.lkey, a - 1, 2, kAccessRemoteRead}), B::kBounds);
    EXPECT_EQ(bind(w, w.rkey, {mr.lkey, a, 8, kAccessLocalWrite}), B::kRights);
    EXPECT_EQ(t.check(w.rkey, a, 1, kAccessRemoteRead, 2, kPeerQp, nullptr), MemCheck::kInvalidStag)
        << "no refused bind left the window valid";
    EXPECT_EQ(bind(w, w.rkey, {read_only.lkey, a, 8, kAccessRemoteRead}), B::kOk);
    EXPECT_EQ(t.dereg({w.handle.index, w.handle.generation}).error(), VerbsError::kStaleHandle)
        << "a window is no region";
}

}  // namespace
}  // namespace iwcm::rdma
