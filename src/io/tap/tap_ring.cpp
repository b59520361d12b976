// A TAP device's system calls in batches. Read first: tap_ring.hpp.
#include "io/tap/tap_ring.hpp"

#include <liburing.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "iwcm/assert.hpp"

namespace iwcm::io {

namespace {

// user_data of a write; a read's is its index in the batch.
constexpr std::uint64_t kWriteTag = std::uint64_t{1} << 32;
// Room for a whole batch of reads and every slot, with one frame written in place.
constexpr unsigned kEntries = 128;
static_assert(kEntries >= TapRing::kMaxReads + TapRing::kWriteSlots + 1);

}  // namespace

TapRing::TapRing(int fd, std::size_t max_read)
    : fd_(fd),
      max_read_(max_read),
      ring_(std::make_unique<io_uring>()),
      // Not zero-filled: the kernel writes a page of a buffer when a frame first reaches it.
      rx_(new std::byte[TapRing::kMaxReads * max_read]),
      tx_(new std::byte[TapRing::kWriteSlots * TapRing::kSlot]) {}

Expected<std::unique_ptr<TapRing>, std::string> TapRing::open(int fd, std::size_t max_read) {
    IWCM_ASSERT(fd >= 0);
    IWCM_ASSERT(max_read > 0);
    std::unique_ptr<TapRing> r(new TapRing(fd, max_read));
    // SUBMIT_ALL: a write refused while it is queued does not hold back the ones after it.
    int rc = io_uring_queue_init(kEntries, r->ring_.get(), IORING_SETUP_SUBMIT_ALL);
    if (rc == -EINVAL) rc = io_uring_queue_init(kEntries, r->ring_.get(), 0);
    if (rc < 0) {
        r->ring_.reset();
        return fail("io_uring_queue_init: " + std::string(std::strerror(-rc)));
    }
    return r;
}

TapRing::~TapRing() {
    if (!ring_) return;
    flush();
    io_uring_queue_exit(ring_.get());
}

void TapRing::reap() {
    io_uring_cqe* cqe = nullptr;
    unsigned seen = 0;
    unsigned head = 0;
    io_uring_for_each_cqe(ring_.get(), head, cqe) {
        ++seen;
        const std::uint64_t tag = io_uring_cqe_get_data64(cqe);
        if ((tag & kWriteTag) != 0) {
            IWCM_ASSERT(in_flight_ > 0);  // every write queued is counted in flight when submitted
            --in_flight_;
            if (cqe->res < 0)
                ++counters_.writes_failed;
            else
                ++counters_.frames_written;
            continue;
        }
        // A read of a batch whose io_uring_enter failed has no place left: dropped.
        if (tag >= issued_) continue;
        results_[tag] = cqe->res;
        ++completed_;
    }
    io_uring_cq_advance(ring_.get(), seen);
}

int TapRing::enter(unsigned more) {
    // The queued writes go with them, in flight from here.
    const unsigned wait = queued_ + more;
    IWCM_ASSERT(wait <= kEntries);
    in_flight_ += queued_;
    queued_ = 0;
    for (;;) {
        ++counters_.enters;
        const int rc = io_uring_submit_and_wait(ring_.get(), wait);
        if (rc != -EINTR) {
            reap();
            return rc < 0 ? rc : 0;
        }
        // Interrupted before it waited: what was submitted stays so; wait again.
    }
}

long TapRing::read(std::span<const std::byte>& frame) {
    IWCM_ASSERT(ring_ != nullptr);
    for (;;) {
        while (next_ < issued_) {
            const unsigned i = next_++;
            const long res = results_[i];
            if (res == -EAGAIN || res == -EWOULDBLOCK) {
                dry_ = true;
                continue;
            }
            if (res < 0) return res;
            IWCM_ASSERT(static_cast<std::size_t>(res) <= max_read_);
            ++counters_.frames_read;
            frame = std::span<const std::byte>(rx_.get() + i * max_read_,
                                               static_cast<std::size_t>(res));
            return res;
        }
        if (dry_) {
            dry_ = false;
            return 0;
        }
        // A new batch, with the writes queued so far in the same call.
        issued_ = batch_;
        next_ = completed_ = 0;
        for (unsigned i = 0; i < issued_; ++i) {
            io_uring_sqe* sqe = io_uring_get_sqe(ring_.get());
            IWCM_ASSERT(sqe != nullptr);  // kEntries holds a batch beside every slot
            io_uring_prep_read(sqe, fd_, rx_.get() + i * max_read_,
                               static_cast<unsigned>(max_read_), static_cast<std::uint64_t>(-1));
            // RWF_NOWAIT: a read with no frame completes with -EAGAIN at once. io_uring would
            // otherwise wait for the descriptor to be readable, whatever O_NONBLOCK says.
            sqe->rw_flags = RWF_NOWAIT;
            io_uring_sqe_set_data64(sqe, i);
        }
        if (const int rc = enter(issued_); rc < 0) {
            issued_ = next_ = 0;
            return rc;
        }
        // Every read ran at once (RWF_NOWAIT): all have completed.
        IWCM_ASSERT(completed_ == issued_);
        unsigned got = 0;
        for (unsigned i = 0; i < issued_; ++i) got += results_[i] > 0 ? 1 : 0;
        batch_ = std::clamp(2 * got, 2U, kMaxReads);
    }
}

int TapRing::write(std::span<const iovec> iov, std::size_t len) {
    IWCM_ASSERT(ring_ != nullptr);
    IWCM_ASSERT(!iov.empty());
    if (len <= kSlot) {
        if (queued_ == kWriteSlots) flush();
        std::byte* slot = tx_.get() + queued_ * kSlot;
        std::size_t at = 0;
        for (const iovec& v : iov) {
            std::memcpy(slot + at, v.iov_base, v.iov_len);
            at += v.iov_len;
        }
        IWCM_ASSERT(at == len);
        io_uring_sqe* sqe = io_uring_get_sqe(ring_.get());
        IWCM_ASSERT(sqe != nullptr);
        io_uring_prep_write(sqe, fd_, slot, static_cast<unsigned>(len),
                            static_cast<std::uint64_t>(-1));
        sqe->rw_flags = RWF_NOWAIT;  // a full queue drops the frame, as write(2) on it would
        io_uring_sqe_set_data64(sqe, kWriteTag | queued_);
        ++queued_;
        return 0;
    }
    // In place: sent now, after the frames queued before it, and waited for, so the
    // caller's iovecs and the memory they name outlive the write.
    io_uring_sqe* sqe = io_uring_get_sqe(ring_.get());
    IWCM_ASSERT(sqe != nullptr);
    io_uring_prep_writev(sqe, fd_, iov.data(), static_cast<unsigned>(iov.size()),
                         static_cast<std::uint64_t>(-1));
    sqe->rw_flags = RWF_NOWAIT;
    io_uring_sqe_set_data64(sqe, kWriteTag | kWriteSlots);
    ++counters_.writes_in_place;
    ++in_flight_;
    if (const int rc = enter(1); rc < 0) return rc;
    IWCM_ASSERT(in_flight_ == 0);
    return 0;  // a refused frame is counted in writes_failed, as a queued one is
}

void TapRing::flush() {
    IWCM_ASSERT(ring_ != nullptr);
    if (queued_ == 0) return;
    // A failed io_uring_enter leaves the writes in the submission queue: the next call
    // submits them, and they are reaped (and counted) then.
    if (enter(0) == 0) IWCM_ASSERT(in_flight_ == 0);
}

}  // namespace iwcm::io
