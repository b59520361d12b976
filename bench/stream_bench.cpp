// Byte-stream throughput, one thread: iwarp-cm's stream between two cores
// against Linux TCP over loopback (bench/stream_pair.hpp says what one unit
// of work is). Reported as bytes per second of wall time.
#include <benchmark/benchmark.h>

#include "stream_pair.hpp"

namespace {

void BM_StreamThroughput(benchmark::State& state) {
    iwcm::bench::StreamPair pair;
    if (!pair.ok()) state.SkipWithError("stream pair did not connect");
    std::uint64_t bytes = 0;
    for (auto _ : state) {
        auto s = pair.transfer(1u << 20, 10);
        if (s.error) state.SkipWithError("stream transfer failed");
        bytes += s.bytes;
    }
    state.SetBytesProcessed(static_cast<std::int64_t>(bytes));
}
BENCHMARK(BM_StreamThroughput)->UseRealTime();

void BM_LoopbackTcpThroughput(benchmark::State& state) {
    iwcm::bench::KernelStream kernel;
    if (!kernel.ok()) state.SkipWithError("loopback TCP did not connect");
    std::uint64_t bytes = 0;
    for (auto _ : state) {
        auto s = kernel.transfer(1u << 20, 10);
        if (s.error) state.SkipWithError("loopback transfer failed");
        bytes += s.bytes;
    }
    state.SetBytesProcessed(static_cast<std::int64_t>(bytes));
}
BENCHMARK(BM_LoopbackTcpThroughput)->UseRealTime();

}  // namespace
