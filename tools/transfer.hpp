// A byte stream over one connection of `connect` or `listen`: --send-bytes
// and --expect-bytes (docs/cli.md "Byte streams").
// Read first: include/iwcm/core.hpp ("byte stream"), tools/pattern.hpp,
// tools/wire_cli.hpp.
//
// Once the connection is established it is handed off as a byte stream
// (HandoffMode::kStream). The sender fills the send buffer with the pattern
// as far as it takes and again on each kWritable; the reader takes what each
// kReadable offers without a copy (peek / consume), hashes it with SHA-256
// and checks it against the other side's pattern. Nothing here blocks or
// steps the loop: the command's loop hands it the connection's events and
// calls poll() after each step.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "iwcm/core.hpp"
#include "tools/sha256.hpp"
#include "tools/wire_cli.hpp"

namespace iwcm::tools {

struct StreamOptions {
    std::uint64_t send_bytes = 0;
    std::uint64_t expect_bytes = 0;
    bool no_verify = false;
    double data_timeout_s = 300;
    bool close_after_data = false;  // listen only
    // Whether --send-bytes / --expect-bytes were given (0 is a valid count).
    bool send_given = false;
    bool expect_given = false;
    bool any() const { return send_given || expect_given; }
};

// The options as CLI11 made them, for the commands' excludes / needs.
struct StreamFlags {
    CLI::Option* send = nullptr;
    CLI::Option* expect = nullptr;
    CLI::Option* no_verify = nullptr;
    CLI::Option* data_timeout = nullptr;
    CLI::Option* close_after_data = nullptr;  // listen only
};

StreamFlags add_stream_options(CLI::App* cmd, StreamOptions& o, bool listen);
// Notes which were given, and refuses options that need a byte count
// without one (UsageError). Call from the command's callback.
void check_stream_args(StreamOptions& o, const StreamFlags& f);

// kReadable and kWritable: the stream's own events (many; not printed).
inline bool is_stream_event(const Event& e) {
    return e.type == EventType::kReadable || e.type == EventType::kWritable;
}

class Transfer {
public:
    // For the connection of `established` (its kEstablished event); the
    // initiator sends kTagInitiator and expects kTagResponder, the other way
    // round for the responder.
    Transfer(const StreamOptions& o, bool initiator, const Event& established);

    // Hands the connection off and sends what fits. False (and kFailed) when
    // the core refuses the hand-off.
    bool start(Core& core, Instant now);
    // One of the connection's events: kReadable, kWritable, or its terminal
    // event (bytes still readable then are read first).
    void on_event(Core& core, Instant now, const Event& e);
    // After a step of the loop: notices that every byte is sent and
    // acknowledged and every expected one received, or that the data
    // timeout passed.
    void poll(Core& core, Instant now);

    enum class Phase : std::uint8_t { kRunning, kDone, kFailed };
    Phase phase() const { return phase_; }
    bool running() const { return phase_ == Phase::kRunning; }
    Instant deadline() const { return deadline_; }
    // Bytes send() took and bytes read so far (for a progress line).
    std::uint64_t sent() const { return sent_; }
    std::uint64_t received() const { return received_; }
    int code() const { return code_; }
    const std::string& reason() const { return reason_; }
    // The `transfer` line, once each time the phase has left kRunning (a
    // second time when bytes beyond the expected ones arrive after it).
    std::optional<Report> take_report();

private:
    void send_more(Core& core, Instant now);
    void read(Core& core, Instant now);
    void take(std::span<const std::byte> bytes, Instant now);
    void note_info(const Core& core);
    void complete(Instant now);
    void fail(int code, const std::string& why, Instant now);
    void on_end(const Event& e, Instant now);

    StreamOptions o_;
    std::uint8_t send_tag_;
    std::uint8_t expect_tag_;
    ConnHandle conn_;
    Endpoint local_;
    Endpoint remote_;
    Phase phase_ = Phase::kRunning;
    bool report_due_ = false;
    std::uint64_t sent_ = 0;      // bytes send() took
    std::uint64_t unacked_ = 0;   // of those, not yet acknowledged (last seen)
    std::uint64_t received_ = 0;  // bytes read, the unexpected ones included
    std::optional<std::uint64_t> mismatch_at_;
    std::uint64_t retransmitted_ = 0;
    Sha256 hash_;
    Instant start_{};
    Instant end_{};
    Instant deadline_{};
    int code_ = 0;
    std::string reason_;
    std::vector<std::byte> buf_;
};

}  // namespace iwcm::tools
