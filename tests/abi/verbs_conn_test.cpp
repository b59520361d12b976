// The libibverbs half on a connection: two processes, each with its own
// runtime on a TAP device of a bridge in the test's network namespace, talk
// through rdma_cm and verbs as a program does.
//
// What it shows: receives posted before the connection wait for it; inline
// data is copied at post time (the source is wiped right after the post and
// its lkey is garbage); an unsignaled RDMA Write completes silently; a
// solicited-only arm wakes once, for the receive of a Send with Solicited
// Event and not for our own send's completion; RDMA Read; modify_qp to ERR
// flushes the receives still posted, and posts in ERR flush at once; the peer
// of an abortive close sees its connection end and its receive flushed, and
// neither side an async event. The other pairs show the errors: which async
// event each side of a refused request raises, one per QP, read before a poll
// that finds every flush completion, then QP_LAST_WQE_REACHED on an SRQ.
#include <arpa/inet.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace {

int run(const std::string& cmd) {
    int rc = std::system(cmd.c_str());
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

constexpr std::uint16_t kPort = 7471;
constexpr std::size_t kData = 4096;

// The first message of each side: where its buffer is.
struct Hello {
    std::uint64_t addr = 0;
    std::uint32_t rkey = 0;
    char text[20] = {};
};

#define REQUIRE(cond)                                                                    \
    do {                                                                                 \
        if (!(cond))                                                                     \
            return std::string(__FILE__) + ":" + std::to_string(__LINE__) + ": " #cond + \
                   " (errno " + std::strerror(errno) + ")";                              \
    } while (0)

struct Side {
    rdma_event_channel* events = nullptr;
    rdma_cm_id* id = nullptr;
    ibv_pd* pd = nullptr;
    ibv_comp_channel* channel = nullptr;
    ibv_cq* cq = nullptr;
    ibv_mr* recv_mr = nullptr;
    ibv_mr* data_mr = nullptr;
    ibv_srq* srq = nullptr;
    std::array<char, 256> recv_buf{};
    std::vector<char> data = std::vector<char>(kData);
};

std::string expect_event(Side& s, rdma_cm_event_type type, rdma_cm_id** child = nullptr) {
    rdma_cm_event* e = nullptr;
    REQUIRE(rdma_get_cm_event(s.events, &e) == 0);
    const rdma_cm_event_type got = e->event;
    const int status = e->status;
    if (child != nullptr) *child = e->id;
    rdma_ack_cm_event(e);
    REQUIRE(got == type && status == 0);
    return {};
}

int g_cq_entries = 32;   // the CQ setup() makes
bool g_use_srq = false;  // setup() puts the QP on a shared receive queue (limit 2)

// PD, channel, CQ, MRs and a QP on s.id; two receives posted at once (before
// the connection).
std::string setup(Side& s) {
    s.pd = ibv_alloc_pd(s.id->verbs);
    REQUIRE(s.pd != nullptr);
    s.channel = ibv_create_comp_channel(s.id->verbs);
    REQUIRE(s.channel != nullptr);
    s.cq = ibv_create_cq(s.id->verbs, g_cq_entries, nullptr, s.channel, 0);
    REQUIRE(s.cq != nullptr);
    if (g_use_srq) {
        ibv_srq_init_attr si{};
        si.attr = {8, 1, 2};
        s.srq = ibv_create_srq(s.pd, &si);
        REQUIRE(s.srq != nullptr);
    }
    ibv_qp_init_attr a{};
    a.send_cq = a.recv_cq = s.cq;
    a.srq = s.srq;
    a.qp_type = IBV_QPT_RC;
    a.cap.max_send_wr = 8;
    a.cap.max_recv_wr = 8;
    a.cap.max_send_sge = 2;
    a.cap.max_recv_sge = 1;
    a.cap.max_inline_data = 64;
    REQUIRE(rdma_create_qp(s.id, s.pd, &a) == 0);
    s.recv_mr = ibv_reg_mr(s.pd, s.recv_buf.data(), s.recv_buf.size(), IBV_ACCESS_LOCAL_WRITE);
    REQUIRE(s.recv_mr != nullptr);
    s.data_mr =
        ibv_reg_mr(s.pd, s.data.data(), s.data.size(),
                   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
    REQUIRE(s.data_mr != nullptr);
    for (std::uint64_t id = 1; id <= (g_use_srq ? 3 : 2); ++id) {
        ibv_sge sge{reinterpret_cast<std::uintptr_t>(s.recv_buf.data()), 128, s.recv_mr->lkey};
        ibv_recv_wr wr{id, nullptr, &sge, 1};
        ibv_recv_wr* bad = nullptr;
        REQUIRE((g_use_srq ? ibv_post_srq_recv(s.srq, &wr, &bad)
                           : ibv_post_recv(s.id->qp, &wr, &bad)) == 0);
    }
    return {};
}

// Polls until `want` completions are in, sleeping on the channel between.
std::string wait_wcs(Side& s, std::vector<ibv_wc>& out, std::size_t want) {
    while (out.size() < want) {
        ibv_wc wc;
        int n = ibv_poll_cq(s.cq, 1, &wc);
        REQUIRE(n >= 0);
        if (n == 1) {
            out.push_back(wc);
            continue;
        }
        REQUIRE(ibv_req_notify_cq(s.cq, 0) == 0);
        if ((n = ibv_poll_cq(s.cq, 1, &wc)) == 1) {
            out.push_back(wc);
            continue;
        }
        ibv_cq* cq = nullptr;
        void* ctx = nullptr;
        REQUIRE(ibv_get_cq_event(s.channel, &cq, &ctx) == 0);
        REQUIRE(cq == s.cq);
        ibv_ack_cq_events(cq, 1);
    }
    return {};
}

std::string post_send(Side& s, ibv_wr_opcode op, const void* addr, std::uint32_t len,
                      std::uint32_t lkey, unsigned flags, std::uint64_t wr_id,
                      std::uint64_t remote_addr = 0, std::uint32_t rkey = 0) {
    ibv_sge sge{reinterpret_cast<std::uintptr_t>(addr), len, lkey};
    ibv_send_wr wr{};
    wr.wr_id = wr_id;
    wr.opcode = op;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.send_flags = flags;
    wr.wr.rdma.remote_addr = remote_addr;
    wr.wr.rdma.rkey = rkey;
    ibv_send_wr* bad = nullptr;
    REQUIRE(ibv_post_send(s.id->qp, &wr, &bad) == 0);
    return {};
}

// A signaled Send with Invalidate of 16 bytes of s.data naming the peer's `rkey`.
std::string send_with_invalidate(Side& s, std::uint64_t wr_id, std::uint32_t rkey) {
    ibv_sge sge{reinterpret_cast<std::uintptr_t>(s.data.data()), 16, s.data_mr->lkey};
    ibv_send_wr wr{};
    wr.wr_id = wr_id;
    wr.opcode = IBV_WR_SEND_WITH_INV;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.invalidate_rkey = rkey;
    ibv_send_wr* bad = nullptr;
    REQUIRE(ibv_post_send(s.id->qp, &wr, &bad) == 0);
    return {};
}

sockaddr_in addr_of(const char* ip) {
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(kPort);
    ::inet_pton(AF_INET, ip, &sa.sin_addr);
    return sa;
}

#define STEP(expr)                                           \
    do {                                                     \
        if (std::string e_ = (expr); !e_.empty()) return e_; \
    } while (0)

int g_ready_fd = -1;  // the server child's: written once it listens

// Listens (telling the test through g_ready_fd), accepts one connection
// with the QP of setup(); s.data is all 'S'.
std::string accept_one(Side& s, rdma_cm_id*& listener) {
    s.events = rdma_create_event_channel();
    REQUIRE(s.events != nullptr);
    REQUIRE(rdma_create_id(s.events, &listener, nullptr, RDMA_PS_TCP) == 0);
    sockaddr_in sa = addr_of("10.77.1.1");
    REQUIRE(rdma_bind_addr(listener, reinterpret_cast<sockaddr*>(&sa)) == 0);
    REQUIRE(rdma_listen(listener, 1) == 0);
    REQUIRE(::write(g_ready_fd, "L", 1) == 1);
    STEP(expect_event(s, RDMA_CM_EVENT_CONNECT_REQUEST, &s.id));
    STEP(setup(s));
    std::memset(s.data.data(), 'S', s.data.size());
    rdma_conn_param p{};
    p.responder_resources = 1;
    p.initiator_depth = 1;
    REQUIRE(rdma_accept(s.id, &p) == 0);
    STEP(expect_event(s, RDMA_CM_EVENT_ESTABLISHED));
    return {};
}

// Connects to the server with the QP of setup(); before_connect runs
// between the two.
template <class F>
std::string connect_one(Side& s, F&& before_connect) {
    s.events = rdma_create_event_channel();
    REQUIRE(s.events != nullptr);
    REQUIRE(rdma_create_id(s.events, &s.id, nullptr, RDMA_PS_TCP) == 0);
    sockaddr_in dst = addr_of("10.77.1.1");
    REQUIRE(rdma_resolve_addr(s.id, nullptr, reinterpret_cast<sockaddr*>(&dst), 2000) == 0);
    STEP(expect_event(s, RDMA_CM_EVENT_ADDR_RESOLVED));
    REQUIRE(rdma_resolve_route(s.id, 2000) == 0);
    STEP(expect_event(s, RDMA_CM_EVENT_ROUTE_RESOLVED));
    STEP(setup(s));
    STEP(before_connect());
    rdma_conn_param p{};
    p.responder_resources = 1;
    p.initiator_depth = 1;
    REQUIRE(rdma_connect(s.id, &p) == 0);
    STEP(expect_event(s, RDMA_CM_EVENT_ESTABLISHED));
    return {};
}

// The context's next async event is `type` for the QP of s; acknowledged.
std::string expect_qp_event(Side& s, ibv_event_type type) {
    ibv_async_event ev{};
    REQUIRE(ibv_get_async_event(s.id->verbs, &ev) == 0);
    const ibv_event_type got = ev.event_type;
    const bool ours = ev.element.qp == s.id->qp;
    ibv_ack_async_event(&ev);
    if (got != type || !ours) {
        return "async event " + std::to_string(got) + (ours ? "" : " of another QP") + ", not " +
               std::to_string(type);
    }
    return {};
}

std::string expect_fatal(Side& s) {
    return expect_qp_event(s, IBV_EVENT_QP_FATAL);
}

// No async event waits (the async fd, non-blocking for the look, has nothing).
std::string expect_no_async_event(Side& s) {
    const int fd = s.id->verbs->async_fd;
    const int flags = ::fcntl(fd, F_GETFL);
    REQUIRE(::fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0);
    ibv_async_event ev{};
    const int got = ibv_get_async_event(s.id->verbs, &ev);
    const int err = errno;
    if (got == 0) ibv_ack_async_event(&ev);
    REQUIRE(::fcntl(fd, F_SETFL, flags) == 0);
    if (got == 0) return "an unexpected async event " + std::to_string(ev.event_type);
    errno = err;
    REQUIRE(err == EAGAIN);
    return {};
}

// The completions the CQ holds now, taken without waiting: after a QP's async event,
// every completion of its flushed work is there already.
std::vector<ibv_wc> poll_now(Side& s) {
    std::vector<ibv_wc> out;
    ibv_wc wc[8];
    for (int n; (n = ibv_poll_cq(s.cq, 8, wc)) > 0;) out.insert(out.end(), wc, wc + n);
    return out;
}

// The connection's end, whatever its status (a TERMINATE's FIN, a reset).
std::string expect_disconnected(Side& s) {
    rdma_cm_event* e = nullptr;
    REQUIRE(rdma_get_cm_event(s.events, &e) == 0);
    const rdma_cm_event_type got = e->event;
    rdma_ack_cm_event(e);
    REQUIRE(got == RDMA_CM_EVENT_DISCONNECTED);
    return {};
}

std::string server() {
    Side s;
    rdma_cm_id* listener = nullptr;
    STEP(accept_one(s, listener));
    // The client's inline Hello, into the receive posted before the connection.
    std::vector<ibv_wc> wcs;
    STEP(wait_wcs(s, wcs, 1));
    REQUIRE(wcs[0].status == IBV_WC_SUCCESS && wcs[0].opcode == IBV_WC_RECV);
    REQUIRE(wcs[0].wr_id == 1 && wcs[0].byte_len == sizeof(Hello));
    REQUIRE(wcs[0].qp_num == s.id->qp->qp_num);
    Hello peer;
    std::memcpy(&peer, s.recv_buf.data(), sizeof peer);
    REQUIRE(std::string(peer.text) == "inline-hello");
    // An unsignaled Write, then a signaled Send with Solicited Event: one
    // completion only, the Send's.
    STEP(post_send(s, IBV_WR_RDMA_WRITE, s.data.data(), 1024, s.data_mr->lkey, 0, 10, peer.addr,
                   peer.rkey));
    Hello mine{reinterpret_cast<std::uintptr_t>(s.data.data()), s.data_mr->rkey, "after-write"};
    STEP(post_send(s, IBV_WR_SEND, &mine, sizeof mine, 0,
                   IBV_SEND_INLINE | IBV_SEND_SIGNALED | IBV_SEND_SOLICITED, 11));
    wcs.clear();
    STEP(wait_wcs(s, wcs, 2));  // the Send's, and the client's "done" after its Read
    std::sort(wcs.begin(), wcs.end(),
              [](const ibv_wc& a, const ibv_wc& b) { return a.wr_id < b.wr_id; });
    REQUIRE(wcs[0].wr_id == 2 && wcs[0].opcode == IBV_WC_RECV);
    REQUIRE(wcs[1].wr_id == 11 && wcs[1].opcode == IBV_WC_SEND);
    REQUIRE(wcs[0].status == IBV_WC_SUCCESS && wcs[1].status == IBV_WC_SUCCESS);
    REQUIRE(std::string(s.recv_buf.data()) == "done");
    // One more receive; the client's abortive close ends the connection and
    // flushes it.
    ibv_sge sge{reinterpret_cast<std::uintptr_t>(s.recv_buf.data()), 128, s.recv_mr->lkey};
    ibv_recv_wr wr{3, nullptr, &sge, 1};
    ibv_recv_wr* bad = nullptr;
    REQUIRE(ibv_post_recv(s.id->qp, &wr, &bad) == 0);
    STEP(expect_event(s, RDMA_CM_EVENT_DISCONNECTED));
    wcs.clear();
    STEP(wait_wcs(s, wcs, 1));
    REQUIRE(wcs[0].wr_id == 3 && wcs[0].status == IBV_WC_WR_FLUSH_ERR);
    // The peer's reset is no error of the QP (siw and irdma raise no event for it).
    STEP(expect_no_async_event(s));
    rdma_destroy_qp(s.id);
    REQUIRE(ibv_dereg_mr(s.recv_mr) == 0 && ibv_dereg_mr(s.data_mr) == 0);
    REQUIRE(ibv_destroy_cq(s.cq) == 0);
    REQUIRE(ibv_destroy_comp_channel(s.channel) == 0);
    REQUIRE(ibv_dealloc_pd(s.pd) == 0);
    REQUIRE(rdma_destroy_id(s.id) == 0 && rdma_destroy_id(listener) == 0);
    rdma_destroy_event_channel(s.events);
    return {};
}

std::string client() {
    Side s;
    STEP(connect_one(s, [&]() -> std::string {
        std::memset(s.data.data(), 0, s.data.size());
        // Armed solicited-only before anything completes.
        REQUIRE(ibv_req_notify_cq(s.cq, 1) == 0);
        return {};
    }));
    // Inline: the source is wiped right after the post, and its lkey is garbage.
    Hello mine{reinterpret_cast<std::uintptr_t>(s.data.data()), s.data_mr->rkey, "inline-hello"};
    STEP(post_send(s, IBV_WR_SEND, &mine, sizeof mine, 0xdeadbeef,
                   IBV_SEND_INLINE | IBV_SEND_SIGNALED, 20));
    ::explicit_bzero(&mine, sizeof mine);
    // One event, for the receive of the server's solicited Send: when it
    // wakes us that receive is in the CQ already (our own Send's completion,
    // not solicited, does not wake a solicited-only arm).
    ibv_cq* cq = nullptr;
    void* ctx = nullptr;
    REQUIRE(ibv_get_cq_event(s.channel, &cq, &ctx) == 0);
    ibv_ack_cq_events(cq, 1);
    std::vector<ibv_wc> wcs;
    ibv_wc wc[4];
    int n = ibv_poll_cq(s.cq, 4, wc);
    REQUIRE(n >= 1);
    wcs.assign(wc, wc + n);
    bool recv_in = false;
    for (const ibv_wc& w : wcs) recv_in |= w.wr_id == 1 && w.opcode == IBV_WC_RECV;
    REQUIRE(recv_in);
    int flags = ::fcntl(s.channel->fd, F_GETFL);
    REQUIRE(::fcntl(s.channel->fd, F_SETFL, flags | O_NONBLOCK) == 0);
    REQUIRE(ibv_get_cq_event(s.channel, &cq, &ctx) == -1 && errno == EAGAIN);
    REQUIRE(::fcntl(s.channel->fd, F_SETFL, flags) == 0);
    STEP(wait_wcs(s, wcs, 2));
    for (const ibv_wc& w : wcs) {
        REQUIRE(w.status == IBV_WC_SUCCESS);
        REQUIRE((w.wr_id == 1 && w.opcode == IBV_WC_RECV) ||
                (w.wr_id == 20 && w.opcode == IBV_WC_SEND));
    }
    REQUIRE(wcs[0].wr_id != wcs[1].wr_id);
    wcs.clear();
    // The unsignaled Write landed before the Send that followed it.
    REQUIRE(std::string(s.data.data(), 1024) == std::string(1024, 'S'));
    Hello peer;
    std::memcpy(&peer, s.recv_buf.data(), sizeof peer);
    REQUIRE(std::string(peer.text) == "after-write");
    // RDMA Read of the server's buffer into the second half of ours.
    char* sink = s.data.data() + 2048;
    STEP(post_send(s, IBV_WR_RDMA_READ, sink, 512, s.data_mr->lkey, IBV_SEND_SIGNALED, 21,
                   peer.addr, peer.rkey));
    STEP(wait_wcs(s, wcs, 1));
    REQUIRE(wcs[0].wr_id == 21 && wcs[0].opcode == IBV_WC_RDMA_READ);
    REQUIRE(wcs[0].status == IBV_WC_SUCCESS && wcs[0].byte_len == 512);
    REQUIRE(std::string(sink, 512) == std::string(512, 'S'));
    static const char done[] = "done";
    STEP(post_send(s, IBV_WR_SEND, done, sizeof done, 0, IBV_SEND_INLINE | IBV_SEND_SIGNALED, 22));
    wcs.clear();
    STEP(wait_wcs(s, wcs, 1));
    REQUIRE(wcs[0].wr_id == 22 && wcs[0].status == IBV_WC_SUCCESS);
    // To ERR: the receive still posted (wr_id 2) flushes; a post in ERR too.
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_ERR;
    REQUIRE(ibv_modify_qp(s.id->qp, &attr, IBV_QP_STATE) == 0);
    wcs.clear();
    STEP(wait_wcs(s, wcs, 1));
    REQUIRE(wcs[0].wr_id == 2 && wcs[0].status == IBV_WC_WR_FLUSH_ERR);
    STEP(post_send(s, IBV_WR_SEND, s.data.data(), 8, s.data_mr->lkey, 0, 23));
    wcs.clear();
    STEP(wait_wcs(s, wcs, 1));
    REQUIRE(wcs[0].wr_id == 23 && wcs[0].status == IBV_WC_WR_FLUSH_ERR);
    STEP(expect_no_async_event(s));  // our own move to ERR is no error of the QP
    rdma_destroy_qp(s.id);
    REQUIRE(ibv_dereg_mr(s.recv_mr) == 0 && ibv_dereg_mr(s.data_mr) == 0);
    REQUIRE(ibv_destroy_cq(s.cq) == 0);
    REQUIRE(ibv_destroy_comp_channel(s.channel) == 0);
    REQUIRE(ibv_dealloc_pd(s.pd) == 0);
    return {};
}

// A Write naming an STag the server never issued: the server answers with a
// TERMINATE. The server's QP, which refused the peer's request, goes to ERR with
// QP_ACCESS_ERR on its context's async_fd; the client's, ended by the peer's
// TERMINATE, with QP_FATAL. Each side's work is flushed before its event can be read,
// and the connection's end that follows raises nothing more.
std::string term_server() {
    Side s;
    rdma_cm_id* listener = nullptr;
    STEP(accept_one(s, listener));
    STEP(expect_qp_event(s, IBV_EVENT_QP_ACCESS_ERR));
    if (g_use_srq) {
        // Its receives are the SRQ's, which keeps them; the QP takes no more of them.
        STEP(expect_qp_event(s, IBV_EVENT_QP_LAST_WQE_REACHED));
        REQUIRE(poll_now(s).empty());
    } else {
        const std::vector<ibv_wc> wcs = poll_now(s);
        REQUIRE(wcs.size() == 2);
        // Both receives end in error (the Device may give the first the error
        // that ended the QP, the rest are flushed).
        REQUIRE(wcs[0].status != IBV_WC_SUCCESS && wcs[1].status != IBV_WC_SUCCESS);
        REQUIRE(wcs[0].wr_id + wcs[1].wr_id == 3);
        REQUIRE(wcs[0].status == IBV_WC_WR_FLUSH_ERR || wcs[1].status == IBV_WC_WR_FLUSH_ERR);
    }
    STEP(expect_disconnected(s));
    STEP(expect_no_async_event(s));
    ibv_qp_attr attr{};
    ibv_qp_init_attr init{};
    REQUIRE(ibv_query_qp(s.id->qp, &attr, IBV_QP_STATE, &init) == 0);
    REQUIRE(attr.qp_state == IBV_QPS_ERR);
    return {};
}

// The same on a server whose QP takes its receives from a shared receive queue: its error
// event, then IBV_EVENT_QP_LAST_WQE_REACHED.
std::string srq_term_server() {
    g_use_srq = true;
    return term_server();
}

std::string term_client() {
    Side s;
    STEP(connect_one(s, [] { return std::string(); }));
    STEP(post_send(s, IBV_WR_RDMA_WRITE, s.data.data(), 64, s.data_mr->lkey, IBV_SEND_SIGNALED, 30,
                   0x1000, 0xdeadbe00));
    STEP(expect_fatal(s));
    // The Write has completed (an iWARP Write may complete once sent, before the
    // peer checks it) and the two receives were flushed, before the event.
    const std::vector<ibv_wc> wcs = poll_now(s);
    REQUIRE(wcs.size() == 3);
    int writes = 0;
    int flushed = 0;
    for (const ibv_wc& w : wcs) {
        writes += w.wr_id == 30 && w.opcode == IBV_WC_RDMA_WRITE;
        flushed += (w.wr_id == 1 || w.wr_id == 2) && w.status == IBV_WC_WR_FLUSH_ERR;
    }
    REQUIRE(writes == 1 && flushed == 2);
    STEP(expect_disconnected(s));
    STEP(expect_no_async_event(s));
    return {};
}

// The server's CQ has room for one completion; the client's two Sends complete both of
// its receives. The second finds the CQ full: IBV_EVENT_CQ_ERR for that CQ, then
// QP_FATAL (the QP ended with a TERMINATE). ibv_poll_cq still returns the receive the CQ
// took, then fails (-EIO) instead of returning 0 for ever. The client's QP is ended by the
// TERMINATE: QP_FATAL there too.
std::string cq_server() {
    g_cq_entries = 1;
    Side s;
    rdma_cm_id* listener = nullptr;
    STEP(accept_one(s, listener));
    ibv_async_event ev{};
    REQUIRE(ibv_get_async_event(s.id->verbs, &ev) == 0);
    const bool cq_error = ev.event_type == IBV_EVENT_CQ_ERR && ev.element.cq == s.cq;
    const int first = ev.event_type;
    ibv_ack_async_event(&ev);
    if (!cq_error) return "the first async event is " + std::to_string(first) + ", not CQ_ERR";
    STEP(expect_fatal(s));
    ibv_wc wc[4];
    REQUIRE(ibv_poll_cq(s.cq, 4, wc) == 1);
    REQUIRE(wc[0].wr_id == 1 && wc[0].status == IBV_WC_SUCCESS && wc[0].opcode == IBV_WC_RECV);
    REQUIRE(ibv_poll_cq(s.cq, 4, wc) == -EIO);
    return {};
}

std::string cq_client() {
    Side s;
    STEP(connect_one(s, [] { return std::string(); }));
    for (std::uint64_t id = 50; id < 52; ++id)
        STEP(post_send(s, IBV_WR_SEND, s.data.data(), 16, s.data_mr->lkey, IBV_SEND_SIGNALED, id));
    STEP(expect_fatal(s));
    return {};
}

// The server gives the client the rkey of a region of another PD than its
// QP's: the client's Write to it is refused with a TERMINATE (STag not
// associated with the stream), the region keeps its bytes, and both QPs go
// to ERR: QP_ACCESS_ERR on the server, QP_FATAL on the client.
std::string pd_server() {
    Side s;
    rdma_cm_id* listener = nullptr;
    STEP(accept_one(s, listener));
    ibv_pd* other_pd = ibv_alloc_pd(s.id->verbs);
    REQUIRE(other_pd != nullptr && other_pd->handle != s.pd->handle);
    std::vector<char> other(kData, 'O');
    ibv_mr* other_mr = ibv_reg_mr(other_pd, other.data(), other.size(),
                                  IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    REQUIRE(other_mr != nullptr);
    Hello mine{reinterpret_cast<std::uintptr_t>(other.data()), other_mr->rkey, "other-pd"};
    STEP(post_send(s, IBV_WR_SEND, &mine, sizeof mine, 0, IBV_SEND_INLINE | IBV_SEND_SIGNALED, 40));
    STEP(expect_qp_event(s, IBV_EVENT_QP_ACCESS_ERR));
    REQUIRE(std::string(other.data(), other.size()) == std::string(kData, 'O'));
    const std::vector<ibv_wc> wcs = poll_now(s);  // the Send's and the two receives'
    REQUIRE(wcs.size() == 3);
    int sent = 0;
    int failed_recvs = 0;
    for (const ibv_wc& w : wcs) {
        sent += w.wr_id == 40 && w.status == IBV_WC_SUCCESS;
        failed_recvs += (w.wr_id == 1 || w.wr_id == 2) && w.status != IBV_WC_SUCCESS;
    }
    REQUIRE(sent == 1 && failed_recvs == 2);
    rdma_destroy_qp(s.id);
    REQUIRE(ibv_dereg_mr(other_mr) == 0 && ibv_dealloc_pd(other_pd) == 0);
    return {};
}

// Connects, and takes the server's Hello (`text`) into receive 1.
std::string connect_for_hello(Side& s, const char* text, Hello& peer, std::vector<ibv_wc>& wcs) {
    STEP(connect_one(s, [] { return std::string(); }));
    STEP(wait_wcs(s, wcs, 1));
    REQUIRE(wcs[0].wr_id == 1 && wcs[0].status == IBV_WC_SUCCESS);
    std::memcpy(&peer, s.recv_buf.data(), sizeof peer);
    REQUIRE(std::string(peer.text) == text);
    return {};
}

std::string pd_client() {
    Side s;
    Hello peer;
    std::vector<ibv_wc> wcs;
    STEP(connect_for_hello(s, "other-pd", peer, wcs));
    std::memset(s.data.data(), 'W', 64);
    STEP(post_send(s, IBV_WR_RDMA_WRITE, s.data.data(), 64, s.data_mr->lkey, IBV_SEND_SIGNALED, 41,
                   peer.addr, peer.rkey));
    STEP(expect_fatal(s));
    return {};
}

// IBV_WR_LOCAL_INV over the ABI: the server invalidates its own data region's rkey
// (IBV_WC_LOCAL_INV), then gives the client that key; the client's Write to it is
// refused with a TERMINATE, and the region keeps its bytes.
std::string linv_server() {
    Side s;
    rdma_cm_id* listener = nullptr;
    STEP(accept_one(s, listener));
    ibv_send_wr wr{};
    wr.wr_id = 80;
    wr.opcode = IBV_WR_LOCAL_INV;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.invalidate_rkey = s.data_mr->rkey;
    ibv_send_wr* bad = nullptr;
    REQUIRE(ibv_post_send(s.id->qp, &wr, &bad) == 0);
    std::vector<ibv_wc> wcs;
    STEP(wait_wcs(s, wcs, 1));
    REQUIRE(wcs[0].wr_id == 80 && wcs[0].opcode == IBV_WC_LOCAL_INV &&
            wcs[0].status == IBV_WC_SUCCESS);
    Hello mine{reinterpret_cast<std::uintptr_t>(s.data.data()), s.data_mr->rkey, "invalidate"};
    STEP(post_send(s, IBV_WR_SEND, &mine, sizeof mine, 0, IBV_SEND_INLINE | IBV_SEND_SIGNALED, 81));
    STEP(expect_qp_event(s, IBV_EVENT_QP_ACCESS_ERR));
    REQUIRE(s.data[0] == 'S');
    return {};
}

std::string linv_client() {
    Side s;
    Hello peer;
    std::vector<ibv_wc> wcs;
    STEP(connect_for_hello(s, "invalidate", peer, wcs));
    std::memset(s.data.data(), 'W', 64);
    STEP(post_send(s, IBV_WR_RDMA_WRITE, s.data.data(), 64, s.data_mr->lkey, IBV_SEND_SIGNALED, 82,
                   peer.addr, peer.rkey));
    STEP(expect_fatal(s));
    return {};
}

// The server's QP takes its receives from a shared receive queue of three, armed at 2:
// the client's two Sends complete the SRQ's first two receives on the QP, and the second
// leaves one, below the limit: IBV_EVENT_SRQ_LIMIT_REACHED for that SRQ. Then the server
// moves the QP to ERR: IBV_EVENT_QP_LAST_WQE_REACHED, and no error event (the end is
// the application's own).
std::string srq_server() {
    g_use_srq = true;
    Side s;
    rdma_cm_id* listener = nullptr;
    STEP(accept_one(s, listener));
    std::vector<ibv_wc> wcs;
    STEP(wait_wcs(s, wcs, 2));
    for (std::uint64_t i = 0; i < 2; ++i) {
        REQUIRE(wcs[i].wr_id == i + 1 && wcs[i].status == IBV_WC_SUCCESS);
        REQUIRE(wcs[i].opcode == IBV_WC_RECV && wcs[i].qp_num == s.id->qp->qp_num);
    }
    ibv_async_event ev{};
    REQUIRE(ibv_get_async_event(s.id->verbs, &ev) == 0);
    const bool limit = ev.event_type == IBV_EVENT_SRQ_LIMIT_REACHED && ev.element.srq == s.srq;
    ibv_ack_async_event(&ev);
    REQUIRE(limit);
    ibv_srq_attr a{};
    REQUIRE(ibv_query_srq(s.srq, &a) == 0 && a.srq_limit == 0);  // disarmed
    ibv_qp_attr to_err{};
    to_err.qp_state = IBV_QPS_ERR;
    REQUIRE(ibv_modify_qp(s.id->qp, &to_err, IBV_QP_STATE) == 0);
    STEP(expect_qp_event(s, IBV_EVENT_QP_LAST_WQE_REACHED));
    STEP(expect_no_async_event(s));
    return {};
}

std::string srq_client() {
    Side s;
    STEP(connect_one(s, [] { return std::string(); }));
    for (std::uint64_t id = 70; id < 72; ++id)
        STEP(post_send(s, IBV_WR_SEND, s.data.data(), 16, s.data_mr->lkey, IBV_SEND_SIGNALED, id));
    std::vector<ibv_wc> wcs;
    STEP(wait_wcs(s, wcs, 2));
    REQUIRE(wcs[0].status == IBV_WC_SUCCESS && wcs[1].status == IBV_WC_SUCCESS);
    STEP(expect_disconnected(s));  // the server's move to ERR: its connection ends first
    return {};
}

// Send with Invalidate over the ABI: the server gives the client its data region's rkey;
// the client's IBV_WR_SEND_WITH_INV names it, and the server's receive completes with
// IBV_WC_WITH_INV and that key. The client's Write to the key afterwards is refused with
// a TERMINATE: QP_ACCESS_ERR on the server, QP_FATAL on the client.
std::string inv_server() {
    Side s;
    rdma_cm_id* listener = nullptr;
    STEP(accept_one(s, listener));
    Hello mine{reinterpret_cast<std::uintptr_t>(s.data.data()), s.data_mr->rkey, "invalidate"};
    STEP(post_send(s, IBV_WR_SEND, &mine, sizeof mine, 0, IBV_SEND_INLINE | IBV_SEND_SIGNALED, 40));
    std::vector<ibv_wc> wcs;
    STEP(wait_wcs(s, wcs, 2));
    const ibv_wc* recv = wcs[0].opcode == IBV_WC_RECV ? &wcs[0] : &wcs[1];
    REQUIRE(recv->opcode == IBV_WC_RECV && recv->status == IBV_WC_SUCCESS && recv->wr_id == 1);
    REQUIRE((recv->wc_flags & IBV_WC_WITH_INV) != 0);
    REQUIRE(recv->invalidated_rkey == s.data_mr->rkey);
    STEP(expect_qp_event(s, IBV_EVENT_QP_ACCESS_ERR));
    REQUIRE(s.data[0] == 'S');  // the Write after the invalidation placed nothing
    return {};
}

std::string inv_client() {
    Side s;
    Hello peer;
    std::vector<ibv_wc> wcs;
    STEP(connect_for_hello(s, "invalidate", peer, wcs));
    STEP(send_with_invalidate(s, 60, peer.rkey));
    STEP(wait_wcs(s, wcs, 2));
    REQUIRE(wcs[1].wr_id == 60 && wcs[1].opcode == IBV_WC_SEND && wcs[1].status == IBV_WC_SUCCESS);
    std::memset(s.data.data(), 'W', 64);
    STEP(post_send(s, IBV_WR_RDMA_WRITE, s.data.data(), 64, s.data_mr->lkey, IBV_SEND_SIGNALED, 61,
                   peer.addr, peer.rkey));
    STEP(expect_fatal(s));
    return {};
}

// A type 2 memory window over the ABI. The server binds a window (IBV_WR_BIND_MW, the key
// stepped with ibv_inc_rkey) to [64, 320) of a region that gives no remote access itself,
// and gives the client the window's rkey. The client writes 64 bytes through it and reads
// 128 back into two SGEs (two Read Requests), then invalidates it with a Send with
// Invalidate. The server's receive completes with IBV_WC_WITH_INV and the window's key;
// the region kept its other bytes, and it can be deregistered once the window is gone.
std::string mw_server() {
    Side s;
    rdma_cm_id* listener = nullptr;
    STEP(accept_one(s, listener));
    errno = 0;
    REQUIRE(ibv_alloc_mw(s.pd, IBV_MW_TYPE_1) == nullptr && errno == EOPNOTSUPP);
    ibv_mw* mw = ibv_alloc_mw(s.pd, IBV_MW_TYPE_2);
    REQUIRE(mw != nullptr && mw->type == IBV_MW_TYPE_2 && mw->pd == s.pd);
    std::vector<char> region(kData, 'S');
    ibv_mr* mr =
        ibv_reg_mr(s.pd, region.data(), region.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
    REQUIRE(mr != nullptr);
    auto bind = [&](std::uint64_t wr_id, std::uint32_t rkey) -> std::string {
        ibv_send_wr wr{};
        wr.wr_id = wr_id;
        wr.opcode = IBV_WR_BIND_MW;
        wr.send_flags = IBV_SEND_SIGNALED;
        wr.bind_mw.mw = mw;
        wr.bind_mw.rkey = rkey;
        wr.bind_mw.bind_info.mr = mr;
        wr.bind_mw.bind_info.addr = reinterpret_cast<std::uintptr_t>(region.data()) + 64;
        wr.bind_mw.bind_info.length = 256;
        wr.bind_mw.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
        ibv_send_wr* bad = nullptr;
        REQUIRE(ibv_post_send(s.id->qp, &wr, &bad) == 0);
        REQUIRE(mw->rkey == rkey);
        std::vector<ibv_wc> wcs;
        STEP(wait_wcs(s, wcs, 1));
        REQUIRE(wcs[0].wr_id == wr_id && wcs[0].opcode == IBV_WC_BIND_MW &&
                wcs[0].status == IBV_WC_SUCCESS);
        return {};
    };
    const std::uint32_t key = ibv_inc_rkey(mw->rkey);
    REQUIRE(key != mw->rkey && (key >> 8) == (mw->rkey >> 8));
    STEP(bind(90, key));
    errno = 0;
    REQUIRE(ibv_dereg_mr(mr) == EBUSY);  // a window is bound to it
    Hello mine{reinterpret_cast<std::uintptr_t>(region.data()) + 64, key, "window"};
    STEP(post_send(s, IBV_WR_SEND, &mine, sizeof mine, 0, IBV_SEND_INLINE | IBV_SEND_SIGNALED, 91));
    std::vector<ibv_wc> wcs;
    STEP(wait_wcs(s, wcs, 2));
    const ibv_wc* recv = wcs[0].opcode == IBV_WC_RECV ? &wcs[0] : &wcs[1];
    REQUIRE(recv->opcode == IBV_WC_RECV && recv->status == IBV_WC_SUCCESS && recv->wr_id == 1);
    REQUIRE((recv->wc_flags & IBV_WC_WITH_INV) != 0 && recv->invalidated_rkey == key);
    std::string expect(kData, 'S');
    std::fill_n(expect.begin() + 64, 64, 'W');
    REQUIRE(std::string(region.data(), region.size()) == expect);
    // Invalidated by the peer, the window binds again under the next key.
    STEP(bind(92, ibv_inc_rkey(key)));
    REQUIRE(ibv_dealloc_mw(mw) == 0);
    REQUIRE(ibv_dereg_mr(mr) == 0);
    // Then the client may go.
    Hello done{0, 0, "done"};
    STEP(post_send(s, IBV_WR_SEND, &done, sizeof done, 0, IBV_SEND_INLINE | IBV_SEND_SIGNALED, 93));
    wcs.clear();
    STEP(wait_wcs(s, wcs, 1));
    REQUIRE(wcs[0].wr_id == 93 && wcs[0].status == IBV_WC_SUCCESS);
    STEP(expect_event(s, RDMA_CM_EVENT_DISCONNECTED));
    return {};
}

std::string mw_client() {
    Side s;
    Hello peer;
    std::vector<ibv_wc> wcs;
    STEP(connect_for_hello(s, "window", peer, wcs));
    std::memset(s.data.data(), 'W', 64);
    STEP(post_send(s, IBV_WR_RDMA_WRITE, s.data.data(), 64, s.data_mr->lkey, IBV_SEND_SIGNALED, 70,
                   peer.addr, peer.rkey));
    ibv_sge sinks[2] = {
        {reinterpret_cast<std::uintptr_t>(s.data.data()) + 2048, 64, s.data_mr->lkey},
        {reinterpret_cast<std::uintptr_t>(s.data.data()) + 1024, 64, s.data_mr->lkey}};
    ibv_send_wr read{};
    read.wr_id = 71;
    read.opcode = IBV_WR_RDMA_READ;
    read.sg_list = sinks;
    read.num_sge = 2;
    read.send_flags = IBV_SEND_SIGNALED;
    read.wr.rdma.remote_addr = peer.addr;
    read.wr.rdma.rkey = peer.rkey;
    ibv_send_wr* bad = nullptr;
    REQUIRE(ibv_post_send(s.id->qp, &read, &bad) == 0);
    STEP(wait_wcs(s, wcs, 3));
    REQUIRE(wcs[1].wr_id == 70 && wcs[1].status == IBV_WC_SUCCESS);
    REQUIRE(wcs[2].wr_id == 71 && wcs[2].status == IBV_WC_SUCCESS && wcs[2].byte_len == 128);
    REQUIRE(std::string(s.data.data() + 2048, 64) == std::string(64, 'W'));
    REQUIRE(std::string(s.data.data() + 1024, 64) == std::string(64, 'S'));
    STEP(send_with_invalidate(s, 72, peer.rkey));
    STEP(wait_wcs(s, wcs, 4));
    REQUIRE(wcs[3].wr_id == 72 && wcs[3].status == IBV_WC_SUCCESS);
    STEP(wait_wcs(s, wcs, 5));  // the server's "done", after its last bind
    REQUIRE(wcs[4].wr_id == 2 && wcs[4].status == IBV_WC_SUCCESS);
    REQUIRE(rdma_disconnect(s.id) == 0);
    STEP(expect_event(s, RDMA_CM_EVENT_DISCONNECTED));
    return {};
}

// A side runs in a fresh process (the test binary again, told its role by
// the environment) so that it starts a runtime of its own: a forked copy of
// a process would inherit the parent's runtime without its thread.
constexpr const char* kRoleVar = "IWCM_VERBS_TEST_ROLE";
constexpr const char* kFdsVar = "IWCM_VERBS_TEST_FDS";

[[noreturn]] void run_role(const char* role) {
    int verdict = -1;
    const char* fds = std::getenv(kFdsVar);
    if (fds == nullptr || std::sscanf(fds, "%d %d", &verdict, &g_ready_fd) != 2) ::_exit(2);
    const std::string r = role;
    std::string v = r == "server"            ? server()
                    : r == "client"          ? client()
                    : r == "term-server"     ? term_server()
                    : r == "srq-term-server" ? srq_term_server()
                    : r == "pd-server"       ? pd_server()
                    : r == "pd-client"       ? pd_client()
                    : r == "cq-server"       ? cq_server()
                    : r == "cq-client"       ? cq_client()
                    : r == "inv-server"      ? inv_server()
                    : r == "inv-client"      ? inv_client()
                    : r == "srq-server"      ? srq_server()
                    : r == "linv-server"     ? linv_server()
                    : r == "linv-client"     ? linv_client()
                    : r == "srq-client"      ? srq_client()
                    : r == "mw-server"       ? mw_server()
                    : r == "mw-client"       ? mw_client()
                                             : term_client();
    if (v.empty()) v = "ok";
    ssize_t w = ::write(verdict, v.data(), v.size());
    ::_exit(w == static_cast<ssize_t>(v.size()) ? 0 : 1);
}

[[maybe_unused]] const bool g_is_side = [] {
    if (const char* role = std::getenv(kRoleVar)) run_role(role);
    return false;
}();

// A side's process; its verdict comes back on a pipe, and `ready` (the
// server's) once it listens.
struct Child {
    pid_t pid = -1;
    int verdict = -1;
    int ready = -1;
};

Child start(const char* role, const char* tap, const char* ip) {
    int p[2];
    int r[2];
    if (::pipe2(p, O_CLOEXEC) != 0 || ::pipe2(r, O_CLOEXEC) != 0) return {};
    // The child's environment is built before the fork: this process's runtime
    // thread may hold an allocator lock at that moment, so the child only execs.
    std::vector<std::string> env = {
        std::string(kRoleVar) + "=" + role,
        std::string(kFdsVar) + "=" + std::to_string(p[1]) + " " + std::to_string(r[1]),
        std::string("IWCM_TAP=") + tap,
        std::string("IWCM_IP=") + ip,
    };
    for (char** e = environ; *e != nullptr; ++e) {
        const std::string_view v(*e);
        const bool replaced = v.starts_with("IWCM_TAP=") || v.starts_with("IWCM_IP=") ||
                              v.starts_with("IWCM_MAC=") || v.starts_with(kRoleVar) ||
                              v.starts_with(kFdsVar);
        if (!replaced) env.emplace_back(v);
    }
    std::vector<char*> envp;
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    pid_t pid = ::fork();
    if (pid == 0) {
        ::fcntl(p[1], F_SETFD, 0);
        ::fcntl(r[1], F_SETFD, 0);
        ::execle("/proc/self/exe", "abi_verbs_tests", static_cast<char*>(nullptr), envp.data());
        ::_exit(127);
    }
    ::close(p[1]);
    ::close(r[1]);
    return {pid, p[0], r[0]};
}

// Reads the child's verdict within the deadline; kills it otherwise.
std::string finish(Child& c, std::chrono::steady_clock::time_point deadline) {
    std::string v;
    for (;;) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
            deadline - std::chrono::steady_clock::now());
        pollfd pfd{c.verdict, POLLIN, 0};
        if (left.count() <= 0 || ::poll(&pfd, 1, static_cast<int>(left.count())) <= 0) {
            ::kill(c.pid, SIGKILL);
            v += " (timed out)";
            break;
        }
        char buf[512];
        ssize_t n = ::read(c.verdict, buf, sizeof buf);
        if (n <= 0) break;
        v.append(buf, static_cast<std::size_t>(n));
    }
    ::close(c.verdict);
    ::close(c.ready);
    int status = 0;
    ::waitpid(c.pid, &status, 0);
    return v;
}

// Runs a server role and a client role, each in its own process with its own
// TAP on a bridge in the test's namespace (NetnsEnvironment).
void run_pair(const char* server_role, const char* client_role) {
    // What an earlier pair in this namespace left goes first.
    ASSERT_EQ(run("for d in iwv1 iwv2 iwbr0; do ip link del $d 2>/dev/null; done; "
                  "ip link add iwbr0 type bridge && ip link set iwbr0 up && "
                  "for t in iwv1 iwv2; do ip tuntap add dev $t mode tap && "
                  "ip link set $t master iwbr0 up || exit 1; done"),
              0);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    Child srv = start(server_role, "iwv1", "10.77.1.1/24");
    ASSERT_GT(srv.pid, 0);
    pollfd pfd{srv.ready, POLLIN, 0};
    char listening = 0;
    if (::poll(&pfd, 1, 10000) != 1 || ::read(srv.ready, &listening, 1) != 1) {
        ADD_FAILURE() << "the server did not listen: " << finish(srv, deadline);
        return;
    }
    Child cli = start(client_role, "iwv2", "10.77.1.2/24");
    ASSERT_GT(cli.pid, 0);
    std::string c = finish(cli, deadline);
    std::string s = finish(srv, deadline);
    EXPECT_EQ(c, "ok") << "client";
    EXPECT_EQ(s, "ok") << "server";
}

TEST(ConnectedVerbs, SendWriteReadInlineNotifyAndFlush) {
    run_pair("server", "client");
}

TEST(ConnectedVerbs, RefusedWriteIsAccessErrorThereAndQpFatalHere) {
    run_pair("term-server", "term-client");
}

TEST(ConnectedVerbs, AQpOnASharedReceiveQueueEndsWithItsErrorThenLastWqeReached) {
    run_pair("srq-term-server", "term-client");
}

TEST(ConnectedVerbs, AnotherPdsRkeyIsRefusedByThePeer) {
    run_pair("pd-server", "pd-client");
}

TEST(ConnectedVerbs, CqOverflowIsCqErrorAndEndsTheQp) {
    run_pair("cq-server", "cq-client");
}

TEST(ConnectedVerbs, SendWithInvalidateInvalidatesThePeersKey) {
    run_pair("inv-server", "inv-client");
}

TEST(ConnectedVerbs, AQueuePairOnASharedReceiveQueue) {
    run_pair("srq-server", "srq-client");
}

TEST(ConnectedVerbs, LocalInvalidateRevokesOurKey) {
    run_pair("linv-server", "linv-client");
}

TEST(ConnectedVerbs, AMemoryWindowServesThePeerUntilItInvalidatesIt) {
    run_pair("mw-server", "mw-client");
}

}  // namespace
