// iwcm::Runtime (include/iwcm/runtime.hpp): the progress thread, the lock,
// the drain of events and the driver's services.
//
// Read first: include/iwcm/runtime.hpp, src/io/loop/event_loop.hpp (the loop the
// progress thread runs: TapHost::step releases the lock while it sleeps),
// src/io/shared/shared_host.hpp (the shared-address driver).
#include "iwcm/runtime.hpp"

#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <future>
#include <mutex>
#include <thread>

#include "io/loop/event_loop.hpp"
#include "io/loop/interface.hpp"
#include "io/shared/shared_host.hpp"
#include "iwcm/assert.hpp"
#include "random.hpp"

namespace iwcm {

namespace {

// RuntimeConfig::busy_poll_us's largest: a second in one system call.
constexpr long kMaxBusyPollUs = 1'000'000;

std::string env(const char* name) {
    const char* v = std::getenv(name);
    return v != nullptr ? v : "";
}

// A whole number in [lo, hi], decimal or 0x hex.
std::optional<long> whole(const std::string& text, long lo, long hi) {
    if (text.empty()) return std::nullopt;
    int base = 10;
    std::string_view digits = text;
    if (digits.size() > 2 && digits[0] == '0' && (digits[1] == 'x' || digits[1] == 'X')) {
        base = 16;
        digits.remove_prefix(2);
    }
    long v = 0;
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v, base);
    if (ec != std::errc{} || end != digits.data() + digits.size() || v < lo || v > hi)
        return std::nullopt;
    return v;
}

io::InterfaceOptions interface_options(const RuntimeConfig& c) {
    io::InterfaceOptions o;
    o.tap = c.tap;
    o.dev = c.dev;
    o.ip = c.ip;
    o.mac = c.mac;
    o.gateway = c.gateway;
    o.vlan = c.vlan;
    return o;
}

CoreConfig core_config(const RuntimeConfig& c, const io::Interface& iface) {
    CoreConfig cfg;
    cfg.mac = iface.mac;
    cfg.mpa.revision = c.mpa_revision;
    cfg.mpa.crc = c.crc;
    cfg.mpa.peer_to_peer = true;
    cfg.tos = static_cast<std::uint8_t>(c.tos);
    cfg.listener_grace = c.listener_grace;
    cfg.stream.keepalive = c.keepalive_idle > Duration::zero();
    if (cfg.stream.keepalive) {
        cfg.stream.keepalive_idle = c.keepalive_idle;
        cfg.stream.keepalive_interval = c.keepalive_interval;
        cfg.stream.keepalive_probes = c.keepalive_probes;
    }
    cfg.mpa.initiator_send_wait = std::chrono::milliseconds(c.settle_ms);
    cfg.connect_refused_grace = std::chrono::milliseconds(c.settle_ms);
    // The secrets of initial sequence numbers and SYN cookies (RFC 6528):
    // unpredictable to a peer, so from the kernel's generator.
    fill_random(std::as_writable_bytes(std::span(cfg.isn_secret)));
    fill_random(std::as_writable_bytes(std::span(cfg.syn_cookie_secret)));
    return cfg;
}

Duration thread_cpu_time(std::thread::native_handle_type thread) {
    clockid_t clock{};
    timespec ts{};
    if (::pthread_getcpuclockid(thread, &clock) != 0 || ::clock_gettime(clock, &ts) != 0)
        return Duration{-1};
    return std::chrono::seconds{ts.tv_sec} + std::chrono::nanoseconds{ts.tv_nsec};
}

}  // namespace

// ------------------------------------------------------------- configuration

Expected<RuntimeConfig, std::string> RuntimeConfig::from_env() {
    RuntimeConfig c;
    c.tap = env("IWCM_TAP");
    c.ip = env("IWCM_IP");
    c.mac = env("IWCM_MAC");
    c.gateway = env("IWCM_GATEWAY");
    c.dev = env("IWCM_DEV");
    c.pcap = env("IWCM_PCAP");
    c.switch_program = env("IWCM_SWITCH");
    if (const std::string m = env("IWCM_XDP_MODE"); !m.empty()) {
        if (m != "auto" && m != "native" && m != "generic")
            return fail("IWCM_XDP_MODE=" + m + ": auto, native or generic");
        c.xdp_mode = m;
    }
    if (const std::string v = env("IWCM_VLAN"); !v.empty()) {
        const auto id = whole(v, 0, 4094);
        if (!id) return fail("IWCM_VLAN=" + v + ": not a VLAN ID (0 to 4094)");
        c.vlan = static_cast<int>(*id);
    }
    if (const std::string v = env("IWCM_CRC"); !v.empty()) {
        if (v != "0" && v != "1") return fail("IWCM_CRC=" + v + ": 0 or 1");
        c.crc = v == "1";
    }
    if (const std::string v = env("IWCM_TAP_OFFLOAD"); !v.empty()) {
        if (v != "0" && v != "1") return fail("IWCM_TAP_OFFLOAD=" + v + ": 0 or 1");
        c.tap_offload = v == "1";
    }
    if (const std::string v = env("IWCM_TOS"); !v.empty()) {
        const auto tos = whole(v, 0, 255);
        if (!tos) return fail("IWCM_TOS=" + v + ": not a TOS byte (0 to 255)");
        c.tos = static_cast<int>(*tos);
    }
    if (const std::string v = env("IWCM_MPA_REV"); !v.empty()) {
        if (v != "1" && v != "2") return fail("IWCM_MPA_REV=" + v + ": 1 or 2");
        c.mpa_revision = static_cast<std::uint8_t>(v[0] - '0');
    }
    if (const std::string v = env("IWCM_SETTLE"); !v.empty()) {
        const auto ms = whole(v, 0, 60000);
        if (!ms) return fail("IWCM_SETTLE=" + v + ": milliseconds, 0 to 60000");
        c.settle_ms = static_cast<int>(*ms);
    }
    if (const std::string v = env("IWCM_BUSY_POLL"); !v.empty()) {
        const auto us = whole(v, 0, kMaxBusyPollUs);
        if (!us) return fail("IWCM_BUSY_POLL=" + v + ": microseconds, 0 (off) to 1000000");
        c.busy_poll_us = static_cast<std::uint32_t>(*us);
    }
    if (c.tap.empty() && c.dev.empty())
        return fail(std::string(
            "no interface: set IWCM_TAP and IWCM_IP (a TAP device) or IWCM_DEV (an interface "
            "shared with the kernel), as `iwarp-cm run` does"));
    if (auto v = c.validate(); !v) return fail(v.error());
    return c;
}

Expected<void, std::string> RuntimeConfig::validate() const {
    if (tap.empty() == dev.empty())
        return fail(std::string(tap.empty() ? "neither a TAP device nor an interface is named"
                                            : "a TAP device and an interface are both named"));
    if (tos < 0 || tos > 255) return fail("TOS " + std::to_string(tos) + ": 0 to 255");
    if (progress_nice && (*progress_nice < -20 || *progress_nice > 19))
        return fail("progress thread nice " + std::to_string(*progress_nice) + ": -20 to 19");
    if (settle_ms < 0 || settle_ms > 60000)
        return fail("settle " + std::to_string(settle_ms) + " ms: 0 to 60000");
    if (busy_poll_us > kMaxBusyPollUs)
        return fail("busy polling " + std::to_string(busy_poll_us) + " us: 0 (off) to 1000000");
    if (keepalive_idle < Duration::zero() ||
        (keepalive_idle > Duration::zero() &&
         (keepalive_interval <= Duration::zero() || keepalive_probes == 0)))
        return fail("keepalive: an idle time of 0 (off), or an interval and probes above 0");
    if (vlan < -1 || vlan > 4094) return fail("VLAN " + std::to_string(vlan) + ": 0 to 4094");
    if (mpa_revision != 1 && mpa_revision != 2)
        return fail("MPA revision " + std::to_string(mpa_revision) + ": 1 or 2");
    if (xdp_mode != "auto" && xdp_mode != "native" && xdp_mode != "generic")
        return fail("XDP mode " + xdp_mode + ": auto, native or generic");
    if (!dev.empty() && (!mac.empty() || !gateway.empty() || vlan >= 0))
        return fail(std::string(
            "an interface shared with the kernel takes its MAC, gateway and VLAN from the kernel"));
    return {};
}

// ------------------------------------------------------------------ the impl

struct Runtime::Impl final : Session {
    RuntimeConfig cfg;
    io::Interface iface;
    RuntimeInfo runtime_info;
    RuntimeHandler* handler = nullptr;

    // Everything below is guarded by mu, except the fds (fixed after start),
    // stop and the thread handle.
    std::mutex mu;
    // Application threads waiting for mu. A busy-polling progress thread
    // (RuntimeConfig::busy_poll_us) lets go of mu and waits while any does: it would
    // otherwise take mu again before a woken waiter runs, round after round.
    std::atomic<int> contenders{0};
    std::unique_ptr<Core> core_;
    std::unique_ptr<rdma::Device> dev_;
    std::unique_ptr<io::TapHost> tap_host;
    std::unique_ptr<io::SharedHost> shared;
    io::TapHost* host = nullptr;
    Instant now_{};

    struct Pending {
        std::uint64_t token = 0;
        IpAddr hop;
        Instant deadline;
        std::string what;  // "10.0.0.2" or "gateway 10.0.0.1"
    };
    std::vector<Pending> pending;
    std::vector<std::pair<rdma::CqHandle, bool>> completions;  // from the device's hook
    std::deque<RuntimeEvent> queue;                            // without a handler
    bool draining = false;

    int wake_fd = -1;   // an application thread ends the progress thread's sleep
    int event_fd = -1;  // readable while queue holds an event
    std::atomic<bool> stop{false};
    std::thread thread;
    pid_t thread_id = 0;  // the progress thread's, for its priority
    std::string thread_error;
    Duration close_limit = std::chrono::seconds{2};

    ~Impl() override {
        if (wake_fd >= 0) ::close(wake_fd);
        if (event_fd >= 0) ::close(event_fd);
    }

    // ---- Session ----
    Instant now() const override { return now_; }
    Core& core() override { return *core_; }
    rdma::Device& device() override { return *dev_; }
    const RuntimeInfo& info() const override { return runtime_info; }

    Expected<ListenHandle, std::string> listen(const ListenParams& lp) override {
        if (shared) return shared->listen(lp);
        auto l = core_->listen(lp);
        if (!l)
            return fail("listen on " + lp.local.to_string() + ": " +
                        std::string(to_string(l.error())));
        return *l;
    }

    void destroy_listen(ListenHandle listener) override {
        if (shared)
            shared->destroy_listen(now_, listener);
        else
            (void)core_->destroy_listen(now_, listener);
    }

    Expected<ConnHandle, std::string> connect(ConnectParams cp) override {
        if (cp.local.addr.is_unspecified() || cp.local.addr.family() != iface.addr.family())
            cp.local.addr = iface.addr;
        if (cp.vlan == kNoVlan) cp.vlan = iface.vlan;
        if (shared) return shared->connect(now_, cp);
        auto c = core_->connect(now_, cp);
        if (!c)
            return fail("connect to " + cp.remote.to_string() + ": " +
                        std::string(to_string(c.error())));
        return *c;
    }

    Expected<void, std::string> resolve(const IpAddr& dst, std::uint64_t token,
                                        Duration timeout) override {
        if (dst == iface.addr) return fail("connections to our own address are not supported");
        if (const std::string why = io::not_unicast(dst, iface); !why.empty())
            return fail(dst.to_string() + ": " + why);
        Pending p;
        p.token = token;
        p.deadline = now_ + timeout;
        if (shared) {
            auto hop = shared->next_hop(dst);
            if (!hop) return fail(hop.error());
            if (auto r = shared->resolve(*hop); !r) return fail(r.error());
            p.hop = *hop;
        } else {
            auto hop = iface.next_hop(dst);
            if (!hop)
                return fail(dst.to_string() + ": not in our subnet and no gateway is configured");
            host->neighbors().resolve(now_, *hop, iface.addr);
            p.hop = *hop;
        }
        p.what = (p.hop != dst ? "gateway " : "") + p.hop.to_string();
        pending.push_back(std::move(p));
        return {};
    }

    // ---- events ----
    void deliver(RuntimeEvent event) {
        const bool was_empty = queue.empty();
        queue.push_back(std::move(event));
        if (was_empty) {
            const std::uint64_t one = 1;
            (void)!::write(event_fd, &one, sizeof one);
        }
    }

    void resolved(std::uint64_t token, std::optional<MacAddr> mac, std::string error) {
        if (handler != nullptr) {
            handler->on_resolved(*this, token, mac, error);
            return;
        }
        deliver(ResolvedEvent{token, mac, std::move(error)});
    }

    // Resolutions that ended (answered, failed or timed out); true if any did.
    bool check_pending() {
        bool any = false;
        for (std::size_t i = 0; i < pending.size();) {
            const Pending p = pending[i];
            std::optional<MacAddr> mac;
            std::string error;
            bool done = true;
            if (shared) {
                MacAddr m;
                const auto st = shared->peer(p.hop, m);
                if (st == io::PeerStatus::kResolved)
                    mac = m;
                else if (st == io::PeerStatus::kFailed)
                    error = "cannot resolve " + p.what + ": the kernel's neighbour entry failed";
                else
                    done = false;
            } else {
                const auto st = host->neighbors().status(now_, p.hop);
                if (st == io::NeighborStatus::kResolved)
                    mac = host->neighbors().lookup(now_, p.hop);
                else if (st == io::NeighborStatus::kFailed || st == io::NeighborStatus::kUnknown)
                    error = "cannot resolve " + p.what + ": no answer";
                else
                    done = false;
            }
            if (!done && now_ >= p.deadline) {
                done = true;
                error = "cannot resolve " + p.what + ": no answer before the timeout";
            }
            if (!done) {
                ++i;
                continue;
            }
            pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(i));
            resolved(p.token, mac, std::move(error));
            any = true;
        }
        return any;
    }

    // Everything the core, the device and the resolutions have to say, until
    // none of them has more (a handler's commands may make more).
    void drain() {
        IWCM_ASSERT(!draining);
        draining = true;
        for (bool any = true; any;) {
            any = false;
            while (auto e = core_->poll_event()) {
                any = true;
                if (dev_->on_event(now_, *e)) continue;
                if (handler != nullptr) {
                    handler->on_event(*this, *e);
                } else {
                    CoreEvent ce{*e, {e->private_data.begin(), e->private_data.end()}};
                    ce.event.private_data = {};
                    deliver(std::move(ce));
                }
            }
            while (auto q = dev_->poll_qp_event()) {
                any = true;
                if (handler != nullptr)
                    handler->on_qp_event(*this, *q);
                else
                    deliver(*q);
            }
            if (!completions.empty()) {
                any = true;
                auto done = std::move(completions);
                completions.clear();
                for (const auto& [cq, solicited] : done) {
                    if (handler != nullptr)
                        handler->on_completion(*this, cq, solicited);
                    else
                        deliver(CompletionEvent{cq, solicited});
                }
            }
            if (!pending.empty() && check_pending()) any = true;
        }
        draining = false;
    }

    Instant pending_deadline() const {
        Instant at = kInstantNever;
        for (const Pending& p : pending) at = std::min(at, p.deadline);
        return at;
    }

    // After an application's call: wake the progress thread if it sleeps past
    // the earliest deadline now armed.
    void wake_if_needed() {
        Instant at = pending_deadline();
        if (auto d = core_->next_deadline()) at = std::min(at, *d);
        if (auto d = host->neighbors().next_deadline()) at = std::min(at, *d);
        if (at < host->sleeping_until()) wake();
    }

    void wake() const {
        const std::uint64_t one = 1;
        (void)!::write(wake_fd, &one, sizeof one);
    }

    // mu for an application thread (see contenders).
    void lock_for_application() {
        contenders.fetch_add(1, std::memory_order_acq_rel);
        mu.lock();
        contenders.fetch_sub(1, std::memory_order_acq_rel);
    }

    void progress() {
        std::unique_lock lock(mu);
        const bool busy = host->busy_poll();
        while (!stop.load(std::memory_order_acquire)) {
            const io::Wake w = host->step(pending_deadline());
            if (w == io::Wake::kError) {
                thread_error = host->error();
                break;
            }
            if (busy && contenders.load(std::memory_order_acquire) > 0) {
                lock.unlock();
                while (contenders.load(std::memory_order_acquire) > 0) std::this_thread::yield();
                lock.lock();
            }
        }
    }
};

// ------------------------------------------------------------------- Runtime

Expected<std::unique_ptr<Runtime>, std::string> Runtime::start(const RuntimeConfig& config,
                                                               RuntimeHandler* handler) {
    if (auto v = config.validate(); !v) return fail(v.error());
    auto iface = io::parse_interface(interface_options(config));
    if (!iface) return fail(iface.error());
    auto impl = std::make_unique<Impl>();
    impl->cfg = config;
    impl->iface = *iface;
    impl->handler = handler;
    CoreConfig core_cfg = core_config(config, *iface);
    // TAP mode: the virtio-net header where the kernel has it (tap.hpp).
    const bool tap_offload =
        config.dev.empty() && config.tap_offload && io::TapDevice::kernel_offloads();
    if (tap_offload) io::tap_offload_config(core_cfg);
    impl->core_ = std::make_unique<Core>(core_cfg);
    impl->dev_ = std::make_unique<rdma::Device>(*impl->core_);
    Impl* self = impl.get();
    impl->dev_->set_completion_hook([self](rdma::CqHandle cq, bool solicited) {
        self->completions.emplace_back(cq, solicited);
    });
    impl->wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    impl->event_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (impl->wake_fd < 0 || impl->event_fd < 0)
        return fail(std::string("eventfd: ") + std::strerror(errno));

    RuntimeInfo& info = impl->runtime_info;
    info.addr = iface->addr;
    info.prefix = iface->prefix;
    info.mac = iface->mac;
    info.vlan = iface->vlan;
    if (!config.dev.empty()) {
        auto rtnl = io::Rtnl::open();
        if (!rtnl) return fail(config.dev + ": " + rtnl.error());
        if (auto link = io::SharedHost::probe(*rtnl, config.dev); link && link->mtu != 0)
            info.mtu = link->mtu;
        io::SharedHostConfig sc;
        sc.dev = config.dev;
        sc.pcap_path = config.pcap;
        sc.handle_signals = false;
        if (!config.switch_program.empty())
            sc.switch_command = {config.switch_program, "switch",       "--dev", config.dev,
                                 "--xdp-mode",          config.xdp_mode};
        sc.busy_poll_us = config.busy_poll_us;
        if (!sc.switch_command.empty() && config.busy_poll_us > 0) {
            sc.switch_command.emplace_back("--busy-poll");
            sc.switch_command.push_back(std::to_string(config.busy_poll_us));
        }
        sc.mode = config.xdp_mode == "native"    ? io::XskDevice::Mode::kNative
                  : config.xdp_mode == "generic" ? io::XskDevice::Mode::kGeneric
                                                 : io::XskDevice::Mode::kAuto;
        auto shared = io::SharedHost::open(sc, std::move(*rtnl), *impl->core_, iface->addr);
        if (!shared) return fail(config.dev + ": " + shared.error());
        impl->shared = std::move(*shared);
        impl->host = &impl->shared->host();
        info.device = config.dev;
        info.shared = true;
    } else {
        io::TapHostConfig hc;
        hc.tap = config.tap;
        hc.pcap_path = config.pcap;
        hc.handle_signals = false;
        hc.offload = tap_offload;
        auto host = io::TapHost::open(hc, *impl->core_, iface->vlan);
        if (!host) return fail(host.error());
        impl->tap_host = std::move(*host);
        impl->tap_host->set_busy_poll(config.busy_poll_us > 0);
        impl->host = impl->tap_host.get();
        if (auto r = impl->host->add_address(iface->addr); !r)
            return fail(config.ip + ": " + std::string(to_string(r.error())));
        info.device = config.tap;
    }
    const int wake_fd = impl->wake_fd;
    if (!impl->host->watch(wake_fd, [wake_fd](Instant) {
            std::uint64_t n = 0;
            (void)!::read(wake_fd, &n, sizeof n);
        }))
        return fail(std::string("the progress loop cannot watch its wake-up descriptor"));
    impl->host->after_step([self](Instant now) {
        self->now_ = now;
        self->drain();
    });
    impl->host->set_wait_lock(&impl->mu);
    {
        std::lock_guard lock(impl->mu);
        impl->now_ = io::TapHost::now();
        impl->host->flush();  // the address's announcement
    }
    // The progress thread does what a kernel's softirq does for siw: placing a frame's
    // bytes, answering with ACKs and FPDUs. An application that busy-polls its memory
    // or CQ (perftest) keeps its core at 100 %; at the same nice, CFS lets the woken
    // progress thread preempt it only after the wakeup granularity (milliseconds), so
    // the thread asks for RuntimeConfig::progress_nice (when allowed: root, or
    // RLIMIT_NICE) and takes the CPU as soon as a frame wakes it.
    std::promise<pid_t> started;
    std::future<pid_t> tid = started.get_future();
    // A busy-polling thread never sleeps: at nice -20 it would take nearly all of a core
    // that an application thread shares with it, so it keeps the process's nice.
    const std::optional<int> nice = config.busy_poll_us > 0 ? std::nullopt : config.progress_nice;
    impl->thread = std::thread([self, nice, started = std::move(started)]() mutable {
        const pid_t me = ::gettid();
        if (nice) (void)::setpriority(PRIO_PROCESS, static_cast<id_t>(me), *nice);
        started.set_value(me);
        self->progress();
    });
    impl->thread_id = tid.get();
    return std::unique_ptr<Runtime>(new Runtime(std::move(impl)));
}

Runtime::Runtime(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Runtime::~Runtime() {
    Impl& m = *impl_;
    m.stop.store(true, std::memory_order_release);
    m.wake();
    if (m.thread.joinable()) m.thread.join();
    // The progress thread is gone: this thread drives the loop until every
    // connection that is closing has closed, or the limit passes; what is
    // still open then is reset (as a process's exit resets its sockets'
    // connections that no one closed).
    std::unique_lock lock(m.mu);
    const Instant limit = io::TapHost::now() + m.close_limit;
    while (m.core_->open_nodes() > 0 && io::TapHost::now() < limit) {
        if (m.host->step(std::min(limit, m.pending_deadline())) != io::Wake::kOk) break;
    }
    if (m.core_->open_nodes() > 0) {
        m.now_ = io::TapHost::now();
        (void)m.core_->teardown_connections(m.now_, m.iface.addr);
        m.drain();
    }
    m.host->flush();
    m.host->set_wait_lock(nullptr);
}

bool Runtime::poll_inline() {
    Impl& m = *impl_;
    if (!m.host->reads_without_syscall()) return false;  // a TAP: the lock is not taken
    std::unique_lock lock(m.mu, std::try_to_lock);
    if (!lock.owns_lock()) return false;
    IWCM_ASSERT(!m.draining);
    m.now_ = io::TapHost::now();
    if (!m.host->poll_frames()) return false;  // its after_step hook drained
    m.wake_if_needed();
    return true;
}

const RuntimeInfo& Runtime::info() const {
    return impl_->runtime_info;
}

int Runtime::event_fd() const {
    return impl_->event_fd;
}

std::optional<RuntimeEvent> Runtime::poll_event() {
    impl_->lock_for_application();
    std::lock_guard lock(impl_->mu, std::adopt_lock);
    auto& q = impl_->queue;
    if (q.empty()) return std::nullopt;
    RuntimeEvent e = std::move(q.front());
    q.pop_front();
    if (q.empty()) {
        std::uint64_t n = 0;
        (void)!::read(impl_->event_fd, &n, sizeof n);
    }
    return e;
}

std::optional<RuntimeEvent> Runtime::wait_event(Duration timeout) {
    const Instant until = io::TapHost::now() + timeout;
    for (;;) {
        if (auto e = poll_event()) return e;
        const Duration left = until - io::TapHost::now();
        if (left <= Duration::zero()) return std::nullopt;
        pollfd p{impl_->event_fd, POLLIN, 0};
        const auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
        (void)::poll(&p, 1, static_cast<int>(std::min<std::int64_t>(ms, INT32_MAX)));
    }
}

void Runtime::set_close_limit(Duration limit) {
    std::lock_guard lock(impl_->mu);
    impl_->close_limit = limit;
}

Duration Runtime::progress_cpu_time() const {
    return thread_cpu_time(impl_->thread.native_handle());
}

int Runtime::progress_nice() const {
    errno = 0;
    const int n = ::getpriority(PRIO_PROCESS, static_cast<id_t>(impl_->thread_id));
    IWCM_ASSERT(errno == 0);  // the thread lives as long as the runtime
    return n;
}

Runtime::Guard::Guard(Runtime& rt) : rt_(rt) {
    rt_.impl_->lock_for_application();
    rt_.impl_->now_ = io::TapHost::now();
}

Runtime::Guard::~Guard() {
    Impl& m = *rt_.impl_;
    if (!m.draining) {
        m.drain();
        m.host->flush();
        m.wake_if_needed();
    }
    m.mu.unlock();
}

Session& Runtime::Guard::session() {
    return *rt_.impl_;
}

}  // namespace iwcm
