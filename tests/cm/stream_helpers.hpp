// Helpers of the tests of the byte stream after a kStream hand-off (stream_test.cpp,
// stream_fold_test.cpp): the hand-off, and the stream's segments as the DUT sends them now.
#pragma once

#include <algorithm>
#include <string>

#include "cm/dut.hpp"

namespace iwcm::test {

// Connected as initiator (MPA v2, no RTR), then handed off as a stream.
inline void stream_up(Dut& d, HandoffParams params = {}) {
    connect_active(d);
    auto ctx = d.core.handoff(d.conn, params);
    ASSERT_TRUE(ctx.has_value());
    EXPECT_TRUE(ctx->pending_rx.empty());
    EXPECT_EQ(*d.core.state(d.conn), CmState::kOffloaded);
    EXPECT_TRUE(d.out().empty());
    EXPECT_TRUE(d.evs().empty());
}

// The window field of the stream's segments as they go now: its receive window (the
// buffer's free space, its right edge where it was), scaled by our shift, at most the
// field's maximum.
inline std::uint16_t stream_window(const Dut& d) {
    const auto info = d.core.stream_info(d.conn);
    EXPECT_TRUE(info.has_value());
    if (!info) return 0;
    const std::uint32_t wnd = info->rcv_wnd >> d.core.config().rcv_wscale;
    return static_cast<std::uint16_t>(std::min<std::uint32_t>(wnd, 65535));
}

// A segment of the stream as the DUT sends it now, acknowledging all the peer sent.
inline Frame stream_seg(const Dut& d, std::uint8_t flags, wire::SeqNumber seq,
                        std::span<const std::byte> payload = {}) {
    return d.sent_frame(flags, seq, d.peer_nxt, payload).with_window(stream_window(d));
}

// The stream's bare ACK at SND.NXT.
inline Frame stream_ack(const Dut& d) {
    return stream_seg(d, tf::kAck, d.dut_nxt);
}

inline std::size_t send_text(Dut& d, const std::string& s) {
    auto n = d.core.send(d.now, d.conn, bytes(s));
    EXPECT_TRUE(n.has_value());
    return n.value_or(0);
}

}  // namespace iwcm::test
