// iwarp-cm rping: rdma-core's rping over a TAP device, wire-compatible with
// it (docs/rping.md). Read first: tools/rping.hpp (the exchange),
// tools/wire_cli.hpp (session, reports), include/iwcm/verbs.hpp.
//
// The loop is connect's and listen's: one step of the TAP driver, then every
// core event to the Device first (the data path's bytes), the rest printed
// and acted on; the QP's events; then the rping state machine polls its CQ.
// -s serves one client, as rping -s without -P: with -C it stops after that
// many iterations (and waits for the client to close), without -C it runs
// until the client closes between two iterations. With -P it serves client
// after client that way (one at a time, others rejected meanwhile) until a
// signal, with a summary line for each.
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <memory>

#include "iwcm/assert.hpp"
#include "tools/commands.hpp"
#include "tools/connect.hpp"
#include "tools/progress.hpp"
#include "tools/rping.hpp"
#include "tools/wire_cli.hpp"

namespace iwcm::tools {

namespace {

struct RpingOptions {
    WireOptions wire;
    bool server = false;
    bool client = false;
    std::string addr;  // -a
    std::uint16_t port = kRpingDefaultPort;
    std::uint64_t count = 0;
    std::uint32_t size = kRpingDefaultSize;
    bool verbose = false;
    bool verify = false;
    double timeout_s = 10;
    std::uint32_t settle_ms = kRpingDefaultSettleMs;
    bool settle_given = false;
    std::string rtr;          // --rtr (empty: all three)
    std::string source;       // -I: the client's source address
    bool persistent = false;  // -P
    bool debug = false;       // -d
    bool own_qp = false;      // -q
};

// --rtr: a comma-separated set of send, write, read (RFC 6581 section 6), or none.
void set_rtr_types(const std::string& text, WireOptions& o) {
    std::uint8_t bits = 0;
    bool none = false;
    std::size_t at = 0;
    while (at <= text.size()) {
        const std::size_t comma = std::min(text.find(',', at), text.size());
        const std::string word = text.substr(at, comma - at);
        if (word == "send") {
            bits |= rtr::kSend;
        } else if (word == "write") {
            bits |= rtr::kWrite;
        } else if (word == "read") {
            bits |= rtr::kRead;
        } else if (word == "none") {
            none = true;
        } else {
            throw UsageError{"--rtr " + text + ": not a list of send, write, read, or none"};
        }
        at = comma + 1;
    }
    if (none && bits != 0) throw UsageError{"--rtr " + text + ": none with RTR types"};
    o.no_p2p = none;
    o.rtr_types = none ? rtr::kAll : bits;
}

// How long a close may take before the rest is reset (finish_close): our
// TERMINATE and FIN retransmitted to a peer that loses them, a FIN behind
// bytes a zero window holds back, a peer that never closes.
constexpr auto kCloseLimit = std::chrono::seconds(5);

Duration seconds(double s) {
    return std::chrono::duration_cast<Duration>(std::chrono::duration<double>(s));
}

double to_seconds(Duration d) {
    return std::chrono::duration<double>(d).count();
}

class RpingRun {
public:
    RpingRun(const RpingOptions& o, Session& s, const Reporter& rep, Instant start,
             Progress& progress)
        : o_(o),
          s_(s),
          rep_(rep),
          start_(start),
          progress_(progress),
          dev_(*s.core),
          rping_(std::make_unique<Rping>(dev_, config(o))) {
        if (o.debug) s.core->set_trace([this](const TraceRecord& r) { trace(r); });
    }

    int run_client(const Endpoint& to, const IpAddr& hop);
    int run_server(const Endpoint& local);

private:
    static RpingConfig config(const RpingOptions& o) {
        return {o.server, o.size,    o.count,
                o.verify, o.verbose, std::chrono::milliseconds(o.settle_ms)};
    }
    bool step(Instant until);
    void pump(Instant now);
    void on_event(Instant now, const Event& e);
    void on_request(Instant now, const Event& e);
    void on_qp_event(Instant now, const rdma::QpEvent& q);
    void trace(const TraceRecord& r) const;
    bool connect(const Endpoint& to, const MacAddr& mac, Instant deadline);
    bool iterate();
    void wait_for_close();
    bool serve_one();
    void end_client();
    int finish();
    void print_summary();
    bool set(int code, std::string why) {
        if (code_ == exit_codes::kOk) {
            code_ = code;
            reason_ = std::move(why);
        }
        return false;
    }

    const RpingOptions& o_;
    Session& s_;
    const Reporter& rep_;
    Instant start_;  // of the run: the time of -d's lines
    Progress& progress_;
    rdma::Device dev_;
    std::unique_ptr<Rping> rping_;  // the exchange with the client being served (or the server)
    std::optional<ListenHandle> listener_;
    ConnHandle conn_;
    Endpoint peer_;
    bool established_ = false;
    bool ended_ = false;  // the connection's end (a terminal event or the QP's)
    bool interrupted_ = false;
    bool broken_ = false;        // the loop itself failed (the device): no further client
    std::uint64_t clients_ = 0;  // -P: clients served to their end
    int code_ = exit_codes::kOk;
    std::string reason_;
};

bool RpingRun::step(Instant until) {
    const io::Wake w = s_.host->step(until);
    pump(io::TapHost::now());
    if (w == io::Wake::kError) {
        broken_ = true;
        return set(exit_codes::kError, s_.host->error());
    }
    if (w == io::Wake::kSignal) {
        interrupted_ = true;
        return false;
    }
    return true;
}

void RpingRun::pump(Instant now) {
    while (auto e = s_.core->poll_event()) on_event(now, *e);
    while (auto q = dev_.poll_qp_event()) on_qp_event(now, *q);
    rping_->poll(now);
    while (auto l = rping_->take_line()) {
        if (!o_.wire.json) {
            progress_.clear();
            std::printf("%sping data: %s\n", o_.server ? "server " : "", l->data.c_str());
            std::fflush(stdout);
            continue;
        }
        Report r;
        r.event = "ping_data";
        r.add("iteration", l->iteration);
        r.add("data", l->data);
        rep_.print(now, r);
    }
    if (rping_->phase() == Rping::Phase::kFailed) set(rping_->code(), rping_->reason());
    if (rping_->running() && rping_->began() && progress_.due()) {
        const double secs = to_seconds(now - *rping_->began());
        char buf[96];
        std::snprintf(buf, sizeof buf, "rping: %llu iterations, %.0f/s, %.1f s",
                      static_cast<unsigned long long>(rping_->iterations()),
                      secs > 0 ? static_cast<double>(rping_->iterations()) / secs : 0.0, secs);
        progress_.show(buf);
    }
}

// -d: every frame in and out and every change of a connection's state, on
// stderr (stdout keeps the lines of --json).
void RpingRun::trace(const TraceRecord& r) const {
    progress_.clear();
    const double t = to_seconds(r.now - start_);
    switch (r.kind) {
        case TraceRecord::Kind::kFrameIn:
        case TraceRecord::Kind::kFrameOut:
            std::fprintf(stderr, "[%9.6f] %s %s\n", t,
                         r.kind == TraceRecord::Kind::kFrameIn ? "in " : "out",
                         describe_frame(r.frame).c_str());
            return;
        case TraceRecord::Kind::kState:
            std::fprintf(stderr, "[%9.6f] state %s -> %s\n", t,
                         std::string(to_string(r.from)).c_str(),
                         std::string(to_string(r.to)).c_str());
            return;
        case TraceRecord::Kind::kDrop:
            std::fprintf(stderr, "[%9.6f] dropped (%s) %s\n", t,
                         std::string(to_string(r.drop)).c_str(), describe_frame(r.frame).c_str());
            return;
    }
}
void RpingRun::on_event(Instant now, const Event& e) {
    if (dev_.on_event(now, e) || is_stream_event(e)) return;
    rep_.print(now, Reporter::from_event(e));
    if (e.type == EventType::kConnectRequest) return on_request(now, e);
    if (e.type == EventType::kEstablished && e.conn == conn_) {
        established_ = true;
        rping_->start(now, e.conn);
        return;
    }
    if (!e.terminal() || e.conn != conn_) return;
    ended_ = true;
    // After the last iteration any end is fine; a QP's end before it is a QpEvent.
    if (rping_->phase() == Rping::Phase::kDone) return;
    if (e.type == EventType::kDisconnected && e.status == 0) return;
    if (o_.client) {
        auto [code, why] = connect_failure(e);
        set(code, why);
    } else {
        set(e.status == -ECONNRESET ? exit_codes::kReset : exit_codes::kError,
            "connection from " + e.remote.to_string() + " failed: " + std::strerror(-e.status));
    }
}

// The first client is accepted with rping's IRD and ORD (1, 1) and no
// private data; later ones are rejected while it is served (with -P the
// next one is accepted once it is done).
void RpingRun::on_request(Instant now, const Event& e) {
    Report r;
    r.local = e.local;
    r.remote = e.remote;
    if (conn_.valid()) {
        (void)s_.core->reject(now, e.conn, {});
        r.event = "reject_sent";
        r.add("why", std::string("serving another client"));
        rep_.print(now, r);
        return;
    }
    AcceptParams ap;
    ap.ird = 1;
    ap.ord = 1;
    r.event = "accept_sent";
    if (auto res = s_.core->accept(now, e.conn, ap); !res) {
        r.error = std::string(to_string(res.error()));
    } else {
        conn_ = e.conn;
        peer_ = e.remote;
    }
    rep_.print(now, r);
}

void RpingRun::on_qp_event(Instant now, const rdma::QpEvent& q) {
    // -P: the QP of a client served before (freed) is no longer ours.
    if (!rping_->qp() || *rping_->qp() != q.qp) return;
    Report r;
    r.remote = peer_;
    if (q.type == rdma::QpEventType::kDisconnected) {
        r.event = "disconnected";
        if (q.status != 0) r.error = std::strerror(-q.status);
        r.extra.emplace_back("status", std::to_string(q.status));
        ended_ = true;
    } else {
        r.event = q.type == rdma::QpEventType::kTerminateReceived ? "terminate_received"
                  : q.type == rdma::QpEventType::kTerminateSent   ? "terminate_sent"
                                                                  : "terminate_unsent";
        r.add("layer", std::uint64_t{q.term.layer});
        r.add("etype", std::uint64_t{q.term.etype});
        r.add("code", std::uint64_t{q.term.code});
        r.add("why", rdma::describe(q.term));
    }
    rep_.print(now, r);
    rping_->on_qp_event(q);
}

bool RpingRun::connect(const Endpoint& to, const MacAddr& mac, Instant deadline) {
    ConnectParams cp = connect_params(s_, o_.wire, to, mac);
    cp.ird = 1;  // rping's responder_resources and initiator_depth
    cp.ord = 1;
    auto c = session_connect(s_, io::TapHost::now(), cp);
    if (!c) return set(exit_codes::kSetup, c.error());
    conn_ = *c;
    peer_ = to;
    while (!established_ && !ended_) {
        if (io::TapHost::now() >= deadline) {
            (void)s_.core->disconnect(io::TapHost::now(), conn_, DisconnectMode::kAbortive);
            ended_ = true;
            return set(exit_codes::kTimeout, "connection to " + to.to_string() +
                                                 " timed out after " + seconds_text(o_.timeout_s));
        }
        if (!step(deadline)) return false;
    }
    return established_ && !ended_;
}

// Until the iterations are done, one failed, the connection ended, or a
// step of an iteration waited longer than --timeout. The client's first
// signal lets the iteration in flight finish, within kGraceLimit (a second
// signal, or the limit, closes at once), so the server sees the close
// between iterations; the run still ends as interrupted (finish).
bool RpingRun::iterate() {
    std::optional<Instant> grace;
    while (rping_->running() && !ended_) {
        const Instant limit = rping_->last_progress() + seconds(o_.timeout_s);
        const Instant wake =
            std::min({limit, rping_->next_wake().value_or(limit), grace.value_or(limit)});
        if (grace && io::TapHost::now() >= *grace) return false;
        if (io::TapHost::now() >= limit) {
            return set(exit_codes::kTimeout, "no progress for " + seconds_text(o_.timeout_s) +
                                                 " in iteration " +
                                                 std::to_string(rping_->iterations()) + " (peer " +
                                                 peer_.to_string() + ")");
        }
        if (step(wake)) continue;
        if (!interrupted_ || o_.server || grace) return false;
        grace = io::TapHost::now() + kGraceLimit;
        rping_->finish_iteration();
    }
    return rping_->phase() == Rping::Phase::kDone && !interrupted_;
}

// The server after -C iterations: the client closes first, as rping does;
// after --timeout the server closes.
void RpingRun::wait_for_close() {
    const Instant limit = io::TapHost::now() + seconds(o_.timeout_s);
    while (!ended_ && io::TapHost::now() < limit)
        if (!step(limit)) return;
}

int RpingRun::run_client(const Endpoint& to, const IpAddr& hop) {
    const Instant deadline = io::TapHost::now() + seconds(o_.timeout_s);
    auto mac = resolve_peer(
        s_, rep_, to, hop, deadline, [this](Instant until) { return step(until); },
        [this](int code, std::string why) { set(code, std::move(why)); });
    if (mac && connect(to, *mac, deadline)) iterate();
    return finish();
}

// One client, from its request to the end of its iterations (and with -C
// its close). False when the server is to stop: a signal, or the loop failed.
bool RpingRun::serve_one() {
    while (!established_ && !ended_ && code_ == exit_codes::kOk)
        if (!step(io::TapHost::now() + std::chrono::hours(1))) return false;
    if (established_ && iterate() && o_.count != 0) wait_for_close();
    return !interrupted_ && !broken_;
}

// -P: the client's connection closed as finish() closes it, its summary
// printed, and the server ready for the next one.
void RpingRun::end_client() {
    rping_->stop(io::TapHost::now());
    const auto print = [this](const Event& e) { on_event(io::TapHost::now(), e); };
    (void)finish_close(s_, rep_, io::TapHost::now() + kCloseLimit, print,
                       "not closed within the close limit", false);
    if (rping_->phase() == Rping::Phase::kRunning && code_ == exit_codes::kOk)
        set(exit_codes::kError,
            "the connection ended after " + std::to_string(rping_->iterations()) + " iterations");
    print_summary();
    ++clients_;
    rping_ = std::make_unique<Rping>(dev_, config(o_));
    conn_ = {};
    peer_ = {};
    established_ = false;
    ended_ = false;
    code_ = exit_codes::kOk;
    reason_.clear();
}

int RpingRun::run_server(const Endpoint& local) {
    ListenParams lp;
    lp.local = local;
    lp.vlan = s_.iface.vlan;
    lp.tos = static_cast<std::uint8_t>(o_.wire.tos);
    auto listener = session_listen(s_, lp);
    if (!listener) {
        rep_.fail(listener.error());
        return exit_codes::kSetup;
    }
    listener_ = *listener;
    Report r;
    r.event = "listening";
    r.local = local;
    r.add("mac", s_.iface.mac.to_string());
    describe_device(r, s_, o_.wire);
    rep_.print(io::TapHost::now(), r);
    while (serve_one() && o_.persistent) end_client();
    return finish();
}

// Closes (the QP's close is graceful; after a TERMINATE the link is closing
// already, the TERMINATE first in the stream and our FIN after it), waits
// until the peer has finished the close (our FIN acknowledged and theirs
// received: TIME_WAIT) or kCloseLimit passes and the connection is reset,
// prints the summary and the stats line, and returns the exit code. The
// nodes left in TIME_WAIT go with the process, so the stats line counts
// none.
int RpingRun::finish() {
    rping_->stop(io::TapHost::now());
    if (listener_) session_unlisten(s_, io::TapHost::now(), *listener_);
    const auto print = [this](const Event& e) { on_event(io::TapHost::now(), e); };
    if (interrupted_) {
        // The QP's close is under way; TIME_WAIT ends with the process (the
        // close is finished), so open_nodes(), not live_nodes(), is waited on.
        (void)finish_close(s_, rep_, io::TapHost::now() + kGraceLimit, print,
                           "not closed within the grace limit", false);
        const int sig = s_.host->last_signal();
        code_ = exit_codes::kOk;
        const std::string after =
            o_.persistent ? std::to_string(clients_) + (clients_ == 1 ? " client" : " clients")
                          : std::to_string(rping_->iterations()) + " iterations";
        set(interrupted_code(sig), std::string("interrupted by ") +
                                       (sig == SIGTERM ? "SIGTERM" : "SIGINT") + " after " + after);
    } else if (finish_close(s_, rep_, io::TapHost::now() + kCloseLimit, print,
                            "not closed within the close limit", false)
                   .cut) {
        if (s_.host->last_signal() != 0)
            set(interrupted_code(s_.host->last_signal()), "interrupted while closing");
        else
            set(exit_codes::kError, s_.host->error());
    }
    if (rping_->phase() == Rping::Phase::kRunning && code_ == exit_codes::kOk)
        set(exit_codes::kError,
            "the connection ended after " + std::to_string(rping_->iterations()) + " iterations");
    // -P between clients: no client to sum up.
    if (!o_.persistent || established_) print_summary();
    if (s_.core->open_nodes() == 0)
        (void)s_.core->teardown_connections(io::TapHost::now(), s_.iface.addr);
    rep_.stats(io::TapHost::now(), *s_.core, *s_.host, code_ == exit_codes::kOk ? "ok" : "failed",
               reason_, std::nullopt);
    if (code_ != exit_codes::kOk) rep_.fail(reason_);
    return code_;
}

// The iterations' figures as rping's users compute them: seconds from the
// first iteration's start (the settle wait excluded) to the last one's end,
// iterations per second, MB/s of the RDMA Reads and Writes, and the mean
// time of one iteration.
void RpingRun::print_summary() {
    const Rping& p = *rping_;
    const double secs = p.began() ? std::max(0.0, to_seconds(p.last_progress() - *p.began())) : 0.0;
    const std::uint64_t n = p.iterations();
    Report r;
    r.event = "rping";
    r.error = reason_;
    if (peer_.port != 0) r.remote = peer_;
    r.add("role", std::string(o_.server ? "server" : "client"));
    r.add("iterations", n);
    r.add("count", o_.count);
    r.add("size", std::uint64_t{o_.size});
    r.add("bytes", p.bytes());
    // An interrupted run verified every iteration it finished, unless a
    // comparison failed (the peer, interrupted too, may close mid-iteration).
    if (!o_.verify)
        r.extra.emplace_back("verified", "null");
    else
        r.add_bool("verified", code_ == exit_codes::kOk || (interrupted_ && !p.verify_failed()));
    const auto number = [&r](const char* key, const char* format, double v) {
        char buf[32];
        std::snprintf(buf, sizeof buf, format, v);
        r.extra.emplace_back(key, buf);
    };
    const bool timed = secs > 0 && n > 0;
    number("seconds", "%.6f", secs);
    number("iterations_per_s", "%.1f", timed ? static_cast<double>(n) / secs : 0.0);
    number("mbyte_s", "%.3f", timed ? static_cast<double>(p.bytes()) / secs / 1e6 : 0.0);
    number("latency_us", "%.1f", timed ? secs / static_cast<double>(n) * 1e6 : 0.0);
    rep_.print(io::TapHost::now(), r);
}

// Every check of the arguments, before any device is touched.
int run_rping(RpingOptions& o) {
    if (o.server == o.client)
        throw UsageError{o.server ? "-s and -c exclude each other"
                                  : "one of -s (serve) or -c (connect to -a) is required"};
    if (o.server && o.settle_given)
        throw UsageError{"--settle is for -c (the server never sends first)"};
    if (o.server) o.settle_ms = 0;
    if (!o.rtr.empty()) set_rtr_types(o.rtr, o.wire);
    if (o.persistent && !o.server)
        throw UsageError{"-P is for -s (a server that serves client after client)"};
    std::optional<IpAddr> source;
    if (!o.source.empty()) {
        if (o.server)
            throw UsageError{"-I is for -c (the client's source address; -s serves on -a)"};
        source = IpAddr::parse(o.source);
        if (!source) throw UsageError{"-I " + o.source + ": not an IPv4 or IPv6 address"};
        // --dev: -I picks which of the interface's addresses, as --ip would.
        if (!o.wire.dev.empty() && o.wire.ip.empty()) o.wire.ip = o.source;
    }
    const Instant start = io::TapHost::now();
    Reporter rep(o.wire.json, start, !o.wire.dev.empty());
    auto iface = parse_interface(o.wire);
    if (!iface) throw UsageError{iface.error()};
    std::optional<IpAddr> addr;
    if (!o.addr.empty()) {
        addr = IpAddr::parse(o.addr);
        if (!addr) throw UsageError{"-a " + o.addr + ": not an IPv4 or IPv6 address"};
    }
    if (source && *source != iface->addr)
        throw UsageError{"-I " + o.source + ": -c binds to the address of --ip (" +
                         iface->addr.to_string() + ")"};
    IpAddr hop;
    Endpoint local{iface->addr, o.port};
    if (o.client) {
        if (!addr) throw UsageError{"-c needs -a PEER_ADDR (the server's address)"};
        hop = check_peer("-a " + o.addr, *addr, *iface, o.wire.ip);
    } else if (addr && !addr->is_unspecified() && *addr != iface->addr) {
        throw UsageError{"-a " + o.addr + ": -s serves on the address of --ip (" +
                         iface->addr.to_string() + ")"};
    }
    auto session = open_session(o.wire, *iface);
    if (!session) {
        rep.fail(session.error());
        return exit_codes::kSetup;
    }
    Progress progress(Progress::wanted(o.wire.progress, o.wire.json));
    rep.set_progress(&progress);
    RpingRun run(o, *session, rep, start, progress);
    return o.client ? run.run_client({*addr, o.port}, hop) : run.run_server(local);
}

}  // namespace

void add_rping(CLI::App& app) {
    auto opt = std::make_shared<RpingOptions>();
    CLI::App* cmd = app.add_subcommand(
        "rping", "rdma-core's rping over a TAP device: RDMA Send, Read and Write, verified");
    add_interface_options(cmd, opt->wire);
    cmd->add_option("-t", opt->wire.tos, "rping's type of service: --tos")
        ->check(byte_value())
        ->excludes(cmd->get_option("--tos"));
    cmd->add_flag("-s", opt->server, "serve: accept one client and answer its pings");
    cmd->add_flag("-P", opt->persistent,
                  "-s: persistent server: after a client, serve the next one (one at a time), "
                  "until interrupted");
    cmd->add_flag("-c", opt->client, "connect to -a:-p and ping");
    cmd->add_option("-a", opt->addr, "-c: the server's address; -s: our own (--ip's) address");
    cmd->add_option("-I", opt->source,
                    "-c: the source address to bind to: the address of --ip (with --dev, "
                    "which of the interface's addresses)");
    cmd->add_option("-p", opt->port, "TCP port")->transform(bounded(1, 65535, true));
    cmd->add_option("-C", opt->count,
                    "iterations; 0: -c pings until interrupted, -s serves until the client "
                    "closes")
        ->transform(bounded(0, 1e9, true));
    cmd->add_option("-S", opt->size, "ping data size in bytes (rping's limits)")
        ->transform(bounded(kRpingMinSize, kRpingMaxSize, true));
    cmd->add_flag("-v", opt->verbose, "print each iteration's ping data");
    cmd->add_flag("-d", opt->debug,
                  "debug: every frame in and out and every connection state change, on stderr");
    cmd->add_flag("-q", opt->own_qp,
                  "rping's self-created QP: taken for rping's command lines; the QP is always "
                  "the one our device creates, so nothing changes");
    cmd->add_flag("-V", opt->verify,
                  "verify the ping data: -c the data written back, -s the data read");
    cmd->add_option("--settle", opt->settle_ms,
                    "-c: milliseconds to wait after ESTABLISHED before the first Send "
                    "(a soft-iWARP server may miss an FPDU right after its MPA reply)")
        ->transform(bounded(0, kRpingMaxSettleMs, true))
        ->each([opt](const std::string&) { opt->settle_given = true; });
    cmd->add_option("--rtr", opt->rtr,
                    "peer-to-peer RTR types, comma-separated: -c offers them, -s accepts them "
                    "(send, write, read; none: no peer-to-peer)")
        ->default_str("send,write,read");
    cmd->add_option("--timeout", opt->timeout_s,
                    "seconds to resolve and connect, and the longest wait for any step of an "
                    "iteration")
        ->transform(bounded(0.1, 3600, false));
    add_output_options(cmd, opt->wire);
    cmd->footer(help_footer(
        "iwarp-cm rping -c --tap tap0 --ip 10.99.1.2/24 -a 10.99.1.1 -C 100 -S 4096 -V"));
    cmd->callback([opt] {
        opt->wire.mpa_reply_timeout_s = reply_timer_past(opt->timeout_s);
        set_exit_code(run_rping(*opt));
    });
}

}  // namespace iwcm::tools
