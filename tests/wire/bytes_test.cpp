// Byte helpers: big-endian loads and stores, the hex reader, parse error text.
//
// Read first: src/wire/bytes.hpp.
#include "wire/bytes.hpp"

#include <gtest/gtest.h>

namespace iwcm::wire {
namespace {

TEST(Bytes, BigEndianLoadsAndStores) {
    std::vector<std::byte> b(12);
    store_be16(b, 0, 0x0102);
    store_be32(b, 2, 0x03040506);
    store_le32(b, 6, 0x0A090807);
    store_u8(b, 10, 0x0B);
    EXPECT_EQ(to_hex(b), "0102030405060708090a0b00");
    EXPECT_EQ(load_be16(b, 0), 0x0102);
    EXPECT_EQ(load_be32(b, 2), 0x03040506u);
    EXPECT_EQ(load_le32(b, 6), 0x0A090807u);
    EXPECT_EQ(load_be64(b, 2), 0x030405060708090Aull);
    EXPECT_EQ(load_u8(b, 10), 0x0B);
}

TEST(Bytes, HexReaderSkipsSpacesAndComments) {
    const auto b = hex_bytes("# a comment 12 34\n 0a:0B ff\n\tC0 # tail\n01");
    EXPECT_EQ(to_hex(b), "0a0bffc001");
    EXPECT_TRUE(hex_bytes("").empty());
}

TEST(Bytes, AsBytesHasNoTerminator) {
    const Bytes b = as_bytes("MPA");
    ASSERT_EQ(b.size(), 3u);
    EXPECT_EQ(b[0], std::byte{'M'});
}

TEST(Bytes, ParseErrorText) {
    const ParseError e{ParseErrorKind::kBadLength, "ipv4", "total_length", 2,
                       "total length beyond the buffer"};
    EXPECT_EQ(e.to_string(), "ipv4: total_length at offset 2: total length beyond the buffer");
    EXPECT_EQ(to_string(e.kind), "bad_length");
    EXPECT_EQ(to_string(ParseErrorKind::kFragment), "fragment");
}

}  // namespace
}  // namespace iwcm::wire
