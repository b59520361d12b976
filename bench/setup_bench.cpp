// Google benchmarks of the connection-setup hot paths: one full setup, a frame
// built and parsed, a connection-table lookup among 100k; and the heap
// allocations per setup and per frame in steady state.
//
// Read first: bench/setup_pair.hpp (what one setup is), docs/design.md "Cost facts"
// (the figures these benchmarks give), docs/perf.md (results and the
// command). The whole-system figures (setups per second against the kernel
// sockets, memory per connection at 1M) come from `iwarp-cm bench`.
//
// This binary replaces the global operator new with a counting one (a
// thread-local counter in front of malloc), so that the setup benchmarks can
// report allocations; the cost is one increment per allocation.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <new>
#include <unordered_map>
#include <vector>

#include "cm/conn_table.hpp"
#include "cm/node.hpp"
#include "setup_pair.hpp"
#include "timer_workload.hpp"
#include "wire/frame.hpp"
#include "wire/mpa.hpp"

namespace {

thread_local std::uint64_t t_allocs = 0;
thread_local std::uint64_t t_alloc_bytes = 0;

void* counted_alloc(std::size_t n) {
    ++t_allocs;
    t_alloc_bytes += n;
    if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
    throw std::bad_alloc();
}

}  // namespace

void* operator new(std::size_t n) {
    return counted_alloc(n);
}
void* operator new[](std::size_t n) {
    return counted_alloc(n);
}
void operator delete(void* p) noexcept {
    std::free(p);
}
void operator delete[](void* p) noexcept {
    std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
    std::free(p);
}
void operator delete[](void* p, std::size_t) noexcept {
    std::free(p);
}

namespace {

using iwcm::bench::SetupPair;

// Allocation counters over a region, per unit of work.
struct AllocMeter {
    std::uint64_t allocs0 = t_allocs;
    std::uint64_t bytes0 = t_alloc_bytes;
    void report(benchmark::State& state, double setups, double frames) const {
        double allocs = static_cast<double>(t_allocs - allocs0);
        state.counters["allocs/setup"] = setups > 0 ? allocs / setups : 0;
        state.counters["alloc_bytes/setup"] =
            setups > 0 ? static_cast<double>(t_alloc_bytes - bytes0) / setups : 0;
        state.counters["allocs/frame"] = frames > 0 ? allocs / frames : 0;
    }
};

// One batch of range(0) complete setups per iteration (both sides established,
// events drained); the abortive teardown runs with the clock paused. range(1) = 1: both
// cores with checksum offload (CoreConfig::checksum_offload, as loopback).
void BM_Setup(benchmark::State& state) {
    const auto batch = static_cast<std::size_t>(state.range(0));
    SetupPair p(32, 32, state.range(1) != 0);
    for (int i = 0; i < 40; ++i) {  // warm-up: pools, table, arenas, event queues at size
        p.setup_round(256);
        p.teardown_all();
    }
    const std::uint64_t e0 = p.counters().errors;
    double setups = 0;
    std::uint64_t frames = 0, teardown_allocs = 0, teardown_bytes = 0;
    AllocMeter meter;
    for (auto _ : state) {
        std::uint64_t f0 = p.counters().frames;
        setups += static_cast<double>(p.setup_round(batch));
        frames += p.counters().frames - f0;
        state.PauseTiming();
        std::uint64_t a0 = t_allocs, b0 = t_alloc_bytes;
        p.teardown_all();
        teardown_allocs += t_allocs - a0;
        teardown_bytes += t_alloc_bytes - b0;
        state.ResumeTiming();
    }
    // Count the setups' allocations only.
    meter.allocs0 += teardown_allocs;
    meter.bytes0 += teardown_bytes;
    meter.report(state, setups, static_cast<double>(frames));
    state.SetItemsProcessed(static_cast<std::int64_t>(setups));
    state.counters["frames/setup"] = setups > 0 ? static_cast<double>(frames) / setups : 0;
    state.counters["teardown_allocs/setup"] =
        setups > 0 ? static_cast<double>(teardown_allocs) / setups : 0;
    if (p.counters().errors != e0) state.SkipWithError("setup failed");
}
BENCHMARK(BM_Setup)->ArgNames({"batch", "offload"})->Args({1, 0})->Args({256, 0})->Args({256, 1});

// One setup and its abortive teardown per iteration, nothing paused.
void BM_SetupTeardown(benchmark::State& state) {
    SetupPair p;
    for (int i = 0; i < 40; ++i) {
        p.setup_round(256);
        p.teardown_all();
    }
    std::uint64_t f0 = p.counters().frames, e0 = p.counters().errors;
    AllocMeter meter;
    double setups = 0;
    for (auto _ : state) {
        setups += static_cast<double>(p.setup_round(1));
        p.teardown_all();
    }
    meter.report(state, setups, static_cast<double>(p.counters().frames - f0));
    state.SetItemsProcessed(static_cast<std::int64_t>(setups));
    if (p.counters().errors != e0) state.SkipWithError("setup failed");
}
BENCHMARK(BM_SetupTeardown);

iwcm::wire::FrameRepr sample_frame(bool syn) {
    namespace tf = iwcm::wire::tcp_flags;
    iwcm::wire::FrameRepr f;
    f.eth.dst = iwcm::MacAddr{{0x02, 0, 0, 0, 0, 0x0b}};
    f.eth.src = iwcm::MacAddr{{0x02, 0, 0, 0, 0, 0x0a}};
    f.ip.src = SetupPair::ip_a();
    f.ip.dst = SetupPair::ip_b();
    f.tcp.src_port = 49152;
    f.tcp.dst_port = 4791;
    f.tcp.seq = iwcm::wire::SeqNumber(0x12345678);
    f.tcp.ack = iwcm::wire::SeqNumber(0x9abcdef0);
    f.tcp.window = 16060;
    f.tcp.flags = syn ? tf::kSyn : (tf::kAck | tf::kPsh);
    if (syn) {
        f.tcp.options.mss = 1460;
        f.tcp.options.window_scale = 2;
    }
    return f;
}

std::vector<std::byte> mpa_request(std::size_t pdata) {
    std::vector<std::byte> pd(pdata, std::byte{'p'});
    iwcm::wire::MpaRepr r;
    r.kind = iwcm::wire::MpaKind::kRequest;
    iwcm::wire::MpaV2Params v2;
    v2.ird = v2.ord = 16;
    v2.peer_to_peer = v2.rtr_send = true;
    r.v2 = v2;
    r.private_data = pd;
    std::vector<std::byte> out(r.buffer_len());
    r.emit(out);
    return out;
}

// Ethernet + IPv4 + TCP built with both checksums and parsed back (every
// layer checked). range(0) = 0: a SYN with MSS and window scale; 1: a segment
// carrying an MPA revision-2 request with 32 bytes of private data.
void BM_FrameBuildParse(benchmark::State& state) {
    const bool syn = state.range(0) == 0;
    const iwcm::wire::FrameRepr f = sample_frame(syn);
    const std::vector<std::byte> payload = syn ? std::vector<std::byte>{} : mpa_request(32);
    std::vector<std::byte> buf(iwcm::wire::tcp_frame_len(f, payload.size()));
    std::uint64_t a0 = t_allocs;
    for (auto _ : state) {
        iwcm::wire::emit_tcp_frame(f, payload, buf);
        benchmark::ClobberMemory();
        auto parsed = iwcm::wire::parse_tcp_frame(buf);
        benchmark::DoNotOptimize(parsed);
        if (!parsed) state.SkipWithError("parse failed");
    }
    state.counters["frame_bytes"] = static_cast<double>(buf.size());
    state.counters["allocs/iter"] =
        static_cast<double>(t_allocs - a0) /
        static_cast<double>(std::max<std::int64_t>(1, state.iterations()));
}
BENCHMARK(BM_FrameBuildParse)->Arg(0)->Arg(1);

// n connections' keys: one local address, distinct (remote port, local port).
std::vector<iwcm::cm::ConnKey> make_keys(std::size_t n) {
    std::vector<iwcm::cm::ConnKey> keys(n);
    for (std::size_t i = 0; i < n; ++i) {
        keys[i].local = {SetupPair::ip_b(), static_cast<std::uint16_t>(4791 + i / 16000)};
        keys[i].remote = {SetupPair::ip_a(), static_cast<std::uint16_t>(49152 + i % 16000)};
        keys[i].vlan = iwcm::kNoVlan;
    }
    return keys;
}

// Lookups in a random order, so that neither slots nor nodes are in cache.
std::vector<std::uint32_t> shuffled(std::size_t n) {
    std::vector<std::uint32_t> order(n);
    iwcm::bench::FastRng rng(99);
    for (std::size_t i = 0; i < n; ++i) order[i] = static_cast<std::uint32_t>(i);
    for (std::size_t i = n; i > 1; --i) std::swap(order[i - 1], order[rng.next() % i]);
    return order;
}

struct Table {
    iwcm::cm::NodePool pool{[](void*, iwcm::cm::Node&) {}, nullptr};
    iwcm::cm::ConnTable table;
    explicit Table(const std::vector<iwcm::cm::ConnKey>& keys) {
        for (const auto& k : keys) {
            iwcm::cm::NodeRef n = pool.create();
            n->local = k.local;
            n->remote = k.remote;
            n->vlan = k.vlan;
            table.insert(n);
        }
    }
};

// The engine's flat connection table: one find among range(0) connections.
void BM_ConnTableFind(benchmark::State& state) {
    const auto n = static_cast<std::size_t>(state.range(0));
    const auto keys = make_keys(n);
    const auto order = shuffled(n);
    Table t(keys);
    std::size_t i = 0, found = 0;
    for (auto _ : state) {
        iwcm::cm::Node* node = t.table.find(keys[order[i]]);
        benchmark::DoNotOptimize(node);
        found += node != nullptr;
        if (++i == n) i = 0;
    }
    if (found != static_cast<std::size_t>(state.iterations())) state.SkipWithError("key not found");
}
BENCHMARK(BM_ConnTableFind)->Arg(1'000)->Arg(100'000)->Arg(1'000'000);

struct KeyHash {
    std::size_t operator()(const iwcm::cm::ConnKey& k) const { return iwcm::cm::hash_key({}, k); }
};

// The reference of docs/design.md "Cost facts": std::unordered_map, same keys, same hash.
void BM_UnorderedMapFind(benchmark::State& state) {
    const auto n = static_cast<std::size_t>(state.range(0));
    const auto keys = make_keys(n);
    const auto order = shuffled(n);
    std::unordered_map<iwcm::cm::ConnKey, std::vector<std::byte>, KeyHash> map;
    for (const auto& k : keys) map.emplace(k, std::vector<std::byte>(64));  // a node-sized value
    std::size_t i = 0;
    for (auto _ : state) {
        auto it = map.find(keys[order[i]]);
        benchmark::DoNotOptimize(it);
        if (++i == n) i = 0;
    }
}
BENCHMARK(BM_UnorderedMapFind)->Arg(100'000);

// What a core does first with every frame: parse it and find its connection.
void BM_ParseAndFind(benchmark::State& state) {
    const auto n = static_cast<std::size_t>(state.range(0));
    const auto keys = make_keys(n);
    Table t(keys);
    // One frame per connection, in random order: neither frames, slots nor nodes in cache.
    const std::size_t kFrames = n;
    const auto order = shuffled(n);
    iwcm::wire::FrameRepr f = sample_frame(false);
    const auto payload = mpa_request(32);
    std::vector<std::vector<std::byte>> frames(kFrames);
    for (std::size_t i = 0; i < kFrames; ++i) {
        const auto& k = keys[order[i % n]];
        f.ip.src = k.remote.addr;
        f.ip.dst = k.local.addr;
        f.tcp.src_port = k.remote.port;
        f.tcp.dst_port = k.local.port;
        frames[i].resize(iwcm::wire::tcp_frame_len(f, payload.size()));
        iwcm::wire::emit_tcp_frame(f, payload, frames[i]);
    }
    std::size_t i = 0, found = 0;
    for (auto _ : state) {
        auto parsed = iwcm::wire::parse_tcp_frame(frames[i]);
        const auto& r = parsed->repr;
        iwcm::cm::Node* node =
            t.table.find({{r.ip.dst, r.tcp.dst_port}, {r.ip.src, r.tcp.src_port}, iwcm::kNoVlan});
        benchmark::DoNotOptimize(node);
        found += node != nullptr;
        if (++i == kFrames) i = 0;
    }
    if (found != static_cast<std::size_t>(state.iterations())) state.SkipWithError("key not found");
}
BENCHMARK(BM_ParseAndFind)->Arg(100'000);

}  // namespace
