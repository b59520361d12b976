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

enum Phase : std::size_t { kResolve, kTcp, kMpa, kEstablished, kClose, kPhases };
constexpr const char* kPhaseNames[kPhases] = {"resolve", "tcp_handshake", "mpa_exchange",
                                              "established", "close"};

struct Attempt {
    Instant start{};
    Instant resolved{};
    Instant syn_sent{};
    std::optional<Instant> syn_acked;
    Instant established{};
    Instant close_sent{};
};

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
    Many(const ConnectOptions& o, const ConnectTarget& t, Session& s, const Reporter& rep)
        : o_(o), t_(t), s_(s), rep_(rep) {}
    int run();

private:
    void start_slot(Instant now);
    void on_event(const Event& e);
    void on_trace(const TraceRecord& r);
    bool connect_resolved(Instant now);
    bool peer_mac(Instant now, std::optional<MacAddr>& mac);
    void summary(Instant now);
    static std::uint64_t key(ConnHandle h) { return (std::uint64_t{h.generation} << 32) | h.index; }

    const ConnectOptions& o_;
    const ConnectTarget& t_;
    Session& s_;
    const Reporter& rep_;
    std::vector<Instant> resolving_;         // slots waiting for the peer's MAC
    std::string shared_error_;               // --dev: the kernel refused to resolve
    std::map<std::uint64_t, Attempt> open_;  // by handle
    std::map<std::uint64_t, ConnHandle> handles_;
    std::vector<double> phase_ms_[kPhases];
    unsigned started_ = 0;
    unsigned completed_ = 0;
    unsigned failed_ = 0;
    int code_ = exit_codes::kOk;
    std::string reason_;
};

void Many::on_trace(const TraceRecord& r) {
    if (r.kind != TraceRecord::Kind::kState || r.from != CmState::kSynSent) return;
    auto it = open_.find(key(r.conn));
    if (it != open_.end() && !it->second.syn_acked) it->second.syn_acked = r.now;
}

void Many::on_event(const Event& e) {
    const Instant now = io::TapHost::now();
    auto it = open_.find(key(e.conn));
    if (it == open_.end()) return;
    Attempt& a = it->second;
    if (e.type == EventType::kEstablished) {
        a.established = now;
        phase_ms_[kResolve].push_back(ms(a.resolved - a.start));
        phase_ms_[kTcp].push_back(ms(a.syn_acked.value_or(now) - a.syn_sent));
        phase_ms_[kMpa].push_back(ms(now - a.syn_acked.value_or(now)));
        phase_ms_[kEstablished].push_back(ms(now - a.start));
        a.close_sent = now;
        if (auto r = s_.core->disconnect(now, e.conn, DisconnectMode::kGraceful); !r) {
            ++failed_;
            code_ = exit_codes::kError;
            reason_ = "disconnect: " + std::string(to_string(r.error()));
            open_.erase(it);
        }
        return;
    }
    if (!e.terminal()) return;
    if (e.type == EventType::kDisconnected && e.status == 0) {
        phase_ms_[kClose].push_back(ms(now - a.close_sent));
        ++completed_;
    } else {
        rep_.print(now, Reporter::from_event(e));
        ++failed_;
        auto [code, why] = connect_failure(e);
        if (code_ == exit_codes::kOk) std::tie(code_, reason_) = std::pair{code, why};
    }
    open_.erase(it);
    handles_.erase(key(e.conn));
}

void Many::start_slot(Instant now) {
    ++started_;
    resolving_.push_back(now);
    if (s_.shared) {
        if (auto r = s_.shared->resolve(t_.next_hop); !r) shared_error_ = r.error();
        return;
    }
    s_.host->neighbors().resolve(now, t_.next_hop, s_.iface.addr);
}

// The next hop's MAC: known (true, in mac), pending (true), failed (false).
bool Many::peer_mac(Instant now, std::optional<MacAddr>& mac) {
    if (s_.shared) {
        MacAddr m;
        const auto st = s_.shared->peer(t_.next_hop, m);
        if (st == io::PeerStatus::kResolved) mac = m;
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
        code_ = exit_codes::kResolution;
        reason_ = "cannot resolve " + t_.next_hop.to_string() +
                  (shared_error_.empty() ? "" : ": " + shared_error_);
        return false;
    }
    if (!mac) return true;
    for (Instant start : resolving_) {
        ConnectParams cp;
        cp.local = {s_.iface.addr, 0};
        cp.remote = t_.to;
        cp.remote_mac = *mac;
        cp.vlan = s_.iface.vlan;
        cp.tos = static_cast<std::uint8_t>(o_.wire.tos);
        cp.private_data = t_.pdata;
        cp.ird = o_.wire.ird;
        cp.ord = o_.wire.ord;
        cp.mpa_revision = static_cast<std::uint8_t>(o_.wire.mpa_rev);
        const Instant at = io::TapHost::now();
        auto c = session_connect(s_, at, cp);
        if (!c) {
            ++failed_;
            code_ = exit_codes::kError;
            reason_ = c.error();
            continue;
        }
        Attempt a;
        a.start = start;
        a.resolved = now;
        a.syn_sent = at;
        open_[key(*c)] = a;
        handles_[key(*c)] = *c;
    }
    resolving_.clear();
    return true;
}

int Many::run() {
    s_.core->set_trace([this](const TraceRecord& r) { on_trace(r); });
    const auto limit =
        std::chrono::duration_cast<Duration>(std::chrono::duration<double>(o_.timeout_s));
    Instant progress = io::TapHost::now();
    bool interrupted = false;
    while (completed_ + failed_ < o_.count) {
        Instant now = io::TapHost::now();
        while (started_ < o_.count && started_ - completed_ - failed_ < o_.parallel)
            start_slot(now);
        if (!connect_resolved(now)) break;
        if (now - progress > limit) {
            code_ = exit_codes::kTimeout;
            reason_ = "no connection finished within --timeout";
            break;
        }
        const unsigned done = completed_ + failed_;
        const io::Wake w = s_.host->step(now + limit);
        while (auto e = s_.core->poll_event()) on_event(*e);
        if (completed_ + failed_ != done) progress = io::TapHost::now();
        if (w == io::Wake::kError) {
            code_ = exit_codes::kError;
            reason_ = s_.host->error();
            break;
        }
        interrupted = w == io::Wake::kSignal;
        if (interrupted) break;
    }
    std::vector<ConnHandle> left;
    for (const auto& [k, h] : handles_) left.push_back(h);
    const auto print = [&](const Event& e) { on_event(e); };
    if (interrupted || !left.empty()) close_all(s_, rep_, left, print);
    if (interrupted) {
        code_ = interrupted_code(s_.host->last_signal());
        reason_ =
            "interrupted after " + std::to_string(completed_) + " of " + std::to_string(o_.count);
    }
    s_.core->set_trace({});
    (void)drain(*s_.host, io::TapHost::now() + std::chrono::seconds(2), print);
    summary(io::TapHost::now());
    rep_.stats(io::TapHost::now(), *s_.core, *s_.host, code_ == exit_codes::kOk ? "ok" : "failed",
               reason_, std::nullopt);
    if (code_ != exit_codes::kOk) rep_.fail(reason_);
    return code_;
}

void Many::summary(Instant now) {
    if (!o_.wire.json) {
        std::printf("%u connections to %s, %u in flight at most: %u completed, %u failed\n",
                    o_.count, t_.to.to_string().c_str(), o_.parallel, completed_, failed_);
        std::printf("%-14s %10s %10s %10s %10s  (ms)\n", "phase", "min", "median", "p99", "max");
        for (std::size_t p = 0; p < kPhases; ++p) {
            if (phase_ms_[p].empty()) continue;
            const Spread sp = spread(phase_ms_[p]);
            std::printf("%-14s %10.3f %10.3f %10.3f %10.3f\n", kPhaseNames[p], sp.min, sp.median,
                        sp.p99, sp.max);
        }
        std::fflush(stdout);
        return;
    }
    Report r;
    r.event = "cmtime";
    r.remote = t_.to;
    r.add("count", std::uint64_t{o_.count});
    r.add("parallel", std::uint64_t{o_.parallel});
    r.add("completed", std::uint64_t{completed_});
    r.add("failed", std::uint64_t{failed_});
    for (std::size_t p = 0; p < kPhases; ++p) {
        if (phase_ms_[p].empty()) {
            r.extra.emplace_back(std::string(kPhaseNames[p]) + "_ms", "null");
            continue;
        }
        const Spread sp = spread(phase_ms_[p]);
        JsonObject j;
        j.add("min", sp.min).add("median", sp.median).add("p99", sp.p99).add("max", sp.max);
        r.extra.emplace_back(std::string(kPhaseNames[p]) + "_ms", j.str());
    }
    rep_.print(now, r);
}

}  // namespace

int run_connect_many(const ConnectOptions& o, const ConnectTarget& t, Session& s,
                     const Reporter& rep) {
    IWCM_ASSERT(o.count > 0 && o.parallel > 0);
    Many m(o, t, s, rep);
    return m.run();
}

}  // namespace iwcm::tools
