// Two connection managers connect over an in-memory wire; each hands its
// connection to an rdma::Device (a queue pair); a RDMA Writes 100 000 bytes
// into b's registered buffer, then Sends b a 16-byte message. Only the
// installed headers <iwcm/...>. Read first: include/iwcm/verbs.hpp.
#include <cstdio>
#include <cstring>
#include <iwcm/verbs.hpp>
#include <vector>

using namespace iwcm;

struct Side {
    Core* core;
    rdma::Device* dev;
    rdma::CqHandle cq;
    rdma::QpHandle qp;
    bool up = false;
    std::vector<rdma::WorkCompletion> wcs;
};

int main() {
    CoreConfig ca, cb;
    ca.mac = *MacAddr::parse("02:00:00:00:00:0a");
    cb.mac = *MacAddr::parse("02:00:00:00:00:0b");
    Core a(ca), b(cb);
    rdma::Device da(a), db(b);
    const IpAddr ip_a = *IpAddr::parse("192.0.2.1"), ip_b = *IpAddr::parse("192.0.2.2");
    if (!a.add_address(ip_a) || !b.add_address(ip_b) || !b.listen({{ip_b, 4791}, 0})) return 1;
    Instant now = kInstantZero;
    ConnectParams p;
    p.local = {ip_a, 0};
    p.remote = {ip_b, 4791};
    p.remote_mac = cb.mac;
    if (!a.connect(now, p)) return 1;
    Side sides[2] = {{&a, &da, *da.create_cq(16), {}, false, {}},
                     {&b, &db, *db.create_cq(16), {}, false, {}}};
    // b's memory: a target for the Write and a receive buffer for the Send.
    std::vector<std::byte> target(100'000), inbox(16), data(100'000), note(16);
    for (std::size_t i = 0; i < data.size(); ++i) data[i] = std::byte(i * 7 % 251);
    std::memcpy(note.data(), "written: 100000", 16);
    auto mr_target = db.reg_mr(target, rdma::kAccessRemoteWrite);
    auto mr_inbox = db.reg_mr(inbox, rdma::kAccessLocalWrite);
    auto mr_data = da.reg_mr(data, 0);
    auto mr_note = da.reg_mr(note, 0);
    if (!mr_target || !mr_inbox || !mr_data || !mr_note) return 1;
    bool posted = false;
    for (int step = 0; step < 100000; ++step) {
        int moved = 0;
        for (int i = 0; i < 2; ++i)
            for (; auto frame = sides[i].core->poll_transmit(); ++moved)
                sides[1 - i].core->receive(now, *frame);
        for (Side& s : sides) {
            while (auto e = s.core->poll_event()) {
                ++moved;
                if (s.dev->on_event(now, *e)) continue;  // the queue pair's bytes
                if (e->type == EventType::kConnectRequest) (void)s.core->accept(now, e->conn, {});
                if (e->type == EventType::kEstablished) {
                    rdma::QpAttr attr;
                    attr.send_cq = attr.recv_cq = s.cq;
                    auto qp = s.dev->create_qp(now, e->conn, attr);
                    if (!qp) return 1;
                    s.qp = *qp;
                    s.up = true;
                }
            }
            rdma::WorkCompletion wc[4];
            for (std::size_t n; (n = s.dev->poll_cq(s.cq, wc)) > 0; ++moved)
                s.wcs.insert(s.wcs.end(), wc, wc + n);
        }
        if (sides[0].up && sides[1].up && !posted) {
            posted = true;
            rdma::Sge in{mr_inbox->addr, 16, mr_inbox->lkey};
            if (!db.post_recv(now, sides[1].qp, {1, std::span(&in, 1)})) return 1;
            rdma::Sge w{mr_data->addr, 100'000, mr_data->lkey};
            rdma::SendWr write;
            write.wr_id = 2;
            write.opcode = rdma::WrOpcode::kRdmaWrite;
            write.sg_list = std::span(&w, 1);
            write.remote_addr = mr_target->addr;  // b tells a these in a real program
            write.rkey = mr_target->rkey;
            rdma::Sge s{mr_note->addr, 16, mr_note->lkey};
            rdma::SendWr send;
            send.wr_id = 3;
            send.sg_list = std::span(&s, 1);
            if (!da.post_send(now, sides[0].qp, write) || !da.post_send(now, sides[0].qp, send))
                return 1;
            ++moved;
        }
        if (!sides[1].wcs.empty()) break;  // b received the Send: the Write came first
        if (moved > 0) continue;
        auto next = a.next_deadline(), nb = b.next_deadline();
        if (nb && (!next || *nb < *next)) next = nb;
        if (!next) break;
        now = std::max(now, *next);
        a.on_timer(now);
        b.on_timer(now);
    }
    bool ok = sides[1].wcs.size() == 1 && sides[1].wcs[0].status == rdma::WcStatus::kSuccess &&
              sides[1].wcs[0].byte_len == 16 && inbox == note && target == data &&
              sides[0].wcs.size() == 2;
    std::printf("a: %zu completions; b: %s, target %s\n", sides[0].wcs.size(),
                sides[1].wcs.empty() ? "no message" : reinterpret_cast<const char*>(inbox.data()),
                target == data ? "matches" : "differs");
    std::printf("%s\n", ok ? "ok: one RDMA Write and one Send, verified" : "failed");
    return ok ? 0 : 1;
}
