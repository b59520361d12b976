// Small exchanges on two tcp::Streams, no core, no frames, no checksums: only the streams'
// own work.
//
// BM_StreamMpaExchange: what the MPA exchange of one connection setup costs when two
// tcp::Streams carry it, the price of running the whole of a connection's TCP in one
// implementation from the handshake on (docs/perf.md "The MPA exchange stays with the
// node"); the node's few lines of src/cm/tcp.cpp do it today. One iteration is what a
// peer-to-peer setup sends after the TCP handshake: the initiator's MPA request, the
// responder's reply (carrying the ACK of the request), the initiator's RTR (carrying the ACK
// of the reply); each end reads through a StreamSink in place and sends its frame by
// reference (by_ref:1), as a node would from its private data, or copied (by_ref:0). Then
// both streams go, as the setup benchmark's connections do. For callgrind, on one line:
//   valgrind --tool=callgrind --collect-atstart=no --toggle-collect='*mpa_exchange*'
//   build-lto/bin/iwcm_bench --benchmark_filter=BM_StreamMpaExchange
// and divide the instructions collected by the `exchanges` counter (20 000).
//
// BM_StreamPingPong: 64 bytes each way between two long-lived streams, copied in and read
// from the receive buffers, every byte acknowledged before the next message: a request and
// its answer, whose buffers empty between messages (docs/perf.md "Data path").
#include <benchmark/benchmark.h>

#include <array>
#include <cstddef>
#include <optional>
#include <span>

#include "iwcm/config.hpp"
#include "iwcm/stream_sink.hpp"
#include "tcp/stream.hpp"
#include "tcp/tcb.hpp"

namespace {

using iwcm::Instant;
using iwcm::tcp::SegmentIn;
using iwcm::tcp::SegmentOut;
using iwcm::tcp::Stream;
using iwcm::tcp::StreamInit;
using iwcm::tcp::Tcb;
using iwcm::wire::SeqNumber;

// Takes every byte, as the node's MPA parser would read them where they lie.
class Taker final : public iwcm::StreamSink {
public:
    std::size_t on_in_order(iwcm::ConnHandle, std::span<const std::byte> bytes) override {
        taken += bytes.size();
        return bytes.size();
    }
    std::size_t taken = 0;
};

// The sizes of the setup benchmark's frames with 32 bytes of private data (MPA revision 2:
// a 20-byte header, the IRD/ORD word, the data; the RTR a zero-length Send FPDU).
constexpr std::size_t kRequest = 20 + 4 + 32;
constexpr std::size_t kReply = 20 + 4 + 32;
constexpr std::size_t kRtr = 2 + 18 + 4;

// Both ends right after the handshake: each Tcb as a node holds it from the SYN on.
Tcb after_handshake(std::uint32_t iss, std::uint32_t irs) {
    Tcb t;
    t.snd_una = SeqNumber(iss + 1);
    t.snd_max = SeqNumber(iss + 1);
    t.rcv_nxt = SeqNumber(irs + 1);
    t.snd_wnd = t.max_snd_wnd = 64 * 1024;
    t.mss = 1460;
    t.snd_wscale = t.rcv_wscale = 7;
    return t;
}

// One segment from `from` to `to`, offered to `sink` (none: read into `to`'s receive
// buffer); false if `from` had none to send.
bool carry(Stream& from, Stream& to, Instant now, Taker* sink = nullptr) {
    const std::optional<SegmentOut> out = from.poll_segment(now);
    if (!out) return false;
    SegmentIn in;
    in.seq = out->seq;
    in.ack = out->ack;
    in.flags = out->flags;
    in.window = out->window;
    in.payload = out->payload;
    in.pieces = out->pieces;
    (void)to.on_segment(now, in, iwcm::tcp::SinkRef{sink, iwcm::ConnHandle{}});
    return true;
}

// [[gnu::noinline]]: callgrind's --toggle-collect finds it by name.
[[gnu::noinline]] std::size_t mpa_exchange(const iwcm::StreamConfig& config,
                                           std::array<Tcb, 2>& tcb,
                                           const std::array<std::byte, 64>& frames, Instant now,
                                           bool by_ref) {
    StreamInit init;
    init.tcb = tcb[0];
    Stream initiator(config, init, now, &tcb[0]);
    init.tcb = tcb[1];
    Stream responder(config, init, now, &tcb[1]);
    Taker at_initiator;
    Taker at_responder;
    const std::span<const std::byte> bytes(frames);
    std::size_t moved = 0;
    const auto write = [by_ref](Stream& s, std::span<const std::byte> b) {
        return by_ref ? s.write_ref(b) : s.write(b);
    };
    moved += write(initiator, bytes.first(kRequest));
    if (!carry(initiator, responder, now, &at_responder)) return 0;
    moved += write(responder, bytes.first(kReply));
    if (!carry(responder, initiator, now, &at_initiator)) return 0;
    moved += write(initiator, bytes.first(kRtr));
    if (!carry(initiator, responder, now, &at_responder)) return 0;
    return at_initiator.taken + at_responder.taken == moved ? moved : 0;
}

void BM_StreamMpaExchange(benchmark::State& state) {
    const iwcm::StreamConfig config;
    const std::array<std::byte, 64> frames{};
    std::uint64_t exchanges = 0;
    bool ok = true;
    for (auto _ : state) {
        // New sequence numbers each time, as new connections have.
        const auto iss = static_cast<std::uint32_t>(exchanges * 2654435761U);
        std::array<Tcb, 2> tcb{after_handshake(iss, ~iss), after_handshake(~iss, iss)};
        const std::size_t moved = mpa_exchange(config, tcb, frames, Instant{}, state.range(0) != 0);
        ok = ok && moved == kRequest + kReply + kRtr;
        benchmark::DoNotOptimize(tcb);
        ++exchanges;
    }
    if (!ok) state.SkipWithError("an exchange did not deliver every byte");
    state.counters["exchanges"] = static_cast<double>(exchanges);
}
// A fixed count, so that callgrind's total divides by it.
BENCHMARK(BM_StreamMpaExchange)->Arg(0)->Arg(1)->ArgName("by_ref")->Iterations(20000);

// `from` sends `msg`, `to` reads it; then segments go both ways until neither end has one.
bool one_way(Stream& from, Stream& to, std::span<const std::byte> msg, Instant now) {
    if (from.write(msg) != msg.size()) return false;
    while (carry(from, to, now)) {
    }
    if (to.readable_bytes() != msg.size()) return false;
    to.consume(msg.size());
    return true;
}

void BM_StreamPingPong(benchmark::State& state) {
    iwcm::StreamConfig config;
    config.ack_delay = iwcm::Duration::zero();  // every message acknowledged at once
    StreamInit a;
    a.tcb = after_handshake(1000, 5000);
    StreamInit b;
    b.tcb = after_handshake(5000, 1000);
    Instant now{};
    Stream ping(config, a, now);
    Stream pong(config, b, now);
    const std::array<std::byte, 64> msg{};
    bool ok = true;
    for (auto _ : state) {
        ok = ok && one_way(ping, pong, msg, now) && one_way(pong, ping, msg, now);
        while (carry(ping, pong, now) || carry(pong, ping, now)) {
        }
        now += std::chrono::microseconds(10);
    }
    if (!ok || ping.bytes_queued() != 0 || pong.bytes_queued() != 0)
        state.SkipWithError("a message was lost or left unacknowledged");
}
BENCHMARK(BM_StreamPingPong);

}  // namespace
