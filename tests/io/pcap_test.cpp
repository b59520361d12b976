// The pcap writer: header, records, timestamps, read back by an independent reader.
//
// Read first: src/io/loop/pcap.hpp.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>

#include "io/loop/pcap.hpp"
#include "wire/bytes.hpp"

namespace iwcm::io {
namespace {

std::vector<std::uint8_t> slurp(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::uint32_t le32(const std::vector<std::uint8_t>& b, std::size_t off) {
    return std::uint32_t{b[off]} | std::uint32_t{b[off + 1]} << 8 |
           std::uint32_t{b[off + 2]} << 16 | std::uint32_t{b[off + 3]} << 24;
}

TEST(Pcap, WritesHeaderAndRecords) {
    const std::string path = testing::TempDir() + "iwcm_pcap_test.pcap";
    const auto a = wire::hex_bytes("ff ff ff ff ff ff 02 00 00 00 00 01 08 06");
    const auto b = wire::hex_bytes("02 00 00 00 00 01 02 00 00 00 00 02 08 00 45 00");
    {
        auto w = PcapWriter::open(path);
        ASSERT_TRUE(w) << w.error();
        EXPECT_TRUE((*w)->write(1'700'000'000'123'456'789, a));
        EXPECT_TRUE((*w)->write(1'700'000'001'000'000'001, b));
        EXPECT_EQ((*w)->frames(), 2u);
        // Flushed as it goes: readable before the writer closes.
        EXPECT_EQ(slurp(path).size(), 24u + 16 + a.size() + 16 + b.size());
    }
    const auto f = slurp(path);
    ASSERT_EQ(f.size(), 24u + 16 + a.size() + 16 + b.size());
    EXPECT_EQ(le32(f, 0), 0xA1B23C4Du);  // nanosecond magic (this machine is little-endian)
    EXPECT_EQ(le32(f, 4), 0x00040002u);  // version 2.4
    EXPECT_EQ(le32(f, 16), 65535u);
    EXPECT_EQ(le32(f, 20), 1u);  // LINKTYPE_ETHERNET
    EXPECT_EQ(le32(f, 24), 1'700'000'000u);
    EXPECT_EQ(le32(f, 28), 123'456'789u);
    EXPECT_EQ(le32(f, 32), a.size());
    EXPECT_EQ(le32(f, 36), a.size());
    EXPECT_EQ(f[40], 0xff);
    const std::size_t r2 = 40 + a.size();
    EXPECT_EQ(le32(f, r2), 1'700'000'001u);
    EXPECT_EQ(le32(f, r2 + 4), 1u);
    EXPECT_EQ(le32(f, r2 + 8), b.size());
    EXPECT_EQ(f[r2 + 16 + 15], 0x00);
    EXPECT_EQ(f[r2 + 16 + 14], 0x45);
}

// A frame written in two parts (a stream segment's headers and payload) is the same record,
// byte for byte, as the frame written whole.
TEST(Pcap, TwoPartsMakeTheRecordOfTheWholeFrame) {
    const auto frame = wire::hex_bytes("02 00 00 00 00 01 02 00 00 00 00 02 08 00 45 00 aa bb cc");
    const std::string one = testing::TempDir() + "iwcm_pcap_one.pcap";
    const std::string two = testing::TempDir() + "iwcm_pcap_two.pcap";
    {
        auto w = PcapWriter::open(one);
        ASSERT_TRUE(w) << w.error();
        EXPECT_TRUE((*w)->write(1'700'000'000'000'000'007, frame));
        auto v = PcapWriter::open(two);
        ASSERT_TRUE(v) << v.error();
        const std::span<const std::byte> f(frame);
        const std::span<const std::byte> rest[] = {f.subspan(14, 3), {}, f.subspan(17)};
        EXPECT_TRUE((*v)->write(1'700'000'000'000'000'007, f.first(14), rest));
    }
    const auto a = slurp(one);
    EXPECT_EQ(a.size(), 24u + 16 + frame.size());
    EXPECT_EQ(a, slurp(two));
}

TEST(Pcap, OpenFailsWithAReason) {
    auto w = PcapWriter::open("/nonexistent-dir/x.pcap");
    ASSERT_FALSE(w);
    EXPECT_NE(w.error().find("/nonexistent-dir/x.pcap"), std::string::npos);
}

}  // namespace
}  // namespace iwcm::io
