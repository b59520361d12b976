// Linux siw's own MPA frames, as recorded in tests/fixtures/siw/, fed to a core: siw's
// requests to a responder, siw's replies to an initiator. What the core answers is
// compared byte for byte with what the protocol fixes (RFC 5044 section 7.1, RFC 6581
// sections 5-6): the reply to a siw request, and the RTR after siw's peer-to-peer reply.
//
// Read first: docs/fixtures.md (who sent which frame of each capture), tests/cm/dut.hpp.
#include <cerrno>
#include <string>

#include "cm/dut.hpp"
#include "wire/fpdu.hpp"
#include "wire/wire_test_util.hpp"

namespace iwcm::test {
namespace {

const IpAddr kSiwHost = *IpAddr::parse("10.231.0.2");

// The MPA exchange of a capture's one connection: each side's first payload (its MPA
// frame), and the initiator's next one (the RTR, when there is one).
struct Exchange {
    bool siw_initiated = false;
    std::vector<std::byte> request, reply, after_request;
};

Exchange exchange_of(const char* name) {
    Exchange x;
    auto pcap = wire::test::read_pcap(wire::test::fixture_path(std::string("siw/") + name));
    EXPECT_TRUE(pcap.has_value()) << name;
    if (!pcap) return x;
    std::optional<IpAddr> initiator;
    std::uint32_t request_seq = 0;
    for (auto& bytes : pcap->frames) {
        auto eth = wire::parse_ethernet(bytes);
        if (!eth || eth->repr.ethertype != wire::kEtherTypeIpv4) continue;  // ARP
        auto f = wire::parse_tcp_frame(bytes);
        if (!f) {
            wire::test::repair_tcp_checksum(bytes);
            f = wire::parse_tcp_frame(bytes);
        }
        EXPECT_TRUE(f.has_value()) << name;
        if (!f) continue;
        const auto& t = f->repr.tcp;
        if ((t.flags & tf::kSyn) && !(t.flags & tf::kAck)) initiator = f->repr.ip.src;
        if (f->payload.empty()) continue;
        const bool from_initiator = initiator && *initiator == f->repr.ip.src;
        std::vector<std::byte> payload(f->payload.begin(), f->payload.end());
        if (from_initiator && x.request.empty()) {
            x.request = payload;
            request_seq = t.seq.value();
        } else if (from_initiator && x.after_request.empty() && t.seq.value() != request_seq) {
            x.after_request = payload;
        } else if (!from_initiator && x.reply.empty()) {
            x.reply = payload;
        }
    }
    EXPECT_TRUE(initiator.has_value()) << name;
    x.siw_initiated = initiator && *initiator == kSiwHost;
    return x;
}

const char* const kCaptures[] = {"client-reply-reject.pcap",   "client-rping-64k-crc.pcap",
                                 "client-rping-crc.pcap",      "client-rping-nocrc.pcap",
                                 "iwcm-client-crc.pcap",       "iwcm-client-nocrc.pcap",
                                 "iwcm-server-64k-crc.pcap",   "iwcm-server-crc.pcap",
                                 "iwcm-server-nocrc.pcap",     "server-rping-crc.pcap",
                                 "server-rping-nocrc.pcap",    "terminate-crc.pcap",
                                 "terminate-read-bounds.pcap", "ucmatose.pcap"};

std::uint8_t rtr_set(const wire::MpaV2Params& v2) {
    return static_cast<std::uint8_t>((v2.rtr_send ? rtr::kSend : 0) |
                                     (v2.rtr_write ? rtr::kWrite : 0) |
                                     (v2.rtr_read ? rtr::kRead : 0));
}

// siw's request, taken by a responder: the connect request reports what siw asked, and the
// reply to it is the one RFC 5044 and RFC 6581 fix for our IRD/ORD 1/1 (rping's) and CRC
// as the recorded reply chose it: the same bytes the other end of the capture sent.
TEST(SiwMpa, SiwRequestIsAnsweredByteForByte) {
    int requests = 0;
    for (const char* name : kCaptures) {
        const Exchange x = exchange_of(name);
        if (!x.siw_initiated) continue;
        SCOPED_TRACE(name);
        ++requests;
        auto req = wire::parse_mpa(x.request);
        auto recorded = wire::parse_mpa(x.reply);
        ASSERT_TRUE(req.has_value() && recorded.has_value());
        CoreConfig cfg = config_for(kMacB, 7);
        cfg.mpa.crc = recorded->crc;
        Dut d(cfg);
        Ev e = d.to_mpareq_rcvd(*req);
        ASSERT_EQ(e.type, EventType::kConnectRequest);
        EXPECT_EQ(e.mpa.revision, req->revision);
        ASSERT_TRUE(req->v2.has_value());
        EXPECT_EQ(e.mpa.ird, req->v2->ird);
        EXPECT_EQ(e.mpa.ord, req->v2->ord);
        EXPECT_EQ(e.mpa.peer_to_peer, req->v2->peer_to_peer);
        EXPECT_EQ(e.mpa.rtr_offered, rtr_set(*req->v2));
        EXPECT_EQ(e.pdata,
                  std::vector<std::byte>(req->private_data.begin(), req->private_data.end()));
        if (recorded->reject) {
            ASSERT_TRUE(d.core.reject(d.now, e.conn, recorded->private_data).has_value());
        } else {
            AcceptParams ap;
            ap.ird = recorded->v2 ? recorded->v2->ird : 1;
            ap.ord = recorded->v2 ? recorded->v2->ord : 1;
            ap.private_data = recorded->private_data;
            ASSERT_TRUE(d.core.accept(d.now, e.conn, ap).has_value());
        }
        auto o = d.out();
        ASSERT_GE(o.size(), 1u);
        std::string want = wire::to_hex(x.reply);
        // A reject promises nothing: our IRD/ORD word is "no value" both ways (docs/design.md
        // "MPA facts"); the recorded peer's said 1/1, which the protocol leaves open.
        if (recorded->reject) want.replace(40, 8, "3fff3fff");
        EXPECT_EQ(wire::to_hex(o[0].payload), want);
    }
    EXPECT_EQ(requests, 8);  // the captures where siw connects
}

// siw's reply, taken by an initiator whose request is the recorded one (same bytes): the
// connection is established with what siw chose, and where siw answered a peer-to-peer
// request (iwcm-client-*: "8001 8001", a WRITE RTR, IRD and ORD 1) the RTR that follows is
// the zero-length WRITE RFC 6581 section 6 fixes (STag 1, offset 0; iwarp-cm's recorded RTR).
TEST(SiwMpa, SiwReplyIsTakenAndAnsweredWithTheRtr) {
    int replies = 0, rtrs = 0;
    for (const char* name : kCaptures) {
        const Exchange x = exchange_of(name);
        if (x.siw_initiated) continue;
        SCOPED_TRACE(name);
        ++replies;
        auto req = wire::parse_mpa(x.request);
        auto rep = wire::parse_mpa(x.reply);
        ASSERT_TRUE(req.has_value() && rep.has_value());
        ASSERT_TRUE(req->v2.has_value());
        CoreConfig cfg = config_for(kMacB, 7);
        cfg.mpa.crc = req->crc;
        cfg.mpa.peer_to_peer = req->v2->peer_to_peer;
        if (req->v2->peer_to_peer) cfg.mpa.rtr_types = rtr_set(*req->v2);
        Dut d(cfg);
        ConnectParams cp = d.connect_params();
        cp.ird = req->v2->ird;
        cp.ord = req->v2->ord;
        cp.private_data = req->private_data;
        const Sent ours = d.to_mpareq_sent(cp);
        EXPECT_EQ(wire::to_hex(ours.payload), wire::to_hex(x.request));
        d.send_mpa(*rep);
        auto e = d.evs();
        ASSERT_EQ(e.size(), 1u);
        ASSERT_EQ(e[0].type, EventType::kEstablished);
        const bool p2p = req->v2->peer_to_peer && rep->v2 && rep->v2->peer_to_peer;
        EXPECT_EQ(e[0].mpa.crc, req->crc || rep->crc);
        EXPECT_EQ(e[0].mpa.peer_to_peer, p2p);
        ASSERT_TRUE(rep->v2.has_value());
        EXPECT_EQ(e[0].mpa.ord, std::min(req->v2->ord, rep->v2->ird));
        auto o = d.out();
        if (!p2p) {
            EXPECT_EQ(e[0].mpa.rtr, RtrType::kNone);
            continue;
        }
        ++rtrs;
        EXPECT_EQ(e[0].mpa.rtr, RtrType::kWrite);  // siw's choice, the C bit
        ASSERT_EQ(o.size(), 1u);
        EXPECT_EQ(wire::to_hex(o[0].payload), wire::to_hex(x.after_request));
        auto fpdu = wire::parse_fpdu(o[0].payload, e[0].mpa.crc);
        ASSERT_TRUE(fpdu.has_value());
        EXPECT_TRUE(fpdu->crc_ok);
        EXPECT_EQ(wire::parse_rtr(fpdu->ulpdu).value_or(wire::RtrType::kSend),
                  wire::RtrType::kWrite);
    }
    EXPECT_EQ(replies, 6);  // the captures where siw answers
    EXPECT_EQ(rtrs, 2);     // iwcm-client-crc and -nocrc
}

}  // namespace
}  // namespace iwcm::test
