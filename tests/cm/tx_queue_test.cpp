// The core's transmit queue on its own (src/cm/tx_queue.hpp): frames come out in the order
// queued with their bytes and flow hashes; the arena starts over once all are taken; a
// payload left out is copied in when its frame is taken whole, read where it lies when it
// is handed over, and filled by a settle before its lender's memory may change, only below
// a sequence number when one is given; a stream that goes settles its loans; a queue that
// ends forgets them.
#include "cm/tx_queue.hpp"

#include <gtest/gtest.h>

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "cm/node.hpp"
#include "cm/text_bytes.hpp"

namespace iwcm::cm {
namespace {

// Queues a frame holding `text`, as a whole frame.
void queue(TxQueue& q, const std::string& text, std::uint64_t flow) {
    wire::MutBytes room = q.room(text.size(), flow);
    std::memcpy(room.data(), text.data(), text.size());
}

// Queues a frame of `header` whose payload, `payload`'s pieces, is left out in `lender`.
void queue_left_out(TxQueue& q, Lent& lender, const std::string& header,
                    std::span<const wire::Bytes> payload, std::uint32_t seq) {
    const auto len = static_cast<std::uint32_t>(wire::total_size(payload));
    wire::MutBytes room = q.room(header.size() + len, 7);
    std::memcpy(room.data(), header.data(), header.size());
    q.leave_out(lender, static_cast<std::uint32_t>(header.size()), payload, len, 0,
                wire::SeqNumber(seq));
}

// The next frame whole, its payload filled in as Core::poll_transmit does.
std::string take_whole(TxQueue& q) {
    const TxFrame& t = q.take();
    if (TxPayload* p = q.taken_payload(t)) q.fill(*p);
    return text_of(q.bytes(t));
}

TEST(TxQueue, FramesComeOutInOrderAndTheArenaStartsOverOnceAllAreTaken) {
    TxQueue q;
    queue(q, "first", 1);
    queue(q, "second", 2);
    q.check();
    const TxFrame& a = q.take();
    EXPECT_EQ(text_of(q.bytes(a)), "first");
    EXPECT_EQ(a.flow, 1u);
    EXPECT_FALSE(q.all_taken());
    const TxFrame& b = q.take();
    EXPECT_EQ(text_of(q.bytes(b)), "second");
    EXPECT_EQ(b.flow, 2u);
    EXPECT_TRUE(q.all_taken());
    q.check();
    q.start_over();
    queue(q, "third", 3);
    const TxFrame& c = q.take();
    EXPECT_EQ(c.off, 0u);  // the arena's first bytes again
    EXPECT_EQ(text_of(q.bytes(c)), "third");
}

TEST(TxQueue, ALeftOutPayloadIsCopiedInWhenItsFrameIsTakenWhole) {
    TxQueue q;
    Lent lender;
    const std::string one = "pay", two = "load";
    const std::array<wire::Bytes, 2> pieces{bytes_of(one), bytes_of(two)};
    queue(q, "ack", 0);
    queue_left_out(q, lender, "hdr:", pieces, 1000);
    q.check();
    EXPECT_EQ(lender.frames, 1u);
    EXPECT_EQ(take_whole(q), "ack");
    EXPECT_EQ(take_whole(q), "hdr:payload");
    EXPECT_EQ(lender.frames, 0u);
    EXPECT_EQ(lender.copied, 7u);
    q.check();
}

TEST(TxQueue, AHandedOverPayloadIsReadWhereItLiesWithoutACopy) {
    TxQueue q;
    Lent lender;
    const std::string text = "in place";
    const std::array<wire::Bytes, 1> pieces{bytes_of(text)};
    queue_left_out(q, lender, "h", pieces, 5);
    const TxFrame& t = q.take();
    TxPayload* p = q.taken_payload(t);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(p->at, 1u);
    const std::span<const wire::Bytes> read = q.hand_over(*p);
    ASSERT_EQ(read.size(), 1u);
    EXPECT_EQ(read[0].data(), pieces[0].data());  // the lender's own bytes
    EXPECT_EQ(lender.frames, 0u);
    EXPECT_EQ(lender.copied, 0u);
    q.check();
}

TEST(TxQueue, ASettleBelowASequenceNumberFillsOnlyTheFramesBelowIt) {
    TxQueue q;
    Lent lender;
    std::string low = "low", high = "high";
    const std::array<wire::Bytes, 1> a{bytes_of(low)};
    const std::array<wire::Bytes, 1> b{bytes_of(high)};
    queue_left_out(q, lender, "1:", a, 100);
    queue_left_out(q, lender, "2:", b, 103);
    const wire::SeqNumber ack(103);
    q.settle(lender, &ack);
    EXPECT_EQ(lender.frames, 1u);
    EXPECT_EQ(lender.copied, 3u);
    q.check();
    // The lender's memory changes: the settled frame kept the bytes as they were, the other
    // still reads them where they lie.
    low = "LOW";
    high = "HIGH";
    EXPECT_EQ(take_whole(q), "1:low");
    EXPECT_EQ(take_whole(q), "2:HIGH");
    EXPECT_EQ(lender.frames, 0u);
}

TEST(TxQueue, ASettleOfEverythingLeavesNothingLent) {
    TxQueue q;
    Lent lender, other;
    std::string mine = "mine", theirs = "theirs";
    const std::array<wire::Bytes, 1> a{bytes_of(mine)};
    const std::array<wire::Bytes, 1> b{bytes_of(theirs)};
    queue_left_out(q, lender, "a", a, 1);
    queue_left_out(q, other, "b", b, 1);
    queue_left_out(q, lender, "c", a, 5);
    q.settle(lender);
    EXPECT_EQ(lender.frames, 0u);
    EXPECT_EQ(lender.last, kNoPayload);  // the walk unlinked what it passed
    EXPECT_EQ(other.frames, 1u);         // another lender's loan stays
    mine = "MINE";
    EXPECT_EQ(take_whole(q), "amine");
    q.check();
    EXPECT_EQ(take_whole(q), "btheirs");
    EXPECT_EQ(take_whole(q), "cmine");
}

TEST(TxQueue, AStreamThatGoesSettlesItsLoans) {
    TxQueue q;
    StreamHome home{q};
    const tcp::StreamConfig config;  // outlives the stream, which keeps it by reference
    tcp::Tcb tcb;                    // likewise
    auto bytes = std::make_unique<std::string>("the stream's bytes");
    const std::array<wire::Bytes, 1> pieces{bytes_of(*bytes)};
    {
        NodeStream ns(config, tcp::StreamInit{}, kInstantZero, tcb, home);
        wire::MutBytes room = q.room(2 + bytes->size(), 0);
        std::memcpy(room.data(), "h:", 2);
        ns.lend(2, pieces, static_cast<std::uint32_t>(bytes->size()), wire::SeqNumber(0));
        EXPECT_EQ(ns.frames_lent(), 1u);
    }
    bytes->assign(bytes->size(), 'x');  // the memory is the owner's again
    EXPECT_EQ(take_whole(q), "h:the stream's bytes");
    q.check();
}

TEST(TxQueue, AQueueThatEndsForgetsItsLoansWithoutCopying) {
    Lent lender;
    const std::string text = "never sent";
    const std::array<wire::Bytes, 1> pieces{bytes_of(text)};
    {
        TxQueue q;
        queue_left_out(q, lender, "h", pieces, 0);
        EXPECT_EQ(lender.frames, 1u);
    }
    EXPECT_EQ(lender.frames, 0u);
    EXPECT_EQ(lender.copied, 0u);
}

TEST(TxQueue, DeferredAcksAreNamesKeptUntilCleared) {
    TxQueue q;
    EXPECT_FALSE(q.acks_deferred());
    q.defer_ack({3, 1});
    q.defer_ack({5, 2});
    ASSERT_TRUE(q.acks_deferred());
    ASSERT_EQ(q.deferred_acks().size(), 2u);
    EXPECT_EQ(q.deferred_acks()[1].index, 5u);
    q.clear_acks();
    EXPECT_FALSE(q.acks_deferred());
}

TEST(TxQueue, LoopbackFramesAreTakenAsABatch) {
    TxQueue q;
    wire::MutBytes a = q.loop_room(1);
    a[0] = std::byte{1};
    EXPECT_EQ(q.last_loop_frame().size(), 1u);
    q.loop_room(2);
    EXPECT_FALSE(q.loop_empty());
    const auto batch = q.take_loopback();
    ASSERT_EQ(batch.size(), 2u);
    EXPECT_EQ(batch[0][0], std::byte{1});
    EXPECT_TRUE(q.loop_empty());
    EXPECT_TRUE(q.all_taken());  // loopback frames are not the wire's
}

}  // namespace
}  // namespace iwcm::cm
