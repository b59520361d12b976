// Two connection managers connect over an in-memory wire, using only the
// installed headers <iwcm/...>. Read first: docs/library.md.
#include <cstdio>
#include <iwcm/core.hpp>
#include <string_view>

using namespace iwcm;

// Moves every queued frame of `from` into `to` (a perfect, instant wire).
static int carry(Instant now, Core& from, Core& to) {
    int n = 0;
    for (; auto frame = from.poll_transmit(); ++n) to.receive(now, *frame);
    return n;
}

int main() {
    CoreConfig ca, cb;
    ca.mac = *MacAddr::parse("02:00:00:00:00:0a");
    cb.mac = *MacAddr::parse("02:00:00:00:00:0b");
    Core a(ca), b(cb);
    const IpAddr ip_a = *IpAddr::parse("192.0.2.1"), ip_b = *IpAddr::parse("192.0.2.2");
    if (!a.add_address(ip_a) || !b.add_address(ip_b) || !b.listen({{ip_b, 4791}, 0})) return 1;

    Instant now = kInstantZero;
    ConnectParams p;
    p.local = {ip_a, 0};
    p.remote = {ip_b, 4791};
    p.remote_mac = cb.mac;
    constexpr std::string_view kHello = "hello";
    p.private_data = std::as_bytes(std::span(kHello));
    auto conn = a.connect(now, p);
    if (!conn) return 1;
    int established = 0, closed = 0;
    for (int step = 0; step < 1000 && a.live_nodes() + b.live_nodes() > 0; ++step) {
        int moved = carry(now, a, b) + carry(now, b, a);
        for (Core* core : {&a, &b}) {
            while (auto e = core->poll_event()) {
                const std::string_view type = to_string(e->type);
                std::printf("%s: %.*s, private data %zu bytes, status %d\n", core == &a ? "a" : "b",
                            int(type.size()), type.data(), e->private_data.size(), e->status);
                if (e->type == EventType::kConnectRequest) (void)core->accept(now, e->conn, {});
                if (e->type == EventType::kEstablished && ++established == 2)
                    (void)a.disconnect(now, *conn, DisconnectMode::kGraceful);
                closed += e->type == EventType::kDisconnected;
                ++moved;
            }
        }
        if (moved > 0) continue;
        // Nothing in flight: let virtual time run to the next timer (TIME_WAIT).
        auto next = a.next_deadline(), nb = b.next_deadline();
        if (nb && (!next || *nb < *next)) next = nb;
        if (next && *next > now) now = *next;
        a.on_timer(now);
        b.on_timer(now);
    }
    const bool ok = established == 2 && closed == 2 && a.live_nodes() == 0 && b.live_nodes() == 0;
    std::printf("%s\n", ok ? "ok: both sides connected and closed" : "failed");
    return ok ? 0 : 1;
}
