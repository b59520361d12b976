// ACKs arriving while frames wait: what settling a stream's queued frames costs when the
// core has many streams' frames queued (cm::TxQueue::settle through cm::NodeStream, docs/perf.md
// "Frames in parts").
//
// N connections from core A to core B, handed off on both sides, B acknowledging at once.
// One iteration: A sends one full segment on every connection (send_ref, so each frame's
// payload is left in A's memory), the frames cross to B; A sends a second segment on every
// connection and keeps those N frames queued while B's N ACKs arrive. Each ACK settles its
// stream's queued frames below it (none here, the second segment lies above it), which is
// the walk this measures; then everything drains. The ACKs' own time is reported per ACK
// (ns_per_ack): flat in N when a settle walks its own stream's frames, growing with N when it
// walks the core's queue.
#include <benchmark/benchmark.h>

#include <chrono>
#include <vector>

#include "stream_pair.hpp"

namespace {

using namespace iwcm;

CoreConfig settle_config(std::uint8_t mac_last, std::uint8_t secret) {
    CoreConfig c;
    c.mac = MacAddr{{0x02, 0, 0, 0, 0, mac_last}};
    c.isn_secret.fill(secret);
    c.checksum_offload = true;
    c.stream.ack_delay = Duration{};
    return c;
}

void BM_AcksWithFramesQueued(benchmark::State& state) {
    const auto n = static_cast<std::size_t>(state.range(0));
    Core a(settle_config(0x0a, 1));
    Core b(settle_config(0x0b, 2));
    const Instant now = at_ms(1000);
    if (!a.add_address(bench::pair_ip(1)) || !b.add_address(bench::pair_ip(2))) {
        state.SkipWithError("add_address");
        return;
    }
    ListenParams lp;
    lp.local = {bench::pair_ip(2), 5000};
    lp.backlog = static_cast<std::uint32_t>(n);
    if (!b.listen(lp)) {
        state.SkipWithError("listen");
        return;
    }
    ConnectParams cp;
    cp.local = {bench::pair_ip(1), 0};
    cp.remote = {bench::pair_ip(2), 5000};
    cp.remote_mac = b.config().mac;
    std::vector<ConnHandle> conns;
    std::vector<ConnHandle> peers;
    for (std::size_t i = 0; i < n; ++i) {
        auto c = a.connect(now, cp);
        if (!c) {
            state.SkipWithError("connect");
            return;
        }
        conns.push_back(*c);
    }
    for (int round = 0; round < 8 && peers.size() < n; ++round) {
        bench::ferry(a, b, now);
        while (auto e = b.poll_event()) {
            if (e->type == EventType::kConnectRequest && !b.accept(now, e->conn, {})) {
                state.SkipWithError("accept");
                return;
            }
            if (e->type == EventType::kEstablished) {
                if (!b.handoff(e->conn)) {
                    state.SkipWithError("handoff B");
                    return;
                }
                peers.push_back(e->conn);
            }
        }
        bench::ferry(b, a, now);
        while (a.poll_event()) {
        }
    }
    for (ConnHandle c : conns) {
        if (!a.handoff(c)) {
            state.SkipWithError("handoff A");
            return;
        }
    }
    const std::vector<std::byte> segment(1460, std::byte{7});
    // B's reader takes what is readable on every connection.
    const auto read_all = [&] {
        for (ConnHandle c : peers) {
            if (auto view = b.peek(c); view && !view->empty())
                (void)b.consume(now, c, view->size());
        }
    };
    std::uint64_t acks = 0;
    double ack_seconds = 0;
    for (auto _ : state) {
        for (ConnHandle c : conns) (void)a.send_ref(now, c, segment);
        bench::ferry(a, b, now);
        read_all();  // B acknowledges each segment (its ACK delay is zero)
        for (ConnHandle c : conns) (void)a.send_ref(now, c, segment);
        // The N ACKs arrive with the second segments still queued (the settles measured).
        const auto t0 = std::chrono::steady_clock::now();
        acks += bench::ferry(b, a, now);
        ack_seconds += bench::seconds_since(t0);
        bench::ferry(a, b, now);
        read_all();
        bench::ferry(b, a, now);
        while (a.poll_event()) {
        }
        while (b.poll_event()) {
        }
    }
    // The ACKs' own time (the ferry that delivers them), per ACK.
    state.counters["ns_per_ack"] = acks > 0 ? ack_seconds * 1e9 / static_cast<double>(acks) : 0;
    state.counters["acks_per_iteration"] =
        static_cast<double>(acks) / static_cast<double>(state.iterations());
}

}  // namespace

BENCHMARK(BM_AcksWithFramesQueued)->Arg(16)->Arg(256)->Arg(4096);
