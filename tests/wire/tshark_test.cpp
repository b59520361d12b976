// Wireshark reads what we write: a pcap of TCP handshakes, MPA requests and
// replies (revision 1 and 2), an RTR and a TERMINATE, all built by src/wire,
// decoded by tshark with checksum validation on.
//
// Read first: docs/design.md "MPA facts" (Wireshark 4.0's MPA dissector is a TCP
// heuristic that knows RFC 5044 only: revision 2 draws two warnings, about the
// revision and the 0x10 bit it calls reserved), src/wire/frame.hpp, mpa.hpp, fpdu.hpp.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "wire/fpdu.hpp"
#include "wire/frame.hpp"
#include "wire/mpa.hpp"
#include "wire/wire_test_util.hpp"

namespace iwcm::wire {
namespace {

using test::Buffer;

// Runs a shell command and returns its standard output, or nullopt if it failed.
std::optional<std::string> run(const std::string& cmd) {
    FILE* p = popen(cmd.c_str(), "r");
    if (p == nullptr) return std::nullopt;
    std::string out;
    char buf[4096];
    std::size_t n = 0;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    if (pclose(p) != 0) return std::nullopt;
    return out;
}

bool have_tshark() {
    return run("command -v tshark >/dev/null 2>&1 && echo yes").has_value();
}

// tshark is the decoder nobody on this project wrote: where CI runs (CI=true, as CI
// services set it) a missing tshark is a failure, not a skip.
bool in_ci() {
    const char* ci = std::getenv("CI");
    return ci != nullptr && std::string_view(ci) == "true";
}

// One TCP connection's two ends, keeping sequence numbers consistent so that
// Wireshark's TCP analysis has nothing to report.
class Conversation {
public:
    Conversation(test::PcapWriter& pcap, IpAddr client, IpAddr server, std::uint16_t port)
        : pcap_(pcap) {
        ends_[0].eth = {MacAddr{{2, 0, 0, 0, 0, 2}}, MacAddr{{2, 0, 0, 0, 0, 1}}, {}, 0};
        ends_[1].eth = {MacAddr{{2, 0, 0, 0, 0, 1}}, MacAddr{{2, 0, 0, 0, 0, 2}}, {}, 0};
        ends_[0].ip.src = ends_[1].ip.dst = client;
        ends_[0].ip.dst = ends_[1].ip.src = server;
        ends_[0].tcp.src_port = ends_[1].tcp.dst_port = port;
        ends_[0].tcp.dst_port = ends_[1].tcp.src_port = 7174;
        ends_[0].tcp.seq = SeqNumber(1000);
        ends_[1].tcp.seq = SeqNumber(0xFFFFFF00u);  // wraps during the exchange
    }

    void handshake() {
        TcpOptions syn_opts{1460, 7, true, TcpTimestamps{100, 0}};
        send(0, tcp_flags::kSyn, {}, syn_opts);
        syn_opts.timestamps = TcpTimestamps{200, 100};
        send(1, tcp_flags::kSyn | tcp_flags::kAck, {}, syn_opts);
        send(0, tcp_flags::kAck, {});
    }

    // Sends from end `from` (0 client, 1 server); SYN and FIN count one sequence number.
    void send(int from, std::uint8_t flags, Bytes payload, TcpOptions opts = {}) {
        FrameRepr& r = ends_[from];
        r.tcp.flags = flags;
        r.tcp.options = opts;
        r.tcp.window = 4096;
        r.tcp.ack = (flags & tcp_flags::kAck) ? ends_[1 - from].tcp.seq : SeqNumber(0);
        r.ip.ident = static_cast<std::uint16_t>(r.ip.ident + 1);
        Buffer out(tcp_frame_len(r, payload.size()));
        emit_tcp_frame(r, payload, out);
        pcap_.add(out);
        r.tcp.seq += static_cast<std::uint32_t>(payload.size());
        if (flags & (tcp_flags::kSyn | tcp_flags::kFin)) r.tcp.seq += 1;
    }

    void send_data(int from, Bytes payload) {
        send(from, tcp_flags::kAck | tcp_flags::kPsh, payload);
    }

private:
    test::PcapWriter& pcap_;
    FrameRepr ends_[2];
};

Buffer mpa_bytes(const MpaRepr& r) {
    Buffer out(r.buffer_len());
    r.emit(out);
    return out;
}

// Frame numbers (1-based, as tshark counts) of the interesting frames.
struct Layout {
    int req_v1 = 0, rep_v1 = 0, req_v2 = 0, rep_v2 = 0, rtr = 0, term = 0, rej = 0, total = 0;
};

Layout write_capture(const std::string& path) {
    test::PcapWriter pcap;
    Layout l;
    int n = 0;
    auto next = [&n](int frames) { return n += frames; };

    Conversation v1(pcap, Ipv4Addr{{10, 0, 0, 1}}, Ipv4Addr{{10, 0, 0, 2}}, 40001);
    v1.handshake();
    next(3);
    MpaRepr req{MpaKind::kRequest, false, true, false, 1, std::nullopt, as_bytes("iwcm rev1")};
    v1.send_data(0, mpa_bytes(req));
    l.req_v1 = next(1);
    MpaRepr rep{MpaKind::kReply, false, true, false, 1, std::nullopt, as_bytes("ok")};
    v1.send_data(1, mpa_bytes(rep));
    l.rep_v1 = next(1);

    Conversation v2(pcap, *Ipv6Addr::parse("fd77::1"), *Ipv6Addr::parse("fd77::2"), 40002);
    v2.handshake();
    next(3);
    req = MpaRepr{MpaKind::kRequest,
                  false,
                  true,
                  false,
                  2,
                  MpaV2Params{4, 4, true, false, true, false},
                  as_bytes("iwcm rev2 hello")};
    v2.send_data(0, mpa_bytes(req));
    l.req_v2 = next(1);
    rep = MpaRepr{
        MpaKind::kReply, false, true, false, 2, MpaV2Params{4, 4, true, false, true, false}, {}};
    v2.send_data(1, mpa_bytes(rep));
    l.rep_v2 = next(1);
    Buffer rtr(rtr_fpdu_len(RtrType::kWrite));
    emit_rtr_fpdu(RtrParams{RtrType::kWrite, 0x1234}, true, rtr);
    v2.send_data(0, rtr);
    l.rtr = next(1);
    Buffer term(terminate_fpdu_len());
    emit_terminate_fpdu(TermError::kInsufficientIrd, true, term);
    v2.send_data(1, term);
    l.term = next(1);

    Conversation rj(pcap, Ipv4Addr{{10, 0, 0, 3}}, Ipv4Addr{{10, 0, 0, 2}}, 40003);
    rj.handshake();
    next(3);
    req = MpaRepr{MpaKind::kRequest, false, false, false, 1, std::nullopt, {}};
    rj.send_data(0, mpa_bytes(req));
    next(1);
    rep = MpaRepr{MpaKind::kReply, false, false, true, 1, std::nullopt, as_bytes("busy")};
    rj.send_data(1, mpa_bytes(rep));
    l.rej = next(1);
    rj.send(0, tcp_flags::kFin | tcp_flags::kAck, {});
    l.total = next(1);
    EXPECT_TRUE(pcap.write(path));
    return l;
}

// tshark's field output, one map of field name to value for each frame number.
std::map<int, std::map<std::string, std::string>> decode_fields(
    const std::string& path, const std::vector<std::string>& fields) {
    std::string cmd = "tshark -r '" + path +
                      "' -o tcp.check_checksum:TRUE -o ip.check_checksum:TRUE "
                      "--enable-heuristic iwarp_mpa_tcp -T fields -E separator=/t -E occurrence=a "
                      "-E aggregator=, -e frame.number";
    for (const auto& f : fields) cmd += " -e " + f;
    cmd += " 2>/dev/null";
    std::map<int, std::map<std::string, std::string>> out;
    auto text = run(cmd);
    EXPECT_TRUE(text) << cmd;
    if (!text) return out;
    std::istringstream lines(*text);
    std::string line;
    while (std::getline(lines, line)) {
        std::vector<std::string> cols;
        std::size_t start = 0;
        for (std::size_t tab; (tab = line.find('\t', start)) != std::string::npos; start = tab + 1)
            cols.push_back(line.substr(start, tab - start));
        cols.push_back(line.substr(start));
        if (cols.size() != fields.size() + 1) continue;
        auto& row = out[std::stoi(cols[0])];
        for (std::size_t i = 0; i < fields.size(); ++i) row[fields[i]] = cols[i + 1];
    }
    return out;
}

TEST(Tshark, DecodesOurMpaExchangeRtrAndTerminate) {
    if (!have_tshark()) {
        ASSERT_FALSE(in_ci()) << "CI=true and tshark is not installed (Debian: apt install tshark)";
        GTEST_SKIP() << "tshark is not installed";
    }
    const std::string path = testing::TempDir() + "iwcm_wire_tshark.pcap";
    const Layout l = write_capture(path);
    const std::vector<std::string> fields = {"tcp.checksum.status",
                                             "ip.checksum.status",
                                             "iwarp_mpa.key.req",
                                             "iwarp_mpa.key.rep",
                                             "iwarp_mpa.crc_flag",
                                             "iwarp_mpa.rej_flag",
                                             "iwarp_mpa.rev",
                                             "iwarp_mpa.pdlength",
                                             "iwarp_mpa.privatedata",
                                             "iwarp_mpa.ulpdulength",
                                             "iwarp_mpa.crc_check",
                                             "iwarp_rdma.opcode",
                                             "iwarp_ddp.stag",
                                             "iwarp_rdma.term_layer",
                                             "iwarp_rdma.term_etype_llp",
                                             "iwarp_rdma.term_errcode_llp",
                                             "_ws.malformed",
                                             "_ws.expert.message"};
    auto rows = decode_fields(path, fields);
    ASSERT_EQ(rows.size(), static_cast<std::size_t>(l.total));
    for (auto& [num, row] : rows) {
        // Checksum status 1 is "Good"; IPv6 has no header checksum.
        EXPECT_EQ(row["tcp.checksum.status"], "1") << "frame " << num;
        EXPECT_EQ(row["_ws.malformed"], "") << "frame " << num;
        EXPECT_EQ(row["_ws.expert.message"].find("hecksum"), std::string::npos) << num;
        EXPECT_EQ(row["_ws.expert.message"].find("alformed"), std::string::npos) << num;
    }
    auto& req1 = rows[l.req_v1];
    EXPECT_EQ(req1["iwarp_mpa.key.req"], "4d504120494420526571204672616d65");
    EXPECT_EQ(req1["iwarp_mpa.rev"], "1");
    EXPECT_EQ(req1["iwarp_mpa.crc_flag"], "1");
    EXPECT_EQ(req1["iwarp_mpa.pdlength"], "9");
    EXPECT_EQ(req1["iwarp_mpa.privatedata"], to_hex(as_bytes("iwcm rev1")));
    EXPECT_EQ(req1["ip.checksum.status"], "1");
    auto& rep1 = rows[l.rep_v1];
    EXPECT_EQ(rep1["iwarp_mpa.key.rep"], "4d504120494420526570204672616d65");
    EXPECT_EQ(rep1["iwarp_mpa.pdlength"], "2");
    auto& req2 = rows[l.req_v2];
    EXPECT_EQ(req2["iwarp_mpa.rev"], "2");
    EXPECT_EQ(req2["iwarp_mpa.pdlength"], "19");  // the IRD/ORD word counted
    EXPECT_EQ(req2["iwarp_mpa.privatedata"].substr(0, 8), "80048004");
    auto& rep2 = rows[l.rep_v2];
    EXPECT_EQ(rep2["iwarp_mpa.rev"], "2");
    EXPECT_EQ(rep2["iwarp_mpa.crc_flag"], "1");
    EXPECT_EQ(rep2["iwarp_mpa.pdlength"], "4");
    auto& rtr = rows[l.rtr];
    EXPECT_EQ(rtr["iwarp_mpa.ulpdulength"], "14");
    EXPECT_EQ(rtr["iwarp_mpa.crc_flag"], "");     // an FPDU, not a request or reply
    EXPECT_EQ(rtr["iwarp_rdma.opcode"], "0x00");  // RDMA Write
    EXPECT_EQ(rtr["iwarp_ddp.stag"], "0x00001234");
    EXPECT_NE(rtr["iwarp_mpa.crc_check"], "");
    auto& term = rows[l.term];
    EXPECT_EQ(term["iwarp_rdma.opcode"], "0x07");
    EXPECT_EQ(term["iwarp_rdma.term_layer"], "0x02");        // LLP
    EXPECT_EQ(term["iwarp_rdma.term_etype_llp"], "0x00");    // MPA
    EXPECT_EQ(term["iwarp_rdma.term_errcode_llp"], "0x06");  // insufficient IRD
    auto& rej = rows[l.rej];
    EXPECT_EQ(rej["iwarp_mpa.rej_flag"], "1");
    EXPECT_EQ(rej["iwarp_mpa.privatedata"], to_hex(as_bytes("busy")));
}

TEST(Tshark, ReportsGoodCrcOnOurFpdus) {
    if (!have_tshark()) {
        ASSERT_FALSE(in_ci()) << "CI=true and tshark is not installed (Debian: apt install tshark)";
        GTEST_SKIP() << "tshark is not installed";
    }
    const std::string path = testing::TempDir() + "iwcm_wire_tshark_crc.pcap";
    const Layout l = write_capture(path);
    const std::string cmd = "tshark -r '" + path +
                            "' -o tcp.check_checksum:TRUE --enable-heuristic iwarp_mpa_tcp -V "
                            "-Y 'iwarp_mpa.fpdu' 2>/dev/null";
    auto text = run(cmd);
    ASSERT_TRUE(text) << cmd;
    std::size_t good = 0;
    for (std::size_t at = 0; (at = text->find("(Good CRC32)", at)) != std::string::npos; ++at)
        ++good;
    EXPECT_EQ(good, 2u) << "the RTR (frame " << l.rtr << ") and the TERMINATE (frame " << l.term
                        << ")\n"
                        << *text;
    EXPECT_EQ(text->find("Bad CRC"), std::string::npos);
    EXPECT_NE(text->find("Insufficient IRD Resources"), std::string::npos);
}

}  // namespace
}  // namespace iwcm::wire
