// The in-memory network on N threads: every host has one iwcm::Core per
// shard, and shard i (thread i) drives the cores of every host for shard i.
//
// Read first: include/iwcm/shard.hpp (the flow hash, ports that hash back),
// src/io/threads/shard_links.hpp (the only thing shards share), bench/setup_pair.hpp
// (the same wiring for one thread, without steering).
//
// A frame a core transmits is routed by its destination MAC to a host and by
// its 4-tuple to the shard that owns it: the shard of its flow hash, which the
// sending core hands with it (Core::poll_transmit_hashed), so no header is
// read; the receiving core's lookup takes the same hash. Since each core picks
// ephemeral ports that hash back to its own shard, and listeners exist in
// every shard, the owner of a frame of shard i's connections is shard i: it
// is handed to the destination host's core of the same shard without a copy
// and without touching anything another thread writes.
//
// A real NIC or TAP queue may still deliver a frame to the wrong thread (the
// kernel's tun queue choice is its own hash). That path exists here too: a
// frame whose arrival queue is another shard is copied into the ring from
// this shard to that one; the shard that takes a frame off a ring steers it
// again and, when it does not own it either, hands it on to the owner by
// ring (counted as handed_off). ShardNetConfig::spray makes every frame
// arrive on a queue chosen round-robin, to exercise that path.
//
// When a ring is full, frames wait in a per-destination backlog of the
// sending shard (in order, bounded; beyond the bound they are dropped and
// counted, as a full NIC queue drops them).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "io/threads/shard_links.hpp"
#include "iwcm/core.hpp"

namespace iwcm::io {

struct ShardNetConfig {
    std::uint32_t shards = 1;
    std::size_t ring_slots = 4096;  // per ordered pair of shards
    std::size_t slot_bytes = 2048;  // the largest frame that crosses threads
    std::size_t backlog_limit = 1u << 20;
    // Test mode: frames arrive on a queue chosen round-robin, not their owner's.
    bool spray = false;
    std::uint64_t key = 0;  // flow-hash key (include/iwcm/shard.hpp)
};

// Counters of one shard, written only by its thread.
struct ShardStats {
    std::uint64_t delivered = 0;        // frames handed to a core of this shard
    std::uint64_t sent_across = 0;      // frames this shard put on a ring
    std::uint64_t handed_off = 0;       // of those, frames that arrived here but were not ours
    std::uint64_t received_across = 0;  // frames taken off rings
    std::uint64_t unroutable = 0;       // no host has the destination MAC
};

class ShardNet {
public:
    // Every host gets one core per shard, made from its config with the
    // shard's index, count and flow key (an existing CoreConfig::port_filter
    // is dropped). Frames are handed to the cores with their flow hash.
    ShardNet(const ShardNetConfig& config, std::span<const CoreConfig> hosts);
    ~ShardNet();
    ShardNet(const ShardNet&) = delete;
    ShardNet& operator=(const ShardNet&) = delete;

    std::uint32_t shards() const { return cfg_.shards; }
    std::size_t hosts() const { return macs_.size(); }
    // A MAC address as one comparable word.
    static std::uint64_t mac_key(const std::byte* mac);
    Core& core(std::uint32_t shard, std::size_t host);
    const ShardStats& stats(std::uint32_t shard) const;
    // Frames dropped (backlog full, or larger than a slot) and frames that
    // waited for a full ring, among those shard `shard` sent across.
    std::uint64_t dropped(std::uint32_t shard) const { return links_.dropped(shard); }
    std::uint64_t backlogged(std::uint32_t shard) const { return links_.backlogged(shard); }

    // ---- before the threads start (or from one thread) ----
    // add_address / listen on every shard's core of the host.
    Result<void> add_address(std::size_t host, IpAddr addr);
    Result<void> listen(std::size_t host, const ListenParams& params);

    // ---- from shard `s`'s thread only ----
    // One pass: frames from the rings into this shard, then every core of
    // this shard drained of its frames, each delivered or put on a ring.
    // Returns the frames moved; 0 when this shard is quiet (frames on their
    // way from other shards may still come).
    std::size_t poll(std::uint32_t s, Instant now);
    // The parts of poll(), for a driver that handles events between them
    // (as bench/setup_pair.hpp does, so that an accept's reply carries the
    // ACK): frames from the rings; one core's frames; the rings written
    // since the last publish() made visible to their readers.
    std::size_t receive_across(std::uint32_t s, Instant now);
    std::size_t drain(std::uint32_t s, std::size_t host, Instant now);
    void publish(std::uint32_t s);
    // Calls on_timer on every core of the shard whose deadline has come.
    void on_timers(std::uint32_t s, Instant now);

private:
    struct Shard;
    void route(Shard& sh, std::span<const std::byte> frame, Instant now,
               std::optional<std::uint64_t> flow, bool arrived);
    void deliver(Shard& sh, std::span<const std::byte> frame, Instant now,
                 std::optional<std::uint64_t> flow);
    void send_across(Shard& sh, std::uint32_t to, std::span<const std::byte> frame);

    ShardNetConfig cfg_;
    std::vector<std::uint64_t> macs_;  // by host, as mac_key(); read-only once made
    std::vector<std::unique_ptr<Shard>> shards_;
    ShardLinks links_;
};

// Runs body(i) on `threads` threads, thread i pinned to the i-th CPU this
// process may run on (modulo their count), all released at once. Returns
// whether every thread was pinned.
bool run_pinned(std::uint32_t threads, const std::function<void(std::uint32_t)>& body);

}  // namespace iwcm::io
