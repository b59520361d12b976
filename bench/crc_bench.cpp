// CRC32c cost per byte: the price of MPA's CRC (RFC 5044 section 4.4) on
// every FPDU the data path sends and receives, with the SSE 4.2 instruction
// (what wire::crc32c uses when the CPU has it) and the portable slice-by-8.
// Sizes: a small FPDU, a full 1460-byte segment, a page, a 64 KiB message.
#include <benchmark/benchmark.h>

#include <cstddef>
#include <vector>

#include "wire/crc32c.hpp"

namespace {

template <std::uint32_t (*Crc)(iwcm::wire::Bytes, std::uint32_t)>
void BM_Crc(benchmark::State& state) {
    std::vector<std::byte> data(static_cast<std::size_t>(state.range(0)));
    for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<std::byte>(i * 31 + 7);
    std::uint32_t crc = 0;
    for (auto _ : state) {
        crc = Crc(data, crc);
        benchmark::DoNotOptimize(crc);
    }
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * state.range(0));
}
BENCHMARK(BM_Crc<iwcm::wire::crc32c>)->Name("BM_Crc32c")->Arg(64)->Arg(1460)->Arg(4096)->Arg(65536);
BENCHMARK(BM_Crc<iwcm::wire::detail::crc32c_portable>)
    ->Name("BM_Crc32cPortable")
    ->Arg(64)
    ->Arg(1460)
    ->Arg(4096)
    ->Arg(65536);

}  // namespace
