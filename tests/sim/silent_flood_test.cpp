// Silent peers over the simulated network: a host that completes TCP handshakes and never
// sends an MPA request, 1,000 of them and then 100 more each virtual second, against an
// iwarp-cm listener, while an iwarp-cm initiator connects through them.
//
// Read first: docs/design.md "Backlog", src/io/sim/sim.hpp (the network and its hosts),
// tests/cm/backlog_test.cpp (the same on exact frames).
#include <gtest/gtest.h>

#include <map>

#include "cm/harness.hpp"
#include "io/sim/sim.hpp"

namespace iwcm::test {
namespace {

namespace tf = wire::tcp_flags;
using std::chrono::microseconds;
using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr MacAddr kMacFlood{{0x02, 0, 0, 0, 0, 0x0c}};

// A minimal TCP client of its own: SYNs from new ports on a schedule, the ACK of each SYN-ACK
// and then nothing. It counts the handshakes completed and the resets that end them.
class SilentFlood final : public io::SimHost {
public:
    SilentFlood(Endpoint server, MacAddr server_mac, std::uint32_t burst, std::uint32_t rate,
                Duration rate_for)
        : server_(server),
          server_mac_(server_mac),
          burst_(burst),
          rate_(rate),
          total_(burst + static_cast<std::uint32_t>(rate * (rate_for / milliseconds(1)) / 1000)) {}

    MacAddr mac() const override { return kMacFlood; }
    IpAddr ip() const { return *IpAddr::parse("10.0.0.3"); }

    void receive(Instant, std::span<const std::byte> frame) override {
        auto p = wire::parse_tcp_frame(frame);
        ASSERT_TRUE(p.has_value());
        const wire::TcpRepr& t = p->repr.tcp;
        auto it = conns_.find(t.dst_port);
        ASSERT_NE(it, conns_.end()) << "a frame to a port the flood never used";
        Conn& c = it->second;
        if (t.flags == (tf::kSyn | tf::kAck)) {
            ASSERT_EQ(t.ack.value(), c.iss + 1);
            if (!c.up) ++established;
            c.up = true;
            send(t.dst_port, tf::kAck, wire::SeqNumber(c.iss + 1), t.seq + 1);
        } else if ((t.flags & tf::kRst) != 0) {
            EXPECT_TRUE(c.up && !c.reset) << "port " << t.dst_port;
            c.reset = true;
            ++resets;
        } else {
            ADD_FAILURE() << "unexpected flags " << int{t.flags} << " to port " << t.dst_port;
        }
    }
    void on_timer(Instant now) override {
        while (started_ < total_ && due(started_) <= now) {
            const std::uint16_t port = static_cast<std::uint16_t>(20000 + started_);
            const std::uint32_t iss = 7919u * (started_ + 1);
            conns_[port] = Conn{iss};
            send(port, tf::kSyn, wire::SeqNumber(iss), wire::SeqNumber(0));
            ++started_;
        }
    }
    std::optional<Instant> next_deadline() const override {
        if (started_ == total_) return std::nullopt;
        return due(started_);
    }
    std::optional<std::span<const std::byte>> poll_transmit() override {
        if (out_.empty()) return std::nullopt;
        current_ = std::move(out_.front());
        out_.pop_front();
        return std::span<const std::byte>(current_);
    }

    std::uint32_t total() const { return total_; }
    std::uint32_t established = 0;
    std::uint32_t resets = 0;

private:
    struct Conn {
        std::uint32_t iss = 0;
        bool up = false;     // the handshake completed
        bool reset = false;  // the server reset it
    };
    // The burst one every 100 us from 0; then one every 1 / rate s.
    Instant due(std::uint32_t i) const {
        if (i < burst_) return kInstantZero + microseconds(100) * i;
        return kInstantZero + microseconds(100) * burst_ +
               microseconds(1'000'000 / rate_) * (i - burst_ + 1);
    }
    void send(std::uint16_t port, std::uint8_t flags, wire::SeqNumber seq, wire::SeqNumber ack) {
        wire::FrameRepr f;
        f.eth.dst = server_mac_;
        f.eth.src = kMacFlood;
        f.ip.src = ip();
        f.ip.dst = server_.addr;
        f.tcp.src_port = port;
        f.tcp.dst_port = server_.port;
        f.tcp.seq = seq;
        f.tcp.ack = ack;
        f.tcp.flags = flags;
        f.tcp.window = 65535;
        if ((flags & tf::kSyn) != 0) f.tcp.options.mss = 1460;
        std::vector<std::byte> buf(wire::tcp_frame_len(f, 0));
        wire::emit_tcp_frame(f, {}, buf);
        out_.push_back(std::move(buf));
    }

    Endpoint server_;
    MacAddr server_mac_;
    std::uint32_t burst_;
    std::uint32_t rate_;
    std::uint32_t total_;
    std::uint32_t started_ = 0;
    std::map<std::uint16_t, Conn> conns_;
    std::deque<std::vector<std::byte>> out_;
    std::vector<std::byte> current_;
};

// The responder accepts every request; each side records when it was established.
struct Side {
    std::optional<Instant> established;
    std::uint32_t requests = 0;
};

io::CoreHost::App responder(Side& side) {
    return [&side](Instant now, Core& core) {
        while (auto e = core.poll_event()) {
            if (e->type == EventType::kConnectRequest) {
                ++side.requests;
                EXPECT_TRUE(core.accept(now, e->conn, {}).has_value());
            } else if (e->type == EventType::kEstablished) {
                side.established = now;
            }
        }
    };
}

io::CoreHost::App initiator(Side& side) {
    return [&side](Instant now, Core& core) {
        while (auto e = core.poll_event()) {
            EXPECT_EQ(e->type, EventType::kEstablished);
            if (e->type == EventType::kEstablished) side.established = now;
        }
    };
}

// 1,000 silent connections opened within 0.1 s, then 100 more each virtual second for 5 s,
// against a listener of backlog 16: each handshake completes (every SYN answered from a
// node), each beyond the 16th sheds the oldest silent one with a reset the flood sees, and an
// iwarp-cm initiator that connects 2.5 s in is established on both sides within a
// millisecond.
TEST(SilentFlood, InitiatorConnectsThroughIt) {
    const Endpoint server{ip_b(), 4791};
    Core server_core(config_for(kMacB, 2));
    ASSERT_TRUE(server_core.add_address(ip_b()).has_value());
    ASSERT_TRUE(server_core.listen({server, 16}).has_value());
    Core client_core(config_for(kMacA, 1));
    ASSERT_TRUE(client_core.add_address(ip_a()).has_value());
    Side server_side, client_side;
    io::CoreHost server_host(server_core, responder(server_side));
    io::CoreHost client_host(client_core, initiator(client_side));
    SilentFlood flood(server, kMacB, 1000, 100, seconds(5));
    ASSERT_EQ(flood.total(), 1500u);
    io::SimNetwork net(42);
    net.add_host(server_host);
    net.add_host(client_host);
    net.add_host(flood);

    const Instant connect_at = kInstantZero + milliseconds(2500);
    net.run_until(connect_at);
    EXPECT_GE(flood.established, 1200u);  // the burst and 2 s of the rate
    ConnectParams p;
    p.local = {ip_a(), 0};
    p.remote = server;
    p.remote_mac = kMacB;
    ASSERT_TRUE(client_core.connect(net.now(), p).has_value());
    net.run_until(connect_at + seconds(1));
    ASSERT_TRUE(client_side.established.has_value()) << "not established within 1 s";
    ASSERT_TRUE(server_side.established.has_value());
    EXPECT_LT(*client_side.established - connect_at, milliseconds(1));
    EXPECT_LT(*server_side.established - connect_at, milliseconds(1));
    EXPECT_EQ(server_side.requests, 1u);

    // The rest of the flood, and its survivors' request timers: nothing left.
    net.run_until(kInstantZero + seconds(20));
    EXPECT_EQ(flood.established, flood.total());
    const Stats& s = server_core.stats();
    EXPECT_EQ(s.silent_shed, flood.total() - 16);
    EXPECT_EQ(flood.resets, flood.total());  // 16 of them at their request timer
    EXPECT_EQ(s.resets_sent, flood.total());
    EXPECT_EQ(s.syns_received, flood.total() + 1);
    EXPECT_EQ(s.syn_cookies_sent, 0u);
    EXPECT_EQ(s.backlog_drops, 0u);
    EXPECT_EQ(s.drops_total(), 0u);
    EXPECT_EQ(s.established, 1u);
    EXPECT_EQ(server_core.live_nodes(), 1u);  // the client's connection
}

}  // namespace
}  // namespace iwcm::test
