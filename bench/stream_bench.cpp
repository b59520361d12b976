// Byte-stream throughput, one thread: iwarp-cm's stream between two cores
// against Linux TCP over loopback (bench/stream_pair.hpp says what one unit
// of work is). Reported as bytes per second of wall time.
#include <benchmark/benchmark.h>

#include <type_traits>

#include "stream_pair.hpp"

namespace {

// Moves 1 MiB per iteration through `Pair` (StreamPair or KernelStream).
template <class Pair>
void BM_Throughput(benchmark::State& state) {
    Pair pair;
    if (!pair.ok()) state.SkipWithError("the pair did not connect");
    std::uint64_t bytes = 0;
    for (auto _ : state) {
        auto s = pair.transfer(1u << 20, 10);
        if (s.error) state.SkipWithError("transfer failed");
        bytes += s.bytes;
    }
    state.SetBytesProcessed(static_cast<std::int64_t>(bytes));
    if constexpr (std::is_base_of_v<iwcm::bench::StreamPair, Pair>) {
        state.counters["copies_per_byte"] = pair.copies_per_byte(bytes);
    }
}
BENCHMARK(BM_Throughput<iwcm::bench::StreamPair>)->Name("BM_StreamThroughput")->UseRealTime();

// The same pair with segmentation offload (segments of 44 MSS, as loopback's GSO).
struct OffloadPair : iwcm::bench::StreamPair {
    OffloadPair() : StreamPair(256 * 1024, iwcm::bench::kPairOffload) {}
};
BENCHMARK(BM_Throughput<OffloadPair>)->Name("BM_StreamThroughputOffload")->UseRealTime();
// The same without offload, B reading from the segments (a StreamSink): no receive buffer.
struct SinkPair : iwcm::bench::StreamPair {
    SinkPair() : StreamPair(256 * 1024, 0, true) {}
};
BENCHMARK(BM_Throughput<SinkPair>)->Name("BM_StreamThroughputSink")->UseRealTime();
// Zero copies but the one into the frames: A sends by reference (Core::send_ref), B is a sink,
// segments of 44 MSS.
struct ZeroCopyPair : iwcm::bench::StreamPair {
    ZeroCopyPair() : StreamPair(256 * 1024, iwcm::bench::kPairOffload, true, true) {}
};
BENCHMARK(BM_Throughput<ZeroCopyPair>)->Name("BM_StreamThroughputZeroCopy")->UseRealTime();
BENCHMARK(BM_Throughput<iwcm::bench::KernelStream>)
    ->Name("BM_LoopbackTcpThroughput")
    ->UseRealTime();

}  // namespace

namespace {

// For callgrind (--toggle-collect='iwcm::bench::StreamPair::transfer*'): a fixed
// 32 MiB, so that the instructions collected divided by the counters below
// give the cost per data segment and per byte delivered.
void BM_StreamProfile(benchmark::State& state) {
    iwcm::bench::StreamPair pair(256 * 1024, static_cast<std::uint32_t>(state.range(0)),
                                 state.range(1) != 0, state.range(2) != 0);
    if (!pair.ok()) state.SkipWithError("the pair did not connect");
    std::uint64_t bytes = 0;
    std::uint64_t frames = 0;
    for (auto _ : state) {
        auto s = pair.transfer(1u << 20, 10);
        if (s.error) state.SkipWithError("transfer failed");
        bytes += s.bytes;
        frames += s.frames;
    }
    state.counters["bytes"] = static_cast<double>(bytes);
    state.counters["frames"] = static_cast<double>(frames);
    state.counters["copies_per_byte"] = pair.copies_per_byte(bytes);
}
BENCHMARK(BM_StreamProfile)
    ->Args({0, 0, 0})
    ->Args({iwcm::bench::kPairOffload, 0, 0})
    ->Args({0, 1, 0})
    ->Args({0, 1, 1})
    ->Args({iwcm::bench::kPairOffload, 1, 1})
    ->ArgNames({"offload", "sink", "by_ref"})
    ->Iterations(32)
    ->UseRealTime();

}  // namespace
