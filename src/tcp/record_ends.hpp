// tcp::RecordEnds: where the records of a stream's send side end.
//
// Read first: src/tcp/stream.hpp (write_record and the segmentation rule it
// states) and docs/design.md "Byte stream". A stream that is handed records
// (MPA FPDUs, RFC 5044 section 6) keeps the sequence number after each one
// here, in order, so that no segment carries bytes of two records. The
// numbers at or below snd_una are dropped as ACKs arrive, so the set holds
// only what is queued or in flight.
//
// Memory: one pointer in the stream, and nothing allocated until the first
// record. The block it points at holds the ring's head, count, capacity and
// the last search's answer, and then the ring itself; the capacity doubles when full (it never
// needs more than one entry per byte of the send buffer) and is kept afterwards, so the steady path
// allocates nothing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>

#include "wire/tcp.hpp"

namespace iwcm::tcp {

class RecordEnds {
public:
    bool empty() const { return size() == 0; }
    std::size_t size() const { return block_ ? block_[kCount] : 0; }
    wire::SeqNumber front() const;
    wire::SeqNumber back() const;
    // Adds an end; it must lie above every end held.
    void push(wire::SeqNumber end);
    // Forgets the ends at or below `una` (the bytes before them are acknowledged).
    void drop_through(wire::SeqNumber una);
    // The least end above `s`, if any.
    std::optional<wire::SeqNumber> first_after(wire::SeqNumber s) const;
    // The greatest end below `s`, if any.
    std::optional<wire::SeqNumber> last_before(wire::SeqNumber s) const;

private:
    // The block's header words, then the ring from kRing on.
    static constexpr std::size_t kHead = 0;
    static constexpr std::size_t kCount = 1;
    static constexpr std::size_t kCap = 2;
    static constexpr std::size_t kHint = 3;
    static constexpr std::size_t kRing = 4;
    static constexpr std::uint32_t kFirstCap = 8;

    // The i-th end, oldest first.
    wire::SeqNumber at(std::size_t i) const {
        const std::uint32_t cap = block_[kCap];
        return wire::SeqNumber(block_[kRing + ((block_[kHead] + i) & (cap - 1))]);
    }
    // The number of ends at or below `s` (they are sorted). The answer of the
    // last search is kept (kHint) and tried first: a sender asks about the
    // same end for every segment of a record, and the next one after it.
    std::size_t count_through(wire::SeqNumber s) const;
    bool answers(std::size_t i, wire::SeqNumber s) const {
        return i <= size() && (i == 0 || at(i - 1) <= s) && (i == size() || at(i) > s);
    }
    void grow();

    std::unique_ptr<std::uint32_t[]> block_;
};

}  // namespace iwcm::tcp
