// Tests of the engine's timer service (src/cm/node_timers.hpp): the driver's send and close
// entries, the phase and stream timers on the same wheel, the references they hold, and the
// exhaustion policy by state. Read node_timers.hpp's opening comment first, then
// src/timer/retrans.hpp for the schedule these tests expect.
//
// Nodes come from a real NodePool, so node->refs shows whether a timer still holds a
// reference. Time is virtual and driven as the simulator drives it: jump to next_deadline().
#include "cm/node_timers.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <random>
#include <vector>

namespace iwcm::cm {
namespace {

using std::chrono::milliseconds;
using std::chrono::nanoseconds;
using std::chrono::seconds;

struct Seen {
    Instant at;
    NodeTimer kind;
    bool exhausted;
    std::uint32_t node;
    int attempt;
    friend bool operator==(const Seen&, const Seen&) = default;
};

std::ostream& operator<<(std::ostream& os, const Seen& s) {
    return os << "{t=" << s.at.time_since_epoch().count() << "ns " << to_string(s.kind)
              << (s.exhausted ? " exhausted" : "") << " node=" << s.node << " attempt=" << s.attempt
              << "}";
}

Instant at_s(std::int64_t s) {
    return kInstantZero + seconds(s);
}
Instant at_ms(std::int64_t ms) {
    return kInstantZero + milliseconds(ms);
}

void ignore_destroyed(void*, Node&) {}

// A pool and a service; the pool is declared first so that it outlives the service.
struct Bench {
    explicit Bench(NodeTimersConfig config = {}) : timers(config) {}
    TxQueue tx;  // the streams' frames (none are queued here)
    StreamHome home{tx};
    tcp::StreamConfig stream_config;  // the streams' settings, kept by reference
    NodePool pool{&ignore_destroyed, nullptr};
    NodeTimers timers;

    NodeRef node() { return pool.create(); }
    // A node with a data-phase stream, for kStream.
    NodeRef stream_node() {
        NodeRef n = pool.create();
        give_stream(*n);
        return n;
    }
    void give_stream(Node& n) {
        n.stream = std::make_unique<NodeStream>(stream_config, tcp::StreamInit{}, kInstantZero,
                                                n.tcb, home);
    }

    // Handles what is due at `now`, recording every timer; its reference goes when the
    // callback returns.
    std::vector<Seen> run(Instant now) {
        std::vector<Seen> out;
        timers.on_timer(now, [&](FiredTimer&& t) {
            out.push_back(Seen{now, t.kind, t.exhausted, t.node->index, t.attempt});
        });
        return out;
    }

    // Drives the service the way the simulator does: jump to each deadline up to `until`.
    std::vector<Seen> drive(Instant until, int max_steps = 100000) {
        std::vector<Seen> out;
        for (int step = 0; step < max_steps; ++step) {
            const auto next = timers.next_deadline();
            if (!next || *next > until) break;
            // Nothing may fire a nanosecond early.
            EXPECT_TRUE(run(*next - nanoseconds(1)).empty());
            for (const Seen& s : run(*next)) out.push_back(s);
        }
        return out;
    }
};

constexpr NodeTimer kSend = NodeTimer::kSend;
constexpr NodeTimer kClose = NodeTimer::kClose;

TEST(NodeTimersSend, DefaultScheduleMatchesTheDriver) {
    // Derived in retrans.hpp from irdma_cm_timer_tick: retransmissions at 1, 3, 7, 15, 27,
    // 39, 51 and 63 s after the first send, the exhaustion verdict at 75 s.
    Bench b;
    const NodeRef node = b.node();
    const Instant t0 = at_s(10) + milliseconds(250);
    ASSERT_TRUE(b.timers.arm_send(node, t0).has_value());
    EXPECT_EQ(node->refs, 2u);
    EXPECT_TRUE(NodeTimers::has_send(*node));
    EXPECT_EQ(b.timers.pending(), 1u);
    const auto seen = b.drive(t0 + seconds(1000));
    std::vector<Seen> expected;
    const std::array<std::int64_t, 8> retransmit_at = {1, 3, 7, 15, 27, 39, 51, 63};
    for (int i = 0; i < 8; ++i) {
        expected.push_back({t0 + seconds(retransmit_at[i]), kSend, false, node->index, i + 1});
    }
    expected.push_back({t0 + seconds(75), kSend, true, node->index, 8});
    EXPECT_EQ(seen, expected);
    EXPECT_FALSE(NodeTimers::has_send(*node));
    EXPECT_EQ(b.timers.pending(), 0u);
    EXPECT_EQ(b.timers.next_deadline(), std::nullopt);
    EXPECT_EQ(node->refs, 1u);
}

// The persist timer shares the send slot (a probe is due only with nothing in flight): it
// is no send entry to ack_send or arm_send's check, fires once as kPersist (not a
// retransmission, never exhausted), and the slot then takes a send entry again.
TEST(NodeTimersSend, PersistTimerTakesTheSendSlotAndFiresOnce) {
    Bench b;
    const NodeRef node = b.node();
    b.timers.arm_persist(node, at_s(1));
    EXPECT_TRUE(NodeTimers::has_persist(*node));
    EXPECT_FALSE(NodeTimers::has_send(*node));
    EXPECT_FALSE(b.timers.ack_send(node));
    EXPECT_EQ(b.timers.deadline(*node, NodeTimer::kPersist), at_s(1));
    EXPECT_EQ(b.timers.deadline(*node, kSend), std::nullopt);
    b.timers.arm_persist(node, at_s(2));  // later: replaces the deadline
    EXPECT_EQ(b.timers.pending(), 1u);
    EXPECT_EQ(b.drive(at_s(100)),
              (std::vector<Seen>{{at_s(2), NodeTimer::kPersist, false, node->index, 0}}));
    EXPECT_FALSE(NodeTimers::has_persist(*node));
    EXPECT_EQ(b.timers.pending(), 0u);
    EXPECT_EQ(node->refs, 1u);
    ASSERT_TRUE(b.timers.arm_send(node, at_s(100)).has_value());
    b.timers.ack_send(node);
    b.timers.arm_persist(node, at_s(101));
    EXPECT_TRUE(b.timers.cancel_persist(*node));
    EXPECT_FALSE(b.timers.cancel_persist(*node));
    EXPECT_EQ(b.timers.pending(), 0u);
    b.timers.settle(*node);
    EXPECT_EQ(node->refs, 1u);
}

TEST(NodeTimersSend, RetransmitKeepsTheEntry) {
    Bench b;
    const NodeRef node = b.node();
    ASSERT_TRUE(b.timers.arm_send(node, kInstantZero).has_value());
    int calls = 0;
    b.timers.on_timer(at_s(1), [&](FiredTimer&& t) {
        ++calls;
        EXPECT_EQ(t.kind, kSend);
        EXPECT_FALSE(t.exhausted);
        EXPECT_EQ(t.node, node);
        EXPECT_EQ(t.attempt, 1);
        EXPECT_EQ(node->refs, 3u);  // Caller, service, fired timer.
    });
    EXPECT_EQ(calls, 1);
    EXPECT_EQ(node->refs, 2u);
    EXPECT_TRUE(NodeTimers::has_send(*node));
    EXPECT_EQ(b.timers.next_deadline(), at_s(3));
    EXPECT_EQ(b.timers.deadline(*node, kSend), at_s(3));
}

TEST(NodeTimersSend, AckCancelsAndDropsTheReference) {
    Bench b;
    const NodeRef node = b.node();
    ASSERT_TRUE(b.timers.arm_send(node, kInstantZero).has_value());
    EXPECT_EQ(b.run(at_s(1)).size(), 1u);
    EXPECT_EQ(node->refs, 2u);
    EXPECT_TRUE(b.timers.ack_send(node));
    EXPECT_FALSE(NodeTimers::has_send(*node));
    EXPECT_EQ(b.timers.pending(), 0u);
    EXPECT_EQ(b.timers.next_deadline(), std::nullopt);
    // The entry waits for settle(), which lets the reference go.
    EXPECT_EQ(node->refs, 2u);
    EXPECT_EQ(b.timers.entries(), 1u);
    b.timers.settle(*node);
    EXPECT_EQ(node->refs, 1u);
    EXPECT_EQ(b.timers.entries(), 0u);
    EXPECT_TRUE(b.timers.consistent(*node));
    EXPECT_TRUE(b.drive(at_s(1000)).empty());
    EXPECT_FALSE(b.timers.ack_send(node));  // No entry any more.
}

TEST(NodeTimersSend, SecondSendEntryIsAnError) {
    Bench b;
    const NodeRef node = b.node();
    ASSERT_TRUE(b.timers.arm_send(node, kInstantZero).has_value());
    const auto second = b.timers.arm_send(node, at_ms(5));
    ASSERT_FALSE(second.has_value());
    EXPECT_EQ(second.error(), NodeTimerError::kSendEntryExists);
    EXPECT_FALSE(to_string(second.error()).empty());
    // The first entry is untouched.
    EXPECT_EQ(b.run(at_s(1)), (std::vector<Seen>{{at_s(1), kSend, false, node->index, 1}}));
    EXPECT_EQ(node->refs, 2u);
    EXPECT_EQ(b.timers.pending(), 1u);
}

TEST(NodeTimersSend, NewEntryAfterExhaustion) {
    Bench b;
    const NodeRef node = b.node();
    ASSERT_TRUE(b.timers.arm_send(node, kInstantZero).has_value());
    EXPECT_TRUE(b.drive(at_s(75)).back().exhausted);
    ASSERT_TRUE(b.timers.arm_send(node, at_s(80)).has_value());
    EXPECT_EQ(b.timers.next_deadline(), at_s(81));
}

TEST(NodeTimersClose, FiresAfterOneHundredMilliseconds) {
    Bench b;
    const NodeRef node = b.node();
    ASSERT_TRUE(b.timers.arm_close(node, at_s(5)).has_value());
    EXPECT_EQ(NodeTimers::phase(*node), kClose);
    EXPECT_EQ(node->refs, 2u);
    EXPECT_EQ(b.timers.next_deadline(), at_s(5) + milliseconds(100));
    EXPECT_TRUE(b.run(at_s(5) + milliseconds(99)).empty());
    const Instant due = at_s(5) + milliseconds(100);
    EXPECT_EQ(b.run(due), (std::vector<Seen>{{due, kClose, false, node->index, 0}}));
    EXPECT_EQ(NodeTimers::phase(*node), std::nullopt);
    EXPECT_EQ(node->refs, 1u);
    EXPECT_EQ(b.timers.pending(), 0u);
}

TEST(NodeTimersClose, SecondCloseEntryIsAnError) {
    Bench b;
    const NodeRef node = b.node();
    ASSERT_TRUE(b.timers.arm_close(node, kInstantZero).has_value());
    const auto second = b.timers.arm_close(node, at_ms(50));
    ASSERT_FALSE(second.has_value());
    EXPECT_EQ(second.error(), NodeTimerError::kCloseEntryExists);
    EXPECT_NE(to_string(NodeTimerError::kCloseEntryExists),
              to_string(NodeTimerError::kSendEntryExists));
    // The first one still fires at its own time.
    EXPECT_EQ(b.drive(at_s(1)), (std::vector<Seen>{{at_ms(100), kClose, false, node->index, 0}}));
}

TEST(NodeTimersClose, CancelClose) {
    Bench b;
    const NodeRef node = b.node();
    ASSERT_TRUE(b.timers.arm_close(node, kInstantZero).has_value());
    EXPECT_TRUE(b.timers.cancel_phase(*node));
    EXPECT_FALSE(b.timers.cancel_phase(*node));
    b.timers.settle(*node);
    EXPECT_EQ(node->refs, 1u);
    EXPECT_TRUE(b.drive(at_s(1)).empty());
    // A new close entry is allowed once the old one is gone.
    EXPECT_TRUE(b.timers.arm_close(node, at_s(2)).has_value());
}

TEST(NodeTimersPhase, ArmingAnotherPhaseReplacesTheFirst) {
    Bench b;
    const NodeRef node = b.node();
    b.timers.arm_phase(node, NodeTimer::kMpaRequest, at_s(5));
    EXPECT_EQ(b.timers.deadline(*node, NodeTimer::kMpaRequest), at_s(5));
    // The request came: the node now waits for the application's answer instead.
    b.timers.arm_phase(node, NodeTimer::kAccept, at_s(3));
    EXPECT_EQ(NodeTimers::phase(*node), NodeTimer::kAccept);
    EXPECT_EQ(b.timers.deadline(*node, NodeTimer::kMpaRequest), std::nullopt);
    EXPECT_EQ(b.timers.pending(), 1u);
    EXPECT_EQ(node->refs, 2u);
    EXPECT_EQ(b.drive(at_s(100)),
              (std::vector<Seen>{{at_s(3), NodeTimer::kAccept, false, node->index, 0}}));
    EXPECT_EQ(node->refs, 1u);
}

TEST(NodeTimersEntry, ALaterDeadlineLeavesTheEntryAndAnEarlierOneMovesIt) {
    Bench b;
    const NodeRef node = b.node();
    ASSERT_TRUE(b.timers.arm_send(node, at_s(0)));  // due at 1 s
    b.timers.arm_phase(node, NodeTimer::kMpaReply, at_s(10));
    EXPECT_EQ(b.timers.pending(), 2u);
    EXPECT_EQ(b.timers.entries(), 1u);  // one entry for the node, at its earliest deadline
    EXPECT_EQ(b.timers.next_deadline(), at_s(1));
    EXPECT_EQ(node->refs, 2u);
    // The stream's deadline at 500 ms is earlier: the entry moves to it.
    b.give_stream(*node);
    b.timers.arm_stream(node, at_ms(500));
    EXPECT_EQ(b.timers.next_deadline(), at_ms(500));
    EXPECT_EQ(b.timers.entries(), 1u);
    EXPECT_TRUE(b.timers.consistent(*node));
    EXPECT_EQ(b.drive(at_s(2)),
              (std::vector<Seen>{{at_ms(500), NodeTimer::kStream, false, node->index, 0},
                                 {at_s(1), kSend, false, node->index, 1}}));
    EXPECT_EQ(b.timers.deadline(*node, kSend), at_s(3));
    EXPECT_EQ(b.timers.deadline(*node, NodeTimer::kMpaReply), at_s(10));
}

TEST(NodeTimersEntry, CancellingTheEarliestLeavesAnEarlyEntryThatDeliversNothing) {
    Bench b;
    const NodeRef node = b.node();
    ASSERT_TRUE(b.timers.arm_send(node, at_s(0)));  // due at 1 s
    b.timers.arm_phase(node, NodeTimer::kMpaReply, at_s(10));
    EXPECT_TRUE(b.timers.ack_send(node));
    b.timers.settle(*node);  // the reply timer is armed: the entry stays
    EXPECT_EQ(b.timers.entries(), 1u);
    // next_deadline() is the entry's, early: at 1 s nothing is delivered and the entry moves
    // to the reply timer's deadline.
    EXPECT_EQ(b.timers.next_deadline(), at_s(1));
    EXPECT_TRUE(b.run(at_s(1)).empty());
    EXPECT_EQ(b.timers.next_deadline(), at_s(10));
    EXPECT_EQ(node->refs, 2u);
    EXPECT_TRUE(b.timers.consistent(*node));
    EXPECT_EQ(b.drive(at_s(100)),
              (std::vector<Seen>{{at_s(10), NodeTimer::kMpaReply, false, node->index, 0}}));
    EXPECT_EQ(b.timers.entries(), 0u);
    EXPECT_EQ(node->refs, 1u);
}

TEST(NodeTimersEntry, AnEntryLeftWithNothingArmedLetsTheNodeGoWhenDue) {
    Bench b;
    const NodeRef node = b.node();
    ASSERT_TRUE(b.timers.arm_send(node, at_s(0)));
    EXPECT_TRUE(b.timers.ack_send(node));
    // Not settled: the entry holds the node until it comes due, delivers nothing and goes.
    EXPECT_EQ(node->refs, 2u);
    EXPECT_EQ(b.timers.next_deadline(), std::nullopt);  // nothing armed
    EXPECT_TRUE(b.run(at_s(1)).empty());
    EXPECT_EQ(node->refs, 1u);
    EXPECT_EQ(b.timers.entries(), 0u);
    EXPECT_TRUE(b.timers.consistent(*node));
}

TEST(NodeTimersEntry, CancelThenArmInOneStepCostsNoWheelOperation) {
    // The responder's step at the MPA request: the SYN-ACK's send entry is acknowledged and
    // the accept timer armed. The entry stays where the send entry had it.
    Bench b;
    const NodeRef node = b.node();
    ASSERT_TRUE(b.timers.arm_send(node, at_s(0)));
    EXPECT_TRUE(b.timers.ack_send(node));
    b.timers.arm_phase(node, NodeTimer::kAccept, at_s(5));
    b.timers.settle(*node);
    EXPECT_EQ(b.timers.entries(), 1u);
    EXPECT_EQ(b.timers.next_deadline(), at_s(1));
    EXPECT_EQ(b.timers.deadline(*node, NodeTimer::kAccept), at_s(5));
    EXPECT_EQ(b.drive(at_s(100)),
              (std::vector<Seen>{{at_s(5), NodeTimer::kAccept, false, node->index, 0}}));
    EXPECT_EQ(node->refs, 1u);
}

TEST(NodeTimersEntry, ATimerCancelledAndReArmedInTheSameBatchIsSkipped) {
    Bench b;
    const NodeRef first = b.node();
    const NodeRef node = b.node();
    ASSERT_TRUE(b.timers.arm_close(first, at_ms(900)));  // due at 1 s, as node's send entry
    ASSERT_TRUE(b.timers.arm_send(node, at_s(0)));
    std::vector<Seen> seen;
    b.timers.on_timer(at_s(1), [&](FiredTimer&& t) {
        seen.push_back(Seen{at_s(1), t.kind, t.exhausted, t.node->index, t.attempt});
        // The first handler acknowledges node's send entry while it waits in the batch, and
        // arms another.
        if (t.node != first) return;
        EXPECT_TRUE(b.timers.ack_send(node));
        b.timers.arm_phase(node, NodeTimer::kMpaRequest, at_s(4));
    });
    // The send entry that had come due is skipped (no retransmission), the phase timer stands.
    EXPECT_EQ(seen, (std::vector<Seen>{{at_s(1), kClose, false, first->index, 0}}));
    EXPECT_FALSE(NodeTimers::has_send(*node));
    EXPECT_EQ(b.timers.deadline(*node, NodeTimer::kMpaRequest), at_s(4));
    EXPECT_TRUE(b.timers.consistent(*node));
    EXPECT_EQ(b.drive(at_s(100)),
              (std::vector<Seen>{{at_s(4), NodeTimer::kMpaRequest, false, node->index, 0}}));
    EXPECT_EQ(node->refs, 1u);
    EXPECT_EQ(first->refs, 1u);
}

TEST(NodeTimersPhase, EveryKindFiresAsItself) {
    // One node per kind, all on the one wheel, each due a second after the previous one.
    Bench b;
    const std::array<NodeTimer, 8> kinds = {kSend,
                                            kClose,
                                            NodeTimer::kMpaRequest,
                                            NodeTimer::kMpaReply,
                                            NodeTimer::kAccept,
                                            NodeTimer::kRtr,
                                            NodeTimer::kFinWait2,
                                            NodeTimer::kStream};
    std::vector<NodeRef> nodes;
    std::vector<Seen> expected;
    for (std::size_t i = 0; i < kinds.size(); ++i) {
        nodes.push_back(kinds[i] == NodeTimer::kStream ? b.stream_node() : b.node());
        const Instant start = at_s(static_cast<std::int64_t>(i));
        const NodeRef& n = nodes.back();
        if (kinds[i] == kSend) {
            ASSERT_TRUE(b.timers.arm_send(n, start).has_value());
        } else if (kinds[i] == kClose) {
            ASSERT_TRUE(b.timers.arm_close(n, start).has_value());
        } else if (kinds[i] == NodeTimer::kStream) {
            b.timers.arm_stream(n, start + seconds(1));
        } else {
            b.timers.arm_phase(n, kinds[i], start + seconds(1));
        }
        const Instant due = kinds[i] == kClose ? start + milliseconds(100) : start + seconds(1);
        expected.push_back({due, kinds[i], false, n->index, kinds[i] == kSend ? 1 : 0});
    }
    EXPECT_EQ(b.timers.pending(), kinds.size());
    auto seen = b.drive(at_s(8));
    std::erase_if(seen, [](const Seen& s) { return s.kind == kSend && s.attempt > 1; });
    std::sort(expected.begin(), expected.end(),
              [](const Seen& x, const Seen& y) { return x.at < y.at; });
    EXPECT_EQ(seen, expected);
}

TEST(NodeTimersStream, IndependentOfTheOtherSlots) {
    Bench b;
    const NodeRef node = b.stream_node();
    ASSERT_TRUE(b.timers.arm_send(node, kInstantZero).has_value());
    b.timers.arm_phase(node, NodeTimer::kFinWait2, at_s(30));
    b.timers.arm_stream(node, at_ms(200));
    b.timers.arm_stream(node, at_ms(400));  // Re-arming moves the one stream deadline.
    EXPECT_EQ(b.timers.pending(), 3u);
    EXPECT_EQ(node->refs, 2u);  // One reference for all of the node's timers.
    EXPECT_EQ(b.run(at_ms(400)),
              (std::vector<Seen>{{at_ms(400), NodeTimer::kStream, false, node->index, 0}}));
    b.timers.arm_stream(node, at_ms(600));
    EXPECT_TRUE(b.timers.cancel_stream(*node));
    EXPECT_FALSE(b.timers.cancel_stream(*node));
    EXPECT_TRUE(NodeTimers::has_send(*node));
    EXPECT_EQ(NodeTimers::phase(*node), NodeTimer::kFinWait2);
    EXPECT_EQ(b.timers.pending(), 2u);
}

TEST(NodeTimersService, CancelAllDropsEveryTimer) {
    Bench b;
    const NodeRef node = b.stream_node();
    const NodeRef other = b.node();
    ASSERT_TRUE(b.timers.arm_send(node, kInstantZero).has_value());
    ASSERT_TRUE(b.timers.arm_close(node, kInstantZero).has_value());
    b.timers.arm_stream(node, at_s(1));
    ASSERT_TRUE(b.timers.arm_close(other, kInstantZero).has_value());
    EXPECT_EQ(node->refs, 2u);
    EXPECT_EQ(b.timers.pending(), 4u);
    EXPECT_TRUE(b.timers.consistent(*node));
    b.timers.cancel_all(*node);
    EXPECT_EQ(node->refs, 1u);
    EXPECT_EQ(b.timers.pending(), 1u);
    EXPECT_FALSE(NodeTimers::has_send(*node));
    EXPECT_EQ(NodeTimers::phase(*node), std::nullopt);
    EXPECT_TRUE(b.timers.consistent(*node));
    b.timers.cancel_all(*node);  // Nothing left: harmless.
    EXPECT_EQ(b.drive(at_s(100)),
              (std::vector<Seen>{{at_ms(100), kClose, false, other->index, 0}}));
}

TEST(NodeTimersService, CustomPolicyAndCloseDelay) {
    NodeTimersConfig config;
    config.retrans = timer::RetransPolicy{3, milliseconds(200), milliseconds(500)};
    config.close_delay = milliseconds(30);
    config.granularity = milliseconds(10);
    Bench b(config);
    EXPECT_EQ(b.timers.config().retrans.max_retrans, 3);
    const NodeRef node = b.node();
    const std::uint32_t i = node->index;
    ASSERT_TRUE(b.timers.arm_send(node, kInstantZero).has_value());
    ASSERT_TRUE(b.timers.arm_close(node, at_ms(1000)).has_value());
    EXPECT_EQ(b.drive(at_s(10)), (std::vector<Seen>{
                                     {at_ms(200), kSend, false, i, 1},
                                     {at_ms(600), kSend, false, i, 2},
                                     {at_ms(1030), kClose, false, i, 0},
                                     {at_ms(1100), kSend, false, i, 3},
                                     {at_ms(1600), kSend, true, i, 3},
                                 }));
    EXPECT_EQ(node->refs, 1u);
}

TEST(NodeTimersService, ZeroRetransmissionsExhaustAtTheFirstExpiry) {
    NodeTimersConfig config;
    config.retrans.max_retrans = 0;
    Bench b(config);
    const NodeRef node = b.node();
    ASSERT_TRUE(b.timers.arm_send(node, kInstantZero).has_value());
    EXPECT_EQ(b.drive(at_s(100)), (std::vector<Seen>{{at_s(1), kSend, true, node->index, 0}}));
}

TEST(NodeTimersService, CallbackMayCallBackIntoTheService) {
    Bench b;
    const NodeRef a = b.node();
    const NodeRef bn = b.node();
    const NodeRef c = b.node();
    const NodeRef d = b.node();
    ASSERT_TRUE(b.timers.arm_send(a, kInstantZero).has_value());
    ASSERT_TRUE(b.timers.arm_send(bn, at_ms(1)).has_value());
    ASSERT_TRUE(b.timers.arm_close(c, at_s(1)).has_value());
    std::vector<std::uint32_t> handled;
    b.timers.on_timer(at_s(2), [&](FiredTimer&& t) {
        handled.push_back(t.node->index);
        if (t.node != a) return;
        // B's entry is due in this same batch; acknowledging it now means it is skipped.
        EXPECT_TRUE(NodeTimers::has_send(*bn));
        EXPECT_TRUE(b.timers.ack_send(bn));
        // A's own re-armed entry can be acknowledged and a new one armed in its place.
        EXPECT_TRUE(b.timers.ack_send(t.node));
        EXPECT_TRUE(b.timers.arm_send(t.node, at_s(2)).has_value());
        // C's close entry is due in this batch but not yet handled: it still counts.
        EXPECT_EQ(NodeTimers::phase(*c), kClose);
        EXPECT_EQ(b.timers.arm_close(c, at_s(2)).error(), NodeTimerError::kCloseEntryExists);
        // Another node may be armed; it fires in a later call, at its own time.
        EXPECT_TRUE(b.timers.arm_close(d, at_s(2)).has_value());
    });
    EXPECT_EQ(handled, (std::vector<std::uint32_t>{a->index, c->index}));
    EXPECT_EQ(bn->refs, 1u);
    EXPECT_EQ(c->refs, 1u);
    EXPECT_EQ(b.timers.pending(), 2u);  // A's send entry and D's close.
    const Instant d_close = at_s(2) + milliseconds(100);
    EXPECT_EQ(b.timers.next_deadline(), d_close);
    EXPECT_EQ(b.drive(at_s(3)), (std::vector<Seen>{{d_close, kClose, false, d->index, 0},
                                                   {at_s(3), kSend, false, a->index, 1}}));
}

TEST(NodeTimersService, TimersComeInDeadlineOrderAcrossNodesAndKinds) {
    Bench b;
    const NodeRef a = b.node();
    const NodeRef bn = b.node();
    const NodeRef c = b.node();
    ASSERT_TRUE(b.timers.arm_send(a, at_ms(300)).has_value());
    ASSERT_TRUE(b.timers.arm_close(bn, at_ms(1000)).has_value());
    b.timers.arm_phase(c, NodeTimer::kMpaReply, at_ms(5));
    std::vector<std::uint32_t> order;
    b.timers.on_timer(at_s(2), [&](FiredTimer&& t) { order.push_back(t.node->index); });
    EXPECT_EQ(order, (std::vector<std::uint32_t>{c->index, bn->index, a->index}));
}

TEST(NodeTimersService, ManyNodesInterleaved) {
    Bench b;
    constexpr int kNodes = 2000;
    std::vector<NodeRef> nodes;
    std::vector<Instant> sent_at;
    std::vector<bool> acked(kNodes, false);
    std::mt19937_64 rng(0x1ce'0001);
    for (int i = 0; i < kNodes; ++i) {
        nodes.push_back(b.node());
        sent_at.push_back(kInstantZero + milliseconds(static_cast<std::int64_t>(rng() % 10'000)));
    }
    // Arm in send-time order, acknowledging a third of them along the way.
    std::vector<int> order(kNodes);
    for (int i = 0; i < kNodes; ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](int x, int y) { return sent_at[x] < sent_at[y]; });
    std::vector<Seen> seen;
    for (int i : order) {
        for (const Seen& s : b.drive(sent_at[i])) seen.push_back(s);
        ASSERT_TRUE(b.timers.arm_send(nodes[i], sent_at[i]).has_value());
        if (i % 3 == 0) {
            acked[i] = true;
            EXPECT_TRUE(b.timers.ack_send(nodes[i]));
        }
    }
    for (const Seen& s : b.drive(at_s(1000))) seen.push_back(s);
    // Every unacknowledged node saw exactly the default schedule, relative to its own send.
    std::vector<std::vector<Seen>> per_node(kNodes);
    for (const Seen& s : seen) per_node[s.node].push_back(s);
    const std::array<std::int64_t, 9> at = {1, 3, 7, 15, 27, 39, 51, 63, 75};
    for (int i = 0; i < kNodes; ++i) {
        const auto& mine = per_node[nodes[i]->index];
        if (acked[i]) {
            EXPECT_TRUE(mine.empty()) << "node " << i;
        } else {
            ASSERT_EQ(mine.size(), 9u) << "node " << i;
            for (int k = 0; k < 9; ++k) EXPECT_EQ(mine[k].at, sent_at[i] + seconds(at[k]));
            EXPECT_TRUE(mine[8].exhausted);
        }
        EXPECT_EQ(nodes[i]->refs, 1u) << "node " << i;
    }
    EXPECT_EQ(b.timers.pending(), 0u);
}

TEST(NodeTimersService, DestroyedWithTimersArmedLetsTheNodesGo) {
    TxQueue tx;
    StreamHome home{tx};
    const tcp::StreamConfig stream_config;
    NodePool pool{&ignore_destroyed, nullptr};
    {
        NodeTimers timers;
        NodeRef node = pool.create();
        node->stream = std::make_unique<NodeStream>(stream_config, tcp::StreamInit{}, kInstantZero,
                                                    node->tcb, home);
        ASSERT_TRUE(timers.arm_send(node, kInstantZero).has_value());
        timers.arm_stream(node, at_s(1));
        EXPECT_EQ(pool.live(), 1u);
    }
    EXPECT_EQ(pool.live(), 0u);
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
        // The driver's ESTABLISHED before the request: its default branch.
        {CmState::kMpaReqWait, A::kSendResetAndAbort},
    }};
    for (int i = 0; i < kCmStateCount; ++i) {
        const auto [state, action] = table[i];
        ASSERT_EQ(static_cast<int>(state), i);  // The table covers every state once.
        EXPECT_EQ(on_retrans_exhausted(state), action) << to_string(state);
    }
    EXPECT_FALSE(to_string(ExhaustedAction::kSendResetAndAbort).empty());
}

}  // namespace
}  // namespace iwcm::cm
