// The receive context of one frame on its own (src/cm/rx_context.hpp): each of its scopes sets
// what it covers and leaves nothing of it behind; pieces join in order and are forgotten once
// joined; a deferred checksum is taken once; text read in place is consumed from the front;
// and a frame in parts whose checksum was left pending stops the core.
#include "cm/rx_context.hpp"

#include <gtest/gtest.h>

#include <array>
#include <string>

#include "cm/node.hpp"
#include "cm/text_bytes.hpp"

namespace iwcm::cm {
namespace {

void ignore_destroyed(void*, Node&) {}

TEST(RxContext, AFrameScopeMarksTheFrameInHandOnlyWhileItLasts) {
    RxContext rx;
    EXPECT_FALSE(rx.in_frame());
    {
        const RxContext::FrameScope scope(rx);
        EXPECT_TRUE(rx.in_frame());
    }
    EXPECT_FALSE(rx.in_frame());
    rx.check_between_frames();
}

TEST(RxContext, PiecesJoinInOrderAndAreForgottenOnceJoined) {
    RxContext rx;
    const std::string a = "mpa ", b = "request";
    const std::array<wire::Bytes, 2> pieces{bytes_of(a), bytes_of(b)};
    {
        const RxContext::PartsScope parts(rx);
        rx.set_pieces(pieces);
        EXPECT_EQ(rx.pieces().size(), 2u);
        EXPECT_EQ(text_of(rx.join_pieces()), "mpa request");
        EXPECT_TRUE(rx.pieces().empty());
    }
    rx.check_between_frames();
}

TEST(RxContext, APartsScopeForgetsThePiecesOnItsWayOut) {
    RxContext rx;
    const std::string a = "x", b = "y";
    const std::array<wire::Bytes, 2> pieces{bytes_of(a), bytes_of(b)};
    {
        const RxContext::PartsScope parts(rx);
        rx.set_pieces(pieces);
    }
    EXPECT_TRUE(rx.pieces().empty());
}

TEST(RxContext, AFrameIsJoinedWholeForAParseOrApartForTheTrace) {
    RxContext rx;
    const std::string headers = "hdr|", p1 = "one", p2 = "two";
    const std::array<wire::Bytes, 2> pieces{bytes_of(p1), bytes_of(p2)};
    const wire::Bytes whole = rx.join_frame(bytes_of(headers), pieces, false);
    const wire::Bytes traced = rx.join_frame(bytes_of(headers), pieces, true);
    EXPECT_EQ(text_of(whole), "hdr|onetwo");
    EXPECT_EQ(text_of(traced), "hdr|onetwo");
    EXPECT_NE(whole.data(), traced.data());  // the trace's copy leaves the parse's alone
}

TEST(RxContext, ADeferredChecksumIsTakenOnce) {
    RxContext rx;
    EXPECT_FALSE(rx.sum_pending());
    *rx.sum_slot() = 0x1234;
    rx.defer_sum();
    EXPECT_TRUE(rx.sum_pending());
    EXPECT_EQ(rx.take_sum(), 0x1234u);
    EXPECT_FALSE(rx.sum_pending());
}

TEST(RxContext, VouchedChecksumsLastAsLongAsTheirScope) {
    RxContext rx;
    {
        const RxContext::VouchedScope vouched(rx, true);
        EXPECT_TRUE(rx.vouched());
    }
    EXPECT_FALSE(rx.vouched());
    {
        // Loopback with checksums computed: nothing vouched.
        const RxContext::VouchedScope vouched(rx, false);
        EXPECT_FALSE(rx.vouched());
    }
}

TEST(RxContext, TextReadInPlaceIsConsumedFromTheFrontForItsNodeOnly) {
    RxContext rx;
    NodePool pool(&ignore_destroyed, nullptr);
    const NodeRef mine = pool.create();
    const NodeRef other = pool.create();
    const std::string text = "request and more";
    {
        RxContext::InPlaceScope in_place(rx, *mine, bytes_of(text));
        EXPECT_TRUE(rx.reads_in_place(*mine));
        EXPECT_FALSE(rx.reads_in_place(*other));
        EXPECT_TRUE(rx.any_in_place());
        rx.consume_in_place(8);
        EXPECT_EQ(text_of(rx.in_place()), "and more");
        EXPECT_EQ(text_of(in_place.left()), "and more");
    }
    EXPECT_FALSE(rx.reads_in_place(*mine));
    EXPECT_TRUE(rx.in_place().empty());
    rx.check_between_frames();
}

TEST(RxContext, KeptPrivateDataOutlivesTheBytesItCameFrom) {
    RxContext rx;
    std::string from = "private";
    const std::span<const std::byte> kept = rx.keep_pdata(bytes_of(from));
    from = "changed";
    EXPECT_EQ(text_of(kept), "private");
}

TEST(RxContextDeathTest, AFrameInPartsLeftWithItsChecksumPendingStopsTheCore) {
    RxContext rx;
    EXPECT_DEATH(
        {
            const RxContext::PartsScope parts(rx);
            rx.defer_sum();
        },
        "sum_pending");
}

}  // namespace
}  // namespace iwcm::cm
