// The negotiation table, end to end between two cores: revisions x
// peer-to-peer x RTR types offered and accepted x IRD/ORD cases x CRC.
// For every combination both sides must agree on the outcome and on the
// negotiated values, and nothing may be left behind.
#include <cstdio>

#include "cm/harness.hpp"

namespace iwcm::test {
namespace {

struct Case {
    std::uint8_t init_rev, resp_rev;
    bool p2p;
    std::uint8_t offered, accepted;  // rtr sets
    std::uint16_t i_ird, i_ord, r_ird, r_ord;
    bool strict;
    bool i_crc, r_crc;
};

struct Outcome {
    bool established_a = false, established_b = false;
    Ev a, b;
};

Outcome run(const Case& c) {
    CoreConfig ca = config_for(kMacA, 1), cb = config_for(kMacB, 2);
    ca.mpa.revision = c.init_rev;
    ca.mpa.peer_to_peer = c.p2p;
    ca.mpa.rtr_types = c.offered;
    ca.mpa.crc = c.i_crc;
    ca.mpa.strict_ird_ord = c.strict;
    cb.mpa.revision = c.resp_rev;
    cb.mpa.rtr_types = c.accepted;
    cb.mpa.crc = c.r_crc;
    cb.mpa.strict_ird_ord = c.strict;
    cb.mpa.max_ird = 16;
    Core a(ca), b(cb);
    EXPECT_TRUE(a.add_address(ip_a()).has_value());
    EXPECT_TRUE(b.add_address(ip_b()).has_value());
    EXPECT_TRUE(b.listen({{ip_b(), 4791}, 0}).has_value());
    Instant now{};
    auto pump = [&] {
        for (int i = 0; i < 100; ++i) {
            bool moved = false;
            while (auto f = a.poll_transmit()) {
                b.receive(now, std::vector<std::byte>(f->begin(), f->end()));
                moved = true;
            }
            while (auto f = b.poll_transmit()) {
                a.receive(now, std::vector<std::byte>(f->begin(), f->end()));
                moved = true;
            }
            if (!moved) return;
        }
    };
    ConnectParams cp;
    cp.local = {ip_a(), 0};
    cp.remote = {ip_b(), 4791};
    cp.remote_mac = kMacB;
    cp.ird = c.i_ird;
    cp.ord = c.i_ord;
    auto conn = a.connect(now, cp);
    EXPECT_TRUE(conn.has_value());
    pump();
    Outcome o;
    for (auto& e : events(b)) {
        if (e.type == EventType::kConnectRequest) {
            AcceptParams ap;
            ap.ird = c.r_ird;
            ap.ord = c.r_ord;
            EXPECT_TRUE(b.accept(now, e.conn, ap).has_value());
        }
    }
    pump();
    for (auto& e : events(a)) {
        if (e.type == EventType::kEstablished) o.established_a = true;
        o.a = e;
    }
    for (auto& e : events(b)) {
        if (e.type == EventType::kEstablished) o.established_b = true;
        o.b = e;
    }
    // Drain: close whatever is open and let every timer run out.
    if (o.established_a) (void)a.disconnect(now, *conn, DisconnectMode::kGraceful);
    for (int i = 0; i < 1000; ++i) {
        pump();
        auto da = a.next_deadline(), db = b.next_deadline();
        if (!da && !db) break;
        now = std::min(da.value_or(kInstantNever), db.value_or(kInstantNever));
        a.on_timer(now);
        b.on_timer(now);
        events(a);
        events(b);
    }
    EXPECT_EQ(a.live_nodes() + b.live_nodes(), 0u);
    EXPECT_EQ(a.pending_timers() + b.pending_timers(), 0u);
    return o;
}

TEST(Negotiation, EveryCombination) {
    int established = 0, failed = 0, total = 0;
    const std::uint16_t none = wire::kIrdOrdNone;
    struct IrdOrd {
        std::uint16_t i_ird, i_ord, r_ird, r_ord;
        const char* name;
    };
    const IrdOrd cases[] = {
        {4, 4, 4, 4, "equal"},
        {2, 8, 4, 16, "responder ORD above initiator IRD, IRD below initiator ORD"},
        {8, 1, 1, 8, "responder covers everything"},
        {1, 32, 1, 1, "initiator ORD above the responder's max IRD (16)"},
        {none, none, 4, 4, "initiator gives no values"},
        {0, 0, 0, 0, "no reads either way (a READ RTR still needs one)"},
        {200, 300, 400, 500, "above both sides' maxima (clamped to 16 / 128)"},
    };
    for (std::uint8_t irev : {1, 2})
        for (std::uint8_t rrev : {1, 2})
            for (bool p2p : {false, true})
                for (std::uint8_t offered : {rtr::kSend, rtr::kWrite, rtr::kRead, rtr::kAll})
                    for (std::uint8_t accepted :
                         {rtr::kSend, static_cast<std::uint8_t>(rtr::kWrite | rtr::kRead),
                          rtr::kAll})
                        for (const IrdOrd& io : cases)
                            for (bool strict : {false, true})
                                for (bool crc : {false, true}) {
                                    if (!p2p && (offered != rtr::kAll || accepted != rtr::kAll))
                                        continue;  // RTR sets matter only with p2p
                                    Case c{irev,     rrev,     p2p,      offered,
                                           accepted, io.i_ird, io.i_ord, io.r_ird,
                                           io.r_ord, strict,   crc,      false};
                                    SCOPED_TRACE(::testing::Message()
                                                 << "rev " << int(irev) << "/" << int(rrev)
                                                 << " p2p " << p2p << " offered " << int(offered)
                                                 << " accepted " << int(accepted) << " " << io.name
                                                 << " strict " << strict << " crc " << crc);
                                    Outcome o = run(c);
                                    ++total;
                                    std::uint8_t rev = std::min(irev, rrev);
                                    bool uses_v2 = rev == 2;
                                    bool uses_p2p = uses_v2 && p2p;
                                    bool rtr_ok = !uses_p2p || (offered & accepted) != 0;
                                    bool ird_ok = true;
                                    if (uses_v2 && strict && io.i_ird != none) {
                                        // After clamping: the responder's max_ird is 16, every
                                        // other maximum 128.
                                        auto cl = [](std::uint16_t v, std::uint16_t max) {
                                            return std::min(v, max);
                                        };
                                        ird_ok = cl(io.r_ord, 128) <= cl(io.i_ird, 128) &&
                                                 cl(io.r_ird, 16) >= cl(io.i_ord, 128);
                                    }
                                    bool expect_ok = rtr_ok && ird_ok;
                                    EXPECT_EQ(o.established_a, expect_ok);
                                    EXPECT_EQ(o.established_b, expect_ok);
                                    if (!expect_ok) {
                                        ++failed;
                                        EXPECT_EQ(o.a.type, EventType::kConnectError);
                                        continue;
                                    }
                                    ++established;
                                    // Both sides agree on the negotiated values.
                                    EXPECT_EQ(o.a.mpa.revision, rev);
                                    EXPECT_EQ(o.b.mpa.revision, rev);
                                    EXPECT_EQ(o.a.mpa.crc, crc);
                                    EXPECT_EQ(o.b.mpa.crc, crc);
                                    EXPECT_EQ(o.a.mpa.peer_to_peer, uses_p2p);
                                    EXPECT_EQ(o.b.mpa.peer_to_peer, uses_p2p);
                                    EXPECT_EQ(o.a.mpa.rtr, o.b.mpa.rtr);
                                    if (uses_p2p) {
                                        EXPECT_NE(o.a.mpa.rtr, RtrType::kNone);
                                    }
                                    // irdma_record_ird_ord: nothing above what each side can
                                    // honour.
                                    EXPECT_LE(o.b.mpa.ird, 16);
                                    if (o.a.mpa.rtr == RtrType::kRead) {
                                        // The READ RTR is one read: the responder serves it, the
                                        // initiator issues it.
                                        EXPECT_GE(o.b.mpa.ird, 1);
                                        EXPECT_GE(o.a.mpa.ord, 1);
                                    }
                                    if (uses_v2 && io.i_ird != none) {
                                        // No side may issue more reads than the other accepts.
                                        EXPECT_LE(o.a.mpa.ord, o.b.mpa.ird);
                                        EXPECT_LE(o.b.mpa.ord, o.a.mpa.ird);
                                        if (!strict) {
                                            EXPECT_LE(o.b.mpa.ird,
                                                      16);  // raised at most to max_ird
                                        }
                                    }
                                }
    std::printf("negotiation table: %d combinations, %d established, %d refused as expected\n",
                total, established, failed);
    EXPECT_GT(established, 0);
    EXPECT_GT(failed, 0);
}

}  // namespace
}  // namespace iwcm::test
