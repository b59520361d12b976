// libFuzzer target: DDP/RDMAP headers, Read Request and Terminate payloads
// (src/wire/ddp.hpp). The input is one ULPDU. Properties: a header that
// parses emits back to the same bytes but for the reserved bits and parses
// back to the same value; a Read Request or Terminate payload that parses
// emits a message that parses back to the same fields; sealing the ULPDU
// in place makes an FPDU that parse_fpdu takes with a good CRC.
#include <algorithm>

#include "fuzz/fuzz_util.hpp"
#include "wire/ddp.hpp"
#include "wire/fpdu.hpp"

using namespace iwcm;

namespace {

// Reserved bits of the DDP control byte (4) and the RDMAP control byte (2).
constexpr std::uint8_t kDdpReserved = 0x3C;
constexpr std::uint8_t kRdmapReserved = 0x30;

void check_header(const wire::DdpSegment& s) {
    std::vector<std::byte> out(s.header.header_len());
    FUZZ_CHECK(wire::emit_ddp_header(s.header, out) == s.header_bytes.size());
    out[0] |= s.header_bytes[0] & std::byte{kDdpReserved};
    out[1] |= s.header_bytes[1] & std::byte{kRdmapReserved};
    FUZZ_CHECK(std::equal(out.begin(), out.end(), s.header_bytes.begin(), s.header_bytes.end()));
    auto again = wire::parse_ddp(out);
    FUZZ_CHECK(again.has_value() && again->header == s.header && again->payload.empty());
}

void check_read_request(wire::Bytes payload) {
    auto r = wire::parse_read_request(payload);
    if (!r) return;
    std::vector<std::byte> out(wire::kReadRequestPayloadLen);
    FUZZ_CHECK(wire::emit_read_request(*r, out) == payload.size());
    FUZZ_CHECK(std::equal(out.begin(), out.end(), payload.begin(), payload.end()));
}

void check_terminate(wire::Bytes payload) {
    auto t = wire::parse_terminate_payload(payload);
    if (!t) return;
    FUZZ_CHECK(wire::describe_term(t->layer, t->etype, t->code) != nullptr);
    std::vector<std::byte> out(wire::terminate_ulpdu_len(*t));
    FUZZ_CHECK(wire::emit_terminate_ulpdu(*t, 7, out) == out.size());
    FUZZ_CHECK(out.size() <= wire::kDdpUntaggedHeaderLen + payload.size());
    auto seg = wire::parse_ddp(out);
    FUZZ_CHECK(seg.has_value() && seg->header.qn == wire::kQnTerminate && seg->header.msn == 7);
    auto back = wire::parse_terminate_payload(seg->payload);
    FUZZ_CHECK(back.has_value());
    FUZZ_CHECK(back->layer == t->layer && back->etype == t->etype && back->code == t->code);
    FUZZ_CHECK(back->ddp_segment_len == t->ddp_segment_len);
    FUZZ_CHECK(std::ranges::equal(back->ddp_header, t->ddp_header));
    FUZZ_CHECK(std::ranges::equal(back->rdmap_header, t->rdmap_header));
}

void check_seal(wire::Bytes ulpdu, bool crc) {
    const std::size_t n = std::min<std::size_t>(ulpdu.size(), 0xFFFF);
    std::vector<std::byte> out(wire::fpdu_len_for_ulpdu(n), std::byte{0xA5});
    wire::store_bytes(out, wire::kFpduLengthLen, ulpdu.first(n));
    FUZZ_CHECK(wire::seal_fpdu_in_place(n, crc, out) == out.size());
    auto f = wire::parse_fpdu(out, crc);
    FUZZ_CHECK(f.has_value() && f->crc_ok && f->total_len == out.size());
    FUZZ_CHECK(std::ranges::equal(f->ulpdu, ulpdu.first(n)));
    const std::size_t most = wire::max_ulpdu_for_fpdu(ulpdu.size());
    if (ulpdu.size() >= 8) FUZZ_CHECK(wire::fpdu_len_for_ulpdu(most) <= ulpdu.size());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    auto in = fuzz::bytes_of(data, size);
    (void)wire::parse_terminate_payload(in);
    check_seal(in, size % 2 == 1);
    auto s = wire::parse_ddp(in);
    if (!s) return 0;
    FUZZ_CHECK(s->header_bytes.size() + s->payload.size() == in.size());
    check_header(*s);
    if (!s->header.tagged && s->header.qn == wire::kQnReadRequest) check_read_request(s->payload);
    if (!s->header.tagged) check_terminate(s->payload);
    return 0;
}
