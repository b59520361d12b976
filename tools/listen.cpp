// iwarp-cm listen: accept (or reject) iWARP connections on a TAP device, and
// exchange bytes on each (--send-bytes, --expect-bytes).
// Read first: README.md ("Against the Linux TCP stack"), tools/wire_cli.hpp,
// tools/transfer.hpp, include/iwcm/core.hpp.
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <memory>
#include <unordered_map>
#include <unordered_set>

#include "tools/commands.hpp"
#include "tools/transfer.hpp"
#include "tools/wire_cli.hpp"

namespace iwcm::tools {

namespace {

struct ListenOptions {
    WireOptions wire;
    std::uint16_t port = 0;
    std::uint32_t backlog = 0;
    bool reject = false;
    unsigned count = 0;
    StreamOptions data;  // --send-bytes, --expect-bytes on every accepted connection
};

// How long the listener waits for a closing connection's last frames
// (LAST_ACK, TIME_WAIT) once --count connections are done.
constexpr auto kDrainLimit = std::chrono::seconds(5);

struct Tally {
    unsigned completed = 0;
    std::vector<ConnHandle> open;  // accepted, no terminal event yet
    int code = exit_codes::kOk;
    std::string reason;
    void failed(int c, const std::string& why) {
        code = c;
        reason = why;
    }
};

// A connection's terminal event: counts it and records a failure.
void on_terminal(const Event& e, Tally& t) {
    ++t.completed;
    std::erase(t.open, e.conn);
    if (e.type == EventType::kDisconnected) {
        if (e.status == -ECONNRESET)
            t.failed(exit_codes::kReset,
                     "connection from " + e.remote.to_string() + " reset by peer");
        return;
    }
    if (e.type == EventType::kUnreachable)
        t.failed(exit_codes::kTimeout, "connection from " + e.remote.to_string() + " timed out");
    else
        t.failed(
            e.status == -ECONNRESET ? exit_codes::kReset : exit_codes::kError,
            "connection from " + e.remote.to_string() + " failed: " + std::strerror(-e.status));
}

void on_request(Instant now, const Event& e, const ListenOptions& o,
                const std::vector<std::byte>& pdata, Session& s, const Reporter& rep, Tally& t) {
    Report r;
    r.local = e.local;
    r.remote = e.remote;
    r.has_pdata = true;
    r.pdata = pdata;
    if (o.reject || e.mpa.revision > o.wire.mpa_rev) {
        auto res = s.core->reject(now, e.conn, pdata);
        r.event = "reject_sent";
        if (!res) r.error = std::string(to_string(res.error()));
        if (e.mpa.revision > o.wire.mpa_rev) r.add("why", std::string("revision above --mpa-rev"));
        rep.print(now, r);
        ++t.completed;  // a rejected request has no further event
        return;
    }
    AcceptParams ap;
    ap.private_data = pdata;
    ap.ird = o.wire.ird;
    ap.ord = o.wire.ord;
    auto res = s.core->accept(now, e.conn, ap);
    r.event = "accept_sent";
    if (!res)
        r.error = std::string(to_string(res.error()));
    else
        t.open.push_back(e.conn);
    rep.print(now, r);
}

// Every accepted connection's byte stream (--send-bytes, --expect-bytes).
class Streams {
public:
    Streams(const StreamOptions& o, Session& s, const Reporter& rep, Tally& t)
        : o_(o), s_(s), rep_(rep), tally_(t) {}

    // A core event; returns true when it was a stream's own (not printed).
    bool on_event(Instant now, const Event& e) {
        if (e.type == EventType::kEstablished && o_.any()) {
            auto [it, fresh] = map_.try_emplace(key(e.conn), o_, false, e);
            if (fresh) it->second.start(*s_.core, now);
            return false;
        }
        if (!is_stream_event(e) && !e.terminal()) return false;
        if (auto it = map_.find(key(e.conn)); it != map_.end())
            it->second.on_event(*s_.core, now, e);
        return is_stream_event(e);
    }
    // After each step: progress, lines, failures (the connection is reset),
    // --close-after-data; forgets the connections that ended.
    void follow(Instant now, const std::vector<ConnHandle>& open) {
        for (auto it = map_.begin(); it != map_.end();) {
            Transfer& x = it->second;
            x.poll(*s_.core, now);
            if (auto r = x.take_report()) rep_.print(now, *r);
            const ConnHandle conn = handle(it->first);
            const bool live = std::find(open.begin(), open.end(), conn) != open.end();
            if (x.phase() == Transfer::Phase::kFailed) {
                tally_.failed(x.code(), x.reason());
                if (live) (void)s_.core->disconnect(now, conn, DisconnectMode::kAbortive);
            } else if (x.phase() == Transfer::Phase::kDone && o_.close_after_data && live &&
                       closing_.insert(it->first).second) {
                (void)s_.core->disconnect(now, conn, DisconnectMode::kGraceful);
            }
            if (!live && !x.running()) {
                closing_.erase(it->first);
                it = map_.erase(it);
            } else {
                ++it;
            }
        }
    }
    // The earliest data timeout of a running stream.
    Instant wake(Instant until) const {
        for (const auto& [k, x] : map_)
            if (x.running()) until = std::min(until, x.deadline());
        return until;
    }

private:
    static std::uint64_t key(ConnHandle c) { return (std::uint64_t{c.index} << 32) | c.generation; }
    static ConnHandle handle(std::uint64_t k) {
        return {static_cast<std::uint32_t>(k >> 32), static_cast<std::uint32_t>(k)};
    }

    const StreamOptions& o_;
    Session& s_;
    const Reporter& rep_;
    Tally& tally_;
    std::unordered_map<std::uint64_t, Transfer> map_;
    std::unordered_set<std::uint64_t> closing_;  // --close-after-data sent their FIN
};

// The loop: events until --count connections are done (then their last
// frames) or a signal. Returns false on a signal.
bool serve(const ListenOptions& o, const std::vector<std::byte>& pdata, Session& s,
           const Reporter& rep, Tally& tally) {
    Streams streams(o.data, s, rep, tally);
    std::optional<Instant> done_at;
    for (;;) {
        const Instant now = io::TapHost::now();
        if (o.count > 0 && tally.completed >= o.count && !done_at) done_at = now;
        if (done_at && (s.core->live_nodes() == 0 || now >= *done_at + kDrainLimit)) return true;
        const Instant until = done_at ? *done_at + kDrainLimit : now + std::chrono::seconds(3600);
        io::Wake w = s.host->step(streams.wake(until));
        if (w == io::Wake::kError) {
            tally.failed(exit_codes::kError, s.host->error());
            return true;
        }
        while (auto e = s.core->poll_event()) {
            const Instant t = io::TapHost::now();
            if (streams.on_event(t, *e)) continue;
            rep.print(t, Reporter::from_event(*e));
            if (e->type == EventType::kConnectRequest)
                on_request(t, *e, o, pdata, s, rep, tally);
            else if (e->terminal())
                on_terminal(*e, tally);
        }
        streams.follow(io::TapHost::now(), tally.open);
        if (w == io::Wake::kSignal) return false;
    }
}

int run_listen(const ListenOptions& o) {
    const Instant start = io::TapHost::now();
    Reporter rep(o.wire.json, start);
    auto iface = parse_interface(o.wire);
    if (!iface) throw UsageError{iface.error()};
    const auto pdata = private_data(o.wire);
    auto session = open_session(o.wire, *iface);
    if (!session) {
        rep.fail(session.error());
        return exit_codes::kSetup;
    }
    Session& s = *session;
    ListenParams lp;
    lp.local = {iface->addr, o.port};
    lp.backlog = o.backlog;
    lp.vlan = iface->vlan;
    lp.tos = static_cast<std::uint8_t>(o.wire.tos);
    auto listener = session_listen(s, lp);
    if (!listener) {
        rep.fail(listener.error());
        return exit_codes::kSetup;
    }
    Report r;
    r.event = "listening";
    r.local = lp.local;
    r.add("mac", iface->mac.to_string());
    describe_device(r, s, o.wire);
    if (iface->vlan != kNoVlan) r.add("vlan", std::uint64_t{iface->vlan});
    rep.print(start, r);

    Tally tally;
    const bool interrupted = !serve(o, pdata, s, rep, tally);
    const auto print = [&](const Event& e) {
        if (is_stream_event(e)) return;
        rep.print(io::TapHost::now(), Reporter::from_event(e));
        if (e.terminal()) std::erase(tally.open, e.conn);
    };
    if (interrupted) {
        // Stop cleanly: the listener goes (resetting requests not yet
        // answered), every open connection gets a FIN, a reset if it does
        // not close within kGraceLimit.
        session_unlisten(s, io::TapHost::now(), *listener);
        close_all(s, rep, tally.open, print);
        drain(*s.host, io::TapHost::now() + std::chrono::seconds(2), print);
        const int sig = s.host->last_signal();
        tally.failed(interrupted_code(sig),
                     std::string("interrupted by ") + (sig == SIGTERM ? "SIGTERM" : "SIGINT") +
                         " after " + std::to_string(tally.completed) + " connections");
    }
    s.host->flush();
    const Instant end = io::TapHost::now();
    std::string result = tally.code == exit_codes::kOk ? "ok" : "failed";
    if (interrupted) result = "interrupted";
    rep.stats(end, *s.core, *s.host, result, tally.reason, std::nullopt);
    if (tally.code != exit_codes::kOk) rep.fail(tally.reason);
    return tally.code;
}

}  // namespace

void add_listen(CLI::App& app) {
    auto opt = std::make_shared<ListenOptions>();
    CLI::App* cmd = app.add_subcommand(
        "listen", "accept (or reject) iWARP connections on a TAP device or --dev");
    add_wire_options(cmd, opt->wire);
    cmd->add_option("--port", opt->port, "TCP port to listen on")
        ->required()
        ->check(bounded(1, 65535, true));
    cmd->add_option("--backlog", opt->backlog,
                    "connections not yet accepted (0: the core's default)")
        ->check(bounded(0, 65535, true));
    auto* reject = cmd->add_flag("--reject", opt->reject,
                                 "answer every request with an MPA reject (and its private data)");
    cmd->add_option("--count", opt->count,
                    "exit after this many connections completed and closed (0: never)")
        ->check(bounded(0, 1000000, true));
    const StreamFlags data = add_stream_options(cmd, opt->data, true);
    reject->excludes(data.send)->excludes(data.expect);
    cmd->footer(help_footer(
        "iwarp-cm listen --tap tap0 --ip 10.99.1.2/24 --port 4791 --pdata hello --count 1"));
    cmd->callback([opt, data] {
        check_stream_args(opt->data, data);
        set_exit_code(run_listen(*opt));
    });
}

}  // namespace iwcm::tools
