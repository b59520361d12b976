// Tests of the driver's retransmission schedule. Read src/timer/retrans.hpp's opening comment
// first: it derives the schedule from irdma_cm_timer_tick. The per-node send, close and phase
// timers that use it are tested in tests/cm/node_timers_test.cpp.
#include "timer/retrans.hpp"

#include <gtest/gtest.h>

#include <array>
#include <cstdint>

namespace iwcm::timer {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

TEST(RetransPolicy, DefaultDelaysDoubleThenCap) {
    const RetransPolicy policy;
    const std::array<std::int64_t, 9> expected = {1, 2, 4, 8, 12, 12, 12, 12, 12};
    for (int retry = 0; retry < 9; ++retry) {
        EXPECT_EQ(policy.delay(retry), seconds(expected[retry])) << "retry " << retry;
    }
    EXPECT_EQ(policy.delay(200), seconds(12));  // No overflow for silly counts.
    EXPECT_EQ(policy.total(), seconds(75));
}

TEST(RetransPolicy, CustomValues) {
    const RetransPolicy policy{3, milliseconds(300), milliseconds(1000)};
    EXPECT_EQ(policy.delay(0), milliseconds(300));
    EXPECT_EQ(policy.delay(1), milliseconds(600));
    EXPECT_EQ(policy.delay(2), milliseconds(1000));
    EXPECT_EQ(policy.delay(3), milliseconds(1000));
    EXPECT_EQ(policy.total(), milliseconds(2900));
}

}  // namespace
}  // namespace iwcm::timer
