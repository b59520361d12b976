// libFuzzer target: MPA request / reply / reject frames (src/wire/mpa.hpp).
// Properties: mpa_frame_len agrees with what parse_mpa accepts; what parses,
// emitted again, parses to the same frame.
#include "fuzz/fuzz_util.hpp"
#include "wire/mpa.hpp"

using namespace iwcm;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    auto in = fuzz::bytes_of(data, size);
    auto len = wire::mpa_frame_len(in);
    auto r = wire::parse_mpa(in);
    if (!r) return 0;
    FUZZ_CHECK(len.has_value() && *len <= size);
    FUZZ_CHECK(r->buffer_len() == *len);
    FUZZ_CHECK(r->private_data.size() <= wire::kMpaMaxPrivateData);
    std::vector<std::byte> out(r->buffer_len());
    r->emit(out);
    auto again = wire::parse_mpa(out);
    FUZZ_CHECK(again.has_value());
    FUZZ_CHECK(again->kind == r->kind && again->markers == r->markers && again->crc == r->crc &&
               again->reject == r->reject && again->revision == r->revision && again->v2 == r->v2);
    FUZZ_CHECK(std::equal(again->private_data.begin(), again->private_data.end(),
                          r->private_data.begin(), r->private_data.end()));
    return 0;
}
