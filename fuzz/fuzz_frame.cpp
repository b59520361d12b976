// libFuzzer target: the whole-frame decoder (src/wire/frame.hpp: Ethernet,
// 802.1Q, IPv4 or IPv6, TCP). Byte 0 bit 0 makes the checksums right first.
// Property: what parses, emitted again, parses to the same frame; the parser that skips
// the checksums (Checksums::kOffload) takes every frame the full one takes, to the same
// fields, and takes the frame emitted with the checksums left zero, to the same fields.
#include "fuzz/fuzz_util.hpp"
#include "wire/frame.hpp"

using namespace iwcm;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size < 1) return 0;
    std::vector<std::byte> frame(reinterpret_cast<const std::byte*>(data + 1),
                                 reinterpret_cast<const std::byte*>(data + size));
    if (data[0] & 1) fuzz::fix_checksums(frame);
    auto r = wire::parse_tcp_frame(frame);
    auto trusting = wire::parse_tcp_frame(frame, wire::Checksums::kOffload);
    if (!r) {
        // Refused only for its checksums, or for what the full parser refuses too.
        FUZZ_CHECK(!trusting || r.error().kind == wire::ParseErrorKind::kBadChecksum);
        return 0;
    }
    FUZZ_CHECK(trusting.has_value() && trusting->repr == r->repr);
    std::vector<std::byte> out(wire::tcp_frame_len(r->repr, r->payload.size()));
    std::size_t n = wire::emit_tcp_frame(r->repr, r->payload, out);
    FUZZ_CHECK(n <= out.size());
    auto again = wire::parse_tcp_frame(std::span<const std::byte>(out).first(n));
    FUZZ_CHECK(again.has_value());
    FUZZ_CHECK(again->repr == r->repr);
    FUZZ_CHECK(std::equal(again->payload.begin(), again->payload.end(), r->payload.begin(),
                          r->payload.end()));
    std::vector<std::byte> zeroed(out.size());
    FUZZ_CHECK(wire::emit_tcp_frame(r->repr, r->payload, zeroed, wire::Checksums::kOffload) == n);
    auto offloaded = wire::parse_tcp_frame(std::span<const std::byte>(zeroed).first(n),
                                           wire::Checksums::kOffload);
    FUZZ_CHECK(offloaded.has_value() && offloaded->repr == r->repr);
    return 0;
}
