// The TAP driver on N threads. Read first: tap_shards.hpp, event_loop.hpp.
#include "io/tap/tap_shards.hpp"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <optional>

#include "iwcm/assert.hpp"
#include "iwcm/shard.hpp"

namespace iwcm::io {

namespace {

constexpr std::uint64_t kQueueTag = 1;
constexpr std::uint64_t kTimerTag = 2;
constexpr std::uint64_t kWakeTag = 3;
constexpr std::uint64_t kSignalTag = 4;
constexpr std::uint64_t kWatchTag = 5;
constexpr int kMaxFramesPerWake = 256;
// The largest frame that may cross threads: a 9000-byte MTU, tagged, with room.
constexpr std::size_t kSlotBytes = 9216 + 64;

std::string errno_text(const std::string& what) {
    return what + ": " + std::strerror(errno);
}

}  // namespace

// One queue, its core and its loop; touched by its thread only once started.
struct alignas(64) TapShards::Shard {
    std::uint32_t index = 0;
    std::unique_ptr<FrameDevice> queue;
    std::unique_ptr<Core> core;
    int epoll_fd = -1;
    int timer_fd = -1;
    int wake_fd = -1;
    std::vector<std::byte> rx_buf = std::vector<std::byte>(TapDevice::kMaxFrame);
    TapShardCounters counters;
    std::string error;
};

TapShards::TapShards(const TapShardsConfig& config, const CoreConfig& core, std::uint16_t vlan)
    : vlan_(vlan), mac_(core.mac), neighbors_(core.mac, vlan, config.neighbors) {}

Expected<std::unique_ptr<TapShards>, std::string> TapShards::open(const TapShardsConfig& config,
                                                                  const CoreConfig& core,
                                                                  std::uint16_t vlan) {
    if (config.shards < 1) return fail(std::string("at least one thread"));
    if (core.mac.is_multicast()) return fail(std::string("the CM's MAC must be unicast"));
    if (auto why = offload_refused(core, config.tap)) return fail(*why);
    std::unique_ptr<TapShards> t(new TapShards(config, core, vlan));
    if (!t->setup(config, core)) return fail(t->open_error_);
    return t;
}

bool TapShards::setup(const TapShardsConfig& config, const CoreConfig& core) {
    const std::uint32_t n = config.shards;
    announce_ = config.announce;
    links_ = std::make_unique<ShardLinks>(n, config.ring_slots, kSlotBytes, 1u << 16);
    if (config.handle_signals && (signal_fd_ = block_signals_to_fd()) < 0) {
        open_error_ = errno_text("signalfd");
        return false;
    }
    for (std::uint32_t s = 0; s < n; ++s) {
        auto sh = std::make_unique<Shard>();
        sh->index = s;
        if (!open_queue(config, s, sh->queue)) return false;
        CoreConfig c = core;
        c.shard_index = s;
        c.shard_count = n;
        c.flow_key = kFlowKey;
        sh->core = std::make_unique<Core>(c);
        sh->epoll_fd = ::epoll_create1(EPOLL_CLOEXEC);
        sh->timer_fd = ::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
        sh->wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        auto add = [&](int fd, std::uint64_t tag) {
            epoll_event ev{};
            ev.events = EPOLLIN;
            ev.data.u64 = tag;
            return fd >= 0 && ::epoll_ctl(sh->epoll_fd, EPOLL_CTL_ADD, fd, &ev) == 0;
        };
        bool ok = sh->epoll_fd >= 0 && add(sh->queue->fd(), kQueueTag) &&
                  add(sh->timer_fd, kTimerTag) && add(sh->wake_fd, kWakeTag);
        if (ok && s == 0 && signal_fd_ >= 0) ok = add(signal_fd_, kSignalTag);
        shards_.push_back(std::move(sh));
        if (!ok) {
            open_error_ = errno_text("epoll/timerfd/eventfd of thread " + std::to_string(s));
            return false;
        }
    }
    return true;
}

bool TapShards::open_queue(const TapShardsConfig& config, std::uint32_t s,
                           std::unique_ptr<FrameDevice>& q) {
    if (config.open_queue) {
        auto d = config.open_queue(s);
        if (!d) open_error_ = d.error();
        if (d) q = std::move(*d);
        return d.has_value();
    }
    auto d = TapDevice::open(config.tap, true);
    if (!d) {
        open_error_ = d.error();
        return false;
    }
    q = std::make_unique<TapDevice>(std::move(*d));
    return true;
}

TapShards::~TapShards() {
    for (auto& sh : shards_)
        for (int fd : {sh->epoll_fd, sh->timer_fd, sh->wake_fd})
            if (fd >= 0) ::close(fd);
    if (signal_fd_ >= 0) ::close(signal_fd_);
    // Queue 0's device may own what the others borrow (XskDevice::open_queue).
    while (!shards_.empty()) shards_.pop_back();
}

Core& TapShards::core(std::uint32_t s) {
    IWCM_ASSERT(s < shards_.size());
    return *shards_[s]->core;
}

const TapShardCounters& TapShards::counters(std::uint32_t s) const {
    IWCM_ASSERT(s < shards_.size());
    return shards_[s]->counters;
}

const std::string& TapShards::error(std::uint32_t s) const {
    IWCM_ASSERT(s < shards_.size());
    return shards_[s]->error;
}

Result<void> TapShards::add_address(IpAddr addr) {
    for (auto& sh : shards_)
        if (auto r = sh->core->add_address(addr, vlan_); !r) return r;
    neighbors_.add_address(addr);
    if (announce_) neighbors_.announce(TapHost::now(), addr);
    return {};
}

Result<ListenHandle> TapShards::listen(const ListenParams& params) {
    std::optional<ListenHandle> first;
    for (auto& sh : shards_) {
        auto r = sh->core->listen(params);
        if (!r) return r;
        // Every core made its first listener alike: one handle names them all.
        IWCM_ASSERT(!first || *first == *r);
        first = *r;
    }
    IWCM_ASSERT(first.has_value());
    return *first;
}

bool TapShards::watch(int fd, std::function<void(Instant)> on_ready) {
    IWCM_ASSERT(fd >= 0 && !shards_.empty());
    if (on_watch_) return false;
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = kWatchTag;
    if (::epoll_ctl(shards_[0]->epoll_fd, EPOLL_CTL_ADD, fd, &ev) != 0) return false;
    on_watch_ = std::move(on_ready);
    return true;
}

void TapShards::wake(std::uint32_t s) {
    const std::uint64_t one = 1;
    (void)!::write(shards_[s]->wake_fd, &one, sizeof one);
}

void TapShards::wake_all() {
    for (std::uint32_t s = 0; s < shards_.size(); ++s) wake(s);
}

void TapShards::flush(std::uint32_t s) {
    Shard& sh = *shards_[s];
    auto send = [&](std::span<const std::byte> headers,
                    std::span<const std::span<const std::byte>> payload) {
        ++sh.counters.tap.frames_out;
        if (sh.queue->write_parts(headers, payload) != 0) ++sh.counters.tap.write_errors;
    };
    // As TapHost::flush: the neighbour table first, the core's frames in two parts.
    for (int round = 0; round < 2; ++round) {
        if (s == 0)
            while (auto f = neighbors_.poll_transmit()) send(*f, {});
        while (auto f = sh.core->poll_transmit_parts()) send(f->headers, f->payload);
    }
    sh.queue->flush();
    links_->flush(s);
    links_->publish(s, [this](std::uint32_t to) { wake(to); });
}

// flow: the frame's flow hash when arrived() computed it (the core's lookup reuses it).
void TapShards::handle_local(Shard& sh, Instant now, std::span<const std::byte> frame,
                             std::optional<std::uint64_t> flow) {
    if (sh.index == 0 && neighbors_.receive(now, frame)) {
        ++sh.counters.tap.to_neighbors;
    } else if (frame_for_core(frame, mac_, vlan_)) {
        ++sh.counters.tap.to_core;
        sh.core->receive(now, frame, flow);
    } else {
        ++sh.counters.tap.ignored;
    }
}

void TapShards::arrived(Shard& sh, Instant now, std::span<const std::byte> frame) {
    ++sh.counters.tap.frames_in;
    // A unicast frame for another MAC (a bridge floods them) is nobody's here:
    // not worth a trip to another thread.
    const bool group = !frame.empty() && (std::to_integer<unsigned>(frame[0]) & 0x01) != 0;
    if (frame.size() < 6 || (!group && std::memcmp(frame.data(), mac_.bytes.data(), 6) != 0)) {
        ++sh.counters.tap.ignored;
        return;
    }
    std::uint64_t flow = 0;
    const bool hashed = frame_flow_hash(frame, kFlowKey, flow);
    const std::uint32_t owner = hashed ? shard_of(flow, shards()) : 0;
    if (owner == sh.index)
        return handle_local(sh, now, frame, hashed ? std::optional(flow) : std::nullopt);
    ++sh.counters.handed_off;
    if (!links_->send(sh.index, owner, frame)) ++sh.counters.tap.ignored;
}

bool TapShards::read_queue(Shard& sh) {
    for (int k = 0; k < kMaxFramesPerWake; ++k) {
        long len = sh.queue->read(sh.rx_buf);
        if (len < 0) {
            errno = static_cast<int>(-len);
            sh.error =
                errno_text("reading queue " + std::to_string(sh.index) + " of " + sh.queue->name());
            return false;
        }
        if (len == 0) break;
        arrived(sh, TapHost::now(),
                std::span<const std::byte>(sh.rx_buf.data(), static_cast<std::size_t>(len)));
    }
    return true;
}

void TapShards::fire_timers(Shard& sh, Instant now) {
    if (auto d = sh.core->next_deadline(); d && *d <= now) sh.core->on_timer(now);
    if (sh.index != 0) return;
    if (auto d = neighbors_.next_deadline(); d && *d <= now) neighbors_.on_timer(now);
}

Wake TapShards::step(std::uint32_t s, Instant until) {
    IWCM_ASSERT(s < shards_.size());
    Shard& sh = *shards_[s];
    flush(s);
    Instant at = until;
    if (auto d = sh.core->next_deadline()) at = std::min(at, *d);
    if (auto d = s == 0 ? neighbors_.next_deadline() : std::nullopt) at = std::min(at, *d);
    itimerspec spec{};
    const auto ns = std::max<std::int64_t>(at.time_since_epoch().count(), 1);
    spec.it_value.tv_sec = static_cast<time_t>(ns / 1'000'000'000);
    spec.it_value.tv_nsec = static_cast<long>(ns % 1'000'000'000);
    if (::timerfd_settime(sh.timer_fd, TFD_TIMER_ABSTIME, &spec, nullptr) != 0) {
        sh.error = errno_text("timerfd_settime");
        return Wake::kError;
    }
    epoll_event events[5];
    const int n = ::epoll_wait(sh.epoll_fd, events, 5, -1);
    if (n < 0 && errno != EINTR) {
        sh.error = errno_text("epoll_wait");
        return Wake::kError;
    }
    Wake result = Wake::kOk;
    for (int i = 0; i < n; ++i) {
        const std::uint64_t tag = events[i].data.u64;
        std::uint64_t drained = 0;
        if (tag == kQueueTag && !read_queue(sh)) return Wake::kError;
        if (tag == kTimerTag) (void)!::read(sh.timer_fd, &drained, sizeof drained);
        if (tag == kWakeTag) (void)!::read(sh.wake_fd, &drained, sizeof drained);
        if (tag == kWatchTag) on_watch_(TapHost::now());
        if (tag != kSignalTag) continue;
        signalfd_siginfo info{};
        while (::read(signal_fd_, &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
            result = Wake::kSignal;
            last_signal_ = static_cast<int>(info.ssi_signo);
        }
    }
    const Instant now = TapHost::now();
    sh.counters.received_across += links_->receive(
        s, [&](std::span<const std::byte> f) { handle_local(sh, now, f, std::nullopt); });
    fire_timers(sh, TapHost::now());
    if (after_step_) after_step_(s, TapHost::now());
    flush(s);
    return result;
}

}  // namespace iwcm::io
