// The TAP driver on N threads: a multi-queue TAP device (IFF_MULTI_QUEUE),
// one queue, one iwcm::Core and one epoll loop per thread.
//
// Read first: src/io/loop/event_loop.hpp (the one-thread driver this follows step
// by step), include/iwcm/shard.hpp (steering, ports that hash back),
// src/io/threads/shard_links.hpp (how a frame reaches the thread that owns it).
//
// The kernel picks the queue of a frame it sends to us by its own flow hash,
// or, once we sent a frame of that flow, the queue we sent it on (tun's flow
// steering). So the first frames of a connection (a peer's SYN) may arrive on
// any queue: the thread that reads a frame steers it by our flow hash, and a
// frame it does not own goes to its owner through the shard links, which
// wakes the owner's loop through an eventfd (one write per batch). The owner
// answers on its own queue, and from then on the kernel delivers the flow
// there. An ICMP error goes to the shard of the connection it quotes; frames
// without a TCP 4-tuple (ARP, neighbour discovery, echoes) belong to shard 0,
// which keeps the neighbour table and reads the signals.
//
// Each core gets its shard (CoreConfig::shard_index, shard_count), so connect() picks
// ports whose frames come back to it; listen() makes a listener in every
// shard. One AF_XDP socket per queue fits the same shape.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "io/loop/event_loop.hpp"
#include "io/loop/frame_device.hpp"
#include "io/tap/tap.hpp"
#include "io/threads/shard_links.hpp"
#include "iwcm/core.hpp"

namespace iwcm::io {

struct TapShardsConfig {
    std::string tap;  // device name; made multi-queue if it does not exist
    // When set, queue s is open_queue(s) instead of queue s of the TAP (the
    // AF_XDP sockets of shared-address mode: XskDevice::open_queue).
    std::function<Expected<std::unique_ptr<FrameDevice>, std::string>(std::uint32_t)> open_queue;
    // Announce an added address (gratuitous ARP / unsolicited advertisement):
    // off where the kernel owns the address and answers for it.
    bool announce = true;
    std::uint32_t shards = 2;
    NeighborConfig neighbors;
    bool handle_signals = true;  // SIGINT / SIGTERM end shard 0's step() with kSignal
    std::size_t ring_slots = 1024;
};

struct TapShardCounters {
    TapHostCounters tap;                // of this shard's queue
    std::uint64_t handed_off = 0;       // read here, owned by another shard
    std::uint64_t received_across = 0;  // read by another shard, owned here
};

class TapShards {
public:
    // The flow hash's key, for the steering and the cores alike (they must
    // agree: a core's lookup reuses the hash arrived() computed), and for
    // whoever picks ports for the cores. Zero: the interop tests check the
    // port choice with the hash written again in Python.
    static constexpr std::uint64_t kFlowKey = 0;

    // Opens `config.shards` queues of the device, a core on each (from
    // `core`, with the shard's port filter) and their loops. Signals are
    // blocked here, in the calling thread, so that the threads started after
    // inherit the mask.
    static Expected<std::unique_ptr<TapShards>, std::string> open(const TapShardsConfig& config,
                                                                  const CoreConfig& core,
                                                                  std::uint16_t vlan);
    ~TapShards();
    TapShards(const TapShards&) = delete;
    TapShards& operator=(const TapShards&) = delete;

    std::uint32_t shards() const { return static_cast<std::uint32_t>(shards_.size()); }
    Core& core(std::uint32_t s);
    // Shard 0's: use it from shard 0's thread (or before the threads start).
    NeighborTable& neighbors() { return neighbors_; }

    // ---- before the threads start ----
    Result<void> add_address(IpAddr addr);
    Result<ListenHandle> listen(const ListenParams& params);
    // Another descriptor for shard 0's step() to wait on (the kernel's
    // notifications in shared-address mode): when readable, on_ready(now) runs
    // in shard 0's thread before the timers fire. One at most.
    bool watch(int fd, std::function<void(Instant)> on_ready);
    // Called at the end of every shard's step(), in that shard's thread, with
    // its index (one hook for all).
    void after_step(std::function<void(std::uint32_t, Instant)> hook) {
        after_step_ = std::move(hook);
    }

    // ---- from shard s's thread ----
    // One round of shard s's loop (TapHost::step's, with the frames other
    // shards handed over); returns at the latest at `until`, or when woken.
    Wake step(std::uint32_t s, Instant until);
    // Sends what shard s's core (and for shard 0 the neighbour table) queued.
    void flush(std::uint32_t s);
    const TapShardCounters& counters(std::uint32_t s) const;
    const std::string& error(std::uint32_t s) const;

    // ---- from any thread ----
    // Makes every shard's step() return soon (an eventfd write each).
    void wake_all();
    int last_signal() const { return last_signal_.load(); }

private:
    struct Shard;
    TapShards(const TapShardsConfig& config, const CoreConfig& core, std::uint16_t vlan);
    bool setup(const TapShardsConfig& config, const CoreConfig& core);
    bool open_queue(const TapShardsConfig& config, std::uint32_t s,
                    std::unique_ptr<FrameDevice>& q);
    void wake(std::uint32_t s);
    void arrived(Shard& sh, Instant now, std::span<const std::byte> frame);
    void handle_local(Shard& sh, Instant now, std::span<const std::byte> frame,
                      std::optional<std::uint64_t> flow);
    bool read_queue(Shard& sh);
    void fire_timers(Shard& sh, Instant now);

    std::uint16_t vlan_;
    MacAddr mac_;
    std::vector<std::unique_ptr<Shard>> shards_;
    std::unique_ptr<ShardLinks> links_;
    NeighborTable neighbors_;
    int signal_fd_ = -1;
    std::atomic<int> last_signal_{0};
    std::string open_error_;
    bool announce_ = true;
    std::function<void(Instant)> on_watch_;
    std::function<void(std::uint32_t, Instant)> after_step_;
};

}  // namespace iwcm::io
