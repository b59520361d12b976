// A bounded single-producer single-consumer ring of Ethernet frames, the one
// thing two shards share (src/io/threads/shard_net.hpp).
//
// Read first: include/iwcm/shard.hpp (why frames cross threads at all: a
// queue may deliver a frame to a thread that does not own its 4-tuple).
//
// Each frame is copied into a fixed-size slot. The two indices are the only
// shared words, each on its own cache line, and they are published per batch,
// not per frame: the producer push()es any number of frames and makes them
// visible with one release store in publish(); the consumer reads them with
// front() / pop() and hands the slots back with one release store in
// release(). Each side keeps a private copy of the other's index and reloads
// it (one acquire load) only when the ring looks full or empty.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "iwcm/assert.hpp"

namespace iwcm::io {

class FrameRing {
public:
    // `slots` is rounded up to a power of two; frames longer than
    // `slot_bytes` are refused by push().
    FrameRing(std::size_t slots, std::size_t slot_bytes)
        : mask_(round_up(slots) - 1),
          slot_bytes_(slot_bytes),
          bytes_(std::make_unique_for_overwrite<std::byte[]>((mask_ + 1) * slot_bytes)),
          lens_(mask_ + 1) {
        IWCM_ASSERT(slots >= 1 && slot_bytes >= 1);
    }
    FrameRing(const FrameRing&) = delete;
    FrameRing& operator=(const FrameRing&) = delete;

    std::size_t capacity() const { return mask_ + 1; }
    std::size_t slot_bytes() const { return slot_bytes_; }

    // ---- producer side ----
    // Copies the frame into the next slot; false when the ring is full (or
    // the frame is larger than a slot). Not visible before publish().
    bool push(std::span<const std::byte> frame) {
        IWCM_ASSERT(frame.size() <= UINT32_MAX);
        if (frame.size() > slot_bytes_) return false;
        if (prod_.tail - prod_.head_seen > mask_) {
            prod_.head_seen = head_.value.load(std::memory_order_acquire);
            if (prod_.tail - prod_.head_seen > mask_) return false;
        }
        const std::size_t i = prod_.tail & mask_;
        if (!frame.empty()) std::memcpy(bytes_.get() + i * slot_bytes_, frame.data(), frame.size());
        lens_[i] = static_cast<std::uint32_t>(frame.size());
        ++prod_.tail;
        return true;
    }
    // Makes every frame pushed so far visible to the consumer.
    void publish() {
        if (prod_.tail != prod_.published) {
            tail_.value.store(prod_.tail, std::memory_order_release);
            prod_.published = prod_.tail;
        }
    }

    // ---- consumer side ----
    // The oldest published frame, valid until pop(); std::nullopt when none.
    std::optional<std::span<const std::byte>> front() {
        if (cons_.head == cons_.tail_seen) {
            cons_.tail_seen = tail_.value.load(std::memory_order_acquire);
            if (cons_.head == cons_.tail_seen) return std::nullopt;
        }
        const std::size_t i = cons_.head & mask_;
        return std::span<const std::byte>(bytes_.get() + i * slot_bytes_, lens_[i]);
    }
    void pop() {
        IWCM_ASSERT(cons_.head != cons_.tail_seen);
        ++cons_.head;
    }
    // Hands the popped slots back to the producer.
    void release() {
        if (cons_.head != cons_.released) {
            head_.value.store(cons_.head, std::memory_order_release);
            cons_.released = cons_.head;
        }
    }

private:
    static std::size_t round_up(std::size_t n) {
        std::size_t p = 1;
        while (p < n) p <<= 1;
        return p;
    }

    static constexpr std::size_t kLine = 64;
    struct alignas(kLine) Shared {
        std::atomic<std::size_t> value{0};
    };
    // Each side's private words, on a line of their own.
    struct alignas(kLine) Producer {
        std::size_t tail = 0;
        std::size_t published = 0;
        std::size_t head_seen = 0;
    };
    struct alignas(kLine) Consumer {
        std::size_t head = 0;
        std::size_t released = 0;
        std::size_t tail_seen = 0;
    };

    const std::size_t mask_;
    const std::size_t slot_bytes_;
    // Left uninitialised: pages a ring never uses are never touched.
    std::unique_ptr<std::byte[]> bytes_;
    std::vector<std::uint32_t> lens_;
    Shared head_;
    Shared tail_;
    Producer prod_;
    Consumer cons_;
};

}  // namespace iwcm::io
