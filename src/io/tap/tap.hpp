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
//
// With `offload` the device is opened with IFF_VNET_HDR: every frame, both
// ways, follows a struct virtio_net_hdr (<linux/virtio_net.h>, the virtio
// specification's "Packet Operation"), which says what is left to do with it, as
// the kernel's skb says to a NIC driver. A write leaves a TCP segment's checksum
// to the kernel (VIRTIO_NET_HDR_F_NEEDS_CSUM, csum_start and csum_offset at the
// TCP checksum field, which holds the pseudo-header's sum) and a segment longer
// than its MSS as one frame of VIRTIO_NET_HDR_GSO_TCPV4 or TCPV6 with gso_size the
// MSS: the kernel cuts its payload every gso_size bytes where it must (a segment
// for its own TCP stays whole, as GRO would have made it). TUNSETOFFLOAD tells
// the kernel that we take the same (TUN_F_CSUM, TUN_F_TSO4, TUN_F_TSO6): a read
// may return a segment whose checksum is not finished, or a TCP segment up to
// 64 KiB that stands for a run of segments; the kernel vouches for both
// (checksum_vouched), as its own stack takes a CHECKSUM_PARTIAL skb unverified.
//
// With `ring` the reads and writes go through io_uring in batches (tap_ring.hpp) where the
// kernel lets this process use it, else one system call per frame as without.
#pragma once

#include <sys/uio.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "io/loop/frame_device.hpp"
#include "io/tap/tap_ring.hpp"
#include "iwcm/address.hpp"
#include "iwcm/result.hpp"

namespace iwcm::io {

class TapDevice final : public FrameDevice {
public:
    // The longest frame either way: an IP packet's 65 535 bytes behind a tagged
    // Ethernet header (a segment of 64 KiB with `offload`).
    static constexpr std::size_t kMaxFrame = 18 + 65535;
    // The longest TCP payload of a segment written with TxOffload::segment_size, as
    // StreamConfig::segment_offload allows it.
    static constexpr std::uint32_t kMaxSegment = 65000;

    // Opens (or creates) and brings up the TAP device `name`. The error names
    // the device, the step that failed and the errno text. With
    // `multi_queue` (IFF_MULTI_QUEUE) each open attaches one more queue of
    // the device: the kernel spreads the frames it sends among the queues by
    // flow, and a flow's frames go to the queue that last sent one of it. A
    // persistent device must have been made multi-queue
    // (`ip tuntap add ... multi_queue`). `offload`: the virtio-net header (above).
    // `ring`: system calls in batches (above); batched() says whether it is so.
    static Expected<TapDevice, std::string> open(const std::string& name, bool multi_queue = false,
                                                 bool offload = false, bool ring = false);
    // Whether this kernel's TAP takes the virtio-net header and TUNSETOFFLOAD
    // (TUNGETFEATURES offers IFF_VNET_HDR); false also when /dev/net/tun cannot be opened.
    static bool kernel_offloads();
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
    // The same, viewed where it was read (the ring's buffer) when batched.
    long read_view(std::span<const std::byte>& frame) override;
    // One frame out: 0, or -errno (-EAGAIN when the queue is full: dropped).
    int write(std::span<const std::byte> frame) override;
    // One writev() of every part.
    int write_parts(std::span<const std::byte> headers,
                    std::span<const std::span<const std::byte>> payload) override;
    // The same, the virtio-net header saying what the kernel finishes (needs `offload`).
    int write_offload(std::span<const std::byte> headers,
                      std::span<const std::span<const std::byte>> payload,
                      const TxOffload& offload) override;
    DeviceOffloads offloads() const override;
    bool checksum_vouched() const override { return vouched_; }
    void flush() override;
    std::uint64_t take_failed_writes() override;
    bool holds_frames() const override { return ring_ && ring_->holds_frames(); }
    bool offload() const { return offload_; }
    bool batched() const { return ring_ != nullptr; }
    // Why open() with `ring` left it unbatched (empty when batched or not asked).
    const std::string& ring_error() const { return ring_error_; }
    // The ring's counters; nullptr when not batched.
    const TapRingCounters* ring_counters() const { return ring_ ? &ring_->counters() : nullptr; }

private:
    TapDevice(int fd, std::string name, MacAddr mac, bool offload)
        : fd_(fd), name_(std::move(name)), kernel_mac_(mac), offload_(offload) {}
    int writev_all(std::size_t len);
    // A frame read whole (virtio-net header first with `offload`): the frame, vouched_ set.
    long frame_of(std::span<const std::byte> read, std::span<const std::byte>& frame);
    int fd_ = -1;
    std::string name_;
    MacAddr kernel_mac_;
    bool offload_ = false;
    bool vouched_ = false;           // the last read()'s
    std::vector<iovec> iov_;         // write_parts()'s
    std::vector<std::byte> joined_;  // write_offload()'s, past IOV_MAX pieces
    std::unique_ptr<TapRing> ring_;
    std::string ring_error_;
    std::uint64_t failed_taken_ = 0;  // the ring's writes_failed already taken
};

// The virtio-net header (struct virtio_net_hdr, 10 bytes, little-endian as a TAP
// without TUNSETVNETBE takes it) for a frame written with `offload`: zero when
// nothing is left to the kernel, or when the frame is no TCP segment. Exposed for tests.
// `headers` are the frame's first bytes (at least its Ethernet, IP and TCP headers),
// `frame_len` its whole length.
std::array<std::byte, 10> vnet_header(std::span<const std::byte> headers, std::size_t frame_len,
                                      const TxOffload& offload);

}  // namespace iwcm::io
