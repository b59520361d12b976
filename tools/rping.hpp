// The rping exchange of rdma-core's librdmacm/examples/rping.c, as a small
// state machine over iwcm::rdma::Device, for `iwarp-cm rping` (docs/rping.md).
// Read first: include/iwcm/verbs.hpp, docs/rping.md.
//
// One iteration, as rping does it (every message is a Send of the 16-byte
// RpingInfo, every operation signaled):
//   client: fills its start buffer with the iteration's text, Sends
//           {start buffer, rkey, size};
//   server: RDMA Reads the start buffer into its own buffer, Sends a go-ahead;
//   client: Sends {sink buffer, rkey, size};
//   server: RDMA Writes what it read (up to and with the first NUL) into the
//           sink, Sends a go-ahead;
//   client: with -V compares the sink with the start buffer.
// Buffers and access as rping registers them: the receive buffer local
// write, the send buffer none, the start and sink (rdma) buffers local
// write, remote read and remote write. The server's go-ahead Sends carry 16
// zero bytes (rping never fills the server's send buffer). One receive is
// posted, and posted again on each receive completion.
//
// Like the Device it is sans-I/O: the command's loop calls start() once the
// connection is established, poll() after every step, on_qp_event() with
// the QP's events, and prints what take_line() returns.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "iwcm/verbs.hpp"

namespace iwcm::tools {

// rping's limits: the smallest size holds "rdma-ping-%d: " for any int
// (sizeof "2147483647" + sizeof "rdma-ping-%d: ", as RPING_MIN_BUFSIZE),
// the largest is RPING_BUFSIZE - 1.
constexpr std::uint32_t kRpingMinSize = 26;
constexpr std::uint32_t kRpingMaxSize = 65535;
constexpr std::uint32_t kRpingDefaultSize = 64;
constexpr std::uint16_t kRpingDefaultPort = 7174;
// --settle: the client's wait before its first Send (docs/rping.md).
constexpr std::uint32_t kRpingDefaultSettleMs = 500;
constexpr std::uint32_t kRpingMaxSettleMs = 60000;

// struct rping_rdma_info: a buffer's address (tagged offset), rkey and size,
// each in network byte order.
struct RpingInfo {
    std::uint64_t buf = 0;
    std::uint32_t rkey = 0;
    std::uint32_t size = 0;
    static constexpr std::size_t kWireSize = 16;
    std::array<std::byte, kWireSize> encode() const;
    static RpingInfo decode(std::span<const std::byte, kWireSize> bytes);
};

// The client's start buffer of iteration `ping`: "rdma-ping-<ping>: ", then
// the letters 'A' (65) to 'z' (122) over and over, starting one further for
// each iteration, and a NUL in the last byte. out.size() >= kRpingMinSize.
void rping_fill(std::span<std::byte> out, std::uint32_t ping);
// The text of a buffer up to its first NUL (all of it without one).
std::string rping_text(std::span<const std::byte> buf);

struct RpingConfig {
    bool server = false;
    std::uint32_t size = kRpingDefaultSize;  // -S
    std::uint64_t count = 0;                 // -C; 0: until the peer closes (or forever)
    bool verify = false;                     // -V
    bool verbose = false;                    // -v
    // -c: the wait after ESTABLISHED before the first Send (--settle). A
    // soft-iWARP responder sends its MPA reply before it reads the socket
    // and strands an FPDU that arrives in between.
    Duration settle{};
};

// A line for the command to print: one iteration's data (-v).
struct RpingLine {
    std::uint64_t iteration = 0;
    std::string data;
};

class Rping {
public:
    Rping(rdma::Device& dev, const RpingConfig& config);
    ~Rping();
    Rping(const Rping&) = delete;
    Rping& operator=(const Rping&) = delete;

    // Binds the established connection to a QP, registers the buffers, posts
    // the receive and (client) sends the first start buffer's info, at once
    // or, with a settle time, from the first poll() at or after now + settle.
    bool start(Instant now, ConnHandle conn);
    // Moves completions on (and sends the client's first Send once settled);
    // call after every step of the loop.
    void poll(Instant now);
    // When poll() has something to do without any event: the end of the
    // client's settle time.
    std::optional<Instant> next_wake() const { return first_send_at_; }
    void on_qp_event(const rdma::QpEvent& ev);
    // The client, on the first SIGINT / SIGTERM: no iteration after the one
    // in flight (done at once if none has begun), so the server sees the
    // close between two iterations, the clean end of its -C 0 run.
    void finish_iteration();
    // The client, after its iterations: frees the QP (which closes the
    // connection gracefully). Also used on failure.
    void stop(Instant now);

    enum class Phase : std::uint8_t { kIdle, kRunning, kDone, kFailed };
    Phase phase() const { return phase_; }
    bool running() const { return phase_ == Phase::kRunning; }
    // Between iterations: the peer may close here without breaking one.
    bool between_iterations() const;
    const std::string& reason() const { return reason_; }
    // exit_codes value of a failure.
    int code() const { return code_; }
    std::uint64_t iterations() const { return done_; }
    // Bytes the RDMA Reads and Writes moved (each iteration: the read and
    // the write of the data).
    std::uint64_t bytes() const { return bytes_; }
    std::optional<rdma::QpHandle> qp() const { return qp_; }
    std::optional<RpingLine> take_line();
    // When the last step of an iteration happened (for the stall timeout).
    Instant last_progress() const { return last_progress_; }
    // When the first iteration began (the client's first Send, after the
    // settle time; the server's receipt of it); nothing before.
    std::optional<Instant> began() const { return began_; }
    // A -V comparison failed (the failure's reason says where).
    bool verify_failed() const { return verify_failed_; }

private:
    enum class Step : std::uint8_t {
        kWaitStartInfo,  // server: the client's start buffer info
        kReading,        // server: our RDMA Read of it
        kWaitSinkInfo,   // server: the client's sink buffer info
        kWriting,        // server: our RDMA Write into the sink
        kWaitGoRead,     // client: the go-ahead after the server's read
        kWaitGoWrite,    // client: the go-ahead after the server's write
        kSettle,         // client: the settle time before the first Send
    };
    struct Buffer;

    bool register_buffers();
    bool post_recv(Instant now);
    bool post_send_info(Instant now, const Buffer& b, std::uint32_t size);
    bool post_rdma(Instant now, rdma::WrOpcode op, std::uint32_t length);
    void on_completion(Instant now, const rdma::WorkCompletion& wc);
    void on_recv(Instant now, const rdma::WorkCompletion& wc);
    void on_recv_server(Instant now, const RpingInfo& info);
    void on_recv_client(Instant now);
    void on_read_done(Instant now, std::uint32_t bytes);
    void on_write_done(Instant now);
    void begin_client_iteration(Instant now);
    bool verify_client();
    bool verify_server(std::uint32_t bytes);
    void iteration_done(Instant now, const std::string& data);
    void fail(int code, std::string why);

    rdma::Device& dev_;
    RpingConfig cfg_;
    bool last_ = false;  // finish_iteration(): the iteration in flight is the last
    Phase phase_ = Phase::kIdle;
    Step step_ = Step::kWaitStartInfo;
    std::unique_ptr<Buffer> recv_;
    std::unique_ptr<Buffer> send_;
    std::unique_ptr<Buffer> rdma_;   // the sink (client) or the read target (server)
    std::unique_ptr<Buffer> start_;  // client only
    std::optional<rdma::CqHandle> cq_;
    std::optional<rdma::QpHandle> qp_;
    RpingInfo remote_;  // the server's view of the client's last info
    std::uint32_t read_bytes_ = 0;
    std::uint64_t done_ = 0;
    std::uint64_t bytes_ = 0;
    std::deque<RpingLine> lines_;
    Instant last_progress_{};
    std::optional<Instant> first_send_at_;  // client: the end of the settle time
    std::optional<Instant> began_;
    bool verify_failed_ = false;
    int code_ = 0;
    std::string reason_;
};

}  // namespace iwcm::tools
