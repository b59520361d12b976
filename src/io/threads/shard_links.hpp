// The links between shards: one frame ring per ordered pair of shards, and
// each sender's backlog for a ring that is full.
//
// Read first: src/io/threads/frame_ring.hpp (one ring), src/io/threads/shard_net.hpp and
// src/io/tap/tap_shards.hpp (who uses these: a frame that arrived on a queue
// whose shard does not own its 4-tuple goes to the owner through them).
//
// Shard s's thread calls send(s, ...), flush(s), publish(s, ...) and
// receive(s, ...); nothing else. A sender's frames for one shard stay in
// order: once one waits in the backlog, the next ones queue behind it. The
// backlog is bounded; beyond the bound a frame is dropped (as a full NIC
// queue drops it) and counted.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <vector>

#include "io/threads/frame_ring.hpp"
#include "iwcm/assert.hpp"

namespace iwcm::io {

class ShardLinks {
public:
    ShardLinks(std::uint32_t shards, std::size_t ring_slots, std::size_t slot_bytes,
               std::size_t backlog_limit)
        : shards_(shards), backlog_limit_(backlog_limit) {
        IWCM_ASSERT(shards >= 1);
        for (std::uint32_t s = 0; s < shards; ++s) {
            senders_.push_back(std::make_unique<Sender>());
            senders_.back()->dirty.assign(shards, false);
            senders_.back()->backlog.resize(shards);
        }
        for (std::uint32_t from = 0; from < shards; ++from)
            for (std::uint32_t to = 0; to < shards; ++to)
                rings_.push_back(from == to ? nullptr
                                            : std::make_unique<FrameRing>(ring_slots, slot_bytes));
    }

    // Queues a copy of the frame for shard `to`; false when it was dropped.
    bool send(std::uint32_t from, std::uint32_t to, std::span<const std::byte> frame) {
        Sender& me = *senders_[from];
        auto& waiting = me.backlog[to];
        if (waiting.empty() && ring(from, to).push(frame)) {
            me.dirty[to] = true;
            return true;
        }
        if (frame.size() > ring(from, to).slot_bytes() || me.backlog_frames >= backlog_limit_) {
            ++me.dropped;
            return false;
        }
        waiting.emplace_back(frame.begin(), frame.end());
        ++me.backlog_frames;
        ++me.backlogged;
        return true;
    }

    // Moves what waits in the sender's backlogs into rings with room.
    void flush(std::uint32_t from) {
        Sender& me = *senders_[from];
        if (me.backlog_frames == 0) return;
        for (std::uint32_t to = 0; to < shards_; ++to) {
            auto& waiting = me.backlog[to];
            while (!waiting.empty() && ring(from, to).push(waiting.front())) {
                waiting.pop_front();
                --me.backlog_frames;
                me.dirty[to] = true;
            }
        }
    }

    // Makes the frames sent since the last call visible; published(to) is
    // called for every shard that has new frames (to wake it, say).
    template <class Fn>
    void publish(std::uint32_t from, Fn&& published) {
        Sender& me = *senders_[from];
        for (std::uint32_t to = 0; to < shards_; ++to) {
            if (!me.dirty[to]) continue;
            ring(from, to).publish();
            me.dirty[to] = false;
            published(to);
        }
    }

    // Hands every published frame for shard `to` to fn(frame), sender by
    // sender; returns how many.
    template <class Fn>
    std::size_t receive(std::uint32_t to, Fn&& fn) {
        std::size_t n = 0;
        for (std::uint32_t from = 0; from < shards_; ++from) {
            if (from == to) continue;
            FrameRing& in = ring(from, to);
            while (auto f = in.front()) {
                fn(*f);
                in.pop();
                ++n;
            }
            in.release();
        }
        return n;
    }

    // Counters of a sender (its thread's).
    std::uint64_t dropped(std::uint32_t from) const { return senders_[from]->dropped; }
    std::uint64_t backlogged(std::uint32_t from) const { return senders_[from]->backlogged; }

private:
    FrameRing& ring(std::uint32_t from, std::uint32_t to) {
        IWCM_ASSERT(from != to && from < shards_ && to < shards_);
        return *rings_[from * shards_ + to];
    }

    // One sender's private state, on cache lines of its own.
    struct alignas(64) Sender {
        std::vector<bool> dirty;  // rings written since the last publish
        std::vector<std::deque<std::vector<std::byte>>> backlog;  // by destination
        std::size_t backlog_frames = 0;
        std::uint64_t dropped = 0;
        std::uint64_t backlogged = 0;
    };

    std::uint32_t shards_;
    std::size_t backlog_limit_;
    std::vector<std::unique_ptr<Sender>> senders_;
    std::vector<std::unique_ptr<FrameRing>> rings_;  // [from * shards + to]
};

}  // namespace iwcm::io
