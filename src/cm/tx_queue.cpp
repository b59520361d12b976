// The core's transmit queue (tx_queue.hpp): loans of stream memory to queued frames, and the
// queue's invariants.
#include "cm/tx_queue.hpp"

#include "invariants.hpp"

namespace iwcm::cm {

void TxQueue::leave_out(Lent& lender, std::uint32_t at, std::span<const wire::Bytes> payload,
                        std::uint32_t len, std::uint16_t segment_size, wire::SeqNumber seq) {
    IWCM_ASSERT(!frames_.empty() && (frames_.back().len & TxFrame::kLeftOut) == 0);
    IWCM_ASSERT(at + len == frames_.back().length() && !payload.empty());
    const auto frame = static_cast<std::uint32_t>(frames_.size() - 1);
    frames_.back().len |= TxFrame::kLeftOut;
    const auto first = static_cast<std::uint32_t>(pieces_.size());
    pieces_.insert(pieces_.end(), payload.begin(), payload.end());
    // A lender with nothing out starts a new chain (the old one's entries are all passed).
    if (lender.frames == 0) lender.last = kNoPayload;
    const auto index = static_cast<std::uint32_t>(payloads_.size());
    payloads_.push_back({frame, at, first, static_cast<std::uint32_t>(payload.size()), len, true,
                         segment_size, seq, lender.last, &lender});
    lender.last = index;
    ++lender.frames;
}

void TxQueue::fill(TxPayload& p) {
    IWCM_ASSERT(p.left_out && p.lender->frames > 0);
    const TxFrame& t = frames_[p.frame];
    IWCM_ASSERT(p.at + p.len == t.length());
    wire::copy_pieces(arena_.data() + t.off + p.at, std::span(pieces_).subspan(p.first, p.count));
    p.lender->copied += p.len;
    --p.lender->frames;
    p.left_out = false;
}

void TxQueue::settle(Lent& lender, const wire::SeqNumber* below) {
    // The lender's own chain, newest first; a payload no longer left out (filled, or handed
    // to the driver) is unlinked as it is passed, so a walk costs what the lender has queued.
    std::uint32_t* link = &lender.last;
    while (*link != kNoPayload) {
        IWCM_ASSERT(*link < payloads_.size());
        TxPayload& p = payloads_[*link];
        IWCM_ASSERT(p.lender == &lender);
        if (p.left_out && (below == nullptr || p.seq < *below)) fill(p);
        if (p.left_out) {
            link = &p.earlier;
        } else {
            *link = p.earlier;
        }
    }
    IWCM_ASSERT(below != nullptr || lender.frames == 0);
}

void TxQueue::forget_loans() {
    for (std::size_t i = payload_head_; i < payloads_.size(); ++i) {
        TxPayload& p = payloads_[i];
        if (!p.left_out) continue;
        IWCM_ASSERT(p.lender->frames > 0);
        --p.lender->frames;
        p.left_out = false;
    }
}

void TxQueue::check() const {
#if IWCM_CHECK_INVARIANTS
    IWCM_ASSERT(head_ <= frames_.size() && payload_head_ <= payloads_.size());
    std::size_t end = 0;
    std::size_t left_out = 0;  // frames marked so
    for (const TxFrame& t : frames_) {
        IWCM_ASSERT(t.off == end && t.length() > 0);
        end += t.length();
        left_out += (t.len & TxFrame::kLeftOut) != 0;
    }
    IWCM_ASSERT(end == arena_.size() && left_out == payloads_.size());
    for (std::size_t i = 0; i < payloads_.size(); ++i) {
        const TxPayload& p = payloads_[i];
        IWCM_ASSERT(p.frame < frames_.size() && (frames_[p.frame].len & TxFrame::kLeftOut));
        IWCM_ASSERT(i == 0 || payloads_[i - 1].frame < p.frame);
        IWCM_ASSERT(p.first + p.count <= pieces_.size());
        IWCM_ASSERT(p.at + p.len == frames_[p.frame].length());
        IWCM_ASSERT(p.len == wire::total_size(std::span(pieces_).subspan(p.first, p.count)));
        // An entry is passed (payload_head_) exactly when its frame is taken, and a payload
        // still out belongs to a frame not yet taken.
        IWCM_ASSERT((i < payload_head_) == (p.frame < head_));
        IWCM_ASSERT(!p.left_out || p.frame >= head_);
        IWCM_ASSERT(!p.left_out || p.lender->frames > 0);
    }
#endif
}

}  // namespace iwcm::cm
