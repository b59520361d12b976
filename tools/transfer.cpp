// The byte stream of one connection. Read first: transfer.hpp.
#include "tools/transfer.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "iwcm/assert.hpp"
#include "tools/pattern.hpp"

namespace iwcm::tools {

namespace {

// The most bytes made and offered to send() at once.
constexpr std::size_t kChunk = 64 * 1024;

// TIME_WAIT of the command's streams. A kernel holds it for a minute or two
// after the process is gone; a command that closes first would have to stay
// that long. One second still answers a peer whose last ACK from us was lost
// and who retransmits its FIN after its RTO (Linux: 200 ms, then 400 ms).
constexpr auto kTimeWait = std::chrono::seconds(1);

double seconds(Duration d) {
    return static_cast<double>(d.count()) / 1e9;
}

std::string fixed(double v, int digits) {
    char buf[48];
    std::snprintf(buf, sizeof buf, "%.*f", digits, v);
    return buf;
}

}  // namespace

StreamFlags add_stream_options(CLI::App* cmd, StreamOptions& o, bool listen) {
    StreamFlags f;
    f.send = cmd->add_option("--send-bytes", o.send_bytes,
                             "once established, hand the connection off as a byte stream and "
                             "send N bytes of the pattern (docs/cli.md \"Byte streams\")")
                 ->transform(bounded(0, 1e12, true));
    f.expect = cmd->add_option("--expect-bytes", o.expect_bytes,
                               "hand off as a byte stream and read N bytes: SHA-256 and a check "
                               "against the peer's pattern; fewer, more or other bytes fail")
                   ->transform(bounded(0, 1e12, true));
    f.no_verify = cmd->add_flag("--no-verify", o.no_verify,
                                "with --expect-bytes: hash and count the bytes, do not compare "
                                "them with the pattern")
                      ->needs(f.expect);
    f.data_timeout = cmd->add_option("--data-timeout", o.data_timeout_s,
                                     "seconds the byte exchange may take from the hand-off")
                         ->transform(bounded(0.1, 86400, false));
    if (listen)
        f.close_after_data = cmd->add_flag(
            "--close-after-data", o.close_after_data,
            "close a connection with a FIN once its bytes are sent, acknowledged and received "
            "(default: wait for the peer to close)");
    return f;
}

void check_stream_args(StreamOptions& o, const StreamFlags& f) {
    o.send_given = f.send->count() > 0;
    o.expect_given = f.expect->count() > 0;
    if (o.any()) return;
    if (f.data_timeout->count() > 0)
        throw UsageError{"--data-timeout needs --send-bytes or --expect-bytes"};
    if (f.close_after_data != nullptr && f.close_after_data->count() > 0)
        throw UsageError{"--close-after-data needs --send-bytes or --expect-bytes"};
}

Transfer::Transfer(const StreamOptions& o, bool initiator, const Event& established)
    : o_(o),
      send_tag_(initiator ? pattern::kTagInitiator : pattern::kTagResponder),
      expect_tag_(initiator ? pattern::kTagResponder : pattern::kTagInitiator),
      conn_(established.conn),
      local_(established.local),
      remote_(established.remote),
      buf_(kChunk) {}

bool Transfer::start(Core& core, Instant now) {
    start_ = now;
    deadline_ = now + std::chrono::duration_cast<Duration>(
                          std::chrono::duration<double>(o_.data_timeout_s));
    HandoffParams hp;
    hp.mode = HandoffMode::kStream;
    hp.stream = core.config().stream;
    hp.stream->time_wait = kTimeWait;
    if (auto h = core.handoff(conn_, hp); !h) {
        fail(exit_codes::kError,
             "hand-off of " + remote_.to_string() + ": " + std::string(to_string(h.error())), now);
        return false;
    }
    send_more(core, now);
    read(core, now);
    poll(core, now);
    return true;
}

void Transfer::send_more(Core& core, Instant now) {
    while (sent_ < o_.send_bytes) {
        std::size_t n =
            static_cast<std::size_t>(std::min<std::uint64_t>(o_.send_bytes - sent_, buf_.size()));
        // Offer no more than the buffer takes; when it takes nothing, offer
        // a little anyway: a short send() arms the kWritable event.
        if (auto info = core.stream_info(conn_); info && info->send_space > 0)
            n = std::min(n, info->send_space);
        const auto chunk = std::span(buf_).first(n);
        pattern::fill(send_tag_, sent_, chunk);
        auto taken = core.send(now, conn_, chunk);
        if (!taken) return;  // closed: the terminal event says why
        sent_ += *taken;
        if (*taken < n) return;
    }
}

void Transfer::read(Core& core, Instant now) {
    for (;;) {
        auto view = core.peek(conn_);
        if (!view || view->empty()) return;
        const std::size_t n = view->size();
        take(*view, now);
        if (!core.consume(now, conn_, n)) return;
    }
}

// Bytes read in order: hashed, counted, checked.
void Transfer::take(std::span<const std::byte> bytes, Instant now) {
    hash_.update(bytes);
    const std::uint64_t room = o_.expect_bytes > received_ ? o_.expect_bytes - received_ : 0;
    const auto expected =
        bytes.first(static_cast<std::size_t>(std::min<std::uint64_t>(room, bytes.size())));
    if (!o_.no_verify && !mismatch_at_) {
        mismatch_at_ = pattern::first_mismatch(expect_tag_, received_, expected);
        if (mismatch_at_)
            fail(exit_codes::kError,
                 "byte " + std::to_string(*mismatch_at_) + " from " + remote_.to_string() +
                     " is not the pattern's",
                 now);
    }
    received_ += bytes.size();
    if (expected.size() < bytes.size())
        fail(exit_codes::kError,
             remote_.to_string() + " sent more than the " + std::to_string(o_.expect_bytes) +
                 " expected bytes",
             now);
}

void Transfer::note_info(const Core& core) {
    auto info = core.stream_info(conn_);
    if (!info) return;
    unacked_ = std::min<std::uint64_t>(info->queued, sent_);
    retransmitted_ = info->retransmitted_segments;
}

void Transfer::on_event(Core& core, Instant now, const Event& e) {
    IWCM_ASSERT(e.conn == conn_);
    if (e.type == EventType::kWritable) send_more(core, now);
    if (e.type == EventType::kReadable || e.terminal()) read(core, now);
    note_info(core);
    if (e.terminal()) on_end(e, now);
}

// The connection ended. A FIN is a clean end once every byte is through;
// the bytes we queued still go out before our FIN.
void Transfer::on_end(const Event& e, Instant now) {
    if (!running()) return;
    const std::string peer = remote_.to_string();
    if (e.type == EventType::kDisconnected && e.status == 0) {
        if (received_ < o_.expect_bytes)
            fail(exit_codes::kError,
                 "connection to " + peer + " closed after " + std::to_string(received_) + " of " +
                     std::to_string(o_.expect_bytes) + " expected bytes",
                 now);
        else if (sent_ < o_.send_bytes)
            fail(exit_codes::kError,
                 "connection to " + peer + " closed after " + std::to_string(sent_) + " of " +
                     std::to_string(o_.send_bytes) + " bytes were sent",
                 now);
        else
            complete(now);
        return;
    }
    const int code = e.status == -ECONNRESET  ? exit_codes::kReset
                     : e.status == -ETIMEDOUT ? exit_codes::kTimeout
                                              : exit_codes::kError;
    fail(code,
         "connection to " + peer + " ended (" + std::string(std::strerror(-e.status)) + ") after " +
             std::to_string(sent_) + " bytes sent and " + std::to_string(received_) + " received",
         now);
}

void Transfer::poll(Core& core, Instant now) {
    if (!running()) return;
    note_info(core);
    if (sent_ == o_.send_bytes && unacked_ == 0 && received_ == o_.expect_bytes) {
        complete(now);
        return;
    }
    if (now >= deadline_)
        fail(exit_codes::kTimeout,
             "bytes with " + remote_.to_string() + " not through after --data-timeout " +
                 fixed(o_.data_timeout_s, 1) + " s (" + std::to_string(sent_ - unacked_) + " of " +
                 std::to_string(o_.send_bytes) + " sent and acknowledged, " +
                 std::to_string(received_) + " of " + std::to_string(o_.expect_bytes) +
                 " received)",
             now);
}

void Transfer::complete(Instant now) {
    phase_ = Phase::kDone;
    end_ = now;
    report_due_ = true;
}

void Transfer::fail(int code, const std::string& why, Instant now) {
    if (phase_ == Phase::kFailed) return;  // the first reason stays
    if (phase_ == Phase::kRunning) end_ = now;
    phase_ = Phase::kFailed;
    code_ = code;
    reason_ = why;
    report_due_ = true;
}

std::optional<Report> Transfer::take_report() {
    if (!report_due_) return std::nullopt;
    report_due_ = false;
    Report r;
    r.event = "transfer";
    r.local = local_;
    r.remote = remote_;
    r.error = reason_;
    const double s = std::max(seconds(end_ - start_), 1e-9);
    r.add("bytes_sent", sent_);
    r.add("bytes_received", received_);
    r.add("bytes_expected", o_.expect_bytes);
    r.extra.emplace_back(
        "verified",
        o_.no_verify ? "null" : (!mismatch_at_ && received_ == o_.expect_bytes ? "true" : "false"));
    Sha256 copy = hash_;
    r.add("sha256", Sha256::hex(copy.finish()));
    r.extra.emplace_back("seconds", fixed(s, 6));
    r.extra.emplace_back("send_mbyte_s", fixed(static_cast<double>(sent_ - unacked_) / s / 1e6, 3));
    r.extra.emplace_back("recv_mbyte_s", fixed(static_cast<double>(received_) / s / 1e6, 3));
    r.add("retransmitted_segments", retransmitted_);
    return r;
}

}  // namespace iwcm::tools
