// libFuzzer target: the TCP parser with its options (src/wire/tcp.hpp).
// Byte 0: bit 0 makes the checksum right first (to reach the option parser),
// bit 1 picks the IPv6 pseudo-header. Property: what parses, emitted again,
// parses to the same header, options and payload.
#include "fuzz/fuzz_util.hpp"
#include "wire/tcp.hpp"

using namespace iwcm;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size < 1) return 0;
    static const wire::IpPseudoHeader v4{*IpAddr::parse("10.0.0.1"), *IpAddr::parse("10.0.0.2")};
    static const wire::IpPseudoHeader v6{*IpAddr::parse("fd00::1"), *IpAddr::parse("fd00::2")};
    const wire::IpPseudoHeader& ph = (data[0] & 2) ? v6 : v4;
    std::vector<std::byte> seg(reinterpret_cast<const std::byte*>(data + 1),
                               reinterpret_cast<const std::byte*>(data + size));
    if ((data[0] & 1) && seg.size() >= 20) {
        fuzz::put16(seg, 16, 0);
        wire::finish_tcp_checksum(seg, ph);
    }
    auto r = wire::parse_tcp(seg, ph);
    if (!r) return 0;
    FUZZ_CHECK(r->payload.size() <= seg.size());
    std::vector<std::byte> out(r->repr.header_len() + r->payload.size());
    std::size_t n = wire::emit_tcp(r->repr, r->payload, ph, out);
    FUZZ_CHECK(n == out.size());
    auto again = wire::parse_tcp(out, ph);
    FUZZ_CHECK(again.has_value());
    FUZZ_CHECK(again->repr == r->repr);
    FUZZ_CHECK(std::equal(again->payload.begin(), again->payload.end(), r->payload.begin(),
                          r->payload.end()));
    return 0;
}
