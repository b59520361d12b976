// libFuzzer target: the whole-frame decoder (src/wire/frame.hpp: Ethernet,
// 802.1Q, IPv4 or IPv6, TCP). Byte 0 bit 0 makes the checksums right first.
// Property: what parses, emitted again, parses to the same frame.
#include "fuzz/fuzz_util.hpp"
#include "wire/frame.hpp"

using namespace iwcm;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size < 1) return 0;
    std::vector<std::byte> frame(reinterpret_cast<const std::byte*>(data + 1),
                                 reinterpret_cast<const std::byte*>(data + size));
    if (data[0] & 1) fuzz::fix_checksums(frame);
    auto r = wire::parse_tcp_frame(frame);
    if (!r) return 0;
    std::vector<std::byte> out(wire::tcp_frame_len(r->repr, r->payload.size()));
    std::size_t n = wire::emit_tcp_frame(r->repr, r->payload, out);
    FUZZ_CHECK(n <= out.size());
    auto again = wire::parse_tcp_frame(std::span<const std::byte>(out).first(n));
    FUZZ_CHECK(again.has_value());
    FUZZ_CHECK(again->repr == r->repr);
    FUZZ_CHECK(std::equal(again->payload.begin(), again->payload.end(), r->payload.begin(),
                          r->payload.end()));
    return 0;
}
