// DDP headers, Read Request and Terminate: bytes written by hand from the
// RFC layouts, round trips, truncation and lenient parsing.
//
// Read first: src/wire/ddp.hpp, RFC 5041 section 4, RFC 5040 sections 4.4,
// 4.8 and 7.
#include "wire/ddp.hpp"

#include <gtest/gtest.h>

#include <string>

#include "wire/crc32c.hpp"
#include "wire/wire_test_util.hpp"

namespace iwcm::wire {
namespace {

using test::Buffer;

DdpHeader tagged_header() {
    DdpHeader h;
    h.tagged = true;
    h.last = false;
    h.opcode = static_cast<std::uint8_t>(RdmapOpcode::kReadResponse);
    h.stag = 0x11223344;
    h.to = 0x0102030405060708;
    return h;
}

DdpHeader untagged_header() {
    DdpHeader h;
    h.opcode = static_cast<std::uint8_t>(RdmapOpcode::kSendSeInvalidate);
    h.inval_stag = 0xA0B0C0D0;
    h.qn = kQnSend;
    h.msn = 0x01020304;
    h.mo = 0x00001000;
    return h;
}

Buffer emit(const DdpHeader& h) {
    Buffer out(h.header_len(), std::byte{0xEE});
    EXPECT_EQ(emit_ddp_header(h, out), h.header_len());
    return out;
}

TEST(Ddp, TaggedBytes) {
    EXPECT_EQ(to_hex(emit(tagged_header())),
              "81"                  // T, not L, version 1
              "42"                  // RDMAP version 1, Read Response
              "11223344"            // STag
              "0102030405060708");  // TO
}

TEST(Ddp, UntaggedBytes) {
    EXPECT_EQ(to_hex(emit(untagged_header())),
              "41"          // L, version 1
              "46"          // RDMAP version 1, Send with SE and Invalidate
              "a0b0c0d0"    // invalidate STag
              "00000000"    // QN 0
              "01020304"    // MSN
              "00001000");  // MO
}

TEST(Ddp, RoundTrip) {
    for (const DdpHeader& h : {tagged_header(), untagged_header()}) {
        Buffer b = emit(h);
        const Buffer payload = hex_bytes("de ad be ef 01");
        b.insert(b.end(), payload.begin(), payload.end());
        auto s = parse_ddp(b);
        ASSERT_TRUE(s) << s.error().to_string();
        EXPECT_EQ(s->header, h);
        EXPECT_EQ(to_hex(s->header_bytes), to_hex(Bytes(b).first(h.header_len())));
        EXPECT_EQ(to_hex(s->payload), "deadbeef01");
        EXPECT_EQ(s->header_bytes.data(), b.data());  // views, not copies
    }
}

TEST(Ddp, EveryTooShortInputIsAnError) {
    for (const DdpHeader& h : {tagged_header(), untagged_header()}) {
        const Buffer b = emit(h);
        for (std::size_t n = 0; n < b.size(); ++n) {
            auto s = parse_ddp(Bytes(b).first(n));
            ASSERT_FALSE(s) << n;
            EXPECT_EQ(s.error().kind, ParseErrorKind::kTruncated);
        }
        EXPECT_TRUE(parse_ddp(b));
    }
}

TEST(Ddp, BadVersionsAndUnknownOpcodesParse) {
    // Version 2 DDP, version 0 RDMAP, opcode 0xC, reserved bits set: the
    // caller answers with a Terminate, so the parser does not refuse.
    const Buffer b = hex_bytes("7e 3c 00000000 00000007 00000009 00000000");
    auto s = parse_ddp(b);
    ASSERT_TRUE(s) << s.error().to_string();
    EXPECT_FALSE(s->header.tagged);
    EXPECT_TRUE(s->header.last);
    EXPECT_EQ(s->header.ddp_version, 2);
    EXPECT_EQ(s->header.rdmap_version, 0);
    EXPECT_EQ(s->header.opcode, 0xC);
    EXPECT_EQ(s->header.qn, 7u);
    EXPECT_EQ(s->header.msn, 9u);
    EXPECT_TRUE(s->payload.empty());
    // Re-emitted, only the reserved bits (0x3C of byte 0, 0x30 of byte 1) differ.
    EXPECT_EQ(to_hex(emit(s->header)),
              "420c000000000000000700000009"
              "00000000");
}

TEST(Ddp, OpcodeNames) {
    EXPECT_STREQ(to_string(RdmapOpcode::kWrite), "Write");
    EXPECT_STREQ(to_string(RdmapOpcode::kReadRequest), "Read Request");
    EXPECT_STREQ(to_string(RdmapOpcode::kReadResponse), "Read Response");
    EXPECT_STREQ(to_string(RdmapOpcode::kSend), "Send");
    EXPECT_STREQ(to_string(RdmapOpcode::kTerminate), "Terminate");
    EXPECT_STREQ(to_string(static_cast<RdmapOpcode>(0xC)), "unknown RDMAP opcode");
}

const ReadRequest kRead{0x00001234, 0x1122334455667788, 0x40, 0x6E9A9100, 0x00005568CFBCBD50};
const char* const kReadHex =
    "00001234"           // sink STag
    "1122334455667788"   // sink TO
    "00000040"           // read size
    "6e9a9100"           // source STag
    "00005568cfbcbd50";  // source TO

TEST(ReadRequestCodec, Bytes) {
    Buffer out(kReadRequestPayloadLen);
    EXPECT_EQ(emit_read_request(kRead, out), kReadRequestPayloadLen);
    EXPECT_EQ(to_hex(out), kReadHex);
    auto r = parse_read_request(out);
    ASSERT_TRUE(r) << r.error().to_string();
    EXPECT_EQ(*r, kRead);
}

TEST(ReadRequestCodec, WrongLengths) {
    const Buffer b = hex_bytes(kReadHex);
    for (std::size_t n = 0; n < b.size(); ++n) {
        auto r = parse_read_request(Bytes(b).first(n));
        ASSERT_FALSE(r);
        EXPECT_EQ(r.error().kind, ParseErrorKind::kTruncated);
    }
    Buffer longer = b;
    longer.push_back(std::byte{0});
    auto r = parse_read_request(longer);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().kind, ParseErrorKind::kBadLength);
}

Buffer emit_term(const TerminateRepr& t, std::uint32_t msn) {
    Buffer out(terminate_ulpdu_len(t), std::byte{0xEE});
    EXPECT_EQ(emit_terminate_ulpdu(t, msn, out), out.size());
    return out;
}

constexpr const char* kTermUntaggedHeader =
    "41"         // L, DDP version 1
    "47"         // RDMAP version 1, Terminate
    "00000000"   // reserved
    "00000002"   // QN 2
    "00000003"   // MSN 3
    "00000000";  // MO 0

TEST(TerminateCodec, WithoutHeaders) {
    const TerminateRepr t{TermLayer::kRdmap,
                          kRdmapEtypeLocalCatastrophic,
                          kRdmapCodeUnspecified,
                          std::nullopt,
                          {},
                          {}};
    const Buffer b = emit_term(t, 3);
    EXPECT_EQ(to_hex(b), std::string(kTermUntaggedHeader) +
                             "00"      // layer 0 (RDMAP), error type 0
                             "ff"      // code
                             "0000");  // M, D, R clear, reserved
    auto s = parse_ddp(b);
    ASSERT_TRUE(s);
    auto back = parse_terminate_payload(s->payload);
    ASSERT_TRUE(back) << back.error().to_string();
    EXPECT_EQ(back->layer, TermLayer::kRdmap);
    EXPECT_EQ(back->code, 0xFF);
    EXPECT_FALSE(back->ddp_segment_len);
    EXPECT_TRUE(back->ddp_header.empty());
    EXPECT_TRUE(back->rdmap_header.empty());
}

TEST(TerminateCodec, DdpErrorQuotesTheTaggedHeader) {
    const Buffer quoted = emit(tagged_header());
    const TerminateRepr t{TermLayer::kDdp, kDdpEtypeTagged, kDdpTaggedBaseBounds,
                          0x0400,          quoted,          {}};
    const Buffer b = emit_term(t, 3);
    EXPECT_EQ(to_hex(b), std::string(kTermUntaggedHeader) +
                             "11"    // layer 1 (DDP), error type 1 (tagged buffer)
                             "01"    // base or bounds violation
                             "c000"  // M, D
                             "0400"  // DDP segment length
                             "8142112233440102030405060708");
    auto back = parse_terminate_payload(parse_ddp(b)->payload);
    ASSERT_TRUE(back) << back.error().to_string();
    EXPECT_EQ(back->layer, TermLayer::kDdp);
    EXPECT_EQ(back->etype, kDdpEtypeTagged);
    EXPECT_EQ(back->code, kDdpTaggedBaseBounds);
    EXPECT_EQ(back->ddp_segment_len, 0x0400);
    EXPECT_EQ(to_hex(back->ddp_header), to_hex(quoted));
    EXPECT_TRUE(back->rdmap_header.empty());
    EXPECT_EQ(to_hex(emit_term(*back, 3)), to_hex(b));
}

TEST(TerminateCodec, ReadRequestErrorQuotesBothHeaders) {
    DdpHeader rr;
    rr.opcode = static_cast<std::uint8_t>(RdmapOpcode::kReadRequest);
    rr.qn = kQnReadRequest;
    rr.msn = 5;
    const Buffer ddp = emit(rr);
    const Buffer rdmap = hex_bytes(kReadHex);
    const TerminateRepr t{
        TermLayer::kRdmap, kRdmapEtypeRemoteProtection, kRdmapCodeAccessRights, 0, ddp, rdmap};
    const Buffer b = emit_term(t, 1);
    EXPECT_EQ(terminate_ulpdu_len(t), 18u + 4 + 2 + 18 + 28);
    EXPECT_EQ(to_hex(b),
              "4147000000000000000200000001"
              "00000000"  // Terminate, MSN 1
              "01"        // layer 0, error type 1
              "02"        // access rights violation
              "e000"      // M, D, R
              "0000"      // DDP segment length
              "4141000000000000000100000005"
              "00000000"  // the Read Request's DDP header
                  + std::string(kReadHex));
    auto back = parse_terminate_payload(parse_ddp(b)->payload);
    ASSERT_TRUE(back) << back.error().to_string();
    EXPECT_EQ(to_hex(back->ddp_header), to_hex(ddp));
    EXPECT_EQ(to_hex(back->rdmap_header), kReadHex);
    EXPECT_EQ(to_hex(emit_term(*back, 1)), to_hex(b));
}

// siw reports an RDMAP protection error on a Send with M, D and R set and
// only the Send's DDP header quoted (siw_send_terminate).
TEST(TerminateCodec, RWithoutAnRdmapHeaderParses) {
    const Buffer p = hex_bytes("01 00 e0 00  0010  4143 00000000 00000000 00000001 00000000");
    auto t = parse_terminate_payload(p);
    ASSERT_TRUE(t) << t.error().to_string();
    EXPECT_EQ(t->ddp_segment_len, 0x10);
    EXPECT_EQ(t->ddp_header.size(), kDdpUntaggedHeaderLen);
    EXPECT_TRUE(t->rdmap_header.empty());
}

TEST(TerminateCodec, EveryTooShortPayloadIsAnError) {
    const Buffer tagged = emit(tagged_header());
    TerminateRepr t;
    t.layer = TermLayer::kDdp;
    t.ddp_segment_len = 7;
    t.ddp_header = tagged;
    const Buffer b = emit_term(t, 1);
    const Bytes payload = Bytes(b).subspan(kDdpUntaggedHeaderLen);
    for (std::size_t n = 0; n < payload.size(); ++n) {
        auto r = parse_terminate_payload(payload.first(n));
        ASSERT_FALSE(r) << n;
        EXPECT_EQ(r.error().kind, ParseErrorKind::kTruncated);
    }
    EXPECT_TRUE(parse_terminate_payload(payload));
}

TEST(TerminateCodec, MpaLayerMatchesFpduHpp) {
    // The MPA-layer Terminate of fpdu.hpp is this codec's output sealed.
    Buffer fpdu(terminate_fpdu_len());
    emit_terminate_fpdu(TermError::kCrcError, true, fpdu);
    auto s = parse_ddp(Bytes(fpdu).subspan(2, 22));
    ASSERT_TRUE(s);
    auto t = parse_terminate_payload(s->payload);
    ASSERT_TRUE(t);
    EXPECT_EQ(t->layer, TermLayer::kLlp);
    EXPECT_EQ(t->code, 2);
    EXPECT_STREQ(describe_term(t->layer, t->etype, t->code), "MPA CRC error");
}

TEST(TerminateCodec, Descriptions) {
    EXPECT_STREQ(describe_term(TermLayer::kDdp, kDdpEtypeUntagged, kDdpUntaggedInvalidQn),
                 "DDP untagged buffer: invalid queue number");
    EXPECT_STREQ(describe_term(TermLayer::kDdp, kDdpEtypeTagged, kDdpTaggedInvalidStag),
                 "DDP tagged buffer: invalid STag");
    EXPECT_STREQ(
        describe_term(TermLayer::kRdmap, kRdmapEtypeRemoteOperation, kRdmapCodeUnexpectedOpcode),
        "RDMAP remote operation: unexpected opcode");
    EXPECT_STREQ(describe_term(TermLayer::kRdmap, kRdmapEtypeLocalCatastrophic, 0),
                 "RDMAP local catastrophic error");
    EXPECT_STREQ(describe_term(static_cast<TermLayer>(9), 0, 0), "error of an unknown layer");
}

TEST(Seal, MatchesEmitFpdu) {
    for (std::size_t n : {0u, 1u, 2u, 3u, 4u, 5u, 34u}) {
        for (bool crc : {false, true}) {
            Buffer ulpdu(n);
            for (std::size_t i = 0; i < n; ++i) ulpdu[i] = static_cast<std::byte>(i * 7 + 1);
            Buffer a(fpdu_len_for_ulpdu(n), std::byte{0x55});
            const std::size_t len_a = emit_fpdu(ulpdu, crc, a);
            Buffer b(fpdu_len_for_ulpdu(n), std::byte{0x55});
            store_bytes(b, 2, ulpdu);
            EXPECT_EQ(seal_fpdu_in_place(n, crc, b), len_a);
            EXPECT_EQ(to_hex(b), to_hex(a));
        }
    }
    // A Send of 16 bytes: length 0x22, no pad, CRC least-significant byte first.
    Buffer f = hex_bytes(
        "0000 4143 00000000 00000000 00000001 00000000"
        "00005568cfbcbd50 6e9a9100 00000040 00000000");
    EXPECT_EQ(seal_fpdu_in_place(34, true, f), 40u);
    EXPECT_EQ(to_hex(f).substr(0, 4), "0022");
    EXPECT_EQ(to_hex(f).substr(72), "87101d4b");  // siw's CRC of this FPDU
}

// An FPDU sent in pieces ends with the same pad and CRC as one sealed whole.
TEST(Seal, TrailerOfPiecesMatchesSealInPlace) {
    for (std::size_t n : {0u, 1u, 2u, 3u, 4u, 5u, 34u}) {
        for (bool crc : {false, true}) {
            Buffer whole(fpdu_len_for_ulpdu(n), std::byte{0x55});
            for (std::size_t i = 0; i < n; ++i) whole[2 + i] = static_cast<std::byte>(i * 7 + 1);
            const std::size_t len = seal_fpdu_in_place(n, crc, whole);
            std::optional<std::uint32_t> so_far;
            if (crc) so_far = crc32c(Bytes(whole).first(2 + n));
            Buffer trailer(8, std::byte{0x55});
            const std::size_t t = emit_fpdu_trailer(n, so_far, trailer);
            EXPECT_EQ(2 + n + t, len);
            EXPECT_EQ(to_hex(Bytes(trailer).first(t)), to_hex(Bytes(whole).subspan(2 + n)));
        }
    }
}

TEST(Seal, MaxUlpduForFpdu) {
    EXPECT_EQ(max_ulpdu_for_fpdu(0), 0u);
    EXPECT_EQ(max_ulpdu_for_fpdu(7), 0u);
    EXPECT_EQ(max_ulpdu_for_fpdu(8), 2u);
    EXPECT_EQ(max_ulpdu_for_fpdu(1460), 1454u);
    EXPECT_EQ(max_ulpdu_for_fpdu(1461), 1454u);
    EXPECT_EQ(max_ulpdu_for_fpdu(1000000), 65535u);
    for (std::size_t m = 8; m < 200; ++m) {
        const std::size_t u = max_ulpdu_for_fpdu(m);
        EXPECT_LE(fpdu_len_for_ulpdu(u), m) << m;
        EXPECT_GT(fpdu_len_for_ulpdu(u + 1), m) << m;
    }
}

}  // namespace
}  // namespace iwcm::wire
