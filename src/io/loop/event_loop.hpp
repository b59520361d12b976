// The host loop: one iwcm::Core and its neighbour table on a frame device (a
// TAP device, or an AF_XDP socket on a shared interface: frame_device.hpp),
// driven by an epoll loop. This is the only place that reads clocks.
//
// Read first: include/iwcm/core.hpp (the sans-I/O contract), tap.hpp,
// neighbor.hpp, pcap.hpp, and epoll(7), timerfd_create(2), signalfd(2).
// On a shared interface (xsk.hpp, shared_host.hpp) the kernel owns the
// address and answers ARP / ND itself: the neighbour table then announces
// nothing (TapHostConfig::kernel_neighbors) and sees no ARP, since the XDP
// program passes only the CM's TCP segments.
// One step():
//   1. every frame the core and the neighbour table queued goes to the TAP
//      (and the capture);
//   2. a timerfd is armed (absolute CLOCK_MONOTONIC, which is steady_clock on
//      Linux) for the earliest of the core's and the table's next_deadline()
//      and the caller's `until`;
//   3. epoll waits for the TAP, the timer or SIGINT / SIGTERM (blocked and read
//      through a signalfd, so a signal never interrupts a handler);
//   4. arriving frames go to the capture, then to the neighbour table (ARP,
//      ND) or, if they are for our MAC on our VLAN and IPv4 / IPv6, to the
//      core; anything else is counted as ignored;
//   5. due timers fire (core.on_timer, table.on_timer), and step 1 again.
// Instants are steady_clock nanoseconds since its epoch, so a deadline
// converts to a timerfd value without arithmetic.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "io/loop/pcap.hpp"
#include "io/net/neighbor.hpp"
#include "io/tap/tap.hpp"
#include "iwcm/core.hpp"

namespace iwcm::io {

struct TapHostConfig {
    std::string tap;        // device name
    std::string pcap_path;  // empty: no capture
    NeighborConfig neighbors;
    bool handle_signals = true;     // SIGINT / SIGTERM end step() with kSignal
    bool kernel_neighbors = false;  // the kernel owns the address: announce nothing
    // open(): the TAP with the virtio-net header (tap.hpp), so that checksums and
    // segmentation are left to the kernel; the core must then be made for it
    // (tap_offload_config).
    bool offload = false;
    // open(): the TAP's reads and writes in batches through io_uring (tap_ring.hpp), where
    // the kernel allows it; IWCM_TAP_RING=0 in the environment turns it off.
    bool ring = true;
};

struct TapHostCounters {
    std::uint64_t frames_in = 0;
    std::uint64_t frames_out = 0;
    std::uint64_t to_core = 0;
    std::uint64_t to_neighbors = 0;
    std::uint64_t ignored = 0;       // not ours: other MAC, other VLAN, not IP
    std::uint64_t write_errors = 0;  // TAP refused a frame (dropped, as a NIC would)
};

enum class Wake : std::uint8_t { kOk, kSignal, kError };

// Whether a frame is for the core of MAC `mac` on VLAN `vlan` (kNoVlan:
// untagged): IPv4 or IPv6 to that MAC on that VLAN.
bool frame_for_core(std::span<const std::byte> frame, const MacAddr& mac, std::uint16_t vlan);

// Why a core cannot run on the frame device `device`, if it cannot: offloaded
// segments (StreamConfig::segment_offload) exceed any real MTU unless the device
// segments them (DeviceOffloads::max_segment, with offload_mss_pieces and
// checksum_partial), offloaded checksums (CoreConfig::checksum_offload) would
// leave frames on a wire that no one checks, so only two cores in memory take
// them, and partial ones (checksum_partial) need a device that finishes them.
std::optional<std::string> offload_refused(const CoreConfig& core, const std::string& device,
                                           const DeviceOffloads& offloads = {});

// `core` made for a TAP opened with TapHostConfig::offload: checksums left partial,
// and segments of segmentation offload up to TapDevice::kMaxSegment, cut by the
// kernel at the MSS (StreamConfig::offload_mss_pieces).
void tap_offload_config(CoreConfig& core);

// Blocks SIGINT and SIGTERM in the calling thread (threads started after it
// inherit the mask) and returns a non-blocking signalfd for them, or -1.
int block_signals_to_fd();

class TapHost {
public:
    // The core's MAC and VLAN are the host's: frames for other MACs and
    // VLANs are ignored. The core must outlive the host.
    static Expected<std::unique_ptr<TapHost>, std::string> open(const TapHostConfig& config,
                                                                Core& core, std::uint16_t vlan);
    // The same on a device already open (config.tap is not used).
    static Expected<std::unique_ptr<TapHost>, std::string> open_device(
        std::unique_ptr<FrameDevice> device, const TapHostConfig& config, Core& core,
        std::uint16_t vlan);
    ~TapHost();
    TapHost(const TapHost&) = delete;
    TapHost& operator=(const TapHost&) = delete;

    // steady_clock now, as an Instant.
    static Instant now();
    // Adds a local address to the core and to the neighbour table, and
    // announces it: a gratuitous ARP or an unsolicited neighbour
    // advertisement now and again from the timer (NeighborTable::announce),
    // sent by the next step() or flush().
    Result<void> add_address(IpAddr addr);

    // One round of the loop (see the file comment); returns at the latest at
    // `until`. kError leaves the reason in error().
    Wake step(Instant until);
    // Sends everything queued now (after commands given to the core).
    void flush();
    // Where the device reads without a system call (AF_XDP): the frames waiting,
    // each handled as step() does, then the after_step hooks and a flush, without
    // waiting; true if there was one. Else (a TAP) nothing: false. For a thread
    // that polls while step() sleeps in another (with the wait lock held).
    bool poll_frames();
    bool reads_without_syscall() const { return dev_->reads_without_syscall(); }
    // Another descriptor for step() to wait on: when it is readable, step()
    // calls on_ready(now) before the timers fire. At most kMaxWatches.
    static constexpr int kMaxWatches = 4;
    bool watch(int fd, std::function<void(Instant)> on_ready);
    // Called at the end of every step(), after the timers, in the order added.
    void after_step(std::function<void(Instant)> hook) { after_step_.push_back(std::move(hook)); }
    // A lock the caller of step() holds: step() releases it while it sleeps in
    // epoll_wait and takes it again before it touches the core (the runtime's
    // progress thread, src/runtime). nullptr: none.
    void set_wait_lock(std::mutex* lock) { wait_lock_ = lock; }
    // When the sleeping step() wakes at the latest (its timer), kInstantNever
    // when none sleeps: a thread that moved a deadline earlier than this must
    // wake it (watch() an eventfd).
    // Instant::min() in busy polling: the loop never sleeps, so no one wakes it.
    Instant sleeping_until() const { return sleeping_until_.load(std::memory_order_acquire); }
    // Busy polling: step() never sleeps. It reads the device whether or not epoll says a
    // frame waits, looks at the other descriptors without waiting (epoll_wait with a zero
    // timeout, the wait lock released meanwhile) and fires the timers due, so the thread
    // that calls it in a loop keeps its core. Off by default (docs/design.md "Busy
    // polling").
    void set_busy_poll(bool on);
    bool busy_poll() const { return busy_poll_; }

    NeighborTable& neighbors() { return neighbors_; }
    Core& core() { return core_; }
    const TapHostCounters& counters() const { return counters_; }
    const std::string& error() const { return error_; }
    // The signal (SIGINT or SIGTERM) of the last kSignal wake, 0 before any.
    int last_signal() const { return last_signal_; }
    FrameDevice& device() { return *dev_; }

private:
    TapHost(std::unique_ptr<FrameDevice> dev, Core& core, std::uint16_t vlan,
            const TapHostConfig& config);
    bool setup(const TapHostConfig& config);
    void handle_frame(Instant now, std::span<const std::byte> frame);
    bool for_core(std::span<const std::byte> frame) const;
    // A frame out in parts (Core::poll_transmit_parts; `payload` may be empty).
    void send(std::span<const std::byte> headers,
              std::span<const std::span<const std::byte>> payload = {});
    // A frame of the core, with what its device leaves to the link.
    void send_core(const TransmitParts& f);
    // `unfinished`: a TCP frame whose checksum the kernel finishes or vouched for, written
    // to the capture with its checksum computed, as the wire carries it.
    void capture(std::span<const std::byte> frame,
                 std::span<const std::span<const std::byte>> rest = {}, bool unfinished = false);
    void fire_timers(Instant now);
    bool arm_timer(Instant at);
    // Up to kMaxFramesPerWake frames from the device, each handled; false on a read error
    // (error_ set).
    bool read_frames();

    std::unique_ptr<FrameDevice> dev_;
    bool kernel_neighbors_;
    Core& core_;
    std::uint16_t vlan_;
    NeighborTable neighbors_;
    std::unique_ptr<PcapWriter> pcap_;
    int epoll_fd_ = -1;
    int timer_fd_ = -1;
    Instant armed_{};  // the deadline timer_fd_ was last set to
    int signal_fd_ = -1;
    std::vector<std::byte> captured_;  // capture()'s, of a frame with its checksum unfinished
    std::vector<std::pair<int, std::function<void(Instant)>>> watches_;
    std::vector<std::function<void(Instant)>> after_step_;
    std::mutex* wait_lock_ = nullptr;
    bool busy_poll_ = false;
    std::atomic<Instant> sleeping_until_{kInstantNever};
    TapHostCounters counters_;
    std::string error_;
    int last_signal_ = 0;
};

}  // namespace iwcm::io
