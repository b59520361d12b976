// The AF_XDP device of shared-address mode: the CM's frames on an interface
// whose address the kernel's TCP stack also uses.
//
// Read first: the kernel's Documentation/networking/af_xdp.rst, then
// bpf/steer.bpf.c (the XDP program this device loads). open():
//   1. claims the interface for this process: an abstract unix socket named
//      after the interface index (abstract names live in the network
//      namespace and vanish with the process, so a CM killed by SIGKILL
//      leaves no claim behind); a second CM on the interface is refused;
//   2. removes an XDP program named iwcm_steer still attached from a CM that
//      died (the claim proves it is not in use), and refuses to replace any
//      other XDP program;
//   3. loads the program (its object is embedded in the library at build
//      time) and attaches it in native (driver) mode, or in generic (skb)
//      mode where the driver has none, as on veth;
//   4. creates the UMEM (frames shared with the kernel) and the socket on
//      receive queue 0 (zero-copy when the driver offers it, else copy
//      mode), and puts the socket in the program's XSKMAP.
// The program redirects only segments to (address, port) pairs in its port
// map: add_port() / remove_port() keep that map. The destructor detaches the
// program; the kernel frees the maps, the socket and the UMEM.
// open() binds the socket to receive queue 0. An interface with more queues
// either steers the CM's flows to queue 0 (ethtool -N, or one combined
// channel) or gets a socket on each: open_queue(q) makes another device on
// queue q (its own UMEM and socket, put in the XSKMAP at q, where the program
// redirects what arrives on q) that shares this one's program and port map.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "io/shared/steered_device.hpp"
#include "iwcm/address.hpp"
#include "iwcm/result.hpp"

namespace iwcm::io {

class XskDevice final : public SteeredDevice {
public:
    // The name of the XDP program (bpf_prog_info::name) that marks it ours.
    static constexpr const char* kProgramName = "iwcm_steer";
    static constexpr std::size_t kFrameSize = 4096;

    // Where the program runs: native when the driver can, else generic (kAuto).
    enum class Mode : std::uint8_t { kAuto, kNative, kGeneric };

    // The error names the step that failed and what is missing (root, BPF
    // support, AF_XDP sockets, the interface).
    static Expected<std::unique_ptr<XskDevice>, std::string> open(const std::string& ifname,
                                                                  Mode mode = Mode::kAuto);
    ~XskDevice() override;
    XskDevice(const XskDevice&) = delete;
    XskDevice& operator=(const XskDevice&) = delete;

    int fd() const override;
    const std::string& name() const override;
    long read(std::span<std::byte> buf) override;
    // Queues the frame on the send ring; flush() (or a full ring) sends.
    int write(std::span<const std::byte> frame) override;
    // Every part copied into one UMEM frame (the copy write() makes, and no other).
    int write_parts(std::span<const std::byte> headers,
                    std::span<const std::span<const std::byte>> payload) override;
    void flush() override;
    bool reads_without_syscall() const override { return true; }
    std::size_t max_frame() const override { return kFrameSize; }

    // Another socket, on receive queue `queue` (src/io/tap/tap_shards.hpp runs a
    // thread on each). This device must outlive it.
    Expected<std::unique_ptr<XskDevice>, std::string> open_queue(std::uint32_t queue);
    std::uint32_t queue() const;

    int ifindex() const;
    // Busy polling (SO_PREFER_BUSY_POLL, SO_BUSY_POLL for `usec`, SO_BUSY_POLL_BUDGET
    // kBusyPollBudget): the kernel runs the interface's NAPI poll in the system calls made
    // on this socket instead of after its interrupts, and read() makes one (recvfrom) when
    // the ring is empty, so that a thread that spins on read() moves the frames itself.
    // For a loop that never sleeps (TapHost::set_busy_poll); docs/design.md "Busy polling".
    static constexpr int kBusyPollBudget = 64;
    Expected<void, std::string> set_busy_poll(std::uint32_t usec);
    const char* attach_mode() const override;
    bool zero_copy() const override;
    Expected<void, std::string> add_port(const IpAddr& addr, std::uint16_t port) override;
    void remove_port(const IpAddr& addr, std::uint16_t port) override;

    struct Impl;

private:
    explicit XskDevice(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

}  // namespace iwcm::io
