// The receive context of the one frame the core is handling: the frame parsed, its payload
// when it came in pieces, the TCP checksum when it is finished only where the payload is
// placed, whether the link vouched for its checksums, and the text the MPA handlers read in
// place.
//
// Read first: include/iwcm/core.hpp (Core::receive, receive_parts, receive_vouched).
//
// One frame at a time: handle_frame is never re-entered (frames to ourselves wait in the
// transmit queue until it returns), so the context is one object reused for every frame,
// and everything in it describes the frame in hand only. Each piece of it has a scope that
// sets it and clears it on every way out, so that no handler has to remember to:
//   - FrameScope: a frame is in hand;
//   - PartsScope: a frame in parts; its pieces are forgotten and its checksum must have been
//     finished (or the frame dropped) by the time the scope ends;
//   - VouchedScope: the frame's checksums were checked by the link (receive_vouched, our own
//     loopback frames with checksums left partial);
//   - InPlaceScope: a node's MPA handlers read the segment's text where it lies.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "invariants.hpp"
#include "iwcm/assert.hpp"
#include "wire/bytes.hpp"
#include "wire/frame.hpp"
#include "wire/pieces.hpp"

namespace iwcm::cm {

struct Node;

class RxContext {
public:
    // The frame in hand, parsed into the same object every time.
    wire::TcpFrame frame;

    // ---- the frame in hand ----
    bool in_frame() const { return in_frame_; }
    class FrameScope {
    public:
        explicit FrameScope(RxContext& rx) : rx_(rx) {
            IWCM_ASSERT(!rx_.in_frame_);
            rx_.in_frame_ = true;
        }
        ~FrameScope() { rx_.in_frame_ = false; }
        FrameScope(const FrameScope&) = delete;
        FrameScope& operator=(const FrameScope&) = delete;

    private:
        RxContext& rx_;
    };

    // ---- a frame in parts ----
    // For the call of one frame in parts (Core::receive_parts), around its handling.
    class PartsScope {
    public:
        explicit PartsScope(RxContext& rx) : rx_(rx) {}
        ~PartsScope() {
            // Every way out of the frame's handling finished the checksum it deferred.
            IWCM_ASSERT(!rx_.sum_pending_);
            rx_.pieces_ = {};
        }
        PartsScope(const PartsScope&) = delete;
        PartsScope& operator=(const PartsScope&) = delete;

    private:
        RxContext& rx_;
    };
    // The payload's pieces when it came in several (one piece is the frame's payload), empty
    // otherwise.
    std::span<const wire::Bytes> pieces() const { return pieces_; }
    void set_pieces(std::span<const wire::Bytes> pieces) {
        IWCM_ASSERT(pieces.size() > 1);
        pieces_ = pieces;
    }
    // The pieces joined into one span, for a handler that reads one; the pieces are
    // forgotten. Valid until the next frame.
    [[gnu::noinline]] wire::Bytes join_pieces() {
        IWCM_ASSERT(!pieces_.empty());
        joined_.clear();
        wire::append(joined_, pieces_);
        pieces_ = {};
        return joined_;
    }
    // `headers` and `pieces` joined: for a parse of the whole frame (`for_trace` false), or
    // for the trace hook while the frame is parsed in place (true).
    wire::Bytes join_frame(wire::Bytes headers, std::span<const wire::Bytes> pieces,
                           bool for_trace) {
        std::vector<std::byte>& to = for_trace ? traced_ : joined_;
        to.assign(headers.begin(), headers.end());
        wire::append(to, pieces);
        return to;
    }

    // ---- the TCP checksum, finished where the payload is placed ----
    // Where the parse leaves the sum of the pseudo-header and header when it defers the rest.
    std::uint64_t* sum_slot() { return &sum_; }
    void defer_sum() {
        IWCM_ASSERT(!sum_pending_);
        sum_pending_ = true;
    }
    bool sum_pending() const { return sum_pending_; }
    // The partial sum, for the caller to finish over the payload: no longer pending.
    std::uint64_t take_sum() {
        IWCM_ASSERT(sum_pending_);
        sum_pending_ = false;
        return sum_;
    }

    // ---- checksums the link vouched for ----
    bool vouched() const { return vouched_; }
    class VouchedScope {
    public:
        VouchedScope(RxContext& rx, bool vouched) : rx_(rx) {
            IWCM_ASSERT(!rx_.vouched_);
            rx_.vouched_ = vouched;
        }
        ~VouchedScope() { rx_.vouched_ = false; }
        VouchedScope(const VouchedScope&) = delete;
        VouchedScope& operator=(const VouchedScope&) = delete;

    private:
        RxContext& rx_;
    };

    // ---- text read in place ----
    // Is `node` the one whose handlers read the segment's text in place?
    bool reads_in_place(const Node& node) const { return &node == in_place_node_; }
    bool any_in_place() const { return in_place_node_ != nullptr; }
    // The text not yet consumed.
    wire::Bytes in_place() const { return in_place_; }
    void consume_in_place(std::size_t n) {
        IWCM_ASSERT(in_place_node_ != nullptr && n <= in_place_.size());
        in_place_ = in_place_.subspan(n);
    }
    class InPlaceScope {
    public:
        InPlaceScope(RxContext& rx, const Node& node, wire::Bytes text) : rx_(rx) {
            IWCM_ASSERT(rx_.in_place_node_ == nullptr);
            rx_.in_place_node_ = &node;
            rx_.in_place_ = text;
        }
        ~InPlaceScope() {
            rx_.in_place_node_ = nullptr;
            rx_.in_place_ = {};
        }
        // What the handlers left of the text.
        wire::Bytes left() const { return rx_.in_place_; }
        InPlaceScope(const InPlaceScope&) = delete;
        InPlaceScope& operator=(const InPlaceScope&) = delete;

    private:
        RxContext& rx_;
    };

    // ---- a peer's private data between its parse and its event ----
    // A copy of `pdata`, valid until the next copy: for private data read from bytes that
    // move before the event is queued.
    std::span<const std::byte> keep_pdata(std::span<const std::byte> pdata) {
        pdata_.assign(pdata.begin(), pdata.end());
        return pdata_;
    }

    // Between frames nothing of a frame is left: no frame in hand, no pieces, no checksum
    // pending, no text in place. Asserted as the core takes a frame or a timer (receive,
    // receive_parts, on_timer), in debug and sanitizer builds.
    void check_between_frames() const {
#if IWCM_CHECK_INVARIANTS
        IWCM_ASSERT(!in_frame_ && pieces_.empty() && !sum_pending_ && in_place_node_ == nullptr);
#endif
    }

private:
    bool in_frame_ = false;
    bool sum_pending_ = false;
    bool vouched_ = false;
    std::uint64_t sum_ = 0;
    std::span<const wire::Bytes> pieces_;
    std::vector<std::byte> joined_;  // a frame in parts joined, or its pieces joined
    std::vector<std::byte> traced_;  // a frame in parts joined for the trace hook
    const Node* in_place_node_ = nullptr;
    wire::Bytes in_place_;
    std::vector<std::byte> pdata_;
};

}  // namespace iwcm::cm
