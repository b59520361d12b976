// RDMA Write and Send throughput, one thread, both ends: iwarp-cm's data
// path over two in-memory cores against the same engine over Linux TCP on
// loopback (bench/rdma_pair.hpp). Arguments: message size, CRC (0/1).
#include <benchmark/benchmark.h>

#include <type_traits>

#include "rdma_pair.hpp"

namespace {

using iwcm::bench::RdmaOp;

template <class Pair, RdmaOp Op>
void BM_Rdma(benchmark::State& state) {
    Pair pair(static_cast<std::size_t>(state.range(0)), state.range(1) != 0);
    if (!pair.ok()) state.SkipWithError("the pair did not connect");
    std::uint64_t bytes = 0;
    for (auto _ : state) {
        auto s = pair.run(Op, 4u << 20, 10);
        if (s.error) state.SkipWithError("transfer failed");
        bytes += s.bytes;
    }
    state.SetBytesProcessed(static_cast<std::int64_t>(bytes));
    if constexpr (std::is_same_v<Pair, iwcm::bench::RdmaCorePair>) {
        state.counters["copies_per_byte"] = pair.copies_per_byte();
        state.counters["message_copies_per_byte"] = pair.message_copies_per_byte();
        state.counters["message_copies_per_byte"] = pair.message_copies_per_byte();
    }
}

void sizes(benchmark::internal::Benchmark* b) {
    for (int crc : {0, 1})
        for (int size : {4096, 65536, 1 << 20}) b->Args({size, crc});
    b->ArgNames({"size", "crc"})->UseRealTime();
}

BENCHMARK(BM_Rdma<iwcm::bench::RdmaCorePair, RdmaOp::kWrite>)->Name("BM_RdmaWrite")->Apply(sizes);
BENCHMARK(BM_Rdma<iwcm::bench::RdmaSocketPair, RdmaOp::kWrite>)
    ->Name("BM_RdmaWriteLoopbackTcp")
    ->Apply(sizes);
BENCHMARK(BM_Rdma<iwcm::bench::RdmaCorePair, RdmaOp::kSend>)->Name("BM_RdmaSend")->Apply(sizes);
BENCHMARK(BM_Rdma<iwcm::bench::RdmaSocketPair, RdmaOp::kSend>)
    ->Name("BM_RdmaSendLoopbackTcp")
    ->Apply(sizes);

}  // namespace

namespace {

// For callgrind (--toggle-collect='iwcm::bench::run_rdma<iwcm::bench::RdmaCorePair>*'):
// RDMA Writes of 64 KiB, a fixed 32 MiB, CRC off and on; the collected instructions
// divided by the bytes counter give the cost per byte delivered.
void BM_RdmaWriteProfile(benchmark::State& state) {
    iwcm::bench::RdmaCorePair pair(65536, state.range(0) != 0,
                                   static_cast<std::uint32_t>(state.range(1)));
    if (!pair.ok()) state.SkipWithError("the pair did not connect");
    std::uint64_t bytes = 0;
    for (auto _ : state) {
        auto s = pair.run(RdmaOp::kWrite, 1u << 20, 10);
        if (s.error) state.SkipWithError("transfer failed");
        bytes += s.bytes;
    }
    state.counters["bytes"] = static_cast<double>(bytes);
    state.counters["copies_per_byte"] = pair.copies_per_byte();
}
BENCHMARK(BM_RdmaWriteProfile)
    ->ArgsProduct({{0, 1}, {0, iwcm::bench::kPairOffload}})
    ->ArgNames({"crc", "offload"})
    ->Iterations(32)
    ->UseRealTime();

}  // namespace
