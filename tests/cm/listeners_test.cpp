// The core's listener table and SYN-cookie keys on their own (src/cm/listeners.hpp): a removed
// listener's handles go stale and its slot's next listener has another generation; a slot in
// its grace keeps its endpoint's SYNs unanswered and is not reused; a SYN finds the listener
// of its exact address before a wildcard one; the backlog counts and the silent order; the
// key of the period that made a cookie, for that period and the next only.
#include "cm/listeners.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <set>
#include <string_view>

namespace iwcm::cm {
namespace {

using std::chrono::seconds;

constexpr CookieKey kCookieSecret{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
constexpr CookieKey kIsnSecret{16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1};

Endpoint ep(std::string_view addr, std::uint16_t port) {
    return {*IpAddr::parse(addr), port};
}

Instant at(std::int64_t s) {
    return Instant{seconds(s)};
}

ListenHandle add(Listeners& ls, Instant now, const Endpoint& local, std::uint16_t vlan = kNoVlan) {
    return ls.add(now, local, vlan, 0, /*backlog=*/8, /*silent_limit=*/4);
}

TEST(Listeners, ARemovedListenersHandleGoesStaleAndItsSlotsNextHasAnotherGeneration) {
    Listeners ls(kCookieSecret, kIsnSecret);
    const ListenHandle h = add(ls, at(1), ep("10.0.0.1", 5000));
    ASSERT_NE(ls.find(h), nullptr);
    EXPECT_EQ(ls.find(h)->local, ep("10.0.0.1", 5000));
    EXPECT_TRUE(ls.serves(ep("10.0.0.1", 5000), kNoVlan));
    ls.remove(h, std::nullopt);
    ls.check();
    EXPECT_EQ(ls.find(h), nullptr);
    EXPECT_TRUE(ls.has_slot(h));  // stale, not invalid
    EXPECT_FALSE(ls.serves(ep("10.0.0.1", 5000), kNoVlan));
    EXPECT_EQ(ls.match(ep("10.0.0.1", 5000), kNoVlan), nullptr);

    // No grace: the slot serves the next listener, under another generation.
    const ListenHandle again = add(ls, at(2), ep("10.0.0.2", 6000));
    EXPECT_EQ(again.index, h.index);
    EXPECT_NE(again.generation, h.generation);
    EXPECT_EQ(ls.find(h), nullptr);
    ASSERT_NE(ls.find(again), nullptr);
    EXPECT_EQ(ls.size(), 1u);
    EXPECT_FALSE(ls.has_slot(ListenHandle{}));
    EXPECT_FALSE(ls.has_slot(ListenHandle{5, 1}));
    ls.check();
}

TEST(Listeners, ASlotInItsGraceHoldsItsEndpointUntilTheGraceEndsOrItIsServedAgain) {
    Listeners ls(kCookieSecret, kIsnSecret);
    const ListenHandle h = add(ls, at(1), ep("10.0.0.1", 5000));
    ls.remove(h, at(4));
    ls.check();
    EXPECT_TRUE(ls.in_grace(at(2), ep("10.0.0.1", 5000), kNoVlan));
    EXPECT_FALSE(ls.in_grace(at(2), ep("10.0.0.1", 5001), kNoVlan));
    EXPECT_FALSE(ls.in_grace(at(2), ep("10.0.0.9", 5000), kNoVlan));
    EXPECT_FALSE(ls.in_grace(at(4), ep("10.0.0.1", 5000), kNoVlan));  // over at its instant

    // Another endpoint during the grace takes another slot.
    const ListenHandle other = add(ls, at(2), ep("10.0.0.2", 5000));
    EXPECT_NE(other.index, h.index);
    EXPECT_TRUE(ls.in_grace(at(2), ep("10.0.0.1", 5000), kNoVlan));

    // The endpoint served again: its grace ends, and its slot is free for the next one.
    const ListenHandle back = add(ls, at(3), ep("10.0.0.1", 5000));
    EXPECT_FALSE(ls.in_grace(at(3), ep("10.0.0.1", 5000), kNoVlan));
    EXPECT_EQ(back.index, h.index);
    EXPECT_NE(back.generation, h.generation);
    ls.check();
}

TEST(Listeners, AWildcardsGraceCoversEveryAddressOfItsFamily) {
    Listeners ls(kCookieSecret, kIsnSecret);
    ls.remove(add(ls, at(1), ep("0.0.0.0", 5000)), at(4));
    EXPECT_TRUE(ls.in_grace(at(2), ep("10.0.0.7", 5000), kNoVlan));
    EXPECT_FALSE(ls.in_grace(at(2), ep("fd00::7", 5000), kNoVlan));
}

TEST(Listeners, ASynFindsItsExactAddressBeforeAWildcardInEitherOrder) {
    for (const bool wildcard_first : {true, false}) {
        Listeners ls(kCookieSecret, kIsnSecret);
        ListenHandle wildcard, exact;
        if (wildcard_first) wildcard = add(ls, at(1), ep("0.0.0.0", 5000));
        exact = add(ls, at(1), ep("10.0.0.1", 5000));
        if (!wildcard_first) wildcard = add(ls, at(1), ep("0.0.0.0", 5000));
        EXPECT_EQ(ls.match(ep("10.0.0.1", 5000), kNoVlan), ls.find(exact));
        EXPECT_EQ(ls.match(ep("10.0.0.2", 5000), kNoVlan), ls.find(wildcard));
        EXPECT_EQ(ls.match(ep("fd00::1", 5000), kNoVlan), nullptr);   // another family
        EXPECT_EQ(ls.match(ep("10.0.0.1", 5001), kNoVlan), nullptr);  // another port
        // Once the exact one goes, the wildcard takes its address too.
        ls.remove(exact, std::nullopt);
        EXPECT_EQ(ls.match(ep("10.0.0.1", 5000), kNoVlan), ls.find(wildcard));
    }
}

TEST(Listeners, AListenerGivenAVlanServesOnlyThatOne) {
    Listeners ls(kCookieSecret, kIsnSecret);
    const ListenHandle h = add(ls, at(1), ep("0.0.0.0", 5000), 7);
    EXPECT_EQ(ls.match(ep("10.0.0.1", 5000), 7), ls.find(h));
    EXPECT_EQ(ls.match(ep("10.0.0.1", 5000), 8), nullptr);
    EXPECT_FALSE(ls.serves(ep("0.0.0.0", 5000), kNoVlan));
    EXPECT_TRUE(ls.serves(ep("0.0.0.0", 5000), 7));
}

TEST(Listeners, BacklogCountsFollowTheirConnectionsAndIgnoreAGoneListener) {
    Listeners ls(kCookieSecret, kIsnSecret);
    const ListenHandle h = add(ls, at(1), ep("10.0.0.1", 5000));
    Listener& l = *ls.find(h);
    EXPECT_EQ(ls.admit(l), h);
    EXPECT_EQ(ls.admit(l), h);
    EXPECT_EQ(ls.admit(l), h);
    EXPECT_EQ(l.pending, 3u);
    EXPECT_EQ(l.half_open, 3u);
    EXPECT_EQ(l.queued(), 0u);
    ls.check();

    // One completes its handshake and its request comes at once; one falls silent.
    ls.end_half_open(h);
    ls.end_half_open(h);
    std::set<std::uint32_t> silent;
    auto still_silent = [&](ConnHandle c) { return silent.contains(c.index); };
    silent.insert(1);
    ls.enter_silence(l, ConnHandle{1, 1}, still_silent);
    EXPECT_EQ(l.half_open, 1u);
    EXPECT_EQ(l.silent, 1u);
    EXPECT_EQ(l.queued(), 1u);
    ls.check();

    // The silent one speaks: the order empties with the last silent one.
    silent.erase(1);
    ls.end_silence(h);
    EXPECT_EQ(l.silent, 0u);
    EXPECT_TRUE(l.silent_order.empty());
    EXPECT_EQ(l.queued(), 2u);
    ls.end_pending(h);  // answered
    EXPECT_EQ(l.pending, 2u);
    ls.check();

    // The rest end; then a stale handle's ends count nothing.
    ls.end_pending(h);
    ls.end_half_open(h);
    ls.end_pending(h);
    EXPECT_EQ(l.pending, 0u);
    ls.remove(h, std::nullopt);
    const ListenHandle next = add(ls, at(2), ep("10.0.0.1", 5000));
    Listener& n = *ls.find(next);
    ls.admit(n);
    ls.end_half_open(h);
    ls.end_pending(h);
    EXPECT_EQ(n.pending, 1u);
    EXPECT_EQ(n.half_open, 1u);
    ls.check();
}

TEST(Listeners, TheOldestSilentOneIsTakenPastStaleHandlesAndStaleOnesAreSqueezedOut) {
    Listeners ls(kCookieSecret, kIsnSecret);
    const ListenHandle h = ls.add(at(1), ep("10.0.0.1", 5000), kNoVlan, 0, 64, 64);
    Listener& l = *ls.find(h);
    std::set<std::uint32_t> silent;
    auto still_silent = [&](ConnHandle c) { return silent.contains(c.index); };
    auto fall_silent = [&](std::uint32_t i) {
        ls.admit(l);
        ls.end_half_open(h);
        silent.insert(i);
        ls.enter_silence(l, ConnHandle{i, 1}, still_silent);
    };
    auto speak = [&](std::uint32_t i) {
        silent.erase(i);
        ls.end_silence(h);
    };
    for (std::uint32_t i = 0; i < 4; ++i) fall_silent(i);
    speak(0);
    speak(1);
    const ConnHandle oldest = ls.take_oldest_silent(l, still_silent);
    EXPECT_EQ(oldest.index, 2u);
    EXPECT_EQ(l.silent_front, 3u);  // the stale ones and the one taken passed for good
    speak(2);
    ls.check();

    // Stale handles as many as live ones (plus 16) are squeezed out on entering silence.
    for (std::uint32_t i = 10; i < 30; ++i) fall_silent(i);
    for (std::uint32_t i = 10; i < 28; ++i) speak(i);
    EXPECT_EQ(l.silent, 3u);  // 3, 28, 29
    EXPECT_GE(l.silent_order.size(), 2u * l.silent + 16);
    fall_silent(40);
    EXPECT_EQ(l.silent_front, 0u);
    ASSERT_EQ(l.silent_order.size(), 4u);
    EXPECT_EQ(l.silent_order[0].index, 3u);
    EXPECT_EQ(l.silent_order[1].index, 28u);
    EXPECT_EQ(l.silent_order[3].index, 40u);
    EXPECT_EQ(ls.take_oldest_silent(l, still_silent).index, 3u);
    speak(3);  // the caller ends the one taken
    EXPECT_EQ(l.silent_front, 1u);
    EXPECT_EQ(l.silent, 3u);
    ls.check();
}

TEST(Listeners, ACookiesKeyIsFoundInItsPeriodAndTheNextOnly) {
    Listeners ls(kCookieSecret, kIsnSecret);
    const CookieTuple t{ep("10.0.0.1", 5000), ep("10.0.0.2", 40000), kNoVlan, 12345};
    const CookieData d{1460, 7};
    for (const std::uint64_t p : {std::uint64_t{0}, std::uint64_t{1}, std::uint64_t{124}}) {
        const CookieKey& key = ls.cookie_key_of(p);
        EXPECT_EQ(key, cookie_key(kCookieSecret, kIsnSecret, p));
        const std::uint32_t cookie = make_cookie(key, p, t, d);
        // Its own period and the next one find it, by its parity.
        for (const std::uint64_t now : {p, p + 1}) {
            const std::optional<std::uint64_t> made = Listeners::cookie_made_in(now, cookie);
            ASSERT_EQ(made, p);
            EXPECT_EQ(check_cookie(ls.cookie_key_of(*made), *made, t, cookie), d);
        }
        // Two periods on, its parity names this period, whose key refuses it.
        const std::optional<std::uint64_t> late = Listeners::cookie_made_in(p + 2, cookie);
        ASSERT_EQ(late, p + 2);
        EXPECT_FALSE(check_cookie(ls.cookie_key_of(*late), *late, t, cookie));
        ls.check();
    }
    // Before period 0 there is none: a cookie of odd parity in period 0 names no period.
    const std::uint32_t odd = make_cookie(ls.cookie_key_of(1), 1, t, d);
    EXPECT_EQ(Listeners::cookie_made_in(0, odd), std::nullopt);
}

TEST(Listeners, TheKeysOfBothPeriodsInPlayStayTheirsAsEitherIsAskedFor) {
    Listeners ls(kCookieSecret, kIsnSecret);
    const CookieKey k9 = cookie_key(kCookieSecret, kIsnSecret, 9);
    const CookieKey k10 = cookie_key(kCookieSecret, kIsnSecret, 10);
    ASSERT_NE(k9, k10);
    for (int i = 0; i < 3; ++i) {
        EXPECT_EQ(ls.cookie_key_of(10), k10);
        EXPECT_EQ(ls.cookie_key_of(9), k9);
    }
    // A later period of the same parity replaces the older one's key.
    EXPECT_EQ(ls.cookie_key_of(11), cookie_key(kCookieSecret, kIsnSecret, 11));
    EXPECT_EQ(ls.cookie_key_of(10), k10);
    EXPECT_EQ(ls.cookie_key_of(9), k9);
    ls.check();
}

TEST(Listeners, RemovingAListenerThatStillCountsAConnectionIsAProgrammingError) {
    Listeners ls(kCookieSecret, kIsnSecret);
    const ListenHandle h = add(ls, at(1), ep("10.0.0.1", 5000));
    ls.admit(*ls.find(h));
    EXPECT_DEATH(ls.remove(h, std::nullopt), "pending == 0");
}

TEST(Listeners, CookiesSentLatelyMayReturnForTwoPeriods) {
    Listener l;
    EXPECT_FALSE(l.cookie_may_return(at(10), seconds(4)));
    l.last_cookie = at(10);
    EXPECT_TRUE(l.cookie_may_return(at(17), seconds(4)));
    EXPECT_FALSE(l.cookie_may_return(at(18), seconds(4)));
}

}  // namespace
}  // namespace iwcm::cm
