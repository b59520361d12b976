// The core's listeners and SYN-cookie keys: the listener table, each listener's backlog
// counts and the ages of its silent connections, and the keys of the two cookie periods in
// play.
//
// Read first: docs/design.md ("Backlog", "Listening again"), src/cm/syncookie.hpp (what a
// cookie is), include/iwcm/core.hpp (Core::listen, Core::destroy_listen).
//
// Handles. A listener lives in a slot of the table and is named by {slot, generation}. A
// slot's generation starts at 1 and grows by one when its listener is removed, so every
// handle of a removed listener is stale from then on (find() returns null) and a listener
// that takes the slot again has another generation. A slot is reused only when free and past
// its grace.
//
// Grace. A listener removed with a grace keeps its endpoint for that long: a SYN to it finds
// no listener but in_grace() says to leave it unanswered (CoreConfig::listener_grace), and its
// slot is not reused. A listener added on that endpoint ends the grace. Only a free slot has
// one.
//
// Backlog counts (docs/design.md "Backlog"), kept by the core's passive connections while
// their listener lives: `pending` counts the ones not yet accepted or rejected; of those,
// `half_open` the ones still in SYN_RCVD and `silent` the ones past the handshake with no MPA
// request (MPAREQ_WAIT), so half_open + silent <= pending, and queued() is the rest: the ones
// waiting for the application's answer. silent never passes silent_limit (at least 1). A
// listener is removed only once its connections have ended, so a free slot counts none.
//
// Silent order. The handles of the silent connections, oldest first, from silent_front on:
// each silent connection's handle once, among stale ones of connections that have spoken or
// ended since (a connection falls silent only once, so a handle is stale exactly when its
// node is gone or no longer silent; the caller says which, `still_silent`). The oldest is
// taken past the stale ones at the front, which are passed for good with it (it stays counted
// as silent until the caller ends it, before the counts are checked again); entering silence
// squeezes the stale ones out when they are as many as the live ones (plus 16), and the whole
// is emptied whenever no connection is silent. Each handle is pushed once and passed or
// squeezed out once: amortised O(1) per connection.
//
// SYN cookies. Time is cut into periods (CoreConfig::syn_cookie_period); a cookie is valid in
// the period that made it and the next one, and carries the parity of the period that made it
// (cookie_made_in). The key of the last period of each parity asked for is kept, so the two
// periods in play cost one key derivation each. A listener's last_cookie says whether
// an ACK for no connection may be one of its cookies returning (cookie_may_return).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "cm/syncookie.hpp"
#include "iwcm/address.hpp"
#include "iwcm/assert.hpp"
#include "iwcm/events.hpp"
#include "iwcm/time.hpp"

namespace iwcm::cm {

struct Listener {
    bool in_use = false;
    std::uint32_t generation = 1;
    // Removed: SYNs to `local` go unanswered until then (CoreConfig::listener_grace).
    std::optional<Instant> grace_until;
    Endpoint local;
    std::uint16_t vlan = kNoVlan;  // kNoVlan: the address's (every address's for a wildcard)
    std::uint8_t tos = 0;
    // docs/design.md "Backlog": half-open and answer-waiting connections together are held
    // to `backlog`, silent ones apart to `silent_limit`.
    std::uint32_t backlog = 0;
    std::uint32_t silent_limit = 0;  // CoreConfig::silent_limit, or the backlog
    std::uint32_t pending = 0;       // connections not yet accepted or rejected
    std::uint32_t half_open = 0;     // of those, the ones still in SYN_RCVD
    std::uint32_t silent = 0;        // of those, the ones in MPAREQ_WAIT (Node::silent)
    // The silent ones by age, oldest first from silent_front on (the header's "Silent order").
    std::vector<ConnHandle> silent_order;
    std::size_t silent_front = 0;
    // The last SYN cookie sent: ACKs for no node are checked as cookies only
    // while one sent may still be valid (two cookie periods).
    std::optional<Instant> last_cookie;
    // Past the MPA request, not yet answered by the application (listen(2)'s accept queue).
    std::uint32_t queued() const { return pending - half_open - silent; }
    // Whether an ACK for no connection may return a cookie this listener sent.
    bool cookie_may_return(Instant now, Duration period) const {
        return last_cookie && now - *last_cookie < 2 * period;
    }
};

class Listeners {
public:
    Listeners(const CookieKey& cookie_secret, const CookieKey& isn_secret)
        : cookie_secret_(cookie_secret), isn_secret_(isn_secret) {}

    // ---- the table ----
    // Slots, free ones included, by index (a handle's index).
    std::size_t size() const { return slots_.size(); }
    const Listener& operator[](std::size_t i) const { return slots_[i]; }
    Listener& operator[](std::size_t i) { return slots_[i]; }
    ListenHandle handle_of(const Listener& l) const {
        IWCM_ASSERT(&l >= slots_.data() && &l < slots_.data() + slots_.size() && l.in_use);
        return {static_cast<std::uint32_t>(&l - slots_.data()), l.generation};
    }
    // The listener `h` names, or null: no such slot, or its listener was removed (stale).
    const Listener* find(ListenHandle h) const {
        if (!h.valid() || h.index >= slots_.size()) return nullptr;
        const Listener& l = slots_[h.index];
        return (l.in_use && l.generation == h.generation) ? &l : nullptr;
    }
    Listener* find(ListenHandle h) {
        return const_cast<Listener*>(static_cast<const Listeners&>(*this).find(h));
    }
    // Whether `h` names a slot of the table (a handle find() refuses is then stale).
    bool has_slot(ListenHandle h) const { return h.valid() && h.index < slots_.size(); }
    // Whether a listener serves exactly this endpoint and VLAN.
    bool serves(const Endpoint& local, std::uint16_t vlan) const {
        for (const Listener& l : slots_)
            if (l.in_use && l.local == local && l.vlan == vlan) return true;
        return false;
    }
    // A new listener on an endpoint none serves, its counts zero; the endpoint's grace ends.
    ListenHandle add(Instant now, const Endpoint& local, std::uint16_t vlan, std::uint8_t tos,
                     std::uint32_t backlog, std::uint32_t silent_limit);
    // Removes the listener `h` names, whose connections have all ended (none is counted), with
    // a grace until `grace_until` if given: its handles go stale.
    void remove(ListenHandle h, std::optional<Instant> grace_until);
    // The listener that takes a SYN to `local` on `vlan` (the VLAN of its address): one on the
    // exact address wins over a wildcard one of its family (irdma_find_listener).
    Listener* match(const Endpoint& local, std::uint16_t vlan) {
        Listener* wildcard = nullptr;
        for (Listener& l : slots_) {
            if (!l.in_use) continue;
            const Covers c = covers(l, local, vlan);
            if (c == Covers::kExactly) return &l;
            if (c == Covers::kAsWildcard) wildcard = &l;
        }
        return wildcard;
    }
    // Whether a SYN to `local` on `vlan` finds a listener removed less than its grace ago.
    bool in_grace(Instant now, const Endpoint& local, std::uint16_t vlan) const;

    // ---- backlog counts ----
    // A new passive connection of `l`: pending and half-open. Its listener's handle.
    ListenHandle admit(Listener& l) {
        IWCM_ASSERT(l.in_use);
        ++l.pending;
        ++l.half_open;
        return {static_cast<std::uint32_t>(&l - slots_.data()), l.generation};
    }
    // A half-open connection completed its handshake or ended; its listener may be gone.
    void end_half_open(ListenHandle h) {
        if (Listener* l = find(h)) {
            IWCM_ASSERT(l->half_open > 0);
            --l->half_open;
        }
    }
    // A connection was answered or ended, past half-open and silence; its listener may be gone.
    void end_pending(ListenHandle h) {
        if (Listener* l = find(h)) {
            IWCM_ASSERT(l->pending > l->half_open + std::uint64_t{l->silent});
            --l->pending;
        }
    }
    // A pending connection of `l`, past its handshake, falls silent with handle `conn`, below
    // the limit (the caller sheds the oldest first at it).
    template <class StillSilent>
    void enter_silence(Listener& l, ConnHandle conn, StillSilent still_silent) {
        IWCM_ASSERT(l.in_use && l.silent < l.silent_limit);
        IWCM_ASSERT(l.pending > l.half_open + std::uint64_t{l.silent});
        std::vector<ConnHandle>& order = l.silent_order;
        if (order.size() >= 2 * std::size_t{l.silent} + 16) {
            std::size_t kept = 0;
            for (std::size_t i = l.silent_front; i < order.size(); ++i)
                if (still_silent(order[i])) order[kept++] = order[i];
            IWCM_ASSERT(kept == l.silent);
            order.resize(kept);
            l.silent_front = 0;
        }
        ++l.silent;
        order.push_back(conn);
    }
    // A silent connection spoke or ended; its listener may be gone.
    void end_silence(ListenHandle h) {
        if (Listener* l = find(h)) {
            IWCM_ASSERT(l->silent > 0);
            if (--l->silent == 0) {
                // Every handle left is stale: the usual case (each client silent for a round
                // trip at most) keeps the order empty.
                l->silent_order.clear();
                l->silent_front = 0;
            }
        }
    }
    // The handle of `l`'s connection silent longest, passed for good with the stale ones
    // before it; the caller ends it (end_silence).
    template <class StillSilent>
    ConnHandle take_oldest_silent(Listener& l, StillSilent still_silent) {
        IWCM_ASSERT(l.in_use && l.silent > 0);
        while (l.silent_front < l.silent_order.size()) {
            const ConnHandle h = l.silent_order[l.silent_front++];
            if (still_silent(h)) return h;
        }
        IWCM_ASSERT(false);  // l.silent counts live handles in the order
        return {};
    }

    // ---- SYN cookies ----
    // The key of `period`, derived once while it is one of the last two asked for.
    const CookieKey& cookie_key_of(std::uint64_t period) {
        const std::size_t i = period & 1;
        if (cookie_periods_[i] != period) {
            cookie_keys_[i] = cookie_key(cookie_secret_, isn_secret_, period);
            cookie_periods_[i] = period;
        }
        IWCM_ASSERT(cookie_periods_[i] == period && cookie_periods_[i ^ 1] != period);
        return cookie_keys_[i];
    }
    // The period that made `cookie` if it is valid now, in `period`: this one or the last, by
    // its parity (none before period 0). An older cookie has this period's parity or the last
    // one's, so its check under that period's key fails.
    static std::optional<std::uint64_t> cookie_made_in(std::uint64_t period, std::uint32_t cookie) {
        if (cookie_parity(cookie) == static_cast<bool>(period & 1)) return period;
        if (period == 0) return std::nullopt;
        return period - 1;
    }

    // Invariants (run by Core::Impl::check_node where invariants are checked): the header's
    // rules on generations, grace, counts and the silent order; each cached key under its
    // period's parity.
    void check() const;

private:
    // Whether `l`'s endpoint takes a SYN to `local` on `vlan`: its exact address, or its
    // wildcard of the same family. The frame's VLAN is already its address's; a listener
    // given a VLAN serves only that one.
    enum class Covers : std::uint8_t { kNo, kExactly, kAsWildcard };
    static Covers covers(const Listener& l, const Endpoint& local, std::uint16_t vlan) {
        if (l.local.port != local.port || (l.vlan != kNoVlan && l.vlan != vlan)) return Covers::kNo;
        if (l.local.addr == local.addr) return Covers::kExactly;
        if (l.local.addr.is_unspecified() && l.local.addr.family() == local.addr.family())
            return Covers::kAsWildcard;
        return Covers::kNo;
    }

    std::vector<Listener> slots_;
    CookieKey cookie_secret_;
    CookieKey isn_secret_;
    // The key of the last period of each parity asked for, by parity.
    std::array<std::optional<std::uint64_t>, 2> cookie_periods_;
    std::array<CookieKey, 2> cookie_keys_{};
};

}  // namespace iwcm::cm
