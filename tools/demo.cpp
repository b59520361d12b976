// iwarp-cm demo: two connection managers on the simulated network connect
// with MPA revision 2, exchange private data both ways, negotiate IRD/ORD,
// send the RTR, then disconnect gracefully. Prints both sides' events, a
// ladder diagram of every frame on virtual time, the hand-off context and
// the stats. With --json: one JSON object per event and a last demo_done
// line instead (docs/json.md). Read first: src/io/sim/sim.hpp, include/iwcm/core.hpp.
#include <cstdio>
#include <string>
#include <vector>

#include "io/sim/sim.hpp"
#include "iwcm/core.hpp"
#include "tools/commands.hpp"
#include "tools/json.hpp"
#include "tools/wire_cli.hpp"

namespace iwcm::tools {

namespace {

int g_exit_code = 0;

struct DemoOptions {
    double loss = 0;
    std::uint64_t seed = 1;
    int mpa_rev = 2;
    bool quiet_ladder = false;
    bool json = false;
};

// Where the demo's events go: human lines, or JSON lines with a "side" field.
struct EventPrinter {
    bool json;
    Reporter rep{json, Instant{}};
    void operator()(const char* side, Instant now, const Event& e) const;
};

std::vector<std::byte> to_bytes(std::string_view s) {
    std::vector<std::byte> v(s.size());
    for (std::size_t i = 0; i < s.size(); ++i) v[i] = static_cast<std::byte>(s[i]);
    return v;
}

std::string printable(std::span<const std::byte> b) {
    std::string s;
    for (std::byte c : b) {
        auto ch = static_cast<char>(c);
        s += (ch >= 32 && ch < 127) ? ch : '.';
    }
    return s;
}

double ms(Instant t) {
    return static_cast<double>(t.time_since_epoch().count()) / 1e6;
}

// A set of rtr::k* as the JSON names them, comma-separated ("none": empty).
std::string rtr_names(std::uint8_t types) {
    std::string s;
    const std::pair<std::uint8_t, RtrType> kinds[] = {
        {rtr::kSend, RtrType::kSend}, {rtr::kWrite, RtrType::kWrite}, {rtr::kRead, RtrType::kRead}};
    for (const auto& [bit, type] : kinds) {
        if ((types & bit) == 0) continue;
        if (!s.empty()) s += ',';
        s += to_string(type);
    }
    return s.empty() ? "none" : s;
}

// A request carries the RTR types offered (the ladder's rtr=SWR), an
// established connection the one chosen, as the JSON lines say.
void print_event(const char* side, Instant now, const Event& e) {
    std::printf("  %9.3f ms  %s  %-15s %s -> %s  status=%d state=%s", ms(now), side,
                std::string(to_string(e.type)).c_str(), e.local.to_string().c_str(),
                e.remote.to_string().c_str(), e.status, std::string(to_string(e.state)).c_str());
    if (e.type == EventType::kConnectRequest || e.type == EventType::kEstablished) {
        const bool req = e.type == EventType::kConnectRequest;
        std::printf(
            " rev=%u ird=%u ord=%u p2p=%d %s=%s", e.mpa.revision, e.mpa.ird, e.mpa.ord,
            e.mpa.peer_to_peer, req ? "rtr_offered" : "rtr",
            req ? rtr_names(e.mpa.rtr_offered).c_str() : std::string(to_string(e.mpa.rtr)).c_str());
    }
    if (!e.private_data.empty()) std::printf(" pdata=\"%s\"", printable(e.private_data).c_str());
    std::printf("\n");
}

void EventPrinter::operator()(const char* side, Instant now, const Event& e) const {
    if (!json) return print_event(side, now, e);
    Report r = Reporter::from_event(e);
    r.extra.insert(r.extra.begin(), {"side", json_quote(side)});
    rep.print(now, r);
}

void print_stats(const char* side, const Stats& s) {
    std::printf(
        "  %s: nodes %llu/%llu created/destroyed, accepts %llu, rejects %llu, established %llu, "
        "retransmissions %llu, connect errors %llu, frames in/out %llu/%llu, dropped %llu\n",
        side, (unsigned long long)s.nodes_created, (unsigned long long)s.nodes_destroyed,
        (unsigned long long)s.accepts, (unsigned long long)s.rejects,
        (unsigned long long)s.established, (unsigned long long)s.retransmissions,
        (unsigned long long)s.connect_errors, (unsigned long long)s.frames_in,
        (unsigned long long)s.frames_out, (unsigned long long)s.drops_total());
}

void print_handoff(const char* side, const HandoffContext& c) {
    std::printf("  %s: %s -> %s mac %s -> %s vlan %s ttl %u tos %u\n", side,
                c.local.to_string().c_str(), c.remote.to_string().c_str(),
                c.local_mac.to_string().c_str(), c.remote_mac.to_string().c_str(),
                c.vlan == kNoVlan ? "none" : std::to_string(c.vlan).c_str(), c.ttl, c.tos);
    std::printf(
        "      snd_una %u snd_nxt %u rcv_nxt %u snd_wnd %u (shift %u) rcv_wnd %u (shift %u) mss "
        "%u\n",
        c.snd_una, c.snd_nxt, c.rcv_nxt, c.snd_wnd, c.snd_wscale, c.rcv_wnd, c.rcv_wscale, c.mss);
    std::printf("      MPA rev %u crc %d ird %u ord %u p2p %d rtr %s, %s\n", c.mpa.revision,
                c.mpa.crc, c.mpa.ird, c.mpa.ord, c.mpa.peer_to_peer,
                std::string(to_string(c.mpa.rtr)).c_str(), c.initiator ? "initiator" : "responder");
}

// The human report after the run: ladder, hand-off contexts, stats.
using Contexts = std::vector<std::pair<const char*, HandoffContext>>;
void print_summary(const std::vector<std::string>& ladder, const Contexts& contexts, const Core& a,
                   const Core& b, const io::SimNetwork& net) {
    std::printf("\nLadder (every frame, virtual time):\n");
    for (auto& l : ladder) std::printf("%s\n", l.c_str());
    std::printf("\nHand-off context (what the data path takes over):\n");
    for (auto& [side, ctx] : contexts) print_handoff(side, ctx);
    std::printf("\nStats:\n");
    print_stats("A", a.stats());
    print_stats("B", b.stats());
    std::printf("  network: %llu frames sent, %llu lost\n", (unsigned long long)net.counters().sent,
                (unsigned long long)net.counters().lost);
    std::printf("  after drain: live nodes A %zu B %zu, timers A %zu B %zu\n", a.live_nodes(),
                b.live_nodes(), a.pending_timers(), b.pending_timers());
}

int run_demo(const DemoOptions& opt) {
    CoreConfig ca;
    ca.mac = *MacAddr::parse("02:00:00:00:00:0a");
    ca.isn_secret.fill(0x11);
    CoreConfig cb = ca;
    cb.mac = *MacAddr::parse("02:00:00:00:00:0b");
    cb.isn_secret.fill(0x22);
    Core a(ca);
    Core b(cb);
    IpAddr ip_a = *IpAddr::parse("192.0.2.1");
    IpAddr ip_b = *IpAddr::parse("192.0.2.2");
    (void)a.add_address(ip_a);
    (void)b.add_address(ip_b);
    auto listener = b.listen({{ip_b, 4791}, 0});
    if (!listener) return 1;

    const auto req_pd = to_bytes("hello from A: may I connect?");
    const auto rep_pd = to_bytes("welcome A, this is B");
    std::optional<ConnHandle> conn_a;
    std::optional<ConnHandle> conn_b;
    const EventPrinter printer{opt.json};
    bool a_done = false, b_done = false, a_established = false, b_established = false;
    Instant established_at{};

    io::CoreHost host_a(a, [&](Instant now, Core& core) {
        while (auto e = core.poll_event()) {
            printer("A", now, *e);
            if (e->type == EventType::kEstablished) {
                a_established = true;
                established_at = now;
            }
            if (e->terminal()) a_done = true;
        }
    });
    io::CoreHost host_b(b, [&](Instant now, Core& core) {
        while (auto e = core.poll_event()) {
            printer("B", now, *e);
            if (e->type == EventType::kEstablished) b_established = true;
            if (e->type == EventType::kConnectRequest) {
                conn_b = e->conn;
                AcceptParams ap;
                ap.private_data = rep_pd;
                ap.ird = 8;
                ap.ord = 16;
                (void)core.accept(now, e->conn, ap);
            }
            if (e->terminal()) b_done = true;
        }
    });
    io::SimNetwork net(opt.seed);
    std::size_t ia = net.add_host(host_a);
    std::size_t ib = net.add_host(host_b);
    io::LinkFaults faults;
    faults.loss = opt.loss;
    faults.latency = std::chrono::microseconds(50);
    net.set_faults(faults);
    (void)ia;
    (void)ib;

    if (!opt.json) {
        std::printf(
            "iwarp-cm demo: A %s (%s) connects to B %s:4791 (%s) "
            "over the simulated network\n",
            ip_a.to_string().c_str(), ca.mac.to_string().c_str(), ip_b.to_string().c_str(),
            cb.mac.to_string().c_str());
        std::printf("  loss %.0f%%, seed %llu, latency 50 us, MPA revision %d\n\nEvents:\n",
                    opt.loss * 100, (unsigned long long)opt.seed, opt.mpa_rev);
    }

    std::vector<std::string> ladder;
    net.set_observer([&](const io::FrameRecord& r) {
        std::string what = describe_frame(r.bytes);
        char line[400];
        const char* fate = r.fate == io::FrameFate::kLost ? "   x lost" : "";
        if (r.from == 0) {
            std::snprintf(line, sizeof line, "  %9.3f ms  A ---> B  %s%s", ms(r.sent), what.c_str(),
                          fate);
        } else {
            std::snprintf(line, sizeof line, "  %9.3f ms  A <--- B  %s%s", ms(r.sent), what.c_str(),
                          fate);
        }
        ladder.emplace_back(line);
    });

    ConnectParams cp;
    cp.local = {ip_a, 0};
    cp.remote = {ip_b, 4791};
    cp.remote_mac = cb.mac;
    cp.private_data = req_pd;
    cp.ird = 16;
    cp.ord = 4;
    cp.mpa_revision = static_cast<std::uint8_t>(opt.mpa_rev);
    auto c = a.connect(net.now(), cp);
    if (!c) {
        std::fprintf(stderr, "iwarp-cm: connect failed: %s\n",
                     std::string(to_string(c.error())).c_str());
        return 1;
    }
    conn_a = *c;
    // Run until both are established and every byte is acknowledged (the
    // core stops retransmitting once a connection is handed off), then take
    // the hand-off contexts.
    for (int i = 0; i < 1000000 && !(a_established && b_established) && !a_done && !b_done; ++i)
        if (!net.step()) break;
    for (int i = 0; i < 1000000 && a.pending_timers() + b.pending_timers() > 0; ++i)
        if (!net.step()) break;
    Contexts contexts;
    if (a_established) {
        if (auto h = a.handoff(*conn_a)) contexts.emplace_back("A", *h);
        if (conn_b)
            if (auto h = b.handoff(*conn_b)) contexts.emplace_back("B", *h);
        // Hold the connection for a moment of virtual time, then close it.
        net.run_until(net.now() + std::chrono::milliseconds(5));
        (void)a.disconnect(net.now(), *conn_a, DisconnectMode::kGraceful);
    }
    net.run(1000000);

    const bool clean = a.live_nodes() == 0 && b.live_nodes() == 0 && a.pending_timers() == 0 &&
                       b.pending_timers() == 0;
    if (opt.json) {
        Report r;
        r.event = "demo_done";
        r.add_bool("connected", a_established && b_established);
        r.add_bool("clean", clean);
        r.add("frames_sent", std::uint64_t{net.counters().sent});
        r.add("frames_lost", std::uint64_t{net.counters().lost});
        printer.rep.print(net.now(), r);
    } else {
        print_summary(ladder, contexts, a, b, net);
        if (!a_established)
            std::printf("\nresult: NOT connected\n");
        else
            std::printf("\nresult: connected, exchanged private data, disconnected%s\n",
                        clean ? ", nothing leaked" : " (LEAK)");
    }
    return a_established && clean && a_done && b_done ? 0 : 1;
}

}  // namespace

int exit_code() {
    return g_exit_code;
}
void set_exit_code(int code) {
    g_exit_code = code;
}

void add_demo(CLI::App& app) {
    auto opt = std::make_shared<DemoOptions>();
    CLI::App* cmd =
        app.add_subcommand("demo", "two connection managers connect over the simulated network");
    cmd->add_option("--loss", opt->loss, "frame loss probability")
        ->transform(bounded(0, 0.9, false));
    cmd->add_option("--seed", opt->seed, "seed of the simulated network")
        ->transform(bounded(0, 1e18, true));
    cmd->add_option("--mpa-rev", opt->mpa_rev, "MPA revision of the initiator")
        ->check(CLI::IsMember({1, 2}));
    cmd->add_flag("--json", opt->json,
                  "one JSON object per event and a last demo_done line (docs/json.md)");
    cmd->footer(help_footer("iwarp-cm demo --loss 0.3 --seed 7"));
    cmd->callback([opt] { set_exit_code(run_demo(*opt)); });
}

}  // namespace iwcm::tools
