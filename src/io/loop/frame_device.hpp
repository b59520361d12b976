// What the host loop (event_loop.hpp) needs from a device that moves
// Ethernet frames: a descriptor to wait on and one frame per read and write.
// Read first: tap.hpp (a TAP device) and xsk.hpp (an AF_XDP socket on a
// shared interface), the two devices behind it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "wire/pieces.hpp"

namespace iwcm::io {

// Work a frame leaves to the link (FrameDevice::write_offload), as a NIC driver leaves a
// CHECKSUM_PARTIAL or GSO packet to its NIC.
struct TxOffload {
    // A TCP segment whose checksum field holds only its pseudo-header's sum
    // (wire::Checksums::kPartial): the link finishes it.
    bool checksum = false;
    // Not 0: the TCP payload is cut every segment_size bytes, each piece a segment with
    // the frame's headers (TSO); needs `checksum`.
    std::uint16_t segment_size = 0;
};

// What a device can leave to its link (FrameDevice::offloads).
struct DeviceOffloads {
    bool checksum = false;          // TxOffload::checksum
    std::uint32_t max_segment = 0;  // the longest TCP payload of a TxOffload::segment_size frame
    bool large_receive = false;     // read() may return a TCP segment longer than the MSS
};

class FrameDevice {
public:
    virtual ~FrameDevice() = default;
    // Readable (EPOLLIN) when a frame waits.
    virtual int fd() const = 0;
    virtual const std::string& name() const = 0;
    // One frame into buf: its length, 0 when none is waiting, or -errno.
    virtual long read(std::span<std::byte> buf) = 0;
    // The same, viewed where the device holds it until the next read: its length, 0 or
    // -errno. This default reads into a buffer of its own; a device that reads into its
    // own memory (a TAP's io_uring buffers) hands that out without a copy.
    virtual long read_view(std::span<const std::byte>& frame) {
        if (view_buf_.empty()) view_buf_.resize(max_frame());
        const long n = read(view_buf_);
        if (n > 0)
            frame = std::span<const std::byte>(view_buf_.data(), static_cast<std::size_t>(n));
        return n;
    }
    // One frame out: 0, or -errno (-EAGAIN when the queue is full: dropped).
    virtual int write(std::span<const std::byte> frame) = 0;
    // The same for a frame in parts, `headers` then the `payload` pieces
    // (Core::poll_transmit_parts), each read where it lies. This default joins them and
    // calls write(); a device that can gather (writev, a copy into its own buffer)
    // overrides it.
    virtual int write_parts(std::span<const std::byte> headers,
                            std::span<const std::span<const std::byte>> payload) {
        if (payload.empty()) return write(headers);
        joined_.assign(headers.begin(), headers.end());
        wire::append(joined_, payload);
        return write(joined_);
    }
    // write_parts() with work left to the link; only what offloads() says the device takes.
    virtual int write_offload(std::span<const std::byte> headers,
                              std::span<const std::span<const std::byte>> payload,
                              const TxOffload& offload) {
        (void)offload;
        return write_parts(headers, payload);
    }
    virtual DeviceOffloads offloads() const { return {}; }
    // Whether the frame the last read() returned came with checksums the link vouches for
    // (Core::receive_vouched): not to be verified.
    virtual bool checksum_vouched() const { return false; }
    // Frames written so far go out now (a device that batches its sends).
    virtual void flush() {}
    // Frames that write() queued and the kernel then refused, since the last call (a
    // device that batches its sends learns of a refusal after write() returned).
    virtual std::uint64_t take_failed_writes() { return 0; }
    // Whether frames already read from the kernel wait in the device (a device that reads
    // in batches): the descriptor does not say so, so the loop reads before it sleeps.
    virtual bool holds_frames() const { return false; }
    // read() makes no system call (a ring in shared memory, as AF_XDP's): a thread
    // that polls may read the frames itself (TapHost::poll_frames).
    virtual bool reads_without_syscall() const { return false; }
    // The largest frame read() returns.
    virtual std::size_t max_frame() const = 0;

private:
    std::vector<std::byte> joined_;    // write_parts()'s default
    std::vector<std::byte> view_buf_;  // read_view()'s default
};

}  // namespace iwcm::io
