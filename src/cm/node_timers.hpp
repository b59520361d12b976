// Every deadline of every node, on one timing wheel: the engine's timer service.
//
// Read first: docs/design.md "Timers"; src/timer/wheel.hpp (the wheel) and
// src/timer/retrans.hpp (the driver's backoff); then, in the Linux irdma driver
// (drivers/infiniband/hw/irdma/cm.c), irdma_schedule_cm_timer, irdma_cm_timer_tick,
// irdma_retrans_expired and irdma_handle_close_entry. What each timeout does is the engine's
// business: Core::Impl::on_node_timer (src/cm/timeouts.cpp) is one switch on the kind.
//
// The kinds (NodeTimer, node.hpp) and where a node keeps them. A node has three slots, each a
// deadline in wheel ticks: send_tick (kSend), phase_tick (one of kClose, kMpaRequest, kMpaReply,
// kAccept, kRtr, kFinWait2, kRefused, named by the node's phase_kind byte) and its stream's
// timer_tick (kStream, for the data-phase TCP). The driver's close entry shares the phase slot
// because it only ever ends TIME_WAIT, a phase with nothing else to wait for; so a node never has
// more than one timer of a kind.
//
// One wheel entry per node, moved only earlier. The slots are not on the wheel: the node has
// one entry (timer_entry), due at or before its earliest armed deadline. Arming a slot writes
// the deadline and moves the entry only when the new deadline is earlier than the entry;
// cancelling writes the slot and leaves the entry where it is. When the entry comes due,
// on_timer delivers the slots that are due and puts the entry back at the earliest one left
// (or takes it off). A connection setup arms and cancels its timers 13 times, and almost every
// new deadline lies after the one before (1 s retransmission, then 5 to 10 s MPA timeouts), so
// the wheel sees two of those operations instead of thirteen: the first arm, and the cancel
// once nothing is armed (settle). This is what Linux TCP does with its retransmission timer:
// icsk_timeout says when it is really due, and a timer that fires before finds nothing due
// and re-arms. The price: next_deadline() may be earlier than any armed deadline (a caller
// that sleeps until it wakes, calls on_timer, and is told nothing), never later.
//
// What the driver does, and what this service keeps of it:
//
// * The send entry. The driver arms it when a frame that must be acknowledged goes out and
//   re-sends on the schedule of RetransPolicy (1, 2, 4, 8, 12 .. s, 8 tries), then calls
//   irdma_retrans_expired. Here the entry is re-armed before the engine hears of the
//   retransmission (FiredTimer::attempt counts them, 1..max), and the last expiry reports
//   `exhausted` with the entry already gone; the engine acts on
//   cm::on_retrans_exhausted(state). The retry count is the node's send_attempt byte, as the
//   driver's retranscount rides in its send entry. A second send entry is an error value (the
//   driver silently overwrote and leaked the first). The driver's one-shot sends
//   (send_retrans = 0, used for RST) keep nothing, so the engine sends those without this
//   service.
// * The close entry fires close_delay (HZ / 10 = 100 ms) after it is armed; a second one is an
//   error value, as in the driver (-EINVAL).
// * Phase and stream timers: arming one replaces the slot's earlier deadline.
// * Lifetimes. The driver protects a node with refcount_inc before arming and
//   irdma_rem_ref_cm_node after firing, by hand. Here the service holds one reference per node
//   with a wheel entry (counted in the node's refs, marked by Node::timers_hold), so an armed
//   timer keeps its node alive by construction. An entry left with nothing armed holds the node
//   until settle() or cancel_all() takes it off (the engine settles each node after the frame
//   it handled, and on_timer after each node it fired) or until it comes due and finds nothing.
//   A wheel entry's cookie is its node's address, so no table by node index stands between an
//   expiry and its node. Taking the entry off takes a Node& whose caller must hold its own
//   reference (asserted), so that it never frees the node under its caller.
// * Firing is not a callback from deep inside the wheel: on_timer first collects every due
//   slot of every node whose entry came due, then handles them one by one in deadline order,
//   calling fn once per timer. fn may arm or cancel anything, for any node. A timer cancelled
//   or re-armed by an earlier fn of the same batch is skipped; one armed from fn is at least
//   one granularity in the future, so it fires in a later call.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "cm/node.hpp"
#include "iwcm/assert.hpp"
#include "iwcm/result.hpp"
#include "iwcm/state.hpp"
#include "iwcm/time.hpp"
#include "timer/retrans.hpp"
#include "timer/wheel.hpp"

namespace iwcm::cm {

std::string_view to_string(NodeTimer kind);

// What the engine does when a node's retransmissions run out, by the node's state.
enum class ExhaustedAction : std::uint8_t { kDropQuietly, kSendReset, kSendResetAndAbort };

// Mirrors irdma_retrans_expired: SYN_RCVD and CLOSING only drop the node's reference;
// FIN_WAIT1 and LAST_ACK send a reset; every other state sends a reset and posts
// IRDMA_CM_EVENT_ABORTED. In each case the driver then sets the node to CLOSED.
ExhaustedAction on_retrans_exhausted(CmState state);
std::string_view to_string(ExhaustedAction action);

struct NodeTimersConfig {
    timer::RetransPolicy retrans;
    Duration close_delay = std::chrono::milliseconds(100);
    Duration granularity = std::chrono::milliseconds(1);
};

enum class NodeTimerError : std::uint8_t { kSendEntryExists, kCloseEntryExists };
std::string_view to_string(NodeTimerError error);

// One timer that came due.
struct FiredTimer {
    NodeRef node;
    NodeTimer kind;
    // kSend: the retransmission to make now (1..max_retrans), or max_retrans when exhausted.
    std::uint8_t attempt = 0;
    // kSend: the retries ran out and the entry is gone.
    bool exhausted = false;
};

class NodeTimers {
public:
    explicit NodeTimers(NodeTimersConfig config = {}, Instant start = kInstantZero);
    // Forgets every armed timer and drops the references they hold (the nodes' pool must
    // still be alive).
    ~NodeTimers();
    NodeTimers(const NodeTimers&) = delete;
    NodeTimers& operator=(const NodeTimers&) = delete;

    const NodeTimersConfig& config() const { return config_; }

    // The send entry: the caller has just sent a frame that must be acknowledged at `now`.
    Expected<void, NodeTimerError> arm_send(const NodeRef& node, Instant now);
    // What was sent is acknowledged and a new frame that must be is sent at `now`: the send
    // entry starts over (attempt 0, due as arm_send's).
    void restart_send(const NodeRef& node, Instant now);
    // The acknowledgement came: the entry goes. False if none was armed (a persist timer in
    // the slot stays).
    bool ack_send(Node& node) { return has_send(node) && clear(node.send_tick); }
    bool ack_send(const NodeRef& node) { return ack_send(*node); }
    static bool has_send(const Node& node) {
        return node.send_tick != kTimerUnarmed && !node.persist_armed;
    }

    // The persist timer (kPersist), due at `at`, in the send slot: nothing is in flight, so
    // no send entry holds it (asserted). Replaces an earlier persist deadline.
    void arm_persist(const NodeRef& node, Instant at) {
        IWCM_ASSERT(!has_send(*node));
        node->persist_armed = true;
        set(*node, node->send_tick, wheel_.to_tick(at));
    }
    bool cancel_persist(Node& node) {
        if (!has_persist(node)) return false;
        node.persist_armed = false;
        return clear(node.send_tick);
    }
    static bool has_persist(const Node& node) {
        return node.send_tick != kTimerUnarmed && node.persist_armed;
    }

    // The close entry, due close_delay after `now`; it takes the phase slot.
    Expected<void, NodeTimerError> arm_close(const NodeRef& node, Instant now);

    // One of the phase timeouts (kMpaRequest .. kRefused), due at `at`; replaces whatever
    // the phase slot held but a close entry (asserted: TIME_WAIT waits for nothing else).
    // A stream's TIME_WAIT: the close entry at `at` rather than close_delay from now,
    // replacing one already armed (a retransmitted FIN restarts the wait).
    void arm_close_at(const NodeRef& node, Instant at);
    void arm_phase(const NodeRef& node, NodeTimer kind, Instant at);
    // Cancels the phase slot's timer, whichever kind (close entry included).
    bool cancel_phase(Node& node) { return clear(node.phase_tick); }
    // The kind the phase slot holds, if armed.
    static std::optional<NodeTimer> phase(const Node& node) {
        if (node.phase_tick == kTimerUnarmed) return std::nullopt;
        return node.phase_kind;
    }

    // The data-phase TCP's one timer, due at `at`; replaces an earlier deadline. The node has
    // a stream (asserted).
    void arm_stream(const NodeRef& node, Instant at);
    bool cancel_stream(Node& node) { return node.stream && clear(node.stream->timer_tick); }
    static bool has_stream(const Node& node) {
        return node.stream && node.stream->timer_tick != kTimerUnarmed;
    }

    // Cancels every timer of the node, takes its entry off and drops the reference it held.
    void cancel_all(Node& node);
    // With nothing armed, takes the node's entry off and drops the reference it held (the
    // caller holds one of its own). Cancelling leaves the entry for this, so that a cancel
    // followed by an arm, the usual step of a connection setup, costs no wheel operation.
    void settle(Node& node) {
        if (node.timer_entry.valid() && !any_armed(node)) take_off(node);
    }

    // When the node's timer of this kind is due (rounded to the granularity), if armed.
    std::optional<Instant> deadline(const Node& node, NodeTimer kind) const;

    // Handles every timer due at `now` in deadline order, calling fn(FiredTimer&&) for each;
    // returns how many. See the file comment for what fn may do. Not re-entrant.
    template <class Fn>
    std::size_t on_timer(Instant now, Fn&& fn);

    // When on_timer should next be called: at or before the earliest armed deadline (an entry
    // whose earliest deadline was cancelled comes due early and delivers nothing); nullopt
    // when no timer is armed.
    std::optional<Instant> next_deadline() const {
        if (armed_ == 0) return std::nullopt;
        return wheel_.next_deadline();
    }
    // Timers armed, all kinds.
    std::size_t pending() const { return armed_; }
    // Nodes with a wheel entry (those with a timer armed, and those whose entry waits for
    // settle() or its expiry).
    std::size_t entries() const { return wheel_.pending(); }
    // Room for `nodes` with an entry at once.
    void reserve(std::size_t nodes) { wheel_.reserve(nodes); }
    // The service's bookkeeping for this node holds: a reference iff it has a wheel entry, an
    // entry at or before every armed deadline, and nothing armed on a closed node. For
    // check_node.
    bool consistent(const Node& node) const;

private:
    // One due slot of a node whose entry came due (fire), or, for such a node with no slot due
    // and none left, only a reference: it keeps the node while the entry's reference goes.
    struct Due {
        NodeRef node;
        std::uint64_t tick;  // the slot's deadline when collected
        NodeTimer kind;
        bool fire;
    };

    // The cookie: the node's address.
    static std::uint64_t cookie(const Node& node) {
        return reinterpret_cast<std::uintptr_t>(&node);
    }
    static Node& node_of(std::uint64_t cookie) {
        return *reinterpret_cast<Node*>(static_cast<std::uintptr_t>(cookie));
    }
    static std::uint64_t stream_tick(const Node& node) {
        return node.stream ? node.stream->timer_tick : kTimerUnarmed;
    }
    static std::uint64_t earliest(const Node& node) {
        return std::min({node.send_tick, node.phase_tick, stream_tick(node)});
    }
    static bool any_armed(const Node& node) { return earliest(node) != kTimerUnarmed; }
    // Arms a slot at `tick` (replacing what it held) and moves the node's entry to it if it is
    // earlier than the entry (or puts one on the wheel).
    // Inline, with the wheel's work out of line: most arms find the entry early enough.
    void set(Node& node, std::uint64_t& slot, std::uint64_t tick) {
        IWCM_ASSERT(node.state != CmState::kClosed);
        IWCM_ASSERT(tick != kTimerUnarmed);
        if (slot == kTimerUnarmed) ++armed_;
        slot = tick;
        if (!node.timer_entry.valid() || tick < wheel_.tick_of(node.timer_entry)) [[unlikely]]
            cover(node, tick);
    }
    // Disarms a slot; the entry stays (settle()).
    bool clear(std::uint64_t& slot) {
        if (slot == kTimerUnarmed) return false;
        slot = kTimerUnarmed;
        --armed_;
        return true;
    }
    [[gnu::noinline]] void cover(Node& node, std::uint64_t tick) {
        if (!node.timer_entry.valid()) {
            put_on(node, tick);
        } else if (tick < wheel_.tick_of(node.timer_entry)) {
            node.timer_entry = wheel_.reschedule_tick(node.timer_entry, tick, cookie(node));
        }
    }
    // A new entry at `tick`, and the reference it holds.
    void put_on(Node& node, std::uint64_t tick) {
        node.timer_entry = wheel_.schedule_tick(tick, cookie(node));
        IWCM_ASSERT(!node.timers_hold);
        node.timers_hold = true;
        ++node.refs;
    }
    // The entry off the wheel (if it is still there), and its reference let go.
    void take_off(Node& node) {
        wheel_.cancel(node.timer_entry);
        node.timer_entry = {};
        let_go(node);
    }
    void let_go(Node& node) {
        IWCM_ASSERT(node.timers_hold);
        // The caller holds its own reference, so this is never the node's last.
        IWCM_ASSERT(node.refs > 1);
        node.timers_hold = false;
        --node.refs;
    }
    // The slot holding an armed timer of this kind, or null (unarmed, no stream, or the phase
    // slot holding another kind). deadline() and take() both ask it.
    static const std::uint64_t* armed_slot(const Node& node, NodeTimer kind) {
        const std::uint64_t* s = &node.phase_tick;
        switch (kind) {
            case NodeTimer::kSend:
            case NodeTimer::kPersist:
                if (node.persist_armed != (kind == NodeTimer::kPersist)) return nullptr;
                s = &node.send_tick;
                break;
            case NodeTimer::kStream:
                if (!node.stream) return nullptr;
                s = &node.stream->timer_tick;
                break;
            case NodeTimer::kClose:
            case NodeTimer::kMpaRequest:
            case NodeTimer::kMpaReply:
            case NodeTimer::kAccept:
            case NodeTimer::kRtr:
            case NodeTimer::kFinWait2:
            case NodeTimer::kRefused:
                if (node.phase_kind != kind) return nullptr;
                break;
        }
        return *s == kTimerUnarmed ? nullptr : s;
    }
    static std::uint64_t* armed_slot(Node& node, NodeTimer kind) {
        return const_cast<std::uint64_t*>(armed_slot(std::as_const(node), kind));
    }
    void collect(std::uint64_t cookie);
    std::optional<FiredTimer> take(Due& due, Instant now);

    NodeTimersConfig config_;
    Duration first_delay_;  // config_.retrans.delay(0): every send entry's first wait
    timer::TimerWheel wheel_;
    std::size_t armed_ = 0;  // slots armed, all nodes
    std::vector<Due> due_;   // the batch on_timer is handling
    bool in_on_timer_ = false;
};

template <class Fn>
std::size_t NodeTimers::on_timer(Instant now, Fn&& fn) {
    IWCM_ASSERT(!in_on_timer_);
    in_on_timer_ = true;
    due_.clear();
    // Phase one: collect. No engine code runs while the wheel is advancing.
    wheel_.advance(now, [this](std::uint64_t c) { collect(c); });
    // Entries come due in the order of their ticks, which may be earlier than their nodes'
    // deadlines: the timers themselves go in deadline order (stable: one tick's in the
    // wheel's order).
    const auto by_tick = [](const Due& x, const Due& y) { return x.tick < y.tick; };
    if (!std::is_sorted(due_.begin(), due_.end(), by_tick))
        std::stable_sort(due_.begin(), due_.end(), by_tick);
    // Phase two: act. take() looks each timer up again, since an earlier fn may have
    // cancelled or re-armed it, and takes the node's entry off if nothing is left armed.
    std::size_t delivered = 0;
    for (std::size_t i = 0; i < due_.size(); ++i) {
        std::optional<FiredTimer> fired = take(due_[i], now);
        if (!fired) continue;
        ++delivered;
        fn(std::move(*fired));
    }
    due_.clear();
    in_on_timer_ = false;
    return delivered;
}

}  // namespace iwcm::cm
