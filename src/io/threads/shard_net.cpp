// The in-memory network on N threads.
//
// Read first: src/io/threads/shard_net.hpp (the model), include/iwcm/shard.hpp.
#include "io/threads/shard_net.hpp"

#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <cstring>
#include <thread>

#include "iwcm/assert.hpp"
#include "iwcm/shard.hpp"

namespace iwcm::io {

// One shard's cores and its private state, on cache lines of its own.
struct alignas(64) ShardNet::Shard {
    std::uint32_t index = 0;
    std::vector<std::unique_ptr<Core>> cores;  // by host
    ShardStats stats;
    std::uint32_t spray_next = 0;
};

ShardNet::ShardNet(const ShardNetConfig& config, std::span<const CoreConfig> hosts)
    : cfg_(config),
      links_(config.shards, config.ring_slots, config.slot_bytes, config.backlog_limit) {
    IWCM_ASSERT(cfg_.shards >= 1);
    IWCM_ASSERT(!hosts.empty());
    for (const CoreConfig& h : hosts)
        macs_.push_back(mac_key(reinterpret_cast<const std::byte*>(h.mac.bytes.data())));
    for (std::uint32_t s = 0; s < cfg_.shards; ++s) {
        auto sh = std::make_unique<Shard>();
        sh->index = s;
        for (const CoreConfig& h : hosts) {
            CoreConfig c = h;
            c.port_filter = nullptr;
            c.shard_index = s;
            c.shard_count = cfg_.shards;
            c.flow_key = cfg_.key;
            sh->cores.push_back(std::make_unique<Core>(c));
        }
        shards_.push_back(std::move(sh));
    }
}

ShardNet::~ShardNet() = default;

Core& ShardNet::core(std::uint32_t shard, std::size_t host) {
    IWCM_ASSERT(shard < shards_.size());
    IWCM_ASSERT(host < macs_.size());
    return *shards_[shard]->cores[host];
}

const ShardStats& ShardNet::stats(std::uint32_t shard) const {
    IWCM_ASSERT(shard < shards_.size());
    return shards_[shard]->stats;
}

Result<void> ShardNet::add_address(std::size_t host, IpAddr addr) {
    for (auto& sh : shards_)
        if (auto r = sh->cores[host]->add_address(addr); !r) return r;
    return {};
}

Result<void> ShardNet::listen(std::size_t host, const ListenParams& params) {
    for (auto& sh : shards_)
        if (auto r = sh->cores[host]->listen(params); !r) return tl::unexpected(r.error());
    return {};
}

std::uint64_t ShardNet::mac_key(const std::byte* mac) {
    std::uint64_t k = 0;
    std::memcpy(&k, mac, 6);
    return k;
}

std::size_t ShardNet::poll(std::uint32_t s, Instant now) {
    std::size_t moved = receive_across(s, now);
    for (std::size_t h = 0; h < macs_.size(); ++h) moved += drain(s, h, now);
    publish(s);
    return moved;
}

std::size_t ShardNet::receive_across(std::uint32_t s, Instant now) {
    IWCM_ASSERT(s < shards_.size());
    Shard& sh = *shards_[s];
    const std::size_t n = links_.receive(s, [&](std::span<const std::byte> f) {
        ++sh.stats.received_across;
        // A ring carries bytes only: the hash is read from the headers again.
        std::uint64_t flow = 0;
        const bool hashed = frame_flow_hash(f, cfg_.key, flow);
        route(sh, f, now, hashed ? std::optional(flow) : std::nullopt, true);
    });
    links_.flush(s);
    return n;
}

std::size_t ShardNet::drain(std::uint32_t s, std::size_t host, Instant now) {
    IWCM_ASSERT(s < shards_.size());
    Shard& sh = *shards_[s];
    Core& c = *sh.cores[host];
    std::size_t moved = 0;
    while (auto t = c.poll_transmit_hashed()) {
        route(sh, t->frame, now, t->flow_hash, false);
        ++moved;
    }
    return moved;
}

void ShardNet::publish(std::uint32_t s) {
    links_.publish(s, [](std::uint32_t) {});
}

void ShardNet::on_timers(std::uint32_t s, Instant now) {
    for (auto& c : shards_[s]->cores) {
        auto d = c->next_deadline();
        if (d && *d <= now) c->on_timer(now);
    }
}

// A frame sent by a core of `sh` (arrived = false) or taken off a ring
// (arrived = true: it is on the queue of this shard), with its flow hash (none for a
// frame without a TCP 4-tuple). A core hands the hash of each frame it sends, so no
// header is read here.
void ShardNet::route(Shard& sh, std::span<const std::byte> frame, Instant now,
                     std::optional<std::uint64_t> flow, bool arrived) {
    // One shard owns everything (and every queue is its).
    if (cfg_.shards > 1) {
        const std::uint32_t owner = flow ? shard_of(*flow, cfg_.shards) : 0;
        std::uint32_t queue = owner;
        if (!arrived && cfg_.spray) queue = sh.spray_next++ % cfg_.shards;
        if (arrived) queue = sh.index;
        if (queue != sh.index) return send_across(sh, queue, frame);
        if (owner != sh.index) {
            // On our queue but not ours: hand it to its owner.
            ++sh.stats.handed_off;
            return send_across(sh, owner, frame);
        }
    }
    deliver(sh, frame, now, flow);
}

// flow: the frame's flow hash, when known; the core's lookup reuses it.
void ShardNet::deliver(Shard& sh, std::span<const std::byte> frame, Instant now,
                       std::optional<std::uint64_t> flow) {
    if (frame.size() >= 6) {
        const std::uint64_t dst = mac_key(frame.data());
        for (std::size_t h = 0; h < macs_.size(); ++h) {
            if (macs_[h] != dst) continue;
            ++sh.stats.delivered;
            sh.cores[h]->receive(now, frame, flow);
            return;
        }
    }
    ++sh.stats.unroutable;
}

void ShardNet::send_across(Shard& sh, std::uint32_t to, std::span<const std::byte> frame) {
    ++sh.stats.sent_across;
    (void)links_.send(sh.index, to, frame);
}

bool run_pinned(std::uint32_t threads, const std::function<void(std::uint32_t)>& body) {
    IWCM_ASSERT(threads >= 1);
    const long online = sysconf(_SC_NPROCESSORS_ONLN);
    const int cpus = online > 0 ? static_cast<int>(online) : 1;
    const int first = std::max(sched_getcpu(), 0);
    std::atomic<std::uint32_t> pinned{0};
    std::barrier start(static_cast<std::ptrdiff_t>(threads));
    std::vector<std::thread> pool;
    for (std::uint32_t i = 0; i < threads; ++i) {
        pool.emplace_back([&, i] {
            cpu_set_t set;
            CPU_ZERO(&set);
            CPU_SET((first + static_cast<int>(i)) % cpus, &set);
            if (pthread_setaffinity_np(pthread_self(), sizeof set, &set) == 0) ++pinned;
            start.arrive_and_wait();
            body(i);
        });
    }
    for (auto& t : pool) t.join();
    IWCM_ASSERT(pinned.load() <= threads);
    return pinned.load() == threads;
}

}  // namespace iwcm::io
