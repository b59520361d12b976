// The connection manager's send and close timers: irdma_schedule_cm_timer on a timing wheel.
//
// Read first: docs/design.md "Timers"; then, in the Linux irdma driver
// (drivers/infiniband/hw/irdma/cm.c), irdma_schedule_cm_timer, irdma_cm_timer_tick,
// irdma_retrans_expired and irdma_handle_close_entry; then wheel.hpp for the wheel itself.
//
// What the driver does, and what this service keeps of it:
//
// * A node has at most one send entry and one close entry. A send entry holds the frame to
//   retransmit; a close entry fires HZ / 10 (100 ms) after it is scheduled. The driver
//   refuses a second close entry (-EINVAL) but silently overwrites, and leaks, an existing
//   send entry; here a second armed send entry is an error value instead.
// * The retransmission schedule. The driver arms a send entry at jiffies + IRDMA_RETRY_TIMEOUT
//   (HZ) with retranscount = IRDMA_DEFAULT_RETRANS (8). When the tick finds it due with
//   retranscount != 0 it resends, decrements retranscount and re-arms at
//   jiffies + min(HZ << (8 - retranscount), IRDMA_MAX_TIMEOUT = 12 HZ). When it finds it due
//   with retranscount == 0 it frees the entry and calls irdma_retrans_expired. The waits are
//   thus 1, 2, 4, 8, 12, 12, 12, 12 s before retransmissions 1..8 and a last 12 s before
//   the verdict: retransmissions at t = 1, 3, 7, 15, 27, 39, 51, 63 s after the first send
//   and exhaustion at t = 75 s. RetransPolicy::delay(k) is the wait after retransmission k,
//   min(initial * 2^k, cap); delay(0) is the wait after the original send. (Later kernels
//   raised IRDMA_DEFAULT_RETRANS to 32 and then 20; 8 is the design's default.)
// * Without send_retrans the driver sends the frame, installs the entry as the node's
//   send_entry, frees it again at once (irdma_cleanup_retrans_entry) and, with
//   close_when_complete, drops the node's reference: the frame goes out exactly once, and
//   any earlier send entry of the node is gone afterwards. schedule_send does the same: it
//   keeps nothing, cancels an earlier send entry (which the driver leaked), and returns
//   close_when_complete so that the caller releases the node. The driver uses this for RST.
// * Lifetimes. The driver protects a node with refcount_inc before arming and
//   irdma_rem_ref_cm_node after firing, by hand, at every call site. Here an entry holds a
//   NodeRef (an owning, pointer-like handle), so an armed entry keeps its node alive by
//   construction, and removing the entry drops the reference. The node in turn holds only
//   generation-checked ids of its entries (CmTimerSlots), so a stale id finds nothing.
// * What stays with the engine: the driver's tick also frees, without resending, a due send
//   entry whose node is OFFLOADED or CLOSED, skips the resend (but still counts it down)
//   when ack_rcvd is set, and moves the node to CLOSED after irdma_retrans_expired. This
//   service knows no states, so the engine cancels entries when it offloads or closes a
//   node and acts on kExhausted with on_retrans_exhausted(state).
// * Firing is not a callback from deep inside the timer: on_timer first collects every due
//   entry from the wheel, then handles them one by one in deadline order, calling fn once
//   per action. fn may schedule or cancel anything, for any node. An entry cancelled by an
//   earlier action's fn in the same batch is skipped; an entry scheduled from fn is at least
//   one granularity in the future, so it fires in a later call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "iwcm/assert.hpp"
#include "iwcm/result.hpp"
#include "iwcm/state.hpp"
#include "iwcm/time.hpp"
#include "timer/wheel.hpp"

namespace iwcm::timer {

// How often and how patiently an unacknowledged frame is re-sent; the driver's values are the
// defaults (IRDMA_DEFAULT_RETRANS, IRDMA_RETRY_TIMEOUT, IRDMA_MAX_TIMEOUT).
struct RetransPolicy {
    std::uint8_t max_retrans = 8;
    Duration initial = std::chrono::seconds(1);
    Duration cap = std::chrono::seconds(12);

    // The wait after transmission number `retry` (0 = the original send) before the next
    // one, or before giving up once retry == max_retrans: min(initial * 2^retry, cap).
    Duration delay(int retry) const;
    // The time from the original send to the exhaustion verdict (75 s with the defaults).
    Duration total() const;
};

struct CmTimerConfig {
    RetransPolicy retrans;
    Duration close_delay = std::chrono::milliseconds(100);
    Duration granularity = std::chrono::milliseconds(1);
};

// What the engine must do when a node's retransmissions run out, by the node's state.
enum class ExhaustedAction : std::uint8_t { kDropQuietly, kSendReset, kSendResetAndAbort };

// Mirrors irdma_retrans_expired: SYN_RCVD and CLOSING only drop the node's reference;
// FIN_WAIT1 and LAST_ACK send a reset; every other state sends a reset and posts
// IRDMA_CM_EVENT_ABORTED. In each case the driver then sets the node to CLOSED.
ExhaustedAction on_retrans_exhausted(CmState state);
std::string_view to_string(ExhaustedAction action);

// The per-node bookkeeping the engine embeds in its node as `cm_timers`.
struct CmTimerSlots {
    TimerId send;
    TimerId close;
};
static_assert(sizeof(CmTimerSlots) == 16);

enum class CmTimerError : std::uint8_t { kSendEntryExists, kCloseEntryExists };
std::string_view to_string(CmTimerError error);

// NodeRef: a copyable, default-constructible, pointer-like owning handle (->, *, explicit
// bool) whose pointee has a member `CmTimerSlots cm_timers` (an intrusive ref-counted
// pointer in the engine, std::shared_ptr in the tests). Frame: a default-constructible,
// copyable value that tells the engine which frame to rebuild and send again.
template <class NodeRef, class Frame>
class CmTimerService {
public:
    enum class Kind : std::uint8_t {
        kRetransmit,    // Re-send `frame`; `attempt` is the retransmission number, 1..max.
        kExhausted,     // Retries ran out: act on on_retrans_exhausted(state). Entry removed.
        kSendComplete,  // The name of ack_send() returning true; on_timer never emits it.
        kClose,         // The delayed close is due: disconnect, or remove a TIME_WAIT node.
    };
    struct Action {
        Kind kind;
        NodeRef node;
        Frame frame;
        int attempt;
    };

    explicit CmTimerService(CmTimerConfig config = {}, Instant start = kInstantZero);

    const CmTimerConfig& config() const { return config_; }

    // Type SEND: the caller has just transmitted `frame` at `now`.
    //
    // With send_retrans, arms the node's single send entry for retransmission per the policy
    // (kSendEntryExists if one is armed) and returns false: nothing is to be released now;
    // close_when_complete is remembered and returned by ack_send().
    // Without send_retrans, keeps nothing, cancels any armed send entry of the node (as the
    // driver's overwrite-then-free does) and returns close_when_complete: if true the caller
    // releases the node at once.
    Expected<bool, CmTimerError> schedule_send(const NodeRef& node, Instant now, Frame frame,
                                               bool send_retrans, bool close_when_complete);

    // The acknowledgement arrived: removes the send entry and its reference. Returns true if
    // the entry asked for close_when_complete (kSendComplete: the caller releases the
    // node); false if it did not or if there was no entry.
    bool ack_send(const NodeRef& node);
    bool has_send(const NodeRef& node) const { return find(node->cm_timers.send) != nullptr; }

    // Type CLOSE: fires config.close_delay after `now`; at most one per node.
    Expected<void, CmTimerError> schedule_close(const NodeRef& node, Instant now);
    bool cancel_close(const NodeRef& node);
    bool has_close(const NodeRef& node) const { return find(node->cm_timers.close) != nullptr; }

    // Drops both entries of the node and the references they hold.
    void cancel_all(const NodeRef& node);

    // Handles every entry due at `now` in deadline order, calling fn(Action&&) for each;
    // returns the number of actions delivered. A send entry with retries left yields
    // kRetransmit (with a copy of the frame) and is re-armed at now + delay(attempt); one
    // with none left yields kExhausted and is removed; a close entry yields kClose and is
    // removed. See the file comment for what fn may do. Not re-entrant.
    template <class Fn>
    std::size_t on_timer(Instant now, Fn&& fn);

    std::optional<Instant> next_deadline() const { return wheel_.next_deadline(); }
    // Entries armed (send + close).
    std::size_t pending() const { return pending_; }
    // Sizes the entry slab and the wheel for `entries` armed at once.
    void reserve(std::size_t entries) {
        entries_.reserve(entries);
        wheel_.reserve(entries);
    }

private:
    static constexpr std::uint32_t kNil = UINT32_MAX;
    enum class EntryType : std::uint8_t { kFree, kSend, kClose };

    struct Entry {
        NodeRef node{};
        Frame frame{};
        TimerId timer{};
        std::uint32_t generation = 1;
        std::uint32_t next_free = kNil;
        std::uint8_t attempt = 0;  // Retransmissions made so far.
        bool close_when_complete = false;
        EntryType type = EntryType::kFree;
    };

    Entry* find(TimerId id);
    const Entry* find(TimerId id) const;
    TimerId arm(const NodeRef& node, EntryType type, Instant deadline);
    void release(std::uint32_t index);
    bool drop(TimerId& slot);
    Action take_action(std::uint32_t index, Instant now);

    CmTimerConfig config_;
    TimerWheel wheel_;
    std::vector<Entry> entries_;
    std::uint32_t free_head_ = kNil;
    std::size_t pending_ = 0;
    // Entries the wheel fired during the current on_timer, as (index, generation).
    std::vector<TimerId> due_;
    bool in_on_timer_ = false;
};

template <class NodeRef, class Frame>
CmTimerService<NodeRef, Frame>::CmTimerService(CmTimerConfig config, Instant start)
    : config_(config), wheel_(config.granularity, start) {
    IWCM_ASSERT(config.retrans.initial.count() > 0);
    IWCM_ASSERT(config.retrans.cap >= config.retrans.initial);
    IWCM_ASSERT(config.close_delay.count() > 0);
}

template <class NodeRef, class Frame>
auto CmTimerService<NodeRef, Frame>::find(TimerId id) -> Entry* {
    // The invalid index, UINT32_MAX, is never below the size (arm() keeps it smaller).
    if (id.index >= entries_.size()) return nullptr;
    Entry& e = entries_[id.index];
    if (e.generation != id.generation || e.type == EntryType::kFree) return nullptr;
    return &e;
}

template <class NodeRef, class Frame>
auto CmTimerService<NodeRef, Frame>::find(TimerId id) const -> const Entry* {
    return const_cast<CmTimerService*>(this)->find(id);
}

template <class NodeRef, class Frame>
TimerId CmTimerService<NodeRef, Frame>::arm(const NodeRef& node, EntryType type,
                                            Instant deadline) {
    IWCM_ASSERT(static_cast<bool>(node));
    std::uint32_t index = free_head_;
    if (index != kNil) {
        free_head_ = entries_[index].next_free;
    } else {
        IWCM_ASSERT(entries_.size() < kNil - 1);
        index = static_cast<std::uint32_t>(entries_.size());
        entries_.emplace_back();
    }
    Entry& e = entries_[index];
    IWCM_ASSERT(e.type == EntryType::kFree);
    e.node = node;
    e.type = type;
    e.attempt = 0;
    e.close_when_complete = false;
    e.next_free = kNil;
    e.timer = wheel_.schedule(deadline, index);
    ++pending_;
    return TimerId{index, e.generation};
}

template <class NodeRef, class Frame>
void CmTimerService<NodeRef, Frame>::release(std::uint32_t index) {
    Entry& e = entries_[index];
    IWCM_ASSERT(e.type != EntryType::kFree);
    IWCM_ASSERT(pending_ > 0);
    // Dropping the NodeRef here is what releases the node's reference.
    e.node = NodeRef{};
    e.frame = Frame{};
    e.timer = TimerId{};
    e.type = EntryType::kFree;
    e.generation = e.generation + 1 == 0 ? 1 : e.generation + 1;
    e.next_free = free_head_;
    free_head_ = index;
    --pending_;
}

template <class NodeRef, class Frame>
bool CmTimerService<NodeRef, Frame>::drop(TimerId& slot) {
    const TimerId id = slot;
    slot = TimerId{};
    Entry* e = find(id);
    if (e == nullptr) return false;
    // The wheel entry may already have fired if on_timer is collecting it; then this fails
    // harmlessly and on_timer skips the freed entry.
    wheel_.cancel(e->timer);
    release(id.index);
    return true;
}

template <class NodeRef, class Frame>
Expected<bool, CmTimerError> CmTimerService<NodeRef, Frame>::schedule_send(
    const NodeRef& node, Instant now, Frame frame, bool send_retrans, bool close_when_complete) {
    IWCM_ASSERT(static_cast<bool>(node));
    CmTimerSlots& slots = node->cm_timers;
    if (!send_retrans) {
        drop(slots.send);
        return close_when_complete;
    }
    if (find(slots.send) != nullptr) return fail(CmTimerError::kSendEntryExists);
    const TimerId id = arm(node, EntryType::kSend, now + config_.retrans.delay(0));
    Entry& e = entries_[id.index];
    e.frame = std::move(frame);
    e.close_when_complete = close_when_complete;
    slots.send = id;
    return false;
}

template <class NodeRef, class Frame>
bool CmTimerService<NodeRef, Frame>::ack_send(const NodeRef& node) {
    IWCM_ASSERT(static_cast<bool>(node));
    Entry* e = find(node->cm_timers.send);
    if (e == nullptr) return false;
    IWCM_ASSERT(e->type == EntryType::kSend && std::addressof(*e->node) == std::addressof(*node));
    const bool close_when_complete = e->close_when_complete;
    // drop() without its second look-up. The slot is cleared before release() lets go of
    // the entry's reference; the caller's own reference keeps the node alive meanwhile.
    const std::uint32_t index = node->cm_timers.send.index;
    node->cm_timers.send = TimerId{};
    wheel_.cancel(e->timer);
    release(index);
    return close_when_complete;
}

template <class NodeRef, class Frame>
Expected<void, CmTimerError> CmTimerService<NodeRef, Frame>::schedule_close(const NodeRef& node,
                                                                            Instant now) {
    IWCM_ASSERT(static_cast<bool>(node));
    CmTimerSlots& slots = node->cm_timers;
    if (find(slots.close) != nullptr) return fail(CmTimerError::kCloseEntryExists);
    slots.close = arm(node, EntryType::kClose, now + config_.close_delay);
    return {};
}

template <class NodeRef, class Frame>
bool CmTimerService<NodeRef, Frame>::cancel_close(const NodeRef& node) {
    IWCM_ASSERT(static_cast<bool>(node));
    return drop(node->cm_timers.close);
}

template <class NodeRef, class Frame>
void CmTimerService<NodeRef, Frame>::cancel_all(const NodeRef& node) {
    IWCM_ASSERT(static_cast<bool>(node));
    drop(node->cm_timers.send);
    drop(node->cm_timers.close);
}

template <class NodeRef, class Frame>
auto CmTimerService<NodeRef, Frame>::take_action(std::uint32_t index, Instant now) -> Action {
    Entry& e = entries_[index];
    CmTimerSlots& slots = e.node->cm_timers;
    switch (e.type) {
        case EntryType::kSend:
            IWCM_ASSERT(slots.send == (TimerId{index, e.generation}));
            if (e.attempt < config_.retrans.max_retrans) {
                // The driver's tick: resend, count down, re-arm from the time of this tick.
                ++e.attempt;
                e.timer = wheel_.schedule(now + config_.retrans.delay(e.attempt), index);
                return Action{Kind::kRetransmit, e.node, e.frame, e.attempt};
            } else {
                slots.send = TimerId{};
                Action action{Kind::kExhausted, std::move(e.node), std::move(e.frame), e.attempt};
                release(index);
                return action;
            }
        case EntryType::kClose: {
            IWCM_ASSERT(slots.close == (TimerId{index, e.generation}));
            slots.close = TimerId{};
            Action action{Kind::kClose, std::move(e.node), Frame{}, 0};
            release(index);
            return action;
        }
        case EntryType::kFree:
            break;
    }
    IWCM_ASSERT(false && "a free entry was due");
    return Action{Kind::kClose, NodeRef{}, Frame{}, 0};
}

template <class NodeRef, class Frame>
template <class Fn>
std::size_t CmTimerService<NodeRef, Frame>::on_timer(Instant now, Fn&& fn) {
    IWCM_ASSERT(!in_on_timer_);
    in_on_timer_ = true;
    due_.clear();
    // Phase one: collect. No user code runs while the wheel is advancing.
    wheel_.advance(now, [this](std::uint64_t cookie) {
        const auto index = static_cast<std::uint32_t>(cookie);
        IWCM_ASSERT(index < entries_.size() && entries_[index].type != EntryType::kFree);
        entries_[index].timer = TimerId{};
        due_.push_back(TimerId{index, entries_[index].generation});
    });
    // Phase two: act. Each entry is looked up again, because an earlier fn may have removed
    // it; entries_ may also have grown, so no reference is held across a call of fn.
    std::size_t delivered = 0;
    for (std::size_t i = 0; i < due_.size(); ++i) {
        if (find(due_[i]) == nullptr) continue;
        Action action = take_action(due_[i].index, now);
        ++delivered;
        fn(std::move(action));
    }
    due_.clear();
    in_on_timer_ = false;
    return delivered;
}

}  // namespace iwcm::timer
