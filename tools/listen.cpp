// iwarp-cm listen: accept (or reject) iWARP connections on a TAP device.
// Read first: README.md ("Against the Linux TCP stack"), tools/wire_cli.hpp, include/iwcm/core.hpp.
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <memory>

#include "tools/commands.hpp"
#include "tools/wire_cli.hpp"

namespace iwcm::tools {

namespace {

struct ListenOptions {
    WireOptions wire;
    std::uint16_t port = 0;
    std::uint32_t backlog = 0;
    bool reject = false;
    unsigned count = 0;
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
        if (e.status == -ECONNRESET) t.failed(exit_codes::kReset, "connection from " + e.remote.to_string() + " reset by peer");
        return;
    }
    if (e.type == EventType::kUnreachable)
        t.failed(exit_codes::kTimeout, "connection from " + e.remote.to_string() + " timed out");
    else
        t.failed(e.status == -ECONNRESET ? exit_codes::kReset : exit_codes::kError,
                 "connection from " + e.remote.to_string() + " failed: " + std::strerror(-e.status));
}

void on_request(Instant now, const Event& e, const ListenOptions& o, const std::vector<std::byte>& pdata,
                Session& s, const Reporter& rep, Tally& t) {
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
    if (!res) r.error = std::string(to_string(res.error()));
    else
        t.open.push_back(e.conn);
    rep.print(now, r);
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
    auto listener = s.core->listen(lp);
    if (!listener) {
        rep.fail("listen on " + lp.local.to_string() + ": " + std::string(to_string(listener.error())));
        return exit_codes::kSetup;
    }
    Report r;
    r.event = "listening";
    r.local = lp.local;
    r.add("mac", iface->mac.to_string());
    r.add("tap", o.wire.tap);
    if (iface->vlan != kNoVlan) r.add("vlan", std::uint64_t{iface->vlan});
    rep.print(start, r);

    Tally tally;
    bool interrupted = false;
    std::optional<Instant> done_at;
    for (;;) {
        const Instant now = io::TapHost::now();
        if (o.count > 0 && tally.completed >= o.count && !done_at) done_at = now;
        if (done_at && (s.core->live_nodes() == 0 || now >= *done_at + kDrainLimit)) break;
        const Instant until = done_at ? *done_at + kDrainLimit : now + std::chrono::seconds(3600);
        io::Wake w = s.host->step(until);
        if (w == io::Wake::kError) {
            rep.fail(s.host->error());
            return exit_codes::kError;
        }
        while (auto e = s.core->poll_event()) {
            const Instant t = io::TapHost::now();
            rep.print(t, Reporter::from_event(*e));
            if (e->type == EventType::kConnectRequest) on_request(t, *e, o, pdata, s, rep, tally);
            else if (e->terminal()) on_terminal(*e, tally);
        }
        if (w == io::Wake::kSignal) {
            interrupted = true;
            break;
        }
    }
    const auto print = [&](const Event& e) {
        rep.print(io::TapHost::now(), Reporter::from_event(e));
        if (e.terminal()) std::erase(tally.open, e.conn);
    };
    if (interrupted) {
        // Stop cleanly: the listener goes (resetting requests not yet
        // answered), every open connection gets a FIN, a reset if it does
        // not close within kGraceLimit.
        (void)s.core->destroy_listen(io::TapHost::now(), *listener);
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
    CLI::App* cmd = app.add_subcommand("listen", "accept (or reject) iWARP connections on a TAP device");
    add_wire_options(cmd, opt->wire);
    cmd->add_option("--port", opt->port, "TCP port to listen on")
        ->required()
        ->check(bounded(1, 65535, true));
    cmd->add_option("--backlog", opt->backlog,
                    "connections not yet accepted (0: the core's default)")
        ->check(bounded(0, 65535, true));
    cmd->add_flag("--reject", opt->reject,
                  "answer every request with an MPA reject (and its private data)");
    cmd->add_option("--count", opt->count,
                    "exit after this many connections completed and closed (0: never)")
        ->check(bounded(0, 1000000, true));
    cmd->footer(help_footer(
        "iwarp-cm listen --tap tap0 --ip 10.99.1.2/24 --port 4791 --pdata hello --count 1"));
    cmd->callback([opt] { set_exit_code(run_listen(*opt)); });
}

}  // namespace iwcm::tools
