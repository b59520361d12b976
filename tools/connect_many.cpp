// iwarp-cm connect --count N [--parallel K]: the setup time of many
// connections per phase, as rdma-core's cmtime measures rdma_cm's.
// Read first: tools/connect.hpp, include/iwcm/core.hpp (TraceRecord).
//
// Phases of one connection, on the driver's steady clock:
//   resolve        the slot starts .. the peer's MAC is known (ARP / ND; the
//                  neighbour table caches it, so only the first pays)
//   tcp_handshake  connect() (SYN sent) .. the node leaves SYN_SENT (the
//                  SYN-ACK came; seen through the core's trace hook)
//   mpa_exchange   .. the established event (MPA reply, and RTR if any)
//   established    the slot starts .. established: the whole setup
//   close          disconnect() (FIN sent) .. the disconnected event
#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <map>

#include "iwcm/assert.hpp"
#include "tools/connect.hpp"
#include "tools/json.hpp"

namespace iwcm::tools {

namespace {

constexpr const char* kPhaseNames[Flights::kPhases] = {"resolve", "tcp_handshake", "mpa_exchange",
                                                       "established", "close"};

double ms(Duration d) {
    return static_cast<double>(d.count()) / 1e6;
}

struct Spread {
    double min = 0, median = 0, p99 = 0, max = 0;
};

// Nearest-rank p99; the median of an even count is the mean of the middle two.
Spread spread(std::vector<double> v) {
    IWCM_ASSERT(!v.empty());
    std::sort(v.begin(), v.end());
    const std::size_t n = v.size();
    Spread s;
    s.min = v.front();
    s.max = v.back();
    s.median = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
    s.p99 = v[static_cast<std::size_t>(std::ceil(0.99 * static_cast<double>(n))) - 1];
    IWCM_ASSERT(s.min <= s.median && s.median <= s.p99 && s.p99 <= s.max);
    return s;
}

class Many {
public:
    Many(const ConnectOptions& o, const ConnectTarget& t, Session& s, const Reporter& rep,
         Progress& progress)
        : o_(o), t_(t), s_(s), rep_(rep), progress_(progress) {}
    int run();

private:
    void start_slot(Instant now);
    bool connect_resolved(Instant now);
    bool peer_mac(Instant now, std::optional<MacAddr>& mac);

    const ConnectOptions& o_;
    const ConnectTarget& t_;
    Session& s_;
    const Reporter& rep_;
    Progress& progress_;
    std::vector<Instant> resolving_;  // slots waiting for the peer's MAC
    std::string shared_error_;        // --dev: the kernel refused to resolve
    // --dev: the next hop's MAC once the kernel resolved it, for the rest of the run (each
    // question to the kernel is netlink round trips: most of a connection's cost), as the
    // N-thread path resolves once.
    std::optional<MacAddr> shared_mac_;
    Flights f_;
    unsigned started_ = 0;
};

}  // namespace

void Flights::opened(ConnHandle h, Instant start, Instant resolved, Instant syn_sent) {
    Attempt a;
    a.start = start;
    a.resolved = resolved;
    a.syn_sent = syn_sent;
    a.handle = h;
    open_[key(h)] = a;
}

void Flights::on_trace(const TraceRecord& r) {
    if (r.kind != TraceRecord::Kind::kState || r.from != CmState::kSynSent) return;
    auto it = open_.find(key(r.conn));
    if (it != open_.end() && !it->second.syn_acked) it->second.syn_acked = r.now;
}

bool Flights::on_event(Core& core, Instant now, const Event& e, const Reporter& rep) {
    auto it = open_.find(key(e.conn));
    if (it == open_.end()) return false;
    Attempt& a = it->second;
    if (e.type == EventType::kEstablished) {
        ms_[kResolve].push_back(ms(a.resolved - a.start));
        ms_[kTcp].push_back(ms(a.syn_acked.value_or(now) - a.syn_sent));
        ms_[kMpa].push_back(ms(now - a.syn_acked.value_or(now)));
        ms_[kEstablished].push_back(ms(now - a.start));
        a.close_sent = now;
        if (auto r = core.disconnect(now, e.conn, DisconnectMode::kGraceful); !r) {
            failed(exit_codes::kError, "disconnect: " + std::string(to_string(r.error())));
            open_.erase(it);
        }
        return true;
    }
    if (!e.terminal()) return true;
    if (e.type == EventType::kDisconnected && e.status == 0) {
        ms_[kClose].push_back(ms(now - a.close_sent));
        ++completed_;
    } else {
        rep.print(now, Reporter::from_event(e));
        auto [code, why] = connect_failure(e);
        failed(code, why);
    }
    open_.erase(it);
    return true;
}

void Flights::failed(int code, std::string reason) {
    ++failed_;
    if (code_ != exit_codes::kOk) return;
    code_ = code;
    reason_ = std::move(reason);
}

void Flights::end(int code, std::string reason) {
    code_ = code;
    reason_ = std::move(reason);
}

std::vector<ConnHandle> Flights::open_handles() const {
    std::vector<ConnHandle> v;
    for (const auto& [k, a] : open_) v.push_back(a.handle);
    return v;
}

void Flights::merge(const Flights& other) {
    for (std::size_t p = 0; p < kPhases; ++p)
        ms_[p].insert(ms_[p].end(), other.ms_[p].begin(), other.ms_[p].end());
    completed_ += other.completed_;
    failed_ += other.failed_;
    if (code_ == exit_codes::kOk) {
        code_ = other.code_;
        reason_ = other.reason_;
    }
}

namespace {

void Many::start_slot(Instant now) {
    ++started_;
    resolving_.push_back(now);
    if (s_.shared) {
        if (shared_mac_) return;
        if (auto r = s_.shared->resolve(t_.next_hop); !r) shared_error_ = r.error();
        return;
    }
    s_.host->neighbors().resolve(now, t_.next_hop, s_.iface.addr);
}

// The next hop's MAC: known (true, in mac), pending (true), failed (false).
bool Many::peer_mac(Instant now, std::optional<MacAddr>& mac) {
    if (s_.shared) {
        if (shared_mac_) {
            mac = shared_mac_;
            return true;
        }
        MacAddr m;
        const auto st = s_.shared->peer(t_.next_hop, m);
        if (st == io::PeerStatus::kResolved) mac = shared_mac_ = m;
        return st != io::PeerStatus::kFailed && shared_error_.empty();
    }
    auto& nb = s_.host->neighbors();
    const auto st = nb.status(now, t_.next_hop);
    if (st == io::NeighborStatus::kFailed || st == io::NeighborStatus::kUnknown) return false;
    if (st == io::NeighborStatus::kResolved) mac = *nb.lookup(now, t_.next_hop);
    return true;
}

// Slots whose peer MAC is now known connect; false when resolution failed.
bool Many::connect_resolved(Instant now) {
    if (resolving_.empty()) return true;
    std::optional<MacAddr> mac;
    if (!peer_mac(now, mac)) {
        f_.end(exit_codes::kResolution, "cannot resolve " + t_.next_hop.to_string() +
                                            (shared_error_.empty() ? "" : ": " + shared_error_));
        return false;
    }
    if (!mac) return true;
    for (Instant start : resolving_) {
        const ConnectParams cp = count_params(o_, t_, s_.iface, *mac);
        const Instant at = io::TapHost::now();
        auto c = session_connect(s_, at, cp);
        if (!c) {
            f_.failed(exit_codes::kError, c.error());
            continue;
        }
        f_.opened(*c, start, now, at);
    }
    resolving_.clear();
    return true;
}

int Many::run() {
    s_.core->set_trace([this](const TraceRecord& r) { f_.on_trace(r); });
    const auto limit =
        std::chrono::duration_cast<Duration>(std::chrono::duration<double>(o_.timeout_s));
    Instant progress = io::TapHost::now();
    bool interrupted = false;
    const auto on_event = [&](const Event& e) {
        (void)f_.on_event(*s_.core, io::TapHost::now(), e, rep_);
    };
    while (f_.completed() + f_.failures() < o_.count) {
        Instant now = io::TapHost::now();
        while (started_ < o_.count && started_ - f_.completed() - f_.failures() < o_.parallel)
            start_slot(now);
        if (!connect_resolved(now)) break;
        if (now - progress > limit) {
            f_.end(exit_codes::kTimeout, "no connection finished within --timeout");
            break;
        }
        const unsigned done = f_.completed() + f_.failures();
        const io::Wake w = s_.host->step(now + limit);
        while (auto e = s_.core->poll_event()) on_event(*e);
        if (f_.completed() + f_.failures() != done) progress = io::TapHost::now();
        if (progress_.due())
            progress_.show("connect: " + std::to_string(f_.completed()) + " of " +
                           std::to_string(o_.count) + " connections, " +
                           std::to_string(f_.failures()) + " failed");
        if (w == io::Wake::kError) {
            f_.end(exit_codes::kError, s_.host->error());
            break;
        }
        interrupted = w == io::Wake::kSignal;
        if (interrupted) break;
    }
    const std::vector<ConnHandle> left = f_.open_handles();
    if (interrupted || !left.empty()) close_all(s_, rep_, left, on_event);
    if (interrupted)
        f_.end(interrupted_code(s_.host->last_signal()), "interrupted after " +
                                                             std::to_string(f_.completed()) +
                                                             " of " + std::to_string(o_.count));
    s_.core->set_trace({});
    // The closes' last frames; what is still open after 2 s is reset.
    (void)finish_close(s_, rep_, io::TapHost::now() + std::chrono::seconds(2), on_event,
                       "not closed within the drain limit", true);
    print_cmtime(rep_, io::TapHost::now(), o_, t_.to, f_);
    rep_.stats(io::TapHost::now(), *s_.core, *s_.host,
               f_.code() == exit_codes::kOk ? "ok" : "failed", f_.reason(), std::nullopt);
    if (f_.code() != exit_codes::kOk) rep_.fail(f_.reason());
    return f_.code();
}

}  // namespace

ConnectParams count_params(const ConnectOptions& o, const ConnectTarget& t, const Interface& iface,
                           const MacAddr& peer_mac) {
    ConnectParams cp;
    cp.local = {iface.addr, 0};
    cp.remote = t.to;
    cp.remote_mac = peer_mac;
    cp.vlan = iface.vlan;
    cp.tos = static_cast<std::uint8_t>(o.wire.tos);
    cp.private_data = t.pdata;
    cp.ird = o.wire.ird;
    cp.ord = o.wire.ord;
    cp.mpa_revision = static_cast<std::uint8_t>(o.wire.mpa_rev);
    return cp;
}

void print_cmtime(const Reporter& rep, Instant now, const ConnectOptions& o, const Endpoint& to,
                  const Flights& f) {
    const Flights::Samples& ms = f.samples();
    if (!o.wire.json) {
        std::printf("%u connections to %s, %u in flight at most: %u completed, %u failed\n",
                    o.count, to.to_string().c_str(), o.parallel, f.completed(), f.failures());
        std::printf("%-14s %10s %10s %10s %10s  (ms)\n", "phase", "min", "median", "p99", "max");
        for (std::size_t p = 0; p < Flights::kPhases; ++p) {
            if (ms[p].empty()) continue;
            const Spread sp = spread(ms[p]);
            std::printf("%-14s %10.3f %10.3f %10.3f %10.3f\n", kPhaseNames[p], sp.min, sp.median,
                        sp.p99, sp.max);
        }
        std::fflush(stdout);
        return;
    }
    Report r;
    r.event = "cmtime";
    r.remote = to;
    r.add("count", std::uint64_t{o.count});
    r.add("parallel", std::uint64_t{o.parallel});
    r.add("completed", std::uint64_t{f.completed()});
    r.add("failed", std::uint64_t{f.failures()});
    for (std::size_t p = 0; p < Flights::kPhases; ++p) {
        if (ms[p].empty()) {
            r.extra.emplace_back(std::string(kPhaseNames[p]) + "_ms", "null");
            continue;
        }
        const Spread sp = spread(ms[p]);
        JsonObject j;
        j.add("min", sp.min).add("median", sp.median).add("p99", sp.p99).add("max", sp.max);
        r.extra.emplace_back(std::string(kPhaseNames[p]) + "_ms", j.str());
    }
    rep.print(now, r);
}

int run_connect_many(const ConnectOptions& o, const ConnectTarget& t, Session& s,
                     Progress& progress, const Reporter& rep) {
    IWCM_ASSERT(o.count > 0 && o.parallel > 0);
    Many m(o, t, s, rep, progress);
    return m.run();
}

}  // namespace iwcm::tools
