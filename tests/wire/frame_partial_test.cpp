// Checksums::kPartial: a frame whose TCP checksum the link finishes (CHECKSUM_PARTIAL, a TAP's
// VIRTIO_NET_HDR_F_NEEDS_CSUM) is the frame of Checksums::kFull but for its TCP checksum field,
// which holds the pseudo-header's folded sum; finished as the kernel finishes it (the
// complement of the sum from the TCP header to the frame's end, over that field as it is),
// it is the full frame's checksum. The same for every writer: one run, pieces, SegmentV4.
//
// Read first: src/wire/checksum.hpp (Checksums), src/wire/frame.hpp.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "wire/checksum.hpp"
#include "wire/frame.hpp"
#include "wire/wire_test_util.hpp"

namespace iwcm::wire {
namespace {

using test::Buffer;

// What the link does with a partial frame: the complement of the Internet checksum's sum
// from csum_start (the TCP header) to the end, stored in the field at csum_start + 16.
Buffer finished(Buffer frame, std::size_t csum_start) {
    const std::uint16_t sum = internet_checksum(Bytes(frame).subspan(csum_start));
    frame[csum_start + 16] = static_cast<std::byte>(sum >> 8);
    frame[csum_start + 17] = static_cast<std::byte>(sum & 0xFF);
    return frame;
}

std::uint16_t be16(const Buffer& b, std::size_t at) {
    return static_cast<std::uint16_t>((std::to_integer<unsigned>(b[at]) << 8) |
                                      std::to_integer<unsigned>(b[at + 1]));
}

TEST(FramePartial, FinishedByTheLinkItIsTheFullFrame) {
    for (const char* fixture : {"linux_ack", "linux6_syn"}) {
        const FrameRepr repr = test::data_repr_of(fixture);
        const std::size_t tcp = repr.eth.header_len() + (repr.ip.src.is_v4() ? 20 : 40);
        // An MSS, and a segment of segmentation offload (a run of 44 MSS).
        for (std::size_t n : {std::size_t{1460}, std::size_t{44 * 1460}, std::size_t{7}}) {
            const Buffer payload = test::payload_of(n);
            const std::size_t len = tcp_frame_len(repr, n);
            Buffer full(len);
            Buffer partial(len);
            ASSERT_EQ(emit_tcp_frame(repr, payload, full, Checksums::kFull), len);
            ASSERT_EQ(emit_tcp_frame(repr, payload, partial, Checksums::kPartial), len);
            // Only the TCP checksum differs: the IPv4 header's is written.
            for (std::size_t i = 0; i < len; ++i) {
                if (i == tcp + 16 || i == tcp + 17) continue;
                ASSERT_EQ(partial[i], full[i]) << fixture << " " << i;
            }
            // The field: the pseudo-header's sum, folded, not complemented.
            const std::uint32_t pseudo = pseudo_header_sum(repr.ip.src, repr.ip.dst, kIpProtoTcp,
                                                           static_cast<std::uint32_t>(len - tcp));
            EXPECT_EQ(be16(partial, tcp + 16), detail::fold16(pseudo)) << fixture << " " << n;
            EXPECT_NE(partial, full);
            EXPECT_EQ(finished(partial, tcp), full) << fixture << " " << n;
            // In pieces (emit_tcp_frame_headers, the payload read where it lies): the same
            // headers.
            const auto pieces = test::pieces_of(payload, {16, 1001});
            Buffer headers(len);
            const std::size_t at =
                emit_tcp_frame_headers(repr, pieces, headers, Checksums::kPartial);
            ASSERT_EQ(at, len - n);
            EXPECT_TRUE(std::equal(headers.begin(),
                                   headers.begin() + static_cast<std::ptrdiff_t>(at),
                                   partial.begin()));
        }
    }
}

TEST(FramePartial, SegmentV4WritesTheSameFrame) {
    const MacAddr a = *MacAddr::parse("02:00:00:00:00:01");
    const MacAddr b = *MacAddr::parse("02:00:00:00:00:02");
    SegmentV4 s;
    s.dst_mac = &a;
    s.src_mac = &b;
    s.src_ip = 0x0a630002;
    s.dst_ip = 0x0a630001;
    s.flags = tcp_flags::kAck | tcp_flags::kPsh;
    s.src_port = 40000;
    s.dst_port = 4791;
    s.seq = 123456;
    s.ack = 654321;
    s.window = 512;
    for (bool tagged : {false, true}) {
        s.tagged = tagged;
        s.vlan_tci = tagged ? 7 : 0;
        const Buffer payload = test::payload_of(3 * 1460 + 5);
        const std::size_t len = segment_v4_len(s, payload.size());
        s.checksums = Checksums::kFull;
        Buffer full(len);
        ASSERT_EQ(emit_segment_v4(s, payload, full), len);
        s.checksums = Checksums::kPartial;
        Buffer partial(len);
        ASSERT_EQ(emit_segment_v4(s, payload, partial), len);
        const std::size_t tcp = (tagged ? 18 : 14) + 20;
        EXPECT_NE(partial, full);
        EXPECT_EQ(finished(partial, tcp), full) << tagged;
        // And byte for byte what emit_tcp_frame writes for the same values.
        auto parsed = parse_tcp_frame(full);
        ASSERT_TRUE(parsed);
        Buffer via_repr(len);
        ASSERT_EQ(emit_tcp_frame(parsed->repr, payload, via_repr, Checksums::kPartial), len);
        EXPECT_EQ(via_repr, partial) << tagged;
    }
}

}  // namespace
}  // namespace iwcm::wire
