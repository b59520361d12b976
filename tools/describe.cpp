// describe_frame: a short human-readable summary of a frame the CM sent or
// received. Read first: src/wire/frame.hpp, src/wire/mpa.hpp, src/wire/fpdu.hpp.
#include <cstdio>
#include <string>

#include "tools/commands.hpp"
#include "wire/fpdu.hpp"
#include "wire/frame.hpp"
#include "wire/mpa.hpp"

namespace iwcm::tools {

namespace {

std::string flags_text(std::uint8_t f) {
    namespace tf = wire::tcp_flags;
    std::string s;
    auto add = [&](std::uint8_t bit, const char* name) {
        if (!(f & bit)) return;
        if (!s.empty()) s += ',';
        s += name;
    };
    add(tf::kSyn, "SYN");
    add(tf::kFin, "FIN");
    add(tf::kRst, "RST");
    add(tf::kPsh, "PSH");
    add(tf::kAck, "ACK");
    return s;
}

std::string rtr_text(const wire::MpaV2Params& p) {
    std::string s;
    if (p.rtr_send) s += 'S';
    if (p.rtr_write) s += 'W';
    if (p.rtr_read) s += 'R';
    return s.empty() ? "-" : s;
}

std::string mpa_text(const wire::MpaRepr& m) {
    char buf[160];
    const char* kind =
        m.kind == wire::MpaKind::kRequest ? "MPA request" : (m.reject ? "MPA reject" : "MPA reply");
    int n = std::snprintf(buf, sizeof buf, "%s rev%u%s%s pd=%zu", kind, m.revision,
                          m.crc ? " C" : "", m.markers ? " M" : "", m.private_data.size());
    std::string s(buf, static_cast<std::size_t>(n));
    if (m.v2) {
        std::snprintf(buf, sizeof buf, " ird=%u ord=%u%s rtr=%s", m.v2->ird, m.v2->ord,
                      m.v2->peer_to_peer ? " p2p" : "", rtr_text(*m.v2).c_str());
        s += buf;
    }
    return s;
}

std::string payload_text(wire::Bytes payload) {
    if (auto mpa = wire::parse_mpa(payload)) return mpa_text(*mpa);
    if (auto f = wire::parse_fpdu(payload, false)) {
        if (auto rtr = wire::parse_rtr(f->ulpdu)) {
            const char* names[] = {"send", "write", "read"};
            return std::string("FPDU RTR ") + names[static_cast<int>(*rtr)];
        }
        if (auto t = wire::parse_terminate(f->ulpdu))
            return std::string("FPDU TERMINATE ") + wire::to_string(*t);
        return "FPDU " + std::to_string(f->ulpdu.size()) + " bytes";
    }
    return std::to_string(payload.size()) + " bytes";
}

}  // namespace

std::string describe_frame(std::span<const std::byte> frame) {
    auto p = wire::parse_tcp_frame(frame);
    if (!p) return "(unparsable: " + p.error().to_string() + ")";
    const wire::TcpRepr& t = p->repr.tcp;
    char buf[200];
    int n =
        std::snprintf(buf, sizeof buf, "%-11s seq=%u", flags_text(t.flags).c_str(), t.seq.value());
    std::string s(buf, static_cast<std::size_t>(n));
    if (t.has(wire::tcp_flags::kAck)) s += " ack=" + std::to_string(t.ack.value());
    if (t.options.mss) s += " mss=" + std::to_string(*t.options.mss);
    if (t.options.window_scale) s += " ws=" + std::to_string(*t.options.window_scale);
    if (!p->payload.empty()) s += " | " + payload_text(p->payload);
    return s;
}

}  // namespace iwcm::tools
