// tcp::RecordEnds against a plain sorted vector: pushes, drops and queries in
// a random order, across sequence wrap, with the search's cached answer both
// right and stale. Read src/tcp/record_ends.hpp first.
#include "tcp/record_ends.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <random>
#include <vector>

namespace iwcm::tcp {
namespace {

using wire::SeqNumber;

std::optional<SeqNumber> model_first_after(const std::vector<SeqNumber>& v, SeqNumber s) {
    for (SeqNumber e : v)
        if (e > s) return e;
    return std::nullopt;
}

std::optional<SeqNumber> model_last_before(const std::vector<SeqNumber>& v, SeqNumber s) {
    std::optional<SeqNumber> out;
    for (SeqNumber e : v)
        if (e < s) out = e;
    return out;
}

TEST(RecordEnds, MatchesASortedVector) {
    std::mt19937 rng(7);
    for (std::uint32_t start : {0u, 0xFFFF0000u}) {
        RecordEnds ends;
        std::vector<SeqNumber> model;
        SeqNumber una(start);
        SeqNumber tail(start);
        for (int step = 0; step < 20000; ++step) {
            const unsigned op = rng() % 8;
            if (op < 3 && model.size() < 300) {
                tail = tail + (1 + rng() % 3000);
                ends.push(tail);
                model.push_back(tail);
            } else if (op == 3 && tail > una) {
                una = una + rng() % (static_cast<std::uint32_t>(tail - una) + 1);
                ends.drop_through(una);
                std::erase_if(model, [&](SeqNumber e) { return e <= una; });
            } else {
                // Around an end (the sender's usual question) or anywhere in the range.
                SeqNumber q = una + rng() % (static_cast<std::uint32_t>(tail - una) + 2);
                if (!model.empty() && rng() % 2 == 0)
                    q = model[rng() % model.size()] + (rng() % 3) + (0u - 1u);
                ASSERT_EQ(ends.first_after(q), model_first_after(model, q)) << step;
                ASSERT_EQ(ends.last_before(q), model_last_before(model, q)) << step;
            }
            ASSERT_EQ(ends.size(), model.size());
            if (!model.empty()) {
                ASSERT_EQ(ends.front(), model.front());
                ASSERT_EQ(ends.back(), model.back());
            }
        }
    }
}

// A sender's walk through many records in order: every answer is the next end.
TEST(RecordEnds, WalksRecordsInOrder) {
    RecordEnds ends;
    for (std::uint32_t i = 1; i <= 100; ++i) ends.push(SeqNumber(i * 1000));
    for (std::uint32_t i = 0; i < 100; ++i) {
        for (std::uint32_t off : {0u, 1u, 999u}) {
            const SeqNumber at(i * 1000 + off);
            ASSERT_EQ(ends.first_after(at), SeqNumber((i + 1) * 1000)) << i << " " << off;
        }
        if (i % 10 == 9) ends.drop_through(SeqNumber(i * 1000));
    }
}

}  // namespace
}  // namespace iwcm::tcp
