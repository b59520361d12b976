// libFuzzer target: the IPv4 parser (src/wire/ipv4.hpp). The first byte
// chooses whether the header checksum is made right first (so the fuzzer
// reaches the checks behind it). Property: what parses, emitted again,
// parses to the same header and payload.
#include "fuzz/fuzz_util.hpp"
#include "wire/ipv4.hpp"

using namespace iwcm;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size < 1) return 0;
    std::vector<std::byte> pkt(reinterpret_cast<const std::byte*>(data + 1),
                               reinterpret_cast<const std::byte*>(data + size));
    if ((data[0] & 1) && pkt.size() >= 20) {
        std::size_t ihl = (std::to_integer<unsigned>(pkt[0]) & 0x0F) * 4u;
        if (ihl >= 20 && ihl <= pkt.size()) {
            fuzz::put16(pkt, 10, 0);
            fuzz::put16(pkt, 10,
                        wire::internet_checksum(std::span<const std::byte>(pkt).first(ihl)));
        }
    }
    auto r = wire::parse_ipv4(pkt);
    if (!r) return 0;
    FUZZ_CHECK(r->payload.size() == r->repr.payload_len);
    FUZZ_CHECK(r->payload.size() + wire::Ipv4Repr::kHeaderLen <= pkt.size());
    std::vector<std::byte> out(wire::Ipv4Repr::kHeaderLen + r->payload.size());
    r->repr.emit(out);
    std::copy(r->payload.begin(), r->payload.end(), out.begin() + wire::Ipv4Repr::kHeaderLen);
    auto again = wire::parse_ipv4(out);
    FUZZ_CHECK(again.has_value());
    FUZZ_CHECK(again->repr == r->repr);
    FUZZ_CHECK(std::equal(again->payload.begin(), again->payload.end(), r->payload.begin(),
                          r->payload.end()));
    return 0;
}
