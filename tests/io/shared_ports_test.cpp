// The ports of shared-address mode without a device: PortPool's ports are real
// reservations on 127.0.0.1 (a bound socket each, no privilege needed), and
// ConnPorts drives a core that nobody answers, on the virtual clock.
//
// Read first: src/io/shared/shared_ports.hpp.
#include <gtest/gtest.h>

#include <deque>
#include <set>

#include "io/shared/shared_ports.hpp"
#include "iwcm/shard.hpp"
#include "wire/frame.hpp"

namespace iwcm::io {
namespace {

const IpAddr kLoopback = *IpAddr::parse("127.0.0.1");
const Endpoint kPeer{*IpAddr::parse("10.98.1.2"), 5000};

std::uint32_t shard_of_port(const PortReservation& p, const Endpoint& remote, std::uint32_t n) {
    return shard_of(flow_hash({p.addr(), p.port()}, remote, 0), n);
}

TEST(PortPool, EveryPortHashesBackToTheShardThatTookIt) {
    PortPool pool(2, 0);
    std::vector<PortReservation> held;
    std::set<std::uint16_t> ports;
    for (int i = 0; i < 40; ++i) {
        const std::uint32_t s = static_cast<std::uint32_t>(i % 2);
        auto p = pool.take(s, kLoopback, kPeer);
        ASSERT_TRUE(p.has_value()) << p.error();
        EXPECT_EQ(shard_of_port(*p, kPeer, 2), s) << "port " << p->port();
        EXPECT_TRUE(ports.insert(p->port()).second) << "port " << p->port() << " given twice";
        held.push_back(std::move(*p));
    }
    // Each is held in the kernel: nobody else can bind it.
    auto again = PortReservation::reserve(kLoopback, held.front().port());
    ASSERT_FALSE(again.has_value());
    EXPECT_NE(again.error().find("in use by the kernel"), std::string::npos) << again.error();
}

TEST(PortPool, PortsOfAnotherShardWaitAsSparesAndAreUsedFirst) {
    PortPool pool(2, 0);
    std::vector<PortReservation> held;
    // Thread 0 alone takes ports: about half of what the kernel gives is thread 1's.
    for (int i = 0; i < 20; ++i) {
        auto p = pool.take(0, kLoopback, kPeer);
        ASSERT_TRUE(p.has_value()) << p.error();
        held.push_back(std::move(*p));
    }
    const std::size_t spares = pool.spares();
    ASSERT_GT(spares, 0u);
    // Nothing was given back: every reservation was handed out or is a spare.
    EXPECT_EQ(pool.reservations(), held.size() + spares);
    // Thread 1 now takes them without asking the kernel for more.
    const std::uint64_t before = pool.reservations();
    for (std::size_t i = 0; i < spares; ++i) {
        auto p = pool.take(1, kLoopback, kPeer);
        ASSERT_TRUE(p.has_value()) << p.error();
        EXPECT_EQ(shard_of_port(*p, kPeer, 2), 1u);
        held.push_back(std::move(*p));
    }
    EXPECT_EQ(pool.reservations(), before);
    EXPECT_EQ(pool.spares(), 0u);
}

TEST(PortPool, ASpareIsCheckedAgainstTheNewPeer) {
    // A spare kept for one peer may hash elsewhere with another: it is only
    // handed out where it comes back to the shard that takes it.
    PortPool pool(4, 0);
    std::vector<PortReservation> held;
    const Endpoint other{*IpAddr::parse("10.98.1.3"), 6000};
    for (int i = 0; i < 12; ++i) {
        const Endpoint& remote = i % 2 ? other : kPeer;
        const std::uint32_t s = static_cast<std::uint32_t>(i % 4);
        auto p = pool.take(s, kLoopback, remote);
        ASSERT_TRUE(p.has_value()) << p.error();
        EXPECT_EQ(shard_of_port(*p, remote, 4), s);
        held.push_back(std::move(*p));
    }
}

TEST(PortPool, TheKernelsRefusalIsTheError) {
    PortPool pool(2, 0, [](const IpAddr&, std::uint16_t) -> Expected<PortReservation, std::string> {
        return fail(std::string("no free port on 127.0.0.1 (all in use)"));
    });
    auto p = pool.take(1, kLoopback, kPeer);
    ASSERT_FALSE(p.has_value());
    EXPECT_EQ(p.error(), "no free port on 127.0.0.1 (all in use)");
    EXPECT_EQ(pool.reservations(), 0u);
}

// ConnPorts on a core whose peer never answers; the source reserves on loopback.
struct Conns {
    Core core;
    Instant now{};
    std::vector<std::uint16_t> released;
    int refusals = 0;                    // the source fails this many times first
    std::deque<PortReservation> queued;  // given out first, in order
    std::vector<std::uint16_t> given;    // every port the source gave
    ConnPorts ports;

    Conns()
        : core(config()),
          ports(
              core,
              [this](const IpAddr&, const Endpoint&) -> Expected<PortReservation, std::string> {
                  if (refusals > 0) {
                      --refusals;
                      return fail(std::string("no free port"));
                  }
                  auto r = queued.empty()
                               ? PortReservation::reserve(kLoopback, 0)
                               : Expected<PortReservation, std::string>(std::move(queued.front()));
                  if (!queued.empty()) queued.pop_front();
                  if (r) given.push_back(r->port());
                  return r;
              },
              [this](const PortReservation& r) { released.push_back(r.port()); }) {
        EXPECT_TRUE(core.add_address(*IpAddr::parse("10.98.1.1")).has_value());
    }
    static CoreConfig config() {
        CoreConfig c;
        c.mac = MacAddr{{0x02, 0, 0, 0, 0, 1}};
        return c;
    }
    ConnectParams params() const {
        ConnectParams cp;
        cp.local = {*IpAddr::parse("10.98.1.1"), 0};
        cp.remote = kPeer;
        cp.remote_mac = MacAddr{{0x02, 0, 0, 0, 0, 2}};
        return cp;
    }
    // Resets the connection and polls its terminal event: its handle goes stale.
    void abort(ConnHandle c) {
        ASSERT_TRUE(core.disconnect(now, c, DisconnectMode::kAbortive).has_value());
        while (core.poll_event()) {
        }
        ASSERT_FALSE(core.state(c).has_value());
    }
    // The source ports of the SYNs the core sent.
    std::vector<std::uint16_t> syn_ports() {
        std::vector<std::uint16_t> ports;
        while (auto f = core.poll_transmit()) {
            auto p = wire::parse_tcp_frame(*f);
            EXPECT_TRUE(p.has_value());
            if (p && p->repr.tcp.flags == wire::tcp_flags::kSyn)
                ports.push_back(p->repr.tcp.src_port);
        }
        return ports;
    }
};

// The SYN goes out from the port the kernel reserved for it, nothing else.
TEST(ConnPorts, TheSynUsesTheReservedPort) {
    Conns t;
    for (int i = 0; i < 3; ++i) {
        auto c = t.ports.connect(t.now, t.params());
        ASSERT_TRUE(c.has_value()) << c.error();
        ASSERT_EQ(t.given.size(), static_cast<std::size_t>(i + 1));
        EXPECT_EQ(t.syn_ports(), std::vector<std::uint16_t>{t.given.back()});
        auto st = t.core.state(*c);
        ASSERT_TRUE(st.has_value());
        EXPECT_EQ(*st, CmState::kSynSent);
    }
    EXPECT_EQ(t.ports.held(), 3u);
}

// A port the core still uses for the same peer (a closing node of ours) is refused by
// connect() with kAddressInUse: ConnPorts keeps it for its linger and takes the next one.
TEST(ConnPorts, AnAddressInUseIsRetriedFromAnotherPort) {
    Conns t;
    auto busy = PortReservation::reserve(kLoopback, 0);
    ASSERT_TRUE(busy.has_value()) << busy.error();
    const std::uint16_t busy_port = busy->port();
    // The core holds the 4-tuple (busy_port -> kPeer) with a connection of its own.
    ConnectParams direct = t.params();
    direct.local.port = busy_port;
    auto holder = t.core.connect(t.now, direct);
    ASSERT_TRUE(holder.has_value());
    EXPECT_EQ(t.syn_ports(), std::vector<std::uint16_t>{busy_port});
    t.queued.push_back(std::move(*busy));
    auto c = t.ports.connect(t.now, t.params());
    ASSERT_TRUE(c.has_value()) << c.error();
    ASSERT_EQ(t.given.size(), 2u);
    EXPECT_EQ(t.given[0], busy_port);
    EXPECT_NE(t.given[1], busy_port);
    EXPECT_EQ(t.syn_ports(), std::vector<std::uint16_t>{t.given[1]});
    EXPECT_EQ(t.ports.held(), 2u) << "the refused port is kept a while, not given back";
    EXPECT_TRUE(t.released.empty());
    // The refused port goes back after its linger, the live connection's does not.
    t.ports.reap(t.now + 2 * t.core.config().close_delay, false);
    EXPECT_EQ(t.released, std::vector<std::uint16_t>{busy_port});
    EXPECT_EQ(t.ports.held(), 1u);
}

TEST(ConnPorts, APortGoesBackTwiceCloseDelayAfterItsHandleWentStale) {
    Conns t;
    auto c = t.ports.connect(t.now, t.params());
    ASSERT_TRUE(c.has_value()) << c.error();
    EXPECT_EQ(t.ports.held(), 1u);
    t.ports.reap(t.now + std::chrono::seconds(10), false);
    EXPECT_TRUE(t.released.empty()) << "released while the connection lives";
    t.abort(*c);
    const Instant stale = t.now + std::chrono::seconds(20);
    t.ports.reap(stale, false);  // notes when the handle went stale
    const Duration linger = 2 * t.core.config().close_delay;
    const Duration look = t.core.config().close_delay / 4;
    t.ports.reap(stale + linger - std::chrono::milliseconds(1), false);
    EXPECT_TRUE(t.released.empty()) << "released before the linger";
    // The next look is a quarter close_delay after that one.
    t.ports.reap(stale + linger, false);
    EXPECT_TRUE(t.released.empty()) << "looked again before a quarter close_delay";
    t.ports.reap(stale + linger - std::chrono::milliseconds(1) + look, false);
    ASSERT_EQ(t.released.size(), 1u);
    EXPECT_EQ(t.ports.held(), 0u);
}

TEST(ConnPorts, WhenTheSourceHasNoneTheLingeringPortsGoBackAtOnce) {
    Conns t;
    auto first = t.ports.connect(t.now, t.params());
    ASSERT_TRUE(first.has_value()) << first.error();
    t.abort(*first);
    t.ports.reap(t.now, false);
    t.refusals = 1;
    auto second = t.ports.connect(t.now, t.params());
    ASSERT_TRUE(second.has_value()) << second.error();
    EXPECT_EQ(t.released.size(), 1u) << "the stale connection's port went back early";
    EXPECT_EQ(t.ports.held(), 1u);
    t.refusals = 2;
    auto third = t.ports.connect(t.now, t.params());
    ASSERT_FALSE(third.has_value());
    EXPECT_EQ(third.error(), "no free port");
}

// With keep_released, a port whose linger is over stays reserved and the next
// connection takes it: the source is not asked again, and the SYN leaves from it.
TEST(ConnPorts, AKeptPortIsTakenAgainWithoutTheSource) {
    Conns t;
    t.ports.keep_released(1);
    // A kept port serves connections from its own address: here the source's, loopback.
    ASSERT_TRUE(t.core.add_address(kLoopback).has_value());
    ConnectParams cp = t.params();
    cp.local.addr = kLoopback;
    auto first = t.ports.connect(t.now, cp);
    ASSERT_TRUE(first.has_value()) << first.error();
    const std::vector<std::uint16_t> first_syn = t.syn_ports();
    ASSERT_EQ(first_syn.size(), 1u);
    t.abort(*first);
    t.ports.reap(t.now, false);  // notes when the handle went stale
    const Instant later = t.now + 2 * t.core.config().close_delay + std::chrono::seconds(1);
    t.ports.reap(later, false);
    EXPECT_TRUE(t.released.empty()) << "a port went back though it could be kept";
    EXPECT_EQ(t.ports.kept(), 1u);
    auto other = t.ports.connect(later, t.params());  // from 10.98.1.1: not the kept one
    ASSERT_TRUE(other.has_value()) << other.error();
    EXPECT_EQ(t.given.size(), 2u);
    EXPECT_EQ(t.ports.kept(), 1u);
    EXPECT_NE(t.syn_ports(), first_syn);
    auto second = t.ports.connect(later, cp);
    ASSERT_TRUE(second.has_value()) << second.error();
    EXPECT_EQ(t.given.size(), 2u) << "the source was asked though a port was kept";
    EXPECT_EQ(t.syn_ports(), first_syn);
    EXPECT_EQ(t.ports.kept(), 0u);
}

// Beyond keep_released's number the ports go back; reap(now, true) gives back the kept.
TEST(ConnPorts, KeptPortsAreBoundedAndGoBackWhenThePortsRunOut) {
    Conns t;
    t.ports.keep_released(1);
    for (int i = 0; i < 3; ++i) {
        auto c = t.ports.connect(t.now, t.params());
        ASSERT_TRUE(c.has_value()) << c.error();
        t.abort(*c);
    }
    t.ports.reap(t.now, false);
    const Instant later = t.now + 2 * t.core.config().close_delay + std::chrono::seconds(1);
    t.ports.reap(later, false);
    EXPECT_EQ(t.ports.kept(), 1u);
    EXPECT_EQ(t.released.size(), 2u);
    t.ports.reap(later, true);
    EXPECT_EQ(t.ports.kept(), 0u);
    EXPECT_EQ(t.released.size(), 3u);
    EXPECT_EQ(t.ports.held(), 0u);
}

}  // namespace
}  // namespace iwcm::io
