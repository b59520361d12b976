// A TAP device's reads and writes in batches through io_uring: no system call per frame.
//
// Read first: tap.hpp, and io_uring(7) with liburing's io_uring_prep_read(3) and
// io_uring_submit_and_wait(3). A TAP returns one frame per read(2) and takes one per
// write(2); a busy connection costs two system calls for every frame it receives (the frame,
// then the empty read that says the queue is dry) and one for every ACK it sends. io_uring
// takes many reads and writes in one io_uring_enter(2):
//
// - Reads: when the frames of the last batch are used up, one io_uring_enter issues the
//   next batch of reads into the ring's own buffers. Each is RWF_NOWAIT (O_NONBLOCK alone
//   does not stop io_uring from waiting for a readable descriptor), so io_uring runs each at
//   once, in the order queued, and a read with no frame left completes with -EAGAIN instead
//   of waiting: every completion is there when the call returns. A batch with such a read has
//   emptied the queue, so the next read() answers "none waiting" without asking the kernel again.
//   The batch adapts: twice the frames the last one brought (at least 2, at most kMaxReads), so a
//   ping-pong asks for 2 and a stream of frames for 32.
// - Writes: a frame of at most kSlot bytes (an ACK, a segment of one MSS, a handshake's
//   frame) is copied into a slot of the ring and queued; flush() sends every queued frame
//   in one call. A longer frame (a segment the kernel cuts at the MSS) is sent from where it
//   lies, in the same call as the frames queued before it, and waited for, since the core's
//   memory is the core's again after poll_transmit_parts() returns to it: such a frame
//   carries up to 64 KiB, so its call is paid once per 44 MSS. Writes are RWF_NOWAIT too:
//   io_uring runs them at once in the order queued, so frames leave in order, and one the
//   kernel cannot take is dropped and counted, as write(2) on the descriptor would drop it.
//
// A kernel without io_uring, or a process that may not use it (a seccomp filter,
// kernel.io_uring_disabled), makes open() fail: the device then reads and writes as before.
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "iwcm/result.hpp"

struct io_uring;

namespace iwcm::io {

struct TapRingCounters {
    std::uint64_t enters = 0;           // io_uring_enter calls (each a system call)
    std::uint64_t frames_read = 0;      // reads that brought a frame
    std::uint64_t frames_written = 0;   // writes completed
    std::uint64_t writes_failed = 0;    // writes the kernel refused (dropped, as a NIC would)
    std::uint64_t writes_in_place = 0;  // frames longer than kSlot, written from their memory
};

class TapRing {
public:
    static constexpr unsigned kMaxReads = 32;
    static constexpr unsigned kWriteSlots = 64;
    // The longest frame (virtio-net header included) copied into a slot.
    static constexpr std::size_t kSlot = 2048;

    // A ring for the non-blocking TAP descriptor `fd` (not owned), whose reads return at most
    // `max_read` bytes. The error says why io_uring is not available.
    static Expected<std::unique_ptr<TapRing>, std::string> open(int fd, std::size_t max_read);
    ~TapRing();
    TapRing(const TapRing&) = delete;
    TapRing& operator=(const TapRing&) = delete;

    // The next frame read, as read(2) returned it (the virtio-net header first, if the
    // device has one): its length with `frame` viewing it until the next call, 0 when none
    // waits, or -errno.
    long read(std::span<const std::byte>& frame);
    // Whether frames read by the last batch wait to be handed out (no descriptor says so).
    bool holds_frames() const { return next_ < issued_; }
    // Queues one frame, given as `iov` (`len` bytes in all): 0, or -errno when io_uring_enter
    // failed. A frame the kernel refuses is counted in writes_failed, as it completes.
    int write(std::span<const iovec> iov, std::size_t len);
    // Sends every queued frame and waits for them.
    void flush();
    const TapRingCounters& counters() const { return counters_; }

private:
    TapRing(int fd, std::size_t max_read);
    // Submits the queued writes and `more` entries prepared beside them, waits for all of
    // them and reaps every completion: 0, or -errno of io_uring_enter.
    int enter(unsigned more);
    void reap();

    int fd_;
    std::size_t max_read_;
    std::unique_ptr<io_uring> ring_;
    // Reads: kMaxReads buffers of max_read_ bytes, the batch's results in order.
    std::unique_ptr<std::byte[]> rx_;
    long results_[kMaxReads] = {};
    unsigned batch_ = 2;      // reads in the next batch
    unsigned issued_ = 0;     // reads of the last batch
    unsigned next_ = 0;       // the next of them to hand out
    unsigned completed_ = 0;  // of them, completed
    bool dry_ = false;        // the last batch emptied the queue; not yet said
    // Writes: kWriteSlots slots of kSlot bytes, queued_ of them waiting to be submitted,
    // in_flight_ submitted and not yet reaped.
    std::unique_ptr<std::byte[]> tx_;
    unsigned queued_ = 0;
    unsigned in_flight_ = 0;
    TapRingCounters counters_;
};

}  // namespace iwcm::io
