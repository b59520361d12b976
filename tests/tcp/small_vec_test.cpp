// tcp::SmallVec against std::vector: pushes, front erasures and clears in a random order,
// across the move from the object to the heap. Read src/tcp/small_vec.hpp first.
#include "tcp/small_vec.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace iwcm::tcp {
namespace {

struct Item {
    std::uint32_t a = 0;
    std::uint64_t b = 0;
    bool operator==(const Item&) const = default;
};

TEST(SmallVec, MatchesAVector) {
    std::mt19937 rng(11);
    SmallVec<Item, 3> v;
    std::vector<Item> model;
    for (std::uint32_t step = 0; step < 20000; ++step) {
        const unsigned op = rng() % 16;
        if (op < 11) {
            const Item item{step, std::uint64_t{step} * 0x9E3779B97F4A7C15ULL};
            if (op % 2 == 0)
                v.push_back(item);
            else
                v.emplace_back(item);
            model.push_back(item);
        } else if (op < 15 && !model.empty()) {
            const std::size_t n = rng() % (model.size() + 1);
            v.erase_front(n);
            model.erase(model.begin(), model.begin() + static_cast<std::ptrdiff_t>(n));
        } else {
            v.clear();
            model.clear();
        }
        ASSERT_EQ(v.size(), model.size()) << "step " << step;
        ASSERT_EQ(v.empty(), model.empty());
        ASSERT_GE(v.capacity(), v.size());
        ASSERT_TRUE(std::equal(v.begin(), v.end(), model.begin(), model.end())) << "step " << step;
        if (!model.empty()) {
            ASSERT_EQ(v[model.size() - 1], model.back());
        }
    }
}

TEST(SmallVec, AFewStayInTheObjectAndMoreMoveToTheHeapForGood) {
    SmallVec<std::uint32_t, 2> v;
    v.push_back(1);
    v.push_back(2);
    EXPECT_FALSE(v.on_heap());
    EXPECT_EQ(v.capacity(), 2u);
    const auto* inside = reinterpret_cast<const std::byte*>(&v);
    EXPECT_GE(reinterpret_cast<const std::byte*>(v.data()), inside);
    EXPECT_LT(reinterpret_cast<const std::byte*>(v.data()), inside + sizeof(v));

    v.push_back(3);
    EXPECT_TRUE(v.on_heap());
    EXPECT_EQ(v.capacity(), 4u);
    EXPECT_EQ((std::vector<std::uint32_t>(v.begin(), v.end())),
              (std::vector<std::uint32_t>{1, 2, 3}));

    // Cleared, it keeps the heap block, as a vector keeps its capacity.
    v.clear();
    EXPECT_TRUE(v.on_heap());
    EXPECT_EQ(v.capacity(), 4u);
    for (std::uint32_t i = 0; i < 4; ++i) v.push_back(i + 10);
    EXPECT_EQ(v.capacity(), 4u);
    EXPECT_EQ(v[3], 13u);
}

}  // namespace
}  // namespace iwcm::tcp
