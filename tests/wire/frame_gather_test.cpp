// wire::emit_tcp_frame_gather: a frame whose payload comes in pieces (a
// stream segment holding registered memory by reference) is byte for byte
// the frame emit_tcp_frame() writes for the joined payload, whatever the
// pieces' lengths (odd ones shift the next piece's bytes in the checksum).
//
// Read first: src/wire/frame.hpp, docs/perf.md "Copies".
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "wire/frame.hpp"
#include "wire/wire_test_util.hpp"

namespace iwcm::wire {
namespace {

using test::Buffer;

TEST(FrameGather, SameBytesAsOneRun) {
    const std::vector<std::vector<std::size_t>> cuttings = {
        {},            // one piece
        {16},          // an FPDU header, the rest
        {16, 1001},    // header, odd-length payload, trailer
        {1, 2, 3},     // odd pieces in a row
        {16, 16, 17},  // an empty piece, then a one-byte one
        {18, 1395},    // a tagged header, payload, pad and CRC
    };
    for (const char* fixture : {"linux_ack", "linux6_syn"}) {
        const FrameRepr repr = test::data_repr_of(fixture);
        for (const auto& cuts : cuttings) {
            const Buffer payload = test::payload_of(1400);
            const std::size_t len = tcp_frame_len(repr, payload.size());
            Buffer want(len);
            ASSERT_EQ(emit_tcp_frame(repr, payload, want), len);
            Buffer got(len, std::byte{0xEE});
            const auto pieces = test::pieces_of(payload, cuts);
            ASSERT_EQ(emit_tcp_frame_gather(repr, pieces, got), len);
            EXPECT_EQ(got, want) << fixture << ", " << pieces.size() << " pieces";
            // And it parses back with a good checksum and the payload.
            auto parsed = parse_tcp_frame(got);
            ASSERT_TRUE(parsed) << fixture;
            EXPECT_TRUE(std::equal(parsed->payload.begin(), parsed->payload.end(), payload.begin(),
                                   payload.end()));
        }
    }
}

TEST(FrameGather, OddPiecesStillChecksumRight) {
    // Every cut point of a short payload: any checksum slip shows as a parse refusal.
    const FrameRepr repr = test::data_repr_of("linux_ack");
    const Buffer payload = test::payload_of(37);
    for (std::size_t a = 0; a <= payload.size(); ++a) {
        for (std::size_t b = a; b <= payload.size(); b += 5) {
            Buffer want(tcp_frame_len(repr, payload.size()));
            emit_tcp_frame(repr, payload, want);
            Buffer got(want.size());
            emit_tcp_frame_gather(repr, test::pieces_of(payload, {a, b}), got);
            ASSERT_EQ(got, want) << "cuts at " << a << " and " << b;
        }
    }
}

// With the checksum offload (a link in memory) the gathered frame is the offloaded one-run
// frame: both checksum fields zero, every other byte the same.
TEST(FrameGather, ChecksumOffloadAsOneRun) {
    for (const char* fixture : {"linux_ack", "linux6_syn"}) {
        const FrameRepr repr = test::data_repr_of(fixture);
        const Buffer payload = test::payload_of(1001);
        Buffer want(tcp_frame_len(repr, payload.size()));
        emit_tcp_frame(repr, payload, want, Checksums::kOffload);
        Buffer got(want.size(), std::byte{0xEE});
        emit_tcp_frame_gather(repr, test::pieces_of(payload, {16, 517}), got, Checksums::kOffload);
        EXPECT_EQ(got, want) << fixture;
        Buffer full(want.size());
        emit_tcp_frame(repr, payload, full);
        EXPECT_NE(got, full) << fixture;
        EXPECT_TRUE(parse_tcp_frame(got, Checksums::kOffload)) << fixture;
    }
}

TEST(FrameGather, NoPiecesIsAnEmptySegment) {
    const FrameRepr repr = test::data_repr_of("linux_ack");
    Buffer want(tcp_frame_len(repr, 0));
    emit_tcp_frame(repr, {}, want);
    Buffer got(want.size());
    EXPECT_EQ(emit_tcp_frame_gather(repr, {}, got), want.size());
    EXPECT_EQ(got, want);
}

// emit_tcp_frame_headers: the headers, their checksum summed over the pieces where they
// lie (odd lengths too), followed by the pieces, are the one-run frame; the payload's room
// is not written.
TEST(FrameParts, HeadersThenPiecesAreTheOneRunFrame) {
    const FrameRepr repr = test::data_repr_of("linux_ack");
    const Buffer payload = test::payload_of(37);
    for (Checksums c : {Checksums::kFull, Checksums::kOffload}) {
        for (std::size_t a = 0; a <= payload.size(); ++a) {
            for (std::size_t b = a; b <= payload.size(); b += 3) {
                Buffer want(tcp_frame_len(repr, payload.size()));
                emit_tcp_frame(repr, payload, want, c);
                Buffer got(want.size(), std::byte{0xEE});
                const auto pieces = test::pieces_of(payload, {a, b});
                const std::size_t at = emit_tcp_frame_headers(repr, pieces, got, c);
                ASSERT_EQ(at, want.size() - payload.size());
                EXPECT_TRUE(std::all_of(got.begin() + static_cast<std::ptrdiff_t>(at), got.end(),
                                        [](std::byte x) { return x == std::byte{0xEE}; }));
                std::copy(payload.begin(), payload.end(),
                          got.begin() + static_cast<std::ptrdiff_t>(at));
                ASSERT_EQ(got, want) << "cuts at " << a << " and " << b;
            }
        }
    }
}

// parse_tcp_frame_parts: headers and pieces (cut anywhere, odd lengths too) parse as the
// joined frame does, the payload read in place; a flipped bit in any piece fails the
// checksum; a cut that is not at the end of the headers, or a payload whose length is not
// the IP header's, is refused (the caller joins and parses whole).
TEST(FrameParts, PiecesParseAsTheJoinedFrame) {
    const FrameRepr repr = test::data_repr_of("linux_ack");
    const Buffer payload = test::payload_of(301);
    Buffer frame(tcp_frame_len(repr, payload.size()));
    emit_tcp_frame(repr, payload, frame);
    const Bytes f(frame);
    const std::size_t at = frame.size() - payload.size();
    const auto whole = parse_tcp_frame(frame);
    ASSERT_TRUE(whole);
    for (const std::vector<std::size_t>& cuts :
         std::vector<std::vector<std::size_t>>{{}, {1}, {16, 17}, {3, 150, 299}, {300}}) {
        const auto pieces = test::pieces_of(payload, cuts);
        TcpFrame out;
        ASSERT_TRUE(parse_tcp_frame_parts(f.first(at), pieces, out)) << cuts.size();
        EXPECT_EQ(out.repr, whole->repr);
        if (pieces.size() == 1) {
            EXPECT_EQ(out.payload.data(), pieces[0].data());
        } else {
            EXPECT_TRUE(out.payload.empty());
        }
        for (std::size_t i = 0; i < pieces.size(); ++i) {
            if (pieces[i].empty()) continue;
            Buffer bad(pieces[i].begin(), pieces[i].end());
            bad[bad.size() / 2] ^= std::byte{0x04};
            auto tampered = pieces;
            tampered[i] = bad;
            EXPECT_FALSE(parse_tcp_frame_parts(f.first(at), tampered, out)) << i;
            EXPECT_TRUE(parse_tcp_frame_parts(f.first(at), tampered, out, Checksums::kOffload));
        }
    }
    const Buffer rest(frame.begin() + static_cast<std::ptrdiff_t>(at - 4), frame.end());
    TcpFrame out;
    const Bytes early[] = {rest};
    EXPECT_FALSE(parse_tcp_frame_parts(f.first(at - 4), early, out));
    const Bytes shorter[] = {Bytes(payload).first(300)};
    EXPECT_FALSE(parse_tcp_frame_parts(f.first(at), shorter, out));
    const Bytes runt[] = {Bytes(payload)};
    EXPECT_FALSE(parse_tcp_frame_parts(f.first(20), runt, out));
}

// With `payload_sum` the TCP checksum is left to the caller: the sum handed back, with the
// payload's added, folds to 0xFFFF for the good frame and not when a bit of the payload or
// the TCP header flipped (both are the caller's to find now); the IPv4 header's checksum is
// still checked here.
TEST(FrameParts, PayloadSumIsLeftToTheCaller) {
    const FrameRepr repr = test::data_repr_of("linux_ack");
    const Buffer payload = test::payload_of(301);
    Buffer frame(tcp_frame_len(repr, payload.size()));
    emit_tcp_frame(repr, payload, frame);
    const std::size_t at = frame.size() - payload.size();
    const auto pieces = test::pieces_of(payload, {3, 150});
    const auto finished = [&](const Buffer& headers, const std::vector<Bytes>& text) {
        TcpFrame out;
        std::uint64_t sum = 0;
        if (!parse_tcp_frame_parts(Bytes(headers).first(at), text, out, Checksums::kFull, &sum))
            return std::optional<bool>{};
        return std::optional<bool>{detail::fold16(detail::sum_native_pieces(text, sum)) == 0xFFFFu};
    };
    EXPECT_EQ(finished(frame, pieces), std::optional<bool>{true});
    Buffer bad_payload = payload;
    bad_payload[200] ^= std::byte{0x10};
    EXPECT_EQ(finished(frame, test::pieces_of(bad_payload, {3, 150})), std::optional<bool>{false});
    Buffer bad_tcp = frame;
    bad_tcp[kEthernetHeaderLen + 20 + 19] ^= std::byte{0x01};  // the TCP urgent pointer
    EXPECT_EQ(finished(bad_tcp, pieces), std::optional<bool>{false});
    Buffer bad_ip = frame;
    bad_ip[kEthernetHeaderLen + 8] ^= std::byte{0x01};  // the TTL
    EXPECT_EQ(finished(bad_ip, pieces), std::nullopt);
}

}  // namespace
}  // namespace iwcm::wire
