// Tests of the CM send/close timer service. Read src/timer/cm_timer.hpp's opening comment
// first: it derives the retransmission schedule from irdma_cm_timer_tick.
//
// Nodes are std::shared_ptr values so that use_count() shows whether an entry still holds a
// reference. Time is virtual and driven as the simulator drives it: jump to next_deadline().
#include "timer/cm_timer.hpp"

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace iwcm::timer {
namespace {

using std::chrono::milliseconds;
using std::chrono::nanoseconds;
using std::chrono::seconds;

enum class TestFrame : std::uint8_t { kNone, kSyn, kSynAck, kFin, kMpaReq, kRst };

struct TestNode {
    CmTimerSlots cm_timers;
    int id = 0;
};

using NodeRef = std::shared_ptr<TestNode>;
using Service = CmTimerService<NodeRef, TestFrame>;
using Kind = Service::Kind;

NodeRef make_node(int id) {
    auto node = std::make_shared<TestNode>();
    node->id = id;
    return node;
}

struct Seen {
    Instant at;
    Kind kind;
    int node;
    TestFrame frame;
    int attempt;
    friend bool operator==(const Seen&, const Seen&) = default;
};

std::ostream& operator<<(std::ostream& os, const Seen& s) {
    return os << "{t=" << s.at.time_since_epoch().count() << "ns kind=" << static_cast<int>(s.kind)
              << " node=" << s.node << " frame=" << static_cast<int>(s.frame)
              << " attempt=" << s.attempt << "}";
}

// Handles what is due at `now`, recording every action; the action (and its reference) is
// dropped when the callback returns.
std::vector<Seen> run(Service& service, Instant now) {
    std::vector<Seen> out;
    service.on_timer(now, [&](Service::Action&& a) {
        out.push_back(Seen{now, a.kind, a.node->id, a.frame, a.attempt});
    });
    return out;
}

// Drives the service the way the simulator does: jump to each deadline up to `until`.
std::vector<Seen> drive(Service& service, Instant until, int max_steps = 100000) {
    std::vector<Seen> out;
    for (int step = 0; step < max_steps; ++step) {
        const auto next = service.next_deadline();
        if (!next || *next > until) break;
        // Nothing may fire a nanosecond early.
        EXPECT_TRUE(run(service, *next - nanoseconds(1)).empty());
        for (const Seen& s : run(service, *next)) out.push_back(s);
    }
    return out;
}

Instant at_s(std::int64_t s) { return kInstantZero + seconds(s); }

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

TEST(CmTimerSend, DefaultScheduleMatchesTheDriver) {
    // Derived in cm_timer.hpp from irdma_cm_timer_tick: retransmissions at 1, 3, 7, 15, 27,
    // 39, 51 and 63 s after the first send, the exhaustion verdict at 75 s.
    Service service;
    const NodeRef node = make_node(1);
    const Instant t0 = at_s(10) + milliseconds(250);
    ASSERT_EQ(service.schedule_send(node, t0, TestFrame::kSyn, true, false), false);
    EXPECT_EQ(node.use_count(), 2);
    EXPECT_TRUE(service.has_send(node));
    EXPECT_EQ(service.pending(), 1u);
    const auto seen = drive(service, t0 + seconds(1000));
    std::vector<Seen> expected;
    const std::array<std::int64_t, 8> retransmit_at = {1, 3, 7, 15, 27, 39, 51, 63};
    for (int i = 0; i < 8; ++i) {
        expected.push_back({t0 + seconds(retransmit_at[i]), Kind::kRetransmit, 1, TestFrame::kSyn,
                            i + 1});
    }
    expected.push_back({t0 + seconds(75), Kind::kExhausted, 1, TestFrame::kSyn, 8});
    EXPECT_EQ(seen, expected);
    EXPECT_FALSE(service.has_send(node));
    EXPECT_EQ(service.pending(), 0u);
    EXPECT_EQ(service.next_deadline(), std::nullopt);
    EXPECT_EQ(node.use_count(), 1);
}

TEST(CmTimerSend, RetransmitCarriesACopyAndKeepsTheEntry) {
    Service service;
    const NodeRef node = make_node(1);
    ASSERT_TRUE(service.schedule_send(node, kInstantZero, TestFrame::kMpaReq, true, false));
    int calls = 0;
    service.on_timer(at_s(1), [&](Service::Action&& a) {
        ++calls;
        EXPECT_EQ(a.kind, Kind::kRetransmit);
        EXPECT_EQ(a.node, node);
        EXPECT_EQ(a.frame, TestFrame::kMpaReq);
        EXPECT_EQ(a.attempt, 1);
        EXPECT_EQ(node.use_count(), 3);  // Caller, entry, action.
    });
    EXPECT_EQ(calls, 1);
    EXPECT_EQ(node.use_count(), 2);
    EXPECT_TRUE(service.has_send(node));
    EXPECT_EQ(service.next_deadline(), at_s(3));
}

TEST(CmTimerSend, AckCancelsAndDropsTheReference) {
    Service service;
    const NodeRef node = make_node(1);
    ASSERT_TRUE(service.schedule_send(node, kInstantZero, TestFrame::kSyn, true, false));
    EXPECT_EQ(run(service, at_s(1)).size(), 1u);
    EXPECT_EQ(node.use_count(), 2);
    EXPECT_FALSE(service.ack_send(node));  // Acked; close_when_complete was false.
    EXPECT_FALSE(service.has_send(node));
    EXPECT_EQ(node.use_count(), 1);
    EXPECT_EQ(service.pending(), 0u);
    EXPECT_EQ(service.next_deadline(), std::nullopt);
    EXPECT_TRUE(drive(service, at_s(1000)).empty());
    EXPECT_FALSE(service.ack_send(node));  // No entry any more.
}

TEST(CmTimerSend, AckReportsCloseWhenComplete) {
    Service service;
    const NodeRef node = make_node(1);
    ASSERT_EQ(service.schedule_send(node, kInstantZero, TestFrame::kFin, true, true), false);
    EXPECT_TRUE(service.ack_send(node));  // kSendComplete: the caller releases the node.
    EXPECT_EQ(node.use_count(), 1);
}

TEST(CmTimerSend, SecondSendEntryIsAnError) {
    Service service;
    const NodeRef node = make_node(1);
    ASSERT_TRUE(service.schedule_send(node, kInstantZero, TestFrame::kSyn, true, false));
    const auto second = service.schedule_send(node, at_ms(5), TestFrame::kFin, true, false);
    ASSERT_FALSE(second.has_value());
    EXPECT_EQ(second.error(), CmTimerError::kSendEntryExists);
    EXPECT_FALSE(to_string(second.error()).empty());
    // The first entry is untouched.
    const auto seen = run(service, at_s(1));
    ASSERT_EQ(seen.size(), 1u);
    EXPECT_EQ(seen[0].frame, TestFrame::kSyn);
    EXPECT_EQ(node.use_count(), 2);
    EXPECT_EQ(service.pending(), 1u);
}

TEST(CmTimerSend, OneShotSendKeepsNothing) {
    Service service;
    const NodeRef node = make_node(1);
    // The driver's irdma_send_reset: send once, then release the node.
    const auto rst = service.schedule_send(node, kInstantZero, TestFrame::kRst, false, true);
    ASSERT_TRUE(rst.has_value());
    EXPECT_TRUE(*rst);
    EXPECT_FALSE(service.has_send(node));
    EXPECT_EQ(service.pending(), 0u);
    EXPECT_EQ(node.use_count(), 1);
    const auto plain = service.schedule_send(node, kInstantZero, TestFrame::kRst, false, false);
    ASSERT_TRUE(plain.has_value());
    EXPECT_FALSE(*plain);
    EXPECT_TRUE(drive(service, at_s(100)).empty());
}

TEST(CmTimerSend, OneShotSendReplacesAnArmedEntryLikeTheDriver) {
    Service service;
    const NodeRef node = make_node(1);
    ASSERT_TRUE(service.schedule_send(node, kInstantZero, TestFrame::kSyn, true, false));
    ASSERT_EQ(node.use_count(), 2);
    // The driver overwrites send_entry and frees it: the SYN stops being retransmitted.
    ASSERT_EQ(service.schedule_send(node, at_ms(500), TestFrame::kRst, false, true), true);
    EXPECT_FALSE(service.has_send(node));
    EXPECT_EQ(node.use_count(), 1);
    EXPECT_TRUE(drive(service, at_s(100)).empty());
}

TEST(CmTimerSend, NewEntryAfterExhaustion) {
    Service service;
    const NodeRef node = make_node(1);
    ASSERT_TRUE(service.schedule_send(node, kInstantZero, TestFrame::kSyn, true, false));
    EXPECT_EQ(drive(service, at_s(75)).back().kind, Kind::kExhausted);
    ASSERT_TRUE(service.schedule_send(node, at_s(80), TestFrame::kSyn, true, false));
    EXPECT_EQ(service.next_deadline(), at_s(81));
}

TEST(CmTimerClose, FiresAfterOneHundredMilliseconds) {
    Service service;
    const NodeRef node = make_node(7);
    ASSERT_TRUE(service.schedule_close(node, at_s(5)).has_value());
    EXPECT_TRUE(service.has_close(node));
    EXPECT_EQ(node.use_count(), 2);
    EXPECT_EQ(service.next_deadline(), at_s(5) + milliseconds(100));
    EXPECT_TRUE(run(service, at_s(5) + milliseconds(99)).empty());
    const auto seen = run(service, at_s(5) + milliseconds(100));
    ASSERT_EQ(seen.size(), 1u);
    EXPECT_EQ(seen[0].kind, Kind::kClose);
    EXPECT_EQ(seen[0].node, 7);
    EXPECT_FALSE(service.has_close(node));
    EXPECT_EQ(node.use_count(), 1);
    EXPECT_EQ(service.pending(), 0u);
}

TEST(CmTimerClose, SecondCloseEntryIsAnError) {
    Service service;
    const NodeRef node = make_node(1);
    ASSERT_TRUE(service.schedule_close(node, kInstantZero).has_value());
    const auto second = service.schedule_close(node, at_ms(50));
    ASSERT_FALSE(second.has_value());
    EXPECT_EQ(second.error(), CmTimerError::kCloseEntryExists);
    EXPECT_NE(to_string(CmTimerError::kCloseEntryExists),
              to_string(CmTimerError::kSendEntryExists));
    // The first one still fires at its own time.
    EXPECT_EQ(drive(service, at_s(1)), (std::vector<Seen>{
                                           {at_ms(100), Kind::kClose, 1, TestFrame::kNone, 0}}));
}

TEST(CmTimerClose, CancelClose) {
    Service service;
    const NodeRef node = make_node(1);
    ASSERT_TRUE(service.schedule_close(node, kInstantZero).has_value());
    EXPECT_TRUE(service.cancel_close(node));
    EXPECT_FALSE(service.cancel_close(node));
    EXPECT_EQ(node.use_count(), 1);
    EXPECT_TRUE(drive(service, at_s(1)).empty());
    // A new close entry is allowed once the old one is gone.
    EXPECT_TRUE(service.schedule_close(node, at_s(2)).has_value());
}

TEST(CmTimerService, CancelAllDropsBothEntries) {
    Service service;
    const NodeRef node = make_node(1);
    const NodeRef other = make_node(2);
    ASSERT_TRUE(service.schedule_send(node, kInstantZero, TestFrame::kFin, true, false));
    ASSERT_TRUE(service.schedule_close(node, kInstantZero).has_value());
    ASSERT_TRUE(service.schedule_close(other, kInstantZero).has_value());
    EXPECT_EQ(node.use_count(), 3);
    EXPECT_EQ(service.pending(), 3u);
    service.cancel_all(node);
    EXPECT_EQ(node.use_count(), 1);
    EXPECT_EQ(service.pending(), 1u);
    EXPECT_FALSE(service.has_send(node));
    EXPECT_FALSE(service.has_close(node));
    service.cancel_all(node);  // Nothing left: harmless.
    EXPECT_EQ(drive(service, at_s(100)),
              (std::vector<Seen>{{at_ms(100), Kind::kClose, 2, TestFrame::kNone, 0}}));
}

TEST(CmTimerService, CustomPolicyAndCloseDelay) {
    CmTimerConfig config;
    config.retrans = RetransPolicy{3, milliseconds(200), milliseconds(500)};
    config.close_delay = milliseconds(30);
    config.granularity = milliseconds(10);
    Service service(config);
    EXPECT_EQ(service.config().retrans.max_retrans, 3);
    const NodeRef node = make_node(1);
    ASSERT_TRUE(service.schedule_send(node, kInstantZero, TestFrame::kSyn, true, false));
    ASSERT_TRUE(service.schedule_close(node, at_ms(1000)).has_value());
    EXPECT_EQ(drive(service, at_s(10)), (std::vector<Seen>{
                                            {at_ms(200), Kind::kRetransmit, 1, TestFrame::kSyn, 1},
                                            {at_ms(600), Kind::kRetransmit, 1, TestFrame::kSyn, 2},
                                            {at_ms(1030), Kind::kClose, 1, TestFrame::kNone, 0},
                                            {at_ms(1100), Kind::kRetransmit, 1, TestFrame::kSyn, 3},
                                            {at_ms(1600), Kind::kExhausted, 1, TestFrame::kSyn, 3},
                                        }));
    EXPECT_EQ(node.use_count(), 1);
}

TEST(CmTimerService, ZeroRetransmissionsExhaustAtTheFirstExpiry) {
    CmTimerConfig config;
    config.retrans.max_retrans = 0;
    Service service(config);
    const NodeRef node = make_node(1);
    ASSERT_TRUE(service.schedule_send(node, kInstantZero, TestFrame::kSyn, true, false));
    EXPECT_EQ(drive(service, at_s(100)),
              (std::vector<Seen>{{at_s(1), Kind::kExhausted, 1, TestFrame::kSyn, 0}}));
}

TEST(CmTimerService, CallbackMayCallBackIntoTheService) {
    Service service;
    const NodeRef a = make_node(1);
    const NodeRef b = make_node(2);
    const NodeRef c = make_node(3);
    const NodeRef d = make_node(4);
    ASSERT_TRUE(service.schedule_send(a, kInstantZero, TestFrame::kSyn, true, false));
    ASSERT_TRUE(service.schedule_send(b, at_ms(1), TestFrame::kSyn, true, false));
    ASSERT_TRUE(service.schedule_close(c, at_s(1)).has_value());
    std::vector<int> handled;
    service.on_timer(at_s(2), [&](Service::Action&& action) {
        handled.push_back(action.node->id);
        if (action.node != a) return;
        // B's entry is due in this same batch; acknowledging it now means it is skipped.
        EXPECT_TRUE(service.has_send(b));
        EXPECT_FALSE(service.ack_send(b));
        // A's own re-armed entry can be acknowledged and a new one armed in its place.
        EXPECT_FALSE(service.ack_send(action.node));
        EXPECT_TRUE(service.schedule_send(action.node, at_s(2), TestFrame::kFin, true, false));
        // C's close entry is due in this batch but not yet handled: it still counts.
        EXPECT_TRUE(service.has_close(c));
        EXPECT_EQ(service.schedule_close(c, at_s(2)).error(), CmTimerError::kCloseEntryExists);
        // Another node may be armed; it fires in a later call, at its own time.
        EXPECT_TRUE(service.schedule_close(d, at_s(2)).has_value());
    });
    EXPECT_EQ(handled, (std::vector<int>{1, 3}));
    EXPECT_EQ(b.use_count(), 1);
    EXPECT_EQ(c.use_count(), 1);
    EXPECT_EQ(service.pending(), 2u);  // A's FIN and D's close.
    EXPECT_EQ(service.next_deadline(), at_s(2) + milliseconds(100));
    const Instant d_close = at_s(2) + milliseconds(100);
    EXPECT_EQ(drive(service, at_s(3)),
              (std::vector<Seen>{{d_close, Kind::kClose, 4, TestFrame::kNone, 0},
                                 {at_s(3), Kind::kRetransmit, 1, TestFrame::kFin, 1}}));
}

TEST(CmTimerService, ActionsComeInDeadlineOrderAcrossNodes) {
    Service service;
    const NodeRef a = make_node(1);
    const NodeRef b = make_node(2);
    const NodeRef c = make_node(3);
    ASSERT_TRUE(service.schedule_send(a, at_ms(300), TestFrame::kSyn, true, false));
    ASSERT_TRUE(service.schedule_close(b, at_ms(1000)).has_value());
    ASSERT_TRUE(service.schedule_send(c, at_ms(5), TestFrame::kMpaReq, true, false));
    std::vector<int> order;
    service.on_timer(at_s(2), [&](Service::Action&& action) { order.push_back(action.node->id); });
    EXPECT_EQ(order, (std::vector<int>{3, 2, 1}));
}

TEST(CmTimerService, ManyNodesInterleaved) {
    Service service;
    constexpr int kNodes = 2000;
    std::vector<NodeRef> nodes;
    std::vector<Instant> sent_at;
    std::vector<bool> acked(kNodes, false);
    std::mt19937_64 rng(0x1ce'0001);
    for (int i = 0; i < kNodes; ++i) {
        nodes.push_back(make_node(i));
        sent_at.push_back(kInstantZero + milliseconds(static_cast<std::int64_t>(rng() % 10'000)));
    }
    // Arm in send-time order, acknowledging a third of them along the way.
    std::vector<int> order(kNodes);
    for (int i = 0; i < kNodes; ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](int x, int y) { return sent_at[x] < sent_at[y]; });
    std::vector<Seen> seen;
    for (int i : order) {
        for (const Seen& s : drive(service, sent_at[i])) seen.push_back(s);
        ASSERT_TRUE(service.schedule_send(nodes[i], sent_at[i], TestFrame::kSyn, true, false));
        if (i % 3 == 0) {
            acked[i] = true;
            EXPECT_FALSE(service.ack_send(nodes[i]));
        }
    }
    for (const Seen& s : drive(service, at_s(1000))) seen.push_back(s);
    // Every unacknowledged node saw exactly the default schedule, relative to its own send.
    std::vector<std::vector<Seen>> per_node(kNodes);
    for (const Seen& s : seen) per_node[s.node].push_back(s);
    const std::array<std::int64_t, 9> at = {1, 3, 7, 15, 27, 39, 51, 63, 75};
    for (int i = 0; i < kNodes; ++i) {
        if (acked[i]) {
            EXPECT_TRUE(per_node[i].empty()) << "node " << i;
        } else {
            ASSERT_EQ(per_node[i].size(), 9u) << "node " << i;
            for (int k = 0; k < 9; ++k) EXPECT_EQ(per_node[i][k].at, sent_at[i] + seconds(at[k]));
            EXPECT_EQ(per_node[i][8].kind, Kind::kExhausted);
        }
        EXPECT_EQ(nodes[i].use_count(), 1) << "node " << i;
    }
    EXPECT_EQ(service.pending(), 0u);
}

TEST(OnRetransExhausted, EveryStateAsTheDriver) {
    using A = ExhaustedAction;
    const std::array<std::pair<CmState, A>, kCmStateCount> table = {{
        {CmState::kUnknown, A::kSendResetAndAbort},
        {CmState::kInited, A::kSendResetAndAbort},
        {CmState::kListening, A::kSendResetAndAbort},
        {CmState::kSynRcvd, A::kDropQuietly},
        {CmState::kSynSent, A::kSendResetAndAbort},
        {CmState::kOneSideEstablished, A::kSendResetAndAbort},
        {CmState::kEstablished, A::kSendResetAndAbort},
        {CmState::kAccepting, A::kSendResetAndAbort},
        {CmState::kMpaReqSent, A::kSendResetAndAbort},
        {CmState::kMpaReqRcvd, A::kSendResetAndAbort},
        {CmState::kMpaRejRcvd, A::kSendResetAndAbort},
        {CmState::kOffloaded, A::kSendResetAndAbort},
        {CmState::kFinWait1, A::kSendReset},
        {CmState::kFinWait2, A::kSendResetAndAbort},
        {CmState::kCloseWait, A::kSendResetAndAbort},
        {CmState::kTimeWait, A::kSendResetAndAbort},
        {CmState::kLastAck, A::kSendReset},
        {CmState::kClosing, A::kDropQuietly},
        {CmState::kListenerDestroyed, A::kSendResetAndAbort},
        {CmState::kClosed, A::kSendResetAndAbort},
    }};
    for (int i = 0; i < kCmStateCount; ++i) {
        const auto [state, action] = table[i];
        ASSERT_EQ(static_cast<int>(state), i);  // The table covers every state once.
        EXPECT_EQ(on_retrans_exhausted(state), action) << to_string(state);
    }
    EXPECT_FALSE(to_string(ExhaustedAction::kSendResetAndAbort).empty());
}

}  // namespace
}  // namespace iwcm::timer
