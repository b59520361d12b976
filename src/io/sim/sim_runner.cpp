// The seeded scenario engine. Read sim_runner.hpp first: it says what one
// scenario contains. This file builds it from the seed, plays the
// applications, drains the network, and checks the invariants (each check
// says which part of the contract it is).
#include "io/sim/sim_runner.hpp"

#include <unistd.h>
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdarg>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <queue>
#include <tuple>
#include <vector>

#include "iwcm/core.hpp"

namespace iwcm::io {

namespace {

std::atomic<std::uint64_t> g_seed_in_progress{0};
std::atomic<bool> g_seed_active{false};

extern "C" void report_seed_on_abort(int sig) {
    if (g_seed_active.load()) {
        // Async-signal-safe: format by hand, write(2).
        char buf[96] = "\nsim: aborted while running seed ";
        std::size_t n = 33;
        char digits[24];
        std::size_t d = 0;
        std::uint64_t v = g_seed_in_progress.load();
        do {
            digits[d++] = static_cast<char>('0' + v % 10);
            v /= 10;
        } while (v != 0);
        while (d > 0) buf[n++] = digits[--d];
        const char tail[] = " (replay: iwarp-cm sim --seed N)\n";
        for (char c : tail) {
            if (c == '\0') break;
            buf[n++] = c;
        }
        ssize_t ignored = ::write(2, buf, n);
        (void)ignored;
    }
    std::signal(sig, SIG_DFL);
    std::raise(sig);
}

constexpr std::uint16_t kPortMain = 4791;
constexpr std::uint16_t kPortSmallBacklog = 4792;
constexpr std::uint16_t kPortClosed = 4793;
constexpr Duration kCloseAt = std::chrono::seconds(3);
// Longest honest drain: an MPA accept timer (30 s) after a v1 retry after a
// full retransmission run (~75 s), and the same again on the peer. Far less
// than this; more means a timer re-arms forever.
constexpr Duration kMaxVirtual = std::chrono::minutes(30);
constexpr std::uint64_t kMaxSteps = 5'000'000;

using std::chrono::microseconds;
using std::chrono::milliseconds;

std::string fmt(const char* f, ...) __attribute__((format(printf, 1, 2)));
std::string fmt(const char* f, ...) {
    char buf[1024];
    va_list ap;
    va_start(ap, f);
    std::vsnprintf(buf, sizeof buf, f, ap);
    va_end(ap);
    return buf;
}

std::size_t wire_pdata_limit(std::uint8_t rev) {
    return 512 - (rev == 2 ? 4 : 0);
}

double ms(Instant t) {
    return static_cast<double>(t.time_since_epoch().count()) / 1e6;
}

// One handle's life as its application saw it.
struct SideLog {
    bool established = false;
    MpaInfo est;
    std::vector<std::byte> est_pdata;
    bool terminal = false;
    EventType term_type = EventType::kConnectError;
    int term_status = 0;
    CmState term_state = CmState::kUnknown;
    std::vector<std::byte> term_pdata;
    Endpoint local;
    Endpoint remote;
    bool seen_local = false;
};

struct Attempt {
    std::size_t id = 0;
    std::size_t from = 0;
    std::size_t to = 0;
    bool v6 = false;
    std::uint16_t port = 0;
    Duration start{};
    std::vector<std::byte> pdata;
    std::uint16_t ird = 0;
    std::uint16_t ord = 0;
    std::uint8_t rev_param = 0;  // ConnectParams::mpa_revision
    std::uint8_t rev = 0;        // effective
    bool p2p = false;            // offered the peer-to-peer bit
    std::uint8_t rtr_offered = 0;
    bool have_handle = false;
    bool refused_locally = false;
    ConnHandle handle;
    bool app_ended_early = false;  // the application disconnected before established
    bool gives_up = false;         // the application chose to disconnect at a random moment
    SideLog log;
};

enum class Decision : std::uint8_t { kNone, kAccepted, kRejected, kIgnored, kDropped };

struct Passive {
    std::size_t core = 0;
    ConnHandle handle;
    MpaInfo req;
    std::vector<std::byte> req_pdata;
    ListenHandle listener;
    Decision decision = Decision::kNone;
    std::vector<std::byte> answer_pdata;
    std::uint16_t acc_ird = 0;
    std::uint16_t acc_ord = 0;
    SideLog log;
};

struct ListenerRec {
    std::size_t core = 0;
    ListenParams params;
    ListenHandle handle;
    bool live = false;
    // kAddressDown / kAddressUp owed to this listener and not yet seen.
    int owed_down = 0;
    int owed_up = 0;
};

struct Action {
    Instant at;
    std::uint64_t seq;
    std::function<void()> run;
};
struct ActionLater {
    bool operator()(const Action& a, const Action& b) const {
        return std::tie(a.at, a.seq) > std::tie(b.at, b.seq);
    }
};

class Runner {
public:
    explicit Runner(const SimScenario& s);
    SimOutcome run();

private:
    // ---- construction ----
    void build_cores();
    void build_attempts();
    void build_disruptions();
    // ---- driving ----
    void at(Instant t, std::function<void()> fn);
    void drive();
    void drain_events(std::size_t core, Instant now);
    void on_event(std::size_t core, Instant now, const Event& e);
    void on_request(std::size_t core, Instant now, const Event& e);
    void after_established(std::size_t core, bool passive, std::size_t index, Instant now);
    // ---- application commands ----
    void do_connect(Attempt& a);
    void do_accept(std::size_t p);
    void do_reject(std::size_t p);
    void do_disconnect(std::size_t core, bool passive, std::size_t index, DisconnectMode mode);
    void do_destroy_listen(std::size_t l, bool relisten);
    void do_relisten(std::size_t l);
    void do_address_down(std::size_t core, bool v6);
    void on_listener_event(std::size_t core, const Event& e);
    void owe_address_events(std::size_t core, const IpAddr& a, bool down);
    void do_address_up(std::size_t core, bool v6);
    void close_everything();
    // ---- checks ----
    void check_all();
    void check_core(std::size_t c);
    void check_attempt(const Attempt& a);
    void check_clean(const Attempt& a, const std::vector<const Passive*>& ps);
    bool rtr_mismatch(const Attempt& a, const Passive& p) const;
    void fail(const std::string& what);
    void log(const std::string& line);
    SideLog* side(std::size_t core, bool passive, std::size_t index);

    IpAddr addr(std::size_t core, bool v6) const;
    MacAddr mac(std::size_t core) const;
    std::vector<std::byte> random_pdata(std::size_t limit);
    Duration random_delay(Duration max);

    SimScenario sc_;
    SimOutcome out_;
    Rng build_rng_;
    Rng app_rng_;
    SimNetwork net_;
    std::vector<CoreConfig> cfgs_;
    std::vector<std::unique_ptr<Core>> cores_;
    std::vector<std::unique_ptr<CoreHost>> hosts_;
    std::vector<Attempt> attempts_;
    std::vector<Passive> passives_;
    std::vector<ListenerRec> listeners_;
    std::vector<std::array<bool, 2>> addr_up_;  // [core][v6]
    // (core, handle index, generation) -> (passive?, index)
    std::map<std::tuple<std::size_t, std::uint32_t, std::uint32_t>, std::pair<bool, std::size_t>>
        handles_;
    std::priority_queue<Action, std::vector<Action>, ActionLater> actions_;
    std::uint64_t action_seq_ = 0;
    bool closing_ = false;
    // Per core: what the application counted.
    std::vector<std::uint64_t> established_events_;
    std::vector<std::uint64_t> accept_calls_;
    std::vector<std::uint64_t> reject_calls_;
    std::vector<std::uint64_t> initiator_failures_;
};

Runner::Runner(const SimScenario& s)
    : sc_(s),
      build_rng_(Rng(s.seed).fork()),
      app_rng_(Rng(s.seed ^ 0x5bd1e995u).fork()),
      net_(s.seed) {
    IWCM_ASSERT(s.cores >= 2 && s.cores <= 4);
    out_.seed = s.seed;
}

IpAddr Runner::addr(std::size_t core, bool v6) const {
    char text[64];
    if (v6) {
        std::snprintf(text, sizeof text, "fd00::%zu", core + 1);
    } else {
        std::snprintf(text, sizeof text, "10.0.0.%zu", core + 1);
    }
    return *IpAddr::parse(text);
}

MacAddr Runner::mac(std::size_t core) const {
    return MacAddr{{0x02, 0, 0, 0, 0x01, static_cast<std::uint8_t>(core + 1)}};
}

std::vector<std::byte> Runner::random_pdata(std::size_t limit) {
    std::size_t n = 0;
    if (!app_rng_.chance(0.2))
        n = app_rng_.chance(0.8) ? app_rng_.below(64) : app_rng_.below(limit + 1);
    std::vector<std::byte> v(n);
    for (auto& b : v) b = static_cast<std::byte>(app_rng_.below(256));
    return v;
}

Duration Runner::random_delay(Duration max) {
    if (app_rng_.chance(0.3)) return Duration::zero();
    auto us = std::chrono::duration_cast<microseconds>(max).count();
    return microseconds(
        static_cast<std::int64_t>(app_rng_.below(static_cast<std::uint64_t>(us) + 1)));
}

void Runner::fail(const std::string& what) {
    if (out_.ok) {
        out_.ok = false;
        out_.failure = fmt("[t=%.3f ms] ", ms(net_.now())) + what;
    }
    if (sc_.log) std::printf("  FAIL: %s\n", what.c_str());
}

void Runner::log(const std::string& line) {
    if (sc_.log) std::printf("  %10.3f ms  %s\n", ms(net_.now()), line.c_str());
}

void Runner::build_cores() {
    for (std::size_t i = 0; i < sc_.cores; ++i) {
        CoreConfig c;
        c.mac = mac(i);
        for (auto& b : c.isn_secret) b = static_cast<std::uint8_t>(build_rng_.below(256));
        c.mpa.revision = build_rng_.chance(0.8) ? 2 : 1;
        c.mpa.crc = build_rng_.chance(0.3);
        c.mpa.peer_to_peer = build_rng_.chance(0.7);
        c.mpa.rtr_types =
            build_rng_.chance(0.8) ? rtr::kAll : static_cast<std::uint8_t>(1 + build_rng_.below(7));
        cfgs_.push_back(c);
    }
    established_events_.assign(sc_.cores, 0);
    accept_calls_.assign(sc_.cores, 0);
    reject_calls_.assign(sc_.cores, 0);
    initiator_failures_.assign(sc_.cores, 0);
    addr_up_.assign(sc_.cores, {true, true});
    for (std::size_t i = 0; i < sc_.cores; ++i) {
        cores_.push_back(std::make_unique<Core>(cfgs_[i]));
        Core& core = *cores_.back();
        if (sc_.log) {
            core.set_trace([this, i](const TraceRecord& r) {
                if (r.kind == TraceRecord::Kind::kState)
                    log(fmt("core %zu conn %u/%u %s => %s", i, r.conn.index, r.conn.generation,
                            std::string(to_string(r.from)).c_str(),
                            std::string(to_string(r.to)).c_str()));
                if (r.kind == TraceRecord::Kind::kDrop)
                    log(fmt("core %zu conn %u/%u drop %s", i, r.conn.index, r.conn.generation,
                            std::string(to_string(r.drop)).c_str()));
            });
        }
        IWCM_ASSERT(core.add_address(addr(i, false)).has_value());
        IWCM_ASSERT(core.add_address(addr(i, true)).has_value());
        hosts_.push_back(std::make_unique<CoreHost>(
            core, [this, i](Instant now, Core&) { drain_events(i, now); }));
        net_.add_host(*hosts_.back());
        // Port 4791 on both families, each a wildcard or the core's address;
        // 4792 with a backlog of 2 on IPv4 only.
        for (bool v6 : {false, true}) {
            ListenerRec l;
            l.core = i;
            l.params.local = {
                build_rng_.chance(0.5) ? *IpAddr::parse(v6 ? "::" : "0.0.0.0") : addr(i, v6),
                kPortMain};
            listeners_.push_back(l);
        }
        ListenerRec small;
        small.core = i;
        small.params.local = {addr(i, false), kPortSmallBacklog};
        small.params.backlog = 2;
        listeners_.push_back(small);
    }
    for (std::size_t l = 0; l < listeners_.size(); ++l) {
        auto h = cores_[listeners_[l].core]->listen(listeners_[l].params);
        IWCM_ASSERT(h.has_value());
        listeners_[l].handle = *h;
        listeners_[l].live = true;
    }
}

void Runner::build_attempts() {
    // Faults per directed link; one seed in eight is clean.
    bool clean = !sc_.faults || build_rng_.chance(0.125);
    out_.clean = clean;
    for (std::size_t from = 0; from < sc_.cores; ++from) {
        for (std::size_t to = 0; to < sc_.cores; ++to) {
            if (from == to) continue;
            LinkFaults f;
            f.latency = microseconds(20 + static_cast<std::int64_t>(build_rng_.below(200)));
            f.jitter = microseconds(static_cast<std::int64_t>(build_rng_.below(300)));
            if (!clean) {
                f.loss = build_rng_.unit() * sc_.max_loss;
                f.duplicate = build_rng_.unit() * 0.10;
                f.reorder = build_rng_.unit() * 0.20;
                f.corrupt = build_rng_.unit() * 0.05;
                // Drawn only when asked for, so that the other scenarios' seeds replay
                // as they always did.
                if (sc_.max_shut_window > 0)
                    f.shut_window = build_rng_.unit() * sc_.max_shut_window;
            }
            net_.set_faults(from, to, f);
        }
    }
    // The small-backlog port is hit in a burst: its attempts go to one core and start at
    // one instant, so that more SYNs than its backlog arrive together and SYN cookies
    // answer the rest.
    const std::size_t burst_to = build_rng_.below(sc_.cores);
    const auto burst_at = microseconds(static_cast<std::int64_t>(build_rng_.below(200'000)));
    for (std::size_t k = 0; k < sc_.conns; ++k) {
        Attempt a;
        a.id = k;
        a.from = build_rng_.below(sc_.cores);
        a.to = build_rng_.chance(0.1) ? a.from
                                      : (a.from + 1 + build_rng_.below(sc_.cores - 1)) % sc_.cores;
        a.v6 = build_rng_.chance(0.3);
        std::uint64_t p = build_rng_.below(100);
        a.port = p < 80 ? kPortMain : p < 95 ? kPortSmallBacklog : kPortClosed;
        a.start = microseconds(static_cast<std::int64_t>(build_rng_.below(200'000)));
        if (a.port == kPortSmallBacklog) {
            a.v6 = false;
            a.to = burst_to;
            a.start = burst_at;
        }
        a.rev_param = static_cast<std::uint8_t>(build_rng_.below(3));
        a.rev = a.rev_param == 0 ? cfgs_[a.from].mpa.revision : a.rev_param;
        a.p2p = a.rev == 2 && cfgs_[a.from].mpa.peer_to_peer;
        a.rtr_offered = a.p2p ? cfgs_[a.from].mpa.rtr_types : 0;
        bool big = build_rng_.chance(0.1);
        a.ird = static_cast<std::uint16_t>(build_rng_.below(big ? 200 : 64));
        a.ord = static_cast<std::uint16_t>(build_rng_.below(big ? 200 : 64));
        std::size_t limit = wire_pdata_limit(a.rev);
        a.pdata.resize(build_rng_.chance(0.2) ? 0 : build_rng_.below(limit + 1));
        for (auto& b : a.pdata) b = static_cast<std::byte>(build_rng_.below(256));
        attempts_.push_back(std::move(a));
    }
    for (std::size_t k = 0; k < attempts_.size(); ++k)
        at(kInstantZero + attempts_[k].start, [this, k] { do_connect(attempts_[k]); });
    at(kInstantZero + kCloseAt, [this] { close_everything(); });
}

void Runner::build_disruptions() {
    if (!sc_.disruptions || out_.clean) return;
    std::size_t n = build_rng_.below(4);
    for (std::size_t i = 0; i < n; ++i) {
        Instant t =
            kInstantZero + microseconds(static_cast<std::int64_t>(build_rng_.below(2'500'000)));
        if (build_rng_.chance(0.5)) {
            std::size_t l = build_rng_.below(listeners_.size());
            bool relisten = build_rng_.chance(0.7);
            at(t, [this, l, relisten] { do_destroy_listen(l, relisten); });
        } else {
            std::size_t c = build_rng_.below(sc_.cores);
            bool v6 = build_rng_.chance(0.3);
            Duration down_for =
                microseconds(200'000 + static_cast<std::int64_t>(build_rng_.below(1'800'000)));
            at(t, [this, c, v6] { do_address_down(c, v6); });
            at(t + down_for, [this, c, v6] { do_address_up(c, v6); });
        }
    }
}

// ---------------------------------------------------------------- driving

void Runner::at(Instant t, std::function<void()> fn) {
    actions_.push(Action{t, action_seq_++, std::move(fn)});
}

// Runs the network and the scheduled application actions in virtual-time
// order: an action at t runs after every frame and timer due before t and
// before anything due after t.
void Runner::drive() {
    for (;;) {
        if (out_.steps > kMaxSteps || net_.now() - kInstantZero > kMaxVirtual) {
            fail(fmt("did not drain: %llu steps, %.1f s of virtual time, %zu frames in flight",
                     static_cast<unsigned long long>(out_.steps), ms(net_.now()) / 1000,
                     net_.in_flight()));
            return;
        }
        if (!actions_.empty()) {
            Instant t = std::max(actions_.top().at, net_.now());
            out_.steps += net_.run_until(t, 1);
            while (!actions_.empty() && actions_.top().at <= net_.now()) {
                Action a = actions_.top();
                actions_.pop();
                a.run();
            }
            continue;
        }
        if (!net_.step()) return;
        ++out_.steps;
    }
}

void Runner::drain_events(std::size_t core, Instant now) {
    while (auto e = cores_[core]->poll_event()) on_event(core, now, *e);
}

SideLog* Runner::side(std::size_t core, bool passive, std::size_t index) {
    (void)core;
    return passive ? &passives_[index].log : &attempts_[index].log;
}

void Runner::on_event(std::size_t core, Instant now, const Event& e) {
    log(
        fmt("core %zu conn %u/%u %s status %d state %s %s -> %s rev %u ird %u ord %u p2p %d rtr %s "
            "pdata %zu",
            core, e.conn.index, e.conn.generation, std::string(to_string(e.type)).c_str(), e.status,
            std::string(to_string(e.state)).c_str(), e.local.to_string().c_str(),
            e.remote.to_string().c_str(), e.mpa.revision, e.mpa.ird, e.mpa.ord, e.mpa.peer_to_peer,
            std::string(to_string(e.mpa.rtr)).c_str(), e.private_data.size()));
    if (e.type == EventType::kConnectRequest) {
        on_request(core, now, e);
        return;
    }
    if (e.type == EventType::kAddressDown || e.type == EventType::kAddressUp) {
        on_listener_event(core, e);
        return;
    }
    auto it = handles_.find({core, e.conn.index, e.conn.generation});
    if (it == handles_.end()) {
        fail(fmt("core %zu: %s for a handle the application was never given", core,
                 std::string(to_string(e.type)).c_str()));
        return;
    }
    auto [passive, index] = it->second;
    SideLog& s = *side(core, passive, index);
    const char* who = passive ? "responder" : "initiator";
    if (s.terminal)
        fail(fmt("core %zu %s: %s after the terminal event", core, who,
                 std::string(to_string(e.type)).c_str()));
    if (passive && passives_[index].decision == Decision::kRejected)
        fail(fmt("core %zu: %s on a handle the application rejected", core,
                 std::string(to_string(e.type)).c_str()));
    if (s.seen_local && (s.local != e.local || s.remote != e.remote))
        fail(fmt("core %zu %s: endpoints changed between events", core, who));
    s.seen_local = true;
    s.local = e.local;
    s.remote = e.remote;
    if (e.type == EventType::kEstablished) {
        if (s.established) fail(fmt("core %zu %s: established twice", core, who));
        if (passive && passives_[index].decision != Decision::kAccepted)
            fail(fmt("core %zu: responder established without accept()", core));
        s.established = true;
        s.est = e.mpa;
        s.est_pdata.assign(e.private_data.begin(), e.private_data.end());
        ++established_events_[core];
        after_established(core, passive, index, now);
        return;
    }
    s.terminal = true;
    s.term_type = e.type;
    s.term_status = e.status;
    s.term_state = e.state;
    s.term_pdata.assign(e.private_data.begin(), e.private_data.end());
    if (!passive && e.type != EventType::kDisconnected) ++initiator_failures_[core];
    // kDisconnected ends exactly the connections that were established.
    if ((e.type == EventType::kDisconnected) != s.established)
        fail(fmt("core %zu %s: terminal %s but established=%d", core, who,
                 std::string(to_string(e.type)).c_str(), s.established));
    // A terminal event ends the handle (events.hpp).
    auto st = cores_[core]->state(e.conn);
    if (st.has_value() || st.error() != ApiError::kStaleHandle)
        fail(fmt("core %zu %s: handle still usable after its terminal event", core, who));
    if (app_rng_.chance(0.1)) {
        // Probe the stale handle later: every command must say so.
        at(now + random_delay(milliseconds(50)), [this, core, passive, index] {
            do_disconnect(core, passive, index, DisconnectMode::kGraceful);
        });
    }
}

void Runner::on_request(std::size_t core, Instant now, const Event& e) {
    if (handles_.count({core, e.conn.index, e.conn.generation}) != 0) {
        fail(fmt("core %zu: connect request on a handle already in use", core));
        return;
    }
    bool listener_live = false;
    for (const ListenerRec& l : listeners_)
        if (l.core == core && l.live && l.handle == e.listener &&
            l.params.local.port == e.local.port)
            listener_live = true;
    if (!listener_live)
        fail(fmt("core %zu: connect request on %s from no live listener", core,
                 e.local.to_string().c_str()));
    Passive p;
    p.core = core;
    p.handle = e.conn;
    p.req = e.mpa;
    p.req_pdata.assign(e.private_data.begin(), e.private_data.end());
    p.listener = e.listener;
    p.log.local = e.local;
    p.log.remote = e.remote;
    p.log.seen_local = true;
    std::size_t index = passives_.size();
    passives_.push_back(std::move(p));
    handles_[{core, e.conn.index, e.conn.generation}] = {true, index};
    double r = app_rng_.unit();
    if (r < 0.60) {
        at(now + random_delay(milliseconds(300)), [this, index] { do_accept(index); });
    } else if (r < 0.75) {
        at(now + random_delay(milliseconds(300)), [this, index] { do_reject(index); });
    } else if (r < 0.85) {
        passives_[index].decision = Decision::kIgnored;  // the accept timer decides
    } else if (r < 0.95) {
        DisconnectMode m =
            app_rng_.chance(0.5) ? DisconnectMode::kGraceful : DisconnectMode::kAbortive;
        at(now + random_delay(milliseconds(300)),
           [this, core, index, m] { do_disconnect(core, true, index, m); });
    } else {
        at(now, [this, index] { do_accept(index); });
    }
}

void Runner::after_established(std::size_t core, bool passive, std::size_t index, Instant now) {
    if (closing_) {
        DisconnectMode m =
            app_rng_.chance(0.8) ? DisconnectMode::kGraceful : DisconnectMode::kAbortive;
        at(now, [this, core, passive, index, m] { do_disconnect(core, passive, index, m); });
        return;
    }
    double r = app_rng_.unit();
    if (r < 0.40) {
        at(now + random_delay(milliseconds(2000)), [this, core, passive, index] {
            do_disconnect(core, passive, index, DisconnectMode::kGraceful);
        });
    } else if (r < 0.55) {
        at(now + random_delay(milliseconds(2000)), [this, core, passive, index] {
            do_disconnect(core, passive, index, DisconnectMode::kAbortive);
        });
    } else if (r < 0.60) {
        // A graceful close cut short by an abort while the FIN is out.
        Instant t = now + random_delay(milliseconds(1000));
        at(t, [this, core, passive, index] {
            do_disconnect(core, passive, index, DisconnectMode::kGraceful);
        });
        at(t + random_delay(milliseconds(5)), [this, core, passive, index] {
            do_disconnect(core, passive, index, DisconnectMode::kAbortive);
        });
    }
    // Otherwise held until close_everything().
}

// ---------------------------------------------------------------- commands

void Runner::do_connect(Attempt& a) {
    Instant now = net_.now();
    ConnectParams p;
    p.local = {addr(a.from, a.v6), 0};
    p.remote = {addr(a.to, a.v6), a.port};
    p.remote_mac = mac(a.to);
    p.private_data = a.pdata;
    p.ird = a.ird;
    p.ord = a.ord;
    p.mpa_revision = a.rev_param;
    auto h = cores_[a.from]->connect(now, p);
    log(fmt("core %zu connect #%zu %s -> %s rev %u ird %u ord %u pdata %zu: %s", a.from, a.id,
            p.local.to_string().c_str(), p.remote.to_string().c_str(), a.rev, a.ird, a.ord,
            a.pdata.size(), h ? "ok" : std::string(to_string(h.error())).c_str()));
    if (!h) {
        if (h.error() == ApiError::kAddressNotLocal && !addr_up_[a.from][a.v6]) {
            a.refused_locally = true;
            ++out_.refused_locally;
        } else {
            fail(fmt("connect #%zu refused: %s", a.id, std::string(to_string(h.error())).c_str()));
        }
        return;
    }
    a.have_handle = true;
    a.handle = *h;
    handles_[{a.from, h->index, h->generation}] = {false, a.id};
    a.gives_up = app_rng_.chance(0.1);
    if (a.gives_up) {
        // The application gives up at a random moment (maybe after established).
        DisconnectMode m =
            app_rng_.chance(0.5) ? DisconnectMode::kGraceful : DisconnectMode::kAbortive;
        std::size_t id = a.id;
        std::size_t from = a.from;
        at(now + random_delay(milliseconds(150)),
           [this, from, id, m] { do_disconnect(from, false, id, m); });
    }
    drain_events(a.from, now);
}

void Runner::do_accept(std::size_t index) {
    Passive& p = passives_[index];
    Instant now = net_.now();
    std::size_t limit = wire_pdata_limit(p.req.revision);
    AcceptParams ap;
    std::vector<std::byte> pdata = random_pdata(limit);
    ap.private_data = pdata;
    bool big = app_rng_.chance(0.1);
    ap.ird = static_cast<std::uint16_t>(app_rng_.below(big ? 200 : 64));
    ap.ord = static_cast<std::uint16_t>(app_rng_.below(big ? 200 : 64));
    auto r = cores_[p.core]->accept(now, p.handle, ap);
    log(fmt("core %zu accept %u/%u ird %u ord %u pdata %zu: %s", p.core, p.handle.index,
            p.handle.generation, ap.ird, ap.ord, pdata.size(),
            r ? "ok" : std::string(to_string(r.error())).c_str()));
    if (p.log.terminal) {
        if (r || r.error() != ApiError::kStaleHandle)
            fail(fmt("core %zu: accept on an ended handle was not refused as stale", p.core));
        return;
    }
    if (!r) {
        fail(
            fmt("core %zu: accept refused: %s", p.core, std::string(to_string(r.error())).c_str()));
        return;
    }
    p.decision = Decision::kAccepted;
    p.answer_pdata = std::move(pdata);
    p.acc_ird = ap.ird;
    p.acc_ord = ap.ord;
    ++accept_calls_[p.core];
    drain_events(p.core, now);
}

void Runner::do_reject(std::size_t index) {
    Passive& p = passives_[index];
    Instant now = net_.now();
    std::vector<std::byte> pdata = random_pdata(wire_pdata_limit(p.req.revision));
    auto r = cores_[p.core]->reject(now, p.handle, pdata);
    log(fmt("core %zu reject %u/%u pdata %zu: %s", p.core, p.handle.index, p.handle.generation,
            pdata.size(), r ? "ok" : std::string(to_string(r.error())).c_str()));
    if (p.log.terminal) {
        if (r || r.error() != ApiError::kStaleHandle)
            fail(fmt("core %zu: reject on an ended handle was not refused as stale", p.core));
        return;
    }
    if (!r) {
        fail(
            fmt("core %zu: reject refused: %s", p.core, std::string(to_string(r.error())).c_str()));
        return;
    }
    p.decision = Decision::kRejected;
    p.answer_pdata = std::move(pdata);
    ++reject_calls_[p.core];
    // reject() ends the handle without an event.
    auto st = cores_[p.core]->state(p.handle);
    if (st.has_value() || st.error() != ApiError::kStaleHandle)
        fail(fmt("core %zu: handle usable after reject", p.core));
    drain_events(p.core, now);
}

void Runner::do_disconnect(std::size_t core, bool passive, std::size_t index, DisconnectMode mode) {
    Instant now = net_.now();
    SideLog& s = *side(core, passive, index);
    ConnHandle h = passive ? passives_[index].handle : attempts_[index].handle;
    auto r = cores_[core]->disconnect(now, h, mode);
    log(fmt("core %zu disconnect %s %u/%u: %s", core,
            mode == DisconnectMode::kGraceful ? "graceful" : "abortive", h.index, h.generation,
            r ? "ok" : std::string(to_string(r.error())).c_str()));
    bool ended = s.terminal || (passive && passives_[index].decision == Decision::kRejected);
    if (ended) {
        if (r || r.error() != ApiError::kStaleHandle)
            fail(fmt("core %zu: disconnect on an ended handle was not refused as stale", core));
        return;
    }
    if (!r) {
        fail(fmt("core %zu: disconnect refused: %s", core,
                 std::string(to_string(r.error())).c_str()));
        return;
    }
    if (passive && passives_[index].decision == Decision::kNone)
        passives_[index].decision = Decision::kDropped;
    if (!passive && !s.established) attempts_[index].app_ended_early = true;
    drain_events(core, now);
}

void Runner::do_destroy_listen(std::size_t l, bool relisten) {
    ListenerRec& rec = listeners_[l];
    Instant now = net_.now();
    auto r = cores_[rec.core]->destroy_listen(now, rec.handle);
    log(fmt("core %zu destroy_listen %s: %s", rec.core, rec.params.local.to_string().c_str(),
            r ? "ok" : std::string(to_string(r.error())).c_str()));
    if (rec.live != r.has_value())
        fail(fmt("core %zu: destroy_listen said %s for a listener that is %s", rec.core,
                 r ? "ok" : "error", rec.live ? "live" : "gone"));
    rec.live = false;
    drain_events(rec.core, now);
    if (relisten && !closing_)
        at(now + microseconds(100'000 + static_cast<std::int64_t>(app_rng_.below(1'400'000))),
           [this, l] { do_relisten(l); });
}

void Runner::do_relisten(std::size_t l) {
    ListenerRec& rec = listeners_[l];
    if (closing_ || rec.live) return;
    auto r = cores_[rec.core]->listen(rec.params);
    const IpAddr& a = rec.params.local.addr;
    bool addr_down = !a.is_unspecified() && !addr_up_[rec.core][a.is_v6()];
    log(fmt("core %zu listen %s: %s", rec.core, rec.params.local.to_string().c_str(),
            r ? "ok" : std::string(to_string(r.error())).c_str()));
    if (addr_down) {
        if (r || r.error() != ApiError::kAddressNotLocal)
            fail(fmt("core %zu: listen on a removed address", rec.core));
        return;
    }
    if (!r) {
        fail(fmt("core %zu: listen refused: %s", rec.core,
                 std::string(to_string(r.error())).c_str()));
        return;
    }
    rec.handle = *r;
    rec.live = true;
}

// A listener outlives its address (irdma_if_notify): each live listener on it
// is owed exactly one kAddressDown when it goes and one kAddressUp when it
// comes back, with -ENETDOWN and 0.
void Runner::owe_address_events(std::size_t core, const IpAddr& a, bool down) {
    for (ListenerRec& l : listeners_) {
        if (l.core != core || !l.live || l.params.local.addr != a) continue;
        ++(down ? l.owed_down : l.owed_up);
    }
}

void Runner::on_listener_event(std::size_t core, const Event& e) {
    const bool down = e.type == EventType::kAddressDown;
    for (ListenerRec& l : listeners_) {
        if (l.core != core || !l.live || l.handle != e.listener) continue;
        int& owed = down ? l.owed_down : l.owed_up;
        if (owed == 0)
            fail(fmt("core %zu: %s not owed to listener %s", core,
                     std::string(to_string(e.type)).c_str(), l.params.local.to_string().c_str()));
        --owed;
        if (e.status != (down ? -ENETDOWN : 0) || e.local != l.params.local || e.conn.valid())
            fail(fmt("core %zu: %s status %d local %s", core,
                     std::string(to_string(e.type)).c_str(), e.status,
                     e.local.to_string().c_str()));
        return;
    }
    fail(fmt("core %zu: %s for no live listener", core, std::string(to_string(e.type)).c_str()));
}

void Runner::do_address_down(std::size_t core, bool v6) {
    Instant now = net_.now();
    IpAddr a = addr(core, v6);
    auto r = cores_[core]->remove_address(now, a);
    log(fmt("core %zu address down %s: %s", core, a.to_string().c_str(),
            r ? fmt("%zu torn down", *r).c_str() : std::string(to_string(r.error())).c_str()));
    if (r.has_value() != addr_up_[core][v6])
        fail(fmt("core %zu: remove_address disagrees with the address table", core));
    addr_up_[core][v6] = false;
    if (r) owe_address_events(core, a, true);
    drain_events(core, now);
    for (const ListenerRec& l : listeners_)
        if (l.owed_down != 0)
            fail(fmt("core %zu: listener %s did not hear its address go", core,
                     l.params.local.to_string().c_str()));
}

void Runner::do_address_up(std::size_t core, bool v6) {
    IpAddr a = addr(core, v6);
    if (addr_up_[core][v6]) return;
    auto r = cores_[core]->add_address(a);
    log(fmt("core %zu address up %s: %s", core, a.to_string().c_str(),
            r ? "ok" : std::string(to_string(r.error())).c_str()));
    if (!r) fail(fmt("core %zu: add_address refused", core));
    addr_up_[core][v6] = true;
    owe_address_events(core, a, false);
    drain_events(core, net_.now());
    for (std::size_t l = 0; l < listeners_.size(); ++l) {
        if (listeners_[l].owed_up != 0)
            fail(fmt("core %zu: listener %s did not hear its address come back", core,
                     listeners_[l].params.local.to_string().c_str()));
        // A listener destroyed while the address was away comes back now.
        if (listeners_[l].core == core && listeners_[l].params.local.addr == a) do_relisten(l);
    }
}

// At kCloseAt the applications close what they hold; late arrivals are
// closed as they come (after_established).
void Runner::close_everything() {
    closing_ = true;
    log("closing: applications disconnect and destroy their listeners");
    for (std::size_t k = 0; k < attempts_.size(); ++k) {
        const Attempt& a = attempts_[k];
        if (a.have_handle && a.log.established && !a.log.terminal)
            do_disconnect(
                a.from, false, k,
                app_rng_.chance(0.8) ? DisconnectMode::kGraceful : DisconnectMode::kAbortive);
    }
    for (std::size_t k = 0; k < passives_.size(); ++k) {
        const Passive& p = passives_[k];
        if (p.log.established && !p.log.terminal)
            do_disconnect(
                p.core, true, k,
                app_rng_.chance(0.8) ? DisconnectMode::kGraceful : DisconnectMode::kAbortive);
    }
    // Listeners stay until the network is idle, so that unanswered requests
    // meet their timers rather than a listener's reset (run() destroys them).
}

// ---------------------------------------------------------------- checks

void Runner::check_core(std::size_t c) {
    const Core& core = *cores_[c];
    const Stats& s = core.stats();
    // No leaked node, timer entry or event once the network is idle.
    if (core.live_nodes() != 0)
        fail(fmt("core %zu: %zu nodes alive after drain", c, core.live_nodes()));
    if (core.pending_timers() != 0)
        fail(fmt("core %zu: %zu timers armed after drain", c, core.pending_timers()));
    if (core.queued_events() != 0)
        fail(fmt("core %zu: %zu events queued after drain", c, core.queued_events()));
    // Stats add up.
    if (s.nodes_created != s.nodes_destroyed)
        fail(fmt("core %zu: nodes created %llu != destroyed %llu", c,
                 (unsigned long long)s.nodes_created, (unsigned long long)s.nodes_destroyed));
    if (s.listeners_created != s.listeners_destroyed)
        fail(fmt("core %zu: listeners created %llu != destroyed %llu", c,
                 (unsigned long long)s.listeners_created,
                 (unsigned long long)s.listeners_destroyed));
    if (s.established != established_events_[c])
        fail(fmt("core %zu: stats.established %llu != %llu kEstablished events", c,
                 (unsigned long long)s.established, (unsigned long long)established_events_[c]));
    if (s.accepts != accept_calls_[c] || s.rejects != reject_calls_[c])
        fail(fmt("core %zu: stats accepts/rejects %llu/%llu != calls %llu/%llu", c,
                 (unsigned long long)s.accepts, (unsigned long long)s.rejects,
                 (unsigned long long)accept_calls_[c], (unsigned long long)reject_calls_[c]));
    if (s.connect_errors != initiator_failures_[c])
        fail(fmt("core %zu: stats.connect_errors %llu != %llu failed connects", c,
                 (unsigned long long)s.connect_errors, (unsigned long long)initiator_failures_[c]));
    if (s.drops_total() > s.frames_in)
        fail(fmt("core %zu: %llu drops for %llu frames in", c, (unsigned long long)s.drops_total(),
                 (unsigned long long)s.frames_in));
    if (s.nodes_created < accept_calls_[c] + reject_calls_[c])
        fail(fmt("core %zu: fewer nodes than accepted and rejected requests", c));
}

void Runner::check_attempt(const Attempt& a) {
    if (!a.have_handle) return;
    const SideLog& i = a.log;
    // Every attempt ends in exactly one terminal event (twice is caught as it happens).
    if (!i.terminal) {
        fail(fmt("connect #%zu: no terminal event", a.id));
        return;
    }
    if (i.local.addr != addr(a.from, a.v6) || i.remote != Endpoint{addr(a.to, a.v6), a.port})
        fail(fmt("connect #%zu: events name %s -> %s", a.id, i.local.to_string().c_str(),
                 i.remote.to_string().c_str()));
    std::vector<const Passive*> ps;
    for (const Passive& p : passives_)
        if (p.core == a.to && p.log.local == i.remote && p.log.remote == i.local) ps.push_back(&p);
    for (const Passive* p : ps) {
        // The responder heard exactly what the initiator asked.
        if (p->req_pdata != a.pdata) fail(fmt("connect #%zu: request private data differs", a.id));
        bool fallback = a.rev == 2 && p->req.revision == 1;
        if (p->req.revision != a.rev && !fallback)
            fail(fmt("connect #%zu: request revision %u, sent %u", a.id, p->req.revision, a.rev));
        // What the initiator asked for, clamped to what it can honour (irdma_record_ird_ord).
        const std::uint16_t ird = std::min(a.ird, cfgs_[a.from].mpa.max_ird);
        const std::uint16_t ord = std::min(a.ord, cfgs_[a.from].mpa.max_ord);
        if (p->req.revision == 2 &&
            (p->req.ird != ird || p->req.ord != ord || p->req.peer_to_peer != a.p2p ||
             p->req.rtr_offered != a.rtr_offered))
            fail(fmt("connect #%zu: request IRD/ORD/p2p/RTR %u/%u/%d/%u, sent %u/%u/%d/%u", a.id,
                     p->req.ird, p->req.ord, p->req.peer_to_peer, p->req.rtr_offered, ird, ord,
                     a.p2p, a.rtr_offered));
        // RFC 6581 section 6: with the peer-to-peer bit the responder is
        // established only on the initiator's RTR, sent once it is established.
        if (p->log.established && p->log.est.peer_to_peer && !i.established)
            fail(fmt("connect #%zu: responder established on an RTR the initiator never sent",
                     a.id));
    }
    const Passive* accepted = nullptr;
    for (const Passive* p : ps)
        if (p->decision == Decision::kAccepted) accepted = p;
    if (i.established) {
        if (accepted == nullptr) {
            fail(fmt("connect #%zu: initiator established but no responder accepted", a.id));
            return;
        }
        if (i.est_pdata != accepted->answer_pdata)
            fail(fmt("connect #%zu: reply private data differs", a.id));
        if (i.est.revision != accepted->req.revision)
            fail(fmt("connect #%zu: initiator revision %u, request %u", a.id, i.est.revision,
                     accepted->req.revision));
    }
    if (i.established && accepted->log.established) {
        const MpaInfo& x = i.est;
        const MpaInfo& y = accepted->log.est;
        if (x.revision != y.revision || x.peer_to_peer != y.peer_to_peer || x.rtr != y.rtr ||
            x.crc != y.crc)
            fail(fmt("connect #%zu: sides disagree: rev %u/%u p2p %d/%d rtr %s/%s crc %d/%d", a.id,
                     x.revision, y.revision, x.peer_to_peer, y.peer_to_peer,
                     std::string(to_string(x.rtr)).c_str(), std::string(to_string(y.rtr)).c_str(),
                     x.crc, y.crc));
        if (x.peer_to_peer && x.rtr == RtrType::kNone)
            fail(fmt("connect #%zu: peer-to-peer without an RTR type", a.id));
        if (x.revision == 2) {
            // RFC 6581 section 7 (relaxed): each side's ORD within the other's IRD;
            // the initiator keeps its IRD, the responder's ORD is cut to it. Both
            // start from their requests clamped to their maxima; a READ RTR is one
            // read each way (initiator ORD >= 1, responder IRD >= 1).
            const std::uint16_t ird = std::min(a.ird, cfgs_[a.from].mpa.max_ird);
            const std::uint16_t ord = std::min(a.ord, cfgs_[a.from].mpa.max_ord);
            const std::uint16_t acc_ord = std::min(accepted->acc_ord, cfgs_[a.to].mpa.max_ord);
            std::uint16_t want_x_ord = std::min(ord, y.ird);
            if (x.rtr == RtrType::kRead) want_x_ord = std::max<std::uint16_t>(want_x_ord, 1);
            bool read_ok = x.rtr != RtrType::kRead || y.ird >= 1;
            if (y.ord > x.ird || x.ord > y.ird || x.ird != ird || y.ord != std::min(acc_ord, ird) ||
                x.ord != want_x_ord || !read_ok)
                fail(
                    fmt("connect #%zu: IRD/ORD initiator %u/%u responder %u/%u (asked %u/%u, "
                        "accepted %u/%u)",
                        a.id, x.ird, x.ord, y.ird, y.ord, a.ird, a.ord, accepted->acc_ird,
                        accepted->acc_ord));
        }
        ++out_.established_both;
        out_.rtr_send += x.rtr == RtrType::kSend;
        out_.rtr_write += x.rtr == RtrType::kWrite;
        out_.rtr_read += x.rtr == RtrType::kRead;
    } else if (i.established || (accepted != nullptr && accepted->log.established)) {
        ++out_.established_one_side;
    } else if (i.term_type == EventType::kRejected && i.term_state == CmState::kMpaRejRcvd) {
        // An MPA reject comes only from a responder's reject(), with its private data.
        bool found = false;
        for (const Passive* p : ps)
            if (p->decision == Decision::kRejected && p->answer_pdata == i.term_pdata) found = true;
        if (!found) fail(fmt("connect #%zu: rejected by a reply no application sent", a.id));
        ++out_.rejected;
    } else {
        ++out_.failed;
    }
    // Decided before any frame moved: whether the network could stop this attempt alone.
    const bool rtr_clash =
        a.p2p && cfgs_[a.to].mpa.revision == 2 && (a.rtr_offered & cfgs_[a.to].mpa.rtr_types) == 0;
    if (a.port == kPortMain && !a.gives_up && !rtr_clash) {
        ++out_.eligible;
        if (i.established && accepted != nullptr && accepted->log.established)
            ++out_.eligible_established;
    }
    if (out_.clean) check_clean(a, ps);
}

// RFC 6581 section 6: a peer-to-peer request at revision 2 whose RTR types the responder
// accepts none of fails by design.
bool Runner::rtr_mismatch(const Attempt& a, const Passive& p) const {
    return p.req.peer_to_peer && p.req.revision == 2 &&
           (p.req.rtr_offered & cfgs_[a.to].mpa.rtr_types) == 0;
}

// Without faults or disruptions, what each application decided is what happens.
void Runner::check_clean(const Attempt& a, const std::vector<const Passive*>& ps) {
    const SideLog& i = a.log;
    if (a.app_ended_early) return;
    if (a.port == kPortClosed) {
        if (i.term_type != EventType::kRejected || i.term_status != -ECONNREFUSED)
            fail(fmt("clean: connect #%zu to a closed port ended %s %d", a.id,
                     std::string(to_string(i.term_type)).c_str(), i.term_status));
        return;
    }
    if (ps.empty()) {
        // The small-backlog port with its queue full of requests not yet answered: the SYN
        // was answered with a cookie, and the ACK that brought it back found no room (as
        // Linux with a full accept queue), so the request is never read and the reply
        // timer ends the attempt.
        const bool queue_full =
            a.port == kPortSmallBacklog && cores_[a.to]->stats().backlog_drops > 0 &&
            i.term_type == EventType::kUnreachable && i.term_status == -ETIMEDOUT;
        if (!queue_full) fail(fmt("clean: connect #%zu made no connect request", a.id));
        return;
    }
    // A responder that drops a revision-2 request with a reset makes the
    // initiator retry once at revision 1 (a second request); the last
    // request decides the outcome.
    for (std::size_t k = 0; k + 1 < ps.size(); ++k)
        if (ps[k]->decision != Decision::kDropped || ps.size() > 2)
            fail(fmt("clean: connect #%zu made %zu connect requests", a.id, ps.size()));
    const Passive& p = *ps.back();
    switch (p.decision) {
        case Decision::kAccepted: {
            // Relaxed IRD/ORD negotiation never fails; an RTR mismatch does (a
            // responder at revision 1 answers without the peer-to-peer bit).
            if (rtr_mismatch(a, p)) {
                if (p.log.established)
                    fail(
                        fmt("clean: connect #%zu: responder established despite a mismatch", a.id));
            } else if (!i.established || !p.log.established) {
                fail(fmt("clean: connect #%zu accepted but established %d/%d", a.id, i.established,
                         p.log.established));
            }
            return;
        }
        case Decision::kRejected:
            if (i.term_type != EventType::kRejected || i.term_status != -ECONNREFUSED ||
                i.term_pdata != p.answer_pdata)
                fail(fmt("clean: connect #%zu rejected but ended %s %d", a.id,
                         std::string(to_string(i.term_type)).c_str(), i.term_status));
            return;
        case Decision::kIgnored:
            if (i.term_type != EventType::kUnreachable ||
                p.log.term_type != EventType::kConnectError)
                fail(fmt("clean: connect #%zu unanswered but ended %s / %s", a.id,
                         std::string(to_string(i.term_type)).c_str(),
                         std::string(to_string(p.log.term_type)).c_str()));
            return;
        case Decision::kDropped:
            if (i.established || i.term_type != EventType::kRejected)
                fail(fmt("clean: connect #%zu dropped by the responder but ended %s", a.id,
                         std::string(to_string(i.term_type)).c_str()));
            return;
        case Decision::kNone:
            fail(fmt("clean: connect #%zu: the responder's application never decided", a.id));
            return;
    }
}

void Runner::check_all() {
    for (std::size_t c = 0; c < cores_.size(); ++c) check_core(c);
    // Frames: every frame out of a core went onto the wire or looped back,
    // every frame into a core came off the wire or looped back.
    std::uint64_t out = 0, in = 0;
    for (const auto& c : cores_) {
        out += c->stats().frames_out;
        in += c->stats().frames_in;
        out_.retransmissions += c->stats().retransmissions;
        out_.window_probes += c->stats().window_probes;
        out_.syn_cookies_sent += c->stats().syn_cookies_sent;
        out_.syn_cookies_accepted += c->stats().syn_cookies_accepted;
        out_.v1_fallbacks += c->stats().mpa_v1_fallbacks;
        out_.terminates_sent += c->stats().terminates_sent;
    }
    const auto& nc = net_.counters();
    out_.windows_shut = nc.windows_shut;
    if (out - in != nc.sent - nc.delivered)
        fail(fmt(
            "frames: cores sent %llu and received %llu, the wire carried %llu and delivered %llu",
            (unsigned long long)out, (unsigned long long)in, (unsigned long long)nc.sent,
            (unsigned long long)nc.delivered));
    for (const Attempt& a : attempts_) check_attempt(a);
    for (const Passive& p : passives_) {
        if (!p.log.terminal && p.decision != Decision::kRejected)
            fail(fmt("core %zu: responder handle %u/%u never ended", p.core, p.handle.index,
                     p.handle.generation));
        bool matched = false;
        for (const Attempt& a : attempts_)
            if (a.have_handle && a.to == p.core && a.log.remote == p.log.local &&
                a.log.local == p.log.remote)
                matched = true;
        if (!matched)
            fail(fmt("core %zu: a connect request %s -> %s that no application made", p.core,
                     p.log.remote.to_string().c_str(), p.log.local.to_string().c_str()));
    }
}

SimOutcome Runner::run() {
    build_cores();
    build_attempts();
    build_disruptions();
    drive();
    for (std::size_t l = 0; l < listeners_.size(); ++l)
        if (listeners_[l].live) do_destroy_listen(l, false);
    for (std::size_t c = 0; c < cores_.size(); ++c) drain_events(c, net_.now());
    out_.attempts = attempts_.size();
    if (out_.ok) check_all();
    out_.frames = net_.counters().sent;
    out_.virtual_seconds = ms(net_.now()) / 1000;
    return out_;
}

}  // namespace

SimOutcome run_scenario(const SimScenario& scenario) {
    g_seed_in_progress.store(scenario.seed);
    g_seed_active.store(true);
    SimOutcome out = Runner(scenario).run();
    g_seed_active.store(false);
    return out;
}

std::string describe(const SimOutcome& o) {
    return fmt(
        "seed %llu: %s%s, %zu attempts: %zu established, %zu one side, %zu rejected, %zu failed, "
        "%zu refused "
        "locally; %llu frames, %llu retransmissions, %.1f s virtual%s%s",
        static_cast<unsigned long long>(o.seed), o.ok ? "ok" : "FAIL", o.clean ? " (clean)" : "",
        o.attempts, o.established_both, o.established_one_side, o.rejected, o.failed,
        o.refused_locally, static_cast<unsigned long long>(o.frames),
        static_cast<unsigned long long>(o.retransmissions), o.virtual_seconds, o.ok ? "" : ": ",
        o.failure.c_str());
}

void install_seed_reporter() {
    static bool installed = false;
    if (installed) return;
    installed = true;
    std::signal(SIGABRT, report_seed_on_abort);
}

}  // namespace iwcm::io
