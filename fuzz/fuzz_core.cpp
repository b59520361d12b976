// libFuzzer target: the whole core's ingress. A core (A, 10.0.0.2 and
// fd00::2) is first driven with valid frames from a peer core (B) into many
// states at once: listening (specific, wildcard, backlog 1), SYN_RCVD,
// SYN_SENT, MPAREQ_SENT, MPAREQ_RCVD, ONE_SIDE_ESTABLISHED, ESTABLISHED,
// OFFLOADED, FIN_WAIT1, LAST_ACK, TIME_WAIT. Then the fuzz input becomes
// frames for A, each chunk one of:
//   kind 0  raw bytes as a frame;
//   kind 1  a valid frame of one of B's connections (a template) with the
//           chunk's flags, a sequence offset and the chunk's bytes as
//           payload (right checksums: this reaches MPA and RTR parsing);
//   kind 2  a template with the chunk's bytes XORed over it from the IP
//           header on, checksums made right or not;
// with timers run between frames and the application answering requests.
// Properties: nothing crashes or asserts (ASan, UBSan, IWCM_ASSERT); every
// handle gets exactly one terminal event; once the application closes all it
// holds and time runs out, no node, timer entry or event is left, and
// created == destroyed.
#include <cstdlib>
#include <map>
#include <optional>
#include <string>

#include "fuzz/fuzz_util.hpp"
#include "iwcm/core.hpp"
#include "wire/frame.hpp"

using namespace iwcm;

namespace {

constexpr MacAddr kMacA{{0x02, 0, 0, 0, 0, 0x0a}};
constexpr MacAddr kMacB{{0x02, 0, 0, 0, 0, 0x0b}};

CoreConfig config(MacAddr mac, std::uint8_t secret) {
    CoreConfig c;
    c.mac = mac;
    c.isn_secret.fill(secret);
    return c;
}

struct Harness {
    Core a{config(kMacA, 1)};
    Core b{config(kMacB, 2)};
    Instant now{};
    // Every handle A's application holds, and whether it has ended.
    std::map<std::pair<std::uint32_t, std::uint32_t>, bool> a_handles;
    std::vector<ConnHandle> b_requests;
    std::vector<std::vector<std::byte>> templates;  // valid B -> A frames
    bool accept_requests = true;

    void a_events() {
        while (auto e = a.poll_event()) {
            auto key = std::make_pair(e->conn.index, e->conn.generation);
            if (e->type == EventType::kConnectRequest) {
                FUZZ_CHECK(a_handles.count(key) == 0);
                a_handles[key] = false;
                continue;
            }
            auto it = a_handles.find(key);
            FUZZ_CHECK(it != a_handles.end());
            FUZZ_CHECK(!it->second);
            if (e->terminal()) it->second = true;
        }
    }
    void b_events() {
        while (auto e = b.poll_event())
            if (e->type == EventType::kConnectRequest) b_requests.push_back(e->conn);
    }
    // Moves frames both ways; `to_a` / `to_b` false drops that direction.
    void pump(bool to_a = true, bool to_b = true) {
        for (int round = 0; round < 100; ++round) {
            bool moved = false;
            while (auto f = a.poll_transmit()) {
                moved = true;
                if (to_b) b.receive(now, *f);
            }
            while (auto f = b.poll_transmit()) {
                moved = true;
                std::vector<std::byte> copy(f->begin(), f->end());
                if (to_a) {
                    templates.push_back(copy);
                    a.receive(now, copy);
                }
            }
            a_events();
            b_events();
            if (!moved) return;
        }
    }
    ConnectParams to_a(std::uint16_t port, bool v6 = false) {
        ConnectParams p;
        p.local = {*IpAddr::parse(v6 ? "fd00::1" : "10.0.0.1"), 0};
        p.remote = {*IpAddr::parse(v6 ? "fd00::2" : "10.0.0.2"), port};
        p.remote_mac = kMacA;
        return p;
    }
    ConnectParams to_b() {
        ConnectParams p;
        p.local = {*IpAddr::parse("10.0.0.2"), 0};
        p.remote = {*IpAddr::parse("10.0.0.1"), 4791};
        p.remote_mac = kMacB;
        return p;
    }
    std::optional<ConnHandle> a_connect(const ConnectParams& p) {
        auto h = a.connect(now, p);
        if (!h) return std::nullopt;
        a_handles[{h->index, h->generation}] = false;
        return *h;
    }

    // Puts A's connections in many states with valid traffic.
    void setup() {
        (void)a.add_address(*IpAddr::parse("10.0.0.2"));
        (void)a.add_address(*IpAddr::parse("fd00::2"));
        (void)b.add_address(*IpAddr::parse("10.0.0.1"));
        (void)b.add_address(*IpAddr::parse("fd00::1"));
        (void)a.listen({{*IpAddr::parse("10.0.0.2"), 4791}, 0});
        (void)a.listen({*Endpoint::parse("[::]:4791"), 0});
        (void)a.listen({{*IpAddr::parse("10.0.0.2"), 4792}, 1});
        (void)b.listen({{*IpAddr::parse("10.0.0.1"), 4791}, 0});
        std::vector<std::byte> pd(40, std::byte{0x5a});
        // MPAREQ_RCVD (left unanswered), then ESTABLISHED (accepted), on IPv4 and IPv6.
        for (bool v6 : {false, true}) {
            auto p = to_a(4791, v6);
            p.private_data = pd;
            (void)b.connect(now, p);
            pump();
        }
        auto accept_last = [&](bool drop_to_a) {
            a_events();
            for (auto it = a_handles.rbegin(); it != a_handles.rend(); ++it) {
                ConnHandle h{it->first.first, it->first.second};
                auto st = a.state(h);
                if (st && *st == CmState::kMpaReqRcvd) {
                    (void)a.accept(now, h, {});
                    pump(!drop_to_a);
                    return h;
                }
            }
            return ConnHandle{};
        };
        for (int i = 0; i < 3; ++i) {
            (void)b.connect(now, to_a(4791));
            pump();
        }
        ConnHandle est1 = accept_last(false);  // ESTABLISHED
        ConnHandle est2 = accept_last(false);  // will be OFFLOADED
        (void)accept_last(true);               // ONE_SIDE_ESTABLISHED: the RTR is lost
        if (est2.valid()) (void)a.handoff(est2);
        // FIN_WAIT1: A closes, B never hears it.
        for (int i = 0; i < 2; ++i) {
            (void)b.connect(now, to_a(4791));
            pump();
        }
        ConnHandle fw1 = accept_last(false);
        ConnHandle tw = accept_last(false);
        if (fw1.valid()) (void)a.disconnect(now, fw1, DisconnectMode::kGraceful);
        pump(true, false);
        // TIME_WAIT: A closes first, everything delivered.
        if (tw.valid()) (void)a.disconnect(now, tw, DisconnectMode::kGraceful);
        pump();
        (void)est1;
        // SYN_RCVD: B's SYN arrives, A's SYN-ACK is lost.
        (void)b.connect(now, to_a(4792));
        pump(true, false);
        // SYN_SENT: A's SYN is lost. MPAREQ_SENT: B never answers the request.
        (void)a_connect(to_b());
        while (a.poll_transmit()) {
        }
        (void)a_connect(to_b());
        auto step = [&](bool to_b_ok, bool to_a_ok) {
            while (auto f = a.poll_transmit())
                if (to_b_ok) b.receive(now, *f);
            while (auto f = b.poll_transmit()) {
                std::vector<std::byte> copy(f->begin(), f->end());
                if (to_a_ok) a.receive(now, copy);
            }
        };
        step(true, true);    // SYN to B, SYN-ACK to A
        step(false, false);  // A's MPA request lost: MPAREQ_SENT
        a_events();
        b_events();
        // LAST_ACK: an established connection that B closes; A's FIN is lost.
        b_requests.clear();
        (void)a_connect(to_b());
        pump();
        for (ConnHandle h : b_requests) (void)b.accept(now, h, {});
        pump();
        for (ConnHandle h : b_requests) (void)b.disconnect(now, h, DisconnectMode::kGraceful);
        pump(true, false);
        now += std::chrono::milliseconds(1);
        if (std::getenv("IWCM_FUZZ_DEBUG")) {
            // The states the setup left A's connections in (see the file comment).
            for (auto& [k, ended] : a_handles) {
                auto st = a.state({k.first, k.second});
                std::fprintf(stderr, "handle %u/%u %s\n", k.first, k.second,
                             st ? std::string(to_string(*st)).c_str() : "ended");
            }
            std::fprintf(stderr, "live nodes %zu, templates %zu\n", a.live_nodes(),
                         templates.size());
        }
    }

    void deliver(std::span<const std::byte> frame) {
        a.receive(now, frame);
        while (a.poll_transmit()) {
        }
        a_events();
    }

    void answer_requests() {
        for (auto& [k, ended] : a_handles) {
            if (ended) continue;
            ConnHandle h{k.first, k.second};
            auto st = a.state(h);
            if (st && *st == CmState::kMpaReqRcvd) {
                if (accept_requests)
                    (void)a.accept(now, h, {});
                else
                    (void)a.reject(now, h, {});
                if (!accept_requests) ended = true;  // reject ends the handle silently
            }
        }
        while (a.poll_transmit()) {
        }
        a_events();
    }

    void run_timers(Instant until) {
        for (int i = 0; i < 100000; ++i) {
            auto d = a.next_deadline();
            if (!d || *d > until) break;
            now = std::max(now, *d);
            a.on_timer(now);
            while (a.poll_transmit()) {
            }
            a_events();
        }
        now = std::max(now, until);
    }

    // The application closes everything; time runs out; nothing may be left.
    void finish() {
        for (auto& [k, ended] : a_handles)
            if (!ended) (void)a.disconnect(now, {k.first, k.second}, DisconnectMode::kAbortive);
        while (a.poll_transmit()) {
        }
        a_events();
        run_timers(now + std::chrono::hours(1));
        a_events();
        for (auto& [k, ended] : a_handles) FUZZ_CHECK(ended);
        FUZZ_CHECK(a.live_nodes() == 0);
        FUZZ_CHECK(a.pending_timers() == 0);
        FUZZ_CHECK(a.queued_events() == 0);
        FUZZ_CHECK(a.stats().nodes_created == a.stats().nodes_destroyed);
    }
};

std::vector<std::byte> from_template(const std::vector<std::byte>& t,
                                     std::span<const std::uint8_t> d) {
    auto p = wire::parse_tcp_frame(t);
    if (!p || d.size() < 3) return t;
    wire::FrameRepr repr = p->repr;
    repr.tcp.flags = d[0];
    repr.tcp.seq = repr.tcp.seq + static_cast<std::uint32_t>(
                                      static_cast<std::int32_t>(static_cast<std::int8_t>(d[1])));
    if (d[2] & 1)
        repr.tcp.ack =
            repr.tcp.ack + static_cast<std::uint32_t>(static_cast<std::int8_t>(d[2]) >> 1);
    auto payload = fuzz::bytes_of(d.data() + 3, d.size() - 3);
    std::vector<std::byte> out(wire::tcp_frame_len(repr, payload.size()));
    std::size_t n = wire::emit_tcp_frame(repr, payload, out);
    out.resize(n);
    return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size < 1) return 0;
    Harness h;
    h.setup();
    std::uint8_t mode = data[0];
    h.accept_requests = mode & 1;
    std::size_t off = 1;
    int frames = 0;
    // Chunks: kind (1 byte), length (1 byte), bytes.
    while (off + 2 <= size && frames < 64) {
        std::uint8_t kind = data[off] % 3;
        std::size_t len = std::min<std::size_t>(data[off + 1], size - off - 2);
        std::span<const std::uint8_t> chunk(data + off + 2, len);
        off += 2 + len;
        ++frames;
        std::vector<std::byte> frame;
        if (kind == 0 || h.templates.empty()) {
            frame.assign(reinterpret_cast<const std::byte*>(chunk.data()),
                         reinterpret_cast<const std::byte*>(chunk.data() + chunk.size()));
            if (mode & 2) fuzz::fix_checksums(frame);
        } else {
            std::size_t t = chunk.empty() ? 0 : chunk[0] % h.templates.size();
            auto rest = chunk.empty() ? chunk : chunk.subspan(1);
            if (kind == 1) {
                frame = from_template(h.templates[t], rest);
            } else {
                frame = h.templates[t];
                for (std::size_t i = 0; i < rest.size() && 14 + i < frame.size(); ++i)
                    frame[14 + i] ^= static_cast<std::byte>(rest[i]);
                if (mode & 4) fuzz::fix_checksums(frame);
            }
        }
        h.deliver(frame);
        if (mode & 8) h.answer_requests();
        // Time moves a little between frames; timers due run.
        h.run_timers(h.now + std::chrono::milliseconds(chunk.empty() ? 1 : chunk.back() % 32));
    }
    // Whole input as one frame too (splitting and not splitting both covered).
    h.deliver(fuzz::bytes_of(data, size));
    h.answer_requests();
    h.finish();
    return 0;
}
