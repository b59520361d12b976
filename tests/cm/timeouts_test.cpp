// Timeouts of a node at the engine level when several kinds meet: when each fires (not a
// millisecond early), the exact frames, what the application hears. Read src/cm/timeouts.cpp
// first (one handler per NodeTimer kind), then src/cm/node_timers.hpp. The single-timeout
// cases live with their state's suite (Established.RequestTimerResetsSilentPeer, ...).
#include <cerrno>
#include <chrono>

#include "cm/dut.hpp"

namespace iwcm::test {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

TEST(Timeouts, RequestArrivingHandsThePhaseSlotToTheAcceptWait) {
    Dut d;
    d.to_mpareq_wait();
    d.advance(seconds(9));
    d.send_mpa(request_v1(bytes("x")));
    expect_sent(d, {d.sent_ack()});
    ASSERT_EQ(d.evs().size(), 1u);
    // The request wait would have ended at 10 s; the accept wait runs 30 s from now.
    ASSERT_EQ(d.core.pending_timers(), 1u);
    quiet_until(d, seconds(9 + 30));
    expect_sent(d, {d.sent_frame(tf::kRst | tf::kAck, d.dut_nxt, d.peer_nxt)});
    auto e = d.evs();
    ASSERT_EQ(e.size(), 1u);
    EXPECT_EQ(e[0].type, EventType::kUnreachable);
    EXPECT_EQ(e[0].status, -ETIMEDOUT);
    EXPECT_EQ(d.core.live_nodes(), 0u);
}

TEST(Timeouts, MpaReplyWaitRetransmitsTheRequestThenResets) {
    Dut d;
    Sent req = d.to_mpareq_sent();
    const Frame again = d.sent_frame(tf::kAck | tf::kPsh, req.tcp().seq, d.peer_nxt, req.payload);
    // The send entry re-sends the unacknowledged request at 1, 3 and 7 s; the reply wait ends
    // at 10 s, before the fourth retransmission (15 s).
    for (int t : {1, 3, 7}) {
        quiet_until(d, seconds(t));
        expect_sent(d, {again});
    }
    quiet_until(d, seconds(10));
    expect_sent(d, {d.sent_frame(tf::kRst | tf::kAck, d.dut_nxt, d.peer_nxt)});
    auto e = d.evs();
    ASSERT_EQ(e.size(), 1u);
    EXPECT_EQ(e[0].type, EventType::kUnreachable);
    EXPECT_EQ(e[0].status, -ETIMEDOUT);
    EXPECT_EQ(d.core.stats().retransmissions, 3u);
    EXPECT_EQ(d.core.pending_timers(), 0u);
}

}  // namespace
}  // namespace iwcm::test
