// The core's event queue on its own (src/cm/event_queue.hpp): events come out oldest first
// with the private data each was queued with; a popped event's private data stays where it
// is until the next push; a queue that runs dry starts over in its first slot and at the
// arena's start; its invariants hold throughout.
#include "cm/event_queue.hpp"

#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "cm/text_bytes.hpp"

namespace iwcm::cm {
namespace {

QueuedEvent& push(EventQueue& q, EventType type, const std::string& pdata) {
    QueuedEvent& e = q.push(bytes_of(pdata));
    e.event = {};
    e.event.type = type;
    e.node.reset();
    return e;
}

TEST(EventQueue, EventsComeOutOldestFirstWithTheirPrivateData) {
    EventQueue q;
    push(q, EventType::kConnectRequest, "request");
    push(q, EventType::kEstablished, "");
    push(q, EventType::kDisconnected, "bye");
    q.check();
    EXPECT_EQ(q.size(), 3u);
    const std::pair<EventType, std::string> want[] = {{EventType::kConnectRequest, "request"},
                                                      {EventType::kEstablished, ""},
                                                      {EventType::kDisconnected, "bye"}};
    for (const auto& [type, pdata] : want) {
        QueuedEvent* e = q.pop();
        ASSERT_NE(e, nullptr);
        EXPECT_EQ(e->event.type, type);
        EXPECT_EQ(text_of(q.pdata_of(*e)), pdata);
        q.check();
    }
    EXPECT_TRUE(q.empty());
    EXPECT_EQ(q.pop(), nullptr);
}

TEST(EventQueue, APoppedEventsPrivateDataStaysUntilTheNextPush) {
    EventQueue q;
    push(q, EventType::kConnectRequest, "first");
    push(q, EventType::kEstablished, "second");
    QueuedEvent* e = q.pop();
    ASSERT_NE(e, nullptr);
    const std::span<const std::byte> view = q.pdata_of(*e);
    // Another pop (of the second event) leaves the first one's bytes where they were.
    ASSERT_NE(q.pop(), nullptr);
    EXPECT_EQ(text_of(view), "first");
}

TEST(EventQueue, ADryQueueStartsOverInItsFirstSlotAndArenaStart) {
    EventQueue q;
    push(q, EventType::kConnectRequest, "abc");
    push(q, EventType::kEstablished, "defg");
    QueuedEvent* first = q.pop();  // the first slot, where it lies once both are queued
    ASSERT_NE(first, nullptr);
    ASSERT_NE(q.pop(), nullptr);
    EXPECT_EQ(q.pop(), nullptr);  // dry: slots and arena start over
    QueuedEvent& again = push(q, EventType::kRejected, "xy");
    EXPECT_EQ(&again, first);
    EXPECT_EQ(again.pdata_off, 0u);
    EXPECT_EQ(again.pdata_len, 2u);
    q.check();
    QueuedEvent* e = q.pop();
    ASSERT_EQ(e, first);
    EXPECT_EQ(e->event.type, EventType::kRejected);
    EXPECT_EQ(text_of(q.pdata_of(*e)), "xy");
}

TEST(EventQueue, PushesBehindUnpolledEventsKeepTheArenaInOrder) {
    EventQueue q;
    push(q, EventType::kConnectRequest, "one");
    ASSERT_NE(q.pop(), nullptr);
    // Not dry (nothing popped empty): the next push goes on after the popped bytes.
    QueuedEvent& e = push(q, EventType::kEstablished, "two");
    EXPECT_EQ(e.pdata_off, 3u);
    push(q, EventType::kDisconnected, "three");
    q.check();
    EXPECT_EQ(q.size(), 2u);
    QueuedEvent* a = q.pop();
    ASSERT_NE(a, nullptr);
    EXPECT_EQ(text_of(q.pdata_of(*a)), "two");
    QueuedEvent* b = q.pop();
    ASSERT_NE(b, nullptr);
    EXPECT_EQ(text_of(q.pdata_of(*b)), "three");
}

TEST(EventQueue, ClearDropsEverything) {
    EventQueue q;
    push(q, EventType::kConnectRequest, "x");
    q.clear();
    EXPECT_TRUE(q.empty());
    EXPECT_EQ(q.pop(), nullptr);
    q.check();
}

}  // namespace
}  // namespace iwcm::cm
