// iwarp-cm connect --count N --threads T: the connections of --count on T
// threads, each with a queue of a multi-queue TAP (or with --dev an AF_XDP
// socket on a receive queue) and its own core.
//
// Read first: tools/connect_many.cpp (the one-thread run, and what each
// phase measures), src/io/tap/tap_shards.hpp (the queues, the cores, frames
// handed to the thread that owns them), docs/cli.md "Every core".
//
// Thread s runs its share of the N connections (and of --parallel) on core s,
// whose port filter picks ephemeral ports that hash back to s: the SYN leaves
// on queue s, and the kernel's tun steers the flow's replies to the queue it
// last saw it on. Thread 0 keeps the neighbour table: it resolves the peer's
// MAC while the others wait with their first slots started (so, as with one
// thread, only those pay the resolution). A thread whose share is done and
// whose core is quiet keeps reading its queue until every thread is (at most
// kDrainLimit), so that no frame of another thread's flow that lands there
// is lost. Per frame nothing is shared; per event, a few atomics.
//
// With --dev (shared-address mode, src/io/shared/shared_shards.hpp) thread s has the
// AF_XDP socket on receive queue s; its ports are reserved in the kernel and
// hash back to s (io::PortPool, a mutex per connection); the kernel's route
// names the next hop and the kernel resolves it, asked and read by thread 0.
// The interface's RSS (or a veth's sender) picks the queue of a reply by its
// own hash, so replies often arrive on another thread's queue and are handed
// over.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <memory>
#include <optional>
#include <thread>

#include "io/tap/tap_shards.hpp"
#include "iwcm/assert.hpp"
#include "tools/connect.hpp"
#include "tools/tap_threads.hpp"

namespace iwcm::tools {

namespace {

// How long a thread whose share is done waits for its last nodes and for
// the other threads (whose frames may come through its queue).
constexpr auto kDrainLimit = std::chrono::seconds(5);

// Thread s's share of `total` among n (the first total % n get one more).
unsigned share(unsigned total, unsigned n, unsigned s) {
    return total / n + (s < total % n ? 1 : 0);
}

// What the threads share: written once (the MAC) or per event, never per frame.
struct Shared {
    std::atomic<bool> mac_ready{false};
    MacAddr mac;                    // written by thread 0 before mac_ready
    std::atomic<bool> stop{false};  // a signal, a device error, resolution failed
    std::atomic<int> signal{0};
    std::atomic<unsigned> finished{0};  // threads whose share is done
};

class ConnectShard {
public:
    ConnectShard(std::uint32_t s, const ConnectOptions& o, const ConnectTarget& t,
                 const Interface& iface, ThreadNet& tn, const Reporter& rep, Shared& shared)
        : s_(s),
          o_(o),
          t_(t),
          iface_(iface),
          net_(tn.net()),
          xdp_(tn.shared.get()),
          core_(net_.core(s)),
          rep_(rep),
          sh_(shared),
          quota_(share(o.count, net_.shards(), s)),
          parallel_(std::max(1u, share(o.parallel, net_.shards(), s))) {}

    void run();
    const Flights& flights() const { return f_; }

private:
    bool ask(Instant now);
    io::PeerStatus peer(Instant now, MacAddr& mac);
    bool resolve(Instant now);
    void start_slots(Instant now);
    bool step(Instant until);
    void close(Instant now);
    unsigned ended() const { return f_.completed() + f_.failures(); }

    std::uint32_t s_;
    const ConnectOptions& o_;
    const ConnectTarget& t_;
    const Interface& iface_;
    io::TapShards& net_;
    io::SharedShards* xdp_;  // --dev: the kernel's tables and ports
    Core& core_;
    const Reporter& rep_;
    Shared& sh_;
    unsigned quota_;
    unsigned parallel_;
    unsigned started_ = 0;
    std::vector<Instant> waiting_;  // slots started before the MAC was known
    Flights f_;
};

// Thread 0, at the start: asks for the next hop's MAC (our neighbour table
// sends the ARP request / solicitation, or with --dev the kernel's does).
bool ConnectShard::ask(Instant now) {
    if (s_ != 0) return true;
    if (!xdp_) {
        net_.neighbors().resolve(now, t_.next_hop, iface_.addr);
        return true;
    }
    if (auto r = xdp_->resolve(t_.next_hop); !r) {
        f_.end(exit_codes::kResolution,
               "cannot resolve " + t_.next_hop.to_string() + ": " + r.error());
        return false;
    }
    return true;
}

io::PeerStatus ConnectShard::peer(Instant now, MacAddr& mac) {
    if (xdp_) return xdp_->peer(t_.next_hop, mac);
    auto& nb = net_.neighbors();
    const auto st = nb.status(now, t_.next_hop);
    if (st == io::NeighborStatus::kFailed || st == io::NeighborStatus::kUnknown)
        return io::PeerStatus::kFailed;
    if (st != io::NeighborStatus::kResolved) return io::PeerStatus::kPending;
    mac = *nb.lookup(now, t_.next_hop);
    return io::PeerStatus::kResolved;
}

// Thread 0: the peer's MAC, known (published to all), pending, or failed.
bool ConnectShard::resolve(Instant now) {
    if (s_ != 0 || sh_.mac_ready.load(std::memory_order_acquire)) return true;
    MacAddr mac;
    const io::PeerStatus st = peer(now, mac);
    if (st == io::PeerStatus::kFailed) {
        f_.end(exit_codes::kResolution, "cannot resolve " + t_.next_hop.to_string());
        return false;
    }
    if (st == io::PeerStatus::kPending) return true;
    sh_.mac = mac;
    sh_.mac_ready.store(true, std::memory_order_release);
    net_.wake_all();
    return true;
}

// Starts slots up to --parallel's share; they connect once the MAC is known.
void ConnectShard::start_slots(Instant now) {
    const bool known = sh_.mac_ready.load(std::memory_order_acquire);
    while (started_ < quota_ && started_ - ended() < parallel_) {
        ++started_;
        waiting_.push_back(now);
    }
    if (!known) return;
    for (Instant start : waiting_) {
        const ConnectParams cp = count_params(o_, t_, iface_, sh_.mac);
        const Instant at = io::TapHost::now();
        if (xdp_) {
            auto c = xdp_->connect(s_, at, cp);
            if (!c) f_.failed(exit_codes::kError, c.error());
            if (c) f_.opened(*c, start, now, at);
            continue;
        }
        auto c = core_.connect(at, cp);
        if (!c) {
            f_.failed(exit_codes::kError, "connect: " + std::string(to_string(c.error())));
            continue;
        }
        f_.opened(*c, start, now, at);
    }
    waiting_.clear();
}

// One round of the thread's loop and its events; false when it must stop.
bool ConnectShard::step(Instant until) {
    const io::Wake w = net_.step(s_, until);
    while (auto e = core_.poll_event()) (void)f_.on_event(core_, io::TapHost::now(), *e, rep_);
    if (w == io::Wake::kError) {
        f_.end(exit_codes::kError, net_.error(s_));
        sh_.stop = true;
        net_.wake_all();
    }
    if (w == io::Wake::kSignal) {
        sh_.signal = net_.last_signal();
        sh_.stop = true;
        net_.wake_all();
    }
    return w != io::Wake::kError;
}

void ConnectShard::run() {
    core_.set_trace([this](const TraceRecord& r) { f_.on_trace(r); });
    const auto limit =
        std::chrono::duration_cast<Duration>(std::chrono::duration<double>(o_.timeout_s));
    if (!ask(io::TapHost::now())) sh_.stop = true;
    Instant progress = io::TapHost::now();
    std::optional<Instant> done_at;  // this thread's share ended
    bool counted = false;            // ... and its core is quiet: counted in sh_.finished
    for (;;) {
        const Instant now = io::TapHost::now();
        if (!resolve(now)) {
            sh_.stop = true;
            net_.wake_all();
        }
        if (sh_.stop.load()) break;
        start_slots(now);
        if (!done_at && ended() >= quota_) done_at = now;
        if (done_at && !counted && core_.live_nodes() == 0) {
            counted = true;
            sh_.finished.fetch_add(1);
            net_.wake_all();  // the others notice
        }
        const bool all = sh_.finished.load() == net_.shards();
        if (done_at && ((counted && all) || now >= *done_at + kDrainLimit)) break;
        if (!done_at && now - progress > limit) {
            f_.end(exit_codes::kTimeout, "no connection finished within --timeout");
            sh_.stop = true;
            net_.wake_all();
            break;
        }
        const unsigned before = ended();
        if (!step(done_at ? std::min(now + limit, *done_at + kDrainLimit) : now + limit)) break;
        if (ended() != before) progress = io::TapHost::now();
    }
    close(io::TapHost::now());
    core_.set_trace({});
}

// After a stop: a FIN on what is open, kGraceLimit to close, then resets.
void ConnectShard::close(Instant now) {
    for (ConnHandle h : f_.open_handles())
        (void)core_.disconnect(now, h, DisconnectMode::kGraceful);
    const Instant grace = now + kGraceLimit;
    while (core_.live_nodes() > 0 && io::TapHost::now() < grace)
        if (!step(grace)) break;
    if (core_.live_nodes() > 0) (void)core_.teardown_connections(io::TapHost::now(), iface_.addr);
    net_.flush(s_);
}

}  // namespace

std::optional<int> run_connect_threads(const ConnectOptions& o, const ConnectTarget& target,
                                       const Interface& iface, const Reporter& rep,
                                       bool fall_back) {
    IWCM_ASSERT(o.count > 0);
    const unsigned n = o.threads > 0 ? o.threads : cpu_threads();
    IWCM_ASSERT(n > 1);
    auto opened = open_thread_net(o.wire, iface, n);
    if (!opened && fall_back) return std::nullopt;
    if (!opened) {
        rep.fail(opened.error());
        return exit_codes::kSetup;
    }
    io::TapShards& net = opened->net();
    ConnectTarget t = target;
    if (opened->shared)
        if (auto code = route_next_hop(*opened->shared, t, rep)) return *code;
    Shared shared;
    std::vector<std::unique_ptr<ConnectShard>> shards;
    for (std::uint32_t s = 0; s < net.shards(); ++s)
        shards.push_back(std::make_unique<ConnectShard>(s, o, t, iface, *opened, rep, shared));
    std::vector<std::thread> threads;
    for (auto& sh : shards) threads.emplace_back([&sh] { sh->run(); });
    for (auto& th : threads) th.join();

    Flights all;
    for (auto& sh : shards) all.merge(sh->flights());
    if (const int sig = shared.signal.load(); sig != 0)
        all.end(interrupted_code(sig), "interrupted after " + std::to_string(all.completed()) +
                                           " of " + std::to_string(o.count));
    const Instant end = io::TapHost::now();
    print_cmtime(rep, end, o, t.to, all);
    std::uint64_t handed_off = 0;
    const Reporter::Counters c = sum_thread_counters(net, handed_off);
    auto fields = thread_fields(net, handed_off);
    if (opened->shared)
        fields.emplace_back("ports_reserved",
                            std::to_string(opened->shared->pool().reservations()));
    rep.stats(end, c, all.code() == exit_codes::kOk ? "ok" : "failed", all.reason(), std::nullopt,
              fields);
    if (all.code() != exit_codes::kOk) rep.fail(all.reason());
    return all.code();
}

}  // namespace iwcm::tools
