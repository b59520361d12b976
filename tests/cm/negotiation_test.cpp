// The negotiation table, end to end between two cores: revisions x
// peer-to-peer x RTR types offered and accepted x IRD/ORD cases x strict x
// CRC on either side. For every combination the outcome, the RTR type and
// both sides' IRD and ORD are checked by value against numbers worked out by
// hand from RFC 6581 sections 5-7 and docs/design.md "Negotiation", and
// nothing may be left behind.
#include <cerrno>
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

// One IRD/ORD case: what each side asks for, and what RFC 6581 section 7
// makes of it, worked out by hand. The responder's max_ird is 16, every other
// maximum 128 (irdma_record_ird_ord clamps what the application asks to them).
// Relaxed (docs/design.md "Negotiation"): the responder lowers its ORD to the
// initiator's IRD and raises its IRD toward the initiator's ORD up to its
// max_ird; the initiator then lowers its ORD to the IRD of the reply. Strict:
// a misfit is refused. Revision 1 negotiates nothing: each side keeps what it
// asked for, clamped.
struct IrdOrdCase {
    std::uint16_t i_ird, i_ord, r_ird, r_ord;  // asked
    const char* name;
    std::uint16_t v1_a_ird, v1_a_ord, v1_b_ird, v1_b_ord;  // clamped, not negotiated
    std::uint16_t a_ird, a_ord, b_ird, b_ord;              // relaxed result
    bool strict_fits;
};

constexpr std::uint16_t kNone = wire::kIrdOrdNone;

// clang-format off
const IrdOrdCase kIrdOrdCases[] = {
    // Everything fits: nothing moves.
    {4, 4, 4, 4, "equal",
     4, 4, 4, 4,  4, 4, 4, 4,  true},
    // Responder ORD 16 > initiator IRD 2: lowered to 2. Responder IRD 4 < initiator ORD 8:
    // raised to 8 (<= 16). Initiator ORD 8 <= reply IRD 8: kept.
    {2, 8, 4, 16, "responder ORD above initiator IRD, IRD below initiator ORD",
     2, 8, 4, 16,  2, 8, 8, 2,  false},
    {8, 1, 1, 8, "responder covers everything",
     8, 1, 1, 8,  8, 1, 1, 8,  true},
    // Responder IRD 1 < initiator ORD 32: raised, but only to max_ird 16; the initiator's
    // ORD 32 is then lowered to that 16.
    {1, 32, 1, 1, "initiator ORD above the responder's max IRD (16)",
     1, 32, 1, 1,  1, 16, 16, 1,  false},
    // "No value" is never negotiated; the responder's values stand.
    {kNone, kNone, 4, 4, "initiator gives no values",
     kNone, kNone, 4, 4,  kNone, kNone, 4, 4,  true},
    {0, 0, 0, 0, "no reads either way",
     0, 0, 0, 0,  0, 0, 0, 0,  true},
    // Clamped first: initiator 128/128, responder 16/128. Responder ORD 128 <= 128 fits;
    // IRD 16 < 128 is raised to at most 16; the initiator's ORD 128 drops to 16.
    {200, 300, 400, 500, "above both sides' maxima",
     128, 128, 16, 128,  128, 16, 16, 128,  false},
};
// clang-format on

// RFC 6581 section 6, docs/design.md "Negotiation": the responder picks exactly one of the
// types both offered and accepted, SEND before WRITE before READ.
RtrType preferred(std::uint8_t offered, std::uint8_t accepted) {
    const std::uint8_t both = offered & accepted;
    if (both & rtr::kSend) return RtrType::kSend;
    if (both & rtr::kWrite) return RtrType::kWrite;
    if (both & rtr::kRead) return RtrType::kRead;
    return RtrType::kNone;
}

std::uint8_t bit_of(RtrType t) {
    switch (t) {
        case RtrType::kSend: return rtr::kSend;
        case RtrType::kWrite: return rtr::kWrite;
        case RtrType::kRead: return rtr::kRead;
        case RtrType::kNone: break;
    }
    return 0;
}

struct Counts {
    int total = 0, established = 0, failed = 0, r_crc_only = 0;
};

void check_combination(const Case& c, const IrdOrdCase& io, Counts& n) {
    Outcome o = run(c);
    ++n.total;
    const std::uint8_t rev = std::min(c.init_rev, c.resp_rev);
    const bool uses_v2 = rev == 2;
    const bool uses_p2p = uses_v2 && c.p2p;
    const RtrType rtr = uses_p2p ? preferred(c.offered, c.accepted) : RtrType::kNone;
    const bool rtr_ok = !uses_p2p || rtr != RtrType::kNone;
    // Strict refuses a misfit only where values are negotiated: both at revision 2 and
    // the initiator gave values.
    const bool ird_ok = !(uses_v2 && c.strict && !io.strict_fits);
    const bool expect_ok = rtr_ok && ird_ok;
    EXPECT_EQ(o.established_a, expect_ok);
    EXPECT_EQ(o.established_b, expect_ok);
    if (!expect_ok) {
        ++n.failed;
        EXPECT_EQ(o.a.type, EventType::kConnectError);
        EXPECT_EQ(o.a.status, -EINVAL);
        return;
    }
    ++n.established;
    if (c.r_crc && !c.i_crc) ++n.r_crc_only;
    EXPECT_EQ(o.a.mpa.revision, rev);
    EXPECT_EQ(o.b.mpa.revision, rev);
    // RFC 5044 section 7.1: CRC is used if either side asks.
    EXPECT_EQ(o.a.mpa.crc, c.i_crc || c.r_crc);
    EXPECT_EQ(o.b.mpa.crc, c.i_crc || c.r_crc);
    EXPECT_EQ(o.a.mpa.peer_to_peer, uses_p2p);
    EXPECT_EQ(o.b.mpa.peer_to_peer, uses_p2p);
    EXPECT_EQ(o.a.mpa.rtr, rtr);
    EXPECT_EQ(o.b.mpa.rtr, rtr);
    if (uses_p2p) {
        EXPECT_NE(bit_of(o.a.mpa.rtr) & c.offered, 0);
        EXPECT_NE(bit_of(o.b.mpa.rtr) & c.accepted, 0);
    }
    std::uint16_t a_ird = io.v1_a_ird, a_ord = io.v1_a_ord;
    std::uint16_t b_ird = io.v1_b_ird, b_ord = io.v1_b_ord;
    if (uses_v2) {
        a_ird = io.a_ird, a_ord = io.a_ord, b_ird = io.b_ird, b_ord = io.b_ord;
    }
    if (rtr == RtrType::kRead) {
        // The READ RTR is one read: the responder says IRD >= 1, the initiator uses ORD
        // >= 1 (irdma_negotiate_mpa_v2_ird_ord, siw_connect).
        if (b_ird == 0) b_ird = 1;
        if (a_ord == 0) a_ord = 1;
    }
    EXPECT_EQ(o.a.mpa.ird, a_ird);
    EXPECT_EQ(o.a.mpa.ord, a_ord);
    EXPECT_EQ(o.b.mpa.ird, b_ird);
    EXPECT_EQ(o.b.mpa.ord, b_ord);
}

TEST(Negotiation, EveryCombination) {
    Counts n;
    const std::uint8_t write_read = rtr::kWrite | rtr::kRead;
    for (std::uint8_t irev : {1, 2})
        for (std::uint8_t rrev : {1, 2})
            for (bool p2p : {false, true})
                for (std::uint8_t offered : {rtr::kSend, rtr::kWrite, rtr::kRead, rtr::kAll})
                    for (std::uint8_t accepted : {rtr::kSend, write_read, rtr::kAll})
                        for (const IrdOrdCase& io : kIrdOrdCases)
                            for (bool strict : {false, true})
                                for (bool i_crc : {false, true}) {
                                    if (!p2p && (offered != rtr::kAll || accepted != rtr::kAll))
                                        continue;  // RTR sets matter only with p2p
                                    // The responder asks for CRC in half the combinations,
                                    // and with strict on and off every pair of asks occurs.
                                    const bool r_crc = i_crc != strict;
                                    Case c{irev,     rrev,     p2p,      offered,
                                           accepted, io.i_ird, io.i_ord, io.r_ird,
                                           io.r_ord, strict,   i_crc,    r_crc};
                                    SCOPED_TRACE(::testing::Message()
                                                 << "rev " << int(irev) << "/" << int(rrev)
                                                 << " p2p " << p2p << " offered " << int(offered)
                                                 << " accepted " << int(accepted) << " " << io.name
                                                 << " strict " << strict << " crc " << i_crc << "/"
                                                 << r_crc);
                                    check_combination(c, io, n);
                                }
    std::printf("negotiation table: %d combinations, %d established, %d refused as expected\n",
                n.total, n.established, n.failed);
    EXPECT_GT(n.established, 0);
    EXPECT_GT(n.failed, 0);
    EXPECT_GT(n.r_crc_only, 0);  // CRC asked for by the responder alone was covered
}

}  // namespace
}  // namespace iwcm::test
