// Test helpers for the engine: two cores joined back to back (no loss), a
// virtual clock, frame capture, and builders for hand-made segments.
#pragma once

#include <gtest/gtest.h>

#include <deque>
#include <string>
#include <vector>

#include "iwcm/core.hpp"
#include "iwcm/shard.hpp"
#include "wire/frame.hpp"
#include "wire/mpa.hpp"

namespace iwcm::test {

inline std::vector<std::byte> bytes(std::string_view s) {
    std::vector<std::byte> v(s.size());
    for (std::size_t i = 0; i < s.size(); ++i) v[i] = static_cast<std::byte>(s[i]);
    return v;
}

inline std::string text(std::span<const std::byte> b) {
    return std::string(reinterpret_cast<const char*>(b.data()), b.size());
}

constexpr MacAddr kMacA{{0x02, 0, 0, 0, 0, 0x0a}};
constexpr MacAddr kMacB{{0x02, 0, 0, 0, 0, 0x0b}};
inline IpAddr ip_a() {
    return *IpAddr::parse("10.0.0.1");
}
inline IpAddr ip_b() {
    return *IpAddr::parse("10.0.0.2");
}

inline CoreConfig config_for(MacAddr mac, std::uint8_t secret) {
    CoreConfig c;
    c.mac = mac;
    c.isn_secret.fill(secret);
    return c;
}

// A parsed copy of a frame a core sent.
struct Sent {
    std::vector<std::byte> raw;
    wire::FrameRepr repr;
    std::vector<std::byte> payload;
    const wire::TcpRepr& tcp() const { return repr.tcp; }
    bool flags(std::uint8_t f) const { return repr.tcp.flags == f; }
};

// The flow hash a core hands with a frame is the one read from the frame's bytes, keyed by
// its flow key (Core::poll_transmit_hashed). Every frame drain() and Pair::pump() take is
// checked so, whatever the test makes the core send.
inline void expect_flow_hash(const Core& core, const Transmit& t) {
    std::uint64_t h = 0;
    EXPECT_TRUE(frame_flow_hash(t.frame, core.config().flow_key, h)) << "a frame without a tuple";
    EXPECT_EQ(t.flow_hash, h) << "the hash handed with a frame is not its tuple's";
}

inline std::vector<Sent> drain(Core& core) {
    std::vector<Sent> out;
    while (auto t = core.poll_transmit_hashed()) {
        expect_flow_hash(core, *t);
        Sent s;
        s.raw.assign(t->frame.begin(), t->frame.end());
        auto p = wire::parse_tcp_frame(s.raw);
        EXPECT_TRUE(p.has_value()) << "a core sent a frame it cannot parse itself";
        if (p) {
            s.repr = p->repr;
            s.payload.assign(p->payload.begin(), p->payload.end());
        }
        out.push_back(std::move(s));
    }
    return out;
}

// An event with its private data copied (the core's view lasts one poll).
struct Ev : Event {
    std::vector<std::byte> pdata;
};

inline std::vector<Ev> events(Core& core) {
    std::vector<Ev> out;
    while (auto e = core.poll_event()) {
        Ev ev;
        static_cast<Event&>(ev) = *e;
        ev.pdata.assign(e->private_data.begin(), e->private_data.end());
        ev.private_data = {};
        out.push_back(std::move(ev));
    }
    return out;
}

// Two cores wired back to back. Frames move only when pump() is called;
// time moves only when advance() is called.
struct Pair {
    Core a{config_for(kMacA, 1)};
    Core b{config_for(kMacB, 2)};
    Instant now{};
    std::size_t frames_moved = 0;
    // Drop filter: return true to lose a frame (from_a says who sent it).
    std::function<bool(bool from_a, const std::vector<std::byte>&)> lose;

    Pair() : Pair(config_for(kMacA, 1), config_for(kMacB, 2)) {}
    Pair(const CoreConfig& ca, const CoreConfig& cb) : a(ca), b(cb) {
        EXPECT_TRUE(a.add_address(ip_a()).has_value());
        EXPECT_TRUE(b.add_address(ip_b()).has_value());
    }

    // Moves frames until both cores are quiet. Each frame's flow hash is checked and handed
    // to the receiver with it, when both cores key the hash alike.
    void pump() {
        for (int round = 0; round < 10000; ++round) {
            const bool moved = move(a, b, true) | move(b, a, false);
            if (!moved) return;
        }
        ADD_FAILURE() << "pump did not settle";
    }

    bool move(Core& from, Core& to, bool from_a) {
        const bool same_key = from.config().flow_key == to.config().flow_key;
        bool moved = false;
        while (auto t = from.poll_transmit_hashed()) {
            expect_flow_hash(from, *t);
            std::vector<std::byte> copy(t->frame.begin(), t->frame.end());
            moved = true;
            if (lose && lose(from_a, copy)) continue;
            ++frames_moved;
            to.receive(now, copy, same_key ? std::optional(t->flow_hash) : std::nullopt);
        }
        return moved;
    }

    // Runs timers up to `until`, pumping after each deadline.
    void advance(Instant until) {
        pump();
        for (int i = 0; i < 100000; ++i) {
            auto da = a.next_deadline();
            auto db = b.next_deadline();
            std::optional<Instant> d = da;
            if (db && (!d || *db < *d)) d = db;
            if (!d || *d > until) break;
            now = std::max(now, *d);
            a.on_timer(now);
            b.on_timer(now);
            pump();
        }
        now = std::max(now, until);
    }

    ConnectParams connect_params(std::uint16_t port = 4791) const {
        ConnectParams p;
        p.local = {ip_a(), 0};
        p.remote = {ip_b(), port};
        p.remote_mac = kMacB;
        return p;
    }
};

}  // namespace iwcm::test
