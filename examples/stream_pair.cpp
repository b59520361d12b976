// Two connection managers connect over an in-memory wire, hand the
// connection off as a byte stream, and each sends the other 200 000 bytes;
// only the installed headers <iwcm/...>. Read first: docs/library.md "Byte stream".
#include <cstdio>
#include <iwcm/core.hpp>
#include <vector>

using namespace iwcm;

static std::byte pattern(int side, std::size_t i) {
    return std::byte(side * 101 + i * 7 % 251);
}

// One side's application: writes its bytes as space allows, checks the other's.
struct App {
    int side = 0;
    ConnHandle conn;
    std::size_t written = 0, read = 0;
    bool up = false, closing = false, bad = false;
    int disconnected = 0;
};

int main() {
    constexpr std::size_t kBytes = 200'000;
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
    auto conn = a.connect(now, p);
    if (!conn) return 1;
    App apps[2] = {{0, *conn}, {1, {}}};
    Core* cores[2] = {&a, &b};
    std::vector<std::byte> chunk(16384);
    for (int step = 0; step < 100000 && a.live_nodes() + b.live_nodes() > 0; ++step) {
        int moved = 0;
        for (int i = 0; i < 2; ++i)
            for (; auto frame = cores[i]->poll_transmit(); ++moved)
                cores[1 - i]->receive(now, *frame);
        for (int i = 0; i < 2; ++i) {
            Core& core = *cores[i];
            App& app = apps[i];
            while (auto e = core.poll_event()) {
                ++moved;
                if (e->type == EventType::kConnectRequest) (void)core.accept(now, e->conn, {});
                if (e->type == EventType::kEstablished) {
                    app.conn = e->conn;
                    app.up = core.handoff(e->conn).has_value();  // HandoffMode::kStream
                }
                if (e->type == EventType::kDisconnected) ++app.disconnected;
            }
            if (!app.up) continue;
            // Read whatever arrived, in place (peek + consume: no copy).
            while (auto view = core.peek(app.conn)) {
                if (view->empty()) break;
                for (std::size_t k = 0; k < view->size(); ++k)
                    app.bad |= (*view)[k] != pattern(1 - app.side, app.read + k);
                app.read += view->size();
                (void)core.consume(now, app.conn, view->size());
                ++moved;
            }
            // Write what the send buffer takes.
            while (app.written < kBytes && !app.closing) {
                std::size_t n = std::min(chunk.size(), kBytes - app.written);
                for (std::size_t k = 0; k < n; ++k) chunk[k] = pattern(app.side, app.written + k);
                auto taken = core.send(now, app.conn, std::span(chunk).first(n));
                if (!taken || *taken == 0) break;
                app.written += *taken;
                ++moved;
            }
            // Everything sent and received: close gracefully (once).
            if (app.written == kBytes && app.read == kBytes && !app.closing &&
                app.disconnected == 0) {
                app.closing = true;
                (void)core.disconnect(now, app.conn, DisconnectMode::kGraceful);
            }
        }
        if (moved > 0) continue;
        // Nothing in flight: let virtual time run to the next timer.
        auto next = a.next_deadline(), nb = b.next_deadline();
        if (nb && (!next || *nb < *next)) next = nb;
        if (!next) break;
        now = std::max(now, *next);
        a.on_timer(now);
        b.on_timer(now);
    }
    bool ok = a.live_nodes() == 0 && b.live_nodes() == 0;
    for (const App& app : apps) {
        std::printf("%s: wrote %zu, read %zu, %s\n", app.side ? "b" : "a", app.written, app.read,
                    app.bad ? "bytes differ" : "bytes match");
        ok = ok && app.read == kBytes && app.written == kBytes && !app.bad && app.disconnected == 1;
    }
    std::printf("%s\n", ok ? "ok: 200000 bytes each way, verified, both sides closed" : "failed");
    return ok ? 0 : 1;
}
