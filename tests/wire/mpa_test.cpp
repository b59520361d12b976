// MPA request/reply frames: golden bytes both ways, every refusal, reassembly length.
//
// Read first: src/wire/mpa.hpp, RFC 5044 section 7.1, RFC 6581 section 5.
#include "wire/mpa.hpp"

#include <gtest/gtest.h>

#include "wire/wire_test_util.hpp"

namespace iwcm::wire {
namespace {

using test::Buffer;

// Revision 1 request, CRC wanted, private data "hi!".
constexpr const char* kV1Request =
    "4d 50 41 20 49 44 20 52 65 71 20 46 72 61 6d 65"  // "MPA ID Req Frame"
    "40 01 00 03 68 69 21";
// Revision 2 reply, markers and CRC, IRD 5 with A and B, ORD 0x3FFF with C and D,
// then private data 0xAB.
constexpr const char* kV2Reply =
    "4d 50 41 20 49 44 20 52 65 70 20 46 72 61 6d 65"  // "MPA ID Rep Frame"
    "d0 02 00 05 c0 05 ff ff ab";

Buffer emitted(const MpaRepr& r) {
    Buffer out(r.buffer_len());
    r.emit(out);
    return out;
}

TEST(Mpa, DeconstructV1Request) {
    const auto b = hex_bytes(kV1Request);
    auto r = parse_mpa(b);
    ASSERT_TRUE(r) << r.error().to_string();
    EXPECT_EQ(r->kind, MpaKind::kRequest);
    EXPECT_FALSE(r->markers);
    EXPECT_TRUE(r->crc);
    EXPECT_FALSE(r->reject);
    EXPECT_EQ(r->revision, 1);
    EXPECT_FALSE(r->v2);
    EXPECT_EQ(to_hex(r->private_data), "686921");
    EXPECT_EQ(r->buffer_len(), b.size());
}

TEST(Mpa, ConstructV1Request) {
    MpaRepr r;
    r.kind = MpaKind::kRequest;
    r.crc = true;
    r.revision = 1;
    r.private_data = as_bytes("hi!");
    EXPECT_EQ(to_hex(emitted(r)), to_hex(hex_bytes(kV1Request)));
}

TEST(Mpa, DeconstructV2Reply) {
    const auto b = hex_bytes(kV2Reply);
    auto r = parse_mpa(b);
    ASSERT_TRUE(r) << r.error().to_string();
    EXPECT_EQ(r->kind, MpaKind::kReply);
    EXPECT_TRUE(r->markers);
    EXPECT_TRUE(r->crc);
    EXPECT_EQ(r->revision, 2);
    ASSERT_TRUE(r->v2);
    EXPECT_EQ(r->v2->ird, 5);
    EXPECT_EQ(r->v2->ord, kIrdOrdNone);
    EXPECT_TRUE(r->v2->peer_to_peer);
    EXPECT_TRUE(r->v2->rtr_send);
    EXPECT_TRUE(r->v2->rtr_write);
    EXPECT_TRUE(r->v2->rtr_read);
    EXPECT_EQ(to_hex(r->private_data), "ab");
}

TEST(Mpa, ConstructV2Reply) {
    const auto pd = hex_bytes("ab");
    MpaRepr r;
    r.kind = MpaKind::kReply;
    r.markers = true;
    r.crc = true;
    r.v2 = MpaV2Params{5, kIrdOrdNone, true, true, true, true};
    r.private_data = pd;
    EXPECT_EQ(r.buffer_len(), 25u);
    EXPECT_EQ(to_hex(emitted(r)), to_hex(hex_bytes(kV2Reply)));
}

TEST(Mpa, V2BitsAreIndependent) {
    for (int mask = 0; mask < 16; ++mask) {
        MpaRepr r;
        r.v2 = MpaV2Params{static_cast<std::uint16_t>(mask * 1000),
                           0x2AAA,
                           (mask & 1) != 0,
                           (mask & 2) != 0,
                           (mask & 4) != 0,
                           (mask & 8) != 0};
        const Buffer b = emitted(r);
        auto p = parse_mpa(b);
        ASSERT_TRUE(p) << p.error().to_string();
        EXPECT_EQ(p->v2, r.v2) << mask;
        EXPECT_TRUE(p->private_data.empty());
    }
}

// The IRD/ORD word with mixed bits, one golden per row (RFC 6581 section 5: IRD word A
// 0x8000 peer-to-peer, B 0x4000 SEND RTR; ORD word C 0x8000 WRITE RTR, D 0x4000 READ RTR),
// decoded from a whole reply frame and built again byte for byte. Goldens with every bit
// set or every bit clear cannot tell one flag from another; these do.
struct WordGolden {
    const char* word;  // the four bytes after the header, as hex
    MpaV2Params v2;
    const char* what;
};

// clang-format off
const WordGolden kWordGoldens[] = {
    {"80018001", {1, 1, true, false, true, false},
     "siw's reply to our peer-to-peer request (iwcm-client-crc.pcap): A, WRITE RTR, 1/1"},
    {"00010001", {1, 1, false, false, false, false}, "siw's request (iwcm-server-crc.pcap)"},
    {"c001c001", {1, 1, true, true, true, true}, "our request offering all three types"},
    {"40010001", {1, 1, false, true, false, false}, "B alone: SEND, no peer-to-peer"},
    {"00018000", {1, 0, false, false, true, false}, "C alone, ORD 0"},
    {"80004000", {0, 0, true, false, false, true}, "A and D: a READ RTR, IRD and ORD 0"},
    {"c0052002", {5, 0x2002, true, true, false, false}, "A and B; ORD's bit 13 is value"},
    {"3fff7fff", {kIrdOrdNone, kIrdOrdNone, false, false, false, true}, "D with no values"},
};
// clang-format on

TEST(Mpa, MixedBitWordsBothWays) {
    for (const WordGolden& g : kWordGoldens) {
        SCOPED_TRACE(g.what);
        const std::string frame =
            std::string("4d50412049442052657020467261") + "6d65" + "1002" + "0004" + g.word;
        const auto b = hex_bytes(frame.c_str());
        auto r = parse_mpa(b);
        ASSERT_TRUE(r) << r.error().to_string();
        ASSERT_TRUE(r->v2);
        EXPECT_EQ(r->v2->ird, g.v2.ird);
        EXPECT_EQ(r->v2->ord, g.v2.ord);
        EXPECT_EQ(r->v2->peer_to_peer, g.v2.peer_to_peer);
        EXPECT_EQ(r->v2->rtr_send, g.v2.rtr_send);
        EXPECT_EQ(r->v2->rtr_write, g.v2.rtr_write);
        EXPECT_EQ(r->v2->rtr_read, g.v2.rtr_read);
        MpaRepr m;
        m.kind = MpaKind::kReply;
        m.v2 = g.v2;
        EXPECT_EQ(to_hex(emitted(m)), frame);
        m.kind = MpaKind::kRequest;  // the same word in a request
        const std::string req = to_hex(emitted(m));
        EXPECT_EQ(req.substr(req.size() - 8), g.word);
    }
}

TEST(Mpa, RejectReplyRoundTrip) {
    MpaRepr r;
    r.kind = MpaKind::kReply;
    r.reject = true;
    r.revision = 1;
    r.private_data = as_bytes("go away");
    const Buffer b = emitted(r);
    EXPECT_EQ(b[16], std::byte{0x20});
    auto p = parse_mpa(b);
    ASSERT_TRUE(p);
    EXPECT_TRUE(p->reject);
    EXPECT_EQ(
        std::string(reinterpret_cast<const char*>(p->private_data.data()), p->private_data.size()),
        "go away");
}

TEST(Mpa, Truncated) {
    const auto b = hex_bytes(kV2Reply);
    for (std::size_t n = 0; n < b.size(); ++n) {
        auto r = parse_mpa(Bytes(b).first(n));
        ASSERT_FALSE(r) << n;
        EXPECT_STREQ(r.error().layer, "mpa");
        EXPECT_LE(r.error().offset, n);
    }
}

TEST(Mpa, FrameLenForReassembly) {
    const auto b = hex_bytes(kV2Reply);
    for (std::size_t n = 0; n < kMpaHeaderLen; ++n) EXPECT_FALSE(mpa_frame_len(Bytes(b).first(n)));
    for (std::size_t n = kMpaHeaderLen; n <= b.size(); ++n)
        EXPECT_EQ(mpa_frame_len(Bytes(b).first(n)), 25u);
}

TEST(Mpa, LongerBufferConsumesOnlyTheFrame) {
    auto b = hex_bytes(kV1Request);
    b.push_back(std::byte{0x00});
    b.push_back(std::byte{0x22});
    auto r = parse_mpa(b);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->buffer_len(), b.size() - 2);
    EXPECT_EQ(to_hex(r->private_data), "686921");
}

TEST(Mpa, BadKey) {
    for (std::size_t i = 0; i < kMpaKeyLen; ++i) {
        auto b = hex_bytes(kV1Request);
        b[i] ^= std::byte{0x20};  // "mPA ID ...", "MPA id ...": case matters
        auto r = parse_mpa(b);
        ASSERT_FALSE(r) << i;
        EXPECT_STREQ(r.error().reason, "bad key");
        EXPECT_EQ(r.error().offset, 0u);
    }
}

TEST(Mpa, BadRevision) {
    for (std::uint8_t rev : {0, 3, 255}) {
        auto b = hex_bytes(kV1Request);
        b[17] = static_cast<std::byte>(rev);
        auto r = parse_mpa(b);
        ASSERT_FALSE(r) << int{rev};
        EXPECT_STREQ(r.error().field, "revision");
        EXPECT_EQ(r.error().offset, 17u);
    }
}

TEST(Mpa, ImpossibleLength) {
    Buffer b = hex_bytes(kV1Request);
    b.resize(kMpaHeaderLen + 513);
    store_be16(b, 18, 513);
    auto r = parse_mpa(b);
    ASSERT_FALSE(r);
    EXPECT_STREQ(r.error().reason, "private data above 512 bytes");
    EXPECT_EQ(r.error().offset, 18u);
    store_be16(b, 18, 512);
    b.resize(kMpaHeaderLen + 512);
    r = parse_mpa(b);
    ASSERT_TRUE(r) << r.error().to_string();
    EXPECT_EQ(r->private_data.size(), 512u);
    EXPECT_EQ(mpa_frame_len(b), 532u);
}

TEST(Mpa, RejectFlagOnlyInAReply) {
    auto b = hex_bytes(kV1Request);
    b[16] = std::byte{0x20};
    auto r = parse_mpa(b);
    ASSERT_FALSE(r);
    EXPECT_STREQ(r.error().reason, "reject flag in a request");
    EXPECT_EQ(r.error().offset, 16u);
}

TEST(Mpa, EnhancedFlagNeedsRevision2AndTheWord) {
    auto b = hex_bytes(kV1Request);
    b[16] = std::byte{0x10};
    auto r = parse_mpa(b);
    ASSERT_FALSE(r);
    EXPECT_STREQ(r.error().reason, "enhanced flag needs revision 2");
    b[17] = std::byte{2};  // now revision 2, but only 3 private-data bytes
    r = parse_mpa(b);
    ASSERT_FALSE(r);
    EXPECT_STREQ(r.error().reason, "enhanced frame shorter than the IRD/ORD word");
}

TEST(Mpa, Revision2WithoutEnhancedFlagHasNoWord) {
    auto b = hex_bytes(kV1Request);
    b[17] = std::byte{2};
    auto r = parse_mpa(b);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->revision, 2);
    EXPECT_FALSE(r->v2);
    EXPECT_EQ(r->private_data.size(), 3u);
}

TEST(Mpa, ReservedFlagBitsIgnored) {
    auto b = hex_bytes(kV1Request);
    b[16] |= std::byte{0x0F};
    auto r = parse_mpa(b);
    ASSERT_TRUE(r);
    EXPECT_TRUE(r->crc);
    EXPECT_FALSE(r->markers);
}

}  // namespace
}  // namespace iwcm::wire
