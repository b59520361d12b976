// iwarp-cm listen: accept (or reject) iWARP connections on a TAP device, and
// exchange bytes on each (--send-bytes, --expect-bytes).
// Read first: docs/kernel-tcp.md, tools/wire_cli.hpp,
// tools/transfer.hpp, include/iwcm/core.hpp.

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <memory>
#include <optional>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "io/tap/tap_shards.hpp"
#include "tools/commands.hpp"
#include "tools/tap_threads.hpp"
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
    // > 1: a multi-queue TAP, a core and a thread per queue; 0 (not given):
    // one per CPU it may run on where the device and the other options allow, else 1.
    unsigned threads = 0;
    StreamOptions data;  // --send-bytes, --expect-bytes on every accepted connection
};

// How long the listener waits for a closing connection's last frames
// (LAST_ACK, TIME_WAIT) once --count connections are done; what is still
// open then is reset (finish_close).
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

// "after 1 connection", "after 3 connections": the reason of an interrupted run.
std::string after_connections(unsigned n) {
    return " after " + std::to_string(n) + (n == 1 ? " connection" : " connections");
}

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
                const std::vector<std::byte>& pdata, Core& core, const Reporter& rep, Tally& t) {
    Report r;
    r.local = e.local;
    r.remote = e.remote;
    r.has_pdata = true;
    r.pdata = pdata;
    if (o.reject || e.mpa.revision > o.wire.mpa_rev) {
        auto res = core.reject(now, e.conn, pdata);
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
    auto res = core.accept(now, e.conn, ap);
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
           const Reporter& rep, Tally& tally, Progress& progress) {
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
                on_request(t, *e, o, pdata, *s.core, rep, tally);
            else if (e->terminal())
                on_terminal(*e, tally);
        }
        streams.follow(io::TapHost::now(), tally.open);
        if (progress.due())
            progress.show("listen: " + std::to_string(tally.completed) + " done, " +
                          std::to_string(tally.open.size()) + " open" +
                          (o.count > 0 ? " of --count " + std::to_string(o.count) : ""));
        if (w == io::Wake::kSignal) return false;
    }
}

std::optional<int> run_listen_threads(const ListenOptions& o, unsigned n, bool fall_back);

// Threads when --threads is not given: one per CPU, but one with the options
// the threads do not offer (a byte stream, a capture).
unsigned default_threads(const ListenOptions& o) {
    if (o.data.any() || !o.wire.pcap.empty() || !o.wire.dev.empty()) return 1;
    return cpu_threads();
}

ListenParams listen_params(const ListenOptions& o, const Interface& iface) {
    ListenParams lp;
    lp.local = {iface.addr, o.port};
    lp.backlog = o.backlog;
    lp.vlan = iface.vlan;
    lp.tos = static_cast<std::uint8_t>(o.wire.tos);
    return lp;
}

// The "listening" line without the device's fields (describe_device, or "tap"
// for the threads).
Report listening_line(const Interface& iface, const ListenParams& lp) {
    Report r;
    r.event = "listening";
    r.local = lp.local;
    r.add("mac", iface.mac.to_string());
    if (iface.vlan != kNoVlan) r.add("vlan", std::uint64_t{iface.vlan});
    return r;
}

int run_listen(const ListenOptions& o) {
    const unsigned n = o.threads > 0 ? o.threads : default_threads(o);
    if (n > 1)
        if (auto code = run_listen_threads(o, n, o.threads == 0)) return *code;
    const Instant start = io::TapHost::now();
    Reporter rep(o.wire.json, start, !o.wire.dev.empty());
    auto iface = parse_interface(o.wire);
    if (!iface) throw UsageError{iface.error()};
    const auto pdata = private_data(o.wire);
    auto session = open_session(o.wire, *iface);
    if (!session) {
        rep.fail(session.error());
        return exit_codes::kSetup;
    }
    Session& s = *session;
    const ListenParams lp = listen_params(o, *iface);
    auto listener = session_listen(s, lp);
    if (!listener) {
        rep.fail(listener.error());
        return exit_codes::kSetup;
    }
    Report r = listening_line(*iface, lp);
    describe_device(r, s, o.wire);
    rep.print(start, r);

    Tally tally;
    Progress progress(Progress::wanted(o.wire.progress, o.wire.json));
    rep.set_progress(&progress);
    const bool interrupted = !serve(o, pdata, s, rep, tally, progress);
    const auto print = [&](const Event& e) {
        if (is_stream_event(e)) return;
        rep.print(io::TapHost::now(), Reporter::from_event(e));
        // One served when the signal came counts once its close is done.
        if (e.terminal() && std::erase(tally.open, e.conn) > 0) ++tally.completed;
    };
    if (interrupted) {
        // Stop cleanly: the listener goes (resetting requests not yet
        // answered), every open connection gets a FIN, a reset if it does
        // not close within kGraceLimit.
        session_unlisten(s, io::TapHost::now(), *listener);
        close_all(s, rep, tally.open, print);
        const int sig = s.host->last_signal();
        tally.failed(interrupted_code(sig), std::string("interrupted by ") +
                                                (sig == SIGTERM ? "SIGTERM" : "SIGINT") +
                                                after_connections(tally.completed));
    } else {
        // --count done: what did not close within kDrainLimit is reset.
        (void)finish_close(s, rep, io::TapHost::now(), print, "not closed within the drain limit",
                           true);
    }
    s.host->flush();
    const Instant end = io::TapHost::now();
    std::string result = tally.code == exit_codes::kOk ? "ok" : "failed";
    if (interrupted) result = "interrupted";
    rep.stats(end, *s.core, *s.host, result, tally.reason, std::nullopt);
    if (tally.code != exit_codes::kOk) rep.fail(tally.reason);
    return tally.code;
}

// ---------------------------------------------------------------- --threads N

// What the threads of `listen --threads` share: touched per event, never per frame.
struct SharedTally {
    std::atomic<unsigned> completed{0};
    std::atomic<bool> interrupted{false};
    std::atomic<int> signal{0};
    // Threads done and quiet: a thread leaves only once all are, since frames
    // of another thread's connections may still arrive on its queue.
    std::atomic<unsigned> quiet{0};
};

// One thread's loop: shard s's core, its own connections. It ends when the
// --count connections of all threads are done and every thread's have closed
// (its queue may carry frames of another thread's connections), or
// after a signal (on shard 0's loop: it wakes the others) once its own are
// closed or reset.
void serve_shard(std::uint32_t s, const ListenOptions& o, const std::vector<std::byte>& pdata,
                 io::TapShards& net, ListenHandle listener, const IpAddr& addr, const Reporter& rep,
                 SharedTally& shared, Tally& tally) {
    Core& core = net.core(s);
    std::optional<Instant> done_at, grace_at;
    bool counted_quiet = false;
    for (;;) {
        const Instant now = io::TapHost::now();
        if (o.count > 0 && shared.completed.load() >= o.count && !done_at) done_at = now;
        if (shared.interrupted.load() && !grace_at) {
            grace_at = now + kGraceLimit;
            (void)core.destroy_listen(now, listener);
            for (ConnHandle h : tally.open)
                (void)core.disconnect(now, h, DisconnectMode::kGraceful);
        }
        const bool quiet = core.live_nodes() == 0;
        if (done_at && !grace_at && quiet && !counted_quiet) {
            counted_quiet = true;
            shared.quiet.fetch_add(1);
            net.wake_all();  // the others notice
        }
        const bool all_quiet = shared.quiet.load() == net.shards();
        if (done_at && !grace_at && ((quiet && all_quiet) || now >= *done_at + kDrainLimit)) break;
        if (grace_at && (quiet || now >= *grace_at)) {
            core.teardown_connections(now, addr);  // RST to whatever is left
            net.flush(s);
            break;
        }
        Instant until = now + std::chrono::seconds(3600);
        if (done_at) until = std::min(until, *done_at + kDrainLimit);
        if (grace_at) until = std::min(until, *grace_at);
        const io::Wake w = net.step(s, until);
        if (w == io::Wake::kError) {
            tally.failed(exit_codes::kError, net.error(s));
            shared.interrupted = true;
            net.wake_all();
        }
        if (w == io::Wake::kSignal) {
            shared.signal = net.last_signal();
            shared.interrupted = true;
            net.wake_all();
        }
        const unsigned before = tally.completed;
        while (auto e = core.poll_event()) {
            const Instant t = io::TapHost::now();
            rep.print(t, Reporter::from_event(*e));
            if (e->type == EventType::kConnectRequest && !grace_at)
                on_request(t, *e, o, pdata, core, rep, tally);
            else if (e->terminal())
                on_terminal(*e, tally);
        }
        if (tally.completed != before &&
            shared.completed.fetch_add(tally.completed - before) + tally.completed - before >=
                o.count &&
            o.count > 0)
            net.wake_all();  // the others notice the count
    }
}

// After the threads: the first failure of any thread, the summed stats line.
int finish_threads(io::TapShards& net, const Reporter& rep, const SharedTally& shared,
                   std::vector<Tally>& tallies) {
    Tally all;
    all.completed = shared.completed.load();
    for (std::uint32_t s = 0; s < net.shards(); ++s)
        if (all.code == exit_codes::kOk && tallies[s].code != exit_codes::kOk)
            all.failed(tallies[s].code, tallies[s].reason);
    std::uint64_t handed_off = 0;
    const Reporter::Counters c = sum_thread_counters(net, handed_off);
    const bool interrupted = shared.interrupted.load() && shared.signal.load() != 0;
    if (interrupted) {
        const int sig = shared.signal.load();
        all.failed(interrupted_code(sig), std::string("interrupted by ") +
                                              (sig == SIGTERM ? "SIGTERM" : "SIGINT") +
                                              after_connections(all.completed));
    }
    std::string result = all.code == exit_codes::kOk ? "ok" : "failed";
    if (interrupted) result = "interrupted";
    rep.stats(io::TapHost::now(), c, result, all.reason, std::nullopt,
              thread_fields(net, handed_off));
    if (all.code != exit_codes::kOk) rep.fail(all.reason);
    return all.code;
}

// A listener on every core of the TAP's threads.
Expected<ListenHandle, std::string> listen_all(io::TapShards& net, const ListenParams& lp) {
    auto l = net.listen(lp);
    if (!l)
        return fail("listen on " + lp.local.to_string() + ": " + std::string(to_string(l.error())));
    return *l;
}

// listen --threads N: one listener per thread, each thread's own connections.
// std::nullopt (with `fall_back`, when the threads were not asked for) if the
// device cannot take N queues: the caller runs one thread instead.
std::optional<int> run_listen_threads(const ListenOptions& o, unsigned n, bool fall_back) {
    const Instant start = io::TapHost::now();
    Reporter rep(o.wire.json, start, !o.wire.dev.empty());
    auto iface = parse_interface(o.wire);
    if (!iface) throw UsageError{iface.error()};
    const auto pdata = private_data(o.wire);
    auto opened = open_thread_net(o.wire, *iface, n);
    if (!opened && fall_back) return std::nullopt;
    if (!opened) {
        rep.fail(opened.error());
        return exit_codes::kSetup;
    }
    io::TapShards& net = opened->net();
    io::SharedShards* shared = opened->shared.get();
    const ListenParams lp = listen_params(o, *iface);
    auto listener = shared ? shared->listen(lp) : listen_all(net, lp);
    if (!listener) {
        rep.fail(listener.error());
        return exit_codes::kSetup;
    }
    Report r = listening_line(*iface, lp);
    if (!shared) r.add("tap", o.wire.tap);
    if (shared) {
        r.add("dev", o.wire.dev);
        r.add("xdp", xdp_field(shared->xsk()));
    }
    r.add("threads", std::uint64_t{n});
    rep.print(start, r);

    SharedTally tally_all;
    std::vector<Tally> tallies(n);
    std::vector<std::thread> threads;
    for (std::uint32_t s = 0; s < n; ++s)
        threads.emplace_back([&, s] {
            serve_shard(s, o, pdata, net, *listener, iface->addr, rep, tally_all, tallies[s]);
        });
    for (auto& t : threads) t.join();
    return finish_threads(net, rep, tally_all, tallies);
}

}  // namespace

void add_listen(CLI::App& app) {
    auto opt = std::make_shared<ListenOptions>();
    CLI::App* cmd = app.add_subcommand(
        "listen", "accept (or reject) iWARP connections on a TAP device or --dev");
    add_wire_options(cmd, opt->wire);
    cmd->add_option("--port", opt->port, "TCP port to listen on")
        ->required()
        ->transform(bounded(1, 65535, true))
        ->default_str("");  // required: no default to show
    cmd->add_option("--backlog", opt->backlog,
                    "connections not yet accepted (0: the core's default)")
        ->transform(bounded(0, 65535, true));
    auto* reject = cmd->add_flag("--reject", opt->reject,
                                 "answer every request with an MPA reject (and its private data)");
    cmd->add_option("--count", opt->count,
                    "exit after this many connections completed and closed (0: never)")
        ->transform(bounded(0, 1000000, true));
    const StreamFlags data = add_stream_options(cmd, opt->data, true);
    reject->excludes(data.send)->excludes(data.expect);
    cmd->add_option("--threads", opt->threads,
                    "threads, each with a queue of a multi-queue TAP (or with --dev an AF_XDP "
                    "socket on a receive queue) and its own core (more than 1 needs a TAP made "
                    "with multi_queue, or a new one, or an interface with that many queues; "
                    "default: one per CPU where the TAP allows, else 1; 1 with --dev)")
        ->transform(bounded(1, 256, true))
        ->default_str("")  // the default is chosen at run time (the text says how)
        ->excludes(data.send)
        ->excludes(data.expect)
        ->excludes(cmd->get_option("--pcap"));
    cmd->footer(help_footer(
        "iwarp-cm listen --tap tap0 --ip 10.99.1.2/24 --port 4791 --pdata hello --count 1"));
    cmd->callback([opt, data] {
        check_stream_args(opt->data, data);
        set_exit_code(run_listen(*opt));
    });
}

}  // namespace iwcm::tools
