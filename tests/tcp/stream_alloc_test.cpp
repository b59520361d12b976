// What a tcp::Stream allocates for a few frames sent by reference: the reference queue's
// one block, nothing per frame or per segment (src/tcp/small_vec.hpp). counting_new.hpp
// counts every allocation this test binary makes.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "counting_new.hpp"
#include "tcp/stream.hpp"

namespace iwcm::tcp {
namespace {

using wire::SeqNumber;
namespace f = wire::tcp_flags;

constexpr std::uint32_t kIss = 7000;
constexpr std::uint32_t kIrs = 90000;

// Sends `sizes` by reference, each acknowledged before the next (a request and its
// answers), then `sizes` again all at once; returns the allocations counted after the
// stream was made, and checks every segment's bytes.
std::size_t allocations_for(std::span<const std::size_t> sizes) {
    StreamConfig config;
    StreamInit init;
    init.tcb.snd_una = init.tcb.snd_max = SeqNumber(kIss);
    init.tcb.rcv_nxt = SeqNumber(kIrs);
    init.tcb.snd_wnd = 60000;
    init.tcb.mss = 1460;
    Stream s(config, init, Instant{});
    std::array<std::byte, 64> frame{};
    for (std::size_t i = 0; i < frame.size(); ++i) frame[i] = static_cast<std::byte>(i * 5 + 1);
    // The bytes written, in stream order from kIss (no allocation while counting).
    std::array<std::byte, 2048> written{};
    std::size_t written_len = 0;
    std::size_t sent = 0;
    const auto write = [&](std::size_t n) {
        EXPECT_EQ(s.write_ref(std::span<const std::byte>(frame).first(n)), n);
        ASSERT_LE(written_len + n, written.size());
        std::copy_n(frame.begin(), n, written.begin() + static_cast<std::ptrdiff_t>(written_len));
        written_len += n;
    };
    SeqNumber next(kIss);
    const auto ack_all = [&] {
        const SegmentIn ack{SeqNumber(kIrs), next, f::kAck, 60000, {}, {}};
        const Arrival a = s.on_segment(Instant{}, ack, {});
        EXPECT_TRUE(a.acked);
    };
    // Every segment until none is left: its bytes are the frames', in order.
    const auto send_all = [&](std::size_t bytes) {
        const std::size_t from = sent;
        while (const std::optional<SegmentOut> out = s.poll_segment(Instant{})) {
            std::size_t at = 0;
            const auto check = [&](std::span<const std::byte> piece) {
                for (std::byte b : piece) {
                    ASSERT_LT(sent + at, written_len);
                    EXPECT_EQ(b, written[sent + at]) << "byte " << sent + at;
                    ++at;
                }
            };
            check(out->payload);
            for (std::span<const std::byte> piece : out->pieces) check(piece);
            EXPECT_EQ(at, out->len);
            sent += out->len;
        }
        EXPECT_EQ(sent - from, bytes);
        next = next + static_cast<std::uint32_t>(sent - from);
    };
    const std::size_t before = iwcm::test::allocations();
    std::size_t total = 0;
    for (std::size_t n : sizes) {
        write(n);
        send_all(n);
        ack_all();
    }
    for (std::size_t n : sizes) {
        write(n);
        total += n;
    }
    send_all(total);
    ack_all();
    EXPECT_EQ(s.ref_bytes(), 0U);
    return iwcm::test::allocations() - before;
}

TEST(StreamAllocations, AFewFramesByReferenceTakeOneBlock) {
    // An MPA request, an RTR and a last message; three frames in one segment at the end.
    const std::size_t sizes[] = {56, 24, 64};
    EXPECT_EQ(allocations_for(sizes), 1U);
}

TEST(StreamAllocations, ManyFramesInOneSegmentMoveTheListsToTheHeap) {
    // Twelve frames in one segment: the references and pieces outgrow the block's four
    // each and move to the heap, doubling twice (4 -> 8 -> 16) each.
    const std::size_t sizes[] = {8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8};
    EXPECT_EQ(allocations_for(sizes), 1U + 2 + 2);
}

}  // namespace
}  // namespace iwcm::tcp
