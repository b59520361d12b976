// A Linux TAP device: Ethernet frames to and from the kernel, one per read
// and write.
//
// Read first: the kernel's Documentation/networking/tuntap.rst. The device is
// opened by name through /dev/net/tun with IFF_TAP | IFF_NO_PI (no packet
// information header: each read returns exactly one Ethernet frame without
// its FCS). If no device of that name exists the kernel creates one that
// lives as long as the file descriptor; a persistent device (`ip tuntap add`)
// is attached to. The device is brought up (IFF_UP) and the descriptor made
// non-blocking, for an epoll loop. Without IFF_VNET_HDR the kernel hands over
// frames with complete checksums (it computes any it had offloaded).
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "io/loop/frame_device.hpp"
#include "iwcm/address.hpp"
#include "iwcm/result.hpp"

namespace iwcm::io {

class TapDevice final : public FrameDevice {
public:
    static constexpr std::size_t kMaxFrame = 65536;

    // Opens (or creates) and brings up the TAP device `name`. The error names
    // the device, the step that failed and the errno text. With
    // `multi_queue` (IFF_MULTI_QUEUE) each open attaches one more queue of
    // the device: the kernel spreads the frames it sends among the queues by
    // flow, and a flow's frames go to the queue that last sent one of it. A
    // persistent device must have been made multi-queue
    // (`ip tuntap add ... multi_queue`).
    static Expected<TapDevice, std::string> open(const std::string& name, bool multi_queue = false);
    TapDevice(TapDevice&& other) noexcept;
    TapDevice& operator=(TapDevice&& other) noexcept;
    TapDevice(const TapDevice&) = delete;
    TapDevice& operator=(const TapDevice&) = delete;
    ~TapDevice() override;

    int fd() const override { return fd_; }
    const std::string& name() const override { return name_; }
    std::size_t max_frame() const override { return kMaxFrame; }
    // The device's own (kernel side) MAC address; the CM uses another one.
    MacAddr kernel_mac() const { return kernel_mac_; }

    // One frame into buf: its length, 0 when none is waiting, or -errno.
    long read(std::span<std::byte> buf) override;
    // One frame out: 0, or -errno (-EAGAIN when the queue is full: dropped).
    int write(std::span<const std::byte> frame) override;
    // One writev() of every part.
    int write_parts(std::span<const std::byte> headers,
                    std::span<const std::span<const std::byte>> payload) override;

private:
    TapDevice(int fd, std::string name, MacAddr mac)
        : fd_(fd), name_(std::move(name)), kernel_mac_(mac) {}
    int fd_ = -1;
    std::string name_;
    MacAddr kernel_mac_;
    std::vector<iovec> iov_;  // write_parts()'s
};

}  // namespace iwcm::io
