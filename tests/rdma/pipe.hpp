// An in-memory byte link pair for the engine's tests: each end receives into
// a fixed ring (so an FPDU can straddle its end), bytes in flight are
// delivered in chunks the test chooses (so FPDUs split across "segments" or
// several share one), and every record an end sent is logged.
//
// Read first: src/rdma/link.hpp, src/rdma/engine.hpp.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <limits>
#include <vector>

#include "rdma/engine.hpp"

namespace iwcm::rdma::test {

using ByteVec = std::vector<std::byte>;

class Ring {
public:
    explicit Ring(std::size_t capacity) : buf_(capacity) {}
    std::size_t size() const { return size_; }
    std::size_t space() const { return buf_.size() - size_; }
    void put(std::byte b) {
        buf_[(head_ + size_) % buf_.size()] = b;
        ++size_;
    }
    wire::Bytes peek() const { return {buf_.data() + head_, std::min(size_, buf_.size() - head_)}; }
    void consume(std::size_t n) {
        EXPECT_LE(n, size_);
        head_ = (head_ + n) % buf_.size();
        size_ -= n;
    }

private:
    std::vector<std::byte> buf_;
    std::size_t head_ = 0;
    std::size_t size_ = 0;
};

class PipeLinks final : public Links {
public:
    explicit PipeLinks(std::size_t ring = 256 * 1024) : ends_{End(ring), End(ring)} {}

    struct End {
        explicit End(std::size_t ring) : rx(ring) {}
        Ring rx;                    // delivered to this end
        std::deque<std::byte> air;  // sent to this end, not yet delivered
        std::vector<ByteVec> sent;  // records this end sent
        std::size_t send_cap = std::numeric_limits<std::size_t>::max() / 2;
        bool closed = false;
        bool abortive = false;
    };

    End& end(std::size_t i) { return ends_[i]; }

    std::size_t send_space(LinkId l) override {
        End& peer = ends_[1 - l.value];
        std::size_t cap = ends_[l.value].send_cap;
        return peer.air.size() >= cap ? 0 : cap - peer.air.size();
    }
    bool send_record(LinkId l, wire::Bytes record) override {
        End& me = ends_[l.value];
        if (me.closed || record.size() > send_space(l)) return false;
        ends_[1 - l.value].air.insert(ends_[1 - l.value].air.end(), record.begin(), record.end());
        me.sent.emplace_back(record.begin(), record.end());
        return true;
    }
    std::size_t readable(LinkId l) override { return ends_[l.value].rx.size(); }
    wire::Bytes peek(LinkId l) override { return ends_[l.value].rx.peek(); }
    void consume(LinkId l, std::size_t n) override { ends_[l.value].rx.consume(n); }
    bool send_open(LinkId l) override { return !ends_[l.value].closed; }
    void close(LinkId l, bool abortive) override {
        ends_[l.value].closed = true;
        ends_[l.value].abortive = abortive;
    }

    // Moves up to max bytes in flight to end i's ring; returns how many.
    std::size_t deliver(std::size_t i, std::size_t max) {
        End& e = ends_[i];
        std::size_t n = std::min({max, e.air.size(), e.rx.space()});
        for (std::size_t k = 0; k < n; ++k) {
            e.rx.put(e.air.front());
            e.air.pop_front();
        }
        return n;
    }
    // Bytes as if the other end had sent them to end i.
    void inject(std::size_t i, wire::Bytes bytes) {
        ends_[i].air.insert(ends_[i].air.end(), bytes.begin(), bytes.end());
    }

private:
    End ends_[2];
};

}  // namespace iwcm::rdma::test
