// The flow hash a core hands with each frame it sends (Core::poll_transmit_hashed): for every
// kind of frame a core sends, it equals the hash of the frame's bytes (frame_flow_hash) and
// of its endpoints (flow_hash), keyed by the core's flow key, for IPv4, IPv6 and a VLAN.
// (tests/cm/harness.hpp checks every frame of the other tests the same way; this test makes
// sure each kind is among them.)
#include <map>
#include <string>

#include "cm/harness.hpp"

namespace iwcm::test {
namespace {

namespace tf = wire::tcp_flags;

struct Variant {
    const char* name;
    const char* addr_a;
    const char* addr_b;
    std::uint16_t vlan;
    std::uint64_t key;
    // The receiver gets each frame's hash; else it computes the hash itself, and so does the
    // core that answers (the path of a frame that comes with no hash).
    bool hand;
};

// The kinds of frame a core sends, by what the test can see on the wire.
std::string kind_of(const wire::FrameRepr& f, std::size_t payload) {
    const std::uint8_t fl = f.tcp.flags;
    if (fl & tf::kRst) return "rst";
    if ((fl & tf::kSyn) && (fl & tf::kAck)) return "syn-ack";
    if (fl & tf::kSyn) return "syn";
    if (fl & tf::kFin) return "fin";
    return payload > 0 ? "data" : "ack";
}

class Wire {
public:
    explicit Wire(const Variant& v) : v_(v), p_(config(kMacA, 1, v.key), config(kMacB, 2, v.key)) {
        a_addr_ = *IpAddr::parse(v.addr_a);
        b_addr_ = *IpAddr::parse(v.addr_b);
        // The pair has 10.0.0.1 and 10.0.0.2 already, untagged.
        if (a_addr_ != ip_a()) {
            EXPECT_TRUE(p_.a.add_address(a_addr_, v.vlan));
        }
        if (b_addr_ != ip_b()) {
            EXPECT_TRUE(p_.b.add_address(b_addr_, v.vlan));
        }
    }

    Pair& pair() { return p_; }
    ConnectParams connect_params(std::uint16_t port) const {
        ConnectParams c;
        c.local = {a_addr_, 0};
        c.remote = {b_addr_, port};
        c.remote_mac = kMacB;
        return c;
    }
    Endpoint b(std::uint16_t port) const { return {b_addr_, port}; }

    // Moves frames both ways until quiet. Each frame's handed hash is checked against its
    // bytes and its endpoints, and handed to the receiver with it.
    void pump() {
        for (int round = 0; round < 1000; ++round) {
            if (!(move(p_.a, p_.b) | move(p_.b, p_.a))) return;
        }
        ADD_FAILURE() << "the wire never went quiet";
    }

    // Accepts every connect request B has; returns how many.
    int accept_all() {
        int n = 0;
        for (const Ev& e : events(p_.b)) {
            if (e.type != EventType::kConnectRequest) continue;
            EXPECT_TRUE(p_.b.accept(p_.now, e.conn, {}));
            ++n;
        }
        return n;
    }

    std::map<std::string, int> kinds;
    bool lose_next = false;  // the next frame is checked, then lost

private:
    static CoreConfig config(MacAddr mac, std::uint8_t secret, std::uint64_t key) {
        CoreConfig c = config_for(mac, secret);
        c.flow_key = key;
        return c;
    }

    bool move(Core& from, Core& to) {
        bool moved = false;
        while (auto t = from.poll_transmit_hashed()) {
            moved = true;
            std::vector<std::byte> copy(t->frame.begin(), t->frame.end());
            std::uint64_t from_bytes = 0;
            EXPECT_TRUE(frame_flow_hash(copy, v_.key, from_bytes));
            EXPECT_EQ(t->flow_hash, from_bytes) << v_.name;
            auto parsed = wire::parse_tcp_frame(copy);
            EXPECT_TRUE(parsed.has_value());
            if (!parsed) continue;
            const wire::FrameRepr& f = parsed->repr;
            const Endpoint src{f.ip.src, f.tcp.src_port};
            const Endpoint dst{f.ip.dst, f.tcp.dst_port};
            EXPECT_EQ(t->flow_hash, flow_hash(src, dst, v_.key)) << v_.name;
            EXPECT_EQ(f.eth.vlan ? f.eth.vlan->id : kNoVlan, v_.vlan) << v_.name;
            ++kinds[kind_of(f, parsed->payload.size())];
            if (std::exchange(lose_next, false)) continue;
            to.receive(p_.now, copy, v_.hand ? std::optional(t->flow_hash) : std::nullopt);
        }
        return moved;
    }

    Variant v_;
    Pair p_;
    IpAddr a_addr_;
    IpAddr b_addr_;
};

constexpr Variant kVariants[] = {
    {"IPv4", "10.0.0.1", "10.0.0.2", kNoVlan, 0, false},
    {"IPv4 keyed, VLAN 7, hash handed", "10.0.7.1", "10.0.7.2", 7, 0x5eed0f0ea5e1f00dULL, true},
    {"IPv6", "fd00::1", "fd00::2", kNoVlan, 0, false},
    {"IPv6 keyed, hash handed", "fd00::1", "fd00::2", kNoVlan, 0x0123456789abcdefULL, true},
};

TEST(TransmitHash, EveryFrameKindCarriesItsTuplesHash) {
    for (const Variant& v : kVariants) {
        Wire w(v);
        Pair& p = w.pair();
        ASSERT_TRUE(p.b.listen({w.b(4791), 0}));
        // A SYN lost once: the retransmission comes from the node's timer.
        w.lose_next = true;
        auto c1 = p.a.connect(p.now, w.connect_params(4791));
        ASSERT_TRUE(c1);
        w.pump();
        auto resend = p.a.next_deadline();
        ASSERT_TRUE(resend);
        p.now = *resend;
        p.a.on_timer(p.now);
        w.pump();
        EXPECT_EQ(w.accept_all(), 1) << v.name;
        w.pump();
        // Data after a stream hand-off, then a graceful close (FIN).
        ASSERT_TRUE(p.a.handoff(*c1));
        ASSERT_TRUE(p.a.send(p.now, *c1, bytes("bytes of the stream")));
        w.pump();
        ASSERT_TRUE(p.a.disconnect(p.now, *c1, DisconnectMode::kGraceful));
        w.pump();
        // Two SYNs at once to a listener of backlog 1: a SYN cookie answers the second.
        ListenParams small;
        small.local = w.b(4793);
        small.backlog = 1;
        ASSERT_TRUE(p.b.listen(small));
        auto c2 = p.a.connect(p.now, w.connect_params(4793));
        ASSERT_TRUE(c2);
        ASSERT_TRUE(p.a.connect(p.now, w.connect_params(4793)));
        w.pump();
        EXPECT_EQ(p.b.stats().syn_cookies_sent, 1u) << v.name;
        // An abortive close: the RST of a known connection.
        const std::uint64_t resets_a = p.a.stats().resets_sent;
        ASSERT_TRUE(p.a.disconnect(p.now, *c2, DisconnectMode::kAbortive));
        w.pump();
        EXPECT_EQ(p.a.stats().resets_sent, resets_a + 1) << v.name;
        // A SYN to a port without a listener: the RST for a tuple no node has.
        const std::uint64_t resets_b = p.b.stats().resets_sent;
        ASSERT_TRUE(p.a.connect(p.now, w.connect_params(4792)));
        w.pump();
        EXPECT_EQ(p.b.stats().resets_sent, resets_b + 1) << v.name;
        for (const char* kind : {"syn", "syn-ack", "data", "ack", "fin", "rst"})
            EXPECT_GT(w.kinds[kind], 0) << v.name << ": no " << kind;
        // The lost SYN and its retransmission, the two to the small listener, the last one.
        EXPECT_EQ(w.kinds["syn"], 5) << v.name;
        EXPECT_GE(w.kinds["rst"], 2) << v.name;
    }
}

}  // namespace
}  // namespace iwcm::test
