// FPDU framing, RTR messages and TERMINATE: docs/design.md "MPA facts" bytes exactly, CRC byte
// order, refusals.
//
// Read first: src/wire/fpdu.hpp, docs/design.md "MPA facts".
#include "wire/fpdu.hpp"

#include <gtest/gtest.h>

#include "wire/crc32c.hpp"
#include "wire/wire_test_util.hpp"

namespace iwcm::wire {
namespace {

using test::Buffer;

Buffer rtr(RtrType type, bool crc, std::uint32_t stag = 0x1) {
    Buffer out(rtr_fpdu_len(type));
    EXPECT_EQ(emit_rtr_fpdu(RtrParams{type, stag}, crc, out), out.size());
    return out;
}

// The CRC of an FPDU as it sits on the wire: the CRC32c value, least-significant byte first.
std::string wire_crc(Bytes fpdu_without_crc) {
    Buffer c(4);
    store_le32(c, 0, crc32c(fpdu_without_crc));
    return to_hex(c);
}

TEST(Rtr, SendBytes) {
    const Buffer b = rtr(RtrType::kSend, false);
    EXPECT_EQ(to_hex(b),
              "0012"
              "4143"
              "00000000"
              "00000000"
              "00000001"
              "00000000"
              "00000000");
    EXPECT_EQ(b.size(), 24u);
}

TEST(Rtr, WriteBytes) {
    const Buffer b = rtr(RtrType::kWrite, false, 0x12345678);
    EXPECT_EQ(to_hex(b),
              "000e"
              "c140"
              "12345678"
              "0000000000000000"
              "00000000");
    EXPECT_EQ(b.size(), 20u);
}

TEST(Rtr, ReadBytes) {
    const Buffer b = rtr(RtrType::kRead, false, 0xABCD);
    EXPECT_EQ(to_hex(b),
              "002e"
              "4141"
              "00000000"
              "00000001"
              "00000001"
              "00000000"
              "0000abcd"
              "0000000000000000"
              "00000000"
              "0000abcd"
              "0000000000000000"
              "00000000");
    EXPECT_EQ(b.size(), 52u);
}

TEST(Rtr, CrcIsLeastSignificantByteFirst) {
    for (RtrType t : {RtrType::kSend, RtrType::kWrite, RtrType::kRead}) {
        const Buffer b = rtr(t, true);
        const Bytes body = Bytes(b).first(b.size() - 4);
        EXPECT_EQ(to_hex(Bytes(b).last(4)), wire_crc(body));
        EXPECT_EQ(load_le32(b, b.size() - 4), crc32c(body));
        EXPECT_EQ(to_hex(body), to_hex(Bytes(rtr(t, false)).first(b.size() - 4)));
    }
}

TEST(Rtr, RoundTrip) {
    for (RtrType t : {RtrType::kSend, RtrType::kWrite, RtrType::kRead}) {
        for (bool crc : {false, true}) {
            const Buffer b = rtr(t, crc, 0x77);
            EXPECT_EQ(fpdu_frame_len(b), b.size());
            auto f = parse_fpdu(b, crc);
            ASSERT_TRUE(f) << f.error().to_string();
            EXPECT_TRUE(f->crc_ok);
            EXPECT_EQ(f->total_len, b.size());
            auto type = parse_rtr(f->ulpdu);
            ASSERT_TRUE(type) << type.error().to_string();
            EXPECT_EQ(*type, t);
        }
    }
}

// RFC 6581 does not ask the responder to check an RTR's STag or tagged offset:
// siw sends STag 1, other peers 0; a zero-length message places nothing.
TEST(Rtr, AnyStagAndTaggedOffsetAccepted) {
    for (std::uint32_t stag : {0u, 1u, 0xFFFFFFFFu}) {
        Buffer w = rtr(RtrType::kWrite, false);
        store_be32(w, 2 + 2, stag);         // STag
        store_be32(w, 2 + 6, 0xDEADBEEF);   // tagged offset, high word
        store_be32(w, 2 + 10, 0x12345678);  // tagged offset, low word
        auto r = parse_rtr(Bytes(w).subspan(2, 14));
        ASSERT_TRUE(r) << r.error().to_string();
        EXPECT_EQ(*r, RtrType::kWrite);
        Buffer rd = rtr(RtrType::kRead, false);
        store_be32(rd, 2 + 18, stag);        // sink STag
        store_be32(rd, 2 + 22, 0xCAFEF00D);  // sink tagged offset
        store_be32(rd, 2 + 34, stag);        // source STag
        store_be32(rd, 2 + 42, 0x0BADF00D);  // source tagged offset
        r = parse_rtr(Bytes(rd).subspan(2, 46));
        ASSERT_TRUE(r) << r.error().to_string();
        EXPECT_EQ(*r, RtrType::kRead);
    }
}

TEST(Rtr, NotZeroLengthRejected) {
    Buffer s = rtr(RtrType::kSend, false);
    Buffer ulpdu(s.begin() + 2, s.begin() + 20);
    ulpdu.push_back(std::byte{1});
    auto r = parse_rtr(ulpdu);
    ASSERT_FALSE(r);
    EXPECT_STREQ(r.error().reason, "SEND RTR is not zero-length");
    Buffer rd = rtr(RtrType::kRead, false);
    store_be32(rd, 2 + 30, 64);  // a 64-byte read
    r = parse_rtr(Bytes(rd).subspan(2, 46));
    ASSERT_FALSE(r);
    EXPECT_STREQ(r.error().reason, "READ RTR is not zero-length");
}

TEST(Rtr, OtherMessagesRejected) {
    Buffer s = rtr(RtrType::kSend, false);
    Buffer ulpdu(s.begin() + 2, s.begin() + 20);
    ulpdu[1] = std::byte{0x45};  // Send with Solicited Event
    EXPECT_FALSE(parse_rtr(ulpdu));
    ulpdu[1] = std::byte{0x43};
    store_be32(ulpdu, 10, 2);  // MSN 2: not the first message
    auto r = parse_rtr(ulpdu);
    ASSERT_FALSE(r);
    EXPECT_STREQ(r.error().field, "msn");
    EXPECT_FALSE(parse_rtr(Bytes(ulpdu).first(5)));
}

TEST(Fpdu, PadToFourBytes) {
    for (std::size_t n = 0; n < 9; ++n) {
        Buffer ulpdu(n, std::byte{0xEE});
        Buffer out(fpdu_len_for_ulpdu(n), std::byte{0x55});
        ASSERT_EQ(emit_fpdu(ulpdu, true, out), out.size());
        EXPECT_EQ(out.size() % 4, 0u) << n;
        EXPECT_EQ(out.size(), 2 + n + (4 - (2 + n) % 4) % 4 + 4) << n;
        for (std::size_t i = 2 + n; i < out.size() - 4; ++i) EXPECT_EQ(out[i], std::byte{0}) << n;
        auto f = parse_fpdu(out, true);
        ASSERT_TRUE(f);
        EXPECT_TRUE(f->crc_ok);
        EXPECT_EQ(f->ulpdu.size(), n);
    }
}

TEST(Fpdu, Truncated) {
    const Buffer b = rtr(RtrType::kRead, true);
    for (std::size_t n = 0; n < b.size(); ++n) {
        auto f = parse_fpdu(Bytes(b).first(n), true);
        ASSERT_FALSE(f) << n;
        EXPECT_STREQ(f.error().layer, "fpdu");
        EXPECT_LE(f.error().offset, n);
        EXPECT_EQ(fpdu_frame_len(Bytes(b).first(n)).has_value(), n >= 2);
    }
}

TEST(Fpdu, BadCrcReported) {
    Buffer b = rtr(RtrType::kSend, true);
    b[8] ^= std::byte{0x04};
    auto f = parse_fpdu(b, true);
    ASSERT_TRUE(f);
    EXPECT_FALSE(f->crc_ok);
    // The CRC value stored most-significant byte first is not accepted either.
    b = rtr(RtrType::kSend, true);
    store_be32(b, b.size() - 4, crc32c(Bytes(b).first(b.size() - 4)));
    EXPECT_FALSE(parse_fpdu(b, true)->crc_ok);
}

TEST(Fpdu, CrcIgnoredWhenNotNegotiated) {
    Buffer b = rtr(RtrType::kSend, false);
    EXPECT_EQ(to_hex(Bytes(b).last(4)), "00000000");
    EXPECT_TRUE(parse_fpdu(b, false)->crc_ok);
    EXPECT_FALSE(parse_fpdu(b, true)->crc_ok);
}

TEST(Terminate, Bytes) {
    Buffer b(terminate_fpdu_len());
    ASSERT_EQ(emit_terminate_fpdu(TermError::kInsufficientIrd, false, b), 28u);
    EXPECT_EQ(to_hex(b),
              "0016"
              "4147"
              "00000000"
              "00000002"
              "00000001"
              "00000000"
              "20060000"
              "00000000");
    ASSERT_EQ(emit_terminate_fpdu(TermError::kNoMatchingRtr, true, b), 28u);
    EXPECT_EQ(to_hex(Bytes(b).subspan(20, 4)), "20070000");
    EXPECT_EQ(to_hex(Bytes(b).last(4)), wire_crc(Bytes(b).first(24)));
}

TEST(Terminate, RoundTripEveryCode) {
    for (std::uint8_t code = 1; code <= 7; ++code) {
        const auto e = static_cast<TermError>(code);
        Buffer b(terminate_fpdu_len());
        emit_terminate_fpdu(e, true, b);
        auto f = parse_fpdu(b, true);
        ASSERT_TRUE(f && f->crc_ok);
        auto t = parse_terminate(f->ulpdu);
        ASSERT_TRUE(t) << t.error().to_string();
        EXPECT_EQ(*t, e);
        EXPECT_STRNE(to_string(e), "unknown TERMINATE error");
        EXPECT_FALSE(parse_rtr(f->ulpdu));
    }
}

TEST(Terminate, OtherLayersAndCodesRejected) {
    Buffer b(terminate_fpdu_len());
    emit_terminate_fpdu(TermError::kCrcError, false, b);
    Buffer u(b.begin() + 2, b.begin() + 24);
    store_be32(u, 18, 0x00FF0000);  // RDMAP layer, catastrophic
    auto h = parse_terminate_header(u);
    ASSERT_TRUE(h);
    EXPECT_EQ(h->layer, kTermLayerRdmap);
    EXPECT_EQ(h->code, 0xFF);
    auto t = parse_terminate(u);
    ASSERT_FALSE(t);
    EXPECT_STREQ(t.error().reason, "not an MPA-layer error");
    store_be32(u, 18, 0x20080000);  // MPA layer, code 8: not defined
    t = parse_terminate(u);
    ASSERT_FALSE(t);
    EXPECT_STREQ(t.error().reason, "unknown MPA error code");
    EXPECT_FALSE(parse_terminate(Bytes(u).first(21)));
    u[1] = std::byte{0x43};  // a Send, not a Terminate
    EXPECT_FALSE(parse_terminate_header(u));
}

// The CRC check of an FPDU read where it lies: whatever two or three pieces it is cut into,
// the sealed FPDU passes and one with any bit past its length field flipped (the CRC
// field's included) fails, as parse_fpdu's check of the joined bytes says.
TEST(Fpdu, CrcOverPiecesIsParseFpdusCheck) {
    Buffer ulpdu(37);
    for (std::size_t i = 0; i < ulpdu.size(); ++i) ulpdu[i] = static_cast<std::byte>(i * 7 + 1);
    Buffer fpdu(fpdu_len_for_ulpdu(ulpdu.size()) + 5);  // and bytes of the next FPDU
    const std::size_t total = emit_fpdu(ulpdu, true, fpdu);
    ASSERT_EQ(total, fpdu.size() - 5);
    for (std::size_t flip = kFpduLengthLen * 8; flip <= total * 8; ++flip) {
        Buffer b = fpdu;
        if (flip < total * 8) b[flip / 8] ^= static_cast<std::byte>(1u << (flip % 8));
        const bool want = flip == total * 8;
        auto parsed = parse_fpdu(b, true);
        ASSERT_TRUE(parsed.has_value());
        ASSERT_EQ(parsed->crc_ok, want) << "bit " << flip;
        for (std::size_t a = 0; a <= b.size(); a += 3) {
            for (std::size_t c = a; c <= b.size(); c += 11) {
                const auto pieces = test::pieces_of(b, {a, c});
                ASSERT_EQ(fpdu_crc_ok(Pieces(pieces), total), want)
                    << "bit " << flip << " cut at " << a << " and " << c;
            }
        }
    }
}

}  // namespace
}  // namespace iwcm::wire
