// Writes the seed corpus of every fuzz target (fuzz/corpus/<target>/) from
// real traffic: two cores connect over IPv4, IPv6 and an 802.1Q VLAN at MPA
// revisions 1 and 2 (with CRC, RTR types, rejects, private data), close and
// reset; every frame is captured and cut into the layers each parser takes.
// The first SYN of each family is also written with IPv4 options, IPv6
// extension headers and as a fragment, the input those parsers skip or refuse.
// Run by scripts/fuzz.sh --corpus; the output is committed.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "fuzz/fuzz_util.hpp"
#include "iwcm/core.hpp"
#include "tests/wire/ip_extras.hpp"
#include "wire/ddp.hpp"
#include "wire/fpdu.hpp"
#include "wire/frame.hpp"
#include "wire/mpa.hpp"

using namespace iwcm;
namespace fs = std::filesystem;

namespace {

fs::path g_root;
std::set<std::string> g_written;

void write(const std::string& target, std::uint8_t prefix, bool with_prefix,
           std::span<const std::byte> bytes) {
    std::string data;
    if (with_prefix) data.push_back(static_cast<char>(prefix));
    for (std::byte b : bytes) data.push_back(static_cast<char>(b));
    // Name by content: the same input twice is one file.
    std::size_t h = std::hash<std::string>{}(data);
    char name[32];
    std::snprintf(name, sizeof name, "%016zx", h);
    fs::path dir = g_root / target;
    fs::create_directories(dir);
    if (!g_written.insert(target + name).second) return;
    std::ofstream(dir / name, std::ios::binary) << data;
}

struct Capture {
    std::vector<std::vector<std::byte>> frames;
};

void exchange(Capture& cap, bool v6, std::uint16_t vlan, std::uint8_t rev, bool crc,
              std::uint8_t rtr, bool reject) {
    CoreConfig ca, cb;
    ca.mac = MacAddr{{2, 0, 0, 0, 0, 0x0a}};
    cb.mac = MacAddr{{2, 0, 0, 0, 0, 0x0b}};
    ca.mpa.crc = crc;
    ca.mpa.rtr_types = rtr;
    cb.mpa.rtr_types = rtr;
    Core a(ca), b(cb);
    IpAddr ia = *IpAddr::parse(v6 ? "fd00::1" : "10.0.0.1");
    IpAddr ib = *IpAddr::parse(v6 ? "fd00::2" : "10.0.0.2");
    // Both addresses live on `vlan`: the listener and the connection follow it.
    (void)a.add_address(ia, vlan);
    (void)b.add_address(ib, vlan);
    (void)b.listen({{ib, 4791}, 0});
    Instant now{};
    auto pump = [&] {
        for (int i = 0; i < 50; ++i) {
            bool moved = false;
            while (auto f = a.poll_transmit()) {
                moved = true;
                cap.frames.emplace_back(f->begin(), f->end());
                b.receive(now, cap.frames.back());
            }
            while (auto f = b.poll_transmit()) {
                moved = true;
                cap.frames.emplace_back(f->begin(), f->end());
                a.receive(now, cap.frames.back());
            }
            while (auto e = b.poll_event()) {
                if (e->type != EventType::kConnectRequest) continue;
                std::vector<std::byte> pd(reject ? 7 : 12, std::byte{'r'});
                if (reject)
                    (void)b.reject(now, e->conn, pd);
                else
                    (void)b.accept(now, e->conn, {pd, 4, 4});
            }
            while (a.poll_event()) {
            }
            if (!moved) return;
        }
    };
    ConnectParams p;
    p.local = {ia, 0};
    p.remote = {ib, 4791};
    p.remote_mac = cb.mac;
    std::vector<std::byte> pd(20, std::byte{'q'});
    p.private_data = pd;
    p.mpa_revision = rev;
    auto h = a.connect(now, p);
    pump();
    if (h) (void)a.disconnect(now, *h, DisconnectMode::kGraceful);
    pump();
    // A segment for nothing (answered with RST), and a connect to a closed port.
    p.remote.port = 9;
    (void)a.connect(now, p);
    pump();
}

// The frame (untagged) with IPv4 options or IPv6 extension headers, and as a
// fragment: each to the frame, IP and core targets (core as a raw chunk).
void write_ip_variants(const std::vector<std::byte>& f, std::vector<std::byte>& core_input) {
    using wire::hex_bytes;
    std::vector<std::vector<std::byte>> variants;
    if (fuzz::be16(f, 12) == wire::kEtherTypeIpv4) {
        variants.push_back(wire::test::with_ipv4_options(f, hex_bytes("94 04 00 00")));
        variants.push_back(wire::test::with_ipv4_options(f, hex_bytes("01 01 94 04 00 00 00 00")));
        variants.push_back(f);
        fuzz::put16(variants.back(), 14 + 6, 0x2000);  // MF (fix_checksums repairs the sum)
    } else {
        const char* kChain =
            "3c 00 05 02 00 00 01 00 2b 00 01 04 00 00 00 00"
            "06 02 02 00 00 00 00 00 fd 00 00 00 00 00 00 00 00 00 00 00 00 00 00 09";
        variants.push_back(wire::test::with_ipv6_extensions(f, 0, hex_bytes(kChain)));
        variants.push_back(
            wire::test::with_ipv6_extensions(f, 44, hex_bytes("06 00 00 00 00 00 00 00")));
    }
    for (auto& v : variants) {
        fuzz::fix_checksums(v);
        write("frame", 1, true, v);
        const auto ip = std::span<const std::byte>(v).subspan(14);
        if (fuzz::be16(f, 12) == wire::kEtherTypeIpv4)
            write("ipv4", 0, true, ip);
        else
            write("ipv6", 0, false, ip);
        core_input.push_back(std::byte{0});
        core_input.push_back(static_cast<std::byte>(v.size()));
        core_input.insert(core_input.end(), v.begin(), v.end());
    }
}

// DDP seeds: the ULPDUs of RTRs, a tagged Write with data, and Terminates
// without and with the quoted DDP and Read Request headers.
void write_ddp_seeds() {
    for (auto type : {wire::RtrType::kSend, wire::RtrType::kWrite, wire::RtrType::kRead}) {
        std::byte buf[64];
        std::size_t n = wire::emit_rtr_fpdu({type, 0x1234}, false, buf);
        write("ddp", 0, false, wire::parse_fpdu(std::span<const std::byte>(buf, n), false)->ulpdu);
    }
    wire::DdpHeader w;
    w.tagged = true;
    w.stag = 0x923AD900;
    w.to = 0x5568CFBCBF30;
    std::vector<std::byte> write_seg(w.header_len() + 8, std::byte{'x'});
    wire::emit_ddp_header(w, write_seg);
    write("ddp", 0, false, write_seg);
    std::byte rr[64];
    wire::emit_rtr_fpdu({wire::RtrType::kRead, 0x1234}, false, rr);
    const std::byte* read_ulpdu = rr + wire::kFpduLengthLen;
    wire::TerminateRepr t;
    for (int k = 0; k < 3; ++k) {
        t.layer = k == 0   ? wire::TermLayer::kLlp
                  : k == 1 ? wire::TermLayer::kDdp
                           : wire::TermLayer::kRdmap;
        t.etype = static_cast<std::uint8_t>(k);
        t.code = static_cast<std::uint8_t>(k + 1);
        if (k >= 1) {
            t.ddp_segment_len = 28;
            t.ddp_header = std::span<const std::byte>(read_ulpdu, wire::kDdpUntaggedHeaderLen);
        }
        if (k == 2)
            t.rdmap_header = std::span<const std::byte>(read_ulpdu + wire::kDdpUntaggedHeaderLen,
                                                        wire::kReadRequestPayloadLen);
        std::vector<std::byte> term(wire::terminate_ulpdu_len(t));
        wire::emit_terminate_ulpdu(t, 1, term);
        write("ddp", 0, false, term);
    }
}

}  // namespace

int main(int argc, char** argv) {
    g_root = argc > 1 ? argv[1] : "fuzz/corpus";
    Capture cap;
    for (bool v6 : {false, true})
        for (std::uint8_t rev : {1, 2})
            exchange(cap, v6, v6 ? kNoVlan : (rev == 2 ? 7 : kNoVlan), rev, rev == 2 && !v6,
                     rtr::kAll, false);
    exchange(cap, false, kNoVlan, 2, true, rtr::kWrite, false);
    exchange(cap, false, kNoVlan, 2, false, rtr::kRead, false);
    exchange(cap, false, kNoVlan, 2, false, rtr::kAll, true);
    exchange(cap, true, kNoVlan, 1, false, rtr::kAll, true);
    std::size_t core_inputs = 0;
    std::vector<std::byte> core_input{std::byte{0x0f}};
    std::vector<std::byte> variant_input{std::byte{0x0f}};
    bool syn_seen[2] = {false, false};
    for (std::size_t i = 0; i < cap.frames.size(); ++i) {
        const auto& f = cap.frames[i];
        write("ethernet", 0, false, f);
        write("frame", 1, true, f);
        auto eth = wire::parse_ethernet(f);
        if (!eth) continue;
        if (eth->repr.ethertype == wire::kEtherTypeIpv4) write("ipv4", 0, true, eth->payload);
        if (eth->repr.ethertype == wire::kEtherTypeIpv6) write("ipv6", 0, false, eth->payload);
        auto fr = wire::parse_tcp_frame(f);
        if (!fr) continue;
        const bool v6 = !fr->repr.ip.src.is_v4();
        if (fr->repr.tcp.flags == wire::tcp_flags::kSyn && !eth->repr.vlan && !syn_seen[v6]) {
            syn_seen[v6] = true;
            write_ip_variants(f, variant_input);
        }
        const auto seg_start = fr->payload.data() - fr->repr.tcp.header_len();
        auto seg = eth->payload.subspan(static_cast<std::size_t>(seg_start - eth->payload.data()));
        std::size_t tcp_len = fr->repr.tcp.header_len() + fr->payload.size();
        write("tcp", fr->repr.ip.src.is_v4() ? 0 : 2, true,
              seg.first(std::min(tcp_len, seg.size())));
        if (!fr->payload.empty()) {
            if (wire::parse_mpa(fr->payload))
                write("mpa", 0, false, fr->payload);
            else
                write("fpdu", 1, true, fr->payload), write("fpdu", 0, true, fr->payload);
        }
        // Core: a raw chunk (kind 0) of each frame small enough for a one-byte length.
        if (f.size() <= 255 && core_input.size() < 1500) {
            core_input.push_back(std::byte{0});
            core_input.push_back(static_cast<std::byte>(f.size()));
            core_input.insert(core_input.end(), f.begin(), f.end());
        }
    }
    write("core", 0, false, core_input);
    write("core", 0, false, variant_input);
    core_inputs += 2;
    // Core: template chunks (kind 1) carrying MPA frames and RTRs onto A's
    // connections in every state, with ACK+PSH flags.
    for (std::uint8_t mode : {0x0f, 0x06, 0x0c}) {
        std::vector<std::byte> in{static_cast<std::byte>(mode)};
        for (std::uint8_t t = 0; t < 25; ++t) {
            for (int kind = 0; kind < 3; ++kind) {
                std::vector<std::byte> payload;
                wire::MpaRepr m;
                m.kind = kind == 0 ? wire::MpaKind::kRequest : wire::MpaKind::kReply;
                m.reject = kind == 2;
                m.v2 = wire::MpaV2Params{4, 4, true, true, false, false};
                std::vector<std::byte> pd(9, std::byte{'p'});
                m.private_data = pd;
                payload.resize(m.buffer_len());
                m.emit(payload);
                if (kind == 1) {
                    std::byte rtr[64];
                    std::size_t n = wire::emit_rtr_fpdu({wire::RtrType::kSend}, false, rtr);
                    payload.insert(payload.end(), rtr, rtr + n);
                }
                in.push_back(std::byte{1});
                in.push_back(static_cast<std::byte>(4 + payload.size()));
                in.push_back(static_cast<std::byte>(t));
                in.push_back(std::byte{0x18});  // ACK | PSH
                in.push_back(std::byte{0});
                in.push_back(std::byte{0});
                in.insert(in.end(), payload.begin(), payload.end());
            }
        }
        write("core", 0, false, in);
        ++core_inputs;
    }
    // MPA and FPDU inputs made directly: every kind, revision and flag.
    for (int rev = 0; rev <= 3; ++rev)
        for (int flags = 0; flags < 16; ++flags) {
            std::vector<std::byte> f(20 + 8);
            auto key = (flags & 1) ? "MPA ID Rep Frame" : "MPA ID Req Frame";
            for (int i = 0; i < 16; ++i) f[i] = static_cast<std::byte>(key[i]);
            f[16] = static_cast<std::byte>((flags & 0xE) << 4);
            f[17] = static_cast<std::byte>(rev);
            f[19] = std::byte{8};
            write("mpa", 0, false, f);
        }
    for (auto type : {wire::RtrType::kSend, wire::RtrType::kWrite, wire::RtrType::kRead})
        for (bool crc : {false, true}) {
            std::byte buf[64];
            std::size_t n = wire::emit_rtr_fpdu({type}, crc, buf);
            write("fpdu", crc ? 1 : 0, true, std::span<const std::byte>(buf, n));
        }
    for (int e = 0; e < 3; ++e) {
        std::byte buf[128];
        auto err = e == 0   ? wire::TermError::kInsufficientIrd
                   : e == 1 ? wire::TermError::kNoMatchingRtr
                            : wire::TermError::kCrcError;
        std::size_t n = wire::emit_terminate_fpdu(err, e == 2, buf);
        write("fpdu", e == 2 ? 1 : 0, true, std::span<const std::byte>(buf, n));
    }
    write_ddp_seeds();
    std::printf("corpus: %zu frames captured, %zu files, %zu core inputs, in %s\n",
                cap.frames.size(), g_written.size(), core_inputs, g_root.c_str());
    return 0;
}
