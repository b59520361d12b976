// Bulk transfer over byte streams on the simulated network: two cores
// connect (MPA v2), both hand off as streams, and each sends the other a
// seeded pseudo-random byte sequence while it receives one, both at once,
// under loss (0-30 %), duplication, reordering, corruption and jitter. The
// readers pause at random, so windows close and zero-window probes run.
// Each side closes once it has written everything and read everything.
//
// Checked per seed: every byte arrives exactly once and in order (each one
// is compared with the generator at its offset as it is read), both sides
// end with kDisconnected status 0, and once the network drains nothing is
// left (no node, timer or event). IWCM_STREAM_SEEDS=n changes the number of
// seeds (default 1000); a failure prints the seed. Odd seeds move every frame in
// parts (io::PartsShuttle), so stream bytes are read from pieces where they lie.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "cm/harness.hpp"
#include "io/sim/rng.hpp"
#include "io/sim/sim.hpp"
#include "sim/seeds.hpp"

namespace iwcm::test {
namespace {

using std::chrono::milliseconds;

// The byte at `offset` of the stream that side `side` sends under `seed`.
std::byte pattern(std::uint64_t seed, int side, std::uint64_t offset) {
    std::uint64_t x =
        (seed * 0x9E3779B97F4A7C15ull) ^ (offset * 0xBF58476D1CE4E5B9ull) ^ (side + 1u);
    x ^= x >> 31;
    x *= 0x94D049BB133111EBull;
    x ^= x >> 29;
    return static_cast<std::byte>(x & 0xFF);
}

// One side's application: writes its stream, reads and checks the other's.
struct Side {
    int id = 0;
    std::uint64_t seed = 0;
    std::size_t total = 0;  // bytes each way
    io::Rng* rng = nullptr;
    ConnHandle conn;
    bool up = false;
    bool closed = false;  // disconnect() called
    std::size_t written = 0;
    std::size_t read = 0;
    Instant paused_until{};
    int disconnected = 0;
    int disconnect_status = 1;
    std::string failure;

    void fail(const std::string& what) {
        if (failure.empty()) failure = "side " + std::to_string(id) + ": " + what;
    }

    void on_event(Instant now, Core& core, const Event& e) {
        switch (e.type) {
            case EventType::kConnectRequest:
                if (!core.accept(now, e.conn, {})) fail("accept failed");
                return;
            case EventType::kEstablished:
                conn = e.conn;
                if (!core.handoff(conn)) fail("handoff failed");
                up = true;
                return;
            case EventType::kDisconnected:
                ++disconnected;
                disconnect_status = e.status;
                // Bytes before the peer's FIN stay readable until the next poll.
                read_all(now, core);
                up = false;
                return;
            case EventType::kReadable:
            case EventType::kWritable: return;
            case EventType::kRejected:
            case EventType::kUnreachable:
            case EventType::kConnectError:
                fail(std::string("connection failed: ") + std::string(to_string(e.type)) + " " +
                     std::to_string(e.status));
                return;
            case EventType::kAddressDown:
            case EventType::kAddressUp: fail("address event"); return;
        }
    }

    void read_all(Instant now, Core& core) {
        while (true) {
            auto view = core.peek(conn);
            if (!view || view->empty()) return;
            for (std::size_t i = 0; i < view->size(); ++i) {
                if (read + i >= total) {
                    fail("more bytes than were sent");
                    return;
                }
                if ((*view)[i] != pattern(seed, 1 - id, read + i)) {
                    fail("byte " + std::to_string(read + i) + " differs");
                    return;
                }
            }
            std::size_t n = view->size();
            if (!core.consume(now, conn, n)) fail("consume failed");
            read += n;
        }
    }

    void run(Instant now, Core& core) {
        while (auto e = core.poll_event()) on_event(now, core, *e);
        if (!up) return;
        // Write what the send buffer takes, in pieces of random size.
        while (written < total) {
            std::size_t n = std::min<std::size_t>(total - written, 1 + rng->below(8192));
            std::vector<std::byte> piece(n);
            for (std::size_t i = 0; i < n; ++i) piece[i] = pattern(seed, id, written + i);
            auto taken = core.send(now, conn, piece);
            if (!taken) {
                fail("send failed");
                return;
            }
            written += *taken;
            if (*taken < n) break;
        }
        // The reader pauses now and then: its window closes.
        if (now >= paused_until) {
            read_all(now, core);
            if (rng->below(64) == 0) paused_until = now + milliseconds(rng->below(400));
        }
        if (!closed && written == total && read == total) {
            closed = true;
            if (!core.disconnect(now, conn, DisconnectMode::kGraceful)) fail("disconnect failed");
        }
    }
};

// Calls the app on every receive and timer, and also when a paused reader's
// pause ends (a timer of the app's own, as an event loop would keep).
class AppHost final : public io::SimHost {
public:
    AppHost(Core& core, Side& side, bool in_parts)
        : core_(core), side_(side), in_parts_(in_parts) {}
    MacAddr mac() const override { return core_.config().mac; }
    void receive(Instant now, std::span<const std::byte> frame) override {
        if (in_parts_) {
            parts_.receive(core_, now, frame);
        } else {
            core_.receive(now, frame);
        }
        side_.run(now, core_);
    }
    void on_timer(Instant now) override {
        if (auto d = core_.next_deadline(); d && *d <= now) core_.on_timer(now);
        side_.run(now, core_);
    }
    std::optional<Instant> next_deadline() const override {
        auto d = core_.next_deadline();
        if (side_.up && side_.paused_until > kInstantZero && (!d || side_.paused_until < *d)) {
            if (side_.read < side_.total && side_.paused_until > last_) return side_.paused_until;
        }
        return d;
    }
    std::optional<std::span<const std::byte>> poll_transmit() override {
        return in_parts_ ? parts_.poll(core_) : core_.poll_transmit();
    }
    void note(Instant now) { last_ = now; }

private:
    Core& core_;
    Side& side_;
    Instant last_{};
    bool in_parts_ = false;
    io::PartsShuttle parts_;
};

struct Outcome {
    bool ok = false;
    std::string why;
};

Outcome run_seed(std::uint64_t seed) {
    io::Rng draw(seed);
    CoreConfig ca = config_for(kMacA, 1);
    CoreConfig cb = config_for(kMacB, 2);
    // Small buffers make windows close often.
    for (CoreConfig* c : {&ca, &cb}) {
        c->stream.send_buffer = 16 * 1024 + static_cast<std::uint32_t>(draw.below(64 * 1024));
        c->stream.recv_buffer = 8 * 1024 + static_cast<std::uint32_t>(draw.below(64 * 1024));
        // Odd seeds send with segmentation offload, chosen outside the
        // generator so that every seed's draws stay as they were.
        if (seed % 2 == 1) c->stream.segment_offload = 65000;
    }
    Core a(ca);
    Core b(cb);
    if (std::getenv("IWCM_STREAM_TRACE") != nullptr) {
        for (Core* c : {&a, &b}) {
            const char* name = c == &a ? "A" : "B";
            c->set_trace([name](const TraceRecord& r) {
                if (r.kind == TraceRecord::Kind::kDrop) {
                    std::printf("%s %.3f drop %s\n", name, r.now.time_since_epoch().count() / 1e9,
                                std::string(to_string(r.drop)).c_str());
                    return;
                }
                if (r.kind == TraceRecord::Kind::kState) {
                    std::printf("%s state %s\n", name, std::string(to_string(r.to)).c_str());
                    return;
                }
                auto p = wire::parse_tcp_frame(r.frame);
                if (!p) return;
                const auto& t = p->repr.tcp;
                std::printf("%s %.3f %s seq %u ack %u len %zu flags %02x win %u\n", name,
                            r.now.time_since_epoch().count() / 1e9,
                            r.kind == TraceRecord::Kind::kFrameIn ? "in " : "out", t.seq.value(),
                            t.ack.value(), p->payload.size(), t.flags, t.window);
            });
        }
    }
    if (!a.add_address(ip_a()) || !b.add_address(ip_b())) return {false, "add_address"};
    if (!b.listen({{ip_b(), 4791}, 0})) return {false, "listen"};
    io::Rng rng_a(seed * 2 + 1), rng_b(seed * 2 + 2);
    const std::size_t total = 8 * 1024 + draw.below(40 * 1024);
    Side sa, sb;
    for (Side* s : {&sa, &sb}) {
        s->seed = seed;
        s->total = total;
    }
    sa.id = 0;
    sa.rng = &rng_a;
    sb.id = 1;
    sb.rng = &rng_b;
    AppHost ha(a, sa, seed % 2 == 1), hb(b, sb, seed % 2 == 1);
    io::SimNetwork net(seed);
    net.add_host(ha);
    net.add_host(hb);
    io::LinkFaults f;
    f.loss = static_cast<double>(draw.below(31)) / 100.0;
    f.duplicate = static_cast<double>(draw.below(6)) / 100.0;
    f.reorder = static_cast<double>(draw.below(11)) / 100.0;
    f.corrupt = static_cast<double>(draw.below(6)) / 100.0;
    f.jitter = std::chrono::microseconds(draw.below(200));
    ConnectParams p;
    p.local = {ip_a(), 0};
    p.remote = {ip_b(), 4791};
    p.remote_mac = kMacB;
    auto c = a.connect(net.now(), p);
    if (!c) return {false, "connect"};
    sa.conn = *c;
    // The connection is set up on a clean network: under heavy loss the
    // driver's MPA timers may rightly give a setup up, and this test is
    // about the stream. The faults start once both sides are handed off.
    std::size_t steps = 0;
    while (!(sa.up && sb.up) && steps < 100'000 && net.step()) ++steps;
    if (!(sa.up && sb.up)) return {false, "setup failed on a clean network"};
    net.set_faults(f);
    while (steps < 20'000'000 && net.step()) {
        ++steps;
        ha.note(net.now());
        hb.note(net.now());
        if (!sa.failure.empty() || !sb.failure.empty()) break;
    }
    std::string why = sa.failure.empty() ? sb.failure : sa.failure;
    auto info = [&](Core& core, Side& s) {
        auto i = core.stream_info(s.conn);
        if (!i) return std::string(" [no stream]");
        auto d = core.next_deadline();
        return " [queued " + std::to_string(i->queued) + " readable " +
               std::to_string(i->readable) + " snd_wnd " + std::to_string(i->snd_wnd) +
               " rcv_wnd " + std::to_string(i->rcv_wnd) + " cwnd " + std::to_string(i->cwnd) +
               " una " + std::to_string(i->snd_una) + " nxt " + std::to_string(i->snd_nxt) +
               " rcv_nxt " + std::to_string(i->rcv_nxt) + " deadline " +
               (d ? std::to_string(d->time_since_epoch().count()) : std::string("none")) +
               " paused " + std::to_string(s.paused_until.time_since_epoch().count()) + " up " +
               std::to_string(s.up) + "]";
    };
    auto summary = [&] {
        return info(a, sa) + info(b, sb) + " now " +
               std::to_string(net.now().time_since_epoch().count()) + " status A " +
               std::to_string(sa.disconnect_status) + " B " + std::to_string(sb.disconnect_status) +
               " (loss " + std::to_string(f.loss) + ", total " + std::to_string(total) +
               ", A read " + std::to_string(sa.read) + " wrote " + std::to_string(sa.written) +
               ", B read " + std::to_string(sb.read) + " wrote " + std::to_string(sb.written) +
               ", steps " + std::to_string(steps) + ")";
    };
    if (!why.empty()) return {false, why + summary()};
    for (Side* s : {&sa, &sb}) {
        if (s->read != total)
            return {false, "side " + std::to_string(s->id) + " read short" + summary()};
        if (s->disconnected != 1 || s->disconnect_status != 0)
            return {false, "side " + std::to_string(s->id) +
                               " did not end with one kDisconnected(0)" + summary()};
    }
    for (Core* core : {&a, &b}) {
        if (core->live_nodes() != 0 || core->pending_timers() != 0 || core->queued_events() != 0)
            return {false, "something left after close" + summary()};
    }
    return {true, {}};
}

// IWCM_STREAM_SEED=s runs that seed alone (with IWCM_STREAM_TRACE=1: every frame).
TEST(StreamBulk, EveryByteOnceInOrderUnderFaults) {
    run_seeds("IWCM_STREAM_SEEDS", "IWCM_STREAM_SEED", 1000, run_seed);
}

}  // namespace
}  // namespace iwcm::test
