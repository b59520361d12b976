// Tests of sharding: the flow hash and the port filter (include/iwcm/shard.hpp),
// the frame ring (src/io/threads/frame_ring.hpp) and the in-memory network on N
// threads (src/io/threads/shard_net.hpp). Read shard_net.hpp's file comment first.
#include "io/threads/shard_net.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <set>
#include <thread>
#include <vector>

#include "io/threads/frame_ring.hpp"
#include "io/threads/shard_links.hpp"
#include "iwcm/shard.hpp"

namespace iwcm::io {
namespace {

using Bytes = std::vector<std::byte>;

MacAddr mac_of(std::uint8_t n) {
    return {{0x02, 0x00, 0x00, 0x00, 0x00, n}};
}

void put16(Bytes& f, std::uint16_t v) {
    f.push_back(std::byte(v >> 8));
    f.push_back(std::byte(v & 0xff));
}

// A TCP frame from `src` to `dst` (IPv4 or IPv6, optionally tagged); only the
// fields steering reads are meaningful.
Bytes tcp_frame(const Endpoint& src, const Endpoint& dst, bool vlan = false) {
    Bytes f(12, std::byte{0x02});
    if (vlan) put16(f, 0x8100), put16(f, 7);
    const bool v4 = src.addr.is_v4();
    put16(f, v4 ? 0x0800 : 0x86dd);
    if (v4) {
        Bytes ip{std::byte{0x45}, {}, {}, std::byte{40}, {}, {}, std::byte{0x40}, {}, std::byte{64},
                 std::byte{6},    {}, {}};
        f.insert(f.end(), ip.begin(), ip.end());
        for (int i = 0; i < 4; ++i) f.push_back(std::byte{src.addr.raw()[i]});
        for (int i = 0; i < 4; ++i) f.push_back(std::byte{dst.addr.raw()[i]});
    } else {
        Bytes ip{std::byte{0x60}, {}, {}, {}, {}, std::byte{20}, std::byte{6}, std::byte{64}};
        f.insert(f.end(), ip.begin(), ip.end());
        for (auto b : src.addr.raw()) f.push_back(std::byte{b});
        for (auto b : dst.addr.raw()) f.push_back(std::byte{b});
    }
    put16(f, src.port);
    put16(f, dst.port);
    f.resize(f.size() + 16);
    return f;
}

const Endpoint kA{Ipv4Addr{{10, 0, 0, 1}}, 50000};
const Endpoint kB{Ipv4Addr{{10, 0, 0, 2}}, 5000};

TEST(FlowHash, SymmetricAndTheSameFromFramesAndEndpoints) {
    const Endpoint a6{*IpAddr::parse("fd00::1"), 49152};
    const Endpoint b6{*IpAddr::parse("fd00::2:2"), 4791};
    for (auto [x, y] : {std::pair{kA, kB}, std::pair{a6, b6}}) {
        for (std::uint64_t key : {std::uint64_t{0}, std::uint64_t{0x1234567890abcdef}}) {
            const std::uint64_t h = flow_hash(x, y, key);
            EXPECT_EQ(h, flow_hash(y, x, key));
            std::uint64_t from_frame = 0;
            for (bool vlan : {false, true}) {
                ASSERT_TRUE(frame_flow_hash(tcp_frame(x, y, vlan), key, from_frame));
                EXPECT_EQ(from_frame, h);
                ASSERT_TRUE(frame_flow_hash(tcp_frame(y, x, vlan), key, from_frame));
                EXPECT_EQ(from_frame, h);
            }
        }
    }
    EXPECT_NE(flow_hash(kA, kB), flow_hash(kA, kB, 1));
    EXPECT_NE(flow_hash(kA, kB), flow_hash({kA.addr, 50001}, kB));
    // The inline IPv4 form the core's table uses is the same function.
    for (std::uint16_t port = 1024; port < 1100; ++port) {
        const Endpoint x{kA.addr, port};
        EXPECT_EQ(flow_hash_v4(x, kB, 0x55aa), flow_hash(x, kB, 0x55aa));
    }
}

TEST(FlowHash, FramesWithoutATupleBelongToShardZero) {
    Bytes arp(60, std::byte{0});
    arp[12] = std::byte{0x08}, arp[13] = std::byte{0x06};
    std::uint64_t h = 0;
    EXPECT_FALSE(frame_flow_hash(arp, 0, h));
    Bytes frag = tcp_frame(kA, kB);
    frag[14 + 6] = std::byte{0x20};  // more fragments
    EXPECT_FALSE(frame_flow_hash(frag, 0, h));
    Bytes udp = tcp_frame(kA, kB);
    udp[14 + 9] = std::byte{17};
    EXPECT_FALSE(frame_flow_hash(udp, 0, h));
    EXPECT_FALSE(frame_flow_hash(Bytes(30, std::byte{0}), 0, h));
    // Find a flow that hashes elsewhere: a UDP frame of it still goes to 0.
    for (std::uint16_t p = 49152; p < 49200; ++p) {
        Endpoint a{kA.addr, p};
        if (shard_of(flow_hash(a, kB), 4) == 0) continue;
        Bytes u = tcp_frame(a, kB);
        u[14 + 9] = std::byte{17};
        EXPECT_EQ(frame_shard(u, 4), 0u);
        EXPECT_NE(frame_shard(tcp_frame(a, kB), 4), 0u);
        return;
    }
    FAIL() << "no port of 48 hashed off shard 0";
}

// An ICMP (IPv4) or ICMPv6 message of `type` from a router, quoting `quoted`
// (a frame of tcp_frame's, its Ethernet header left out) as an error does.
Bytes icmp_frame(const Bytes& quoted, bool v4, std::uint8_t type) {
    Bytes f(12, std::byte{0x02});
    put16(f, v4 ? 0x0800 : 0x86dd);
    if (v4) {
        Bytes ip{std::byte{0x45},
                 {},
                 {},
                 {},
                 {},
                 {},
                 std::byte{0x40},
                 {},
                 std::byte{64},
                 std::byte{1},
                 {},
                 {},
                 std::byte{10},
                 {},
                 {},
                 std::byte{254},
                 std::byte{10},
                 {},
                 {},
                 std::byte{1}};
        f.insert(f.end(), ip.begin(), ip.end());
    } else {
        Bytes ip(40, std::byte{0});
        ip[0] = std::byte{0x60}, ip[6] = std::byte{58}, ip[7] = std::byte{64};
        ip[8] = std::byte{0xfe}, ip[23] = std::byte{0xfe};  // a router's address
        ip[24] = std::byte{0xfd}, ip[39] = std::byte{1};
        f.insert(f.end(), ip.begin(), ip.end());
    }
    f.push_back(std::byte{type});
    f.resize(f.size() + 7);  // code, checksum, unused / MTU
    f.insert(f.end(), quoted.begin() + 14, quoted.end());
    return f;
}

TEST(FlowHash, IcmpErrorsFollowTheConnectionTheyQuote) {
    const Endpoint a6{*IpAddr::parse("fd00::1"), 49152};
    const Endpoint b6{*IpAddr::parse("fd00::2:2"), 4791};
    for (auto [x, y] : {std::pair{kA, kB}, std::pair{a6, b6}}) {
        const bool v4 = x.addr.is_v4();
        const std::uint8_t unreachable = v4 ? 3 : 1, too_big = v4 ? 3 : 2, echo = v4 ? 8 : 128;
        const std::uint8_t exceeded = v4 ? 11 : 3;
        std::uint64_t h = 0;
        for (std::uint8_t type : {unreachable, too_big, exceeded}) {
            // The quote is of a segment we sent: x -> y, or y -> x.
            ASSERT_TRUE(frame_flow_hash(icmp_frame(tcp_frame(x, y), v4, type), 7, h));
            EXPECT_EQ(h, flow_hash(x, y, 7));
            ASSERT_TRUE(frame_flow_hash(icmp_frame(tcp_frame(y, x), v4, type), 7, h));
            EXPECT_EQ(h, flow_hash(x, y, 7));
        }
        // Not errors, or not quoting TCP, or not whole: no 4-tuple.
        EXPECT_FALSE(frame_flow_hash(icmp_frame(tcp_frame(x, y), v4, echo), 0, h));
        EXPECT_FALSE(frame_flow_hash(icmp_frame(tcp_frame(x, y), v4, v4 ? 0 : 135), 0, h));
        Bytes udp = tcp_frame(x, y);
        udp[14 + (v4 ? 9 : 6)] = std::byte{17};
        EXPECT_FALSE(frame_flow_hash(icmp_frame(udp, v4, unreachable), 0, h));
        const Bytes nested =
            icmp_frame(icmp_frame(tcp_frame(x, y), v4, unreachable), v4, unreachable);
        EXPECT_FALSE(frame_flow_hash(nested, 0, h));
        Bytes cut = icmp_frame(tcp_frame(x, y), v4, unreachable);
        cut.resize(14 + (v4 ? 20 : 40) + 8 + (v4 ? 20 : 40) + 3);  // 3 bytes of the ports
        EXPECT_FALSE(frame_flow_hash(cut, 0, h));
    }
    // On 4 shards, the error about a connection of shard s goes to s.
    int off_zero = 0;
    for (std::uint16_t p = 49152; p < 49200; ++p) {
        const Endpoint a{kA.addr, p};
        const std::uint32_t s = frame_shard(tcp_frame(a, kB), 4);
        EXPECT_EQ(frame_shard(icmp_frame(tcp_frame(a, kB), true, 3), 4), s);
        off_zero += s != 0;
    }
    EXPECT_GT(off_zero, 0);
}

TEST(FlowHash, EphemeralPortsSpreadEvenly) {
    for (std::uint32_t n : {2u, 3u, 4u, 8u}) {
        std::vector<std::size_t> per(n);
        for (std::uint32_t p = 49152; p <= 65535; ++p)
            ++per[shard_of(flow_hash({kA.addr, static_cast<std::uint16_t>(p)}, kB), n)];
        const double fair = 16384.0 / n;
        for (std::size_t c : per) {
            EXPECT_GT(c, fair * 0.9) << n << " shards";
            EXPECT_LT(c, fair * 1.1) << n << " shards";
        }
    }
}

// Distinct unordered port pairs give distinct flow hashes (between two addresses): an active
// side's ephemeral ports against many listeners' ports, as the bench holds a million
// connections. The XOR and the AND of the two ports, the port word before, gave these
// 65 536 connections 13 416 hashes, up to 64 connections on one (hence on one table slot).
TEST(FlowHash, DistinctPortPairsNeverShareAHash) {
    std::set<std::uint64_t> seen;
    std::size_t n = 0;
    for (std::uint32_t q = 5001; q <= 5064; ++q) {
        for (std::uint32_t p = 49152; p < 49152 + 1024; ++p, ++n) {
            const Endpoint a{kA.addr, static_cast<std::uint16_t>(p)};
            const Endpoint b{kB.addr, static_cast<std::uint16_t>(q)};
            seen.insert(flow_hash(a, b));
            EXPECT_EQ(flow_hash(a, b), flow_hash(b, a));
        }
    }
    EXPECT_EQ(seen.size(), n);
}

// The ephemeral port of a SYN (IPv4 or IPv6, untagged).
std::uint16_t syn_port(std::span<const std::byte> syn) {
    const std::size_t off = std::to_integer<unsigned>(syn[12]) == 0x86 ? 54 : 34;
    return static_cast<std::uint16_t>((std::to_integer<unsigned>(syn[off]) << 8) |
                                      std::to_integer<unsigned>(syn[off + 1]));
}

// The core of a shard (CoreConfig::shard_index, shard_count, flow_key) picks ports whose
// frames its shard owns; so does one with the older port_filter hook.
TEST(PortFilter, EphemeralPortsHashBackToTheShard) {
    constexpr std::uint32_t kShards = 3;
    const Endpoint b6{*IpAddr::parse("fd00::2:2"), 4791};
    const IpAddr a6 = *IpAddr::parse("fd00::1");
    for (int how = 0; how < 5; ++how) {
        const bool v6 = how == 3;
        const std::uint64_t key = how == 2 || how == 3 ? 0x1234567890abcdefULL : 0;
        for (std::uint32_t s = 0; s < kShards; ++s) {
            CoreConfig c;
            if (how == 4) {
                c.port_filter = shard_port_filter(s, kShards);
            } else {
                c.shard_index = s;
                c.shard_count = kShards;
                c.flow_key = key;
            }
            Core core(c);
            ASSERT_TRUE(core.add_address(v6 ? a6 : kA.addr));
            ConnectParams p;
            p.local = {v6 ? a6 : kA.addr, 0};
            p.remote = v6 ? b6 : kB;
            p.remote_mac = mac_of(2);
            std::set<std::uint16_t> ports;
            for (int i = 0; i < 300; ++i) {
                ASSERT_TRUE(core.connect(at_ms(1), p)) << how;
                auto syn = core.poll_transmit();
                ASSERT_TRUE(syn);
                EXPECT_EQ(frame_shard(*syn, kShards, key), s) << how;
                ports.insert(syn_port(*syn));
            }
            EXPECT_EQ(ports.size(), 300u);  // a new port each time
        }
    }
}

// Core::receive(now, frame, flow_hash) finds the connection by the driver's hash: the right
// hash completes the handshake, a wrong one misses the connection (so the hash is used).
TEST(ShardCore, ReceiveTakesTheDriversFlowHash) {
    for (const bool right : {true, false}) {
        for (const std::uint64_t key : {std::uint64_t{0}, std::uint64_t{0xfeedfacecafebeef}}) {
            CoreConfig ca;
            ca.mac = mac_of(1);
            ca.flow_key = key;
            CoreConfig cb = ca;
            cb.mac = mac_of(2);
            Core a(ca);
            Core b(cb);
            ASSERT_TRUE(a.add_address(kA.addr));
            ASSERT_TRUE(b.add_address(kB.addr));
            ListenParams lp;
            lp.local = kB;
            ASSERT_TRUE(b.listen(lp));
            ConnectParams p;
            p.local = {kA.addr, 0};
            p.remote = kB;
            p.remote_mac = mac_of(2);
            ASSERT_TRUE(a.connect(at_ms(1), p));
            auto syn = a.poll_transmit();
            ASSERT_TRUE(syn);
            const Bytes syn_bytes(syn->begin(), syn->end());
            std::uint64_t h = 0;
            ASSERT_TRUE(frame_flow_hash(syn_bytes, key, h));
            b.receive(at_ms(2), syn_bytes, h);
            auto syn_ack = b.poll_transmit();
            ASSERT_TRUE(syn_ack);
            const Bytes reply(syn_ack->begin(), syn_ack->end());
            ASSERT_TRUE(frame_flow_hash(reply, key, h));
            EXPECT_EQ(a.stats().resets_sent, 0u);
            a.receive(at_ms(3), reply, right ? h : ~h);
            // The answer: the handshake's ACK, or a reset for a segment of no connection.
            auto next = a.poll_transmit();
            ASSERT_TRUE(next);
            const bool rst = (std::to_integer<unsigned>((*next)[14 + 20 + 13]) & 0x04) != 0;
            EXPECT_EQ(rst, !right) << key;
            EXPECT_EQ(a.stats().resets_sent, right ? 0u : 1u) << key;
        }
    }
}

TEST(PortFilter, RunsOutOfPortsWhenNoneHashesBack) {
    CoreConfig c;
    c.port_filter = [](const Endpoint&, const Endpoint&) { return false; };
    Core core(c);
    ASSERT_TRUE(core.add_address(kA.addr));
    ConnectParams p;
    p.local = {kA.addr, 0};
    p.remote = kB;
    auto h = core.connect(at_ms(1), p);
    ASSERT_FALSE(h);
    EXPECT_EQ(h.error(), ApiError::kNoPorts);
}

TEST(FrameRing, CarriesFramesInOrderAndOnlyOncePublished) {
    FrameRing r(3, 64);  // rounded up to 4 slots
    EXPECT_EQ(r.capacity(), 4u);
    for (std::uint8_t i = 0; i < 4; ++i) EXPECT_TRUE(r.push(Bytes(i + 1, std::byte{i})));
    EXPECT_FALSE(r.push(Bytes(1)));                // full
    EXPECT_FALSE(r.front());                       // nothing published yet
    EXPECT_FALSE(FrameRing(1, 8).push(Bytes(9)));  // larger than a slot
    r.publish();
    for (std::uint8_t i = 0; i < 2; ++i) {
        auto f = r.front();
        ASSERT_TRUE(f);
        EXPECT_EQ(f->size(), i + 1u);
        EXPECT_EQ((*f)[0], std::byte{i});
        r.pop();
    }
    EXPECT_FALSE(r.push(Bytes(1)));  // popped but not released
    r.release();
    EXPECT_TRUE(r.push(Bytes(5, std::byte{9})));
    r.publish();
    std::vector<std::size_t> lens;
    while (auto f = r.front()) lens.push_back(f->size()), r.pop();
    EXPECT_EQ(lens, (std::vector<std::size_t>{3, 4, 5}));
}

TEST(ShardLinks, FullRingsBackUpInOrderAndDropBeyondTheBound) {
    ShardLinks links(2, 2, 64, 3);  // rings of 2 slots, 3 frames of backlog
    for (std::uint8_t i = 0; i < 5; ++i) EXPECT_TRUE(links.send(0, 1, Bytes(4, std::byte{i})));
    EXPECT_FALSE(links.send(0, 1, Bytes(4, std::byte{9})));  // ring and backlog full
    EXPECT_FALSE(links.send(1, 0, Bytes(65)));               // larger than a slot
    EXPECT_EQ(links.dropped(0), 1u);
    EXPECT_EQ(links.dropped(1), 1u);
    EXPECT_EQ(links.backlogged(0), 3u);
    std::vector<std::uint32_t> woken;
    links.publish(0, [&](std::uint32_t to) { woken.push_back(to); });
    EXPECT_EQ(woken, std::vector<std::uint32_t>{1});
    std::vector<std::uint8_t> got;
    auto take = [&](std::span<const std::byte> f) {
        got.push_back(std::to_integer<std::uint8_t>(f[0]));
    };
    for (int round = 0; round < 10 && got.size() < 5; ++round) {
        links.receive(1, take);
        links.flush(0);
        links.publish(0, [](std::uint32_t) {});
    }
    EXPECT_EQ(got, (std::vector<std::uint8_t>{0, 1, 2, 3, 4}));  // sent order kept
    EXPECT_EQ(links.receive(1, take), 0u);
}

// The application of one shard: the client host (0) connects, the server
// host (1) accepts; events are counted; a frame a core receives whose owner
// is another shard is counted as misrouted (through the trace hook).
class ShardApp {
public:
    static constexpr std::uint16_t kPort = 5000;

    ShardApp(ShardNet& net, std::uint32_t s) : net_(net), s_(s) {
        for (std::size_t h = 0; h < 2; ++h) {
            net.core(s, h).set_trace([this](const TraceRecord& t) {
                if (t.kind == TraceRecord::Kind::kFrameIn &&
                    frame_shard(t.frame, net_.shards()) != s_)
                    ++misrouted;
            });
        }
    }

    void connect(std::size_t n) {
        ConnectParams p;
        p.local = {ip(1), 0};
        p.remote = {ip(2), kPort};
        p.remote_mac = mac_of(2);
        p.mpa_revision = 2;
        for (std::size_t i = 0; i < n; ++i) {
            auto h = net_.core(s_, 0).connect(now_, p);
            if (!h) {
                ++errors;
                continue;
            }
            handles.push_back(*h);
        }
    }

    void disconnect_all() {
        for (ConnHandle h : handles)
            if (!net_.core(s_, 0).disconnect(now_, h, DisconnectMode::kAbortive)) ++errors;
    }

    // One pass of the network and the events of both hosts; frames moved.
    std::size_t step() {
        std::size_t moved = net_.poll(s_, now_);
        while (auto e = net_.core(s_, 0).poll_event()) {
            if (e->type == EventType::kEstablished)
                ++established_a;
            else if (e->type != EventType::kDisconnected)
                ++errors;
        }
        while (auto e = net_.core(s_, 1).poll_event()) {
            if (e->type == EventType::kConnectRequest) {
                ++requests_b;
                if (!net_.core(s_, 1).accept(now_, e->conn, {})) ++errors;
            } else if (e->type == EventType::kEstablished) {
                ++established_b;
            } else if (e->type == EventType::kDisconnected) {
                ++disconnected_b;
            } else {
                ++errors;
            }
        }
        return moved;
    }

    static IpAddr ip(std::uint8_t n) { return Ipv4Addr{{10, 0, 0, n}}; }

    std::vector<ConnHandle> handles;
    std::size_t established_a = 0, established_b = 0, requests_b = 0, disconnected_b = 0;
    std::size_t errors = 0, misrouted = 0;

private:
    ShardNet& net_;
    std::uint32_t s_;
    Instant now_ = at_ms(1000);
};

std::vector<CoreConfig> two_hosts() {
    std::vector<CoreConfig> hosts(2);
    for (std::uint8_t h = 0; h < 2; ++h) {
        hosts[h].mac = mac_of(static_cast<std::uint8_t>(h + 1));
        hosts[h].isn_secret.fill(static_cast<std::uint8_t>(h + 7));
    }
    return hosts;
}

std::unique_ptr<ShardNet> make_net(std::uint32_t shards, bool spray, std::size_t slots = 64) {
    ShardNetConfig cfg;
    cfg.shards = shards;
    cfg.spray = spray;
    cfg.ring_slots = slots;
    auto net = std::make_unique<ShardNet>(cfg, two_hosts());
    EXPECT_TRUE(net->add_address(0, ShardApp::ip(1)));
    EXPECT_TRUE(net->add_address(1, ShardApp::ip(2)));
    ListenParams lp;
    lp.local = {ShardApp::ip(2), ShardApp::kPort};
    lp.backlog = 1u << 20;
    EXPECT_TRUE(net->listen(1, lp));
    return net;
}

// Every shard in turn from this one thread, until all are quiet.
void drive_all(std::vector<std::unique_ptr<ShardApp>>& apps) {
    for (int round = 0; round < 10000; ++round) {
        std::size_t moved = 0;
        for (auto& a : apps) moved += a->step();
        if (moved == 0) return;
    }
    FAIL() << "the network never went quiet";
}

void check_one_thread(std::uint32_t shards, bool spray, std::size_t per_shard) {
    auto net = make_net(shards, spray, 16);  // small rings: the backlog is used
    std::vector<std::unique_ptr<ShardApp>> apps;
    for (std::uint32_t s = 0; s < shards; ++s) apps.push_back(std::make_unique<ShardApp>(*net, s));
    for (auto& a : apps) a->connect(per_shard);
    drive_all(apps);
    for (auto& a : apps) a->disconnect_all();
    drive_all(apps);
    std::uint64_t handed = 0, crossed = 0, backlogged = 0;
    for (std::uint32_t s = 0; s < shards; ++s) {
        const ShardApp& a = *apps[s];
        EXPECT_EQ(a.requests_b, per_shard) << "shard " << s;  // its own listener accepted
        EXPECT_EQ(a.established_a, per_shard) << "shard " << s;
        EXPECT_EQ(a.established_b, per_shard) << "shard " << s;
        EXPECT_EQ(a.disconnected_b, per_shard) << "shard " << s;
        EXPECT_EQ(a.errors, 0u);
        EXPECT_EQ(a.misrouted, 0u) << "shard " << s;
        EXPECT_EQ(net->dropped(s) + net->stats(s).unroutable, 0u);
        handed += net->stats(s).handed_off;
        crossed += net->stats(s).sent_across;
        backlogged += net->backlogged(s);
    }
    if (spray) {
        EXPECT_GT(handed, 0u);
        EXPECT_GT(backlogged, 0u);
    } else {
        EXPECT_EQ(crossed, 0u);  // no frame ever left its shard
    }
}

TEST(ShardNet, ListenersInEveryShardAcceptTheirShardsConnections) {
    check_one_thread(3, false, 50);
}

TEST(ShardNet, FramesOnTheWrongQueueAreHandedToTheirOwner) {
    check_one_thread(3, true, 50);
}

// Each shard on its own thread: every setup completes with every event, and
// no core ever sees a frame of another shard's 4-tuple.
void check_threads(std::uint32_t shards, bool spray, std::size_t per_shard) {
    auto net = make_net(shards, spray, 256);
    std::vector<std::unique_ptr<ShardApp>> apps;
    for (std::uint32_t s = 0; s < shards; ++s) apps.push_back(std::make_unique<ShardApp>(*net, s));
    std::atomic<std::uint32_t> done{0};
    std::atomic<bool> timed_out{false};
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    run_pinned(shards, [&](std::uint32_t s) {
        ShardApp& a = *apps[s];
        a.connect(per_shard);
        bool closing = false, finished = false;
        while (done.load(std::memory_order_acquire) < shards) {
            a.step();
            if (!closing && a.established_a == per_shard && a.established_b == per_shard) {
                a.disconnect_all();
                closing = true;
            }
            if (closing && !finished && a.disconnected_b == per_shard) {
                finished = true;
                done.fetch_add(1, std::memory_order_acq_rel);
            }
            if (std::chrono::steady_clock::now() > deadline) {
                timed_out = true;
                break;
            }
        }
    });
    ASSERT_FALSE(timed_out.load());
    std::uint64_t crossed = 0;
    for (std::uint32_t s = 0; s < shards; ++s) {
        EXPECT_EQ(apps[s]->established_a, per_shard);
        EXPECT_EQ(apps[s]->established_b, per_shard);
        EXPECT_EQ(apps[s]->disconnected_b, per_shard);
        EXPECT_EQ(apps[s]->errors + apps[s]->misrouted, 0u);
        EXPECT_EQ(net->dropped(s), 0u);
        crossed += net->stats(s).sent_across;
    }
    if (spray) {
        EXPECT_GT(crossed, 0u);
    } else {
        EXPECT_EQ(crossed, 0u);
    }
}

TEST(ShardNet, ThreadsCompleteEverySetupWithNoFrameCrossing) {
    check_threads(2, false, 2000);
}

TEST(ShardNet, ThreadsCompleteEverySetupWithFramesHandedAcross) {
    check_threads(3, true, 1000);
}

}  // namespace
}  // namespace iwcm::io
