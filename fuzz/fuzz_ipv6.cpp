// libFuzzer target: the IPv6 parser (src/wire/ipv6.hpp). Property: what
// parses, emitted again, parses to the same header and payload.
#include "fuzz/fuzz_util.hpp"
#include "wire/ipv6.hpp"

using namespace iwcm;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    auto in = fuzz::bytes_of(data, size);
    auto r = wire::parse_ipv6(in);
    if (!r) return 0;
    FUZZ_CHECK(r->payload.size() == r->repr.payload_len);
    FUZZ_CHECK(r->payload.size() + wire::Ipv6Repr::kHeaderLen <= size);
    std::vector<std::byte> out(wire::Ipv6Repr::kHeaderLen + r->payload.size());
    r->repr.emit(out);
    std::copy(r->payload.begin(), r->payload.end(), out.begin() + wire::Ipv6Repr::kHeaderLen);
    auto again = wire::parse_ipv6(out);
    FUZZ_CHECK(again.has_value());
    FUZZ_CHECK(again->repr == r->repr);
    FUZZ_CHECK(std::equal(again->payload.begin(), again->payload.end(), r->payload.begin(),
                          r->payload.end()));
    return 0;
}
