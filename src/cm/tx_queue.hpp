// The core's transmit queue: the frames queued for the wire and not yet taken by the
// driver, the frames to ourselves (loopback), and the connections whose ACK waits for the
// next poll.
//
// Read first: include/iwcm/core.hpp (Core::poll_transmit, poll_transmit_parts: a taken
// frame's view is valid until the next call into the core).
//
// Frames lie one after the other in one arena; `TxFrame` says where. The arena and the
// frame list start over when the driver has taken every frame (start_over), so a driver
// that keeps polling uses the arena's first bytes again and again.
//
// A stream's segment may leave its payload out of its frame: the frame holds the headers
// and room for the payload, and the payload stays in the stream's memory (its send buffer,
// or bytes the application lent by reference) until the frame is taken. A driver that
// takes frames in parts reads it there; one that takes them whole gets it copied in then.
// While a stream's memory is read so, it is lent: the stream counts the frames in its
// `Lent` and, before any call that may move or free that memory, has them filled
// (settle). The queue never outlives a lent frame's stream unknowingly: a stream settles
// when it ends, and a queue that goes first forgets its loans (forget_loans).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <vector>

#include "iwcm/assert.hpp"
#include "iwcm/core.hpp"
#include "wire/bytes.hpp"
#include "wire/pieces.hpp"
#include "wire/tcp.hpp"

namespace iwcm::cm {

// Bytes appended and cleared in bulk, never zero-filled first (the frames written into it
// overwrite every byte; a payload left out stays unwritten until it is filled, and then
// its frame is read).
class ByteArena {
public:
    std::span<std::byte> append(std::size_t n) {
        if (size_ + n > cap_) grow(size_ + n);
        std::span<std::byte> out(data_.get() + size_, n);
        size_ += n;
        return out;
    }
    void clear() { size_ = 0; }
    std::size_t size() const { return size_; }
    const std::byte* data() const { return data_.get(); }
    std::byte* data() { return data_.get(); }

private:
    // Out of line and cold: append() is inlined where every frame is sent.
    [[gnu::noinline, gnu::cold]] void grow(std::size_t need) {
        std::size_t cap = std::max({need, cap_ * 2, std::size_t{16 * 1024}});
        auto fresh = std::make_unique_for_overwrite<std::byte[]>(cap);
        if (size_ > 0) std::memcpy(fresh.get(), data_.get(), size_);
        data_ = std::move(fresh);
        cap_ = cap;
    }
    std::unique_ptr<std::byte[]> data_;
    std::size_t size_ = 0;
    std::size_t cap_ = 0;
};

// A frame queued for the wire: its place in the arena and its flow hash
// (Core::poll_transmit_hashed).
struct TxFrame {
    // Set in `len` while the frame's payload is left out (TxPayload, the next one queued).
    static constexpr std::uint32_t kLeftOut = 1U << 31;
    std::uint32_t off = 0;
    std::uint32_t len = 0;  // with kLeftOut
    std::uint64_t flow = 0;
    std::uint32_t length() const { return len & ~kLeftOut; }
};

// Below this many bytes a payload in more than one piece is copied into its frame even
// when the frame is taken in parts (Core::poll_transmit_parts): a NIC driver's tx
// copybreak. One MSS-sized FPDU is below it, a segment of several above.
constexpr std::uint32_t kGatherMin = 4096;

// No entry of the queue's left-out payloads.
inline constexpr std::uint32_t kNoPayload = UINT32_MAX;

// What one stream has lent to queued frames. The stream owns it; only the queue changes it.
struct Lent {
    // Queued frames whose payload still lies in the stream's memory.
    std::uint32_t frames = 0;
    // The newest of them, an index of the queue's payloads (kNoPayload when none); each
    // names the one before (TxPayload::earlier). Taken ones drop out of the chain when a
    // settle walks it.
    std::uint32_t last = kNoPayload;
    // Bytes copied from the stream's memory into frames (StreamInfo::copied_to_frames).
    std::uint64_t copied = 0;
};

// A queued frame whose payload is not in it yet.
struct TxPayload {
    std::uint32_t frame = 0;  // index in the queue's frames
    std::uint32_t at = 0;     // the payload's offset in the frame (its headers' length)
    std::uint32_t first = 0;  // its pieces: the queue's pieces [first, first + count)
    std::uint32_t count = 0;
    std::uint32_t len = 0;  // bytes in all
    bool left_out = true;   // false once copied in (or handed to the driver)
    // The stream's MSS when len is longer (a segment of segmentation offload), else 0:
    // TransmitParts::segment_size.
    std::uint16_t segment_size = 0;
    wire::SeqNumber seq;  // of its first byte
    // The lender's payload queued before this one (Lent::last's chain), or kNoPayload.
    std::uint32_t earlier = kNoPayload;
    Lent* lender = nullptr;
};

class TxQueue {
public:
    TxQueue() = default;
    TxQueue(const TxQueue&) = delete;
    TxQueue& operator=(const TxQueue&) = delete;
    ~TxQueue() { forget_loans(); }

    // ---- queueing ----
    // Room for a frame of `len` bytes in the arena, the last frame queued from now on.
    wire::MutBytes room(std::size_t len, std::uint64_t flow) {
        IWCM_ASSERT(len > 0 && len < TxFrame::kLeftOut);
        const std::size_t off = arena_.size();
        frames_.push_back({static_cast<std::uint32_t>(off), static_cast<std::uint32_t>(len), flow});
        return arena_.append(len);
    }
    // Room for a frame to ourselves, handled after the call in progress (take_loopback).
    wire::MutBytes loop_room(std::size_t len) { return loop_.emplace_back(len); }
    std::span<const std::byte> last_frame() const { return bytes(frames_.back()); }
    std::span<const std::byte> last_loop_frame() const { return loop_.back(); }
    // The last frame queued leaves its payload out: `payload` (`len` bytes) from `at` on
    // stays where it lies, in `lender`'s memory, until the frame is taken or settled.
    void leave_out(Lent& lender, std::uint32_t at, std::span<const wire::Bytes> payload,
                   std::uint32_t len, std::uint16_t segment_size, wire::SeqNumber seq);

    // ---- taking ----
    bool all_taken() const { return head_ == frames_.size(); }
    // Every frame was taken: their views have ended (the caller's next call), so the arena
    // and the list start over.
    void start_over() {
        IWCM_ASSERT(all_taken());
        frames_.clear();
        arena_.clear();
        head_ = 0;
        if (payload_head_ != 0) {
            IWCM_ASSERT(payload_head_ == payloads_.size());
            payloads_.clear();
            pieces_.clear();
            payload_head_ = 0;
        }
    }
    // The next frame, not yet taken.
    const TxFrame& take() {
        IWCM_ASSERT(!all_taken());
        return frames_[head_++];
    }
    std::span<const std::byte> bytes(const TxFrame& t) const {
        return {arena_.data() + t.off, t.length()};
    }
    // The payload entry of `t`, the frame just taken, if its payload is still left out,
    // else null. A frame costs one bit test when none was left out.
    TxPayload* taken_payload(const TxFrame& t) {
        if ((t.len & TxFrame::kLeftOut) == 0) return nullptr;
        IWCM_ASSERT(payload_head_ < payloads_.size());
        TxPayload& p = payloads_[payload_head_++];
        IWCM_ASSERT(&frames_[p.frame] == &t);
        return p.left_out ? &p : nullptr;
    }
    // Copies a left-out payload into its frame; its lender's loan ends.
    void fill(TxPayload& p);
    // The driver reads a left-out payload where it lies (its pieces): the loan ends now, as
    // the view does, at the driver's next call.
    std::span<const wire::Bytes> hand_over(TxPayload& p) {
        IWCM_ASSERT(p.left_out && p.lender->frames > 0);
        --p.lender->frames;
        p.left_out = false;
        return std::span(pieces_).subspan(p.first, p.count);
    }
    // Fills `lender`'s frames (only those with bytes below `*below`, when given): before
    // the memory they read may move or be freed.
    void settle(Lent& lender, const wire::SeqNumber* below = nullptr);
    // Ends every loan without filling: the frames will never be taken (the core ends).
    void forget_loans();

    // ---- deferred ACKs ----
    // Names only: a deferred ACK keeps no node alive (the node's ack_deferred says whether
    // it is still owed).
    void defer_ack(ConnHandle conn) { acks_.push_back(conn); }
    bool acks_deferred() const { return !acks_.empty(); }
    // The names, for the caller to send the ACKs; emptied by clear_acks().
    std::span<const ConnHandle> deferred_acks() const { return acks_; }
    void clear_acks() { acks_.clear(); }

    // ---- loopback ----
    bool loop_empty() const { return loop_.empty(); }
    // The frames to ourselves queued so far; those queued while they are handled wait for
    // the next take.
    std::vector<std::vector<std::byte>> take_loopback() {
        std::vector<std::vector<std::byte>> batch;
        batch.swap(loop_);
        return batch;
    }

    // Frames are contiguous in the arena and in order, the taken ones first; every payload
    // entry names a frame marked left out, in order, its pieces in range, and a payload
    // still out names a frame not yet taken; each lender's count matches. Asserted in debug
    // and sanitizer builds.
    void check() const;

private:
    ByteArena arena_;
    std::vector<TxFrame> frames_;
    std::size_t head_ = 0;  // frames_[0, head_) are taken
    // The frames whose payload is left out, in frame order, from payload_head_ on.
    std::vector<TxPayload> payloads_;
    std::vector<wire::Bytes> pieces_;  // the pieces of every payload queued
    std::size_t payload_head_ = 0;
    std::vector<std::vector<std::byte>> loop_;
    std::vector<ConnHandle> acks_;
};

}  // namespace iwcm::cm
