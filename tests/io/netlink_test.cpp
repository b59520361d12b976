// Rtnl against the kernel. Each test runs in two network namespaces of its
// own: the test process unshares one ("ours", left again in TearDown) and a
// forked child unshares another ("the peer's"), joined by a veth pair that
// `ip` (iproute2) creates; both namespaces, with their devices, addresses,
// routes and neighbours, vanish when the last process and socket in them are
// gone, so nothing is left behind and no traffic leaves them. Needs root (the
// ctest label is `interop`); without it the tests fail, loudly.
//
// Read first: src/io/net/netlink.hpp. Waiting for the kernel is a bounded poll
// of its state (or of the notification socket), never a sleep.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_addr.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <linux/neighbour.h>
#include <linux/rtnetlink.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <string>

#include "io/net/netlink.hpp"
#include "wire/arp.hpp"
#include "wire/ethernet.hpp"

namespace iwcm::io {
namespace {

using Clock = std::chrono::steady_clock;
using Kind = Change::Kind;

const MacAddr kOurMac = *MacAddr::parse("02:00:0a:09:00:01");
const MacAddr kPeerMac = *MacAddr::parse("02:00:0a:09:00:02");
const IpAddr kOur4 = *IpAddr::parse("10.9.0.1");
const IpAddr kPeer4 = *IpAddr::parse("10.9.0.2");
const IpAddr kOur6 = *IpAddr::parse("fd00:9::1");
const IpAddr kPeer6 = *IpAddr::parse("fd00:9::2");

// Runs a shell command; its exit status (the command's output goes to the log).
int sh(const std::string& cmd) {
    int rc = std::system(cmd.c_str());
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

bool settled(std::uint16_t state) {
    return (state & (NUD_REACHABLE | NUD_FAILED)) != 0;
}

class RtnlTest : public ::testing::Test {
protected:
    void SetUp() override {
        ASSERT_EQ(::geteuid(), 0u) << "needs root: network namespaces and veth devices";
        home_ = ::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
        ASSERT_GE(home_, 0);
        start_peer();
        ASSERT_EQ(::unshare(CLONE_NEWNET), 0) << "unshare(CLONE_NEWNET)";
        ASSERT_EQ(sh("ip link set lo up"), 0);
        ASSERT_EQ(sh("ip link add veth0 address " + kOurMac.to_string() +
                     " mtu 1400 type veth peer name veth1 address " + kPeerMac.to_string() +
                     " netns " + std::to_string(peer_)),
                  0);
        // Failed resolutions end after 3 probes 100 ms apart instead of 1 s apart.
        ASSERT_EQ(sh("sysctl -qw net.ipv4.neigh.veth0.retrans_time_ms=100 "
                     "net.ipv6.neigh.veth0.retrans_time_ms=100"),
                  0);
        ASSERT_EQ(sh("ip addr add 10.9.0.1/24 dev veth0 && "
                     "ip addr add fd00:9::1/64 dev veth0 nodad && ip link set veth0 up"),
                  0);
        ASSERT_EQ(peer("ip link set lo up && ip addr add 10.9.0.2/24 dev veth1 && "
                       "ip addr add fd00:9::2/64 dev veth1 nodad && ip link set veth1 up"),
                  0);
        auto r = Rtnl::open();
        ASSERT_TRUE(r) << r.error();
        rtnl_.emplace(std::move(*r));
        ifindex_ = index_of("veth0");
        ASSERT_GT(ifindex_, 0);
        auto in_peer = open_in_peer();
        ASSERT_TRUE(in_peer);
        ASSERT_TRUE(wait_operational(*rtnl_, "veth0"));
        ASSERT_TRUE(wait_operational(*in_peer, "veth1"));
    }

    void TearDown() override {
        rtnl_.reset();
        if (home_ >= 0) {
            EXPECT_EQ(::setns(home_, CLONE_NEWNET), 0);
            ::close(home_);
        }
        if (peer_ > 0) {
            ::close(peer_hold_);
            int status = 0;
            EXPECT_EQ(::waitpid(peer_, &status, 0), peer_);
        }
    }

    // A child in a namespace of its own that lives until peer_hold_ closes.
    void start_peer() {
        int ready[2];
        int hold[2];
        ASSERT_EQ(::pipe2(ready, O_CLOEXEC), 0);
        ASSERT_EQ(::pipe2(hold, O_CLOEXEC), 0);
        peer_ = ::fork();
        ASSERT_GE(peer_, 0);
        if (peer_ == 0) {
            char c = ::unshare(CLONE_NEWNET) == 0 ? 'y' : 'n';
            if (::write(ready[1], &c, 1) != 1) ::_exit(1);
            ::close(hold[1]);
            while (::read(hold[0], &c, 1) > 0) {
            }
            ::_exit(0);
        }
        ::close(ready[1]);
        ::close(hold[0]);
        peer_hold_ = hold[1];
        char c = 'n';
        EXPECT_EQ(::read(ready[0], &c, 1), 1);
        ::close(ready[0]);
        ASSERT_EQ(c, 'y') << "the peer could not unshare its network namespace";
    }

    // Runs a shell command in the peer's namespace.
    int peer(const std::string& cmd) {
        return sh("nsenter --net=/proc/" + std::to_string(peer_) + "/ns/net sh -c '" + cmd + "'");
    }

    // Polls the neighbour entry until `done(state)` or `limit` passes.
    NeighborInfo wait_neighbor(const IpAddr& ip, const std::function<bool(std::uint16_t)>& done,
                               std::chrono::milliseconds limit = std::chrono::seconds(5)) {
        auto end = Clock::now() + limit;
        NeighborInfo n;
        do {
            auto r = rtnl_->neighbor(ifindex_, ip);
            EXPECT_TRUE(r) << r.error();
            if (!r) break;
            n = *r;
            if (done(n.state)) break;
            ::poll(nullptr, 0, 10);  // a polling interval, not a synchronisation
        } while (Clock::now() < end);
        return n;
    }

    // Resolves ip through the kernel and expects the peer's answer.
    void expect_resolved(const IpAddr& ip) {
        auto r = rtnl_->resolve(ifindex_, ip);
        ASSERT_TRUE(r) << r.error();
        NeighborInfo n = wait_neighbor(ip, settled);
        EXPECT_EQ(n.state, NUD_REACHABLE) << ip.to_string() << " " << nud_state_name(n.state);
        EXPECT_EQ(n.mac, std::optional<MacAddr>(kPeerMac)) << ip.to_string();
    }

    // Takes changes, oldest first, until one satisfies `match` (returned) or 5 s
    // pass; the ones taken go to seen_, the ones after the match stay queued.
    std::optional<Change> wait_change(const std::function<bool(const Change&)>& match) {
        auto end = Clock::now() + std::chrono::seconds(5);
        for (;;) {
            for (const Change& c : rtnl_->poll_changes()) pending_.push_back(c);
            while (!pending_.empty()) {
                Change c = pending_.front();
                pending_.pop_front();
                seen_.push_back(c);
                if (match(c)) return c;
            }
            auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now());
            if (left.count() <= 0) return std::nullopt;
            pollfd p{rtnl_->fd(), POLLIN, 0};
            ::poll(&p, 1, static_cast<int>(left.count()));
        }
    }

    // Waits until veth0 has a link-local IPv6 address that passed duplicate
    // address detection: the kernel sends a neighbour solicitation that no
    // packet asked for (resolve()) only from such an address.
    bool wait_link_local() {
        auto end = Clock::now() + std::chrono::seconds(10);
        do {
            auto list = rtnl_->addresses(ifindex_);
            if (!list) return false;
            for (const auto& a : *list)
                if (a.addr.is_v6() && a.addr.raw()[0] == 0xfe && a.addr.raw()[1] == 0x80 &&
                    !a.tentative())
                    return true;
            ::poll(nullptr, 0, 20);  // a polling interval, not a synchronisation
        } while (Clock::now() < end);
        return false;
    }

    int index_of(const std::string& name) {
        auto l = rtnl_->link(name);
        return l ? l->index : 0;
    }

    // Waits until the link is operational in its namespace: the kernel
    // activates a new link's queue (and sets IF_OPER_UP) asynchronously, and
    // drops what is sent before.
    static bool wait_operational(Rtnl& rtnl, const std::string& name) {
        auto end = Clock::now() + std::chrono::seconds(5);
        do {
            auto l = rtnl.link(name);
            if (l && l->operstate == IF_OPER_UP) return true;
            ::poll(nullptr, 0, 10);  // a polling interval, not a synchronisation
        } while (Clock::now() < end);
        return false;
    }

    // An Rtnl opened in the peer's namespace.
    std::optional<Rtnl> open_in_peer() {
        std::string path = "/proc/" + std::to_string(peer_) + "/ns/net";
        int there = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
        int here = ::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
        std::optional<Rtnl> out;
        if (there >= 0 && here >= 0 && ::setns(there, CLONE_NEWNET) == 0) {
            auto r = Rtnl::open();
            if (r) out.emplace(std::move(*r));
            EXPECT_EQ(::setns(here, CLONE_NEWNET), 0);
        }
        if (there >= 0) ::close(there);
        if (here >= 0) ::close(here);
        return out;
    }

    int home_ = -1;
    pid_t peer_ = -1;
    int peer_hold_ = -1;
    int ifindex_ = 0;
    std::optional<Rtnl> rtnl_;
    std::deque<Change> pending_;
    std::vector<Change> seen_;
};

TEST_F(RtnlTest, LinkByNameAndIndex) {
    auto l = rtnl_->link("veth0");
    ASSERT_TRUE(l) << l.error();
    EXPECT_EQ(l->index, ifindex_);
    EXPECT_EQ(l->name, "veth0");
    EXPECT_EQ(l->mac, kOurMac);
    EXPECT_EQ(l->mtu, 1400u);
    EXPECT_TRUE(l->admin_up);
    EXPECT_TRUE(l->carrier);
    EXPECT_TRUE(l->up());
    auto same = rtnl_->link(ifindex_);
    ASSERT_TRUE(same) << same.error();
    EXPECT_EQ(same->name, "veth0");
    EXPECT_EQ(same->mac, kOurMac);
}

TEST_F(RtnlTest, LinkWithoutCarrierIsNotUp) {
    ASSERT_EQ(peer("ip link set veth1 down"), 0);
    auto l = rtnl_->link("veth0");
    ASSERT_TRUE(l) << l.error();
    EXPECT_TRUE(l->admin_up);
    EXPECT_FALSE(l->carrier);
    EXPECT_FALSE(l->up());
    ASSERT_EQ(sh("ip link set veth0 down"), 0);
    l = rtnl_->link("veth0");
    ASSERT_TRUE(l) << l.error();
    EXPECT_FALSE(l->admin_up);
}

TEST_F(RtnlTest, UnknownLinkIsAnErrorNamingIt) {
    auto l = rtnl_->link("nosuch0");
    ASSERT_FALSE(l);
    EXPECT_NE(l.error().find("nosuch0"), std::string::npos) << l.error();
    EXPECT_NE(l.error().find("No such device"), std::string::npos) << l.error();
    auto i = rtnl_->link(9999);
    ASSERT_FALSE(i);
    EXPECT_NE(i.error().find("No such device"), std::string::npos) << i.error();
    EXPECT_FALSE(rtnl_->link("a-name-too-long-for-linux"));
}

bool has_addr(const std::vector<AddrInfo>& list, const IpAddr& ip, int prefix) {
    for (const auto& a : list)
        if (a.addr == ip && a.prefix == prefix) return true;
    return false;
}

TEST_F(RtnlTest, AddressesFollowIpAddrAddAndDel) {
    auto a = rtnl_->addresses(ifindex_);
    ASSERT_TRUE(a) << a.error();
    EXPECT_TRUE(has_addr(*a, kOur4, 24));
    EXPECT_TRUE(has_addr(*a, kOur6, 64));
    EXPECT_FALSE(has_addr(*a, kPeer4, 24));  // the peer's, in the other namespace
    for (const auto& x : *a) {
        EXPECT_EQ(x.ifindex, ifindex_);
        if (x.addr == kOur6) {
            EXPECT_FALSE(x.tentative());
        }
    }
    ASSERT_EQ(sh("ip addr add 10.9.0.7/32 dev veth0"), 0);
    a = rtnl_->addresses(ifindex_);
    ASSERT_TRUE(a) << a.error();
    EXPECT_TRUE(has_addr(*a, *IpAddr::parse("10.9.0.7"), 32));
    ASSERT_EQ(sh("ip addr del 10.9.0.7/32 dev veth0"), 0);
    a = rtnl_->addresses(ifindex_);
    ASSERT_TRUE(a) << a.error();
    EXPECT_FALSE(has_addr(*a, *IpAddr::parse("10.9.0.7"), 32));
    // Loopback's are not veth0's.
    auto lo = rtnl_->addresses(index_of("lo"));
    ASSERT_TRUE(lo) << lo.error();
    EXPECT_TRUE(has_addr(*lo, *IpAddr::parse("127.0.0.1"), 8));
    EXPECT_FALSE(has_addr(*lo, kOur4, 24));
}

TEST_F(RtnlTest, TentativeAddressIsMarked) {
    // With duplicate address detection (no `nodad`) a new IPv6 address is
    // tentative until DAD ends (1 s after the first probe by default).
    ASSERT_EQ(sh("ip addr add fd00:9::5/64 dev veth0"), 0);
    auto a = rtnl_->addresses(ifindex_);
    ASSERT_TRUE(a) << a.error();
    bool found = false;
    for (const auto& x : *a) {
        if (x.addr != *IpAddr::parse("fd00:9::5")) continue;
        found = true;
        EXPECT_TRUE(x.tentative()) << "flags " << x.flags;
    }
    EXPECT_TRUE(found);
}

TEST_F(RtnlTest, RouteOnLinkAndViaGateway) {
    auto r = rtnl_->route(kPeer4);
    ASSERT_TRUE(r) << r.error();
    EXPECT_EQ(r->oif, ifindex_);
    EXPECT_FALSE(r->gateway);
    ASSERT_TRUE(r->prefsrc);
    EXPECT_EQ(*r->prefsrc, kOur4);
    EXPECT_EQ(r->next_hop(kPeer4), kPeer4);

    ASSERT_EQ(sh("ip route add 192.0.2.0/24 via 10.9.0.2"), 0);
    auto far = *IpAddr::parse("192.0.2.5");
    r = rtnl_->route(far);
    ASSERT_TRUE(r) << r.error();
    EXPECT_EQ(r->oif, ifindex_);
    ASSERT_TRUE(r->gateway);
    EXPECT_EQ(*r->gateway, kPeer4);
    EXPECT_EQ(r->next_hop(far), kPeer4);

    auto r6 = rtnl_->route(kPeer6);
    ASSERT_TRUE(r6) << r6.error();
    EXPECT_EQ(r6->oif, ifindex_);
    EXPECT_FALSE(r6->gateway);
    ASSERT_EQ(sh("ip -6 route add 2001:db8::/64 via fd00:9::2"), 0);
    r6 = rtnl_->route(*IpAddr::parse("2001:db8::7"));
    ASSERT_TRUE(r6) << r6.error();
    EXPECT_EQ(r6->oif, ifindex_);
    ASSERT_TRUE(r6->gateway);
    EXPECT_EQ(*r6->gateway, kPeer6);
}

TEST_F(RtnlTest, RouteToLinkLocalNamesTheLink) {
    const IpAddr link_local = *IpAddr::parse("fe80::1234");
    auto r = rtnl_->route(link_local, ifindex_);
    ASSERT_TRUE(r) << r.error();
    EXPECT_EQ(r->oif, ifindex_);
    EXPECT_FALSE(r->gateway);
    auto nowhere = rtnl_->route(link_local, 9999);
    EXPECT_FALSE(nowhere);
}

TEST_F(RtnlTest, NoRouteAndLocalAreErrors) {
    auto none = rtnl_->route(*IpAddr::parse("198.51.100.1"));  // no default route here
    ASSERT_FALSE(none);
    EXPECT_NE(none.error().find("198.51.100.1"), std::string::npos) << none.error();
    EXPECT_NE(none.error().find("unreachable"), std::string::npos) << none.error();
    auto local = rtnl_->route(kOur4);
    ASSERT_FALSE(local);
    EXPECT_NE(local.error().find("local"), std::string::npos) << local.error();
}

TEST_F(RtnlTest, NeighborFromIpNeighAdd) {
    auto unknown = rtnl_->neighbor(ifindex_, *IpAddr::parse("10.9.0.50"));
    ASSERT_TRUE(unknown) << unknown.error();
    EXPECT_EQ(unknown->state, NUD_NONE);
    EXPECT_FALSE(unknown->mac);

    ASSERT_EQ(sh("ip neigh add 10.9.0.50 lladdr 02:00:00:00:00:50 dev veth0"), 0);
    ASSERT_EQ(sh("ip neigh add fd00:9::50 lladdr 02:00:00:00:00:51 dev veth0"), 0);
    ASSERT_EQ(sh("ip neigh add 10.9.0.51 lladdr 02:00:00:00:00:52 dev veth0 nud stale"), 0);
    auto n = rtnl_->neighbor(ifindex_, *IpAddr::parse("10.9.0.50"));
    ASSERT_TRUE(n) << n.error();
    EXPECT_EQ(n->state, NUD_PERMANENT) << nud_state_name(n->state);
    ASSERT_TRUE(n->mac);
    EXPECT_EQ(*n->mac, *MacAddr::parse("02:00:00:00:00:50"));
    auto n6 = rtnl_->neighbor(ifindex_, *IpAddr::parse("fd00:9::50"));
    ASSERT_TRUE(n6) << n6.error();
    EXPECT_EQ(n6->state, NUD_PERMANENT);
    ASSERT_TRUE(n6->mac);
    EXPECT_EQ(*n6->mac, *MacAddr::parse("02:00:00:00:00:51"));
    auto stale = rtnl_->neighbor(ifindex_, *IpAddr::parse("10.9.0.51"));
    ASSERT_TRUE(stale) << stale.error();
    EXPECT_EQ(stale->state, NUD_STALE);
    EXPECT_TRUE(stale->mac);
    EXPECT_EQ(nud_state_name(NUD_STALE | NUD_NOARP), "STALE|NOARP");
    EXPECT_EQ(nud_state_name(NUD_NONE), "NONE");
}

// A packet socket on veth0 that sees the frames the kernel sends there (only
// ETH_P_ALL sockets see outgoing frames).
int capture_on(int ifindex) {
    int s = ::socket(AF_PACKET, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, htons(ETH_P_ALL));
    if (s < 0) return -1;
    sockaddr_ll sll{};
    sll.sll_family = AF_PACKET;
    sll.sll_protocol = htons(ETH_P_ALL);
    sll.sll_ifindex = ifindex;
    if (::bind(s, reinterpret_cast<sockaddr*>(&sll), sizeof sll) != 0) {
        ::close(s);
        return -1;
    }
    return s;
}

// The ARP requests for `target` sent from kOurMac that the capture holds.
int count_requests(int capture, const IpAddr& target) {
    int found = 0;
    std::byte buf[2048];
    for (ssize_t n; (n = ::recv(capture, buf, sizeof buf, 0)) > 0;) {
        auto e = wire::parse_ethernet(std::span<const std::byte>(buf, static_cast<size_t>(n)));
        if (!e || e->repr.src != kOurMac || e->repr.ethertype != wire::kEtherTypeArp) continue;
        auto arp = wire::parse_arp(e->payload);
        if (arp && arp->op == wire::ArpOp::kRequest && IpAddr(arp->target_ip) == target &&
            IpAddr(arp->sender_ip) == kOur4)
            ++found;
    }
    return found;
}

TEST_F(RtnlTest, ResolveMakesTheKernelAskAndThePeerAnswer) {
    int capture = capture_on(ifindex_);
    ASSERT_GE(capture, 0);
    auto before = rtnl_->neighbor(ifindex_, kPeer4);
    ASSERT_TRUE(before) << before.error();
    EXPECT_EQ(before->state, NUD_NONE);
    expect_resolved(kPeer4);
    // The kernel, not we, sent the request: it is on the wire from veth0.
    EXPECT_GE(count_requests(capture, kPeer4), 1);
    ::close(capture);
    // A second resolve of a reachable entry leaves it alone.
    ASSERT_TRUE(rtnl_->resolve(ifindex_, kPeer4));
    auto again = rtnl_->neighbor(ifindex_, kPeer4);
    ASSERT_TRUE(again) << again.error();
    EXPECT_EQ(again->state, NUD_REACHABLE) << nud_state_name(again->state);
}

// The neighbour solicitations veth0 sent for `target` (from kOurMac).
int count_solicitations(int capture, const IpAddr& target) {
    constexpr std::size_t kIp6 = 14;        // after the Ethernet header
    constexpr std::size_t kIcmp = 14 + 40;  // after the IPv6 header
    int found = 0;
    std::byte buf[2048];
    for (ssize_t n; (n = ::recv(capture, buf, sizeof buf, 0)) > 0;) {
        auto e = wire::parse_ethernet(std::span<const std::byte>(buf, static_cast<size_t>(n)));
        if (!e || e->repr.src != kOurMac || static_cast<std::size_t>(n) < kIcmp + 24) continue;
        const auto* b = reinterpret_cast<const std::uint8_t*>(buf);
        if (b[12] != 0x86 || b[13] != 0xdd || b[kIp6 + 6] != 58 || b[kIcmp] != 135) continue;
        if (std::memcmp(b + kIcmp + 8, target.raw().data(), 16) == 0) ++found;
    }
    return found;
}

TEST_F(RtnlTest, ResolveIpv6) {
    ASSERT_TRUE(wait_link_local());
    int capture = capture_on(ifindex_);
    ASSERT_GE(capture, 0);
    expect_resolved(kPeer6);
    EXPECT_GE(count_solicitations(capture, kPeer6), 1);
    ::close(capture);
}

TEST_F(RtnlTest, ResolveRefreshesAStaleEntry) {
    // DELAY lasts delay_first_probe_time (5 s by default) before the unicast probe.
    ASSERT_EQ(sh("sysctl -qw net.ipv4.neigh.veth0.delay_first_probe_time=1"), 0);
    expect_resolved(kPeer4);
    ASSERT_EQ(
        sh("ip neigh change 10.9.0.2 dev veth0 lladdr " + kPeerMac.to_string() + " nud stale"), 0);
    auto stale = rtnl_->neighbor(ifindex_, kPeer4);
    ASSERT_TRUE(stale) << stale.error();
    ASSERT_EQ(stale->state, NUD_STALE);
    int capture = capture_on(ifindex_);
    ASSERT_GE(capture, 0);
    ASSERT_TRUE(rtnl_->resolve(ifindex_, kPeer4));
    auto delay = rtnl_->neighbor(ifindex_, kPeer4);
    ASSERT_TRUE(delay) << delay.error();
    EXPECT_EQ(delay->state, NUD_DELAY) << nud_state_name(delay->state);
    EXPECT_EQ(delay->mac, std::optional<MacAddr>(kPeerMac));  // usable meanwhile
    NeighborInfo n = wait_neighbor(kPeer4, settled);
    EXPECT_EQ(n.state, NUD_REACHABLE) << nud_state_name(n.state);
    EXPECT_GE(count_requests(capture, kPeer4), 1);  // the unicast probe of PROBE
    ::close(capture);
}

TEST_F(RtnlTest, ResolveOfNobodyFails) {
    const IpAddr nobody4 = *IpAddr::parse("10.9.0.99");
    const IpAddr nobody6 = *IpAddr::parse("fd00:9::99");
    ASSERT_TRUE(rtnl_->resolve(ifindex_, nobody4));
    ASSERT_TRUE(rtnl_->resolve(ifindex_, nobody6));
    auto first = rtnl_->neighbor(ifindex_, nobody4);
    ASSERT_TRUE(first) << first.error();
    // Probing, or already given up (3 probes 100 ms apart).
    EXPECT_TRUE(first->state == NUD_INCOMPLETE || first->state == NUD_FAILED)
        << nud_state_name(first->state);
    NeighborInfo n = wait_neighbor(nobody4, settled);
    EXPECT_EQ(n.state, NUD_FAILED) << nud_state_name(n.state);
    EXPECT_FALSE(n.mac);
    NeighborInfo n6 = wait_neighbor(nobody6, settled);
    EXPECT_EQ(n6.state, NUD_FAILED) << nud_state_name(n6.state);
    // A failed entry is asked for again.
    int capture = capture_on(ifindex_);
    ASSERT_GE(capture, 0);
    ASSERT_TRUE(rtnl_->resolve(ifindex_, nobody4));
    n = wait_neighbor(nobody4, [](std::uint16_t s) { return s == NUD_FAILED; });
    EXPECT_EQ(n.state, NUD_FAILED);
    EXPECT_GE(count_requests(capture, nobody4), 1);
    ::close(capture);
}

TEST_F(RtnlTest, ResolveLeavesAPermanentEntryAlone) {
    const IpAddr fixed = *IpAddr::parse("10.9.0.60");
    ASSERT_EQ(sh("ip neigh add 10.9.0.60 lladdr 02:00:00:00:00:60 dev veth0"), 0);
    ASSERT_TRUE(rtnl_->resolve(ifindex_, fixed));
    auto n = rtnl_->neighbor(ifindex_, fixed);
    ASSERT_TRUE(n) << n.error();
    EXPECT_EQ(n->state, NUD_PERMANENT) << nud_state_name(n->state);
    ASSERT_TRUE(n->mac);
    EXPECT_EQ(*n->mac, *MacAddr::parse("02:00:00:00:00:60"));
}

TEST_F(RtnlTest, ResolveOnAnUnknownLinkIsAnError) {
    auto r = rtnl_->resolve(9999, kPeer4);
    ASSERT_FALSE(r);
    EXPECT_NE(r.error().find("No such device"), std::string::npos) << r.error();
}

TEST_F(RtnlTest, NotifiesAddressesAddedAndRemoved) {
    ASSERT_TRUE(rtnl_->subscribe());
    const IpAddr extra4 = *IpAddr::parse("10.9.0.8");
    const IpAddr extra6 = *IpAddr::parse("fd00:9::8");
    ASSERT_EQ(sh("ip addr add 10.9.0.8/24 dev veth0 && ip addr add fd00:9::8/64 dev veth0 nodad"),
              0);
    for (const IpAddr& ip : {extra4, extra6}) {
        auto c = wait_change(
            [&](const Change& x) { return x.kind == Kind::kAddrAdded && x.addr == ip; });
        ASSERT_TRUE(c) << ip.to_string();
        EXPECT_EQ(c->ifindex, ifindex_);
        EXPECT_EQ(c->prefix, ip.is_v4() ? 24 : 64);
    }
    ASSERT_EQ(sh("ip addr del 10.9.0.8/24 dev veth0 && ip addr del fd00:9::8/64 dev veth0"), 0);
    for (const IpAddr& ip : {extra4, extra6}) {
        auto c = wait_change(
            [&](const Change& x) { return x.kind == Kind::kAddrRemoved && x.addr == ip; });
        ASSERT_TRUE(c) << ip.to_string();
        EXPECT_EQ(c->ifindex, ifindex_);
    }
}

TEST_F(RtnlTest, TentativeAddressIsAddedWhenDadEnds) {
    ASSERT_TRUE(rtnl_->subscribe());
    const IpAddr fresh = *IpAddr::parse("fd00:9::5");
    ASSERT_EQ(sh("ip addr add fd00:9::5/64 dev veth0"), 0);  // with DAD
    auto c =
        wait_change([&](const Change& x) { return x.kind == Kind::kAddrAdded && x.addr == fresh; });
    ASSERT_TRUE(c);
    EXPECT_EQ(c->flags & IFA_F_TENTATIVE, 0u);
    // When it is reported the kernel says it is usable.
    auto a = rtnl_->addresses(ifindex_);
    ASSERT_TRUE(a) << a.error();
    bool usable = false;
    for (const auto& x : *a) usable = usable || (x.addr == fresh && !x.tentative());
    EXPECT_TRUE(usable);
}

TEST_F(RtnlTest, DuplicateAddressIsNeverAdded) {
    ASSERT_TRUE(wait_link_local());  // DAD probes leave only once the link is ready
    ASSERT_TRUE(rtnl_->subscribe());
    const IpAddr taken = *IpAddr::parse("fd00:9::6");
    ASSERT_EQ(peer("ip addr add fd00:9::6/64 dev veth1 nodad"), 0);
    ASSERT_EQ(sh("ip addr add fd00:9::6/64 dev veth0"), 0);
    bool failed = false;
    auto end = Clock::now() + std::chrono::seconds(5);
    while (!failed && Clock::now() < end) {
        auto a = rtnl_->addresses(ifindex_);
        ASSERT_TRUE(a) << a.error();
        for (const auto& x : *a)
            if (x.addr == taken && (x.flags & IFA_F_DADFAILED) != 0) failed = x.tentative();
        if (!failed) ::poll(nullptr, 0, 20);  // a polling interval, not a synchronisation
    }
    ASSERT_TRUE(failed) << "the peer owns the address: DAD should fail";
    ASSERT_EQ(sh("ip addr add 10.9.0.10/32 dev veth0"), 0);
    ASSERT_TRUE(wait_change([](const Change& x) {
        return x.kind == Kind::kAddrAdded && x.addr == *IpAddr::parse("10.9.0.10");
    }));
    for (const Change& c : seen_) EXPECT_FALSE(c.kind == Kind::kAddrAdded && c.addr == taken);
}

TEST_F(RtnlTest, NotifiesLinkDownAndUp) {
    ASSERT_TRUE(rtnl_->subscribe());
    ASSERT_EQ(sh("ip link set veth0 down"), 0);
    auto link_change = [&](const Change& x) {
        return x.ifindex == ifindex_ && (x.kind == Kind::kLinkUp || x.kind == Kind::kLinkDown);
    };
    auto down = wait_change(link_change);
    ASSERT_TRUE(down);
    EXPECT_EQ(down->kind, Kind::kLinkDown) << to_string(down->kind);
    EXPECT_EQ(down->mac, kOurMac);
    // Administratively down removes the IPv6 addresses (keep_addr_on_down is 0
    // by default), the IPv4 ones stay.
    auto our6_gone = [&](const Change& x) {
        return x.kind == Kind::kAddrRemoved && x.addr == kOur6;
    };
    EXPECT_TRUE(std::any_of(seen_.begin(), seen_.end(), our6_gone) || wait_change(our6_gone));
    ASSERT_EQ(sh("ip link set veth0 up"), 0);
    auto up = wait_change(link_change);
    ASSERT_TRUE(up);
    EXPECT_EQ(up->kind, Kind::kLinkUp) << to_string(up->kind);
    // The peer's side going down takes our carrier: down again, without our doing.
    ASSERT_EQ(peer("ip link set veth1 down"), 0);
    auto lost = wait_change(link_change);
    ASSERT_TRUE(lost);
    EXPECT_EQ(lost->kind, Kind::kLinkDown) << to_string(lost->kind);
    // The loopback link, never touched, reports nothing.
    int lo = index_of("lo");
    for (const Change& c : seen_) EXPECT_NE(c.ifindex, lo) << to_string(c.kind);
}

TEST_F(RtnlTest, LinkChangeWithoutAnEdgeIsQuiet) {
    ASSERT_TRUE(rtnl_->subscribe());
    // An MTU change is an RTM_NEWLINK of a link that stays up: no kLinkUp.
    ASSERT_EQ(sh("ip link set veth0 mtu 1300 && ip addr add 10.9.0.9/32 dev veth0"), 0);
    auto marker = wait_change([](const Change& x) {
        return x.kind == Kind::kAddrAdded && x.addr == *IpAddr::parse("10.9.0.9");
    });
    ASSERT_TRUE(marker);
    auto l = rtnl_->link(ifindex_);
    ASSERT_TRUE(l) << l.error();
    EXPECT_EQ(l->mtu, 1300u);
    for (const Change& c : seen_)
        EXPECT_TRUE(c.kind != Kind::kLinkUp && c.kind != Kind::kLinkDown) << to_string(c.kind);
}

TEST_F(RtnlTest, NotifiesNeighbors) {
    ASSERT_TRUE(wait_link_local());
    ASSERT_TRUE(rtnl_->subscribe());
    ASSERT_TRUE(rtnl_->resolve(ifindex_, kPeer4));
    auto c = wait_change([&](const Change& x) {
        return x.kind == Kind::kNeighbor && x.addr == kPeer4 && x.state == NUD_REACHABLE;
    });
    ASSERT_TRUE(c);
    EXPECT_EQ(c->ifindex, ifindex_);
    EXPECT_EQ(c->mac, kPeerMac);
    ASSERT_TRUE(rtnl_->resolve(ifindex_, kPeer6));
    c = wait_change([&](const Change& x) {
        return x.kind == Kind::kNeighbor && x.addr == kPeer6 && x.state == NUD_REACHABLE;
    });
    ASSERT_TRUE(c);
    EXPECT_EQ(c->mac, kPeerMac);
    ASSERT_EQ(sh("ip neigh del 10.9.0.2 dev veth0"), 0);
    c = wait_change(
        [&](const Change& x) { return x.kind == Kind::kNeighborRemoved && x.addr == kPeer4; });
    ASSERT_TRUE(c);
    EXPECT_EQ(c->ifindex, ifindex_);
    const IpAddr nobody = *IpAddr::parse("10.9.0.99");
    ASSERT_TRUE(rtnl_->resolve(ifindex_, nobody));
    c = wait_change([&](const Change& x) {
        return x.kind == Kind::kNeighbor && x.addr == nobody && x.state == NUD_FAILED;
    });
    ASSERT_TRUE(c);
    EXPECT_EQ(c->mac, MacAddr{});
}

TEST_F(RtnlTest, OverrunIsReported) {
    ASSERT_TRUE(rtnl_->subscribe());
    int tiny = 1;  // the kernel rounds it up to its minimum, a few KiB
    ASSERT_EQ(::setsockopt(rtnl_->fd(), SOL_SOCKET, SO_RCVBUF, &tiny, sizeof tiny), 0);
    ASSERT_EQ(sh("for i in $(seq 10 109); do echo addr add 10.9.1.$i/32 dev veth0; done | "
                 "ip -batch -"),
              0);
    auto c = wait_change([](const Change& x) { return x.kind == Kind::kOverrun; });
    ASSERT_TRUE(c) << "100 notifications fit in the smallest receive buffer?";
    // Reading goes on after the overrun.
    ASSERT_EQ(sh("ip addr add 10.9.2.1/32 dev veth0"), 0);
    auto later = wait_change([](const Change& x) {
        return x.kind == Kind::kAddrAdded && x.addr == *IpAddr::parse("10.9.2.1");
    });
    EXPECT_TRUE(later);
}

}  // namespace
}  // namespace iwcm::io
