// Every deadline of every node, on one timing wheel: the engine's timer service.
//
// Read first: docs/design.md "Timers"; src/timer/wheel.hpp (the wheel) and
// src/timer/retrans.hpp (the driver's backoff); then, in the Linux irdma driver
// (drivers/infiniband/hw/irdma/cm.c), irdma_schedule_cm_timer, irdma_cm_timer_tick,
// irdma_retrans_expired and irdma_handle_close_entry. What each timeout does is the engine's
// business: Core::Impl::on_node_timer (src/cm/timeouts.cpp) is one switch on the kind.
//
// The kinds (NodeTimer, node.hpp) and where a node keeps them. A node has three slots, each a
// generation-checked wheel id: send_timer (kSend), phase_timer (one of kClose, kMpaRequest,
// kMpaReply, kAccept, kRtr, kFinWait2, named by the node's phase_kind byte) and stream_timer
// (kStream, for the data-phase TCP). The driver's close entry shares the phase slot because
// it only ever ends TIME_WAIT, a phase with nothing else to wait for; so a node never has more
// than one timer of a kind, and 24 bytes of slots keep the node at 168 bytes.
//
// What the driver does, and what this service keeps of it:
//
// * The send entry. The driver arms it when a frame that must be acknowledged goes out and
//   re-sends on the schedule of RetransPolicy (1, 2, 4, 8, 12 .. s, 8 tries), then calls
//   irdma_retrans_expired. Here the entry is re-armed before the engine hears of the
//   retransmission (FiredTimer::attempt counts them, 1..max), and the last expiry reports
//   `exhausted` with the entry already gone; the engine acts on
//   cm::on_retrans_exhausted(state). The retry count rides in the wheel entry's cookie, as the
//   driver's retranscount rides in its send entry, so the node spends no byte on it. A second
//   send entry is an error value (the driver silently overwrote and leaked the first). The
//   driver's one-shot sends (send_retrans = 0, used for RST) keep nothing, so the engine sends
//   those without this service.
// * The close entry fires close_delay (HZ / 10 = 100 ms) after it is armed; a second one is an
//   error value, as in the driver (-EINVAL).
// * Phase and stream timers: arming one replaces the slot's earlier deadline.
// * Lifetimes. The driver protects a node with refcount_inc before arming and
//   irdma_rem_ref_cm_node after firing, by hand. Here the service holds one reference per node
//   with any timer armed (counted in the node's refs, marked by Node::timers_hold) and drops it
//   when the last one is cancelled or fires, so an armed timer keeps its node alive by
//   construction. A wheel entry's cookie is its node's address (with the kind and the retry
//   count in the top bytes), so no table by node index stands between an expiry and its node.
//   Cancelling takes a Node& whose caller must hold its own reference (asserted), so that the
//   cancel never frees the node under its caller.
// * Firing is not a callback from deep inside the wheel: on_timer first collects every due
//   entry, then handles them one by one in deadline order, calling fn once per timer. fn may
//   arm or cancel anything, for any node. A timer cancelled or re-armed by an earlier fn of the
//   same batch is skipped; one armed from fn is at least one granularity in the future, so it
//   fires in a later call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
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
    // entry starts over (attempt 0, due as arm_send's), moved in place when one is armed.
    void restart_send(const NodeRef& node, Instant now);
    // The acknowledgement came: the entry goes. False if none was armed.
    bool ack_send(Node& node) { return drop(node, node.send_timer); }
    bool ack_send(const NodeRef& node) { return ack_send(*node); }
    static bool has_send(const Node& node) { return node.send_timer.valid(); }

    // The close entry, due close_delay after `now`; it takes the phase slot.
    Expected<void, NodeTimerError> arm_close(const NodeRef& node, Instant now);

    // One of the phase timeouts (kMpaRequest .. kFinWait2), due at `at`; replaces whatever
    // the phase slot held but a close entry (asserted: TIME_WAIT waits for nothing else).
    // A stream's TIME_WAIT: the close entry at `at` rather than close_delay from now,
    // replacing one already armed (a retransmitted FIN restarts the wait).
    void arm_close_at(const NodeRef& node, Instant at);
    void arm_phase(const NodeRef& node, NodeTimer kind, Instant at);
    // Cancels the phase slot's timer, whichever kind (close entry included).
    bool cancel_phase(Node& node) { return drop(node, node.phase_timer); }
    // What the phase timer waited for came, and a frame that must be acknowledged is sent at
    // `now`: the phase entry becomes the send entry (attempt 0, due as arm_send's), moved in
    // place rather than cancelled and armed again. With a send entry already armed, or none in
    // the phase slot, the phase timer is only cancelled and the send entry left as it is.
    void hand_phase_to_send(const NodeRef& node, Instant now);
    // The reverse: what the send entry waited for is acknowledged and a phase timeout (kMpaRequest
    // .. kFinWait2) starts, due at `at`: the send entry becomes it, moved in place. With the
    // phase slot already armed, or no send entry, the send entry is only cancelled and the phase
    // timer armed as arm_phase() does.
    void hand_send_to_phase(const NodeRef& node, NodeTimer kind, Instant at);
    // The kind the phase slot holds, if armed.
    static std::optional<NodeTimer> phase(const Node& node) {
        if (!node.phase_timer.valid()) return std::nullopt;
        return node.phase_kind;
    }

    // The data-phase TCP's one timer, due at `at`; replaces an earlier deadline.
    void arm_stream(const NodeRef& node, Instant at);
    bool cancel_stream(Node& node);

    // Cancels every timer of the node and drops the reference they held.
    void cancel_all(Node& node);

    // When the node's timer of this kind is due (rounded to the granularity), if armed.
    std::optional<Instant> deadline(const Node& node, NodeTimer kind) const;

    // Handles every timer due at `now` in deadline order, calling fn(FiredTimer&&) for each;
    // returns how many. See the file comment for what fn may do. Not re-entrant.
    template <class Fn>
    std::size_t on_timer(Instant now, Fn&& fn);

    std::optional<Instant> next_deadline() const { return wheel_.next_deadline(); }
    // Timers armed, all kinds.
    std::size_t pending() const { return wheel_.pending(); }
    // Room for `timers` armed at once.
    void reserve(std::size_t timers) { wheel_.reserve(timers); }
    // The service's bookkeeping for this node holds: a reference iff a timer is armed, every
    // slot names an armed wheel entry, and a closed node has none. For check_node.
    bool consistent(const Node& node) const;

private:
    struct Due {
        NodeRef node;
        timer::TimerId id;
        NodeTimer kind;
        std::uint8_t attempt;
    };

    // The node's address in the low 48 bits (a user-space address on x86-64 and AArch64;
    // asserted when armed), the kind and the retry count above it.
    static constexpr std::uint64_t kNodeBits = (std::uint64_t{1} << 48) - 1;
    static std::uint64_t cookie(const Node& node, NodeTimer kind, std::uint8_t attempt) {
        return reinterpret_cast<std::uintptr_t>(&node) |
               std::uint64_t{static_cast<std::uint8_t>(kind)} << 48 | std::uint64_t{attempt} << 56;
    }
    static Node& node_of(std::uint64_t cookie) {
        return *reinterpret_cast<Node*>(static_cast<std::uintptr_t>(cookie & kNodeBits));
    }
    // kClose and kMpaRequest .. kFinWait2 share phase_timer. Inline: every arm and fire asks.
    static bool in_phase_slot(NodeTimer kind) {
        switch (kind) {
            case NodeTimer::kSend:
            case NodeTimer::kStream: return false;
            case NodeTimer::kClose:
            case NodeTimer::kMpaRequest:
            case NodeTimer::kMpaReply:
            case NodeTimer::kAccept:
            case NodeTimer::kRtr:
            case NodeTimer::kFinWait2: return true;
        }
        return false;
    }
    static timer::TimerId& slot(Node& node, NodeTimer kind) {
        if (in_phase_slot(kind)) return node.phase_timer;
        return kind == NodeTimer::kSend ? node.send_timer : node.stream_timer;
    }
    static bool any_armed(const Node& node) {
        return node.send_timer.valid() || node.phase_timer.valid() || node.stream_timer.valid();
    }
    // Arms `kind` at `at` in its (empty) slot and holds the node's reference.
    void arm(const NodeRef& node, NodeTimer kind, Instant at, std::uint8_t attempt);
    // Arms `kind` at `at` (attempt 0) in its slot, moving the slot's armed entry in place if
    // it has one: the node's reference stays held throughout.
    void rearm(const NodeRef& node, NodeTimer kind, Instant at);
    // Cancels the timer in `id` (if armed) and lets the reference go once none is left.
    // Inline, with release_if_idle: every acknowledgement and phase change cancels one.
    bool drop(Node& node, timer::TimerId& id) {
        if (!id.valid()) return false;
        // The wheel entry may have fired already if on_timer is collecting it; then the
        // cancel fails harmlessly and take() skips the timer, whose slot no longer names it.
        wheel_.cancel(id);
        id = {};
        release_if_idle(node);
        return true;
    }
    void release_if_idle(Node& node) {
        if (any_armed(node)) return;
        IWCM_ASSERT(node.timers_hold);
        // The caller holds its own reference, so this is never the node's last.
        IWCM_ASSERT(node.refs > 1);
        node.timers_hold = false;
        --node.refs;
    }
    void collect(std::uint64_t cookie);
    std::optional<FiredTimer> take(Due& due, Instant now);

    NodeTimersConfig config_;
    Duration first_delay_;  // config_.retrans.delay(0): every send entry's first wait
    timer::TimerWheel wheel_;
    std::vector<Due> due_;  // the batch on_timer is handling
    bool in_on_timer_ = false;
};

template <class Fn>
std::size_t NodeTimers::on_timer(Instant now, Fn&& fn) {
    IWCM_ASSERT(!in_on_timer_);
    in_on_timer_ = true;
    due_.clear();
    // Phase one: collect. No engine code runs while the wheel is advancing.
    wheel_.advance(now, [this](std::uint64_t c) { collect(c); });
    // Phase two: act. take() looks each timer up again, since an earlier fn may have
    // cancelled or re-armed it.
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
