// Shared parts of `iwarp-cm listen` and `iwarp-cm connect`. Read first: wire_cli.hpp.
#include "tools/wire_cli.hpp"

#include <fcntl.h>
#include <net/if.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>

#include "tools/json.hpp"

namespace iwcm::tools {

namespace {

bool printable(const std::vector<std::byte>& b) {
    for (std::byte c : b) {
        auto u = static_cast<unsigned char>(c);
        if (u < 0x20 || u > 0x7E) return false;
    }
    return true;
}

std::string hex(const std::vector<std::byte>& b) {
    static const char* digits = "0123456789abcdef";
    std::string s;
    for (std::byte c : b) {
        auto u = static_cast<unsigned char>(c);
        s += digits[u >> 4];
        s += digits[u & 15];
    }
    return s;
}

double seconds(Duration d) {
    return static_cast<double>(d.count()) / 1e9;
}

// A set of rtr::k* as a JSON array of RtrType names, e.g. ["send","read"].
std::string rtr_list(std::uint8_t types) {
    std::string out;
    const std::pair<std::uint8_t, RtrType> kinds[] = {
        {rtr::kSend, RtrType::kSend}, {rtr::kWrite, RtrType::kWrite}, {rtr::kRead, RtrType::kRead}};
    for (const auto& [bit, type] : kinds) {
        if ((types & bit) == 0) continue;
        out += out.empty() ? "" : ",";
        out += json_quote(to_string(type));
    }
    return "[" + out + "]";
}

}  // namespace

void add_interface_options(CLI::App* cmd, WireOptions& o) {
    auto* tap =
        cmd->add_option("--tap", o.tap, "TAP device to use (created if missing, brought up)");
    auto* dev = cmd->add_option("--dev", o.dev,
                                "share this interface and its address with the kernel (AF_XDP; "
                                "docs/shared-address.md); needs root");
    tap->excludes(dev);
    dev->excludes(tap);
    cmd->add_flag("--no-tap-offload", o.no_tap_offload,
                  "with --tap: no virtio-net header, so every checksum is computed here and "
                  "every segment is at most an MSS (by default the kernel finishes checksums "
                  "and cuts long segments at the MSS, as a NIC's TSO)")
        ->excludes(dev);
    cmd->add_option("--xdp-mode", o.xdp_mode,
                    "with --dev: where the XDP program runs: auto (native if the driver has it), "
                    "native, generic")
        ->check(CLI::IsMember({"auto", "native", "generic"}))
        ->needs(dev);
    cmd->add_option("--ip", o.ip,
                    "the CM's own unicast address and prefix, e.g. 10.99.1.2/24 or fd99::2/64; "
                    "with --dev one of the interface's addresses (default: its first)");
    auto* mac = cmd->add_option("--mac", o.mac,
                                "the CM's own MAC (default 02:00 and the last 4 address bytes)");
    auto* gw = cmd->add_option(
        "--gateway", o.gateway,
        "router for peers outside the --ip prefix: its MAC is theirs (in the subnet, "
        "unicast, not --ip)");
    auto* vlan =
        cmd->add_option("--vlan", o.vlan, "802.1Q VLAN id: frames are tagged both ways (-1: none)")
            ->transform(bounded(-1, 4094, true));
    // With --dev the interface's MAC, the kernel's routes; a VLAN is its own interface.
    dev->excludes(mac)->excludes(gw)->excludes(vlan);
    cmd->add_option("--tos", o.tos,
                    "IP TOS byte (DSCP << 2 | ECN) of our frames; with --vlan the 802.1Q priority "
                    "follows it (PCP = DSCP / 8). listen: a connection takes the larger of this "
                    "and its client's SYN's")
        ->check(byte_value());
}

void add_output_options(CLI::App* cmd, WireOptions& o) {
    cmd->add_option("--pcap", o.pcap, "write every frame in and out to this pcap file");
    cmd->add_flag("--json", o.json, "one JSON object per line per event");
    cmd->add_flag("--crc", o.crc, "ask for CRC32c on FPDUs (MPA C flag)");
    Progress::add_options(cmd, o.progress);
}

void add_wire_options(CLI::App* cmd, WireOptions& o) {
    add_interface_options(cmd, o);
    auto* text = cmd->add_option("--pdata", o.pdata,
                                 "private data to send (request, reply or reject), as text");
    auto* hex =
        cmd->add_option("--pdata-hex", o.pdata_hex, "the private data as hex digits, e.g. 00ff10");
    auto* file =
        cmd->add_option("--pdata-file", o.pdata_file, "the private data: the bytes of this file");
    text->excludes(hex)->excludes(file);
    hex->excludes(text)->excludes(file);
    file->excludes(text)->excludes(hex);
    cmd->add_option("--ird", o.ird, "responder resources (IRD)")
        ->transform(bounded(0, 0x3FFE, true));
    cmd->add_option("--ord", o.ord, "initiator depth (ORD)")->transform(bounded(0, 0x3FFE, true));
    cmd->add_option("--mpa-rev", o.mpa_rev,
                    "MPA revision: connect sends this revision; listen rejects requests above it. "
                    "Private data at most 512 bytes at 1, 508 at 2")
        ->check(CLI::IsMember({1, 2}));
    add_output_options(cmd, o);
    cmd->add_flag("--no-p2p", o.no_p2p, "revision 2: do not offer peer-to-peer mode (no RTR)");
}

namespace {

std::vector<std::byte> parse_hex(const std::string& text) {
    std::string digits = text;
    if (digits.rfind("0x", 0) == 0 || digits.rfind("0X", 0) == 0) digits.erase(0, 2);
    if (digits.size() % 2 != 0) throw UsageError{"--pdata-hex: an odd number of hex digits"};
    std::vector<std::byte> out;
    for (std::size_t i = 0; i < digits.size(); i += 2) {
        unsigned byte = 0;
        const char* first = digits.data() + i;
        const auto [end, ec] = std::from_chars(first, first + 2, byte, 16);
        if (ec != std::errc{} || end != first + 2)
            throw UsageError{"--pdata-hex: '" + digits.substr(i, 2) + "' is not a hex byte"};
        out.push_back(static_cast<std::byte>(byte));
    }
    return out;
}

// Reads at most `limit` + 1 bytes: enough to tell that a file is too long.
// Only a regular file: a FIFO or a device could hold the command forever
// (opening a FIFO waits for a writer, reading a terminal for a line), so
// the file is opened without waiting and refused if it is anything else.
std::vector<std::byte> read_file(const std::string& path, std::size_t limit) {
    const auto error = [&path](int err) {
        return UsageError{"--pdata-file " + path + ": " + std::strerror(err)};
    };
    const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) throw error(errno);
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
        const int err = errno;
        ::close(fd);
        throw error(err);
    }
    if (!S_ISREG(st.st_mode)) {
        ::close(fd);
        throw UsageError{"--pdata-file " + path +
                         ": not a regular file (a FIFO or a device could block; give the "
                         "bytes with --pdata-hex)"};
    }
    std::vector<std::byte> out(limit + 1);
    std::size_t n = 0;
    while (n < out.size()) {
        const ssize_t got = ::read(fd, out.data() + n, out.size() - n);
        if (got == 0) break;
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) {
            const int err = errno;
            ::close(fd);
            throw error(err);
        }
        n += static_cast<std::size_t>(got);
    }
    ::close(fd);
    out.resize(n);
    return out;
}

}  // namespace

std::vector<std::byte> private_data(const WireOptions& o) {
    const std::size_t limit = o.mpa_rev == 1 ? 512 : 508;
    std::vector<std::byte> pd;
    std::string from = "--pdata";
    if (!o.pdata_hex.empty()) {
        pd = parse_hex(o.pdata_hex);
        from = "--pdata-hex";
    } else if (!o.pdata_file.empty()) {
        pd = read_file(o.pdata_file, limit);
        from = "--pdata-file " + o.pdata_file;
    } else {
        pd = to_bytes(o.pdata);
    }
    if (pd.size() > limit)
        throw UsageError{from + ": more than " + std::to_string(limit) +
                         " bytes of private data (MPA revision " + std::to_string(o.mpa_rev) +
                         " allows at most " + std::to_string(limit) + ")"};
    return pd;
}

std::string seconds_text(double s) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g s", s);
    return buf;
}

Expected<Interface, std::string> parse_interface(const WireOptions& o) {
    return io::parse_interface(o);
}

CoreConfig core_config(const WireOptions& o, const Interface& iface) {
    CoreConfig cfg;
    cfg.mac = iface.mac;
    cfg.mpa.revision = static_cast<std::uint8_t>(o.mpa_rev);
    cfg.mpa.crc = o.crc;
    cfg.mpa.peer_to_peer = !o.no_p2p;
    cfg.mpa.rtr_types = o.rtr_types;
    cfg.mpa.reply_timeout =
        std::chrono::duration_cast<Duration>(std::chrono::duration<double>(o.mpa_reply_timeout_s));
    std::random_device rd;
    for (auto& b : cfg.isn_secret) b = static_cast<std::uint8_t>(rd());
    for (auto& b : cfg.syn_cookie_secret) b = static_cast<std::uint8_t>(rd());
    return cfg;
}

io::XskDevice::Mode xdp_mode(const WireOptions& o) {
    return o.xdp_mode == "native"    ? io::XskDevice::Mode::kNative
           : o.xdp_mode == "generic" ? io::XskDevice::Mode::kGeneric
                                     : io::XskDevice::Mode::kAuto;
}

std::string xdp_field(const io::SteeredDevice& x) {
    const std::string how = *x.path() != '\0' ? x.path() : x.zero_copy() ? "zero-copy" : "copy";
    return std::string(x.attach_mode()) + "/" + how;
}

Expected<Session, std::string> open_session(const WireOptions& o, const Interface& iface) {
    Session s;
    s.iface = iface;
    CoreConfig cfg = core_config(o, iface);
    // The TAP's virtio-net header where the kernel has it: checksums and segmentation left
    // to the kernel (tap.hpp).
    const bool offload = iface.dev.empty() && !o.no_tap_offload && io::TapDevice::kernel_offloads();
    if (offload) io::tap_offload_config(cfg);
    s.core = std::make_unique<Core>(cfg);
    if (!iface.dev.empty()) {
        auto rtnl = io::Rtnl::open();
        if (!rtnl) return fail("--dev " + iface.dev + ": " + rtnl.error());
        io::SharedHostConfig sc;
        sc.dev = iface.dev;
        sc.pcap_path = o.pcap;
        sc.mode = xdp_mode(o);
        auto shared = io::SharedHost::open(sc, std::move(*rtnl), *s.core, iface.addr);
        if (!shared) return fail("--dev " + iface.dev + ": " + shared.error());
        s.shared = std::move(*shared);
        s.host = &s.shared->host();
        return s;
    }
    io::TapHostConfig hc;
    hc.tap = o.tap;
    hc.pcap_path = o.pcap;
    hc.offload = offload;
    auto host = io::TapHost::open(hc, *s.core, iface.vlan);
    if (!host) return fail(host.error());
    s.tap_host = std::move(*host);
    s.host = s.tap_host.get();
    if (auto r = s.host->add_address(iface.addr); !r)
        return fail("--ip: " + std::string(to_string(r.error())));
    return s;
}

Expected<ListenHandle, std::string> session_listen(Session& s, const ListenParams& lp) {
    if (s.shared) return s.shared->listen(lp);
    auto l = s.core->listen(lp);
    if (!l)
        return fail("listen on " + lp.local.to_string() + ": " + std::string(to_string(l.error())));
    return *l;
}

void session_unlisten(Session& s, Instant now, ListenHandle l) {
    if (s.shared)
        s.shared->destroy_listen(now, l);
    else
        (void)s.core->destroy_listen(now, l);
}

Expected<ConnHandle, std::string> session_connect(Session& s, Instant now,
                                                  const ConnectParams& cp) {
    if (s.shared) return s.shared->connect(now, cp);
    auto c = s.core->connect(now, cp);
    if (!c) return fail("connect: " + std::string(to_string(c.error())));
    return *c;
}

void describe_device(Report& r, const Session& s, const WireOptions& o) {
    if (!s.shared) {
        r.add("tap", o.tap);
        return;
    }
    r.add("dev", o.dev);
    r.add("xdp", xdp_field(s.shared->xsk()));
}

std::vector<std::byte> to_bytes(const std::string& s) {
    std::vector<std::byte> v(s.size());
    for (std::size_t i = 0; i < s.size(); ++i) v[i] = static_cast<std::byte>(s[i]);
    return v;
}

IpAddr check_peer(const std::string& what, const IpAddr& peer, const Interface& iface,
                  const std::string& ip) {
    if (const std::string why = not_unicast(peer, iface); !why.empty())
        throw UsageError{what + ": " + why + " cannot be a peer"};
    if (peer == iface.addr) throw UsageError{what + ": that is our own address (--ip)"};
    if (!iface.dev.empty()) return peer;  // the kernel's route tells the hop (resolve_peer)
    const auto hop = iface.next_hop(peer);
    if (!hop)
        throw UsageError{what + ": not in the subnet of --ip " + ip +
                         " (an off-link peer needs --gateway)"};
    return *hop;
}

ConnectParams connect_params(const Session& s, const WireOptions& o, const Endpoint& to,
                             const MacAddr& mac) {
    ConnectParams cp;
    cp.local = {s.iface.addr, 0};
    cp.remote = to;
    cp.remote_mac = mac;
    cp.vlan = s.iface.vlan;
    cp.tos = static_cast<std::uint8_t>(o.tos);
    return cp;
}

namespace {

// resolve_peer with --dev: the kernel's route gives the hop, the kernel
// resolves it (its ARP / ND), its neighbour notifications wake the loop.
std::optional<MacAddr> resolve_shared(Session& s, const Reporter& rep, const Endpoint& to,
                                      Instant deadline, const std::function<bool(Instant)>& step,
                                      const std::function<void(int, std::string)>& fail) {
    auto hop = s.shared->next_hop(to.addr);
    if (!hop) {
        fail(exit_codes::kResolution, hop.error());
        return std::nullopt;
    }
    Report r;
    r.event = "resolving";
    r.remote = to;
    if (*hop != to.addr) r.add("gateway", hop->to_string());
    rep.print(io::TapHost::now(), r);
    const std::string what = (*hop != to.addr ? "gateway " : "") + hop->to_string();
    if (auto res = s.shared->resolve(*hop); !res) {
        fail(exit_codes::kResolution, "cannot resolve " + what + ": " + res.error());
        return std::nullopt;
    }
    MacAddr mac;
    for (;;) {
        const auto st = s.shared->peer(*hop, mac);
        if (st == io::PeerStatus::kResolved) break;
        if (st == io::PeerStatus::kFailed) {
            fail(exit_codes::kResolution, "cannot resolve " + what +
                                              ": the kernel's neighbour "
                                              "entry failed (no answer)");
            return std::nullopt;
        }
        if (io::TapHost::now() >= deadline) {
            fail(exit_codes::kResolution, "cannot resolve " + what + " before --timeout");
            return std::nullopt;
        }
        if (!step(deadline)) return std::nullopt;
    }
    r.event = "resolved";
    r.add("mac", mac.to_string());
    rep.print(io::TapHost::now(), r);
    return mac;
}

}  // namespace

std::optional<MacAddr> resolve_peer(Session& s, const Reporter& rep, const Endpoint& to,
                                    const IpAddr& hop, Instant deadline,
                                    const std::function<bool(Instant)>& step,
                                    const std::function<void(int, std::string)>& fail) {
    if (s.shared) return resolve_shared(s, rep, to, deadline, step, fail);
    auto& nb = s.host->neighbors();
    Report r;
    r.event = "resolving";
    r.remote = to;
    const bool via = hop != to.addr;
    if (via) r.add("gateway", hop.to_string());
    rep.print(io::TapHost::now(), r);
    nb.resolve(io::TapHost::now(), hop, s.iface.addr);
    const std::string what = (via ? "gateway " : "") + hop.to_string();
    const std::string proto = hop.is_v4() ? "ARP reply" : "neighbour advertisement";
    for (;;) {
        const Instant now = io::TapHost::now();
        const auto st = nb.status(now, hop);
        if (st == io::NeighborStatus::kResolved) break;
        if (st == io::NeighborStatus::kFailed || st == io::NeighborStatus::kUnknown) {
            fail(exit_codes::kResolution, "cannot resolve " + what + ": no " + proto);
            return std::nullopt;
        }
        if (now >= deadline) {
            fail(exit_codes::kResolution,
                 "cannot resolve " + what + ": no " + proto + " before --timeout");
            return std::nullopt;
        }
        if (!step(deadline)) return std::nullopt;
    }
    const MacAddr mac = *nb.lookup(io::TapHost::now(), hop);
    r.event = "resolved";
    r.add("mac", mac.to_string());
    rep.print(io::TapHost::now(), r);
    return mac;
}

CloseEnd finish_close(Session& s, const Reporter& rep, Instant limit,
                      const std::function<void(const Event&)>& on_event, const std::string& why,
                      bool time_wait) {
    Core& core = *s.core;
    CloseEnd end;
    const auto waiting = [&] { return time_wait ? core.live_nodes() : core.open_nodes(); };
    while (auto e = core.poll_event()) on_event(*e);
    while (!end.cut && waiting() > 0 && io::TapHost::now() < limit) {
        const io::Wake w = s.host->step(limit);
        while (auto e = core.poll_event()) on_event(*e);
        end.cut = w != io::Wake::kOk;
    }
    end.reset = core.open_nodes();
    if (end.reset > 0) {
        // Nodes in TIME_WAIT go without a frame; the others get an RST.
        (void)core.teardown_connections(io::TapHost::now(), s.iface.addr);
        while (auto e = core.poll_event()) on_event(*e);
        Report r;
        r.event = "reset_sent";
        r.add("connections", std::uint64_t{end.reset});
        r.add("why", end.cut ? std::string("second signal") : why);
        rep.print(io::TapHost::now(), r);
        // An RST inside the peer's window but not at its RCV.NXT (our bytes or
        // FIN it never got) draws a challenge ACK (RFC 5961 section 3.2); the
        // core, the node gone, answers it with an RST at its ACK number, which
        // resets the peer. So the loop runs a little longer, unless cut.
        const Instant linger = io::TapHost::now() + kResetLinger;
        while (!end.cut && io::TapHost::now() < linger) {
            end.cut = s.host->step(linger) != io::Wake::kOk;
            while (auto e = core.poll_event()) on_event(*e);
        }
    }
    s.host->flush();
    return end;
}

std::size_t close_all(Session& s, const Reporter& rep, const std::vector<ConnHandle>& open,
                      const std::function<void(const Event&)>& on_event) {
    for (ConnHandle h : open)
        if (h.valid()) (void)s.core->disconnect(io::TapHost::now(), h, DisconnectMode::kGraceful);
    return finish_close(s, rep, io::TapHost::now() + kGraceLimit, on_event,
                        "not closed within the grace limit", true)
        .reset;
}

void Report::add(const std::string& key, const std::string& v) {
    extra.emplace_back(key, json_quote(v));
}

Report Reporter::from_event(const Event& e) {
    Report r;
    r.event = std::string(to_string(e.type));
    r.local = e.local;
    r.remote = e.remote;
    r.state = std::string(to_string(e.state));
    if (e.type == EventType::kConnectRequest || e.type == EventType::kEstablished) {
        r.mpa_rev = e.mpa.revision;
        r.ird = e.mpa.ird;
        r.ord = e.mpa.ord;
        r.add_bool("p2p", e.mpa.peer_to_peer);
        // A request carries the RTR types the peer offers; established, the one chosen.
        if (e.type == EventType::kConnectRequest)
            r.extra.emplace_back("rtr_offered", rtr_list(e.mpa.rtr_offered));
        else
            r.add("rtr", std::string(to_string(e.mpa.rtr)));
        r.add_bool("crc", e.mpa.crc);
    }
    r.has_pdata = true;
    r.pdata.assign(e.private_data.begin(), e.private_data.end());
    if (e.status != 0) r.error = std::strerror(-e.status);
    r.extra.emplace_back("status", std::to_string(e.status));
    if (e.vlan != kNoVlan) r.add("vlan", std::uint64_t{e.vlan});
    return r;
}

void Reporter::print(Instant now, const Report& r) const {
    if (progress_ != nullptr) progress_->clear();
    const double t = seconds(now - start_);
    if (json_) {
        JsonObject j;
        j.add("event", r.event).add("time", t);
        if (r.local)
            j.add("local", r.local->to_string());
        else
            j.add_null("local");
        if (r.remote)
            j.add("remote", r.remote->to_string());
        else
            j.add_null("remote");
        if (r.mpa_rev >= 0)
            j.add("mpa_rev", r.mpa_rev).add("ird", r.ird).add("ord", r.ord);
        else
            j.add_null("mpa_rev").add_null("ird").add_null("ord");
        if (!r.has_pdata)
            j.add_null("pdata").add_null("pdata_hex");
        else if (printable(r.pdata))
            j.add("pdata",
                  std::string(reinterpret_cast<const char*>(r.pdata.data()), r.pdata.size()))
                .add("pdata_hex", hex(r.pdata));
        else
            j.add_null("pdata").add("pdata_hex", hex(r.pdata));
        if (r.state.empty())
            j.add_null("state");
        else
            j.add("state", r.state);
        if (r.error.empty())
            j.add_null("error");
        else
            j.add("error", r.error);
        for (const auto& [k, v] : r.extra) j.add_raw(k, v);
        std::printf("%s\n", j.str().c_str());
    } else {
        std::string line;
        char head[64];
        std::snprintf(head, sizeof head, "[%9.3f] %-16s", t, r.event.c_str());
        line = head;
        if (r.local) line += " local=" + r.local->to_string();
        if (r.remote) line += " remote=" + r.remote->to_string();
        if (r.mpa_rev >= 0)
            line += " rev=" + std::to_string(r.mpa_rev) + " ird=" + std::to_string(r.ird) +
                    " ord=" + std::to_string(r.ord);
        if (!r.state.empty()) line += " state=" + r.state;
        for (const auto& [k, v] : r.extra) line += " " + k + "=" + v;
        if (r.has_pdata && !r.pdata.empty())
            line += printable(r.pdata)
                        ? " pdata=" +
                              json_quote(std::string(reinterpret_cast<const char*>(r.pdata.data()),
                                                     r.pdata.size()))
                        : " pdata_hex=" + hex(r.pdata);
        if (!r.error.empty()) line += " error=" + json_quote(r.error);
        std::printf("%s\n", line.c_str());
    }
    std::fflush(stdout);
}

void Reporter::stats(Instant now, const Core& core, const io::TapHost& host,
                     const std::string& result, const std::string& error,
                     std::optional<Duration> connect_time) const {
    Counters c;
    c.core = core.stats();
    c.tap = host.counters();
    c.neighbors = const_cast<io::TapHost&>(host).neighbors().counters();
    c.live_nodes = core.live_nodes();
    stats(now, c, result, error, connect_time);
}

void Reporter::stats(Instant now, const Counters& c, const std::string& result,
                     const std::string& error, std::optional<Duration> connect_time,
                     const std::vector<std::pair<std::string, std::string>>& extra) const {
    const Stats& s = c.core;
    const auto& h = c.tap;
    const auto& n = c.neighbors;
    Report r;
    r.event = "stats";
    r.error = error;
    r.add("result", result);
    r.add("established", s.established);
    r.add("accepts", s.accepts);
    r.add("rejects", s.rejects);
    r.add("retransmissions", s.retransmissions);
    r.add("resets_sent", s.resets_sent);
    r.add("resets_received", s.resets_received);
    r.add("connect_errors", s.connect_errors);
    r.add("core_frames_in", s.frames_in);
    r.add("core_frames_out", s.frames_out);
    r.add("core_dropped", s.drops_total());
    // The frames of the device: a TAP, or with --dev the AF_XDP socket.
    r.add(shared_ ? "dev_frames_in" : "tap_frames_in", h.frames_in);
    r.add(shared_ ? "dev_frames_out" : "tap_frames_out", h.frames_out);
    r.add("ignored", h.ignored);
    r.add("arp_requests_sent", n.arp_requests_sent);
    r.add("arp_replies_sent", n.arp_replies_sent);
    r.add("solicitations_sent", n.solicitations_sent);
    r.add("advertisements_sent", n.advertisements_sent);
    r.add("announcements_sent", n.announcements_sent);
    r.add("live_nodes", std::uint64_t{c.live_nodes});
    r.add("syn_cookies_sent", s.syn_cookies_sent);
    r.add("syn_cookies_accepted", s.syn_cookies_accepted);
    r.add("silent_shed", s.silent_shed);
    if (connect_time) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%.3f", seconds(*connect_time) * 1000);
        r.extra.emplace_back("connect_ms", buf);
    }
    r.extra.insert(r.extra.end(), extra.begin(), extra.end());
    print(now, r);
}

void Reporter::fail(const std::string& reason) const {
    if (progress_ != nullptr) progress_->clear();
    std::fprintf(stderr, "iwarp-cm: %s\n", reason.c_str());
    std::fflush(stderr);
}

}  // namespace iwcm::tools
