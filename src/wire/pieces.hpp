// A frame's bytes in pieces, read where they lie: their total, their join, and a window
// over them that a reader walks forward without joining them.
//
// Read first: iwcm/core.hpp (`receive_parts`: a frame may arrive as its headers and its
// payload's pieces, as a NIC scatters it or loopback hands its buffers over). The TCP stream
// trims a segment's text to its window and copies it into its buffer from the pieces; the
// RDMA engine reads an FPDU's header, sums its CRC and places its payload from them.
#pragma once

#include <algorithm>
#include <optional>
#include <vector>

#include "wire/bytes.hpp"
#include "wire/copy.hpp"

namespace iwcm::wire {

inline std::size_t total_size(std::span<const Bytes> pieces) {
    std::size_t n = 0;
    for (Bytes piece : pieces) n += piece.size();
    return n;
}

// Appends the pieces, in order, to `to`.
inline void append(std::vector<std::byte>& to, std::span<const Bytes> pieces) {
    for (Bytes piece : pieces) to.insert(to.end(), piece.begin(), piece.end());
}

// Copies the pieces side by side from `to` on; returns the end of what it wrote. An empty
// piece is skipped (it may have no address at all).
inline std::byte* copy_pieces(std::byte* to, std::span<const Bytes> pieces) {
    for (Bytes piece : pieces) {
        if (piece.empty()) continue;
        copy_bytes(to, piece.data(), piece.size());
        to += piece.size();
    }
    return to;
}

// A payload's pieces: `pieces` when it lies in several, else its one span `one` (referred to:
// it must outlive the list).
inline std::span<const Bytes> pieces_or(std::span<const Bytes> pieces, const Bytes& one) {
    return pieces.empty() ? std::span(&one, 1) : pieces;
}
inline std::span<const Bytes> pieces_or(std::span<const Bytes> pieces, const Bytes&& one) = delete;

// Bytes [skip, skip + size()) of the concatenation of `pieces`. subspan() drops the pieces
// it passes, so a window walked forward over many pieces costs O(1) a step, and the bytes at
// its start are always in its first piece (unless that piece is empty).
class Pieces {
public:
    Pieces() = default;
    // All of the pieces' bytes.
    explicit Pieces(std::span<const Bytes> pieces) : Pieces(pieces, total_size(pieces)) {}
    // The same when the caller knows their total, total_size(pieces) (a frame of many
    // pieces need not be walked twice).
    Pieces(std::span<const Bytes> pieces, std::size_t total)
        : pieces_(pieces), len_(total), total_(total) {}
    // The bytes of one span, which is referred to (not copied): it must outlive the window.
    static Pieces of(const Bytes& one) { return Pieces(std::span(&one, 1)); }
    static Pieces of(const Bytes&& one) = delete;

    std::size_t size() const { return len_; }
    bool empty() const { return len_ == 0; }
    // Whether the window is every byte of its pieces, so that pieces() is what it holds.
    bool whole() const { return skip_ == 0 && len_ == total_; }
    std::span<const Bytes> pieces() const { return pieces_; }

    Pieces subspan(std::size_t off) const {
        IWCM_ASSERT(off <= len_);
        Pieces out = *this;
        out.len_ -= off;
        out.skip_ += off;
        while (!out.pieces_.empty() && out.skip_ >= out.pieces_.front().size() && out.skip_ > 0) {
            out.skip_ -= out.pieces_.front().size();
            out.total_ -= out.pieces_.front().size();
            out.pieces_ = out.pieces_.subspan(1);
        }
        return out;
    }
    Pieces first(std::size_t n) const {
        IWCM_ASSERT(n <= len_);
        Pieces out = *this;
        out.len_ = n;
        return out;
    }

    // The bytes as one span when they lie in one piece.
    std::optional<Bytes> contiguous() const {
        if (len_ == 0) return Bytes{};
        std::size_t off = skip_;
        for (Bytes piece : pieces_) {
            if (off < piece.size()) {
                if (piece.size() - off < len_) return std::nullopt;
                return piece.subspan(off, len_);
            }
            off -= piece.size();
        }
        return std::nullopt;
    }

    // Calls fn(run) on the runs of the window's bytes, in order.
    template <class Fn>
    void each(Fn&& fn) const {
        std::size_t off = skip_;
        std::size_t left = len_;
        for (std::size_t i = 0; left > 0; ++i) {
            IWCM_ASSERT(i < pieces_.size());
            const Bytes piece = pieces_[i];
            if (off >= piece.size()) {
                off -= piece.size();
                continue;
            }
            const std::size_t k = std::min(left, piece.size() - off);
            fn(piece.subspan(off, k));
            left -= k;
            off = 0;
        }
    }

    // Copies the window's bytes to `to`.
    void copy_to(std::byte* to) const {
        each([&to](Bytes run) {
            copy_bytes(to, run.data(), run.size());
            to += run.size();
        });
    }

    // The first n (a constant) bytes into `to`: straight from the first piece when they
    // lie in it, as a header mostly does.
    template <std::size_t n>
    void head(std::byte* to) const {
        IWCM_ASSERT(n <= len_);
        if (!pieces_.empty() && pieces_.front().size() >= skip_ + n) {
            std::memcpy(to, pieces_.front().data() + skip_, n);
            return;
        }
        first(n).copy_to(to);
    }

private:
    std::span<const Bytes> pieces_;
    std::size_t skip_ = 0;   // bytes of pieces_ before the window
    std::size_t len_ = 0;    // bytes in the window
    std::size_t total_ = 0;  // bytes in pieces_
};

}  // namespace iwcm::wire
