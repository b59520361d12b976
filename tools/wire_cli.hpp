// What `iwarp-cm listen` and `iwarp-cm connect` share: the options of the
// real wire, the session (core + TAP driver, or core + shared-address host
// with --dev) and the event report.
// Read first: docs/kernel-tcp.md, docs/shared-address.md,
// src/io/loop/event_loop.hpp, src/io/shared/shared_host.hpp.
#pragma once

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "io/loop/event_loop.hpp"
#include "io/loop/interface.hpp"
#include "io/shared/shared_host.hpp"
#include "iwcm/core.hpp"
#include "tools/commands.hpp"
#include "tools/progress.hpp"

namespace iwcm::tools {

// --tap or --dev, --ip, --mac, --gateway, --vlan (io::InterfaceOptions), and the rest.
struct WireOptions : io::InterfaceOptions {
    std::string xdp_mode = "auto";  // --xdp-mode: auto, native, generic
    int tos = 0;                    // --tos: the IP TOS byte of our frames (0 to 255)
    std::string pdata;              // --pdata TEXT
    std::string pdata_hex;          // --pdata-hex HEX
    std::string pdata_file;         // --pdata-file FILE
    std::uint16_t ird = 1;
    std::uint16_t ord = 1;
    int mpa_rev = 2;
    std::string pcap;
    bool json = false;
    // --progress / --no-progress: a progress line on stderr during long work
    // (1 on, 0 off, -1 when stderr is a terminal and --json is not given).
    int progress = -1;
    bool crc = false;
    bool no_p2p = false;
    // --no-tap-offload: the TAP without the virtio-net header (every checksum computed,
    // every segment at most an MSS).
    bool no_tap_offload = false;
    std::uint8_t rtr_types = rtr::kAll;  // the RTR types offered or accepted (--rtr)
    // How long a sent MPA request waits for its reply. connect and rping set it past their
    // --timeout (reply_timer_past), so that the reply may take all the time the user gave the
    // connection (a peer whose handshake was retransmitted resends a lost reply only every
    // 3, 6, 12 s).
    double mpa_reply_timeout_s = 10;
};

// The MPA reply timer of a command that ends the attempt itself at `deadline_s`: a second past
// it, so that the command's deadline, not the core's timer, ends the attempt and names itself
// in the reason, also when a loaded machine wakes the loop a few milliseconds late.
inline double reply_timer_past(double deadline_s) {
    return deadline_s + 1;
}

// --tap or --dev, --ip, --mac, --gateway, --vlan, --tos, --no-tap-offload: where the CM sits.
void add_interface_options(CLI::App* cmd, WireOptions& o);
// --pcap, --json, --crc, --progress, --no-progress.
void add_output_options(CLI::App* cmd, WireOptions& o);
// The interface options and those of MPA (--pdata..., --ird, --ord,
// --mpa-rev, --crc, --no-p2p) and output (--pcap, --json).
void add_wire_options(CLI::App* cmd, WireOptions& o);

// The private data of --pdata, --pdata-hex or --pdata-file, checked against
// the limit of --mpa-rev (512 bytes at revision 1, 508 at revision 2 whose
// IRD/ORD word counts). Throws UsageError.
std::vector<std::byte> private_data(const WireOptions& o);

using io::Interface;
using io::not_unicast;

// A number of seconds as a message says it: "3 s", "0.25 s" (not "3.000000 s").
std::string seconds_text(double s);

// Parses --ip, --mac, --vlan, --gateway (in our subnet, unicast, not --ip);
// with --dev, reads the interface's MAC and addresses from the kernel (--ip
// must be one of them; default its first). The error is the one-line reason.
Expected<Interface, std::string> parse_interface(const WireOptions& o);
// The next hop toward `peer`, named in messages as `what` (e.g. "--to
// 10.99.1.1:4791"): the peer itself when on-link, else the gateway. Throws
// UsageError for a multicast or broadcast peer, our own address, and an
// off-link peer without --gateway.
IpAddr check_peer(const std::string& what, const IpAddr& peer, const Interface& iface,
                  const std::string& ip);

// One line of output: human text by default, one JSON object with --json.
// Every JSON field is in docs/json.md and docs/json-schema.json.
struct Report {
    std::string event;
    std::optional<Endpoint> local;
    std::optional<Endpoint> remote;
    int mpa_rev = -1;
    int ird = -1;
    int ord = -1;
    bool has_pdata = false;
    std::vector<std::byte> pdata;
    std::string state;
    std::string error;
    std::vector<std::pair<std::string, std::string>> extra;  // key, JSON literal
    void add(const std::string& key, std::uint64_t v) {
        extra.emplace_back(key, std::to_string(v));
    }
    void add(const std::string& key, const std::string& v);
    void add_bool(const std::string& key, bool v) { extra.emplace_back(key, v ? "true" : "false"); }
};

class Reporter {
public:
    // `shared`: the device is an interface shared with the kernel (--dev),
    // whose frames the stats line counts as dev_frames_*, not tap_frames_*.
    Reporter(bool json, Instant start, bool shared = false)
        : json_(json), shared_(shared), start_(start) {}
    void print(Instant now, const Report& r) const;
    // A core event as a Report.
    static Report from_event(const Event& e);
    // The final line: core, driver and neighbour counters, the result.
    void stats(Instant now, const Core& core, const io::TapHost& host, const std::string& result,
               const std::string& error, std::optional<Duration> connect_time) const;
    // The same from counters (of N threads, summed); `extra` ends the line.
    struct Counters {
        Stats core;
        io::TapHostCounters tap;
        io::NeighborCounters neighbors;
        std::size_t live_nodes = 0;
    };
    void stats(Instant now, const Counters& c, const std::string& result, const std::string& error,
               std::optional<Duration> connect_time,
               const std::vector<std::pair<std::string, std::string>>& extra = {}) const;
    // The one-line reason on stderr for a non-zero exit.
    void fail(const std::string& reason) const;
    // A progress line that every line printed first erases (stdout and
    // stderr may be the same terminal); it is drawn again when next due.
    void set_progress(Progress* p) { progress_ = p; }

private:
    bool json_;
    bool shared_;
    Instant start_;
    Progress* progress_ = nullptr;
};

// The core and its driver, set up from the options: a TAP host, or with
// --dev a shared-address host (whose loop `host` points to).
struct Session {
    Interface iface;
    std::unique_ptr<Core> core;
    std::unique_ptr<io::TapHost> tap_host;
    std::unique_ptr<io::SharedHost> shared;
    io::TapHost* host = nullptr;
};
Expected<Session, std::string> open_session(const WireOptions& o, const Interface& iface);
// The core's configuration from the options (random ISN and cookie secrets).
CoreConfig core_config(const WireOptions& o, const Interface& iface);
// --xdp-mode as the device takes it.
io::XskDevice::Mode xdp_mode(const WireOptions& o);
// The xdp= field of a line: where the program runs, and zero-copy or copy.
std::string xdp_field(const io::SteeredDevice& x);

// Listen, stop listening and connect through the session: with --dev the
// port is reserved in the kernel and steered to the CM (a connection's local
// port is the one the kernel reserved for it).
Expected<ListenHandle, std::string> session_listen(Session& s, const ListenParams& lp);
void session_unlisten(Session& s, Instant now, ListenHandle l);
Expected<ConnHandle, std::string> session_connect(Session& s, Instant now, const ConnectParams& cp);
// The "listening" line's fields of the device: tap=, or dev= and xdp=.
void describe_device(Report& r, const Session& s, const WireOptions& o);

std::vector<std::byte> to_bytes(const std::string& s);

// The parameters of a connection to `to` (whose frames go to `mac`) from
// --ip, --vlan and --tos; the MPA ones are the caller's.
ConnectParams connect_params(const Session& s, const WireOptions& o, const Endpoint& to,
                             const MacAddr& mac);

// Resolves the MAC of `hop` (the peer of `to`, or the gateway toward it)
// before `deadline`, printing the `resolving` and `resolved` lines. `step`
// runs one round of the loop until the time it is given (false: stop, it
// noted why); a failed resolution goes to `fail` (exit code, reason).
// Returns the MAC, or nothing after a stop or a failure.
std::optional<MacAddr> resolve_peer(Session& s, const Reporter& rep, const Endpoint& to,
                                    const IpAddr& hop, Instant deadline,
                                    const std::function<bool(Instant)>& step,
                                    const std::function<void(int, std::string)>& fail);

// How long open connections get to close gracefully after SIGINT / SIGTERM
// before those left are reset (docs/cli.md).
constexpr auto kGraceLimit = std::chrono::seconds(2);

// The end of every command's connections: the loop runs until none is open
// (Core::open_nodes(): every node closed or in TIME_WAIT; with `time_wait`,
// until the TIME_WAITs are over too: Core::live_nodes()), `limit` passes or a
// signal arrives (`cut`); every connection still open is then reset (RST;
// nodes in TIME_WAIT just go, as the process that holds them ends) and a
// "reset_sent" line says how many and why (`why`, or "second signal"). So no
// exit leaves a peer's connection open: a close the peer does not finish in
// time (a zero window, lost segments, a peer that never closes) ends in an RST.
// How long finish_close keeps answering after its resets (a peer's challenge
// ACK, a few round trips on a LAN).
constexpr auto kResetLinger = std::chrono::milliseconds(250);
struct CloseEnd {
    std::size_t reset = 0;  // connections reset
    bool cut = false;       // a signal (or an error of the loop) ended the wait
};
CloseEnd finish_close(Session& s, const Reporter& rep, Instant limit,
                      const std::function<void(const Event&)>& on_event, const std::string& why,
                      bool time_wait);

// After a signal: a FIN on every connection in `open` (stale handles are
// skipped), then finish_close within kGraceLimit (a second signal cuts it
// short). Returns how many connections were reset.
std::size_t close_all(Session& s, const Reporter& rep, const std::vector<ConnHandle>& open,
                      const std::function<void(const Event&)>& on_event);

}  // namespace iwcm::tools
