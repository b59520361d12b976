// libFuzzer target: the Ethernet / 802.1Q parser (src/wire/ethernet.hpp).
// Property: parse never fails unsafely; what parses, emitted again, parses
// to the same header and payload.
#include "fuzz/fuzz_util.hpp"
#include "wire/ethernet.hpp"

using namespace iwcm;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    auto in = fuzz::bytes_of(data, size);
    auto r = wire::parse_ethernet(in);
    if (!r) return 0;
    FUZZ_CHECK(r->payload.size() + r->repr.header_len() == size);
    std::vector<std::byte> out(r->repr.header_len() + r->payload.size());
    r->repr.emit(out);
    std::copy(r->payload.begin(), r->payload.end(),
              out.begin() + static_cast<std::ptrdiff_t>(r->repr.header_len()));
    auto again = wire::parse_ethernet(out);
    FUZZ_CHECK(again.has_value());
    FUZZ_CHECK(again->repr == r->repr);
    FUZZ_CHECK(std::equal(again->payload.begin(), again->payload.end(), r->payload.begin(),
                          r->payload.end()));
    return 0;
}
