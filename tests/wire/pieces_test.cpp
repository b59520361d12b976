// wire::Pieces: a window over bytes in pieces reads as the same bytes joined would.
// Read first: src/wire/pieces.hpp.
#include "wire/pieces.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "wire/wire_test_util.hpp"

namespace iwcm::wire {
namespace {

std::vector<std::byte> joined(const Pieces& p) {
    std::vector<std::byte> out(p.size());
    p.copy_to(out.data());
    std::vector<std::byte> runs;
    p.each([&runs](Bytes run) { runs.insert(runs.end(), run.begin(), run.end()); });
    EXPECT_EQ(runs, out);
    return out;
}

TEST(Pieces, EveryWindowReadsAsTheJoinedBytes) {
    std::mt19937 rng(3);
    std::vector<std::byte> bytes(64);
    for (auto& b : bytes) b = static_cast<std::byte>(rng());
    for (int trial = 0; trial < 50; ++trial) {
        std::vector<std::size_t> cuts;
        for (int i = 0; i < 6; ++i) cuts.push_back(rng() % (bytes.size() + 1));
        std::sort(cuts.begin(), cuts.end());
        const std::vector<Bytes> pieces = test::pieces_of(bytes, cuts);
        const Pieces all(pieces);
        ASSERT_EQ(all.size(), bytes.size());
        EXPECT_EQ(total_size(pieces), bytes.size());
        EXPECT_TRUE(all.whole());
        std::vector<std::byte> appended;
        append(appended, pieces);
        EXPECT_EQ(appended, bytes);
        for (std::size_t from = 0; from <= bytes.size(); ++from) {
            const Pieces rest = all.subspan(from);
            // Whole when it starts at a cut: the pieces before it are dropped.
            const bool at_cut = from == 0 || from == bytes.size() ||
                                std::find(cuts.begin(), cuts.end(), from) != cuts.end();
            EXPECT_EQ(rest.whole(), at_cut) << from;
            if (rest.whole()) {
                EXPECT_EQ(total_size(rest.pieces()), rest.size());
            }
            for (std::size_t n = 0; from + n <= bytes.size(); ++n) {
                const Pieces w = rest.first(n);
                const std::vector<std::byte> want(bytes.begin() + from, bytes.begin() + from + n);
                ASSERT_EQ(joined(w), want) << trial << " " << from << " " << n;
                // contiguous() gives the bytes exactly when no cut lies inside them.
                bool inside = false;
                for (std::size_t c : cuts) inside = inside || (from < c && c < from + n);
                const auto one = w.contiguous();
                ASSERT_EQ(one.has_value(), !inside || n == 0) << from << " " << n;
                if (one) {
                    ASSERT_TRUE(std::equal(one->begin(), one->end(), want.begin(), want.end()));
                }
            }
            if (rest.size() >= 4) {
                std::byte head[4];
                rest.head<4>(head);
                EXPECT_TRUE(std::equal(head, head + 4, bytes.begin() + from));
            }
        }
    }
}

// Walking forward drops the pieces passed: the window's first piece holds its first byte.
TEST(Pieces, SubspanDropsThePiecesItPasses) {
    std::vector<std::byte> bytes(30, std::byte{1});
    const std::vector<Bytes> pieces = test::pieces_of(bytes, {10, 20});
    Pieces w(pieces);
    w = w.subspan(10);
    EXPECT_EQ(w.pieces().size(), 2u);
    EXPECT_TRUE(w.whole());  // exactly the last two pieces
    w = w.subspan(15);
    EXPECT_EQ(w.pieces().size(), 1u);
    EXPECT_EQ(w.size(), 5u);
    EXPECT_FALSE(w.whole());
    EXPECT_EQ(w.pieces().front().data(), pieces[2].data());
}

TEST(Pieces, OneSpan) {
    std::vector<std::byte> bytes(5, std::byte{7});
    const Bytes one(bytes);
    const Pieces w = Pieces::of(one);
    ASSERT_TRUE(w.contiguous().has_value());
    EXPECT_EQ(w.contiguous()->data(), bytes.data());
    EXPECT_EQ(w.size(), 5u);
}

// A payload's list: its pieces when it has several, else its one span.
TEST(Pieces, PiecesOrOne) {
    std::vector<std::byte> bytes(6, std::byte{3});
    const Bytes one(bytes);
    const Bytes two[] = {Bytes(bytes).first(2), Bytes(bytes).subspan(2)};
    const auto alone = pieces_or({}, one);
    ASSERT_EQ(alone.size(), 1u);
    EXPECT_EQ(alone[0].data(), bytes.data());
    EXPECT_EQ(alone[0].size(), 6u);
    const auto listed = pieces_or(two, one);
    EXPECT_EQ(listed.data(), two);
    EXPECT_EQ(listed.size(), 2u);
}

}  // namespace
}  // namespace iwcm::wire
