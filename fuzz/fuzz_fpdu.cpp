// libFuzzer target: FPDU framing, RTR and TERMINATE (src/wire/fpdu.hpp).
// Byte 0 bit 0: CRC expected. Properties: fpdu_frame_len agrees with
// parse_fpdu; an FPDU built around the parsed ULPDU parses back to it with a
// good CRC; the RTR and TERMINATE parsers take any ULPDU safely.
#include "fuzz/fuzz_util.hpp"
#include "wire/fpdu.hpp"

using namespace iwcm;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size < 1) return 0;
    bool crc = data[0] & 1;
    auto in = fuzz::bytes_of(data + 1, size - 1);
    (void)wire::parse_rtr(in);
    (void)wire::parse_terminate_header(in);
    (void)wire::parse_terminate(in);
    auto len = wire::fpdu_frame_len(in);
    auto r = wire::parse_fpdu(in, crc);
    if (!r) return 0;
    FUZZ_CHECK(len.has_value() && *len == r->total_len && r->total_len <= in.size());
    if (!crc) FUZZ_CHECK(r->crc_ok);
    (void)wire::parse_rtr(r->ulpdu);
    (void)wire::parse_terminate(r->ulpdu);
    std::vector<std::byte> out(wire::fpdu_len_for_ulpdu(r->ulpdu.size()));
    std::size_t n = wire::emit_fpdu(r->ulpdu, crc, out);
    FUZZ_CHECK(n == out.size() && n == r->total_len);
    auto again = wire::parse_fpdu(out, crc);
    FUZZ_CHECK(again.has_value() && again->crc_ok && again->total_len == n);
    FUZZ_CHECK(
        std::equal(again->ulpdu.begin(), again->ulpdu.end(), r->ulpdu.begin(), r->ulpdu.end()));
    return 0;
}
