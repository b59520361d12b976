// iwarp-cm connect: resolve the peer, connect with MPA, exchange bytes
// (--send-bytes, --expect-bytes), hold, close.
// Read first: docs/kernel-tcp.md, tools/wire_cli.hpp,
// tools/transfer.hpp, include/iwcm/core.hpp.
#include "tools/connect.hpp"

#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <memory>

#include "iwcm/assert.hpp"
#include "tools/commands.hpp"
#include "tools/progress.hpp"
#include "tools/tap_threads.hpp"

namespace iwcm::tools {

namespace {

// How long a graceful close may take before the connection is reset
// (finish_close): a peer that never closes, a FIN behind bytes a zero
// window holds back, our segments lost.
constexpr auto kCloseLimit = std::chrono::seconds(10);
// After a close the peer finished (or after a failure), how long the last
// frames get (a LAST_ACK waiting for the peer's ACK, TIME_WAIT) before the
// rest is reset.
constexpr auto kDrainLimit = std::chrono::seconds(5);

Duration seconds(double s) {
    return std::chrono::duration_cast<Duration>(std::chrono::duration<double>(s));
}

struct Outcome {
    int code = exit_codes::kOk;
    std::string reason;
    bool set(int c, std::string why) {
        code = c;
        reason = std::move(why);
        return false;
    }
};

class Connector {
public:
    Connector(const ConnectOptions& o, Session& s, const Reporter& rep, const ConnectTarget& t,
              Progress& progress)
        : o_(o),
          s_(s),
          rep_(rep),
          progress_(progress),
          to_(t.to),
          hop_(t.next_hop),
          pdata_(t.pdata) {}

    int run();

private:
    bool resolve(Instant deadline);
    bool establish(Instant deadline);
    bool transfer();
    bool hold();
    bool close();
    // Steps once and reports the core's events; false on a signal or an error.
    bool step(Instant until);
    void on_event(Instant now, const Event& e);
    // After each step: the byte stream's progress, its line, its failure.
    void follow_transfer(Instant now);

    const ConnectOptions& o_;
    Session& s_;
    const Reporter& rep_;
    Progress& progress_;
    Endpoint to_;
    IpAddr hop_;  // whose MAC the frames go to: the peer or the gateway
    std::vector<std::byte> pdata_;
    MacAddr remote_mac_;
    ConnHandle conn_;
    bool established_ = false;
    bool ended_ = false;  // a terminal event came
    bool interrupted_ = false;
    bool close_overdue_ = false;  // our close ran past kCloseLimit
    std::optional<Duration> connect_time_;
    Instant connect_at_{};
    Outcome out_;
    std::optional<Transfer> xfer_;  // with --send-bytes / --expect-bytes, from established on
};

bool Connector::step(Instant until) {
    io::Wake w = s_.host->step(until);
    while (auto e = s_.core->poll_event()) on_event(io::TapHost::now(), *e);
    if (xfer_) follow_transfer(io::TapHost::now());
    if (w == io::Wake::kError) return out_.set(exit_codes::kError, s_.host->error());
    if (w == io::Wake::kSignal) {
        interrupted_ = true;
        return false;
    }
    return true;
}

void Connector::on_event(Instant now, const Event& e) {
    // The stream's own events are many and not printed.
    const bool stream_event = is_stream_event(e);
    if (xfer_ && (stream_event || e.terminal())) xfer_->on_event(*s_.core, now, e);
    if (stream_event) return;
    rep_.print(now, Reporter::from_event(e));
    if (e.type == EventType::kEstablished) {
        established_ = true;
        connect_time_ = now - connect_at_;
        if (o_.data.any()) {
            xfer_.emplace(o_.data, true, e);
            xfer_->start(*s_.core, now);
        }
        return;
    }
    if (!e.terminal()) return;
    ended_ = true;
    if (e.type == EventType::kDisconnected && e.status == 0) return;
    auto [code, why] = connect_failure(e);
    out_.set(code, why);
}

bool Connector::resolve(Instant deadline) {
    auto mac = resolve_peer(
        s_, rep_, to_, hop_, deadline, [this](Instant until) { return step(until); },
        [this](int code, std::string why) { out_.set(code, std::move(why)); });
    if (!mac) return false;
    remote_mac_ = *mac;
    return true;
}

bool Connector::establish(Instant deadline) {
    ConnectParams cp = connect_params(s_, o_.wire, to_, remote_mac_);
    cp.private_data = pdata_;
    cp.ird = o_.wire.ird;
    cp.ord = o_.wire.ord;
    cp.mpa_revision = static_cast<std::uint8_t>(o_.wire.mpa_rev);
    connect_at_ = io::TapHost::now();
    auto c = session_connect(s_, connect_at_, cp);
    if (!c) return out_.set(exit_codes::kSetup, c.error());
    conn_ = *c;
    while (!established_ && !ended_) {
        if (io::TapHost::now() >= deadline) {
            (void)s_.core->disconnect(io::TapHost::now(), conn_, DisconnectMode::kAbortive);
            while (s_.core->poll_event()) {
            }
            ended_ = true;
            return out_.set(exit_codes::kTimeout, "connection to " + to_.to_string() +
                                                      " timed out after " +
                                                      seconds_text(o_.timeout_s));
        }
        if (!step(deadline)) return false;
    }
    return established_ && !ended_;
}

void Connector::follow_transfer(Instant now) {
    xfer_->poll(*s_.core, now);
    if (xfer_->running() && progress_.due()) {
        char buf[128];
        std::snprintf(buf, sizeof buf, "connect: sent %.1f of %.1f MB, received %.1f of %.1f MB",
                      static_cast<double>(xfer_->sent()) / 1e6,
                      static_cast<double>(o_.data.send_bytes) / 1e6,
                      static_cast<double>(xfer_->received()) / 1e6,
                      static_cast<double>(o_.data.expect_bytes) / 1e6);
        progress_.show(buf);
    }
    if (auto r = xfer_->take_report()) rep_.print(now, *r);
    if (xfer_->phase() == Transfer::Phase::kFailed && out_.code == exit_codes::kOk)
        out_.set(xfer_->code(), xfer_->reason());
}

// Until every byte is sent, acknowledged and received. A failed exchange
// (other bytes, too many, the data timeout) ends the connection with a reset.
bool Connector::transfer() {
    if (!xfer_) return true;
    follow_transfer(io::TapHost::now());
    while (xfer_->running() && !ended_)
        if (!step(xfer_->deadline())) return false;
    if (xfer_->phase() != Transfer::Phase::kFailed) return !ended_;
    if (!ended_) {
        Report r;
        r.event = "abort_sent";
        r.remote = to_;
        rep_.print(io::TapHost::now(), r);
        (void)s_.core->disconnect(io::TapHost::now(), conn_, DisconnectMode::kAbortive);
    }
    return false;
}

bool Connector::hold() {
    const Instant end = io::TapHost::now() + seconds(o_.hold_s);
    while (!ended_ && io::TapHost::now() < end)
        if (!step(end)) return false;
    return !ended_;
}

bool Connector::close() {
    const auto mode = o_.abort ? DisconnectMode::kAbortive : DisconnectMode::kGraceful;
    Report r;
    r.event = o_.abort ? "abort_sent" : "close_sent";
    r.remote = to_;
    rep_.print(io::TapHost::now(), r);
    if (auto res = s_.core->disconnect(io::TapHost::now(), conn_, mode); !res)
        return out_.set(exit_codes::kError, "disconnect: " + std::string(to_string(res.error())));
    const Instant limit = io::TapHost::now() + kCloseLimit;
    while (!ended_ && io::TapHost::now() < limit)
        if (!step(limit)) return false;
    if (!ended_) {
        close_overdue_ = true;  // run() resets it at once
        return out_.set(exit_codes::kTimeout, "close of " + to_.to_string() + " did not complete");
    }
    return true;
}

int Connector::run() {
    const Instant deadline = io::TapHost::now() + seconds(o_.timeout_s);
    bool ok = resolve(deadline) && establish(deadline) && transfer() && hold() && close();
    (void)ok;
    const auto print = [&](const Event& e) {
        const bool stream_event = is_stream_event(e);
        if (xfer_ && (stream_event || e.terminal()))
            xfer_->on_event(*s_.core, io::TapHost::now(), e);
        if (!stream_event) rep_.print(io::TapHost::now(), Reporter::from_event(e));
    };
    if (interrupted_) {
        // A FIN on the open connection, a reset if it does not close in time.
        std::vector<ConnHandle> open;
        if (conn_.valid() && !ended_) open.push_back(conn_);
        close_all(s_, rep_, open, print);
        out_.set(interrupted_code(s_.host->last_signal()),
                 std::string("interrupted by ") +
                     (s_.host->last_signal() == SIGTERM ? "SIGTERM" : "SIGINT"));
    }
    // Every way out: an error or a timeout before the close (a FIN now), the
    // close's last frames (a LAST_ACK's ACK), then a reset for what is still
    // open; a close already past kCloseLimit is reset at once.
    if (!interrupted_ && conn_.valid() && !ended_)
        (void)s_.core->disconnect(io::TapHost::now(), conn_, DisconnectMode::kGraceful);
    const Instant limit =
        io::TapHost::now() + (close_overdue_ || interrupted_ ? Duration::zero() : kDrainLimit);
    const CloseEnd end = finish_close(
        s_, rep_, limit, print,
        close_overdue_ ? "not closed within the close limit" : "not closed within the drain limit",
        true);
    if (end.cut && !interrupted_)
        out_.set(interrupted_code(s_.host->last_signal()), "interrupted while closing");
    if (xfer_) follow_transfer(io::TapHost::now());
    rep_.stats(io::TapHost::now(), *s_.core, *s_.host,
               out_.code == exit_codes::kOk ? "ok" : "failed", out_.reason, connect_time_);
    if (out_.code != exit_codes::kOk) rep_.fail(out_.reason);
    return out_.code;
}

// Every check of the arguments, before any device or socket is touched.
ConnectTarget check_args(const ConnectOptions& o, const Interface& iface) {
    ConnectTarget t;
    auto to = Endpoint::parse(o.to);
    if (!to || to->port == 0)
        throw UsageError{"--to " + o.to + ": expected ADDR:PORT or [ADDR]:PORT"};
    t.next_hop = check_peer("--to " + o.to, to->addr, iface, o.wire.ip);
    t.to = *to;
    t.pdata = private_data(o.wire);
    return t;
}

// Threads of --count when --threads is not given: one per CPU, but one with
// the options the threads do not offer (--dev, a capture).
unsigned default_threads(const ConnectOptions& o) {
    if (!o.wire.pcap.empty() || !o.wire.dev.empty()) return 1;
    return cpu_threads();
}

int run_connect(const ConnectOptions& o) {
    const Instant start = io::TapHost::now();
    Reporter rep(o.wire.json, start, !o.wire.dev.empty());
    auto iface = parse_interface(o.wire);
    if (!iface) throw UsageError{iface.error()};
    ConnectTarget target = check_args(o, *iface);
    if (o.count > 0) {
        const unsigned n = o.threads > 0 ? o.threads : default_threads(o);
        if (n > 1)
            if (auto code = run_connect_threads(o, target, *iface, rep, o.threads == 0))
                return *code;
    }
    auto session = open_session(o.wire, *iface);
    if (!session) {
        rep.fail(session.error());
        return exit_codes::kSetup;
    }
    if (session->shared)
        if (auto code = route_next_hop(*session->shared, target, rep)) return *code;
    Progress progress(Progress::wanted(o.wire.progress, o.wire.json));
    rep.set_progress(&progress);
    if (o.count > 0) return run_connect_many(o, target, *session, progress, rep);
    Connector c(o, *session, rep, target, progress);
    return c.run();
}

}  // namespace

std::pair<int, std::string> connect_failure(const Event& e) {
    const std::string peer = e.remote.to_string();
    switch (e.type) {
        case EventType::kDisconnected:
            if (e.status == -ECONNRESET)
                return {exit_codes::kReset, "connection to " + peer + " reset by peer"};
            return {exit_codes::kError,
                    "connection to " + peer + " ended: " + std::strerror(-e.status)};
        case EventType::kRejected:
            // Only MPA_REJ_RCVD carries the peer's MPA reject; in SYN_SENT
            // (-ECONNREFUSED) or MPA_REQ_SENT (-ECONNRESET) a reset came first.
            if (e.state == CmState::kMpaRejRcvd)
                return {exit_codes::kRejected,
                        "connection to " + peer + " rejected by peer (MPA reject)"};
            if (e.state == CmState::kSynSent || e.state == CmState::kMpaReqSent)
                return {exit_codes::kReset, "connection to " + peer + " refused (reset by peer)"};
            return {exit_codes::kError,
                    "connection to " + peer + " closed by peer before any MPA reply"};
        case EventType::kUnreachable:
            return {exit_codes::kTimeout, "connection to " + peer + " timed out (no answer)"};
        case EventType::kConnectError:
            return {exit_codes::kError,
                    "connection to " + peer + " failed: " + std::strerror(-e.status)};
        case EventType::kConnectRequest:
        case EventType::kEstablished:
        case EventType::kAddressDown:
        case EventType::kAddressUp:
        case EventType::kReadable:
        case EventType::kWritable: break;
    }
    IWCM_ASSERT(e.terminal());
    return {exit_codes::kError, "unexpected event"};
}

void add_connect(CLI::App& app) {
    auto opt = std::make_shared<ConnectOptions>();
    CLI::App* cmd = app.add_subcommand(
        "connect",
        "connect to an iWARP peer over a TAP device (or --dev), exchange bytes, hold, close");
    add_wire_options(cmd, opt->wire);
    cmd->add_option("--to", opt->to,
                    "the peer, ADDR:PORT or [ADDR]:PORT (unicast, not --ip; on-link unless "
                    "--gateway)")
        ->required();
    cmd->add_option("--timeout", opt->timeout_s,
                    "seconds to resolve and establish (the MPA reply may take all of it)")
        ->transform(bounded(0.1, 3600, false));
    auto* hold =
        cmd->add_option("--hold", opt->hold_s,
                        "seconds to hold the connection before closing (after the bytes, if any)")
            ->transform(bounded(0, 86400, false));
    auto* abort = cmd->add_flag("--abort", opt->abort, "close with a reset instead of a FIN");
    auto* count =
        cmd->add_option("--count", opt->count,
                        "open N connections, close each once established, print the setup time "
                        "per phase (min, median, p99, max); 0: one connection, held for --hold")
            ->transform(bounded(0, 100000, true));
    auto* parallel =
        cmd->add_option("--parallel", opt->parallel, "with --count: connections in flight at most")
            ->transform(bounded(1, 1024, true))
            ->needs(count);
    auto* threads =
        cmd->add_option(
               "--threads", opt->threads,
               "with --count: threads, each with a queue of a multi-queue TAP (or with "
               "--dev an AF_XDP socket on a receive queue) and its own core, sharing the "
               "connections and --parallel (more than 1 needs a TAP made with multi_queue, "
               "or a new one, or an interface with that many queues; default: one per CPU "
               "where the TAP allows, else 1; 1 with --dev)")
            ->transform(bounded(1, 256, true))
            ->default_str("")  // the default is chosen at run time (the text says how)
            ->needs(count)
            ->excludes(cmd->get_option("--pcap"));
    const StreamFlags data = add_stream_options(cmd, opt->data, false);
    count->excludes(hold)->excludes(abort)->excludes(data.send)->excludes(data.expect);
    cmd->footer(
        help_footer("iwarp-cm connect --tap tap0 --ip 10.99.1.2/24 --to 10.99.1.1:4791 "
                    "--pdata-hex 00ff --send-bytes 1000000 --expect-bytes 1000000"));
    cmd->callback([opt, data, parallel, threads] {
        // --count 0 is the one held connection, which neither option shapes.
        for (const CLI::Option* o : {parallel, threads})
            if (o->count() > 0 && opt->count == 0)
                throw UsageError{o->get_name() + " requires --count of 1 or more"};
        check_stream_args(opt->data, data);
        opt->wire.mpa_reply_timeout_s = reply_timer_past(opt->timeout_s);
        set_exit_code(run_connect(*opt));
    });
}

}  // namespace iwcm::tools
