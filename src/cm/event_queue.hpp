// The core's event queue: the events the application has not polled yet, oldest first, each
// with the private data it carries in one arena beside them.
//
// Read first: include/iwcm/core.hpp (Core::poll_event, Event::private_data).
//
// Slots and arena start over whenever the queue runs dry (a pop that finds nothing), so a
// queue that the application keeps polling uses its first slots and the arena's first bytes
// again and again. A slot is handed out as its last event left it, and the caller sets every
// field: that spares zeroing it (a `rep stos` on every event) and building an event on the
// stack to copy in (its narrower stores read back in 16-byte loads, which stall).
//
// Lifetimes: a popped slot stays as it is until the next push or pop; the private data of a
// popped event stays where it is in the arena until the next push (which may grow and move
// the arena) or the pop that finds the queue dry. The core hands that view out until the
// application's next call, which is the first time either can happen.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "cm/node.hpp"
#include "iwcm/assert.hpp"
#include "iwcm/core.hpp"
#include "wire/mpa.hpp"

namespace iwcm::cm {

struct QueuedEvent {
    Event event;
    NodeRef node;                 // keeps the node (and its handle) alive until polled
    std::uint32_t pdata_off = 0;  // the private data, in the queue's arena
    std::uint32_t pdata_len = 0;
};

class EventQueue {
public:
    std::size_t size() const { return tail_ - head_; }
    bool empty() const { return head_ == tail_; }

    // The next slot, with `pdata` copied into the arena and the slot's pdata fields set; the
    // caller sets `event` and `node`, which hold what the slot's last event left.
    QueuedEvent& push(std::span<const std::byte> pdata) {
        // The arena stays far below 4 GiB: max_events gates new connections, each event
        // carries at most kMpaMaxPrivateData bytes, and a dry queue starts over.
        IWCM_ASSERT(tail_ <= slots_.size() && pdata.size() <= wire::kMpaMaxPrivateData);
        if (tail_ == slots_.size()) slots_.emplace_back();
        QueuedEvent& q = slots_[tail_++];
        q.pdata_off = static_cast<std::uint32_t>(arena_.size());
        q.pdata_len = static_cast<std::uint32_t>(pdata.size());
        arena_.insert(arena_.end(), pdata.begin(), pdata.end());
        return q;
    }

    // The oldest event, now out of the queue (its node reference for the caller to take), or
    // nullptr when there is none: the slots and the arena then start over.
    QueuedEvent* pop() {
        if (head_ == tail_) {
            arena_.clear();
            head_ = tail_ = 0;
            return nullptr;
        }
        QueuedEvent& q = slots_[head_++];
        IWCM_ASSERT(q.pdata_off + std::size_t{q.pdata_len} <= arena_.size());
        return &q;
    }

    // The private data of a slot pushed or popped since the queue last ran dry.
    std::span<const std::byte> pdata_of(const QueuedEvent& q) const {
        return std::span<const std::byte>(arena_).subspan(q.pdata_off, q.pdata_len);
    }

    // Every event and its node reference dropped, the memory freed.
    void clear() {
        slots_.clear();
        arena_.clear();
        arena_.shrink_to_fit();
        head_ = tail_ = 0;
    }

    // Invariants (run by Core::Impl::check_node where invariants are checked): the queued slots lie
    // in order in the slots, their private data in order in the arena, the last one ending where
    // the arena ends.
    void check() const {
        IWCM_ASSERT(head_ <= tail_ && tail_ <= slots_.size());
        std::size_t at = head_ == tail_ ? 0 : slots_[head_].pdata_off;
        for (std::size_t i = head_; i < tail_; ++i) {
            IWCM_ASSERT(slots_[i].pdata_off == at);
            at += slots_[i].pdata_len;
        }
        IWCM_ASSERT(head_ == tail_ || at == arena_.size());
    }

private:
    std::vector<QueuedEvent> slots_;  // [head_, tail_) queued
    std::size_t head_ = 0;
    std::size_t tail_ = 0;
    std::vector<std::byte> arena_;
};

}  // namespace iwcm::cm
